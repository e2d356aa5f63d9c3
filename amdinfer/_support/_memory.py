"""Memory figures for ``amdinfer bench``: the process's host RSS, and the device peak where a backend reports it.

Host RSS comes from ``/proc/self/status`` on Linux: ``VmRSS`` (resident now) and ``VmHWM`` (the high-water
mark: the largest RSS since the process started, imports and model loading included). Elsewhere the peak
comes from ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (kilobytes on Linux, bytes on macOS) and the current
RSS is not known. The device peak is never estimated: no backend's Python API reports the peak of a running
engine's allocator (ONNX Runtime's ``OrtAllocator::GetStats`` is C/C++ only, MIGraphX has none), so
:func:`device_peak` says so instead of giving a number.

Example:
    >>> m = host_memory()
    >>> m.peak_bytes is None or m.peak_bytes > 0
    True
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["HostMemory", "device_peak", "host_memory"]

_STATUS = "/proc/self/status"


@dataclass(frozen=True)
class HostMemory:
    """One reading of the process's resident memory.

    Attributes:
        rss_bytes: resident set size now (``None`` where the platform does not say).
        peak_bytes: the largest RSS since the process started (``None`` where the platform does not say).
        source: where the numbers came from.

    Example:
        >>> HostMemory(100 * 2**20, 150 * 2**20, "test").format()
        'host RSS 100.0 MiB, peak 150.0 MiB (test)'
    """

    rss_bytes: int | None
    peak_bytes: int | None
    source: str

    def format(self) -> str:
        """One human line."""
        return f"host RSS {mib(self.rss_bytes)}, peak {mib(self.peak_bytes)} ({self.source})"


def mib(n: int | None) -> str:
    """Bytes as MiB with one decimal, ``?`` when unknown.

    Example:
        >>> mib(3 * 2**20), mib(None)
        ('3.0 MiB', '?')
    """
    return "?" if n is None else f"{n / 2**20:.1f} MiB"


def _from_proc(text: str) -> tuple[int | None, int | None]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key in ("VmRSS", "VmHWM") and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            values[key] = int(parts[0]) * 1024
    return values.get("VmRSS"), values.get("VmHWM")


def host_memory() -> HostMemory:
    """The process's RSS now and its peak so far.

    Example:
        >>> host_memory().source in ("/proc/self/status VmRSS/VmHWM", "getrusage ru_maxrss", "not available")
        True
    """
    try:
        with open(_STATUS, encoding="ascii", errors="replace") as f:
            rss, peak = _from_proc(f.read())
        if rss is not None and peak is not None:
            return HostMemory(rss, peak, "/proc/self/status VmRSS/VmHWM")
    except OSError:
        pass  # not Linux (or /proc not mounted): getrusage below
    try:
        import resource
    except ImportError:  # Windows
        return HostMemory(None, None, "not available")
    maxrss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return HostMemory(None, maxrss if sys.platform == "darwin" else maxrss * 1024, "getrusage ru_maxrss")


def device_peak(info: Any) -> tuple[int | None, str]:
    """``(peak bytes, note)`` of the engine's device memory; ``None`` and the reason when it is not reported.

    No backend reports one today: the note names the backend and providers, and says where memory of an
    engine on the host is counted instead.

    Example:
        >>> from amdinfer import EngineInfo
        >>> device_peak(EngineInfo(backend="ort", device="cpu", providers=["CPUExecutionProvider"]))
        (None, 'not reported by ort (CPUExecutionProvider); it runs on the host, so its memory is in the host RSS')
    """
    providers = ", ".join(info.providers)
    who = f"{info.backend} ({providers})" if providers else f"{info.backend} on {info.device}"
    if info.device == "cpu":
        return None, f"not reported by {who}; it runs on the host, so its memory is in the host RSS"
    return None, f"not reported by {who}: its Python API exposes no allocator statistics of a running engine"
