"""``amdinfer doctor``: what is installed, what loads, and why a GPU is (not) used.

Example:
    >>> from amdinfer.doctor import diagnose
    >>> report = diagnose()
    >>> "python" in report.to_dict()
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import os
import platform
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DoctorReport", "diagnose"]

_ENV_VARS = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCM_PATH",
    "LD_LIBRARY_PATH",
    "MIGRAPHX_PROBLEM_CACHE",
    "AMDINFER_CACHE_DIR",
)


@dataclass
class DoctorReport:
    """What ``amdinfer doctor`` found.

    Attributes:
        python, platform: interpreter and OS.
        packages: name -> version of the packages that matter (numpy, onnx, ORT distributions, migraphx).
        ort_distributions: installed ONNX Runtime distributions (more than one is a broken install).
        providers: provider -> ``"loads"`` or the reason it does not.
        migraphx: ``"importable"`` or why not.
        rocm: what of ROCm was found (paths, libraries, devices).
        env: relevant environment variables.
        problems: findings that explain why a GPU would not be used, each with a fix.

    Example:
        >>> DoctorReport(python="3.11", platform="linux").problems
        []
    """

    python: str
    platform: str
    packages: dict[str, str] = field(default_factory=dict)
    ort_distributions: dict[str, str] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)
    migraphx: str = ""
    rocm: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy."""
        return asdict(self)

    def format(self, width: int = 100) -> str:
        """Human-readable text, as the CLI prints it: long reasons wrapped to ``width`` columns, in full."""
        lines = [f"Python                 {self.python} ({self.platform})"]
        for name, version in self.packages.items():
            lines.append(f"{name:<22} {version}")
        lines.append("")
        lines.append(
            "ONNX Runtime distributions: "
            + (", ".join(f"{k} {v}" for k, v in self.ort_distributions.items()) or "none")
        )
        for prov, state in self.providers.items():
            lines += _wrap(f"  {prov:<28} ", state, width)
        lines.append("MIGraphX (native Python module):")
        lines += _wrap("  ", self.migraphx, width)
        lines.append("ROCm:")
        for k, v in self.rocm.items():
            lines += _wrap(f"  {k:<22} ", str(v), width)
        lines.append("Environment:" + ("" if self.env else " (none of the relevant variables is set)"))
        for k, v in self.env.items():
            lines.append(f"  {k}={v}")
        lines.append("")
        if self.problems:
            lines.append("Why a GPU would not be used:")
            for p in self.problems:
                lines += _wrap("  - ", p, width)
        else:
            lines.append("No problems found.")
        return "\n".join(lines)


def _wrap(prefix: str, text: str, width: int) -> list[str]:
    """``prefix`` + ``text`` wrapped to ``width``, continuation lines indented under the text."""
    import textwrap

    return textwrap.wrap(
        text, width=width, initial_indent=prefix, subsequent_indent=" " * len(prefix), break_on_hyphens=False
    ) or [prefix.rstrip()]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _can_load(lib: str) -> str:
    try:
        ctypes.CDLL(lib)
        return "loads"
    except OSError as exc:
        return f"cannot load ({exc})"


def _migraphx_state() -> str:
    from .engines.migraphx import probe

    why = probe()
    return "importable" if why is None else why


def diagnose() -> DoctorReport:
    """Inspect this machine. Never raises for a missing piece: each finding goes into the report.

    Example:
        >>> isinstance(diagnose().ort_distributions, dict)
        True
    """
    from .engines import ort as ort_engine

    report = DoctorReport(python=sys.version.split()[0], platform=platform.platform())
    for dist in ("numpy", "onnx", "amdinfer-onnx", "migraphx"):
        v = _version(dist)
        if v:
            report.packages[dist] = v
    report.ort_distributions = ort_engine.installed_ort_distributions()
    if len(report.ort_distributions) > 1:
        report.problems.append(
            f"{len(report.ort_distributions)} ONNX Runtime distributions are installed together "
            f"({', '.join(report.ort_distributions)}); they overwrite each other's files. Uninstall all of them, "
            "then install exactly one (e.g. pip install 'amdinfer-onnx[migraphx]')"
        )
    try:
        ort = ort_engine._import_ort()
    except ImportError as exc:
        report.problems.append(str(exc))
        ort = None
    if ort is not None:
        report.packages["onnxruntime (module)"] = ort.__version__
        available = ort.get_available_providers()
        for prov in ort_engine.PROVIDER_ORDER:
            if prov not in available:
                report.providers[prov] = "not in this build"
                continue
            cause = ort_engine.probe_provider(prov)
            report.providers[prov] = "loads" if cause is None else f"in the build but cannot load: {cause}"
            if cause is not None:
                report.problems.append(f"{prov}: {cause}. Fix: {ort_engine._FIX.get(prov, '')}")
        if not any(p in available for p in ort_engine.AMD_PROVIDERS):
            report.problems.append(
                "this onnxruntime build has no AMD provider: pip uninstall onnxruntime, then "
                "pip install 'amdinfer-onnx[migraphx]' (ROCm 6+) or 'amdinfer-onnx[rocm]' (ORT <= 1.22)"
            )
    report.migraphx = _migraphx_state()

    rocm_path = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    report.rocm["ROCm folder"] = str(rocm_path) if rocm_path.exists() else f"{rocm_path} (missing)"
    hip = ctypes.util.find_library("amdhip64")
    candidates = [hip] if hip else [str(rocm_path / "lib" / "libamdhip64.so")]
    report.rocm["libamdhip64"] = _can_load(candidates[0])
    report.rocm["/dev/kfd"] = (
        "present" if Path("/dev/kfd").exists() else "missing (no AMD GPU driver, or not passed to the container)"
    )
    report.rocm["rocminfo"] = shutil.which("rocminfo") or "not found"
    if not Path("/dev/kfd").exists():
        report.problems.append(
            "no /dev/kfd: the amdgpu kernel driver is not loaded or the device is not passed to this container "
            "(docker run --device=/dev/kfd --device=/dev/dri ...)"
        )
    for var in _ENV_VARS:
        if var in os.environ:
            report.env[var] = os.environ[var]
    hvd = os.environ.get("HIP_VISIBLE_DEVICES")
    if hvd is not None and hvd.strip() in ("", "-1"):
        report.problems.append(f"HIP_VISIBLE_DEVICES={hvd!r} hides every GPU")
    return report
