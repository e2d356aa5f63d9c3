"""`amdinfer bench` at trtexec/onnxruntime_perf_test level: per-call latencies, memory, min/opt/max shapes, header.

No assertion depends on how fast anything runs: latencies are checked against the statistics computed from
them, memory against the kernel's own counters, shapes against what reached ``amdinfer.load`` and the engine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.cli import main
from amdinfer.testing import models


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "amdinfer-cache"))


@pytest.fixture
def cnn(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(models.tiny_cnn(), path)
    return str(path)


@pytest.fixture
def encoder(tmp_path):
    """input (N, S, 64): two dynamic axes."""
    path = tmp_path / "encoder.onnx"
    onnx.save(models.transformer_encoder(), path)
    return str(path)


def _bench_json(capsys, argv: list[str]) -> dict:
    assert main(["bench", *argv, "--providers", "cpu", "--warmup", "0", "--json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------------------------------------- latencies
def test_json_carries_every_latency_and_the_statistics_are_theirs(cnn, capsys) -> None:
    doc = _bench_json(capsys, [cnn, "--batch", "1,3", "--iterations", "7"])
    assert [r["batch"] for r in doc["results"]] == [1, 3]
    for r in doc["results"]:
        lat = r["latencies_ms"]
        assert len(lat) == 7 == r["iterations"] and all(isinstance(x, float) and x > 0 for x in lat)
        # JSON floats round-trip exactly, so the statistics recomputed from the list agree to float rounding
        assert np.mean(lat) == pytest.approx(r["mean_ms"], rel=1e-12)
        assert np.std(lat) == pytest.approx(r["std_ms"], rel=1e-9)
        assert (min(lat), max(lat)) == (r["min_ms"], r["max_ms"])
        assert np.percentile(lat, 99) == pytest.approx(r["p99_ms"], rel=1e-12)


def test_duration_run_lists_as_many_latencies_as_calls(cnn, capsys) -> None:
    doc = _bench_json(capsys, [cnn, "--duration", "0.05", "--concurrency", "2"])
    (r,) = doc["results"]
    assert len(r["latencies_ms"]) == r["iterations"] == r["items"] >= 1


def test_to_dict_leaves_latencies_out_unless_asked() -> None:
    from amdinfer.bench import BenchResult

    r = BenchResult([1.0, 3.0], batch=2)
    assert "latencies_ms" not in r.to_dict()
    assert r.to_dict(latencies=True)["latencies_ms"] == [1.0, 3.0]


# ---------------------------------------------------------------------------------------------- memory
def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` field read here, independently of amdinfer's parser."""
    with open("/proc/self/status") as f:
        (line,) = [ln for ln in f if ln.startswith(field + ":")]
    value, unit = line.split()[1:]
    assert unit == "kB"
    return int(value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS/VmHWM are Linux's /proc/self/status")
def test_memory_figures_are_the_process_rss(cnn, capsys) -> None:
    doc = _bench_json(capsys, [cnn, "--batch", "1,2", "--iterations", "2"])
    mem = doc["memory"]
    assert mem["host_rss_source"] == "/proc/self/status VmRSS/VmHWM"
    for key in ("host_rss_before_load_bytes", "host_rss_after_load_bytes", "host_rss_after_bytes"):
        assert mem[key] > 0
    # the high-water mark is at least every reading taken before it and never falls afterwards
    assert mem["host_rss_peak_bytes"] >= max(mem["host_rss_after_load_bytes"], mem["host_rss_after_bytes"])
    assert _status_kib("VmHWM") * 1024 >= mem["host_rss_peak_bytes"]
    # getrusage counts the same pages another way (its counter lags VmHWM a little): same order, same unit
    import resource

    assert 0.5 < resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / mem["host_rss_peak_bytes"] < 2
    peaks = [r["host_rss_peak_bytes"] for r in doc["results"]]
    assert peaks == sorted(peaks) and peaks[-1] <= mem["host_rss_peak_bytes"]
    assert all(r["host_rss_bytes"] > 0 for r in doc["results"])
    # no backend reports a device peak: no number, and a reason naming the backend
    assert mem["device_peak_bytes"] is None
    assert mem["device_peak_note"].startswith("not reported by ort (CPUExecutionProvider)")


def test_proc_status_parsing_by_hand() -> None:
    from amdinfer._support._memory import _from_proc

    text = "Name:\tpython\nVmPeak:\t  900 kB\nVmHWM:\t    300 kB\nVmRSS:\t    200 kB\nThreads:\t4\n"
    assert _from_proc(text) == (200 * 1024, 300 * 1024)
    assert _from_proc("VmRSS:\t12 MB\n") == (None, None)  # an unknown unit is not guessed


def test_device_peak_names_the_backend_on_a_gpu() -> None:
    from amdinfer._support._memory import device_peak

    info = amdinfer.EngineInfo(backend="migraphx", device="rocm:0")
    assert device_peak(info) == (
        None,
        "not reported by migraphx on rocm:0: its Python API exposes no allocator statistics of a running engine",
    )


# ---------------------------------------------------------------------------------------------- header order
def test_header_is_printed_before_timing_starts(cnn, capsys, monkeypatch) -> None:
    import amdinfer.bench as bench_module

    seen: list[str] = []
    real = bench_module.benchmark

    def spy(*a, **kw):
        seen.append(capsys.readouterr().out)  # what stdout held when timing began
        return real(*a, **kw)

    monkeypatch.setattr(bench_module, "benchmark", spy)
    assert main(["bench", cnn, "--providers", "cpu", "--batch", "1,2", "--iterations", "2", "-q"]) == 0
    rest = capsys.readouterr().out
    first = seen[0]
    assert first.startswith("backend   ort on cpu; providers CPUExecutionProvider; precision fp32\n")
    for label in ("versions  amdinfer", "load      ", "memory    host RSS", "timing    2 calls per batch"):
        assert label in first
    assert seen[1] == ""  # nothing more until the end: the table comes in one piece
    assert "items/s  first" not in first and rest.split()[:3] == ["batch", "n", "mean"]
    assert "device peak: not reported by ort (CPUExecutionProvider)" in rest


def test_subprocess_text_order_and_single_json_object(cnn, tmp_path) -> None:
    env = {**os.environ, "AMDINFER_CACHE_DIR": str(tmp_path / "c")}
    argv = [sys.executable, "-m", "amdinfer", "bench", cnn, "--providers", "cpu", "--iterations", "3", "-q"]
    text = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=True).stdout
    lines = text.splitlines()
    at = {key: next(i for i, line in enumerate(lines) if line.startswith(key)) for key in ("backend", "timing")}
    table = next(i for i, line in enumerate(lines) if line.split()[:2] == ["batch", "n"])
    assert at["backend"] == 0 < at["timing"] < table
    out = subprocess.run([*argv, "--json"], capture_output=True, text=True, env=env, timeout=300, check=True).stdout
    doc = json.loads(out)  # the whole of stdout is one object: no header text in --json
    assert doc["command"] == "bench" and len(doc["results"][0]["latencies_ms"]) == 3


