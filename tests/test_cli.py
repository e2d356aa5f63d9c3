"""The `amdinfer` command line and `amdinfer.doctor`."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from amdinfer import doctor
from amdinfer.cli import main
from amdinfer.engines import ort as ort_engine
from amdinfer.engines.ort import _diagnose as ort_diagnose
from amdinfer.testing import models


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(models.tiny_cnn(), path)
    return path


def test_doctor_json(capsys) -> None:
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["providers"]["CPUExecutionProvider"] == "loads"
    assert report["packages"]["onnx"] == onnx.__version__


def test_doctor_flags_two_ort_distributions(monkeypatch) -> None:
    two = {"onnxruntime": "1.32.0", "onnxruntime-migraphx": "1.27.1"}
    monkeypatch.setattr(ort_engine, "installed_ort_distributions", lambda: two)
    monkeypatch.setattr(ort_diagnose, "installed_ort_distributions", lambda: two)
    report = doctor.diagnose()
    assert any("2 ONNX Runtime distributions are installed together" in p for p in report.problems)
    assert "Uninstall all of them" in report.format()


def test_doctor_flags_hidden_gpus(monkeypatch) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "-1")
    report = doctor.diagnose()
    assert report.env["HIP_VISIBLE_DEVICES"] == "-1"
    assert any("hides every GPU" in p for p in report.problems)


def test_run_prints_outputs(model_path, capsys) -> None:
    assert main(["run", str(model_path), "--providers", "cpu", "--batch", "3"]) == 0
    out = capsys.readouterr().out
    assert "providers ['CPUExecutionProvider']" in out
    assert "logits: float32 (3, 10)" in out


def test_run_with_given_inputs_and_save(model_path, tmp_path, capsys) -> None:
    x = models.random_inputs(models.tiny_cnn(), batch=2, seed=4)
    np.savez(tmp_path / "in.npz", **x)
    assert (
        main(
            [
                "run",
                str(model_path),
                "--backend",
                "ort",
                "--inputs",
                str(tmp_path / "in.npz"),
                "--save",
                str(tmp_path / "out.npz"),
            ]
        )
        == 0
    )
    import onnxruntime as ort

    want = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_array_equal(saved["logits"], want)


def test_inspect(model_path, capsys) -> None:
    assert main(["inspect", str(model_path)]) == 0
    out = capsys.readouterr().out
    assert "input    input: float32 ('N', 3, 32, 32)" in out and "Conv" in out


def test_bench_json(model_path, capsys) -> None:
    assert main(["bench", str(model_path), "--providers", "cpu", "--iterations", "3", "--warmup", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["iterations"] == 3 and result["p50_ms"] > 0 and result["providers"] == ["CPUExecutionProvider"]


def test_errors_exit_1_with_message(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage")
    assert main(["run", str(bad)]) == 1
    assert "ModelError" in capsys.readouterr().err


def test_missing_provider_exits_1(model_path, capsys) -> None:
    if "ROCMExecutionProvider" in __import__("onnxruntime").get_available_providers():
        pytest.skip("this build has the ROCm EP")
    assert main(["run", str(model_path), "--providers", "rocm"]) == 1
    assert "BackendUnavailableError" in capsys.readouterr().err


def test_no_command_prints_help(capsys) -> None:
    assert main([]) == 2
    assert "doctor" in capsys.readouterr().out
