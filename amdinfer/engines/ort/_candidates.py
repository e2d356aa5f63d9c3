"""Which providers an ORT engine tries: the requested ones checked against the build, or the auto order.

Example:
    >>> import onnxruntime as ort
    >>> from amdinfer.engines.base import EngineInfo
    >>> auto_candidates(ort, ["CPUExecutionProvider"], EngineInfo(backend="ort"))[-1]
    ('CPUExecutionProvider', {})
"""

from __future__ import annotations

from typing import Any

from ...errors import BackendUnavailableError
from ..base import EngineInfo
from ._plugins import auto_provider_order, plugin_failure, plugin_missing, registered_plugins, unusable_plugins
from ._providers import CPU_EP, PROVIDERS, fix_for, installed_ort_distributions

__all__ = ["Candidates", "auto_candidates", "check_available"]

Candidates = list[tuple[str, dict[str, str]]]


def check_available(ort: Any, candidates: Candidates, available: list[str]) -> None:
    """Raise :class:`~amdinfer.BackendUnavailableError` for a requested provider this build lacks.

    Example:
        >>> import onnxruntime as ort
        >>> check_available(ort, [("NoSuchExecutionProvider", {})], ["CPUExecutionProvider"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.BackendUnavailableError: provider 'NoSuchExecutionProvider' is not in this onnxruntime build ...
    """
    for name, _ in candidates:
        if name not in available:
            failed = plugin_failure(name) or plugin_missing(name)
            if failed is not None:
                raise BackendUnavailableError(failed, backend=name)
            dists = installed_ort_distributions()
            unnamed = [p.line() for p in registered_plugins() if p.state == "no device" and not p.ep_names]
            also = f"; plugin libraries registered without a device here (their EPs unknown): {unnamed}" * bool(unnamed)
            raise BackendUnavailableError(
                f"provider {name!r} is not in this onnxruntime build (onnxruntime {ort.__version__}, "
                f"installed: {dists or 'none'}; it offers {available}{also}). Fix: {fix_for(name)}",
                backend=name,
            )


def auto_candidates(ort: Any, available: list[str], info: EngineInfo) -> Candidates:
    """The providers of the auto order that this build has; why each other one is passed over goes to
    ``info.skipped``."""
    out: Candidates = []
    for name, why in unusable_plugins():
        info.skipped.setdefault(name, why)
    for name in auto_provider_order(available):
        if name in available:
            out.append((name, {}))
        elif name != CPU_EP and name not in info.skipped:
            info.skipped[name] = (
                f"not in this onnxruntime build ({', '.join(installed_ort_distributions()) or 'onnxruntime'} "
                f"{ort.__version__}); needs {PROVIDERS[name].distribution}"
            )
    return out
