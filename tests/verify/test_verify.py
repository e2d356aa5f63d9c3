"""amdinfer.verify: metrics against hand-computed values, the report, engine and per-layer comparison."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import amdinfer
from amdinfer.errors import InputError, OptionError
from amdinfer.verify import (
    DEFAULT_TOLERANCES,
    ComparisonReport,
    LayerReport,
    TensorReport,
    compare,
    compare_engines,
    compare_layers,
    cosine_similarity,
    default_tolerance,
    max_abs_error,
    max_rel_error,
    nonfinite_counts,
    rms_error,
    topk_agreement,
    within_tolerance,
)

nan, inf = float("nan"), float("inf")


def _rms_by_hand(a: list[float], b: list[float]) -> float:
    """MIGraphX's rms_range written out with Python floats."""
    sq = sum((x - y) ** 2 for x, y in zip(a, b))
    mag = max(max(abs(x) for x in a), max(abs(y) for y in b), 2.2250738585072014e-308)
    return math.sqrt(sq) / (math.sqrt(len(a)) * mag)


class TestMetrics:
    def test_rms_hand_values(self) -> None:
        assert rms_error([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 2.0]) == pytest.approx(0.25)
        # the magnitude is the larger |value| of either tensor, sign ignored
        assert rms_error([3.0, -4.0], [0.0, 0.0]) == pytest.approx(5.0 / (math.sqrt(2) * 4.0))
        assert rms_error([0.0, 0.0], [0.0, -8.0]) == pytest.approx(8.0 / (math.sqrt(2) * 8.0))

    def test_rms_matches_formula_on_random_arrays(self) -> None:
        rng = np.random.default_rng(0)
        a = rng.standard_normal(50)
        b = a + 1e-3 * rng.standard_normal(50)
        assert rms_error(a, b) == pytest.approx(_rms_by_hand(a.tolist(), b.tolist()), rel=1e-12)

    def test_rms_zero_range_and_empty(self) -> None:
        assert rms_error(np.zeros(5), np.zeros(5)) == 0.0
        assert rms_error(np.zeros(0), np.zeros(0)) == 0.0

    def test_rms_is_scale_free(self) -> None:
        a, b = np.array([1.0, 2.0, 3.0]), np.array([1.1, 2.0, 2.9])
        assert rms_error(1e6 * a, 1e6 * b) == pytest.approx(rms_error(a, b), rel=1e-12)

    def test_max_abs_and_rel(self) -> None:
        assert max_abs_error([1.0, 2.0, 3.0], [1.0, 2.5, 2.0]) == 1.0
        # |3 - 2| / 2 = 0.5 beats |2 - 2.5| / 2.5 = 0.2; the b == 0 position has no relative error
        assert max_rel_error([1.0, 2.0, 3.0, 7.0], [1.0, 2.5, 2.0, 0.0]) == pytest.approx(0.5)
        assert max_rel_error([1.0], [0.0]) == 0.0

    def test_metrics_skip_nonfinite_positions(self) -> None:
        a, b = [1.0, nan, inf, 2.0], [1.5, nan, inf, 2.0]
        assert max_abs_error(a, b) == 0.5
        assert rms_error(a, b) == pytest.approx(_rms_by_hand([1.0, 2.0], [1.5, 2.0]))

    def test_cosine(self) -> None:
        assert cosine_similarity([1.0, 0.0], [0.0, 3.0]) == 0.0
        assert cosine_similarity([1.0, 2.0], [2.0, 4.0]) == pytest.approx(1.0)
        assert cosine_similarity([1.0, 2.0], [-1.0, -2.0]) == pytest.approx(-1.0)
        assert cosine_similarity([3.0, 4.0], [4.0, 3.0]) == pytest.approx(24.0 / 25.0)
        assert cosine_similarity([0.0, 0.0], [0.0, 0.0]) == 1.0
        assert cosine_similarity([0.0, 0.0], [1.0, 0.0]) == 0.0

    def test_within_tolerance_boundary_is_inclusive(self) -> None:
        ok = within_tolerance([1.5, 1.5000001, 3.0, -3.0], [1.0, 1.0, 2.0, -2.0], atol=0.5, rtol=0.25)
        # 0.5 <= 0.5 + 0.25;  0.5000001 <= 0.75;  1.0 <= 0.5 + 0.5;  1.0 <= 0.5 + 0.5 (|b| for negatives)
        assert ok.tolist() == [True, True, True, True]
        assert within_tolerance([1.5000001], [1.0], atol=0.5, rtol=0.0).tolist() == [False]

    def test_within_tolerance_nonfinite(self) -> None:
        ok = within_tolerance([nan, nan, inf, inf, 1.0], [nan, 1.0, inf, -inf, inf], atol=1.0, rtol=1.0)
        assert ok.tolist() == [True, False, True, False, False]

    def test_nonfinite_counts(self) -> None:
        counts = nonfinite_counts([nan, nan, inf, -inf, 1.0, 2.0], [nan, 0.0, inf, inf, nan, -inf])
        assert counts == {
            "nan_actual": 2,
            "nan_expected": 2,
            "nan_mismatch": 2,  # positions 1 and 4
            "inf_actual": 2,
            "inf_expected": 3,
            "inf_mismatch": 2,  # -inf vs inf, 2.0 vs -inf (inf vs nan counts as a NaN mismatch)
        }

    def test_topk(self) -> None:
        a = np.array([[0.1, 0.7, 0.2, 0.0], [0.4, 0.3, 0.2, 0.1]])
        b = np.array([[0.2, 0.6, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]])
        assert topk_agreement(a, b, k=1) == 0.5  # row 0 agrees on class 1, row 1 does not
        assert topk_agreement(a, b, k=2) == pytest.approx((1 / 2 + 0 / 2) / 2)
        assert topk_agreement(a, b, k=4) == 1.0
        assert topk_agreement(a.T, b.T, k=1, axis=0) == 0.5

    def test_topk_ties_go_to_lower_index(self) -> None:
        assert topk_agreement([[1.0, 1.0, 0.0]], [[1.0, 0.5, 0.0]], k=1) == 1.0
        assert topk_agreement([[1.0, 1.0, 0.0]], [[0.5, 1.0, 0.0]], k=1) == 0.0

    @pytest.mark.parametrize("k", [0, 4, 1.5, True])
    def test_topk_rejects_bad_k(self, k: object) -> None:
        with pytest.raises(OptionError, match="k: got"):
            topk_agreement([[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]], k=k)  # type: ignore[arg-type]

    def test_shape_mismatch_and_non_numeric(self) -> None:
        with pytest.raises(InputError, match=r"shape \(2,\)"):
            max_abs_error([1.0, 2.0], [1.0, 2.0, 3.0])
        with pytest.raises(InputError, match="real numeric"):
            rms_error(np.array(["a"]), np.array(["a"]))


