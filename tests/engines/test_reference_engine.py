"""The reference engine: agreement with ONNX Runtime, the float64 oracle, per-layer outputs, options."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.engines.reference import ReferenceEngine, to_float64
from amdinfer.errors import AmdinferError, InputError, OptionError, UnsupportedOperatorError
from amdinfer.testing.models import random_inputs, resnet50, tiny_cnn, transformer_encoder, yolov8

BUILDERS = {
    "tiny_cnn": lambda: tiny_cnn(),
    "transformer_encoder": lambda: transformer_encoder(seq_len=12),
    "yolov8_128": lambda: yolov8(image_size=128),
    "resnet50_64": lambda: resnet50(image_size=64, num_classes=10),
}


def _ort(model: onnx.ModelProto) -> amdinfer.Engine:
    return amdinfer.load(model, backend="ort", providers=["CPUExecutionProvider"], threads=1)


def _assert_close_scaled(actual: np.ndarray, expected: np.ndarray, rel: float) -> None:
    """Elementwise agreement relative to the tensor's scale (outputs span several orders of magnitude)."""
    scale = float(np.max(np.abs(expected))) or 1.0
    np.testing.assert_allclose(actual, expected, rtol=rel, atol=rel * scale)


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def builder_case(request: pytest.FixtureRequest) -> tuple[str, onnx.ModelProto, dict[str, np.ndarray], dict]:
    model = BUILDERS[request.param]()
    feeds = random_inputs(model, batch=2, seed=3)
    with _ort(model) as ort:
        expected = ort.run(feeds)
    return request.param, model, feeds, expected


class TestAgreesWithOnnxRuntime:
    def test_fp32(self, builder_case) -> None:
        _, model, feeds, expected = builder_case
        with amdinfer.load(model, backend="reference") as engine:
            out = engine.run(feeds)
        assert list(out) == list(expected)
        for name, value in out.items():
            assert value.dtype == expected[name].dtype == np.float32
            _assert_close_scaled(value, expected[name], 1e-5)

    def test_fp64_close_to_fp32_and_ort(self, builder_case) -> None:
        _, model, feeds, expected = builder_case
        with amdinfer.load(model, backend="reference", precision="fp64") as e64:
            out64 = e64.run(feeds)
        with amdinfer.load(model, backend="reference") as e32:
            out32 = e32.run(feeds)
        for name in expected:
            assert out64[name].dtype == np.float32  # cast back to the declared dtype
            _assert_close_scaled(out64[name], out32[name], 1e-5)
            _assert_close_scaled(out64[name], expected[name], 1e-5)

    def test_plain_evaluator_kernels_agree_with_fast_ones(self) -> None:
        model = tiny_cnn()
        feeds = random_inputs(model, batch=2, seed=1)
        with ReferenceEngine(model, fast=False) as slow, ReferenceEngine(model) as fast:
            assert slow.info.settings["fast_kernels"] == []
            assert "Conv" in fast.info.settings["fast_kernels"]
            _assert_close_scaled(fast.run(feeds)["logits"], slow.run(feeds)["logits"], 1e-5)


