"""amdinfer.quantize: mechanics on the random-weight builders and hand-built exporter-style models.

The truth each test checks against: onnx's ReferenceEvaluator (``oracle``), NumPy, hand-computed values,
or a brute-force search (mixed precision). Accuracy on a trained model is in test_quantize_trained.py.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import sys

import numpy as np
import onnx
import pytest
from _oracle import oracle
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.engines._migraphx_quant import migraphx_plan
from amdinfer.engines.ort._quant import migraphx_ep_options
from amdinfer.errors import InputError, ModelError, OptionError, StageError
from amdinfer.quantize import (
    DEFAULT_FP16_OP_BLOCK_LIST,
    AccuracyTolerance,
    AutoMixedPrecision,
    Fp16Quantizer,
    Int8Quantizer,
    MigraphxQuantPlan,
    QuantizationReport,
    box_agreement,
    evaluate,
    layer_groups,
    prepare_model,
    tail_nodes,
    weighted_layers,
)
from amdinfer.testing.models import random_inputs, tiny_cnn, transformer_encoder
from amdinfer.verify import rms_error

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("quiet_root_logger")]


@pytest.fixture(scope="module")
def cnn() -> onnx.ModelProto:
    return tiny_cnn(seed=3)


@pytest.fixture(scope="module")
def calib(cnn) -> list[dict[str, np.ndarray]]:
    return [random_inputs(cnn, batch=4, seed=s) for s in range(6)]


@pytest.fixture(scope="module")
def held_out(cnn) -> list[dict[str, np.ndarray]]:
    return [random_inputs(cnn, batch=8, seed=s) for s in (100, 101)]


def _int8(calibration, **kw) -> Int8Quantizer:
    kw.setdefault("progress", False)
    kw.setdefault("cache", False)
    return Int8Quantizer(calibration=calibration, **kw)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with amdinfer.load(model, backend="ort", providers=["cpu"]) as engine:
        return engine.run(feeds)


def _paddle_style(opset: int = 11) -> onnx.ModelProto:
    """A Paddle2ONNX-style model: weights in Constant nodes, opset 11, Clip bounds as inputs, -1 and '?' dims."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 8).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32)

    def const(name, arr):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))

    nodes = [
        const("w1", w1),
        const("b1", b1),
        const("w2", w2),
        const("lo", np.array(0.0, np.float32)),
        const("hi", np.array(6.0, np.float32)),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),  # unnamed nodes, as old exporters write
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Sigmoid", ["c2"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", "?"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, "?", "?"])
    model = helper.make_model(
        helper.make_graph(nodes, "paddle_style", [x], [y]), opset_imports=[helper.make_opsetid("", opset)]
    )
    model.ir_version = 7
    return model


# ------------------------------------------------------------------------------------------ preparation
_spec = importlib.util.find_spec