class TestDefaults:
    def test_migraphx_driver_values(self) -> None:
        # src/driver/verify.cpp: tolerance{} defaults, and the 16-bit branch of get_tolerances.
        assert default_tolerance("fp32").to_dict() == {"rms": 1e-3, "atol": 1e-3, "rtol": 1e-3}
        assert default_tolerance("float16").to_dict() == {"rms": 8e-2, "atol": 4e-2, "rtol": 4e-2}
        assert default_tolerance("bf16") == default_tolerance("fp16")
        # fp64's bound sits far below one float32 rounding step
        assert DEFAULT_TOLERANCES["fp64"].rms < float(np.finfo(np.float32).eps) / 100

    def test_unknown_precision(self) -> None:
        with pytest.raises(OptionError, match="precision"):
            default_tolerance("fp7")


class TestCompare:
    def test_array_report(self) -> None:
        a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
        b = np.array([1.0, 2.0, 3.0, 2.0], np.float32)
        r = compare(a, b)
        assert isinstance(r, TensorReport)
        assert (r.passed, r.max_abs, r.max_rel, r.rms) == (False, 2.0, 1.0, pytest.approx(0.25))
        assert r.worst_index == (3,) and (r.worst_actual, r.worst_expected) == (4.0, 2.0)
        assert r.mismatches == 1 and r.size == 4
        assert any(x.startswith("rms") for x in r.reasons) and any("elements outside" in x for x in r.reasons)

    def test_passes_within_fp32_defaults(self) -> None:
        b = np.linspace(-1, 1, 101)
        r = compare(b + 5e-4, b)
        assert r.passed and r.precision == "fp32"
        assert not compare(b + 5e-3, b).passed

    def test_fp16_arrays_get_fp16_tolerances(self) -> None:
        b = np.linspace(-1, 1, 101).astype(np.float16)
        a = (b.astype(np.float32) + 1e-2).astype(np.float16)
        assert compare(a, b).precision == "fp16" and compare(a, b).passed
        assert not compare(a, b, precision="fp32").passed

    def test_fp64_precision_catches_float32_rounding(self) -> None:
        b = np.random.default_rng(0).standard_normal(100)
        assert compare(b + 1e-14, b, precision="fp64").passed
        assert not compare(b.astype(np.float32).astype(np.float64), b, precision="fp64").passed

    def test_elementwise_off_judges_by_rms_only(self) -> None:
        b = np.ones(10_000)
        a = b.copy()
        a[0] += 0.05  # rms = 0.05 / (100 * 1.05) ~ 4.8e-4 < 1e-3, but |a-b| > 1e-3 + 1e-3
        assert not compare(a, b).passed
        r = compare(a, b, elementwise=False)
        assert r.passed and r.mismatches == 1

    def test_nan_positions_must_match(self) -> None:
        assert compare([1.0, nan], [1.0, nan]).passed
        r = compare([1.0, nan], [1.0, 1.0])
        assert not r.passed and r.nan_mismatch == 1 and r.mismatches == 1
        assert any("NaN" in x for x in r.reasons)

    def test_inf_must_be_equal(self) -> None:
        assert compare([inf, -inf], [inf, -inf]).passed
        r = compare([inf, 1.0], [-inf, 1.0])
        assert not r.passed and r.inf_mismatch == 1

    def test_integers_agree_exactly_unless_told(self) -> None:
        a, b = np.array([1, 2, 3]), np.array([1, 2, 4], np.int32)
        r = compare(a, b)
        assert not r.passed and r.precision == "exact" and r.atol == 0.0
        assert compare(a, b, atol=1, rms_tol=1).passed

    def test_kind_and_shape_mismatch_are_errors(self) -> None:
        with pytest.raises(InputError, match="dtype"):
            compare(np.array([1.0]), np.array([1]))
        with pytest.raises(InputError, match=r"output 'output': actual has shape \(2,\), expected shape \(1, 2\)"):
            compare(np.zeros(2), np.zeros((1, 2)))
        with pytest.raises(InputError, match="two arrays or two dicts"):
            compare({"a": np.zeros(2)}, np.zeros(2))

    def test_dict_report_per_output_and_worst(self) -> None:
        actual = {"logits": np.array([1.0, 2.0]), "boxes": np.array([10.0, 20.0, 30.0])}
        expected = {"logits": np.array([1.0, 2.0]), "boxes": np.array([10.0, 21.0, 30.0])}
        r = compare(actual, expected)
        assert isinstance(r, ComparisonReport)
        assert r["logits"].passed and r["logits"].rms == 0.0
        assert not r["boxes"].passed and r.failed == ["boxes"] and not r.passed
        assert r.max_abs == 1.0 and r.rms == r["boxes"].rms == pytest.approx(_rms_by_hand([10, 20, 30], [10, 21, 30]))
        assert list(r) == ["logits", "boxes"] and len(r) == 2
        with pytest.raises(KeyError, match="scores"):
            r["scores"]

    def test_per_output_tolerances(self) -> None:
        actual = {"a": np.array([1.0, 2.0]), "b": np.array([1.0, 2.0])}
        expected = {"a": np.array([1.1, 2.0]), "b": np.array([1.1, 2.0])}
        r = compare(actual, expected, atol={"a": 0.2}, rms_tol={"a": 0.1})
        assert r["a"].passed and not r["b"].passed
        assert (r["a"].atol, r["b"].atol) == (0.2, 1e-3)
        with pytest.raises(OptionError, match="'c'"):
            compare(actual, expected, atol={"c": 1.0})
        with pytest.raises(OptionError, match="number >= 0"):
            compare(actual, expected, atol=-1.0)

    def test_outputs_selection_and_name_mismatch(self) -> None:
        actual = {"a": np.zeros(2), "b": np.zeros(2)}
        r = compare(actual, {"a": np.zeros(2)}, outputs=["a"])
        assert list(r) == ["a"]
        with pytest.raises(InputError, match="missing in expected: \\['b'\\]"):
            compare(actual, {"a": np.zeros(2)})

    def test_topk_reported(self) -> None:
        r = compare(np.array([[0.1, 0.7, 0.2]]), np.array([[0.2, 0.6, 0.1]]), topk=1, elementwise=False, rms_tol=1.0)
        assert r.topk_agreement == 1.0 and "top-1 agreement" in repr(r)

    def test_report_serialisation_and_display(self) -> None:
        r = compare({"<x>": np.array([1.0, nan])}, {"<x>": np.array([2.0, 1.0])})
        d = r.to_dict()
        json.dumps(d, allow_nan=False)
        assert d["outputs"]["<x>"]["passed"] is False and d["failed"] == ["<x>"]
        text = repr(r)
        assert "FAIL" in text and "<x>" in text and "max_abs" in text
        html = r._repr_html_()
        assert "<table>" in html and "&lt;x&gt;" in html and "<x>" not in html
        assert "<table>" in r["<x>"]._repr_html_()
        with pytest.raises(AssertionError, match="FAIL"):
            r.assert_passed()
        compare(np.ones(2), np.ones(2)).assert_passed()


