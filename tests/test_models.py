"""Tests of amdinfer.testing.models: structure, determinism, sizes against published numbers, numerics."""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from amdinfer.testing import models

# Small configurations: cheap enough for the reference evaluator and for building several times.
SMALL: dict[str, Callable[..., onnx.ModelProto]] = {
    "tiny_cnn": lambda seed=0: models.tiny_cnn(seed),
    "transformer_encoder": lambda seed=0: models.transformer_encoder(seed),
    "yolov8": lambda seed=0: models.yolov8(seed, image_size=64, num_classes=8),
    "yolov5": lambda seed=0: models.yolov5(seed, image_size=64, num_classes=8),
    "resnet50": lambda seed=0: models.resnet50(seed, image_size=32, num_classes=10),
    "resnet50_folded": lambda seed=0: models.resnet50(seed, image_size=32, num_classes=10, batchnorm=False),
}


@functools.cache
def small(name: str) -> onnx.ModelProto:
    """The seed-0 small model, built once per session; callers must not modify it."""
    return SMALL[name]()


def dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> list:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns the intermediate tensors ``names``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    return copy


def weight(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def attributes(model: onnx.ModelProto, node_name: str) -> dict[str, object]:
    node = next(n for n in model.graph.node if n.name == node_name)
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def parameter_count(model: onnx.ModelProto) -> int:
    """Learned parameters: weights and biases, not batch-norm running statistics nor graph constants."""
    return sum(math.prod(t.dims) for t in model.graph.initializer if t.name.endswith((".weight", ".bias")))


def conv_gemm_macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of Conv and Gemm per image, from static shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shapes = {vi.name: dims(vi) for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type == "Conv":
            total += math.prod(shapes[node.output[0]][1:]) * math.prod(inits[node.input[1]][1:])
        elif node.op_type == "Gemm":
            total += math.prod(inits[node.input[1]])
    return total


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# --------------------------------------------------------------------------------------------------------
# Structure and determinism
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_checker_opset_and_dynamic_batch(name: str) -> None:
    model = small(name)
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert model.ir_version == onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])).ir_version
    for value_info in [*model.graph.input, *model.graph.output]:
        assert dims(value_info)[0] == "N"
    assert len({n.name for n in model.graph.node}) == len(model.graph.node)


@pytest.mark.parametrize("name", [n for n in SMALL if n != "resnet50_folded"])
def test_same_seed_same_bytes_other_seed_other_bytes(name: str) -> None:
    first = small(name).SerializeToString()
    assert SMALL[name](seed=0).SerializeToString() == first
    assert SMALL[name](seed=1).SerializeToString() != first