class TestPrepareModel:
    def test_folds_constants_upgrades_opset_names_nodes_and_fixes_dims(self):
        model = _paddle_style()
        prepared = prepare_model(model)
        ops = [n.op_type for n in prepared.graph.node]
        assert "Constant" not in ops
        assert {t.name for t in prepared.graph.initializer} >= {"w1", "b1", "w2"}
        assert next(o.version for o in prepared.opset_import if o.domain == "") == 13
        assert all(n.name for n in prepared.graph.node)
        dims = prepared.graph.input[0].type.tensor_type.shape.dim
        assert [d.dim_param or d.dim_value for d in dims] == ["N", 3, "x_dim2", "x_dim3"]
        onnx.checker.check_model(prepared)
        # Same function as the original (onnx's evaluator on the original is the truth).
        x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 10, 12)).astype(np.float32)
        np.testing.assert_allclose(_ort(prepared, {"x": x})["y"], oracle(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)

    def test_leaves_the_input_untouched(self):
        model = _paddle_style()
        before = model.SerializeToString()
        prepare_model(model)
        assert model.SerializeToString() == before

    def test_unreadable_by_onnxruntime_is_a_model_error_saying_what_to_do(self):
        model = tiny_cnn()
        model.graph.node[1].domain = "com.example.custom"
        model.opset_import.append(helper.make_opsetid("com.example.custom", 1))
        with pytest.raises(ModelError, match=r"quantization pre-processing failed.*(onnxsim|re-export)"):
            prepare_model(model)

    def test_symbolic_shape_inference_giving_up_falls_back_to_onnx_shape_inference(self, monkeypatch):
        # With sympy installed, ONNX Runtime's symbolic shape inference runs and gives up on some graphs (the
        # YOLOv8 builder on an H200 machine). The result must not depend on whether sympy is installed: the
        # preparation retries with ONNX's own shape inference. Simulated: symbolic inference always gives up.
        shape_inference = pytest.importorskip("onnxruntime.quantization.shape_inference")
        real = shape_inference.quant_pre_process
        calls = []

        def picky(src, dst, *, skip_optimization, skip_symbolic_shape):
            calls.append(skip_symbolic_shape)
            if not skip_symbolic_shape:
                raise Exception("Incomplete symbolic shape inference")
            return real(src, dst, skip_optimization=skip_optimization, skip_symbolic_shape=True)

        monkeypatch.setattr(shape_inference, "quant_pre_process", picky)
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "sympy" else _spec(name))
        model = _paddle_style()
        prepared = prepare_model(model)
        assert calls == [False, True]
        x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 10, 12)).astype(np.float32)
        np.testing.assert_allclose(_ort(prepared, {"x": x})["y"], oracle(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)

    def test_other_pre_processing_failures_are_not_retried(self, monkeypatch):
        shape_inference = pytest.importorskip("onnxruntime.quantization.shape_inference")

        def broken(src, dst, *, skip_optimization, skip_symbolic_shape):
            raise Exception("something else")

        monkeypatch.setattr(shape_inference, "quant_pre_process", broken)
        with pytest.raises(ModelError, match="something else"):
            prepare_model(_paddle_style())

    def test_layers_and_tail(self):
        model = tiny_cnn()
        assert weighted_layers(model) == ["conv1", "conv2", "fc"]
        assert tail_nodes(model, 0) == []
        assert tail_nodes(model, 1) == ["fc"]
        assert tail_nodes(model, 2) == ["conv2", "relu2", "avgpool", "flatten", "fc"]
        assert tail_nodes(model, 99)[0] == "conv1"
        with pytest.raises(OptionError, match="keep_last_n"):
            tail_nodes(model, -1)


# ------------------------------------------------------------------------------------------ fp16
def _fp16_initializers(model: onnx.ModelProto) -> set[str]:
    return {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16}


class TestFp16Quantizer:
    def test_converts_weights_and_keeps_io_types(self, cnn, held_out):
        m16 = Fp16Quantizer().quantize(cnn)
        onnx.checker.check_model(m16)
        assert _fp16_initializers(m16) >= {"conv1.weight", "conv2.weight", "fc.weight"}
        assert [i.type.tensor_type.elem_type for i in m16.graph.input] == [TensorProto.FLOAT]
        assert [o.type.tensor_type.elem_type for o in m16.graph.output] == [TensorProto.FLOAT]
        got = _ort(m16, held_out[0])["logits"]
        want = oracle(cnn, held_out[0])["logits"]
        assert got.dtype == np.float32
        assert rms_error(got, want) < 2e-3  # fp16 rounding (eps 9.8e-4) through three layers
        assert not np.array_equal(got, want)  # really computed in fp16

    def test_keep_io_types_false_makes_fp16_io(self, cnn):
        m16 = Fp16Quantizer(keep_io_types=False).quantize(cnn)
        assert [i.type.tensor_type.elem_type for i in m16.graph.input] == [TensorProto.FLOAT16]

    def test_node_block_list_and_keep_last_n(self, cnn):
        m = Fp16Quantizer(node_block_list=["conv1"]).quantize(cnn)
        assert "conv1.weight" not in _fp16_initializers(m) and "conv2.weight" in _fp16_initializers(m)
        m = Fp16Quantizer(keep_last_n=1).quantize(cnn)
        assert "fc.weight" not in _fp16_initializers(m) and "conv2.weight" in _fp16_initializers(m)

    def test_blocked_first_layer_reads_the_fp32_input(self, cnn, held_out):
        # ORT's converter casts inputs to fp16 and back for blocked nodes; the round trip is removed.
        names = [n.name for n in cnn.graph.node]
        m = Fp16Quantizer(node_block_list=names).quantize(cnn)
        np.testing.assert_array_equal(_ort(m, held_out[0])["logits"], _ort(cnn, held_out[0])["logits"])

    def test_default_op_block_list_keeps_softmax_and_reductions_in_fp32(self):
        assert {"Softmax", "ReduceMean", "Pow", "Exp", "LayerNormalization"} <= set(DEFAULT_FP16_OP_BLOCK_LIST)
        from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

        assert set(DEFAULT_OP_BLOCK_LIST) <= set(DEFAULT_FP16_OP_BLOCK_LIST)
        model = transformer_encoder()
        m16 = Fp16Quantizer().quantize(model)
        types = {vi.name: vi.type.tensor_type.elem_type for vi in m16.graph.value_info}
        types.update({i.name: i.type.tensor_type.elem_type for i in m16.graph.input})
        for node in m16.graph.node:
            if node.op_type in ("Softmax", "LayerNormalization"):
                assert types.get(node.input[0]) == TensorProto.FLOAT, node.name
        # Without the block list the same ops run in fp16.
        m16_all = Fp16Quantizer(op_block_list=[]).quantize(model)
        types = {vi.name: vi.type.tensor_type.elem_type for vi in m16_all.graph.value_info}
        softmax = [n for n in m16_all.graph.node if n.op_type == "Softmax"]
        assert softmax and all(types.get(n.input[0]) == TensorProto.FLOAT16 for n in softmax)

    def test_paddle_style_model(self):
        model = _paddle_style()
        x = np.random.default_rng(2).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
        got = _ort(Fp16Quantizer().quantize(model), {"x": x})["y"]
        assert rms_error(got, oracle(model, {"x": x})["y"]) < 2e-3

    def test_options_are_checked(self, cnn):
        with pytest.raises(OptionError, match=r"node_block_list.*not in the model"):
            Fp16Quantizer(node_block_list=["nope"]).quantize(cnn)
        with pytest.raises(OptionError, match="op_block_list"):
            Fp16Quantizer(op_block_list="Softmax")
        with pytest.raises(OptionError, match="keep_last_n"):
            Fp16Quantizer(keep_last_n=-1)
        with pytest.raises(OptionError, match="max_finite_val"):
            Fp16Quantizer(max_finite_val=1e6)
        with pytest.raises(TypeError):
            Fp16Quantizer(keep_ios=True)

    def test_native_mappings_report_what_they_cannot_honour(self):
        plan = migraphx_plan(Fp16Quantizer(), None)
        assert isinstance(plan, MigraphxQuantPlan)
        assert (plan.kind, plan.ins_names, plan.calibration) == ("fp16", ["all"], None)
        assert any("op_block_list" in u for u in plan.unhonoured)
        q = Fp16Quantizer(op_block_list=[], node_block_list=["conv1"], keep_last_n=1)
        opts, unhonoured = migraphx_ep_options(q, None, None)
        assert opts == {"migraphx_fp16_enable": "1"}
        assert any("node_block_list" in u for u in unhonoured) and any("keep_last_n" in u for u in unhonoured)
        assert migraphx_plan(Fp16Quantizer(op_block_list=[]), None).unhonoured == []

    def test_load_with_quantizer(self, cnn, held_out):
        with amdinfer.load(cnn, backend="ort", providers=["cpu"], quantizer=Fp16Quantizer()) as engine:
            assert engine.info.precision == "fp16"
            got = engine.run(held_out[0])["logits"]
        assert rms_error(got, oracle(cnn, held_out[0])["logits"]) < 2e-3

    def test_repr_and_settings(self):
        q = Fp16Quantizer(keep_last_n=2)
        assert "keep_last_n=2" in repr(q)
        assert q.settings_hash() == Fp16Quantizer(keep_last_n=2).settings_hash() != Fp16Quantizer().settings_hash()


# ------------------------------------------------------------------------------------------ int8
def _consumers(model: onnx.ModelProto, tensor: str) -> list[str]:
    return [n.op_type for n in model.graph.node if tensor in n.input]


def _table_entries(path: str) -> dict[str, float]:
    """The MIGraphX EP's calibration table (ONNX Runtime's flatbuffers): tensor name -> value."""
    from onnxruntime.quantization.CalTableFlatBuffers.TrtTable import TrtTable

    with open(path, "rb") as f:
        t = TrtTable.GetRootAsTrtTable(bytearray(f.read()), 0)
    return {t.Dict(i).Key().decode(): float(t.Dict(i).Value()) for i in range(t.DictLength())}


def _two_width_model_and_feeds() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    """x [1, 2, 4, W] -> r = Relu(x), n = Neg(x), m = Relu(n); samples of widths 3 (x in [-1, 6]) and 5
    (x in [-9, 2]), interleaved."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, "W"])
    outs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, 2, 4, "W"]) for k in ("r", "m")]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Neg", ["x"], ["n"]),
        helper.make_node("Relu", ["n"], ["m"]),
    ]
    graph = helper.make_graph(nodes, "two_widths", [x], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(7)
    feeds = []
    for i in range(6):
        width, lo, hi = (3, -1.0, 6.0) if i % 2 == 0 else (5, -9.0, 2.0)
        arr = rng.uniform(lo, hi, (1, 2, 4, width)).astype(np.float32)
        arr.flat[0], arr.flat[1] = lo, hi  # each group reaches its bounds
        feeds.append({"x": arr})
    return model, feeds


def _max_per_tensor(feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """Each tensor's largest value over all samples, by NumPy (the value ONNX Runtime's table keeps)."""
    xs = [f["x"] for f in feeds]
    tensors = {
        "x": xs,
        "r": [np.maximum(a, 0) for a in xs],
        "n": [-a for a in xs],
        "m": [np.maximum(-a, 0) for a in xs],
    }
    return {k: max(float(a.max()) for a in arrs) for k, arrs in tensors.items()}


class TestInt8Quantizer:
    def test_qdq_model_close_to_float(self, cnn, calib, held_out):
        q8 = _int8(calib).quantize(cnn)
        onnx.checker.check_model(q8)
        ops = [n.op_type for n in q8.graph.node]
        assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
        got = _ort(q8, held_out[0])["logits"]
        want = oracle(cnn, held_out[0])["logits"]
        assert rms_error(got, want) < 0.05  # 8-bit steps (1/255 of each range) through three layers
        assert not np.allclose(got, want, rtol=1e-4, atol=1e-5)

    def test_per_channel_weights_and_types(self, cnn, calib):
        q8 = _int8(calib, per_channel=True).quantize(cnn)
        inits = {t.name: t for t in q8.graph.initializer}
        dq = [n for n in q8.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("conv2.weight")]
        assert dq, "conv2's weight has a DequantizeLinear"
        assert numpy_helper.to_array(inits[dq[0].input[1]]).shape == (32,)  # one scale per output channel
        assert inits[dq[0].input[0]].data_type == TensorProto.INT8
        q8 = _int8(calib, per_channel=False, activation_type="int8", symmetric_activations=True).quantize(cnn)
        ql = [n for n in q8.graph.node if n.op_type == "QuantizeLinear"]
        zps = [numpy_helper.to_array({t.name: t for t in q8.graph.initializer}[n.input[2]]) for n in ql]
        assert all(z.dtype == np.int8 and np.all(z == 0) for z in zps)  # symmetric int8 activations

    def test_qoperator_format(self, cnn, calib):
        ops = {n.op_type for n in _int8(calib, format="qoperator").quantize(cnn).graph.node}
        assert "QLinearConv" in ops

    def test_sigmoid_and_softmax_stay_float_by_default(self, calib):
        model = _paddle_style(opset=13)
        data = [np.random.default_rng(s).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for s in range(4)]
        q8 = _int8(data).quantize(model)
        sig = next(n for n in q8.graph.node if n.op_type == "Sigmoid")
        assert _consumers(q8, sig.output[0]) == []  # the graph output, not re-quantized
        assert "QuantizeLinear" not in _consumers(q8, sig.output[0])
        q8_all = _int8(data, exclude_op_types=[]).quantize(model)
        sig = next(n for n in q8_all.graph.node if n.op_type == "Sigmoid")
        producer = {o: n.op_type for n in q8_all.graph.node for o in n.output}
        assert producer[sig.input[0]] == "DequantizeLinear"

    def test_exclude_nodes_and_keep_last_n(self, cnn, calib):
        q8 = _int8(calib, exclude_nodes=["conv1"]).quantize(cnn)
        w = [n for n in q8.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("conv1.weight")]
        assert w == []
        q8 = _int8(calib, keep_last_n=1).quantize(cnn)
        assert not any(n.op_type == "DequantizeLinear" and n.input[0].startswith("fc.weight") for n in q8.graph.node)
        with pytest.raises(OptionError, match=r"exclude_nodes.*not in the model"):
            _int8(calib, exclude_nodes=["nope"]).quantize(cnn)

    def test_paddle_style_model(self):
        model = _paddle_style()
        data = [np.random.default_rng(s).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for s in range(4)]
        x = np.random.default_rng(9).uniform(-1, 1, (2, 3, 20, 24)).astype(np.float32)
        got = _ort(_int8(data).quantize(model), {"x": x})["y"]
        assert rms_error(got, oracle(model, {"x": x})["y"]) < 0.05

    def test_calibration_is_required(self, cnn):
        with pytest.raises(OptionError, match="int8 needs calibration data"):
            Int8Quantizer(calibration=None)
        with pytest.raises(InputError, match="no samples"):
            _int8([]).quantize(cnn)
        with pytest.raises(OptionError, match="calibration"):
            _int8(42).quantize(cnn)

    def test_generator_is_read_once_and_batch_axis_added(self, cnn):
        seen = []

        def gen():
            for s in range(3):
                seen.append(s)
                yield random_inputs(cnn, seed=s)["input"][0]  # (3, 32, 32): no batch axis

        q = _int8(gen())
        q.quantize(cnn)
        q.quantize(cnn)
        assert seen == [0, 1, 2]
        feeds = q.calibration_feeds(cnn)
        assert [f["input"].shape for f in feeds] == [(1, 3, 32, 32)] * 3

    def test_images_through_preprocessors(self, cnn):
        class Wrapped:  # like a pipeline stage returning an object with .array
            def __init__(self, array):
                self.array = array

        def to_chw(img):
            return img.transpose(2, 0, 1)

        def normalize(x):
            return Wrapped((x / 255.0).astype(np.float32))

        images = [np.random.default_rng(s).integers(0, 256, (32, 32, 3), dtype=np.uint8) for s in range(3)]
        q = _int8(images, preprocess=[to_chw, normalize])
        feeds = q.calibration_feeds(cnn)
        np.testing.assert_allclose(feeds[1]["input"][0], images[1].transpose(2, 0, 1) / 255.0, rtol=1e-6)
        assert "QuantizeLinear" in {n.op_type for n in q.quantize(cnn).graph.node}

    def test_amdinfer_preprocess_stages(self, cnn):
        from amdinfer.preprocess import Cast, HwcToChw, Normalize, Resize

        images = [np.random.default_rng(s).integers(0, 256, (40, 50, 3), dtype=np.uint8) for s in range(2)]
        stages = [Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw(), Cast("float32")]
        feeds = _int8(images, preprocess=stages).calibration_feeds(cnn)
        assert [f["input"].shape for f in feeds] == [(1, 3, 32, 32)] * 2
        assert 0.0 <= feeds[0]["input"].min() and feeds[0]["input"].max() <= 1.0

    def test_failing_stage_is_named(self, cnn):
        def broken(img):
            raise ValueError("bad pixel")

        with pytest.raises(StageError, match="broken failed on sample 0: bad pixel"):
            _int8([np.zeros((4, 4, 3))], preprocess=[broken]).quantize(cnn)

    def test_wrong_dtype_and_names_are_input_errors(self, cnn):
        with pytest.raises(InputError, match=r"dtype float64, expected float32.*astype"):
            _int8([np.zeros((1, 3, 32, 32))]).quantize(cnn)
        with pytest.raises(InputError, match="expected exactly"):
            _int8([{"images": np.zeros((1, 3, 32, 32), np.float32)}]).quantize(cnn)

    def test_progress_with_tqdm_or_logging(self, cnn, calib, capsys, caplog, monkeypatch):
        if importlib.util.find_spec("tqdm") is not None:
            _int8(calib, progress=True).quantize(cnn)
            assert "calibrating" in capsys.readouterr().err
        monkeypatch.setitem(sys.modules, "tqdm", None)
        monkeypatch.setitem(sys.modules, "tqdm.auto", None)
        with caplog.at_level(logging.INFO, logger="amdinfer.quantize"):
            _int8(calib, progress=True).quantize(cnn)
        assert any("calibrating int8: 6/6" in r.getMessage() for r in caplog.records)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="amdinfer.quantize"):
            _int8(calib, progress=False).quantize(cnn)
        assert not any("calibrating" in r.getMessage() for r in caplog.records)

    def test_cache_hit_and_key(self, cnn, calib, tmp_path, monkeypatch):
        calls = []
        original = Int8Quantizer._run_quantize_static

        def spy(self, *args, **kwargs):
            calls.append(1)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(Int8Quantizer, "_run_quantize_static", spy)
        first = _int8(calib, cache=tmp_path).quantize(cnn)
        second = _int8(calib, cache=tmp_path).quantize(cnn)
        assert len(calls) == 1
        assert first.SerializeToString() == second.SerializeToString()
        _int8(calib[:3], cache=tmp_path).quantize(cnn)  # other calibration data: another key
        _int8(calib, cache=tmp_path, per_channel=False).quantize(cnn)  # other settings: another key
        assert len(calls) == 3

    def test_migraphx_plan(self, cnn, calib):
        plan = migraphx_plan(_int8(calib), cnn)
        assert plan.kind == "int8" and plan.ins_names == ["dot", "convolution"]
        assert len(plan.calibration) == 6 and plan.calibration[0]["input"].shape == (4, 3, 32, 32)
        assert any("per_channel" in u for u in plan.unhonoured)
        plan = migraphx_plan(_int8([calib[0]["input"]], op_types=["MatMul", "Relu"], exclude_nodes=["fc"]), cnn)
        assert plan.ins_names == ["dot"]
        assert any("Relu" in u for u in plan.unhonoured) and any("exclude_nodes" in u for u in plan.unhonoured)

    def test_ort_migraphx_options_write_a_calibration_table(self, cnn, calib, tmp_path):
        opts, _ = migraphx_ep_options(_int8(calib), cnn, tmp_path)
        assert opts["migraphx_int8_enable"] == "1"
        assert opts["migraphx_int8_use_native_calibration_table"] == "0"
        table = opts["migraphx_int8_calibration_table_name"]
        assert table.endswith("calibration.flatbuffers")
        entries = _table_entries(table)
        # The input's range is the largest calibration value (NumPy is the truth).
        assert entries["input"] == pytest.approx(max(float(c["input"].max()) for c in calib), rel=1e-6)
        assert "logits" in entries

    @pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
    def test_ort_migraphx_calibration_table_with_samples_of_two_widths(self, method, tmp_path):
        """Crops of two widths on a dynamic-width model: one calibrator pass per width, merged into one table.
        Width 3 holds the largest x, width 5 the most negative, so the table's x (max x) comes from the first
        group and its n = -x from the second; minmax and percentile=100 keep each tensor's maximum over all
        samples, which NumPy computes. Before, percentile and entropy refused samples of several shapes."""
        model, feeds = _two_width_model_and_feeds()
        truth = _max_per_tensor(feeds)
        quantizer = _int8(feeds, method=method, percentile=100.0)
        opts, _ = migraphx_ep_options(quantizer, model, tmp_path)
        entries = _table_entries(opts["migraphx_int8_calibration_table_name"])
        assert set(entries) == set(truth)
        if method == "entropy":  # its thresholds are its own optimum: within each tensor's range
            assert all(0.0 < entries[k] <= truth[k] * (1 + 1e-6) for k in truth), (entries, truth)
        else:  # percentile=100 reads the top edge of ONNX Runtime's merged 2048-bin histogram: within 0.1 %
            rel = 1e-6 if method == "minmax" else 1e-3
            assert entries == pytest.approx(truth, rel=rel)
            assert (entries["x"], entries["n"]) == pytest.approx((6.0, 9.0), rel=rel)  # one from each width

    def test_load_with_quantizer(self, cnn, calib, held_out):
        with amdinfer.load(cnn, backend="ort", providers=["cpu"], quantizer=_int8(calib)) as engine:
            assert engine.info.precision == "int8"
            got = engine.run(held_out[0])["logits"]
        assert rms_error(got, oracle(cnn, held_out[0])["logits"]) < 0.05

    def test_options_are_checked(self):
        with pytest.raises(OptionError, match="method"):
            _int8([1], method="kl")
        with pytest.raises(OptionError, match="activation_type"):
            _int8([1], activation_type="int4")
        with pytest.raises(OptionError, match="percentile"):
            _int8([1], percentile=10)
        with pytest.raises(OptionError, match="cache"):
            _int8([1], cache=3)
        with pytest.raises(TypeError):
            Int8Quantizer(calibration=[1], per_chanel=True)


# ------------------------------------------------------------------------------------------ report
class TestBoxAgreement:
    def test_hand_computed(self):
        ref = [np.array([[0, 0, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 2]])]
        # first matches (IoU 81/100), second has the wrong class, third is extra
        q = [np.array([[1, 1, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 3], [50, 50, 60, 60, 0.5, 1]])]
        p, r, f1, n = box_agreement(q, ref)
        assert (p, r, n) == (1 / 3, 1 / 2, 2)
        assert f1 == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))

    def test_iou_threshold_and_one_to_one(self):
        ref = [np.array([[0, 0, 10, 10]])]
        assert box_agreement([np.array([[5, 0, 15, 10]])], ref)[2] == 0.0  # IoU 1/3
        assert box_agreement([np.array([[5, 0, 15, 10]])], ref, iou=0.3)[2] == 1.0
        p, r, _, _ = box_agreement([np.array([[0, 0, 10, 10], [0, 0, 10, 10]])], ref)
        assert (p, r) == (0.5, 1.0)  # a duplicate cannot match the same box twice
        assert box_agreement([np.zeros((0, 4))], [np.zeros((0, 4))]) == (1.0, 1.0, 1.0, 0)
        assert box_agreement([(np.array([[0, 0, 10, 10]]), np.array([7]))], [(ref[0], np.array([7]))])[2] == 1.0


def _box_model(shift: float) -> onnx.ModelProto:
    """'Detector' whose output rows are x1, y1, x2, y2, score, class; quantized stand-in shifts the boxes."""
    offset = numpy_helper.from_array(np.array([shift, 0, shift, 0, 0, 0], np.float32), "offset")
    x = helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["N", 3, 6])
    y = helper.make_tensor_value_info("det", TensorProto.FLOAT, ["N", 3, 6])
    g = helper.make_graph([helper.make_node("Add", ["rows", "offset"], ["det"])], "boxes", [x], [y], [offset])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


class TestEvaluate:
    def test_classifier_report(self, cnn, calib, held_out):
        report = evaluate(_int8(calib), cnn, held_out)
        assert isinstance(report, QuantizationReport)
        assert report.task == "classify" and report.precision == "int8" and report.samples == 2
        want = np.concatenate([oracle(cnn, f)["logits"] for f in held_out])
        with amdinfer.load(_int8(calib).quantize(cnn), backend="ort", providers=["cpu"]) as e:
            got = np.concatenate([e.run(f)["logits"] for f in held_out])
        top1 = report.metrics["top1"]
        assert top1 == pytest.approx(np.mean(got.argmax(1) == want.argmax(1)))
        in_top5 = [w in np.argsort(-g)[:5] for g, w in zip(got, want.argmax(1))]
        assert report.metrics["top5"] == pytest.approx(np.mean(in_top5))
        assert report.outputs["logits"].rms == pytest.approx(rms_error(got, want), rel=1e-3)
        assert report.tolerance == AccuracyTolerance(top1=0.97)
        assert report.judgement.items == 16
        assert report.passed == (top1 >= 0.97) and report.verdict in ("PASS", "FAIL")
        text = repr(report)
        assert "top1 " in text and "classify" in text and report.verdict in text
        json.dumps(report.to_dict())

    def test_failing_verdict_names_the_bound(self, cnn, calib, held_out):
        report = evaluate(_int8(calib), cnn, held_out, tolerance=AccuracyTolerance(rms=1e-6))
        assert not report.passed
        assert report.failures and "rms" in report.failures[-1] and "logits" in report.failures[-1]
        assert "FAIL" in repr(report)
        with pytest.raises(OptionError, match="f1"):
            evaluate(_int8(calib), cnn, held_out, tolerance=AccuracyTolerance(f1=0.9))  # not a classify metric

    def test_detector_report(self):
        rows = np.array([[[0, 0, 10, 10, 0.9, 0], [20, 0, 30, 10, 0.8, 0], [40, 0, 80, 10, 0.7, 1]]], np.float32)

        def boxes(outputs):
            return list(outputs["det"])

        ref = amdinfer.load(_box_model(0.0), backend="ort", providers=["cpu"])
        # a shift of 4 moves the 10-wide boxes below IoU 0.5 (6/14) but keeps the 40-wide one (36/44)
        q = amdinfer.load(_box_model(4.0), backend="ort", providers=["cpu"])
        report = evaluate(q, ref, [rows] * 8, boxes=boxes)  # 8 images, 24 float boxes: enough to judge
        assert report.task == "detect" and report.task_reason == "boxes= given"
        m = report.metrics
        assert (m["precision"], m["recall"], report.judgement.answers) == (1 / 3, 1 / 3, (24, 24))
        # class 1's one box matches in every image (AP 1), class 0's never (AP 0): mAP 0.5
        assert m["map50"] == pytest.approx(0.5)
        assert report.verdict == "FAIL" and "map50" in report.failures[0]
        # (N, k, 6) rows x1 y1 x2 y2 score class are the end-to-end YOLO layout: they decode without boxes=
        decoded = evaluate(q, ref, [rows] * 8, task="detect")
        assert decoded.metrics == m and decoded.task_reason == "named"
        few = evaluate(q, ref, [rows] * 3, boxes=boxes)
        assert few.verdict == "NOT JUDGED" and not few.passed and "3 items" in few.failures[0]

    def test_detect_needs_a_yolo_layout_or_boxes(self, cnn, held_out):
        with pytest.raises(OptionError, match="YOLO layout"):
            evaluate(Fp16Quantizer(), cnn, held_out, task="detect")  # (N, 10) logits: boxes= is needed
        with pytest.raises(OptionError, match="boxes="):
            evaluate(Fp16Quantizer(), cnn, held_out, task="classify", boxes=lambda o: [])

    def test_per_layer_and_plot(self, cnn, calib, held_out, tmp_path):
        report = evaluate(_int8(calib), cnn, held_out, per_layer=True)
        nodes = [e.node for e in report.layers]
        # QDQ drops the Relu after each Conv (its range is the Conv's output range), so the Conv outputs
        # are named after the Relus in the quantized model: tensors are compared by name.
        assert {"relu1", "relu2", "fc"} <= set(nodes)
        assert nodes.index("relu1") < nodes.index("relu2") < nodes.index("fc")  # graph order
        assert all(e.rms >= 0 for e in report.layers)
        assert report.worst_layers(1)[0].rms == max(e.rms for e in report.layers)
        if importlib.util.find_spec("matplotlib") is None:
            pytest.skip("matplotlib is not installed: the plot is optional")
        fig = report.plot(tmp_path / "layers.png")
        assert (tmp_path / "layers.png").stat().st_size > 1000 and fig.axes

    def test_plot_needs_per_layer(self, cnn, held_out):
        report = evaluate(Fp16Quantizer(), cnn, held_out)
        with pytest.raises(OptionError, match="per_layer=True"):
            report.plot()

    def test_fp64_reference_engine(self, cnn, held_out):
        ref = amdinfer.load(cnn, backend="reference", precision="fp64")
        report = evaluate(Fp16Quantizer(), ref, held_out, task="generic")
        assert report.passed and report.outputs["logits"].rms < 2e-3
        assert report.metrics["cosine"] == report.outputs["logits"].cosine > 0.999


# ------------------------------------------------------------------------------------------ mixed precision
def _error_keeping(cnn, calib, data, kept) -> float:
    """Independent recomputation: quantize with the layers ``kept`` in float, run on ORT, RMS vs the oracle."""
    groups = layer_groups(cnn)
    q8 = _int8(calib, exclude_nodes=[n for layer in kept for n in groups[layer]]).quantize(cnn)
    got = np.concatenate([_ort(q8, f)["logits"] for f in data])
    want = np.concatenate([oracle(cnn, f)["logits"] for f in data])
    return rms_error(got, want)


class TestAutoMixedPrecision:
    def test_int8_smallest_set_meeting_the_tolerance(self, cnn, calib, held_out):
        full = _error_keeping(cnn, calib, held_out, [])
        tol = full / 2
        amp = AutoMixedPrecision(_int8(calib), held_out, tolerance=tol, progress=False)
        result = amp.search(cnn)
        assert result.passed and result.error <= tol < result.full_error
        assert result.full_error == pytest.approx(full, rel=1e-3)
        # verified independently, and no smaller set of weighted layers meets the tolerance (brute force)
        # (abs: with every layer kept the error is float rounding, ORT against the float64 oracle, ~1e-7)
        kept = _error_keeping(cnn, calib, held_out, result.kept_nodes)
        assert kept == pytest.approx(result.error, rel=1e-3, abs=1e-6)
        for size in range(len(result.kept)):
            for subset in itertools.combinations(["conv1", "conv2", "fc"], size):
                assert _error_keeping(cnn, calib, held_out, subset) > tol, subset
        sens = [s.sensitivity for s in result.sensitivities]
        assert sens == sorted(sens, reverse=True) and len(sens) == 3
        assert [k.node for k in result.kept] == [s.node for s in result.sensitivities if s.node in result.kept_nodes]
        json.dumps(result.to_dict())
        assert "keep" in repr(result)

    def test_keep_mode_and_top1_metric(self, cnn, calib, held_out):
        amp = AutoMixedPrecision(_int8(calib), held_out, tolerance=0.0, metric="top1", mode="keep", progress=False)
        result = amp.search(cnn)
        assert result.passed and result.error == 0.0 and result.mode == "keep"

    def test_fp16_with_a_custom_metric(self, cnn, held_out):
        def max_abs(q, r):
            return float(max(np.max(np.abs(a["logits"] - b["logits"])) for a, b in zip(q, r)))

        base = max_abs([_ort(Fp16Quantizer().quantize(cnn), f) for f in held_out], [_ort(cnn, f) for f in held_out])
        # fp16 rounding of the activations between layers costs as much as the layers themselves, so every
        # node is a candidate: keeping all of them in fp32 reaches zero error.
        amp = AutoMixedPrecision(
            Fp16Quantizer(), held_out, tolerance=base / 4, metric=max_abs, candidates="all", progress=False
        )
        result = amp.search(cnn)
        assert result.passed and result.kept
        m = Fp16Quantizer(node_block_list=result.kept_nodes).quantize(cnn)
        assert max_abs([_ort(m, f) for f in held_out], [_ort(cnn, f) for f in held_out]) <= base / 4

    def test_unreachable_tolerance(self, cnn, calib, held_out):
        amp = AutoMixedPrecision(_int8(calib), held_out, tolerance=1e-12, candidates=["fc"], progress=False)
        result = amp.search(cnn)
        assert not result.passed and result.float_error > 1e-12
        with pytest.raises(ModelError, match="even with all 1 candidate layers in float"):
            amp.quantize(cnn)

    def test_keeping_every_layer_group_is_exact(self, cnn, calib, held_out):
        assert layer_groups(cnn) == {
            "conv1": ["conv1", "relu1", "pool1"],
            "conv2": ["conv2", "relu2", "avgpool", "flatten"],
            "fc": ["fc"],
        }
        amp = AutoMixedPrecision(_int8(calib), held_out, tolerance=0.0, progress=False)
        result = amp.search(cnn)
        assert result.passed and result.float_error == 0.0 and len(result.kept) == 3

    def test_as_a_quantizer_for_load(self, cnn, calib, held_out):
        amp = AutoMixedPrecision(_int8(calib), held_out, tolerance=1.0, progress=False)
        with amdinfer.load(cnn, backend="ort", providers=["cpu"], quantizer=amp) as engine:
            assert engine.info.precision == "int8"
        assert amp.result is not None and amp.result.kept == []  # everything quantized already meets 1.0
        plan = migraphx_plan(amp, cnn)
        assert plan.kind == "int8" and any("mixed precision" in u for u in plan.unhonoured)

    def test_options_are_checked(self, cnn, calib, held_out):
        with pytest.raises(OptionError, match="tolerance"):
            AutoMixedPrecision(_int8(calib), held_out, tolerance=-1)
        with pytest.raises(OptionError, match="mode"):
            AutoMixedPrecision(_int8(calib), held_out, tolerance=0.1, mode="both")
        with pytest.raises(OptionError, match="metric"):
            AutoMixedPrecision(_int8(calib), held_out, tolerance=0.1, metric="box_f1")
        with pytest.raises(OptionError, match="boxes="):  # a detect metric on a model that is no YOLO detector
            AutoMixedPrecision(_int8(calib), held_out, tolerance=0.1, metric="f1", progress=False).search(cnn)
        with pytest.raises(OptionError, match="has not"):
            AutoMixedPrecision(_int8(calib), held_out, tolerance=0.1, task="classify", metric="cer")
        with pytest.raises(OptionError, match="candidates"):
            AutoMixedPrecision(_int8(calib), held_out, tolerance=0.1, candidates=["nope"], progress=False).search(cnn)