# ---------------------------------------------------------------------------------------------- engines
def _ort(model: onnx.ModelProto) -> amdinfer.Engine:
    return amdinfer.load(model, backend="ort", providers=["CPUExecutionProvider"], threads=1)


def _with_scaled_weight(model: onnx.ModelProto, name: str, factor: float) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(factor), name))
            return out
    raise AssertionError(f"no initializer {name}")


@pytest.fixture(scope="module")
def cnn() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    from amdinfer.testing.models import random_inputs, tiny_cnn

    model = tiny_cnn()
    return model, random_inputs(model, batch=2, seed=7)


class TestCompareEngines:
    def test_ort_agrees_with_fp64_reference(self, cnn) -> None:
        model, feeds = cnn
        with _ort(model) as ort, amdinfer.load(model, backend="reference", precision="fp64") as ref:
            r = compare_engines(ort, ref, feeds, topk=3)
        assert r.passed and r.precision == "fp32"
        assert r["logits"].rms < 1e-5 and r["logits"].topk_agreement == 1.0

    def test_detects_a_changed_weight(self, cnn) -> None:
        model, feeds = cnn
        bad = _with_scaled_weight(model, "fc.weight", 1.05)
        with _ort(bad) as ort, amdinfer.load(model, backend="reference") as ref:
            r = compare_engines(ort, ref, feeds)
        assert not r.passed and r.rms > 1e-3

    def test_mismatched_engines_are_errors(self, cnn) -> None:
        from amdinfer.testing.models import transformer_encoder

        model, feeds = cnn
        relu = onnx.helper.make_model(
            onnx.helper.make_graph(
                [onnx.helper.make_node("Relu", ["x"], ["logits"])],
                "relu",
                [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 10])],
                [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["N", 10])],
            ),
            opset_imports=[onnx.helper.make_opsetid("", 17)],
        )
        with _ort(model) as ort, amdinfer.load(transformer_encoder(), backend="reference") as other:
            with pytest.raises(InputError, match=r"engines disagree on input 'input'.*\(N, S, 64\)"):
                compare_engines(ort, other, feeds)
            with amdinfer.load(relu, backend="reference") as named_x:
                with pytest.raises(InputError, match=r"different inputs: a takes \['input'\], b takes \['x'\]"):
                    compare_engines(ort, named_x, feeds)
            with pytest.raises(InputError, match="no output"):
                compare_engines(ort, ort, feeds, outputs=["boxes"])
        with pytest.raises(OptionError, match="expected an amdinfer Engine"):
            compare_engines(model, model, feeds)