# ---------------------------------------------------------------------------------------------- min/opt/max
_PROFILE = ["--min-shapes", "input:1x4x64", "--opt-shapes", "input:2x8x64", "--max-shapes", "input:4x16x64"]


@pytest.fixture
def load_calls(monkeypatch) -> list[dict]:
    """The keyword arguments of every ``amdinfer.load`` the command makes."""
    calls: list[dict] = []
    real = amdinfer.load

    def spy(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(amdinfer, "load", spy)
    return calls


def test_min_max_become_the_engine_bounds_and_opt_is_timed(encoder, capsys, load_calls) -> None:
    doc = _bench_json(capsys, [encoder, *_PROFILE, "--iterations", "2"])
    (call,) = load_calls
    assert call["shapes"] == {"input": [(1, 4, 64), (4, 16, 64)]}
    assert doc["shape_bounds"] == {"input": {"min": [1, 4, 64], "opt": None, "max": [4, 16, 64]}}
    assert doc["shape_profile"] == {"input": {"min": [1, 4, 64], "opt": [2, 8, 64], "max": [4, 16, 64]}}
    (r,) = doc["results"]
    assert r["input_shapes"] == {"input": [2, 8, 64]} and r["batch"] == 2


def test_batch_sweeps_axis_0_of_opt_within_the_bounds(encoder, capsys, load_calls) -> None:
    doc = _bench_json(capsys, [encoder, *_PROFILE, "--batch", "1,4", "--iterations", "2"])
    assert load_calls[0]["shapes"] == {"input": [(1, 4, 64), (4, 16, 64)]}
    assert [r["input_shapes"]["input"] for r in doc["results"]] == [[1, 8, 64], [4, 8, 64]]


def test_profile_text_line(encoder, capsys) -> None:
    assert main(["bench", encoder, "--providers", "cpu", *_PROFILE, "--iterations", "2", "--warmup", "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert "shapes    input: min 1x4x64, opt 2x8x64, max 4x16x64; timed at opt\n" in out
    assert out.index("shapes    input") < out.index("timing    ")


def test_other_inputs_keep_input_shapes(tmp_path, capsys, load_calls) -> None:
    """A profiled input and one fixed by --input-shapes in the same model."""
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["a"], ["sa"], keepdims=0), helper.make_node("ReduceSum", ["b"], ["sb"])],
        "two",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", "S"]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", "T"]),
        ],
        [
            helper.make_tensor_value_info("sa", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("sb", TensorProto.FLOAT, [1, 1]),
        ],
    )
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    argv = [str(path), "--min-shapes", "a:1x2", "--opt-shapes", "a:2x5", "--max-shapes", "a:2x9"]
    doc = _bench_json(capsys, [*argv, "--input-shapes", "b:2x3", "--iterations", "2"])
    assert load_calls[0]["shapes"] == {"a": [(1, 2), (2, 9)], "b": (2, 3)}
    assert doc["results"][0]["input_shapes"] == {"a": [2, 5], "b": [2, 3]}


