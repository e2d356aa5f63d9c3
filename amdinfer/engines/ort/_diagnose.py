"""The ORT backend's ``amdinfer doctor`` hook: installed distributions, and which providers really load.

Example:
    >>> d = diagnose()
    >>> d.details.get("CPUExecutionProvider") in (None, "loads")
    True
"""

from __future__ import annotations

from ..._install import pip_extra
from ...errors import BackendUnavailableError
from ..registry import Diagnosis
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
    return Diagnosis(f"onnxruntime {ort.__version__}", details=details, problems=problems)
