"""Precision by budget: ``AutoMixedPrecision(budget=...)`` and ``amdinfer quantize --budget``.

The truth is a planted layer: ``conv2`` of ``tiny_cnn`` gets one input channel whose weights are 1000 for every
output channel, fed by a ``conv1`` channel that a bias of -1000 keeps at zero after its Relu. The float model is
unchanged (that channel is always 0), but int8's per-channel weight scale of ``conv2`` is then ~8, so all its
ordinary weights (~0.1) round to zero and the top class is lost. Only ``conv2`` in float fixes it: its input
range and every other layer are ordinary. The tests check this independently (top-1 agreement of hand-made
plans run on ONNX Runtime) before asking the search to find it.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from amdinfer.cli import main
from amdinfer.errors import ModelError, OptionError
from amdinfer.quantize import AutoMixedPrecision, Bound, Int8Quantizer, prepare_model
from amdinfer.quantize._budget import float_ladder, parse_budget
from amdinfer.quantize._evaluate import _load_cpu
from amdinfer.testing.models import random_inputs, tiny_cnn


def _planted() -> onnx.ModelProto:
    model = tiny_cnn()
    init = {t.name: t for t in model.graph.initializer}
    b1 = numpy_helper.to_array(init["conv1.bias"]).copy()
    b1[0] = -1000.0  # conv1's channel 0 is <= -999 before its Relu: always 0 after it
    init["conv1.bias"].CopyFrom(numpy_helper.from_array(b1, "conv1.bias"))
    w2 = numpy_helper.to_array(init["conv2.weight"]).copy()
    w2[:, 0] = 1000.0  # multiplies that zero channel: no effect in float, ruins conv2's int8 weight scales
    init["conv2.weight"].CopyFrom(numpy_helper.from_array(w2, "conv2.weight"))
    return model


@pytest.fixture(scope="module")
def planted() -> onnx.ModelProto:
    return _planted()


@pytest.fixture(scope="module")
def calib(planted):
    return [random_inputs(planted, batch=4, seed=s) for s in range(4)]


@pytest.fixture(scope="module")
def held_out(planted):
    return [random_inputs(planted, batch=8, seed=s) for s in range(10, 14)]  # 32 items


def _int8(calib, **kw) -> Int8Quantizer:
    return Int8Quantizer(calibration=calib, progress=False, cache=False, **kw)


def _top1(model, data) -> np.ndarray:
    engine = _load_cpu(model)
    try:
        return np.concatenate([engine.run(d)["logits"].argmax(1) for d in data])
    finally:
        engine.close()


def _agreement(model, planted, data) -> float:
    return float(np.mean(_top1(model, data) == _top1(planted, data)))


def test_the_plant_breaks_int8_and_only_conv2_in_float_mends_it(planted, calib, held_out) -> None:
    """The independent truth the search tests stand on (plans built by hand, not by the search)."""
    groups = {"conv1": ["conv1", "relu1", "pool1"], "conv2": ["conv2", "relu2", "avgpool", "flatten"], "fc": ["fc"]}
    prepared = prepare_model(planted)
    assert _agreement(_int8(calib)._quantize_prepared(prepared), planted, held_out) < 0.5
    for layer, nodes in groups.items():
        got = _agreement(_int8(calib, exclude_nodes=nodes)._quantize_prepared(prepared), planted, held_out)
        assert (got == 1.0) == (layer == "conv2"), (layer, got)


class TestBudgetSearch:
    def test_keeps_exactly_the_planted_layer_and_stops_at_once(self, planted, calib, held_out) -> None:
        amp = AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.99", progress=False)
        result = amp.search(planted)
        assert result.plan == {"conv1": "int8", "conv2": "fp32", "fc": "int8"}
        assert result.verdict is not None and result.verdict.verdict == "PASS" and result.passed
        assert result.verdict.metrics["top1"] >= 0.99 and result.verdict.items == 32
        # step 0: all int8 misses; step 1: conv2 (the most sensitive) to fp32 meets it; nothing more is tried
        assert [(s.moved, s.precision, s.holds) for s in result.steps] == [
            ((), "int8", False),
            (("conv2",), "fp32", True),
        ]
        assert result.steps[0].metrics["top1"] < 0.5
        assert result.sensitivities[0].node == "conv2" and result.kept_nodes == ["conv2"]
        assert result.evaluations == 1 + 3 + 1  # all int8, one sensitivity per layer, one step
        assert any("fp16 brings no speed on a CPU" in n for n in result.notes)
        # the returned model is the plan: independently, conv2 is float and top-1 agrees everywhere
        assert _agreement(result.model, planted, held_out) == 1.0
        doc = json.loads(json.dumps(result.to_dict()))
        assert (
            doc["budget"] == ["top1>=0.99"] and doc["plan"]["conv2"] == "fp32" and doc["verdict"]["verdict"] == "PASS"
        )
        assert "step 1: conv2 -> fp32: top1 1.0000 (budget holds)" in repr(result)
        assert amp.settings()["mixed_precision"]["budget"] == ["top1>=0.99"]

    def test_a_gpu_provider_moves_layers_to_fp16(self, planted, calib, held_out) -> None:
        amp = AutoMixedPrecision(
            _int8(calib), held_out, budget="top1>=0.99", providers=["migraphx", "cpu"], progress=False
        )
        result = amp.search(planted)
        assert result.plan == {"conv1": "int8", "conv2": "fp16", "fc": "int8"} and result.passed
        fp16 = {t.name for t in result.model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
        assert "conv2.weight" in fp16 and not {"conv1.weight", "fc.weight"} & fp16
        assert _agreement(result.model, planted, held_out) == 1.0

    def test_a_budget_already_met_takes_one_step(self, calib, held_out) -> None:
        model = tiny_cnn()
        result = AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.5", progress=False).search(model)
        assert result.passed and len(result.steps) == 1 and result.evaluations == 1
        assert set(result.plan.values()) == {"int8"} and result.sensitivities == []

    def test_an_unreachable_budget_fails_with_the_best_metric(self, planted, calib, held_out) -> None:
        # conv2 is not a candidate: no plan can mend the planted layer
        amp = AutoMixedPrecision(
            _int8(calib), held_out, budget="top1>=0.99", candidates=["conv1", "fc"], progress=False
        )
        result = amp.search(planted)
        assert result.verdict is not None and result.verdict.verdict == "FAIL" and not result.passed
        assert len(result.steps) == 3 and not any(s.holds for s in result.steps)  # all int8, conv1, fc
        best = max(s.metrics["top1"] for s in result.steps)
        assert result.verdict.metrics["top1"] == best < 0.99
        assert any("top1" in r and "0.99" in r for r in result.verdict.reasons)
        with pytest.raises(ModelError, match=r"budget top1>=0\.99 not met"):
            amp.quantize(planted)

    def test_too_little_held_out_data_is_not_judged(self, planted, calib) -> None:
        few = [random_inputs(planted, batch=4, seed=20)]  # 4 items; classify needs 8
        result = AutoMixedPrecision(_int8(calib), few, budget="top1>=0.99", progress=False).search(planted)
        assert result.verdict is not None and result.verdict.verdict == "NOT JUDGED" and not result.passed
        assert result.plan["conv2"] == "fp32"  # the search still ran
        assert "too little held-out data" in result.verdict.reasons[0]

    def test_several_bounds_all_must_hold(self, planted, calib, held_out) -> None:
        result = AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.99, top5>=1", progress=False).search(
            planted
        )
        assert result.passed and result.budget == (Bound.parse("top1>=0.99"), Bound.parse("top5>=1"))
        assert result.verdict is not None and result.verdict.metrics["top5"] == 1.0


class TestBudgetOptions:
    @pytest.mark.parametrize(
        ("budget", "match"),
        [
            ("map5>=0.98", r"budget: bound: got metric 'map5', expected one of \['map50'"),
            ("top1=>0.9", "budget: bound: got 'top1=>0.9', expected METRIC>=VALUE"),
            ("top1<=0.9", "expected '>='"),
            ("top1>=1.5", "expected a fraction"),
            ("top1>=0.9,top1>=0.8", "more than once"),
            ("top1>=0.9,cer<=0.1", "one budget is judged in one task"),
            (0.98, "budget: got 0.98, expected a budget such as 'map50>=0.98'"),
            ([], "budget: got"),
        ],
    )
    def test_bad_budgets_name_the_argument(self, calib, held_out, budget, match) -> None:
        with pytest.raises(OptionError, match=match):
            AutoMixedPrecision(_int8(calib), held_out, budget=budget)

    def test_budget_excludes_tolerance_and_metric_and_needs_int8(self, calib, held_out) -> None:
        from amdinfer.quantize import Fp16Quantizer

        with pytest.raises(OptionError, match=r"tolerance: got 0\.1 together with budget"):
            AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.9", tolerance=0.1)
        with pytest.raises(OptionError, match="metric: got 'top1' together with budget"):
            AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.9", metric="top1")
        with pytest.raises(OptionError, match="expected an Int8Quantizer"):
            AutoMixedPrecision(Fp16Quantizer(), held_out, budget="top1>=0.9")
        with pytest.raises(OptionError, match="tolerance: got None"):
            AutoMixedPrecision(_int8(calib), held_out)
        with pytest.raises(OptionError, match="providers: picks"):
            AutoMixedPrecision(_int8(calib), held_out, tolerance=0.1, providers=["cpu"])
        with pytest.raises(OptionError, match="not metrics of task 'embed'"):
            AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.9", task="embed")
        with pytest.raises(OptionError, match="providers: got"):
            AutoMixedPrecision(_int8(calib), held_out, budget="top1>=0.9", providers="cuda")

    def test_a_detect_budget_on_a_classifier_names_boxes(self, planted, calib, held_out) -> None:
        amp = AutoMixedPrecision(_int8(calib), held_out, budget="map50>=0.98", progress=False)
        with pytest.raises(OptionError, match="not a detector whose outputs decode as YOLO"):
            amp.search(planted)

    def test_parse_and_ladder(self) -> None:
        assert parse_budget([Bound.parse("f1>=0.95"), "map50>=0.9"]) == (
            Bound.parse("f1>=0.95"),
            Bound.parse("map50>=0.9"),
        )
        assert float_ladder(["cpu"])[0] == ("fp32",) and float_ladder(["cuda"])[0] == ("fp16", "fp32")
        assert float_ladder(["ROCMExecutionProvider"])[0] == ("fp16", "fp32")


class TestBudgetCli:
    def _files(self, tmp_path, planted, calib, held_out):
        path = tmp_path / "planted.onnx"
        onnx.save(planted, path)
        c, e = tmp_path / "calib.npz", tmp_path / "eval.npz"
        np.savez(c, input=np.concatenate([d["input"] for d in calib]))
        np.savez(e, input=np.concatenate([d["input"] for d in held_out]))
        return path, c, e

    def test_end_to_end(self, tmp_path, capsys, planted, calib, held_out, quiet_root_logger) -> None:
        path, c, e = self._files(tmp_path, planted, calib, held_out)
        out = tmp_path / "mixed.onnx"
        argv = ["quantize", str(path), "--precision", "int8", "--calibration", str(c), "--eval", str(e)]
        assert main([*argv, "--out", str(out), "--budget", "top1>=0.99", "--json", "-q"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["budget"]["plan"] == {"conv1": "int8", "conv2": "fp32", "fc": "int8"}
        assert len(doc["budget"]["steps"]) == 2 and doc["budget"]["verdict"]["verdict"] == "PASS"
        assert doc["verdict"] == "PASS" and doc["report"]["judgement"]["bounds"] == ["top1>=0.99"]
        assert _agreement(onnx.load(out), planted, held_out) == 1.0  # the written model is the plan
        assert main([*argv, "--out", str(out), "--budget", "top1>=0.99", "-q"]) == 0
        text = capsys.readouterr().out
        assert "step 1: conv2 -> fp32" in text and "fp32 conv2" in text and "PASSED" in text

    def test_bad_flags_are_one_line(self, tmp_path, capsys, planted, calib, held_out, quiet_root_logger) -> None:
        path, c, e = self._files(tmp_path, planted, calib, held_out)
        out = tmp_path / "m.onnx"
        base = ["quantize", str(path), "--calibration", str(c), "--eval", str(e), "--out", str(out), "-q"]
        assert main([*base, "--precision", "fp16", "--budget", "top1>=0.99"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--budget: searches calibrated int8" in err[0] and "--precision fp16" in err[0]
        assert main([*base, "--precision", "int8", "--budget", "top1>0.99"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--budget: bound: got 'top1>0.99'" in err[0]
        assert main([*base, "--precision", "int8", "--providers", "cuda"]) == 1
        assert "--providers: picks" in capsys.readouterr().err
