"""The ORT backend's ``amdinfer doctor`` hook: installed distributions, which providers really load, and the
plugin EPs (``onnxruntime-ep-*`` packages, ``$AMDINFER_EP_LIBRARIES``) with their devices or why they fail.

Example:
    >>> d = diagnose()
    >>> d.details.get("CPUExecutionProvider") in (None, "loads")
    True
    >>> len(d.plugins) >= 1  # the plugins found, or one line saying none was
    True
"""

from __future__ import annotations

from typing import Any

from ..._support._install import pip_extra
from ...errors import BackendUnavailableError
from ..registry import Diagnosis
from ._plugins import LIBRARIES_ENV, PLUGIN_PREFIX, register_plugins
from ._providers import AMD_PROVIDERS, PROVIDER_ORDER, fix_for, import_ort, installed_ort_distributions, probe_provider

__all__ = ["diagnose"]


def diagnose() -> Diagnosis:
    """What of ONNX Runtime is installed and loads here (never raises for a missing piece)."""
    problems: list[str] = []
    dists = installed_ort_distributions()
    if len(dists) > 1:
        problems.append(
            f"{len(dists)} ONNX Runtime distributions are installed together "
            f"({', '.join(dists)}); they overwrite each other's files. Uninstall all of them, "
            f"then install exactly one (e.g. {pip_extra('migraphx')})"
        )
    try:
        ort = import_ort()
    except BackendUnavailableError as exc:
        return Diagnosis(str(exc), problems=[*problems, str(exc)])
    details: dict[str, str] = {}
    plugins = _plugins(ort, problems)
    available = ort.get_available_providers()
    for prov in PROVIDER_ORDER:
        if prov not in available:
            details[prov] = "not in this build"
            continue
        cause = probe_provider(prov)
        details[prov] = "loads" if cause is None else f"in the build but cannot load: {cause}"
        if cause is not None:
            problems.append(f"{prov}: {cause}. Fix: {fix_for(prov)}")
    if not any(p in available for p in AMD_PROVIDERS):
        problems.append(
            "this onnxruntime build has no AMD provider: pip uninstall onnxruntime, then "
            f"{pip_extra('migraphx')} for ROCm 6+, or the [rocm] extra instead (ORT <= 1.22)"
        )
    return Diagnosis(f"onnxruntime {ort.__version__}", details=details, problems=problems, plugins=plugins)


def _plugins(ort: Any, problems: list[str]) -> dict[str, str]:
    """Plugin EP source -> one line (registered with its devices, placeholder, failed with the error)."""
    if not hasattr(ort, "register_execution_provider_library"):
        return {"plugin EPs": f"onnxruntime {ort.__version__} has no plugin EP API (it came in 1.23)"}
    found = register_plugins(ort)
    if not found:
        return {"plugin EPs": f"none found (no {PLUGIN_PREFIX}* package installed, ${LIBRARIES_ENV} not set)"}
    for p in found:
        if p.state == "failed":
            problems.append(f"plugin EP {p.source} cannot be used: {p.error}")
        elif p.state == "no device":
            listed = "; ".join(p.listed) or "no device"
            problems.append(
                f"plugin EP {p.source} offers no device on this machine (ONNX Runtime lists only: {listed}). "
                "Fix: run it on hardware the plugin serves (`amdinfer.load(..., providers=[...])` says which)"
            )
    return {p.source + (f" ({p.library})" if p.source.startswith("$") else ""): p.line() for p in found}
