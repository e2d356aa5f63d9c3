"""The reference engine's execution plan: in place, kept buffers and BatchNorm folding change no result."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from amdinfer.engines.reference import ReferenceEngine

EPS = 1e-3


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = {
        "w1": rng.standard_normal((4, 3, 3, 3)),
        "b1": rng.standard_normal(4),
        "w2": rng.standard_normal((4, 4, 1, 1)),
    }
    for k in ("1", "2"):
        p[f"s{k}"] = rng.uniform(0.5, 1.5, 4)
        p[f"t{k}"] = rng.standard_normal(4)
        p[f"m{k}"] = rng.standard_normal(4)
        p[f"v{k}"] = rng.uniform(0.5, 2.0, 4)
    return {k: v.astype(np.float32) for k, v in p.items()}


def _block() -> onnx.ModelProto:
    """x -> Conv3x3+bias -> BN -> Relu = r;  r -> Conv1x1 -> BN -> + r -> Relu = y;  Flatten(r) = f.

    ``r`` feeds three nodes (no one may overwrite it) and reaches the caller through Flatten's view.
    """
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s1", "t1", "m1", "v1"], ["n1"], epsilon=EPS),
        helper.make_node("Relu", ["n1"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["c2"]),
        helper.make_node("BatchNormalization", ["c2", "s2", "t2", "m2", "v2"], ["n2"], epsilon=EPS),
        helper.make_node("Add", ["r", "n2"], ["s"]),  # r first: the one input Add must not overwrite
        helper.make_node("Relu", ["s"], ["y"]),
        helper.make_node("Flatten", ["r"], ["f"]),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in _params().items()]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6]),
            helper.make_tensor_value_info("f", TensorProto.FLOAT, ["N", 144]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _numpy64(x: np.ndarray) -> dict[str, np.ndarray]:
    """The block in float64 NumPy, op by op as ONNX defines them (direct convolution sums)."""
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    x = x.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c1 = np.zeros((x.shape[0], 4, 6, 6))
    for i in range(3):
        for j in range(3):
            c1 += np.einsum("nchw,mc->nmhw", xp[:, :, i : i + 6, j : j + 6], p["w1"][:, :, i, j])
    c1 += p["b1"][:, None, None]

    eps = np.float64(np.float32(EPS))  # ONNX float attributes are float32

    def bn(v: np.ndarray, k: str) -> np.ndarray:
        m, var, s, t = (p[f"{q}{k}"].reshape(-1, 1, 1) for q in "mvst")
        return (v - m) / np.sqrt(var + eps) * s + t

    n1 = bn(c1, "1")
    r = np.maximum(n1, 0)
    c2 = np.einsum("nchw,mc->nmhw", r, p["w2"][:, :, 0, 0])
    s = r + bn(c2, "2")
    return {"c1": c1, "n1": n1, "r": r, "c2": c2, "s": s, "y": np.maximum(s, 0), "f": r.reshape(len(r), -1)}


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3, 6, 6)).astype(np.float32)


def _close(actual: np.ndarray, expected: np.ndarray, rel: float) -> None:
    scale = float(np.max(np.abs(expected))) or 1.0
    np.testing.assert_allclose(actual, expected, rtol=rel, atol=rel * scale)


class TestPlan:
    def test_folds_batchnorm_in_fp32_only(self) -> None:
        with ReferenceEngine(_block()) as e32, ReferenceEngine(_block(), precision="fp64") as e64:
            assert e32.info.settings["batchnorm_folded"] == 2
            assert e64.info.settings["batchnorm_folded"] == 0
        with ReferenceEngine(_block(), fast=False) as plain:
            assert "batchnorm_folded" not in plain.info.settings

    @pytest.mark.parametrize("precision", ["fp32", "fp64"])
    def test_outputs_match_numpy(self, precision: str) -> None:
        x = _x(0)
        truth = _numpy64(x)
        with ReferenceEngine(_block(), precision=precision, keep_fp64=precision == "fp64") as engine:
            out = engine.run(x)
        rel = 1e-15 if precision == "fp64" else 1e-5
        for name in ("y", "f"):
            _close(out[name], truth[name], rel)

    def test_fp64_intermediates_agree_to_1e_15(self) -> None:
        x = _x(1)
        truth = _numpy64(x)
        with ReferenceEngine(_block(), precision="fp64", keep_fp64=True) as engine:
            out = engine.run(x, outputs="all")
        for name, value in truth.items():
            assert out[name].dtype == np.float64
            _close(out[name], value, 1e-15)

    def test_results_survive_later_runs_and_feeds_stay_untouched(self) -> None:
        x1, x2 = _x(2), _x(3)
        kept = x1.copy()
        with ReferenceEngine(_block()) as engine:
            first = engine.run(x1)
            snapshot = {k: v.copy() for k, v in first.items()}
            second = engine.run(x2)
            again = engine.run(x1)
        np.testing.assert_array_equal(x1, kept)
        for name in first:
            np.testing.assert_array_equal(first[name], snapshot[name])  # not overwritten by later runs
            np.testing.assert_array_equal(again[name], snapshot[name])  # same answer every time
            assert not np.shares_memory(first[name], again[name])
            assert not np.array_equal(second[name], snapshot[name])

    def test_requested_intermediates_are_not_overwritten_or_folded(self) -> None:
        x = _x(4)
        truth = _numpy64(x)
        with ReferenceEngine(_block()) as engine:
            default = engine.run(x)
            named = engine.run(x, outputs=["c1", "n1", "c2", "s", "y"])
            everything = engine.run(x, outputs="all")
            back = engine.run(x)
        for name in ("c1", "n1", "c2", "s"):
            _close(named[name], truth[name], 1e-5)
            np.testing.assert_array_equal(named[name], everything[name])
        names = ["c1", "n1", "r", "c2", "n2", "s", "y"]  # f may be a view of r (Flatten)
        for i, a in enumerate(names):
            assert not any(np.shares_memory(everything[a], everything[b]) for b in names[i + 1 :]), a
        for name in default:
            _close(default[name], truth[name], 1e-5)
            np.testing.assert_array_equal(back[name], default[name])

    def test_direct_evaluator_use_is_safe(self) -> None:
        x = _x(5)
        with ReferenceEngine(_block()) as engine:
            engine.run(x)
            evaluator = engine.evaluator
            everything = evaluator.run(None, {"x": x}, intermediate=True)
            first = evaluator.run(["y"], {"x": x})[0]
            evaluator.run(["y"], {"x": _x(6)})
        truth = _numpy64(x)
        for name in ("c1", "n1", "r", "c2", "s", "y"):
            _close(everything[name], truth[name], 1e-5)
        _close(first, truth["y"], 1e-5)  # not a kept buffer that the next call overwrote

    def test_silu_and_scaling_in_place_leave_inputs_and_weights_alone(self) -> None:
        k = np.array([0.5, 2.0, -1.0], np.float32).reshape(1, 3, 1)
        graph = helper.make_graph(
            [
                helper.make_node("Sigmoid", ["x"], ["s"]),
                helper.make_node("Mul", ["x", "s"], ["m"]),  # s is dead after this: written in place
                helper.make_node("Mul", ["m", "k"], ["y"]),  # m is dead: written in place; k is a weight
            ],
            "silu",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4])],
            [numpy_helper.from_array(k, "k")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        x = np.random.default_rng(7).standard_normal((2, 3, 4)).astype(np.float32)
        kept = x.copy()
        truth = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64))) * k
        with ReferenceEngine(model) as engine:
            first = engine.run(x)["y"]
            second = engine.run(x)["y"]
            named = engine.run(x, outputs=["s", "m", "y"])
            weight = engine.evaluator.rt_inits_["k"]
        np.testing.assert_array_equal(x, kept)
        np.testing.assert_array_equal(weight, k)
        np.testing.assert_allclose(first, truth, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(second, first)
        assert not np.shares_memory(first, second)
        np.testing.assert_allclose(named["s"], 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
        np.testing.assert_allclose(named["m"], truth / k, rtol=1e-6, atol=1e-7)
