"""Issue 22's command-line tools: one cache story, shared engine options, verify --against/--atol/--rtol,
run --save as a golden file, quantize's sample warning and --mean/--std, quiet notes and closed pipes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from amdinfer.cli import build_parser, main
from amdinfer.errors import OptionError
from amdinfer.testing import models


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> Path:
    """The default cache folder ($AMDINFER_CACHE_DIR) lives in the test's folder."""
    folder = tmp_path / "default-cache"
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def model_path(tmp_path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(models.tiny_cnn(), path)
    return path


def _json(argv: list[str], capsys, rc: int = 0) -> dict:
    assert main([*argv, "--json", "-q"]) == rc, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _seeded(shape, seed=0):
    return np.random.default_rng(seed).random(shape, dtype=np.float32)  # the documented random inputs


def _ort(model_path, x):
    import onnxruntime as ort

    return ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def _onnx_reference(x):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(models.tiny_cnn()).run(None, {"input": x.astype(np.float64)})[0]


# ---------------------------------------------------------------------------------------------- one cache story
_USERS = {  # command -> the extra arguments it takes here
    "run": [],
    "verify": [],
    "profile": ["--runs", "1", "--warmup", "0"],
    "bench": ["--iterations", "2", "--warmup", "0"],
}


@pytest.mark.parametrize("command", list(_USERS))
def test_what_compile_built_is_a_cache_hit_in_the_default_folder(command, model_path, _cache_in_tmp, capsys) -> None:
    first = _json(["compile", str(model_path), "--providers", "cpu"], capsys)
    assert first["cache_hit"] is False and first["cache_dir"] == str(_cache_in_tmp)
    doc = _json([command, str(model_path), "--providers", "cpu", *_USERS[command]], capsys)
    assert doc["cache_hit"] is True
    assert doc["cache"]["dir"] == str(_cache_in_tmp) and doc["cache"]["key"] == first["key"]


@pytest.mark.parametrize("command", list(_USERS))
def test_cache_dir_without_the_environment_variable(command, model_path, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("AMDINFER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "explicit"
    # The key holds the input-shape bounds: compile --batch 1,8 is what bench --batch 1,8 runs; run, verify and
    # profile run batch 1, what compile builds without --batch.
    batch = ["--batch", "1,8"] if command == "bench" else []
    first = _json(["compile", str(model_path), "--providers", "cpu", "--cache-dir", str(folder), *batch], capsys)
    assert first["cache_hit"] is False and Path(first["artefact"]).parent.parent == folder
    argv = [command, str(model_path), "--providers", "cpu", "--cache-dir", str(folder), *batch, *_USERS[command]]
    assert main([*argv, "-q"]) == 0
    text = capsys.readouterr().out
    if command == "bench":
        assert "cache hit" in text
    else:
        assert f"cache     hit, loaded: ORT optimized model in {folder} (key {first['key']})" in text
    doc = _json(argv, capsys)
    assert doc["cache_hit"] is True and doc["cache"]["key"] == first["key"]
    assert not (tmp_path / "xdg").exists(), "the user cache folder was written"


def test_the_user_cache_folder_is_the_default_without_the_variable(model_path, tmp_path, monkeypatch, capsys) -> None:
    from amdinfer.cache import default_cache_dir

    monkeypatch.delenv("AMDINFER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    user = default_cache_dir()
    assert str(user).startswith(str(tmp_path))
    assert _json(["compile", str(model_path), "--providers", "cpu"], capsys)["cache_dir"] == str(user)
    doc = _json(["run", str(model_path), "--providers", "cpu"], capsys)
    assert doc["cache_hit"] is True and doc["cache"]["dir"] == str(user)


def test_the_engine_itself_reports_the_hit(model_path, tmp_path, capsys) -> None:
    from amdinfer.cli._common import load_engine, plan_feeds

    folder = str(tmp_path / "c")
    _json(["compile", str(model_path), "--providers", "cpu", "--cache-dir", folder], capsys)
    args = build_parser().parse_args(["run", str(model_path), "--providers", "cpu", "--cache-dir", folder, "-q"])
    with load_engine(args, plan_feeds(args, [None])) as engine:
        assert engine.info.cache_hit is True and engine.info.settings["cache"]["dir"] == folder
    args = build_parser().parse_args(["run", str(model_path), "--providers", "cpu", "--no-cache", "-q"])
    with load_engine(args, plan_feeds(args, [None])) as engine:
        assert engine.info.cache_hit is False and "cache" not in engine.info.settings


def test_no_cache_writes_nothing(model_path, _cache_in_tmp, capsys) -> None:
    doc = _json(["run", str(model_path), "--providers", "cpu", "--no-cache"], capsys)
    assert doc["cache_hit"] is False and doc["cache"] is None
    assert not _cache_in_tmp.exists()
    assert main(["run", str(model_path), "--providers", "cpu", "--no-cache", "-q"]) == 0
    assert "cache     off (--no-cache)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "{m}", "--no-cache", "--cache-dir", "x"], "--cache-dir 'x': given together with --no-cache"),
        (["run", "{m}", "--backend", "reference", "--cache-dir", "x"], "backend 'reference' keeps no compiled"),
        (["compile", "{m}", "--providers", "cpu", "--no-cache"], "--no-cache: compile builds into the compiled"),
        (["quantize", "{m}", "--precision", "fp16", "--out", "{d}/q.onnx", "--cache-dir", "x"], "only int8"),
    ],
)
def test_cache_option_conflicts(argv, message, model_path, tmp_path, capsys) -> None:
    argv = [a.format(m=model_path, d=tmp_path) for a in argv]
    assert main([*argv, "-q"]) == 1
    err = capsys.readouterr().err
    assert "OptionError: " in err and message in err and len(err.splitlines()) == 1


def test_reference_backend_runs_without_cache_options(model_path, capsys) -> None:
    assert main(["run", str(model_path), "--backend", "reference", "-q"]) == 0
    assert "cache     none (backend reference keeps no compiled artefact)" in capsys.readouterr().out


def test_int8_calibration_follows_the_cache_switch(model_path, tmp_path) -> None:
    from amdinfer.cli._common import quantizer_cache

    parse = build_parser().parse_args
    assert quantizer_cache(parse(["run", str(model_path)])) is True
    assert quantizer_cache(parse(["run", str(model_path), "--no-cache"])) is False
    assert quantizer_cache(parse(["run", str(model_path), "--cache-dir", "d"])) == "d"


# ---------------------------------------------------------------------------------------------- engine options
def test_engine_options_reach_the_session(model_path, capsys) -> None:
    argv = ["run", str(model_path), "--providers", "cpu", "--inter-op-threads", "3", "--graph-optimization", "basic",
            "--provider-option", "arena_extend_strategy=kSameAsRequested", "--threads", "2"]  # fmt: skip
    settings = _json(argv, capsys)["settings"]
    assert settings["session"]["inter_op_num_threads"] == 3
    assert settings["session"]["intra_op_num_threads"] == 2
    assert settings["session"]["graph_optimization_level"] == "ORT_ENABLE_BASIC"
    assert settings["provider_options"] == {"CPUExecutionProvider": {"arena_extend_strategy": "kSameAsRequested"}}


@pytest.mark.parametrize("command", ["bench", "profile", "verify", "compile"])
def test_every_loading_command_takes_the_engine_options(command, model_path) -> None:
    from amdinfer.cli._common import engine_options

    argv = [command, str(model_path), "--providers", "migraphx,cpu", "--provider-option", "migraphx_fp16_enable=1",
            "--provider-option", "device_id=0", "--inter-op-threads", "2", "--graph-optimization", "disable",
            "--cache-dir", "c"]  # fmt: skip
    args = build_parser().parse_args(argv)
    assert engine_options(args, args.backend) == {
        "providers": [("migraphx", {"migraphx_fp16_enable": "1", "device_id": "0"}), "cpu"],
        "inter_op_threads": 2,
        "graph_optimization": "disable",
        "cache": True,
        "cache_dir": "c",
    }


def test_graph_optimization_choices_are_the_engine_table() -> None:
    from amdinfer.engines.ort import GRAPH_OPTIMIZATION_LEVELS

    parser = build_parser()
    for level in GRAPH_OPTIMIZATION_LEVELS:
        assert parser.parse_args(["run", "m.onnx", "--graph-optimization", level]).graph_optimization == level
    assert main(["run", "m.onnx", "--graph-optimization", "bogus"]) == 2


def test_the_optimization_level_is_part_of_the_cache_key(model_path, capsys) -> None:
    basic = ["--providers", "cpu", "--graph-optimization", "basic"]
    _json(["compile", str(model_path), *basic], capsys)
    assert _json(["run", str(model_path), "--providers", "cpu"], capsys)["cache_hit"] is False
    assert _json(["run", str(model_path), *basic], capsys)["cache_hit"] is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--provider-option", "a=b"], "--provider-option: applies to the first provider of --providers"),
        (["--providers", "cpu", "--provider-option", "ab"], "--provider-option: got 'ab', expected KEY=VALUE"),
        (["--providers", "cpu", "--provider-option", "=b"], "--provider-option: got '=b', expected KEY=VALUE"),
        (["--providers", "cpu", "--provider-option", "a=1", "--provider-option", "a=2"], "'a' is given twice"),
        (["--backend", "reference", "--providers", "cpu", "--provider-option", "a=1"], "got --backend reference"),
        (["--backend", "reference", "--graph-optimization", "basic"], "unknown option(s) ['graph_optimization']"),
    ],
)
def test_engine_option_errors(extra, message, model_path, capsys) -> None:
    assert main(["run", str(model_path), *extra, "-q"]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err


# ---------------------------------------------------------------------------------------------- verify
def test_verify_against_a_second_backend(model_path, capsys) -> None:
    argv = ["verify", str(model_path), "--backend", "ort", "--providers", "cpu", "--against", "reference"]
    doc = _json(argv, capsys)
    assert doc["passed"] is True and doc["expected"] == "reference (cpu, fp64)"
    x = _seeded((1, 3, 32, 32))
    # The fp64 reference returns the model's output dtype (float32): both sides are float32 arrays.
    want = np.max(np.abs(_ort(model_path, x).astype(np.float64) - _onnx_reference(x).astype(np.float32)))
    assert doc["report"]["max_abs"] == pytest.approx(want, rel=1e-6, abs=1e-12)
    doc = _json(["verify", str(model_path), "--backend", "reference", "--against", "ort", "--against-providers", "cpu"],
                capsys)  # fmt: skip
    assert doc["passed"] is True and doc["expected"] == "ort (cpu, CPUExecutionProvider, fp32)"
    assert doc["backend"] == "reference"


def test_verify_against_exit_code_follows_the_tolerances(model_path, capsys) -> None:
    base = ["verify", str(model_path), "--backend", "reference", "--precision", "fp32", "--against", "ort",
            "--against-providers", "cpu"]  # fmt: skip
    assert main([*base, "-q"]) == 0
    capsys.readouterr()
    assert main([*base, "--atol", "0", "--rtol", "0", "-q"]) == 1  # float32 rounding in a different order
    out = capsys.readouterr().out
    assert "tolerance atol 0, rtol 0 (given; the rest by precision)" in out and "result    FAILED (exit 1)" in out


def test_atol_rtol_replace_the_defaults_against_a_known_offset(model_path, tmp_path, capsys) -> None:
    from amdinfer.verify import save_golden

    x = _seeded((1, 3, 32, 32))
    y = _onnx_reference(x).astype(np.float32)
    offset = 0.01
    golden = tmp_path / "g.npz"
    save_golden(golden, {"input": x}, {"logits": y + offset})
    base = ["verify", str(model_path), "--backend", "reference", "--golden", str(golden), "--rms-tol", "1"]

    def passed(*tol: str) -> bool:
        rc, doc = _json_any([*base, *tol], capsys)
        assert rc == (0 if doc["passed"] else 1)
        return doc["passed"]

    # |actual - expected| is the offset (to float32 rounding, ~1e-8): atol decides alone when rtol is 0.
    assert not passed()  # the fp32 defaults (1e-3) are far below the offset
    assert passed("--atol", str(offset * 1.01), "--rtol", "0")
    assert not passed("--atol", str(offset * 0.99), "--rtol", "0")
    # rtol alone: the bound is rtol * |expected|, so the smallest |expected| decides.
    need = offset / float(np.min(np.abs(y + offset)))
    assert passed("--atol", "0", "--rtol", str(need * 1.01))
    assert not passed("--atol", "0", "--rtol", str(need * 0.99))


def _json_any(argv, capsys):
    rc = main([*argv, "--json", "-q"])
    return rc, json.loads(capsys.readouterr().out)


def test_verify_rejects_conflicting_options(model_path, tmp_path, capsys) -> None:
    golden = tmp_path / "g.npz"
    assert main(["verify", str(model_path), "--providers", "cpu", "--save-golden", str(golden), "-q"]) == 0
    cases = [
        (["--golden", str(golden), "--against", "ort"], "--golden: it holds the inputs and expected outputs"),
        (["--against", "reference", "--against-providers", "cpu"], "--against-providers: ONNX Runtime providers"),
        (["--against", "ort", "--reference-precision", "fp32"], "--reference-precision: applies to --against"),
    ]
    capsys.readouterr()
    for extra, message in cases:
        assert main(["verify", str(model_path), *extra, "-q"]) == 1
        assert message in capsys.readouterr().err
    assert main(["verify", str(model_path), "--atol", "-1"]) == 2


# ---------------------------------------------------------------------------------------------- run --save / --golden
def test_run_save_is_a_golden_file(model_path, tmp_path, capsys) -> None:
    from amdinfer.verify import load_golden

    out = tmp_path / "out.npz"
    assert (
        main(["run", str(model_path), "--providers", "cpu", "--seed", "3", "--batch", "2", "--save", str(out), "-q"])
        == 0
    )
    x = _seeded((2, 3, 32, 32), seed=3)
    g = load_golden(out)
    np.testing.assert_array_equal(g.inputs["input"], x)
    np.testing.assert_allclose(g.outputs["logits"], _ort(model_path, x), rtol=1e-5, atol=1e-6)
    assert g.meta["engine"] == "ort (cpu, CPUExecutionProvider, fp32)"
    capsys.readouterr()
    doc = _json(["verify", str(model_path), "--backend", "reference", "--golden", str(out)], capsys)
    assert doc["passed"] is True and doc["expected"] == f"golden file {out} (ort (cpu, CPUExecutionProvider, fp32))"
    # The file is replayed, not ignored: change one output value and the comparison fails.
    with np.load(out) as f:
        arrays = dict(f)
    arrays["output/logits"][0, 0] += 1.0
    np.savez(tmp_path / "bad.npz", **arrays)
    rc, doc = _json_any(["verify", str(model_path), "--backend", "reference", "--golden", str(tmp_path / "bad.npz")],
                        capsys)  # fmt: skip
    assert rc == 1 and doc["passed"] is False


def test_golden_needs_inputs_and_outputs(tmp_path) -> None:
    from amdinfer.errors import InputError
    from amdinfer.verify import load_golden

    np.savez(tmp_path / "bare.npz", logits=np.zeros(3))
    with pytest.raises(InputError, match=r"expected input/<name> and output/<name> \(a file written by amdinfer run"):
        load_golden(tmp_path / "bare.npz")


# ---------------------------------------------------------------------------------------------- quantize
def _calib(tmp_path, n, name="calib.npz"):
    path = tmp_path / name
    np.savez(path, input=np.random.default_rng(n).random((n, 3, 32, 32), dtype=np.float32))
    return path


def test_quantize_warns_below_fifty_samples(model_path, tmp_path, capsys) -> None:
    argv = ["quantize", str(model_path), "--precision", "int8", "--calibration", str(_calib(tmp_path, 8)),
            "--out", str(tmp_path / "q.onnx")]  # fmt: skip
    main(argv)
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "judging on 2 samples only (the last 2 of --calibration" in warnings[0]
    main([*argv, "-q"])
    assert capsys.readouterr().err == ""  # -q: no notes, warnings included
    main([*argv, "--json", "-q"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["eval_samples"] == 2 and len(doc["warnings"]) == 1 and "judging on 2 samples" in doc["warnings"][0]


def test_quantize_counts_rows_of_random_batches(model_path, tmp_path, capsys) -> None:
    argv = ["quantize", str(model_path), "--precision", "fp16", "--out", str(tmp_path / "q.onnx"), "--batch", "7"]
    doc = _json(argv, capsys)
    assert doc["eval_samples"] == 56 and doc["warnings"] == []  # 8 batches of 7
    doc = _json([*argv[:-2], "--batch", "6"], capsys)
    assert doc["eval_samples"] == 48 and "judging on 48 samples" in doc["warnings"][0]


def test_quantize_no_warning_with_enough_held_out_samples(model_path, tmp_path, capsys) -> None:
    argv = ["quantize", str(model_path), "--precision", "int8", "--calibration", str(_calib(tmp_path, 8)),
            "--eval", str(_calib(tmp_path, 50, "eval.npz")), "--out", str(tmp_path / "q.onnx")]  # fmt: skip
    doc = _json(argv, capsys)
    assert doc["warnings"] == [] and doc["eval_samples"] == 50
    assert main(argv) in (0, 1)
    assert "warning" not in capsys.readouterr().err


def _images(folder: Path, channels: int = 3) -> list[np.ndarray]:
    from PIL import Image

    folder.mkdir()
    rng = np.random.default_rng(5)
    pixels = []
    for i in range(3):
        shape = (32, 32, 3) if channels == 3 else (32, 32)
        p = rng.integers(0, 256, shape, dtype=np.uint8)
        Image.fromarray(p).save(folder / f"{i}.png")  # lossless, 32x32: no resize
        pixels.append(p)
    return pixels


def test_mean_std_normalize_calibration_images_like_torchvision(model_path, tmp_path) -> None:
    from amdinfer.cli._common import load_samples, model_specs, parse_normalization

    pixels = _images(tmp_path / "imgs")
    specs = model_specs(str(model_path)).inputs
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    args = argparse.Namespace(mean=",".join(map(str, mean)), std=",".join(map(str, std)))
    samples = load_samples(str(tmp_path / "imgs"), specs, {"input": (1, 3, 32, 32)}, "--calibration",
                           parse_normalization(args))  # fmt: skip
    assert len(samples) == 3
    for p, sample in zip(pixels, samples):
        want = (p.astype(np.float64) / 255.0 - np.array(mean)) / np.array(std)  # ToTensor, then Normalize
        got = sample["input"]
        assert got.shape == (1, 3, 32, 32) and got.dtype == np.float32
        np.testing.assert_allclose(got[0], want.transpose(2, 0, 1), rtol=1e-6, atol=1e-6)
    one = load_samples(str(tmp_path / "imgs"), specs, {"input": (1, 3, 32, 32)}, "--calibration",
                       parse_normalization(argparse.Namespace(mean="0.5", std="0.25")))  # fmt: skip
    np.testing.assert_allclose(one[0]["input"][0], ((pixels[0] / 255.0 - 0.5) / 0.25).transpose(2, 0, 1), atol=1e-6)
    plain = load_samples(str(tmp_path / "imgs"), specs, {"input": (1, 3, 32, 32)}, "--calibration")
    np.testing.assert_allclose(plain[0]["input"][0], (pixels[0] / 255.0).transpose(2, 0, 1), atol=1e-7)


def test_npz_samples_follow_the_one_calibration_layout(model_path, tmp_path) -> None:
    """axis 0 = samples: rows of the model's rank keep their batch axis, rows of one less get one (as in
    Int8Quantizer); any other rank is refused naming the input."""
    from amdinfer.cli._common import load_samples, model_specs
    from amdinfer.errors import InputError

    specs = model_specs(str(model_path)).inputs
    x = np.random.default_rng(0).random((4, 3, 32, 32), dtype=np.float32)
    shapes = {"input": (1, 3, 32, 32)}
    np.savez(tmp_path / "plain.npz", input=x)
    np.savez(tmp_path / "batched.npz", input=x[:, None])
    plain = load_samples(str(tmp_path / "plain.npz"), specs, shapes, "--calibration")
    batched = load_samples(str(tmp_path / "batched.npz"), specs, shapes, "--calibration")
    assert len(plain) == len(batched) == 4
    for i in range(4):
        assert plain[i]["input"].shape == batched[i]["input"].shape == (1, 3, 32, 32)
        np.testing.assert_array_equal(plain[i]["input"][0], x[i])
        np.testing.assert_array_equal(batched[i]["input"], plain[i]["input"])
    np.savez(tmp_path / "flat.npz", input=x[:, 0])
    with pytest.raises(InputError, match=r"--calibration: got an array of shape \(4, 32, 32\) for input 'input'"):
        load_samples(str(tmp_path / "flat.npz"), specs, shapes, "--calibration")


def test_mean_std_reach_the_int8_quantizer_of_every_command(model_path, tmp_path) -> None:
    from amdinfer.cli._common import model_specs, quantizer_for

    pixels = _images(tmp_path / "imgs")
    argv = ["bench", str(model_path), "--precision", "int8", "--calibration", str(tmp_path / "imgs"),
            "--mean", "0.5", "--std", "0.5,0.25,0.125", "--no-cache"]  # fmt: skip
    args = build_parser().parse_args(argv)
    q = quantizer_for(args, model_specs(str(model_path)), {"input": (1, 3, 32, 32)})
    first = next(iter(q._calibration))["input"][0]
    want = ((pixels[0] / 255.0 - 0.5) / np.array([0.5, 0.25, 0.125])).transpose(2, 0, 1)
    np.testing.assert_allclose(first, want, atol=1e-6)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mean", "0.1,0.2"], "--mean: got 2 values [0.1, 0.2] for the 3-channel images of --calibration"),
        (["--std", "0.5,0,0.5"], "--std: got '0.5,0,0.5', expected values > 0"),
        (["--std", "-1"], "--std: got '-1', expected values > 0"),
        (["--mean", "a,b,c"], "--mean: got 'a,b,c', expected numbers separated by commas"),
        (["--mean", "nan"], "--mean: got 'nan', expected finite numbers"),
    ],
)
def test_mean_std_validation(extra, message, model_path, tmp_path, capsys) -> None:
    _images(tmp_path / "imgs")
    argv = ["quantize", str(model_path), "--precision", "int8", "--calibration", str(tmp_path / "imgs"),
            "--out", str(tmp_path / "q.onnx"), *extra, "-q"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"OptionError: {message}" in err and len(err.splitlines()) == 1, err


def test_mean_std_need_image_folders(model_path, tmp_path, capsys) -> None:
    calib = str(_calib(tmp_path, 8))
    for argv, message in [
        (["run", str(model_path), "--mean", "0.5"], "--mean/--std: normalize --calibration image folders"),
        (["run", str(model_path), "--precision", "int8", "--calibration", calib, "--std", "2"], "is an .npz"),
        (["quantize", str(model_path), "--precision", "fp16", "--out", str(tmp_path / "q"), "--mean", "1"],
         "--mean/--std: normalize --calibration and --eval image folders; neither is given"),
    ]:  # fmt: skip
        assert main([*argv, "-q"]) == 1
        assert message in capsys.readouterr().err


def test_parse_normalization_raises_option_error() -> None:
    from amdinfer.cli._common import parse_normalization

    with pytest.raises(OptionError):
        parse_normalization(argparse.Namespace(mean=None, std="0"))


# ---------------------------------------------------------------------------------------------- notes and pipes
@pytest.fixture
def skipped_backend(monkeypatch):
    from amdinfer.engines import base

    real = base.EngineInfo.short_skipped
    monkeypatch.setattr(base.EngineInfo, "short_skipped", lambda self, width=100: {**real(self, width), "m": "gone"})


def test_passed_over_lines_are_notes_that_quiet_drops(model_path, skipped_backend, capsys) -> None:
    assert main(["run", str(model_path)]) == 0
    out, err = capsys.readouterr()
    assert "passed over" not in out
    assert "amdinfer run: passed over m: gone" in err.splitlines()
    assert "amdinfer run: (full reasons: engine.info.skipped, --json, amdinfer doctor)" in err.splitlines()
    assert main(["run", str(model_path), "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "passed over" not in out
    assert main(["run", str(model_path), "--json", "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "migraphx" in json.loads(out)["skipped"]


def _closed_pipe_run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``python -m amdinfer argv`` with stdout a pipe whose reader is already gone (``| head -0``)."""
    read, write = os.pipe()
    os.close(read)  # closed before the child starts: every write to stdout gets EPIPE
    try:
        return subprocess.run(
            [sys.executable, "-m", "amdinfer", *argv], stdout=write, stderr=subprocess.PIPE, env=env, timeout=120
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "{m}", "--json", "-q"],
        ["run", "{m}", "-q"],
        ["cache", "list", "--json"],
        ["cache", "list"],
        ["doctor"],
        ["--help"],
        ["--version"],
    ],
    ids=["run-json", "run-text", "cache-json", "cache-text", "doctor", "help", "version"],
)
def test_a_closed_pipe_ends_quietly(argv, model_path, _cache_in_tmp, capsys) -> None:
    _json(["compile", str(model_path), "--providers", "cpu"], capsys)  # a cache folder with one entry to list
    env = {**os.environ, "AMDINFER_CACHE_DIR": str(_cache_in_tmp)}
    done = _closed_pipe_run([a.format(m=model_path) for a in argv], env)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b"", done.stderr.decode()


def test_head_reads_the_first_line_and_the_command_exits_0(model_path, _cache_in_tmp, capsys) -> None:
    _json(["compile", str(model_path), "--providers", "cpu"], capsys)
    amdinfer = f"{sys.executable} -m amdinfer"
    for cmd in (f"{amdinfer} run {model_path} --json -q | head -1", f"{amdinfer} cache list --json | head -1"):
        script = f"{cmd}; echo rc=${{PIPESTATUS[0]}} >&2"
        done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=120, text=True)
        assert done.stdout == "{\n"
        assert done.stderr.strip() == "rc=0", done.stderr


def test_other_broken_pipes_stay_errors(model_path, monkeypatch, capsys) -> None:
    from amdinfer.cli import _run

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")  # e.g. a subprocess the command talks to

    monkeypatch.setattr(_run, "run", broken)
    assert main(["run", str(model_path), "-q"]) == 1
    assert "amdinfer run: BrokenPipeError:" in capsys.readouterr().err