# ---------------------------------------------------------------------------------------------- fp64
def _precision_probe() -> onnx.ModelProto:
    """A model where float32 rounding is visible at every step, and every fp64 rewrite path is used.

    y = Cast<to=FLOAT>(((x + big) - big) * (three / seven)) + tenths * tenths + zeros + branch
      big: initializer 1e8 (float32 spacing at 1e8 is 8, so float32 loses x entirely);
      three: Constant value_float, seven: Constant value tensor (3/7 rounds in float32);
      tenths: ConstantOfShape 0.1, zeros: ConstantOfShape with its implicit float32 zero;
      branch: If whose branches multiply two float constants (rounds in float32).
    Any float32 left in the float64 model rounds somewhere and breaks agreement with float64 NumPy.
    """
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
    big = numpy_helper.from_array(np.array(1e8, np.float32), "big")

    def branch(name: str, p: float, q: float) -> onnx.GraphProto:
        nodes = [
            helper.make_node("Constant", [], [f"{name}_p"], value_float=p),
            helper.make_node("Constant", [], [f"{name}_q"], value_floats=[q]),
            helper.make_node("Mul", [f"{name}_p", f"{name}_q"], [f"{name}_out"]),
        ]
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [1])
        return helper.make_graph(nodes, name, [], [out])

    nodes = [
        helper.make_node("Add", ["x", "big"], ["a"]),
        helper.make_node("Sub", ["a", "big"], ["b"]),
        helper.make_node("Constant", [], ["three"], value_float=3.0),
        helper.make_node("Constant", [], ["seven"], value=numpy_helper.from_array(np.array(7.0, np.float32))),
        helper.make_node("Div", ["three", "seven"], ["k"]),
        helper.make_node("Mul", ["b", "k"], ["c"]),
        helper.make_node("Cast", ["c"], ["d"], to=TensorProto.FLOAT),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["tenths"], value=numpy_helper.from_array(np.array([0.1], np.float32))
        ),
        helper.make_node("Mul", ["tenths", "tenths"], ["hundredths"]),
        helper.make_node("Add", ["hundredths", "zeros"], ["fill"]),
        helper.make_node("Add", ["d", "fill"], ["e"]),
        helper.make_node(
            "If", ["cond"], ["g"], then_branch=branch("then", 0.1, 0.3), else_branch=branch("else", 0.7, 0.9)
        ),
        helper.make_node("Add", ["e", "g"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "precision_probe", [x, cond], [y], [big])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _probe_numpy64(x: np.ndarray, cond: bool) -> np.ndarray:
    """The probe in float64 NumPy, from the float32 constants' exact values."""
    f = lambda v: np.float64(np.float32(v))  # noqa: E731
    g = f(0.1) * f(0.3) if cond else f(0.7) * f(0.9)
    return ((x.astype(np.float64) + f(1e8)) - f(1e8)) * (f(3.0) / f(7.0)) + f(0.1) * f(0.1) + g


class TestFloat64:
    x = np.random.default_rng(0).random(64, dtype=np.float32)

    @pytest.mark.parametrize("cond", [True, False])
    def test_really_float64_inside(self, cond: bool) -> None:
        feeds = {"x": self.x, "cond": np.array(cond)}
        with ReferenceEngine(_precision_probe(), precision="fp64", keep_fp64=True) as engine:
            assert engine.outputs[0].dtype == np.float64
            y = engine.run(feeds)["y"]
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, _probe_numpy64(self.x, cond), rtol=1e-15, atol=0)

    def test_float32_mode_loses_what_float64_keeps(self) -> None:
        feeds = {"x": self.x, "cond": np.array(True)}
        truth = _probe_numpy64(self.x, True)
        with ReferenceEngine(_precision_probe()) as e32, ReferenceEngine(_precision_probe(), precision="fp64") as e64:
            y32, y64 = e32.run(feeds)["y"], e64.run(feeds)["y"]
        assert y32.dtype == y64.dtype == np.float32
        # float32 rounds x to a multiple of 8 at 1e8 (here: to 0), float64 keeps it.
        assert np.max(np.abs(y32 - truth)) > 0.1
        np.testing.assert_array_equal(y64, truth.astype(np.float32))

    def test_rewrite_promotes_every_float(self) -> None:
        m = to_float64(_precision_probe())
        g = m.graph
        assert g.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
        assert g.input[1].type.tensor_type.elem_type == TensorProto.BOOL
        assert g.output[0].type.tensor_type.elem_type == TensorProto.DOUBLE
        assert g.initializer[0].data_type == TensorProto.DOUBLE
        by_out = {n.output[0]: n for n in g.node}
        assert by_out["d"].attribute[0].i == TensorProto.DOUBLE
        assert {a.name for a in by_out["three"].attribute} == {"value"}
        assert by_out["three"].attribute[0].t.data_type == TensorProto.DOUBLE
        assert by_out["zeros"].attribute[0].t.data_type == TensorProto.DOUBLE
        branch = next(a.g for a in by_out["g"].attribute if a.name == "then_branch")
        assert branch.output[0].type.tensor_type.elem_type == TensorProto.DOUBLE
        assert [n.attribute[0].t.data_type for n in branch.node[:2]] == [TensorProto.DOUBLE] * 2
        assert list(numpy_helper.to_array(branch.node[1].attribute[0].t)) == [np.float64(np.float32(0.3))]
        onnx.checker.check_model(m)
        # the original is untouched
        assert _precision_probe().graph.initializer[0].data_type == TensorProto.FLOAT

    def test_fp16_model_in_fp64_returns_fp16(self) -> None:
        model = _fp16_matmul()
        a = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float16)
        with ReferenceEngine(model, precision="fp64") as engine:
            out = engine.run({"a": a})["y"]
        w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out, (a.astype(np.float64) @ w).astype(np.float16))

    def test_all_outputs_cast_back_to_their_own_dtypes(self) -> None:
        feeds = {"x": self.x, "cond": np.array(False)}
        with ReferenceEngine(_precision_probe(), precision="fp64") as engine:
            outs = engine.run(feeds, outputs="all")
        assert outs["shape"].dtype == np.int64
        assert all(outs[n].dtype == np.float32 for n in ("a", "b", "k", "d", "zeros", "fill", "g", "y"))
        with ReferenceEngine(_precision_probe(), precision="fp64", keep_fp64=True) as engine:
            assert engine.run(feeds, outputs="all")["b"].dtype == np.float64