class TestPerLayer:
    def test_names_the_node_with_the_changed_weight(self, cnn) -> None:
        model, feeds = cnn
        bad = _with_scaled_weight(model, "conv2.weight", 1.02)
        with _ort(bad) as ort, amdinfer.load(model, backend="reference", precision="fp64") as ref:
            report = compare_layers(ort, ref, feeds)
        assert isinstance(report, LayerReport) and not report.passed
        first = report.first_divergence
        assert (first.node, first.op_type, first.tensor) == ("conv2", "Conv", "conv2")
        agreed = [e.tensor for e in report.layers[: first.index]]
        assert agreed == ["conv1", "relu1", "pool1"] and all(report[t].passed for t in agreed)
        assert "first divergence at node 'conv2' (Conv" in repr(report)
        json.dumps(report.to_dict())
        assert "conv2" in report._repr_html_()

    def test_names_a_perturbed_kernel(self, cnn, monkeypatch: pytest.MonkeyPatch) -> None:
        """A wrong fast kernel (Relu leaking 1% of negatives) is caught at its first use."""
        import amdinfer.reference as reference
        from amdinfer.engines.reference import ReferenceEngine

        base = {c.__name__: c for c in reference.fast_ops()}["Relu"]

        class Relu(base):  # type: ignore[misc, valid-type]
            def _run(self, x):  # type: ignore[override]
                return (np.where(x > 0, x, 0.01 * x).astype(x.dtype),)

        monkeypatch.setattr(reference, "fast_ops", lambda: [Relu])
        model, feeds = cnn
        broken = ReferenceEngine(model)
        monkeypatch.undo()
        with broken, _ort(model) as ort:
            report = compare_engines(broken, ort, feeds, per_layer=True)
        assert report.first_divergence.node == "relu1"
        assert report["conv1"].passed

    def test_all_layers_agree_and_default_reference(self, cnn) -> None:
        model, feeds = cnn
        with _ort(model) as ort:
            report = compare_layers(ort, None, feeds)
        assert report.passed and report.first_divergence is None
        assert [e.tensor for e in report.layers] == [o for n in model.graph.node for o in n.output]

    def test_model_instead_of_engine(self, cnn) -> None:
        model, feeds = cnn
        with amdinfer.load(model, backend="reference", precision="fp64") as ref:
            assert compare_layers(model, ref, feeds).passed

    def test_engine_without_intermediates_is_refused(self, cnn) -> None:
        from amdinfer.engines.reference import ReferenceEngine

        class Opaque(ReferenceEngine):
            supports_all_outputs = False

        model, feeds = cnn
        with Opaque(model) as opaque, ReferenceEngine(model) as ref:
            with pytest.raises(OptionError, match="intermediate tensors"):
                compare_layers(opaque, ref, feeds)