_MIN, _OPT, _MAX = "--min-shapes", "--opt-shapes", "--max-shapes"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [_MIN, "input:1x4x64", _OPT, "input:1x8x64", _MAX, "input:4x6x64"],
            "input 'input' axis 1: got min 4, opt 8, max 6 (--min-shapes input:1x4x64, --opt-shapes input:1x8x64, "
            "--max-shapes input:4x6x64); expected min <= opt <= max on every axis",
        ),
        (
            [_MIN, "input:2x4x64", _OPT, "input:1x8x64", _MAX, "input:4x16x64"],
            "input 'input' axis 0: got min 2, opt 1, max 4",
        ),
        (
            [_MIN, "images:1x4x64", _OPT, "images:1x8x64", _MAX, "images:4x6x64"],
            "--min-shapes: got input(s) ['images'], expected names among ['input']",
        ),
        (
            [_MIN, "input:1x4x64", _MAX, "input:4x16x64"],
            "--opt-shapes: missing (got --min-shapes, --max-shapes); --min-shapes, --opt-shapes and --max-shapes go "
            "together",
        ),
        (
            [_MIN, "input:1x4x64", _OPT, "input:2x8x64", _MAX, "input:4x16x64", "--input-shapes", "input:2x8x64"],
            "input(s) ['input']: given in --input-shapes and in --min-shapes/--opt-shapes/--max-shapes",
        ),
        (
            [_MIN, "input:1x4x64", _OPT, "input:Nx8x64", _MAX, "input:4x16x64"],
            "--opt-shapes input:Nx8x64: got N, expected numbers",
        ),
        (
            [_MIN, "input:1x4", _OPT, "input:2x8x64", _MAX, "input:4x16x64"],
            "--min-shapes: input 'input' got 2 dims 1x4, expected rank 3 (N, S, 64)",
        ),
        (
            [_MIN, "input:1x4x64", _OPT, "input:2x8x32", _MAX, "input:4x16x64"],
            "--opt-shapes: input 'input' axis 2 got 32, expected 64 (fixed in the model)",
        ),
        (
            [_MIN, "input:1x4x64", _MIN, "input:1x5x64", _OPT, "input:2x8x64", _MAX, "input:4x16x64"],
            "--min-shapes: input 'input' is given twice (1x4x64 and 1x5x64)",
        ),
        (
            [*_PROFILE, "--batch", "1,8"],
            "--batch 8: input 'input' axis 0 must lie within --min-shapes input:1x4x64 and --max-shapes "
            "input:4x16x64 (1..4)",
        ),
    ],
    ids=["opt>max", "min>opt", "unknown-name", "missing-opt", "also-input-shapes", "N", "rank", "fixed-dim", "twice",
         "batch-outside"],
)  # fmt: skip
def test_profile_violations_are_one_line_usage_errors(encoder, capsys, load_calls, argv, message) -> None:
    assert main(["bench", encoder, "--providers", "cpu", *argv]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"amdinfer bench: OptionError: {message}")
    assert captured.out == "" and load_calls == []  # refused before anything is loaded or printed


def test_profile_with_inputs_file_is_refused(encoder, tmp_path, capsys) -> None:
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 8, 64), np.float32))
    argv = ["bench", encoder, *_PROFILE, "--inputs", str(tmp_path / "in.npz")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("amdinfer bench: OptionError: --inputs with --min-shapes/--opt-shapes/--max-shapes")
    assert "Traceback" not in err


def test_shape_profile_raises_the_typed_error() -> None:
    from amdinfer.cli._bench import shape_profile
    from amdinfer.model import ModelSource

    specs = ModelSource.from_any(models.transformer_encoder()).inputs
    ns = argparse.Namespace(
        input_shapes=None, inputs=None, min_shapes=[{"input": (4, 4, 64)}], opt_shapes=[{"input": (2, 8, 64)}],
        max_shapes=[{"input": (8, 16, 64)}],
    )  # fmt: skip
    with pytest.raises(amdinfer.OptionError, match=r"axis 0: got min 4, opt 2, max 8"):
        shape_profile(ns, specs)
    ns.min_shapes = [{"input": (1, 4, 64)}]
    p = shape_profile(ns, specs)
    assert p is not None and (p.min, p.opt, p.max) == (
        {"input": (1, 4, 64)},
        {"input": (2, 8, 64)},
        {"input": (8, 16, 64)},
    )


def test_help_lists_the_profile_options(capsys) -> None:
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--min-shapes", "--opt-shapes", "--max-shapes"))