def _fp16_matmul() -> onnx.ModelProto:
    w = np.random.default_rng(2).standard_normal((8, 3)).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])],
        "fp16_matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT16, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N", 3])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class TestFloat16:
    def test_runs_fp16_model_as_it_is(self) -> None:
        model = _fp16_matmul()
        a = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float16)
        with ReferenceEngine(model, precision="fp16") as engine, _ort(model) as ort:
            assert engine.info.settings["dtype"] == "float16"
            out = engine.run({"a": a})["y"]
            expected = ort.run({"a": a})["y"]
        assert out.dtype == np.float16
        np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3)

    def test_fp16_on_a_float32_model_is_refused(self) -> None:
        with pytest.raises(OptionError, match="no float16 tensors"):
            ReferenceEngine(tiny_cnn(), precision="fp16")


# ---------------------------------------------------------------------------------------------- outputs="all"
class TestAllOutputs:
    def test_names_follow_the_graph(self) -> None:
        model = tiny_cnn()
        feeds = random_inputs(model)
        with ReferenceEngine(model) as engine:
            outs = engine.run(feeds, outputs="all")
            final = engine.run(feeds)
        expected_names = [o for n in model.graph.node for o in n.output]
        assert list(outs) == expected_names
        np.testing.assert_array_equal(outs["logits"], final["logits"])

    def test_intermediate_values_match_onnx_evaluator(self) -> None:
        from onnx.reference import ReferenceEvaluator

        model = transformer_encoder(seq_len=6)
        feeds = random_inputs(model, seed=5)
        with ReferenceEngine(model) as engine:
            outs = engine.run(feeds, outputs="all")
        truth = ReferenceEvaluator(model).run(None, feeds, intermediate=True)
        assert set(outs) <= set(truth)
        for name, value in outs.items():
            np.testing.assert_allclose(value, truth[name], rtol=1e-5, atol=1e-6)

    def test_graph_output_that_is_an_input_is_listed(self) -> None:
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["r"])],
            "passthrough",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [
                helper.make_tensor_value_info("r", TensorProto.FLOAT, [2]),
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
            ],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        with ReferenceEngine(model) as engine:
            outs = engine.run({"x": np.array([-1.0, 2.0], np.float32)}, outputs="all")
        assert list(outs) == ["r", "x"]

    def test_named_intermediate_and_unknown_name(self) -> None:
        model = tiny_cnn()
        feeds = random_inputs(model)
        with ReferenceEngine(model) as engine:
            assert engine.run(feeds, outputs=["pool1"])["pool1"].shape == (1, 16, 16, 16)
            with pytest.raises(InputError, match="nope"):
                engine.run(feeds, outputs=["nope"])


