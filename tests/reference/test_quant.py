"""Quantization kernels against onnx's reference ops, ONNX Runtime one-node models and onnxruntime.quantization."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from amdinfer.reference import (
    compute_scale_zero_point,
    dequantize_linear,
    fake_fp16,
    fake_quant,
    quantize_linear,
)

_QTYPES = [np.int8, np.uint8, np.int16, np.uint16]


def _qdq_model(op: str, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(scale, "scale")]
    inputs = ["x", "scale"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(zero_point, "zp"))
        inputs.append("zp")
    out_type = (
        helper.np_dtype_to_tensor_dtype(zero_point.dtype if zero_point is not None else np.dtype(np.uint8))
        if op == "QuantizeLinear"
        else helper.np_dtype_to_tensor_dtype(scale.dtype)
    )
    node = helper.make_node(op, inputs, ["y"], axis=axis)
    graph = helper.make_graph(
        [node],
        "qdq",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info("y", out_type, x.shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _cases(seed: int, n: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    cases = []
    for k in range(n):
        qtype = _QTYPES[k % len(_QTYPES)]
        shape = (2, 3, 4, 5)
        per_axis = k % 3 == 0
        axis = int(rng.integers(-4, 4)) if per_axis else 1
        count = shape[axis] if per_axis else 1
        scale = rng.uniform(0.01, 0.2, count).astype(np.float32)
        info = np.iinfo(qtype)
        zp = rng.integers(info.min // 4 if info.min else 0, info.max // 4 + 1, count).astype(qtype)
        if not per_axis:
            scale, zp = scale.reshape(()), zp.reshape(())
        # Values on exact .5 steps check round-half-to-even; large ones check saturation.
        x = (rng.integers(-400, 400, shape) / 2 * (scale.reshape(-1)[0] if not per_axis else 0.05)).astype(np.float32)
        x.flat[:4] = [1e6, -1e6, 0.0, np.float32(2.5) * scale.reshape(-1)[0]]
        cases.append({"x": x, "scale": scale, "zp": zp if k % 5 else None, "axis": axis, "qtype": qtype})
    return cases


_CASES = _cases(0, 24)


def _id(c: dict[str, Any]) -> str:
    return (
        f"{np.dtype(c['qtype'])}-axis{c['axis']}-{'per_axis' if c['scale'].ndim else 'tensor'}-zp{c['zp'] is not None}"
    )


@pytest.mark.parametrize("case", _CASES, ids=_id)
def test_quantize_matches_onnx_and_onnx_runtime(case: dict[str, Any]) -> None:
    x, scale, zp, axis = case["x"], case["scale"], case["zp"], case["axis"]
    got = quantize_linear(x, scale, zp, axis=axis, dtype=None if zp is not None else np.uint8)
    model = _qdq_model("QuantizeLinear", x, scale, zp, axis)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("case", _CASES, ids=_id)
def test_dequantize_matches_onnx_and_onnx_runtime(case: dict[str, Any]) -> None:
    scale, zp, axis = case["scale"], case["zp"], case["axis"]
    q = quantize_linear(case["x"], scale, zp, axis=axis, dtype=None if zp is not None else np.uint8)
    got = dequantize_linear(q, scale, zp, axis=axis)
    model = _qdq_model("DequantizeLinear", q, scale, zp, axis)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": q})[0])
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, session.run(None, {"x": q})[0])


def test_round_half_to_even_and_saturation() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0], np.float32)
    np.testing.assert_array_equal(quantize_linear(x, np.float32(1), np.int8(0)), [0, 2, 2, 0, -2, 127, -128])
    np.testing.assert_array_equal(quantize_linear(x, np.float32(1)), [0, 2, 2, 0, 0, 255, 0])
    with pytest.raises(ValueError, match="dtype"):
        quantize_linear(x, np.float32(1), np.int8(0), dtype=np.uint8)
    with pytest.raises(ValueError, match="dtype"):
        quantize_linear(x, np.float32(1), dtype=np.int32)


def test_fake_quant_is_qdq() -> None:
    x = np.linspace(-3, 3, 41, dtype=np.float32)
    scale, zp = np.float32(0.05), np.int8(3)
    np.testing.assert_array_equal(fake_quant(x, scale, zp), dequantize_linear(quantize_linear(x, scale, zp), scale, zp))
    assert fake_quant(x, scale, zp).dtype == np.float32
    assert np.abs(fake_quant(np.float32([0.01]), scale, zp) - 0.0).max() == 0


def test_fake_fp16_rounds_and_overflows_like_a_cast() -> None:
    x = np.array([0.1, 65504.0, 65519.0, 65520.0, -1e6, 1e-8, np.nan], np.float32)
    got = fake_fp16(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[:6], [np.float16(0.1), 65504.0, 65504.0, np.inf, -np.inf, np.float16(1e-8)])
    assert np.isnan(got[6])
    model = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Cast", ["x"], ["h"], to=onnx.TensorProto.FLOAT16),
                helper.make_node("Cast", ["h"], ["y"], to=1),
            ],
            "cast",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [7])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [7])],
        ),
        opset_imports=[helper.make_opsetid("", 21)],
    )
    model.ir_version = 10
    ort = pytest.importorskip("onnxruntime")
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]
    np.testing.assert_array_equal(got, expected)


_RANGES = [(-1.0, 3.0), (0.5, 2.0), (-2.0, -0.5), (-0.3, 0.7), (0.0, 0.0), (-1e-40, 1e-40), (-5.0, 5.0)]


@pytest.mark.parametrize("reduce_range", [False, True])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("qtype", _QTYPES)
@pytest.mark.parametrize("rng_range", _RANGES)
def test_compute_scale_zero_point_matches_onnxruntime(
    rng_range: tuple[float, float], qtype: type, symmetric: bool, reduce_range: bool
) -> None:
    quant_utils = pytest.importorskip("onnxruntime.quantization.quant_utils")
    rmin, rmax = np.float32(rng_range[0]), np.float32(rng_range[1])
    tensor_type = helper.np_dtype_to_tensor_dtype(np.dtype(qtype))
    qmin, qmax = quant_utils.get_qmin_qmax_for_qType(tensor_type, reduce_range=reduce_range, symmetric=symmetric)
    zp, scale = quant_utils.compute_scale_zp(np.array(rmin), np.array(rmax), qmin, qmax, symmetric=symmetric)
    got_scale, got_zp = compute_scale_zero_point(rmin, rmax, qtype, symmetric=symmetric, reduce_range=reduce_range)
    assert got_scale.dtype == np.asarray(scale).dtype and got_zp.dtype == np.asarray(zp).dtype
    np.testing.assert_array_equal(got_scale, scale)
    np.testing.assert_array_equal(got_zp, zp)


def test_compute_scale_zero_point_per_channel() -> None:
    rmin = np.array([-1.0, 0.0, -0.2], np.float32)
    rmax = np.array([1.0, 2.0, 0.0], np.float32)
    scale, zp = compute_scale_zero_point(rmin, rmax, np.uint8)
    for k in range(3):
        s, z = compute_scale_zero_point(rmin[k], rmax[k], np.uint8)
        assert scale[k] == s and zp[k] == z