def test_options_are_keyword_only_and_checked() -> None:
    with pytest.raises(TypeError):
        models.yolov8(image_sise=320)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        models.tiny_cnn(0, 32)  # type: ignore[misc]
    with pytest.raises(TypeError, match="image_size"):
        models.resnet50(image_size=224.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batchnorm"):
        models.resnet50(batchnorm=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiple of 32"):
        models.yolov5(image_size=100)
    with pytest.raises(ValueError, match="num_heads"):
        models.transformer_encoder(d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="width"):
        models.yolov8(width=0.0)
    with pytest.raises(ValueError, match="seed"):
        models.tiny_cnn(-1)


def test_full_size_output_shapes_by_shape_inference() -> None:
    expected = {
        "resnet50": (models.resnet50(num_classes=1000), "input", ["N", 3, 224, 224], "logits", ["N", 1000]),
        "yolov8": (models.yolov8(), "images", ["N", 3, 640, 640], "output0", ["N", 84, 8400]),
        "yolov5": (models.yolov5(), "images", ["N", 3, 640, 640], "output0", ["N", 25200, 85]),
    }
    for model, in_name, in_dims, out_name, out_dims in expected.values():
        assert [(i.name, dims(i)) for i in model.graph.input] == [(in_name, in_dims)]
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        assert [(o.name, dims(o)) for o in inferred.graph.output] == [(out_name, out_dims)]


def test_transformer_dims() -> None:
    symbolic = models.transformer_encoder()
    assert dims(symbolic.graph.input[0]) == ["N", "S", 64]
    assert dims(symbolic.graph.output[0]) == ["N", "S", 64]
    fixed = models.transformer_encoder(seq_len=12, d_model=32, num_heads=2, num_layers=2)
    assert dims(fixed.graph.input[0]) == ["N", 12, 32]
    assert Counter(n.op_type for n in fixed.graph.node)["LayerNormalization"] == 4


# --------------------------------------------------------------------------------------------------------
# Sizes against published numbers (independent truths)
# --------------------------------------------------------------------------------------------------------


def test_resnet50_matches_torchvision_parameters_and_macs() -> None:
    model = models.resnet50()
    # torchvision.models.resnet50: 25,557,032 parameters, 4.09 GFLOPS (multiply-adds) at 224.
    assert parameter_count(model) == 25_557_032
    assert round(conv_gemm_macs(model) / 1e9, 2) == 4.09
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops == {
        "Conv": 53,
        "BatchNormalization": 53,
        "Relu": 49,
        "Add": 16,
        "MaxPool": 1,
        "GlobalAveragePool": 1,
        "Flatten": 1,
        "Gemm": 1,
    }
    names = {t.name for t in model.graph.initializer}
    assert {"conv1.weight", "bn1.running_var", "layer1.0.conv1.weight", "layer1.0.downsample.0.weight"} <= names
    assert {"layer1.0.downsample.1.bias", "layer4.2.bn3.weight", "fc.weight", "fc.bias"} <= names
    # v1.5: the stride sits on the 3x3 convolution.
    assert attributes(model, "layer2.0.conv2")["strides"] == [2, 2]
    assert attributes(model, "layer2.0.conv1")["strides"] == [1, 1]
    assert attributes(model, "conv1")["pads"] == [3, 3, 3, 3]


def test_resnet50_folded_and_num_classes_parameters() -> None:
    folded = models.resnet50(batchnorm=False, num_classes=10)
    # Folding drops gamma and beta (2 per BN channel) for a conv bias (1 per channel); ResNet-50 has
    # 26,560 BN channels. The fc shrinks from 1000 to 10 outputs of 2048 inputs.
    assert parameter_count(folded) == 25_557_032 - 26_560 - 990 * 2049
    assert "BatchNormalization" not in {n.op_type for n in folded.graph.node}


def test_yolo_parameters_and_flops_match_ultralytics_n_models() -> None:
    # Ultralytics fused summaries: YOLOv8n 3,151,904 parameters, 8.7 GFLOPs; YOLOv5n 1,867,405, 4.5 GFLOPs.
    v8, v5 = models.yolov8(), models.yolov5()
    assert parameter_count(v8) == 3_151_904
    assert parameter_count(v5) == 1_867_405
    assert round(2 * conv_gemm_macs(v8) / 1e9, 1) == 8.7
    assert round(2 * conv_gemm_macs(v5) / 1e9, 1) == 4.5


def test_yolo_export_conventions() -> None:
    model = models.yolov8(image_size=64, num_classes=8)
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["Resize"] == 2 and ops["MaxPool"] == 3 and ops["Softmax"] == 1 and ops["Split"] >= 8
    for node in model.graph.node:
        if node.op_type == "Resize":
            attrs = attributes(model, node.name)
            assert attrs["mode"] == b"nearest"
            assert attrs["coordinate_transformation_mode"] == b"asymmetric"
            assert attrs["nearest_mode"] == b"floor"
            assert node.input[1] == ""
            assert weight(model, node.input[2]).tolist() == [1.0, 1.0, 2.0, 2.0]
    np.testing.assert_array_equal(weight(model, "model.22.dfl.conv.weight").ravel(), np.arange(16))
    assert weight(model, "model.22.anchors").shape == (2, 64 + 16 + 4)


# --------------------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_onnxruntime_matches_reference_evaluator(name: str) -> None:
    model = small(name)
    feeds = models.random_inputs(model, batch=2, seed=1, dims={"S": 7})
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = ort_run(model, feeds)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_small_yolo_output_shapes_follow_the_formula() -> None:
    for size in (64, 160):
        anchors = sum((size // s) ** 2 for s in (8, 16, 32))
        (v8,) = ort_run(models.yolov8(image_size=size, num_classes=3), {"images": np.zeros((2, 3, size, size), "f")})
        assert v8.shape == (2, 4 + 3, anchors)
        (v5,) = ort_run(models.yolov5(image_size=size, num_classes=3), {"images": np.zeros((1, 3, size, size), "f")})
        assert v5.shape == (1, 3 * anchors, 5 + 3)


def test_resnet50_batchnorm_and_folded_compute_the_same_function() -> None:
    feeds = models.random_inputs(small("resnet50"), batch=2)
    (with_bn,) = ort_run(small("resnet50"), feeds)
    (folded,) = ort_run(small("resnet50_folded"), feeds)
    np.testing.assert_allclose(folded, with_bn, rtol=1e-3, atol=1e-4)


def test_resnet50_activations_stay_order_one() -> None:
    model = models.resnet50()
    relus = [n.output[0] for n in model.graph.node if n.op_type == "Relu"]
    logits, *acts = ort_run(with_outputs(model, relus), models.random_inputs(model, seed=2))
    rms = [float(np.sqrt(np.mean(np.square(a, dtype=np.float64)))) for a in acts]
    assert 0.2 < min(rms) and max(rms) < 10, rms
    assert np.isfinite(logits).all()
    assert 0.1 < logits.std() and np.abs(logits).max() < 50


@pytest.mark.parametrize("builder", [models.yolov8, models.yolov5])
def test_yolo_activations_stay_order_one(builder: Callable[..., onnx.ModelProto]) -> None:
    model = builder(image_size=320)
    acts = [n.output[0] for n in model.graph.node if n.name.endswith(".act")]
    out, *values = ort_run(with_outputs(model, acts), models.random_inputs(model, seed=2))
    rms = [float(np.sqrt(np.mean(np.square(a, dtype=np.float64)))) for a in values]
    assert 0.1 < min(rms) and max(rms) < 20, rms
    assert np.isfinite(out).all()


def test_yolov8_boxes_and_scores_are_plausible_at_640() -> None:
    model = models.yolov8()
    (out,) = ort_run(model, models.random_inputs(model))
    assert out.shape == (1, 84, 8400) and np.isfinite(out).all()
    x, y, w, h = out[0, :4]
    scores = out[0, 4:]
    # Centres lie within half a box of their anchor, sizes within the 15-bin DFL range at each stride.
    assert -32 < x.min() and x.max() < 672 and -32 < y.min() and y.max() < 672
    strides = np.repeat([8, 16, 32], [6400, 1600, 400])
    assert (w > 0).all() and (h > 0).all() and (w <= 30 * strides).all() and (h <= 30 * strides).all()
    assert np.median(w) < 320
    assert ((scores >= 0) & (scores <= 1)).all()
    assert 0 < (scores > 0.25).sum() < scores.size // 100


def test_yolov5_boxes_and_scores_are_plausible_at_640() -> None:
    model = models.yolov5()
    (out,) = ort_run(model, models.random_inputs(model))
    assert out.shape == (1, 25200, 85) and np.isfinite(out).all()
    # Rows go stride by stride, anchor by anchor, then over the grid; wh = (2 * sigmoid) ** 2 * anchor.
    anchors = [[(10, 13), (16, 30), (33, 23)], [(30, 61), (62, 45), (59, 119)], [(116, 90), (156, 198), (373, 326)]]
    max_wh = 4 * np.concatenate([np.repeat(a, cells, axis=0) for a, cells in zip(anchors, (6400, 1600, 400))])
    assert (out[0, :, 2:4] >= 0).all() and (out[0, :, 2:4] <= max_wh + 1e-3).all()
    assert -16 <= out[0, :, :2].min() and out[0, :, :2].max() <= 640 + 16
    conf = out[0, :, 4:5] * out[0, :, 5:]
    assert ((out[0, :, 4:] >= 0) & (out[0, :, 4:] <= 1)).all()
    assert 0 < (conf.max(1) > 0.25).sum() < 25200 // 4


def test_yolov8_head_decode_matches_numpy() -> None:
    size, nc = 64, 5
    model = models.yolov8(image_size=size, num_classes=nc)
    feeds = models.random_inputs(model, batch=2, seed=7)
    levels = [f"model.22.cat_{i}" for i in range(3)]
    out, *raw = ort_run(with_outputs(model, levels), feeds)
    x = np.concatenate([r.reshape(2, 64 + nc, -1) for r in raw], axis=2).astype(np.float64)
    bins = x[:, :64].reshape(2, 4, 16, -1)
    prob = np.exp(bins - bins.max(2, keepdims=True))
    dist = (prob / prob.sum(2, keepdims=True) * np.arange(16)[:, None]).sum(2)  # (2, 4, A)
    points, strides = [], []
    for s in (8, 16, 32):
        gy, gx = np.mgrid[: size // s, : size // s] + 0.5
        points.append(np.stack([gx.ravel(), gy.ravel()]))
        strides.append(np.full(gx.size, s))
    anchor, stride = np.concatenate(points, 1), np.concatenate(strides)
    x1y1, x2y2 = anchor - dist[:, :2], anchor + dist[:, 2:]
    boxes = np.concatenate([(x1y1 + x2y2) / 2, x2y2 - x1y1], axis=1) * stride
    np.testing.assert_allclose(out[:, :4], boxes, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(out[:, 4:], sigmoid(x[:, 64:]), rtol=1e-4, atol=1e-6)


def test_yolov5_head_decode_matches_numpy() -> None:
    size, nc = 64, 2
    model = models.yolov5(image_size=size, num_classes=nc)
    feeds = models.random_inputs(model, batch=2, seed=7)
    out, *raw = ort_run(with_outputs(model, [f"model.24.m.{i}" for i in range(3)]), feeds)
    anchors = [[(10, 13), (16, 30), (33, 23)], [(30, 61), (62, 45), (59, 119)], [(116, 90), (156, 198), (373, 326)]]
    rows = []
    for i, (r, s) in enumerate(zip(raw, (8, 16, 32), strict=True)):
        n = size // s
        p = sigmoid(r.astype(np.float64).reshape(2, 3, 5 + nc, n, n).transpose(0, 1, 3, 4, 2))
        gy, gx = np.mgrid[:n, :n]
        grid = np.stack([gx, gy], -1)
        xy = (p[..., :2] * 2 - 0.5 + grid) * s
        wh = (p[..., 2:4] * 2) ** 2 * np.array(anchors[i])[None, :, None, None]
        rows.append(np.concatenate([xy, wh, p[..., 4:]], -1).reshape(2, -1, 5 + nc))
    np.testing.assert_allclose(out, np.concatenate(rows, 1), rtol=1e-4, atol=1e-3)


def test_transformer_matches_numpy() -> None:
    model = models.transformer_encoder(d_model=32, num_heads=4, ffn_dim=64, num_layers=2)
    feeds = models.random_inputs(model, batch=2, dims={"S": 5})
    (out,) = ort_run(model, feeds)

    def p(name: str) -> np.ndarray:
        return weight(model, name).astype(np.float64)

    def layer_norm(x: np.ndarray, name: str) -> np.ndarray:
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * p(f"{name}.weight") + p(f"{name}.bias")

    def erf(x: np.ndarray) -> np.ndarray:
        return np.vectorize(math.erf)(x)

    x = feeds["input"].astype(np.float64)
    for layer in range(2):
        a = f"layers.{layer}.self_attn"
        q, k, v = (
            (x @ p(f"{a}.{n}_proj.weight") + p(f"{a}.{n}_proj.bias")).reshape(2, 5, 4, 8).transpose(0, 2, 1, 3)
            for n in "qkv"
        )
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(8)
        att = np.exp(s - s.max(-1, keepdims=True))
        ctx = (att / att.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3).reshape(2, 5, 32)
        x = layer_norm(x + ctx @ p(f"{a}.out_proj.weight") + p(f"{a}.out_proj.bias"), f"layers.{layer}.norm1")
        h = x @ p(f"layers.{layer}.linear1.weight") + p(f"layers.{layer}.linear1.bias")
        h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
        h = h @ p(f"layers.{layer}.linear2.weight") + p(f"layers.{layer}.linear2.bias")
        x = layer_norm(x + h, f"layers.{layer}.norm2")
    np.testing.assert_allclose(out, x, rtol=1e-4, atol=1e-4)
    assert 0.5 < out.std() < 2


# --------------------------------------------------------------------------------------------------------
# random_inputs
# --------------------------------------------------------------------------------------------------------


def test_random_inputs_shapes_ranges_and_seed() -> None:
    cnn = models.tiny_cnn(image_size=20, channels=1)
    feeds = models.random_inputs(cnn, batch=3)
    assert list(feeds) == ["input"]
    image = feeds["input"]
    assert image.shape == (3, 1, 20, 20) and image.dtype == np.float32
    assert 0 <= image.min() and image.max() < 1
    np.testing.assert_array_equal(models.random_inputs(cnn, batch=3)["input"], image)
    assert not np.array_equal(models.random_inputs(cnn, batch=3, seed=1)["input"], image)

    encoder = models.transformer_encoder()
    assert models.random_inputs(encoder)["input"].shape == (1, 16, 64)
    assert models.random_inputs(encoder, batch=2, dims={"S": 9})["input"].shape == (2, 9, 64)


def test_random_inputs_rejects_non_float_inputs_and_bad_sizes() -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["ids"], ["out"])],
        "ids",
        [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["N", 4])],
        [onnx.helper.make_tensor_value_info("out", onnx.TensorProto.INT64, ["N", 4])],
    )
    with pytest.raises(TypeError, match=r"'ids'.*INT64"):
        models.random_inputs(onnx.helper.make_model(graph))
    with pytest.raises(ValueError, match="batch"):
        models.random_inputs(models.tiny_cnn(), batch=0)
    with pytest.raises(ValueError, match="S"):
        models.random_inputs(models.transformer_encoder(), dims={"S": 0})