# ---------------------------------------------------------------------------------------------- contract
class TestEngineSurface:
    def test_info(self) -> None:
        with amdinfer.load(tiny_cnn(), backend="reference", precision="fp64") as engine:
            info = engine.info
        assert (info.backend, info.device, info.providers) == ("reference", "cpu", [])
        assert info.runtime_version == onnx.__version__
        assert info.precision == "fp64"
        assert info.settings["dtype"] == "float64"
        assert {"Conv", "MaxPool", "GlobalAveragePool"} <= set(info.settings["fast_kernels"])
        assert engine.supports_all_outputs

    def test_device_is_ignored_with_a_note(self) -> None:
        with ReferenceEngine(tiny_cnn(), device=3) as engine:
            assert engine.info.device == "cpu"
            assert any("device=3" in n for n in engine.info.notes)

    @pytest.mark.parametrize(
        ("options", "match"),
        [
            ({"precision": "bf16"}, "bf16"),
            ({"precision": "int8"}, "quantizer"),
            ({"keep_fp64": True}, "keep_fp64"),
            ({"fast": "yes"}, "fast"),
        ],
    )
    def test_bad_options(self, options: dict, match: str) -> None:
        with pytest.raises(OptionError, match=match):
            ReferenceEngine(tiny_cnn(), **options)

    def test_unknown_option_through_load(self) -> None:
        with pytest.raises(OptionError, match="providers"):
            amdinfer.load(tiny_cnn(), backend="reference", providers=["cpu"])

    def test_unsupported_operator_is_named(self) -> None:
        graph = helper.make_graph(
            [helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")],
            "custom",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
        )
        with pytest.raises(UnsupportedOperatorError) as info:
            amdinfer.load(model, backend="reference")
        assert info.value.operators == ["com.example::FancyOp"]

    def test_kernel_failure_names_the_model(self) -> None:
        graph = helper.make_graph(
            [helper.make_node("Reshape", ["x", "shape"], ["y"])],
            "reshape",
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
                helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        with ReferenceEngine(model) as engine:
            ok = engine.run({"x": np.arange(6, dtype=np.float32), "shape": np.array([2, 3])})["y"]
            assert ok.shape == (2, 3)
            with pytest.raises(AmdinferError, match=r"onnx\.reference failed while running model"):
                engine.run({"x": np.arange(6, dtype=np.float32), "shape": np.array([4, 4])})

    def test_pickle_round_trip(self) -> None:
        model = tiny_cnn()
        feeds = random_inputs(model)
        with ReferenceEngine(model, precision="fp64") as engine:
            clone = pickle.loads(pickle.dumps(engine))
            np.testing.assert_array_equal(clone.run(feeds)["logits"], engine.run(feeds)["logits"])
            assert clone.info.precision == "fp64"
            clone.close()

    def test_batch_buckets(self) -> None:
        model = tiny_cnn()
        feeds = random_inputs(model, batch=3, seed=4)
        with ReferenceEngine(model, batch_buckets=[4]) as bucketed, ReferenceEngine(model) as plain:
            out = bucketed.run(feeds)["logits"]
            assert out.shape == (3, 10)
            _assert_close_scaled(out, plain.run(feeds)["logits"], 1e-6)

    def test_concurrent_runs_agree(self) -> None:
        model = tiny_cnn()
        engine = ReferenceEngine(model)
        inputs = [random_inputs(model, seed=s) for s in range(6)]
        expected = [engine.run(f)["logits"] for f in inputs]
        results: dict[int, np.ndarray] = {}

        def work(i: int) -> None:
            results[i] = engine.run(inputs[i])["logits"]

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, value in enumerate(expected):
            np.testing.assert_array_equal(results[i], value)
        engine.close()


class TestSequenceAndOptional:
    """Sequence and optional graph values in float64 mode: promoted inside, cast back per item."""

    @staticmethod
    def model() -> onnx.ModelProto:
        # s: sequence(tensor(float)); y = ConcatFromSequence(s) * 3 * 0.1 (a tensor, rounded twice in float32);
        # out = SplitToSequence(y) (a sequence)
        seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["K", 2]))
        three = numpy_helper.from_array(np.array(3.0, np.float32), "three")
        tenth = numpy_helper.from_array(np.array(0.1, np.float32), "tenth")
        nodes = [
            helper.make_node("ConcatFromSequence", ["s"], ["joined"], axis=0),
            helper.make_node("Mul", ["joined", "three"], ["t"]),
            helper.make_node("Mul", ["t", "tenth"], ["y"]),
            helper.make_node("SplitToSequence", ["y"], ["out"], axis=0),
        ]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", 2]), helper.make_value_info("out", seq)]
        graph = helper.make_graph(nodes, "seq", [helper.make_value_info("s", seq)], outputs, [three, tenth])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    def feeds(self) -> dict:
        # x * 3 * 0.1 rounds twice in float32, once in float64 then cast back: these values come out differently
        return {
            "s": [np.full((1, 2), 0.04097352549433708, np.float32), np.full((2, 2), 0.8132702112197876, np.float32)]
        }

    def test_fp64_casts_sequence_items_up_and_back(self) -> None:
        feeds = self.feeds()
        x = np.concatenate(feeds["s"])
        wide = (x.astype(np.float64) * 3 * np.float64(np.float32(0.1))).astype(np.float32)
        assert not np.array_equal(wide, x * np.float32(3) * np.float32(0.1))  # the float32 model would differ
        want = list(wide[:, None])
        with ReferenceEngine(self.model(), precision="fp64") as engine:
            got = engine.run(feeds)
        assert isinstance(got["out"], list) and len(got["out"]) == 3
        for g, w in zip(got["out"], want):
            assert g.dtype == np.float32
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(got["y"], np.concatenate(want))

    def test_keep_fp64_reports_and_returns_float64_items(self) -> None:
        with ReferenceEngine(self.model(), precision="fp64", keep_fp64=True) as engine:
            out = engine.outputs[1]
            assert out.is_sequence and out.dtype == np.float64 and out.type_name == "sequence(tensor(float64))"
            got = engine.run(self.feeds())
        want = np.concatenate(self.feeds()["s"]).astype(np.float64) * 3 * np.float64(np.float32(0.1))
        assert [g.dtype for g in got["out"]] == [np.float64] * 3
        np.testing.assert_array_equal(np.concatenate(got["out"]), want)

    def test_fp32_matches_the_plain_evaluator(self) -> None:
        from onnx.reference import ReferenceEvaluator

        feeds = self.feeds()
        want = ReferenceEvaluator(self.model()).run(None, feeds)
        with ReferenceEngine(self.model()) as engine:
            got = engine.run(feeds)
        np.testing.assert_array_equal(got["y"], want[0])
        assert len(got["out"]) == len(want[1])
        for g, w in zip(got["out"], want[1]):
            np.testing.assert_array_equal(g, w)

    def test_an_absent_optional_is_none_in_fp64(self) -> None:
        opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
        graph = helper.make_graph(
            [helper.make_node("OptionalHasElement", ["o"], ["has"])],
            "opt",
            [helper.make_value_info("o", opt)],
            [helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
        with ReferenceEngine(model, precision="fp64") as engine:
            assert bool(engine.run({"o": None})["has"]) is False
            assert bool(engine.run({"o": np.ones(2, np.float32)})["has"]) is True
