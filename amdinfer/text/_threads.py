"""Thread settings of the OCR cascade on the CPU: whether ONNX Runtime's intra-op workers may spin.

The cascade holds three sessions (det, cls, rec), each with its own intra-op pool of ``threads - 1`` workers
beside the calling thread. ONNX Runtime's workers busy-wait (spin) between parallel sections and for a while
after a run; with spinning on, the pools of the sessions not running, OpenCV's pool and the host stages
(contours, crops, resizes) take cores from the session that is running whenever the workers outnumber the
cores. Measured on 2 cores (docs/text.md): the cascade's time 0.5-0.6x of the same cascade with spinning.

Example:
    >>> pools_spin(engines=3, threads=2, cores=2)  # 3 workers and the caller on 2 cores
    False
    >>> pools_spin(engines=3, threads=4, cores=16)  # 9 workers and the caller on 16 cores
    True
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Any

from ..engines.base import Engine

__all__ = ["cascade_load_options", "cpu_cores", "on_ort_cpu", "pools_spin"]

#: ONNX Runtime providers that run on the host's cores (Azure runs nothing locally)
_HOST_PROVIDERS = frozenset({"cpuexecutionprovider", "cpu", "azureexecutionprovider"})


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask, e.g. under ``taskset``; else ``os.cpu_count()``).

    Example:
        >>> cpu_cores() >= 1
        True
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def pools_spin(engines: int, threads: int | None, cores: int) -> bool | None:
    """Whether ``engines`` ONNX Runtime sessions of ``threads`` intra-op threads each should spin on ``cores``.

    ``True`` when every session's ``threads - 1`` workers and the calling thread each have a core of their own
    (``engines * (threads - 1) + 1 <= cores``), ``False`` when they outnumber the cores, ``None`` (leave ONNX
    Runtime's default) when the sessions have no workers (``threads == 1``, or one core). ``threads=None`` is ONNX
    Runtime's default: one thread per core.

    Example:
        >>> pools_spin(3, None, 16), pools_spin(1, 2, 2), pools_spin(3, 1, 2)
        (False, True, None)
    """
    n = cores if threads is None or threads < 1 else threads
    if n <= 1 or cores <= 1:
        return None
    return engines * (n - 1) + 1 <= cores


def _provider_name(p: Any) -> str:
    return str(p[0] if isinstance(p, (tuple, list)) else p).lower()


def on_ort_cpu(backend: Any, load_options: dict[str, Any], ort_providers: Sequence[str] | None = None) -> bool:
    """Whether :func:`amdinfer.load` with ``backend`` and ``load_options`` gives ONNX Runtime on the host's cores.

    ``providers=`` given: all of them host providers. Else ``backend="ort"``: the installed ONNX Runtime has
    no device provider (``ort_providers``, default ``onnxruntime.get_available_providers()``); ``"auto"``: the
    same, and MIGraphX's own module is not installed (it comes first). Any other backend: ``False``.

    Example:
        >>> on_ort_cpu("auto", {"providers": ["CPUExecutionProvider"]})
        True
        >>> on_ort_cpu("ort", {}, ort_providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
        False
    """
    if not isinstance(backend, str) or backend not in ("auto", "ort"):
        return False
    providers = load_options.get("providers")
    if providers is not None:
        names = [providers] if isinstance(providers, str) else list(providers)
        return bool(names) and all(_provider_name(p) in _HOST_PROVIDERS for p in names)
    if ort_providers is None:
        if importlib.util.find_spec("onnxruntime") is None:
            return False
        import onnxruntime

        ort_providers = onnxruntime.get_available_providers()
    if any(_provider_name(p) not in _HOST_PROVIDERS for p in ort_providers):
        return False
    return backend == "ort" or importlib.util.find_spec("migraphx") is None


def cascade_load_options(
    backend: Any, load_options: dict[str, Any], models: Sequence[Any], cores: int | None = None
) -> dict[str, Any]:
    """``load_options`` for the cascade's engines, with ``spin_wait=False`` added where :func:`pools_spin` says
    the sessions' workers outnumber the cores on ONNX Runtime's CPU EP (:func:`on_ort_cpu`).

    Left as given when ``spin_wait`` is set, when a model is already an :class:`~amdinfer.Engine` (options do not
    apply to it), or off the CPU. ``models``: the cascade's models (``None`` for a missing classifier).

    Example:
        >>> cascade_load_options("ort", {"providers": ["cpu"], "threads": 2}, ["det", "rec", None], cores=2)
        {'providers': ['cpu'], 'threads': 2, 'spin_wait': False}
        >>> cascade_load_options("ort", {"providers": ["cpu"], "spin_wait": True}, ["det", "rec"], cores=2)
        {'providers': ['cpu'], 'spin_wait': True}
    """
    present = [m for m in models if m is not None]
    if "spin_wait" in load_options or any(isinstance(m, Engine) for m in present):
        return load_options
    if not on_ort_cpu(backend, load_options):
        return load_options
    threads = load_options.get("threads")
    spin = pools_spin(len(present), threads if isinstance(threads, int) else None, cores or cpu_cores())
    return load_options if spin is None or spin else {**load_options, "spin_wait": False}
