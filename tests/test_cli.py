"""The `amdinfer` command line and `amdinfer.doctor`."""

from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer import doctor
from amdinfer.cli import main
from amdinfer.engines import ort as ort_engine
from amdinfer.engines.ort import _diagnose as ort_diagnose
from amdinfer.testing import models


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> None:
    """Int8 calibration and ORT optimized models go to the compiled-model cache: keep it in the test's folder."""
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "amdinfer-cache"))


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
    assert "providers CPUExecutionProvider" in out
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
    with np.load(tmp_path / "out.npz") as saved:  # the golden-file format: verify --golden reads it
        np.testing.assert_array_equal(saved["input/input"], x["input"])
        np.testing.assert_array_equal(saved["output/logits"], want)


def test_inspect(model_path, capsys) -> None:
    assert main(["inspect", str(model_path)]) == 0
    out = capsys.readouterr().out
    assert "input      input: float32 (N, 3, 32, 32)" in out and "Conv 2" in out


def test_bench_json(model_path, capsys) -> None:
    assert main(["bench", str(model_path), "--providers", "cpu", "--iterations", "3", "--warmup", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (row,) = result["results"]
    assert row["iterations"] == 3 and row["p50_ms"] > 0 and result["providers"] == ["CPUExecutionProvider"]


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


# ---------------------------------------------------------------------------------------------- one convention
@pytest.fixture
def encoder_path(tmp_path):
    path = tmp_path / "encoder.onnx"
    onnx.save(models.transformer_encoder(), path)
    return path


def test_usage_errors_exit_2_on_one_line(model_path, capsys) -> None:
    assert main(["run", str(model_path), "--batch", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "amdinfer run: UsageError: argument --batch: got 0, expected an int >= 1 (see amdinfer run --help)"
    assert main(["bench", str(model_path), "--batch", "1,x"]) == 2
    assert main(["run"]) == 2  # the model is required


def test_help_exits_0(capsys) -> None:
    assert main(["bench", "--help"]) == 0
    assert "--input-shapes" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "{model}", "--inputs", "{tmp}/missing.npz"],
            "InputError: --inputs '{tmp}/missing.npz': file not found",
        ),
        (["run", "{model}", "--inputs", "{tmp}"], "is a directory"),
        (["bench", "{model}", "--plot", "{tmp}"], "OptionError: --plot: got '{tmp}', a folder; expected a file path"),
        (["quantize", "{model}", "--precision", "int8", "--out", "{tmp}/q.onnx"], "give calibration data"),
        (
            ["quantize", "{model}", "--precision", "int8", "--calibration", "{tmp}", "--out", "{tmp}/q.onnx"],
            "no images",
        ),
        (["verify", "{model}", "--golden", "{model}"], "InputError: --golden '{model}': not an .npz file"),
        (
            ["run", "{model}", "--save", "{tmp}/nodir/out.npz"],
            "OptionError: --save: got '{tmp}/nodir/out.npz', but folder '{tmp}/nodir' does not exist",
        ),
        (["run", "{model}", "--input-shapes", "images:1x3x32x32"], "expected names among ['input']"),
        (["run", "{model}", "--input-shapes", "input:1x3x32"], "expected rank 4"),
        (["run", "{model}", "--input-shapes", "input:1x4x32x32"], "axis 1 got 4, expected 3"),
        (["run", "{model}", "--precision", "int8"], "give calibration data with --calibration"),
        (["inspect", "{tmp}/nothing.onnx"], "ModelError"),
        (["run", "{fixed}", "--batch", "8"], "--batch 8: the model's batch axis is fixed (x (1, 4))"),
        (["bench", "{model}", "--providers", "cpu", "--io", "device"], "device IO needs an ONNX Runtime GPU provider"),
    ],
)
def test_user_errors_are_one_line_exit_1(model_path, tmp_path, capsys, argv, message) -> None:
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fixed.onnx")
    argv = [a.format(model=model_path, tmp=tmp_path, fixed=tmp_path / "fixed.onnx") for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"amdinfer {argv[0]}: ")
    assert message.format(tmp=tmp_path, model=model_path) in err[-1]
    assert not any("Traceback" in line for line in err)


