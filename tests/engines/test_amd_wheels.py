"""onnxruntime-migraphx / onnxruntime-rocm installed on a machine without ROCm.

Both wheels list their AMD provider as available but cannot load its library. Plain ONNX Runtime
then runs on the CPU and only prints a warning; amdinfer must raise when the provider was asked
for, and under auto run on the CPU with the reason recorded. Run by `nox -s amd_wheels`.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import numpy as np
import pytest

import amdinfer
from amdinfer.engines import ort as ort_engine

pytestmark = pytest.mark.amd_wheel

AMD_DISTS = {"onnxruntime-migraphx": "MIGraphXExecutionProvider", "onnxruntime-rocm": "ROCMExecutionProvider"}
installed = {d: v for d, v in ort_engine.installed_ort_distributions().items()}
wheel = next((d for d in installed if d in AMD_DISTS), None)
expected = os.environ.get("AMDINFER_EXPECT_WHEEL")

if expected and wheel != expected:
    pytest.fail(
        f"AMDINFER_EXPECT_WHEEL={expected} but installed ONNX Runtime distributions are {installed}", pytrace=False
    )
if wheel is None:
    pytest.skip(
        f"no AMD ONNX Runtime wheel installed (have {installed}); run `nox -s amd_wheels`", allow_module_level=True
    )

import onnxruntime as ort  # noqa: E402
from amd_wheel_outputs import CASES, feeds_for  # noqa: E402

PROVIDER = AMD_DISTS[wheel]


@pytest.fixture(scope="module")
def provider_cause() -> str:
    cause = ort_engine.probe_provider(PROVIDER)
    if cause is None:
        pytest.skip(f"{PROVIDER} loads on this machine (ROCm present): these tests are for machines without it")
    return cause


def test_only_one_ort_distribution_installed() -> None:
    assert list(installed) == [wheel], installed


def test_provider_is_listed_but_cannot_load(provider_cause: str) -> None:
    assert PROVIDER in ort.get_available_providers()
    assert "cannot open shared object file" in provider_cause


def test_plain_onnxruntime_falls_back_silently(provider_cause: str) -> None:
    """What amdinfer protects against: ORT itself quietly runs on the CPU."""
    model = CASES["tiny_cnn"]()
    model.ir_version = min(model.ir_version, 10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=[PROVIDER, "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_explicit_request_is_a_clear_error(provider_cause: str) -> None:
    with pytest.raises(amdinfer.BackendUnavailableError) as info:
        amdinfer.load(CASES["tiny_cnn"](), providers=[PROVIDER])
    msg = str(info.value)
    assert PROVIDER in msg and provider_cause in msg and "Fix:" in msg
    assert "does not fall back" in msg
    assert info.value.backend == PROVIDER and info.value.cause == provider_cause


def test_explicit_short_name_too(provider_cause: str) -> None:
    short = "migraphx" if PROVIDER.startswith("MIGraphX") else "rocm"
    with pytest.raises(amdinfer.BackendUnavailableError, match="cannot open shared object file"):
        amdinfer.load(CASES["tiny_cnn"](), backend="ort", providers=[short, "cpu"])


def test_auto_runs_on_cpu_and_says_why(provider_cause: str) -> None:
    engine = amdinfer.load(CASES["tiny_cnn"]())
    assert engine.info.backend == "ort"
    assert engine.info.providers == ["CPUExecutionProvider"]
    assert engine.info.device == "cpu"
    assert provider_cause in engine.info.skipped[PROVIDER]


def test_ir_version_lowered_for_older_runtime(provider_cause: str) -> None:
    model = CASES["tiny_cnn"]()
    assert model.ir_version == 14  # what onnx 1.23 writes
    engine = amdinfer.load(model, backend="ort")
    assert engine.model.ir_version < 14
    assert any("lowered" in note for note in engine.info.notes), engine.info.notes


@pytest.mark.parametrize("name", list(CASES))
def test_results_match_the_cpu_only_build(provider_cause: str, name: str) -> None:
    path = os.environ.get("AMDINFER_CPU_OUTPUTS")
    if not path or not Path(path).exists():
        pytest.fail("AMDINFER_CPU_OUTPUTS not written: run `nox -s tests` first (it writes the CPU build's outputs)")
    with np.load(path) as data:
        want = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith(f"{name}/")}
    engine = amdinfer.load(CASES[name]())
    got = engine.run(feeds_for(name))
    assert set(got) == set(want)
    for k in want:
        # Different ONNX Runtime versions (1.27/1.22 vs the CPU build) may reorder float sums.
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_doctor_explains(provider_cause: str) -> None:
    from amdinfer.doctor import diagnose

    report = diagnose()
    assert report.providers[PROVIDER].startswith("in the build but cannot load")
    assert any(PROVIDER in p and provider_cause in p for p in report.problems)
    assert importlib.metadata.version(wheel) == installed[wheel]
