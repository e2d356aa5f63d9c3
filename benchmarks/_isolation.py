"""Shared benchmark helpers: time runtimes apart from each other, and name the machine they ran on.

Why: on a machine with few cores, two runtimes timed call by call steal the CPUs from each other. ONNX
Runtime's intra-op threads busy-wait ("spin") after a call, and so do OpenBLAS's worker threads (NumPy's
matmul) for a while; the next call of the *other* runtime then shares the cores with idle spinners. On a
2-core machine that made ORT's ResNet-50 b1 time four times longer (issue 16). So every comparison here:

* times each runtime in **blocks** (a warm-up call, then ``block`` timed calls) with the others idle, after a
  pause that lets spinning pools fall asleep, alternating the blocks over ``rounds`` and rotating the order
  (:func:`isolated`); ORT sessions get ``session.intra_op.allow_spinning=0`` where the benchmark builds them
  (:func:`ort_session_options`), which costs ORT nothing measurable in a block and ends its spinning at once;
* reports the **contended** figure too where it matters (:func:`contended`: call by call, as before);
* records the machine (:func:`machine`): CPU model, the SIMD flags that decide which kernels run (AVX2,
  AVX-512, VNNI, BF16), the cores this process may use, NumPy's BLAS library, its kernel (``architecture``)
  and thread count from threadpoolctl, library versions, the BLAS environment variables
  (``OPENBLAS_CORETYPE`` forces a kernel, e.g. Haswell's AVX2 one on an AVX-512 CPU) and the load average
  before and after, because the numbers from a shared machine mean little without it.

Benchmarks that compare NumPy with ORT should run with the BLAS overrides unset for that command only, e.g.
``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/reference_speed.py``; the report says which
kernel ran either way.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BLAS_ENV",
    "Stats",
    "contended",
    "isolated",
    "loadavg",
    "machine",
    "machine_lines",
    "ort_session_options",
]

#: Environment variables that change which BLAS kernel runs or how many threads it uses.
BLAS_ENV = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_VERBOSE",
)
_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")


def loadavg() -> float:
    """The 1-minute load average (NaN where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _cpu() -> dict[str, Any]:
    model, flags, vendor = platform.processor() or platform.machine(), set(), "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                elif key == "vendor_id" and vendor == "unknown":
                    vendor = value.strip()
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "model": model,
        "vendor": vendor,
        "flags": [f for f in _FLAGS if f in flags],
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
    }


def _blas() -> list[dict[str, Any]]:
    try:
        import numpy  # noqa: F401  (load NumPy's BLAS so threadpoolctl sees it)
        from threadpoolctl import threadpool_info
    except ImportError:
        return [{"error": "threadpoolctl not installed: pip install threadpoolctl"}]
    keep = ("user_api", "internal_api", "version", "architecture", "num_threads", "threading_layer", "filepath")
    return [{k: lib.get(k) for k in keep} for lib in threadpool_info()]


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    # Heavy optional peers are listed only when the benchmark already imported them (importing torch here
    # would start its own thread pools).
    optional = [name for name in ("cv2", "torch", "migraphx") if name in sys.modules]
    for name in ("numpy", "onnx", "onnxruntime", "amdinfer", "threadpoolctl", *optional):
        try:
            module = __import__(name)
        except Exception:  # absent or broken: just not listed
            continue
        out[name] = getattr(module, "__version__", "?")
    return out


def machine() -> dict[str, Any]:
    """What the figures ran on: CPU, SIMD flags, cores, BLAS library/kernel/threads, versions, env, load."""
    return {
        "cpu": _cpu(),
        "blas": _blas(),
        "versions": _versions(),
        "env": {k: os.environ[k] for k in BLAS_ENV if k in os.environ},
        "loadavg": loadavg(),
        "platform": platform.platform(),
    }