def test_input_shapes_both_spellings() -> None:
    from amdinfer.cli._common import parse_input_shapes

    assert parse_input_shapes("a:1x3x8x8,b:2x5") == {"a": (1, 3, 8, 8), "b": (2, 5)}
    assert parse_input_shapes("a:[1,3,8,8],b:[2, 5]") == {"a": (1, 3, 8, 8), "b": (2, 5)}
    for bad in ("a", "a:1xx3", "a:0x3", "a:1,a:2", ":1x2", "a:[1,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_input_shapes(bad)


def test_dynamic_axis_from_input_shapes_matches_onnxruntime(encoder_path, tmp_path, capsys) -> None:
    assert main(["run", str(encoder_path), "--providers", "cpu", "-q"]) == 1
    assert "--input-shapes input:1xSx64 (a number for S)" in capsys.readouterr().err
    out = tmp_path / "out.npz"
    argv = ["run", str(encoder_path), "--providers", "cpu", "--input-shapes", "input:Nx7x64", "--batch", "2"]
    assert main([*argv, "--seed", "3", "--save", str(out), "-q"]) == 0
    assert "input float32 (2, 7, 64)" in capsys.readouterr().out
    import onnxruntime as ort

    x = np.random.default_rng(3).random((2, 7, 64), dtype=np.float32)  # the documented random inputs
    want = ort.InferenceSession(str(encoder_path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["output/output"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor"],
        ["inspect", "{model}"],
        ["run", "{model}", "--providers", "cpu"],
        ["bench", "{model}", "--providers", "cpu", "--iterations", "2", "--warmup", "0"],
        ["profile", "{model}", "--providers", "cpu", "--runs", "1"],
        ["verify", "{model}", "--providers", "cpu"],
        ["compile", "{model}", "--providers", "cpu", "--cache-dir", "{tmp}/cache"],
        ["quantize", "{model}", "--precision", "fp16", "--out", "{tmp}/m16.onnx"],
        ["cache", "list"],
    ],
    ids=lambda a: a[0],
)
def test_json_everywhere_one_schema(model_path, tmp_path, capsys, argv) -> None:
    argv = [a.format(model=model_path, tmp=tmp_path) for a in argv]
    assert main([*argv, "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == argv[0] and doc["amdinfer"] == __import__("amdinfer").__version__
    if argv[0] in ("run", "bench", "profile", "verify", "compile"):
        assert doc["backend"] == "ort" and doc["providers"] == ["CPUExecutionProvider"]


# ---------------------------------------------------------------------------------------------- bench
def test_bench_result_statistics_by_hand() -> None:
    from amdinfer.bench import BenchResult

    r = BenchResult([1.0, 2.0, 3.0, 4.0], batch=2, wall_seconds=0.02)
    assert r.mean_ms == 2.5 and r.min_ms == 1.0 and r.max_ms == 4.0 and r.p50_ms == 2.5
    assert r.std_ms == pytest.approx(np.sqrt(1.25))
    assert r.p90_ms == pytest.approx(3.7)  # linear interpolation: 3 + 0.7 * (4 - 3)
    assert r.items == 8 and r.throughput == pytest.approx(400.0)  # 8 items / 0.02 s, not batch / p50
    assert any("spread" in w for w in r.warnings)  # std/mean = 45%
    assert not any("spread" in w for w in BenchResult([2.0, 2.1, 1.9], batch=1).warnings)


class _CountingEngine:
    """Counts calls; no timing involved in what the tests assert."""

    def __init__(self) -> None:
        import threading

        self.calls = 0
        self.info = __import__("amdinfer").EngineInfo(backend="fake")
        self._lock = threading.Lock()

    def run(self, feeds):
        with self._lock:
            self.calls += 1
        return {}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_benchmark_counts_calls(concurrency) -> None:
    from amdinfer.bench import benchmark

    engine = _CountingEngine()
    r = benchmark(engine, {"x": np.zeros((4, 2))}, iterations=7, warmup=2, concurrency=concurrency)
    assert engine.calls == 1 + 2 + 7  # first run, warm-up, timed
    assert len(r.latencies_ms) == 7 and r.batch == 4 and r.items == 28 and r.concurrency == concurrency
    assert r.first_run_ms is not None and r.wall_s > 0


def test_benchmark_duration_makes_at_least_one_call() -> None:
    from amdinfer.bench import benchmark

    r = benchmark(_CountingEngine(), {"x": np.zeros((1,))}, duration=1e-6, warmup=0)
    assert len(r.latencies_ms) >= 1


def test_benchmark_rejects_bad_counts() -> None:
    from amdinfer.bench import benchmark

    for kw in ({"iterations": 0}, {"warmup": -1}, {"duration": 0}, {"concurrency": 0}):
        with pytest.raises(amdinfer.OptionError):
            benchmark(_CountingEngine(), {}, **kw)


def test_bench_sweep_text_json_and_plot(model_path, tmp_path, capsys) -> None:
    plot = tmp_path / "bench.png"
    argv = ["bench", str(model_path), "--providers", "cpu", "--batch", "1,4", "--iterations", "3", "--warmup", "0"]
    assert main([*argv, "--plot", str(plot), "-q"]) == 0
    text = capsys.readouterr().out
    assert "backend   ort on cpu; providers CPUExecutionProvider; precision fp32" in text
    assert "versions  amdinfer" in text and "onnx " in text
    assert "items/s" in text and "p95" in text and "first" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv, "--concurrency", "2", "--pool", "2", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["batch"] for r in doc["results"]] == [1, 4]
    assert all(r["iterations"] == 3 and r["items"] == 3 * r["batch"] and r["concurrency"] == 2 for r in doc["results"])
    for r in doc["results"]:
        assert r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["throughput_per_s"] == pytest.approx(r["items"] / r["wall_s"])


def test_bench_dynamic_axis_with_input_shapes(encoder_path, capsys) -> None:
    argv = ["bench", str(encoder_path), "--providers", "cpu", "--input-shapes", "input:Nx16x64", "--batch", "1,2"]
    assert main([*argv, "--iterations", "2", "--warmup", "0", "--json", "-q"]) == 0
    assert [r["batch"] for r in json.loads(capsys.readouterr().out)["results"]] == [1, 2]


# ---------------------------------------------------------------------------------------------- profile / verify
def test_profile_text_has_per_node_rows_and_trace(model_path, tmp_path, capsys) -> None:
    trace = tmp_path / "trace.json"
    argv = ["profile", str(model_path), "--providers", "cpu", "--runs", "2", "--trace", str(trace), "-q"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "slowest nodes" in out and "time per operator type" in out
    events = json.loads(trace.read_text())
    nodes = {e["name"][: -len("_kernel_time")] for e in events if e.get("cat") == "Node"}
    assert nodes and all(any(line.split() and line.split()[0] == n for line in out.splitlines()) for n in nodes)
    assert all({"ph", "ts", "name"} <= set(e) for e in events)


def test_verify_names_both_engines_and_golden_round_trip(model_path, tmp_path, capsys) -> None:
    golden = tmp_path / "golden.npz"
    assert main(["verify", str(model_path), "--providers", "cpu", "--save-golden", str(golden), "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verify    ort (cpu, CPUExecutionProvider, fp32) against reference (cpu, fp64)")
    assert "result    PASSED" in out
    with np.load(golden) as g:
        x, y = g["input/input"], g["output/logits"]
    ref = __import__("onnx.reference", fromlist=["x"]).ReferenceEvaluator(models.tiny_cnn())
    np.testing.assert_allclose(y, ref.run(None, {"input": x})[0], rtol=1e-5, atol=1e-6)
    assert main(["verify", str(model_path), "--backend", "reference", "--golden", str(golden), "-q"]) == 0
    assert "against golden file" in capsys.readouterr().out
    bad = tmp_path / "bad.npz"
    np.savez(bad, **{"input/input": x, "output/logits": y + 1.0})
    assert main(["verify", str(model_path), "--providers", "cpu", "--golden", str(bad), "-q"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_verify_per_layer_top_rows(model_path, capsys) -> None:
    argv = ["verify", str(model_path), "--backend", "reference", "--precision", "fp32", "--per-layer", "--top", "2"]
    assert main([*argv, "-q"]) == 0
    out = capsys.readouterr().out
    assert "largest rms errors" in out and "more: --top N shows more" in out and "see .layers" not in out
    table = out[out.index("per-layer") :].splitlines()[2:4]
    assert len(table) == 2 and all(line.split()[0].isdigit() for line in table)


# ---------------------------------------------------------------------------------------------- compile / quantize
def test_compile_writes_the_ort_optimized_model(model_path, tmp_path, capsys) -> None:
    cache, out = tmp_path / "cache", tmp_path / "opt.onnx"
    argv = ["compile", str(model_path), "--providers", "cpu", "--cache-dir", str(cache), "--json", "-q"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["cache_hit"] is False and first["kind"] == "ORT optimized model"
    assert first["artefact"].startswith(str(cache)) and first["artefact"].endswith(".onnx")
    assert main([*argv, "--out", str(out)]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["cache_hit"] is True and second["artefact"] == first["artefact"]
    import onnxruntime as ort

    x = models.random_inputs(models.tiny_cnn(), batch=2, seed=1)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(None, x)[0]
    want = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert main(["cache", "list", "--cache-dir", str(cache)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["key", "backend", "precision"] and table[1].split()[1] == "ort"
    assert "CacheEntry(" not in "\n".join(table) and table[-1].startswith("1 entries")


def test_compile_reference_is_an_error(model_path, capsys) -> None:
    assert main(["compile", str(model_path), "--backend", "reference"]) == 1
    assert "nothing to compile" in capsys.readouterr().err


def test_quantize_int8_from_npz_and_fp16(model_path, tmp_path, capsys, quiet_root_logger) -> None:
    calib = tmp_path / "calib.npz"
    np.savez(calib, input=np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32))
    q8, plot = tmp_path / "q8.onnx", tmp_path / "err.png"
    argv = ["quantize", str(model_path), "--precision", "int8", "--calibration", str(calib), "--out", str(q8)]
    assert main([*argv, "--plot", str(plot), "--json", "-q"]) == 3  # 2 held-out images: too few to judge
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration_samples"] == 6 and "last 2 of --calibration" in doc["eval_data"]
    assert doc["report"]["samples"] == 2 and doc["passed"] is False and doc["verdict"] == "NOT JUDGED"
    assert "QuantizeLinear" in {n.op_type for n in onnx.load(q8).graph.node}
    assert plot.read_bytes()[:4] == b"\x89PNG"
    q16 = tmp_path / "q16.onnx"
    assert main(["quantize", str(model_path), "--precision", "fp16", "--out", str(q16), "-q"]) == 0
    assert "QuantizationReport(fp16 vs float" in capsys.readouterr().out
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in onnx.load(q16).graph.initializer)


def test_quantize_dynamic_int8_needs_no_calibration(tmp_path, capsys, quiet_root_logger) -> None:
    from amdinfer.testing.models import transformer_encoder

    path, out = tmp_path / "encoder.onnx", tmp_path / "encoder.int8.onnx"
    onnx.save(transformer_encoder(), path)
    argv = [
        "quantize",
        str(path),
        "--precision",
        "int8",
        "--dynamic",
        "--out",
        str(out),
        "--input-shapes",
        "input:2x8x64",
    ]
    assert main([*argv, "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["calibration_samples"] == 0 and "seeded random inputs" in doc["eval_data"]
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert ops & {
        "DynamicQuantizeMatMul",
        "MatMulInteger",
        "DynamicQuantizeLinear",
    }  # activations quantized at run time
    assert "QuantizeLinear" not in ops  # no calibrated (static) activation ranges
    for extra, message in (
        (["--precision", "fp16"], "--dynamic: only used with --precision int8, got --precision fp16"),
        (["--method", "entropy"], "--method: not an option of --dynamic"),
        (["--keep-last", "1"], "--keep-last: not an option of --dynamic"),
    ):
        args = [a for a in argv if a not in ("--precision", "int8")] if extra[0] == "--precision" else argv
        assert main([*args, *extra]) == 1
        assert message in capsys.readouterr().err


def test_int8_run_with_an_image_folder(model_path, tmp_path, capsys, quiet_root_logger) -> None:
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    argv = ["run", str(model_path), "--providers", "cpu", "--precision", "int8", "--calibration", str(folder), "-q"]
    assert main(argv) == 0
    assert "precision int8" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- inspect
def _conv_matmul_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w")
    m = numpy_helper.from_array(np.ones((8 * 6 * 6, 5), np.float32), "m")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [w, m, shape],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_inspect_counts_and_macs_by_hand(tmp_path, capsys) -> None:
    path = tmp_path / "cm.onnx"
    onnx.save(_conv_matmul_model(), path)
    assert main(["inspect", str(path), "--batch", "2", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"] == 4 and doc["file_bytes"] == path.stat().st_size
    assert doc["parameters"] == 8 * 3 * 3 * 3 + 288 * 5 + 2
    assert doc["op_histogram"] == {"Conv": 1, "MatMul": 1, "Relu": 1, "Reshape": 1}
    assert doc["dynamic"]["x"]["axes"] == {"0": "N"}
    conv = 2 * 8 * 6 * 6 * (3 * 3 * 3)  # batch x out channels x 6x6 outputs x (in channels x 3x3)
    matmul = 2 * 5 * 288
    assert doc["estimate"]["macs"] == conv + matmul
    assert doc["estimate"]["flops"] == 2 * (conv + matmul) + 2 * 8 * 6 * 6  # + one op per Relu output
    assert doc["coverage"]["migraphx"]["supported"] is True


def test_inspect_resnet50_macs_match_the_published_figure(tmp_path, capsys) -> None:
    # torchvision's ResNet-50 v1.5 model card: 4.09 GFLOPS (multiply-accumulates) at 224x224.
    path = tmp_path / "r50.onnx"
    onnx.save(models.resnet50(), path)
    assert main(["inspect", str(path), "--no-coverage", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate"]["macs"] / 1e9 == pytest.approx(4.09, abs=0.01)
    # torchvision: 25,557,032 trainable parameters; the ONNX graph also stores each BatchNorm's running mean and
    # variance (26,560 channels over the 53 BatchNorms, buffers in torchvision) as initializers.
    assert doc["parameters"] == 25_557_032 + 2 * 26_560


def test_inspect_flags_ops_migraphx_cannot_parse(tmp_path, capsys) -> None:
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "migraphx   no parser for ['Det']" in out and "f729a52" in out


# ---------------------------------------------------------------------------------------------- messages
def test_misspelt_option_under_auto_suggests_and_names_the_records(model_path) -> None:
    with pytest.raises(amdinfer.OptionError) as exc:
        amdinfer.load(model_path, thread=2)
    msg = str(exc.value)
    assert "unknown option(s) ['thread'] (did you mean 'threads'?)" in msg
    assert "'device'" not in msg  # valid options are not reported as rejected, nor listed all
    assert "amdinfer.engines.ort.OrtOptions" in msg and "docs/engines.md" in msg  # where the list is


def test_engine_info_repr_is_multiline_with_short_reasons() -> None:
    long = "cannot import migraphx. " + "x" * 500
    info = amdinfer.EngineInfo(backend="ort", providers=["CPUExecutionProvider"], skipped={"migraphx": long})
    text = repr(info)
    assert text.startswith("EngineInfo(\n  backend    ort\n") and text.endswith("\n)")
    assert "  skipped    migraphx: cannot import migraphx\n" in text and "xxx" not in text
    assert info.skipped["migraphx"] == long  # the full reason stays
    assert (
        max(len(v) for v in amdinfer.EngineInfo(backend="x", skipped={"a": "y" * 300}).short_skipped().values()) == 100
    )


def test_run_prints_short_skip_reasons(model_path, capsys, monkeypatch) -> None:
    from amdinfer.engines import base

    long = "the MIGraphX module cannot be imported. " + "detail " * 80
    real = base.EngineInfo.short_skipped
    monkeypatch.setattr(base.EngineInfo, "short_skipped", lambda self, width=100: {**real(self, width), "m": long[:39]})
    assert main(["run", str(model_path)]) == 0
    err = capsys.readouterr().err  # the backends passed over are notes on stderr (dropped by -q)
    assert all(len(line) <= 200 for line in err.splitlines())
    assert "full reasons: engine.info.skipped" in err


def test_cli_startup_imports_no_runtime() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from amdinfer.cli import build_parser; build_parser(); "
        "bad = [m for m in ('onnxruntime', 'matplotlib', 'tqdm') if m in sys.modules]; sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_compile_finds_migraphx_programs_per_shape(tmp_path) -> None:
    # The MIGraphX engine caches one program per input-shape signature and records them in
    # info.settings["programs"]; compile must list exactly those (no migraphx needed to check the matching).
    from amdinfer.cache import CompiledModelCache
    from amdinfer.cli._compile import artefacts

    cache = CompiledModelCache(tmp_path)
    written = {}
    for batch in (1, 8, 32):
        parts = {"backend": "migraphx", "inputs": {"input": [batch, 3, 32, 32]}}
        key = cache.key(**parts)
        written[batch] = cache.put(
            key, lambda p: p.write_bytes(b"mxr"), {"model": "cnn.onnx"}, parts=parts, suffix=".mxr"
        )
    other = {"backend": "migraphx", "inputs": {"input": [1, 3, 32, 32]}, "x": 1}
    cache.put(cache.key(**other), lambda p: p.write_bytes(b"mxr"), {"model": "other.onnx"}, parts=other, suffix=".mxr")
    info = amdinfer.EngineInfo(backend="migraphx")
    info.settings["programs"] = [{"inputs": {"input": (b, 3, 32, 32)}, "cache_hit": False} for b in (1, 32)]
    found = sorted(path for _, path in artefacts(tmp_path, info, "cnn.onnx"))
    assert found == sorted([written[1], written[32]])


def test_shipped_migraphx_operator_list_is_the_recorded_one() -> None:
    from pathlib import Path

    from amdinfer.cli._stats import shipped_migraphx_operators

    recorded = Path(__file__).parent / "data" / "migraphx_onnx_operators.txt"
    ops, where = shipped_migraphx_operators()
    assert ops == [ln for ln in recorded.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert "f729a52fafa2" in where and "Conv" in ops and "Det" not in ops


def test_options_no_single_backend_takes_are_named_per_backend(model_path) -> None:
    with pytest.raises(amdinfer.OptionError) as exc:
        amdinfer.load(model_path, threads=1, target="ref")  # ort takes threads, migraphx takes target
    msg = str(exc.value)
    assert "no single backend takes all of ['target', 'threads']" in msg
    assert "migraphx does not take option(s) ['threads']" in msg and "ort does not take option(s) ['target']" in msg


def test_verify_fp16_engine_against_the_float_reference(model_path, capsys) -> None:
    assert main(["verify", str(model_path), "--providers", "cpu", "--precision", "fp16", "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["precision"] == "fp16" and doc["expected"] == "reference (cpu, fp64)" and doc["passed"] is True


# ---------------------------------------------------------------------------------------------- output files
def _plant_link(out, tmp_path):
    """A symbolic link at the output path, pointing at a file outside the command's business."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not yours to overwrite")
    out.symlink_to(victim)
    return victim


def _seeded(shape, seed=0):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)  # the documented random inputs


def _ort_logits(model_path, x):
    import onnxruntime as ort

    return ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def _check_run_save(out, model_path, doc):
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["input/input"], _seeded((1, 3, 32, 32)))
        want = _ort_logits(model_path, _seeded((1, 3, 32, 32)))
        np.testing.assert_allclose(saved["output/logits"], want, rtol=1e-5)


def _check_golden(out, model_path, doc):
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["input/input"], _seeded((1, 3, 32, 32)))
        np.testing.assert_allclose(saved["output/logits"], _ort_logits(model_path, _seeded((1, 3, 32, 32))), rtol=1e-4)


def _check_compiled(out, model_path, doc):
    from pathlib import Path

    assert out.read_bytes() == Path(doc["artefact"]).read_bytes()  # the cache entry, copied


def _check_trace(out, model_path, doc):
    events = json.loads(out.read_text())
    assert any(e.get("cat") == "Node" for e in events)  # ONNX Runtime's per-node events


def _check_fp16(out, model_path, doc):
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    assert {t.data_type for t in m.graph.initializer} == {onnx.TensorProto.FLOAT16}


def _check_png(out, model_path, doc):
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


WRITERS = {
    "run --save": (["run", "{model}", "--providers", "cpu", "--save", "{out}"], _check_run_save),
    "verify --save-golden": (["verify", "{model}", "--providers", "cpu", "--save-golden", "{out}"], _check_golden),
    "compile --out": (["compile", "{model}", "--providers", "cpu", "--out", "{out}"], _check_compiled),
    "profile --trace": (["profile", "{model}", "--providers", "cpu", "--runs", "1", "--trace", "{out}"], _check_trace),
    "quantize --out": (["quantize", "{model}", "--precision", "fp16", "--out", "{out}"], _check_fp16),
    "quantize --plot": (
        ["quantize", "{model}", "--precision", "fp16", "--out", "{model}.fp16", "--plot", "{out}"],
        _check_png,
    ),
    "bench --plot": (["bench", "{model}", "--providers", "cpu", "--iterations", "2", "--plot", "{out}"], _check_png),
}


@pytest.mark.parametrize("command", WRITERS, ids=[c.replace(" ", "") for c in WRITERS])
def test_outputs_replace_a_planted_symlink_never_follow_it(command, model_path, tmp_path, capsys) -> None:
    argv, check = WRITERS[command]
    out = tmp_path / ("out.png" if "plot" in command else "out.bin")
    victim = _plant_link(out, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = [a.format(model=model_path, out=out) for a in argv]
    assert main([*argv, "--json", "-q"]) in (0, 1)  # quantize exits 1 when the report fails its tolerance
    doc = json.loads(capsys.readouterr().out)
    assert victim.read_bytes() == b"not yours to overwrite"
    assert out.is_file() and not out.is_symlink()
    check(out, model_path, doc)
    made = {out.name, f"{model_path.name}.fp16", "amdinfer-cache"}  # no temporary file left beside the output
    assert {p.name for p in tmp_path.iterdir()} - set(before) <= made


@pytest.mark.parametrize(
    "argv",
    [
        ["compile", "{model}", "--providers", "cpu", "--out", "{model}"],
        ["compile", "{model}", "--providers", "cpu", "--out", "{dir}/sub/../cnn.onnx"],  # another spelling
        ["compile", "{model}", "--providers", "cpu", "--out", "{dir}/hardlink.onnx"],  # the same inode
        ["compile", "{model}", "--providers", "cpu", "--out", "{dir}/link.onnx"],  # a link to the model
        ["quantize", "{model}", "--precision", "fp16", "--out", "{model}"],
        ["run", "{model}", "--providers", "cpu", "--inputs", "{dir}/x.npz", "--save", "{dir}/x.npz"],
        ["verify", "{model}", "--providers", "cpu", "--save-golden", "{model}"],
        ["quantize", "{model}", "--precision", "fp16", "--out", "{dir}/q.png", "--plot", "{dir}/q.png"],
    ],
)
def test_an_output_that_is_an_input_is_refused(argv, model_path, tmp_path, capsys) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "hardlink.onnx").hardlink_to(model_path)
    (tmp_path / "link.onnx").symlink_to(model_path)
    np.savez(tmp_path / "x.npz", input=_seeded((1, 3, 32, 32)))
    model_bytes, x_bytes = model_path.read_bytes(), (tmp_path / "x.npz").read_bytes()
    argv = [a.format(model=model_path, dir=tmp_path) for a in argv]
    assert main([*argv, "-q"]) == 1
    err = capsys.readouterr().err
    flag = argv[-2]
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"amdinfer {argv[0]}: OptionError: {flag}: got ")
    assert "the same file as " in err and "expected a different path" in err
    assert model_path.read_bytes() == model_bytes and (tmp_path / "x.npz").read_bytes() == x_bytes
    assert not (tmp_path / "q.png").exists()


def test_save_golden_writes_exactly_the_path_given(model_path, tmp_path, capsys) -> None:
    out = tmp_path / "g_out"
    assert main(["verify", str(model_path), "--providers", "cpu", "--save-golden", str(out), "-q"]) == 0
    assert f"golden    wrote inputs and reference outputs to {out}\n" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("g_out")) == ["g_out"]
    with np.load(out) as saved:  # an .npz archive under the name given
        np.testing.assert_array_equal(saved["input/input"], _seeded((1, 3, 32, 32)))
    assert main(["verify", str(model_path), "--providers", "cpu", "--golden", str(out), "-q"]) == 0


def test_run_save_writes_exactly_the_path_given(model_path, tmp_path, capsys) -> None:
    out = tmp_path / "outputs"
    assert main(["run", str(model_path), "--providers", "cpu", "--save", str(out), "-q"]) == 0
    assert f"saved outputs to {out}" in capsys.readouterr().out
    assert not (tmp_path / "outputs.npz").exists()
    _check_run_save(out, model_path, {})


def test_plot_needs_an_image_suffix(model_path, tmp_path, capsys) -> None:
    assert main(["bench", str(model_path), "--providers", "cpu", "--plot", str(tmp_path / "plot"), "-q"]) == 1
    assert "OptionError: --plot: got " in capsys.readouterr().err


def test_failed_write_leaves_no_temporary_file(model_path, tmp_path, capsys, monkeypatch) -> None:
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    out = tmp_path / "out.npz"
    victim = _plant_link(out, tmp_path)
    monkeypatch.setattr(np, "savez", full_disk)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["run", str(model_path), "--providers", "cpu", "--save", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert err == f"amdinfer run: OptionError: --save: cannot write '{out}': No space left on device\n"
    after = sorted(p.name for p in tmp_path.iterdir() if p.name != "amdinfer-cache")
    assert after == before  # the link is as it was, no temporary file
    assert out.is_symlink() and victim.read_bytes() == b"not yours to overwrite"


def test_write_atomic_cleans_up_and_keeps_the_old_file(tmp_path) -> None:
    from amdinfer._support._files import write_atomic
    from amdinfer.errors import OptionError

    out = tmp_path / "model.onnx"
    out.write_bytes(b"old")

    def broken(f):
        f.write(b"half of a new fi")
        raise ValueError("writer failed")

    with pytest.raises(ValueError, match="writer failed"):
        write_atomic(out, broken, argument="--out")
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"] and out.read_bytes() == b"old"
    (tmp_path / "folder").mkdir()
    with pytest.raises(OptionError, match=r"^--out: cannot write '.*folder': it is a folder"):
        write_atomic(tmp_path / "folder", b"x", argument="--out")
    assert write_atomic(out, b"new", argument="--out").read_bytes() == b"new"
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "model.onnx"]


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------------------ --input-shapes / --batch
def test_input_shapes_axis_0_placeholder() -> None:
    from amdinfer.cli._common import parse_input_shapes

    assert parse_input_shapes("a:Nx3x8x8,b:[N,5]") == {"a": (None, 3, 8, 8), "b": (None, 5)}
    for bad in ("a:3xN", "a:NxN", "a:[3,N]", "a:n"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_input_shapes(bad)


@pytest.mark.parametrize(
    ("shapes", "batch", "want"),
    [
        ("input:2x3x32x32", "5", None),  # conflict
        ("input:2x3x32x32", "2", (2, 3, 32, 32)),
        ("input:Nx3x32x32", "5", (5, 3, 32, 32)),
        ("input:Nx3x32x32", None, (1, 3, 32, 32)),
        ("input:4x3x32x32", None, (4, 3, 32, 32)),
    ],
)
def test_input_shapes_and_batch_must_agree(model_path, capsys, shapes, batch, want) -> None:
    argv = ["run", str(model_path), "--providers", "cpu", "--input-shapes", shapes, "--json", "-q"]
    rc = main(argv + (["--batch", batch] if batch else []))
    out, err = capsys.readouterr()
    if want is None:
        assert rc == 1
        assert err == (
            "amdinfer run: OptionError: --input-shapes input:2x3x32x32 and --batch 5 disagree on axis 0 of input "
            "'input'; give equal values, drop one, or write axis 0 as N (--input-shapes input:Nx3x32x32) to take it "
            "from --batch\n"
        )
    else:
        assert rc == 0 and json.loads(out)["inputs"]["input"]["shape"] == list(want)


def test_bench_sweep_with_a_conflicting_axis_0_is_refused(encoder_path, capsys) -> None:
    argv = ["bench", str(encoder_path), "--providers", "cpu", "--input-shapes", "input:1x16x64", "--batch", "1,2"]
    assert main([*argv, "-q"]) == 1
    assert "--input-shapes input:1x16x64 and --batch 2 disagree" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- usage errors
@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["run", "m.onnx", "--bogus"], "amdinfer run"),
        (["cache", "list", "--bogus", "1"], "amdinfer cache"),
        (["--bogus"], "amdinfer"),
    ],
)
def test_unknown_option_names_the_subcommand(argv, prog, capsys) -> None:
    assert main(argv) == 2
    extra = " ".join(argv[argv.index("--bogus") :])
    assert capsys.readouterr().err == f"{prog}: UsageError: unrecognized arguments: {extra} (see {prog} --help)\n"
