"""Sessions: `nox -s demo`, `nox -t tests` (the test suite plus the AMD-wheel checks), `nox -s lint`.

Each ONNX Runtime distribution gets its own virtualenv: they all install a module named
`onnxruntime` and overwrite each other's files.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["tests", "amd_wheels", "lint"]
nox.options.error_on_missing_interpreters = False

ROOT = Path(__file__).parent
# Outputs of the CPU build, compared by the AMD-wheel sessions ("results identical to the CPU-only build").
CPU_OUTPUTS = ROOT / ".nox" / "_cpu_outputs.npz"


@nox.session(tags=["tests"])
def tests(session: nox.Session) -> None:
    """The whole test suite on the CPU build of ONNX Runtime (what CI runs)."""
    session.install("-e", ".[cpu,test]")
    # Trained PP-OCR models for the quantization accuracy tests: only the wheel's .onnx files are used,
    # and its dependencies would pull opencv-python over opencv-python-headless.
    session.install("--no-deps", "rapidocr-onnxruntime==1.4.4")
    env = {"AMDINFER_CPU_OUTPUTS": str(CPU_OUTPUTS)}
    session.run("python", "-m", "amdinfer", "doctor")
    session.run("python", "tests/amd_wheel_outputs.py", "--write", str(CPU_OUTPUTS), env=env)
    # tests/serving and the doctests of amdinfer.serve/amdinfer.ray need KServe and Ray: the `serve` session.
    session.run("pytest", "-m", "not amd_wheel", "--ignore=tests/serving", *session.posargs, env=env)
    # Every public docstring carries an example; they must run.
    session.run(
        "pytest", "-q", "--doctest-modules", "amdinfer", "--ignore=amdinfer/serve", "--ignore=amdinfer/ray",
        "-p", "no:cacheprovider",
    )  # fmt: skip


@nox.session(tags=["tests"])
def serve(session: nox.Session) -> None:
    """`amdinfer serve` and amdinfer.ray against real clients: KServe, tritonclient, Ray (own venv; CPU, loopback)."""
    session.install("-e", ".[cpu,serve,ray]", "pytest>=7.4", "tritonclient[http,grpc]==2.73.0")
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_memory_monitor_refresh_ms": "0"}
    session.run("pytest", "tests/serving", *session.posargs, env=env)
    session.run("pytest", "-q", "--doctest-modules", "amdinfer/serve", "amdinfer/ray", "-p", "no:cacheprovider")


@nox.session(tags=["tests"])
@nox.parametrize("wheel", ["migraphx", "rocm"])
def amd_wheels(session: nox.Session, wheel: str) -> None:
    """onnxruntime-migraphx / onnxruntime-rocm on a machine without ROCm: clear errors, no silent fallback."""
    session.install("-e", f".[{wheel},test]")
    env = {"AMDINFER_CPU_OUTPUTS": str(CPU_OUTPUTS), "AMDINFER_EXPECT_WHEEL": f"onnxruntime-{wheel}"}
    session.run("python", "-m", "amdinfer", "doctor")
    session.run("pytest", "-m", "amd_wheel", "tests/test_amd_wheels.py", *session.posargs, env=env)


@nox.session
def demo(session: nox.Session) -> None:
    """Build ResNet-50 offline, run it through amdinfer.load on the default backend, print top-5."""
    session.install("-e", ".[cpu]")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check)."""
    session.install("ruff==0.17.6")  # pinned: new rules in a new release must not turn CI red
    paths = ["amdinfer", "tests", "benchmarks", "examples", "noxfile.py"]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)


@nox.session
def examples(session: nox.Session) -> None:
    """Run every example script offline."""
    session.install("-e", ".[cpu,test]")
    for script in sorted((ROOT / "examples").glob("*.py")):
        session.run("python", str(script), env={"MPLBACKEND": "Agg", **dict(os.environ)})
