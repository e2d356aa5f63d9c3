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
    "AMDINFER_EP_LIBRARIES",
    "AMDINFER_EP_PLUGINS",
)


@dataclass
class DoctorReport:
    """What ``amdinfer doctor`` found.

    Attributes:
        python, platform: interpreter and OS.
        packages: name -> version of the packages that matter (numpy, onnx, ORT distributions, migraphx).
        backends: every registered backend (plugins included) -> ``"ready"`` or its state, from its
            ``diagnose``/``probe`` hook; a ready backend that ``backend="auto"`` never tries (the NumPy
            reference) says so and how to use it.
        ort_distributions: installed ONNX Runtime distributions (more than one is a broken install).
        providers: provider -> ``"loads"`` or the reason it does not.
        ep_plugins: ONNX Runtime plugin EP packages (``onnxruntime-ep-*``) -> registered with their EPs and
            devices, placeholder, or failed with the error (or one line saying none was found).
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
    backends: dict[str, str] = field(default_factory=dict)
    ort_distributions: dict[str, str] = field(default_factory=dict)
    providers: dict[str, str] = field(default_factory=dict)
    ep_plugins: dict[str, str] = field(default_factory=dict)
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
        lines.append("Backends:")
        for name, state in self.backends.items():
            if name == "migraphx" and state == self.migraphx and len(state) > width:
                state = state.split("; ", 1)[0] + " (in full below)"
            lines += _wrap(f"  {name:<28} ", state, width)
        lines.append(
            "ONNX Runtime distributions: "
            + (", ".join(f"{k} {v}" for k, v in self.ort_distributions.items()) or "none")
        )
        for prov, state in self.providers.items():
            lines += _wrap(f"  {prov:<28} ", state, width)
        lines.append("MIGraphX (native Python module):")
        lines += _wrap("  ", self.migraphx, width)
        if self.ep_plugins:
            lines.append("ONNX Runtime plugin EPs:")
            for source, state in self.ep_plugins.items():
                lines += _wrap("  ", state if state.startswith(source.split(" (")[0]) else f"{source}: {state}", width)
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


def diagnose() -> DoctorReport:
    """Inspect this machine. Never raises for a missing piece: each finding goes into the report.

    Example:
        >>> isinstance(diagnose().ort_distributions, dict)
        True
    """
    from .engines.ort import installed_ort_distributions
    from .engines.registry import backend_entries, plugin_errors

    report = DoctorReport(python=sys.version.split()[0], platform=platform.platform())
    for dist in ("numpy", "onnx", "amdinfer-onnx", "migraphx"):
        v = _version(dist)
        if v:
            report.packages[dist] = v
    report.ort_distributions = installed_ort_distributions()
    for entry in backend_entries():
        found = entry.run_diagnose()
        report.backends[entry.name] = found.state
        if entry.auto_priority is None and found.state == "ready":
            # Ready, yet `amdinfer.load(m)` will not pick it: say so, or "ready" reads as "load works".
            report.backends[entry.name] = f"ready; not part of backend='auto' (pass backend={entry.name!r})"
        report.problems.extend(found.problems)
        if entry.name == "ort":
            report.providers = dict(found.details)
            report.ep_plugins = dict(found.plugins)
            if found.state.startswith("onnxruntime "):
                report.packages["onnxruntime (module)"] = found.state.split()[1]
        elif entry.name == "migraphx":
            report.migraphx = "importable" if found.state == "ready" else found.state
    for ep, why in plugin_errors().items():
        report.problems.append(f"backend plugin {ep} could not be loaded: {why}")

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