def machine_lines(info: Mapping[str, Any] | None = None) -> list[str]:
    """The machine as Markdown bullet lines for a benchmark's report."""
    info = info if info is not None else machine()
    cpu = info["cpu"]
    lines = [
        f"- CPU: {cpu['model']} ({cpu.get('vendor', 'unknown')}), {cpu['usable_cpus']} usable of "
        f"{cpu['logical_cpus']} logical CPUs; "
        f"flags: {', '.join(cpu['flags']) or 'none of ' + ', '.join(_FLAGS)}",
    ]
    for lib in info["blas"]:
        if "error" in lib:
            lines.append(f"- BLAS: unknown ({lib['error']})")
            continue
        lines.append(
            f"- BLAS ({lib['user_api']}): {lib['internal_api']} {lib['version']}, kernel "
            f"{lib['architecture']}, {lib['num_threads']} threads ({lib['threading_layer']}), "
            f"{os.path.basename(str(lib['filepath']))}"
        )
    env = info["env"]
    lines.append(
        "- BLAS environment: " + (", ".join(f"{k}={v}" for k, v in env.items()) if env else "no overrides set")
    )
    lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    lines.append(f"- platform: {info['platform']}; load average (1 min) at start: {info['loadavg']:.2f}")
    return lines


def ort_session_options(threads: int | None = None, *, spinning: bool = False) -> Any:
    """``onnxruntime.SessionOptions`` for a benchmark: ``threads`` intra-op threads (None: ORT's default,
    one per core) and busy-waiting between calls off unless ``spinning`` (``session.intra_op.allow_spinning``,
    and the inter-op pool's too)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    flag = "1" if spinning else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", flag)
    so.add_session_config_entry("session.inter_op.allow_spinning", flag)
    return so


@dataclass
class Stats:
    """Per-call times of one runner: wall seconds and process CPU seconds, and the load seen while timing."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.wall) if self.wall else float("nan")

    @property
    def best(self) -> float:
        return min(self.wall) if self.wall else float("nan")

    @property
    def cpu_median(self) -> float:
        """Median process CPU seconds per call (all threads; spinning counts)."""
        return statistics.median(self.cpu) if self.cpu else float("nan")

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.wall) < 4:
            return (self.best, max(self.wall, default=float("nan")))
        q = statistics.quantiles(self.wall, n=4)
        return q[0], q[2]

    def cell(self, scale: float = 1e3, digits: int = 1) -> str:
        """``median (best-of)`` formatted for a table, in ms by default."""
        return f"{self.median * scale:.{digits}f} ({self.best * scale:.{digits}f})"


def _timed(fn: Callable[[], Any], stats: Stats) -> None:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    stats.wall.append(time.perf_counter() - t0)
    stats.cpu.append(time.process_time() - c0)


def isolated(
    runners: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 5,
    block: int = 5,
    warmup: int = 1,
    pause: float = 0.3,
) -> dict[str, Stats]:
    """Time each runner in blocks with the others idle.

    Each round gives every runner one block: ``pause`` seconds of sleep (spinning thread pools of the runner
    before go idle), ``warmup`` untimed calls, then ``block`` timed calls. The order rotates from round to
    round, so a slow patch of a shared machine does not always hit the same runner.
    """
    names = list(runners)
    stats = {name: Stats() for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            time.sleep(pause)
            for _ in range(warmup):
                runners[name]()
            stats[name].load.append(loadavg())
            for _ in range(block):
                _timed(runners[name], stats[name])
    return stats


def contended(runners: Mapping[str, Callable[[], Any]], *, repeats: int = 10, warmup: int = 1) -> dict[str, Stats]:
    """Time the runners call by call in turn (each call may share the cores with the previous runner's
    still-spinning threads): the figure an interleaved benchmark reports."""
    stats = {name: Stats() for name in runners}
    for _ in range(warmup):
        for fn in runners.values():
            fn()
    for _ in range(repeats):
        for name, fn in runners.items():
            stats[name].load.append(loadavg())
            _timed(fn, stats[name])
    return stats


def main() -> None:
    """``python benchmarks/_isolation.py``: print the machine block."""
    print("\n".join(machine_lines()))


if __name__ == "__main__":
    main()
