"""Each fast kernel against onnx's own kernel (the evaluator without ``new_ops``) on one-node models."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from amdinfer.reference import FAST_OPS, fast_ops
from amdinfer.reference._conv import conv, conv_transpose

_TOL = {
    np.float16: {"rtol": 1e-2, "atol": 1e-2},
    np.float32: {"rtol": 1e-4, "atol": 1e-4},
    np.float64: {"rtol": 1e-10, "atol": 1e-10},
}
_ONNX_DTYPE = {
    np.float16: onnx.TensorProto.FLOAT16,
    np.float32: onnx.TensorProto.FLOAT,
    np.float64: onnx.TensorProto.DOUBLE,
    np.uint8: onnx.TensorProto.UINT8,
    np.int8: onnx.TensorProto.INT8,
    np.int64: onnx.TensorProto.INT64,
}


def _model(
    op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], n_outputs: int = 1, opset: int = 21
) -> onnx.ModelProto:
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outputs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attrs)
    graph = helper.make_graph(
        [node],
        "one_node",
        [
            helper.make_tensor_value_info(n, _ONNX_DTYPE[v.dtype.type], v.shape)
            for n, v in zip(names, inputs)
            if v is not None
        ],
        [
            helper.make_tensor_value_info(o, onnx.TensorProto.INT64 if k else _ONNX_DTYPE[inputs[0].dtype.type], None)  # type: ignore[union-attr]
            if op_type == "MaxPool"
            else helper.make_tensor_value_info(o, _ONNX_DTYPE[inputs[0].dtype.type], None)  # type: ignore[union-attr]
            for k, o in enumerate(outputs)
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, inputs: list[np.ndarray | None], fast: bool) -> list[np.ndarray]:
    evaluator = ReferenceEvaluator(model, new_ops=fast_ops() if fast else None)
    feeds = {f"i{k}": v for k, v in enumerate(inputs) if v is not None}
    return evaluator.run(None, feeds)


def _compare(
    op_type: str, inputs: list[np.ndarray | None], attrs: dict[str, Any], n_outputs: int = 1, opset: int = 21
) -> list[np.ndarray]:
    model = _model(op_type, inputs, attrs, n_outputs, opset)
    expected = _run(model, inputs, fast=False)
    got = _run(model, inputs, fast=True)
    dtype = next(v for v in inputs if v is not None).dtype.type
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), **_TOL.get(dtype, {}))
    return got


def _ort(model: onnx.ModelProto, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {f"i{k}": v for k, v in enumerate(inputs) if v is not None})


def test_fast_ops_are_registered_under_onnx_names() -> None:
    names = [op.__name__ for op in FAST_OPS]
    assert len(names) == len(set(names))
    assert all(op.op_domain == "" for op in FAST_OPS)
    assert fast_ops() == FAST_OPS and fast_ops() is not FAST_OPS


# ---------------------------------------------------------------------------------------------------------- Conv


def _conv_cases(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        nd = int(rng.choice([1, 2, 2, 2, 3]))
        group = int(rng.choice([1, 1, 2, 3]))
        depthwise = rng.random() < 0.2
        cin = group * (1 if depthwise else int(rng.integers(1, 4)))
        cout = group * int(rng.integers(1, 4))
        kernel = [int(rng.integers(1, 4)) for _ in range(nd)]
        size = [int(rng.integers(4, 9 if nd < 3 else 6)) for _ in range(nd)]
        attrs: dict[str, Any] = {"group": group}
        if rng.random() < 0.6:
            attrs["strides"] = [int(rng.integers(1, 4)) for _ in range(nd)]
        if rng.random() < 0.4:
            attrs["dilations"] = [int(rng.integers(1, 3)) for _ in range(nd)]
        auto_pad = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        if auto_pad != "NOTSET":
            attrs["auto_pad"] = auto_pad
        elif rng.random() < 0.7:
            attrs["pads"] = [int(rng.integers(0, k + 1)) for k in kernel * 2]
        keff = [(k - 1) * d + 1 for k, d in zip(kernel, attrs.get("dilations", [1] * nd))]
        size = [max(s, k) for s, k in zip(size, keff)]
        dtype = rng.choice([np.float32, np.float32, np.float64, np.float16])
        x = rng.standard_normal((int(rng.integers(1, 3)), cin, *size)).astype(dtype)
        w = rng.standard_normal((cout, cin // group, *kernel)).astype(dtype)
        b = rng.standard_normal(cout).astype(dtype) if rng.random() < 0.5 else None
        cases.append({"x": x, "w": w, "b": b, "attrs": attrs})
    return cases


@pytest.mark.parametrize("case", _conv_cases(60, 0), ids=lambda c: f"{c['x'].shape}-{c['w'].shape}-{c['attrs']}")
def test_conv_matches_onnx(case: dict[str, Any]) -> None:
    inputs = [case["x"], case["w"]] + ([case["b"]] if case["b"] is not None else [])
    _compare("Conv", inputs, case["attrs"])


def test_conv_resnet_like_layers_match_onnx() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 8, 15, 15)).astype(np.float32)
    _compare("Conv", [x, rng.standard_normal((4, 8, 7, 7)).astype(np.float32)], {"strides": [2, 2], "pads": [3] * 4})
    _compare("Conv", [x, rng.standard_normal((16, 8, 1, 1)).astype(np.float32)], {"strides": [2, 2]})
    _compare("Conv", [x, rng.standard_normal((8, 1, 3, 3)).astype(np.float32)], {"group": 8, "pads": [1] * 4})


def test_conv_kernel_shape_attribute_is_accepted() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    _compare("Conv", [x, rng.standard_normal((3, 2, 3, 3)).astype(np.float32)], {"kernel_shape": [3, 3]})


def test_conv_large_batch_is_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    import amdinfer.reference._conv as module

    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 6, 6))
    w = rng.standard_normal((4, 2, 3, 3))
    whole = conv(x, w, pads=[1] * 4)
    monkeypatch.setattr(module, "_MAX_COLS", 10)
    np.testing.assert_allclose(conv(x, w, pads=[1] * 4), whole, rtol=1e-12)


def test_conv_rejects_inconsistent_group() -> None:
    with pytest.raises(ValueError, match="Conv weights"):
        conv(np.zeros((1, 3, 4, 4)), np.zeros((2, 2, 1, 1)), group=1)


# ------------------------------------------------------------------------------------------------- ConvTranspose


def _naive_conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    group: int,
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    size: list[int],
) -> np.ndarray:
    """Scatter every input pixel through the kernel; the oracle for the cases onnx's kernel gets wrong."""
    n, c = x.shape[:2]
    nd = x.ndim - 2
    cg, mg = c // group, w.shape[1]
    y = np.zeros((n, mg * group, *size))
    for batch, ci in itertools.product(range(n), range(c)):
        g = ci // cg
        for pos in itertools.product(*(range(s) for s in x.shape[2:])):
            for off in itertools.product(*(range(k) for k in w.shape[2:])):
                target = [pos[i] * strides[i] + off[i] * dilations[i] - begin[i] for i in range(nd)]
                if all(0 <= t < s for t, s in zip(target, size)):
                    y[(batch, slice(g * mg, (g + 1) * mg), *target)] += (
                        x[(batch, ci, *pos)] * w[(ci, slice(None), *off)]
                    )
    if b is not None:
        y += b.reshape(-1, *(1,) * nd)
    return y


def _conv_transpose_cases(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        nd = int(rng.choice([1, 2, 2, 3]))
        kernel = [int(rng.integers(1, 4)) for _ in range(nd)]
        strides = [int(rng.integers(1, 4)) for _ in range(nd)]
        dilations = [int(rng.integers(1, 3)) if rng.random() < 0.3 else 1 for _ in range(nd)]
        attrs: dict[str, Any] = {"strides": strides, "dilations": dilations}
        kind = str(rng.choice(["pads", "pads", "output_padding", "output_shape", "SAME_UPPER", "SAME_LOWER"]))
        if kind == "pads":
            attrs["pads"] = [int(rng.integers(0, k)) if k > 1 else 0 for k in kernel * 2]
        elif kind == "output_padding":
            attrs["output_padding"] = [int(rng.integers(0, s)) for s in strides]
        elif kind == "output_shape":
            attrs["output_shape"] = []  # filled in below from the input size
        else:
            attrs["auto_pad"] = kind
        size = [int(rng.integers(2, 5)) for _ in range(nd)]
        if kind == "output_shape":
            attrs["output_shape"] = [s * st + int(rng.integers(-1, 2)) for s, st in zip(size, strides)]
        dtype = rng.choice([np.float32, np.float64])
        x = rng.standard_normal((int(rng.integers(1, 3)), 2, *size)).astype(dtype)
        w = rng.standard_normal((2, int(rng.integers(1, 4)), *kernel)).astype(dtype)
        b = rng.standard_normal(w.shape[1]).astype(dtype) if rng.random() < 0.5 else None
        cases.append({"x": x, "w": w, "b": b, "attrs": attrs})
    return cases


@pytest.mark.parametrize("case", _conv_transpose_cases(30, 10), ids=lambda c: f"{c['x'].shape}-{c['attrs']}")
def test_conv_transpose_matches_onnx(case: dict[str, Any]) -> None:
    attrs = case["attrs"]
    inputs = [case["x"], case["w"]] + ([case["b"]] if case["b"] is not None else [])
    if "output_shape" in attrs:
        # onnx's kernel ignores the pads implied by output_shape (it crops at the end); the spec splits them.
        model = _model("ConvTranspose", inputs, attrs)
        got = _run(model, inputs, fast=True)[0]
        nd = case["x"].ndim - 2
        full = [
            attrs["strides"][i] * (case["x"].shape[2 + i] - 1)
            + (case["w"].shape[2 + i] - 1) * attrs["dilations"][i]
            + 1
            for i in range(nd)
        ]
        total = [f - o for f, o in zip(full, attrs["output_shape"])]
        begin = [t - t // 2 for t in total]
        expected = _naive_conv_transpose(
            case["x"], case["w"], case["b"], 1, attrs["strides"], attrs["dilations"], begin, attrs["output_shape"]
        )
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        return
    _compare("ConvTranspose", inputs, attrs)


@pytest.mark.parametrize("group", [2, 3])
@pytest.mark.parametrize("nd", [1, 2])
def test_conv_transpose_groups_match_naive(group: int, nd: int) -> None:
    # onnx's kernel mishandles group > 1, so the oracle is the naive scatter (and ONNX Runtime agrees).
    rng = np.random.default_rng(group * 10 + nd)
    x = rng.standard_normal((2, 2 * group, *([3] * nd)))
    w = rng.standard_normal((2 * group, 2, *([3] * nd)))
    b = rng.standard_normal(2 * group)
    strides, pads = [2] * nd, [1] * nd + [0] * nd
    got = conv_transpose(x, w, b, group=group, strides=strides, pads=pads, output_padding=[1] * nd)
    size = [(3 - 1) * 2 + 3 + 1 - 1] * nd
    expected = _naive_conv_transpose(x, w, b, group, strides, [1] * nd, [1] * nd, size)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    inputs = [x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)]
    model = _model(
        "ConvTranspose", inputs, {"group": group, "strides": strides, "pads": pads, "output_padding": [1] * nd}
    )
    np.testing.assert_allclose(_run(model, inputs, fast=True)[0], _ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------------------- Pooling


def _pool_cases(n: int, seed: int, average: bool) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        nd = int(rng.choice([1, 2, 2, 3]))
        kernel = [int(rng.integers(1, 4)) for _ in range(nd)]
        attrs: dict[str, Any] = {"kernel_shape": kernel}
        if rng.random() < 0.7:
            attrs["strides"] = [int(rng.integers(1, 4)) for _ in range(nd)]
        if rng.random() < 0.3:
            attrs["dilations"] = [int(rng.integers(1, 3)) for _ in range(nd)]
        auto_pad = str(rng.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        if auto_pad != "NOTSET":
            attrs["auto_pad"] = auto_pad
            attrs.pop("dilations", None)
        else:
            if rng.random() < 0.6:
                attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
            if rng.random() < 0.5:
                attrs["ceil_mode"] = 1
        if average:
            attrs["count_include_pad"] = int(rng.integers(0, 2))
        keff = [(k - 1) * d + 1 for k, d in zip(kernel, attrs.get("dilations", [1] * nd))]
        size = [max(int(rng.integers(3, 9 if nd < 3 else 6)), k) for k in keff]
        dtype = rng.choice([np.float32, np.float32, np.float64, np.float16])
        x = rng.standard_normal((int(rng.integers(1, 3)), int(rng.integers(1, 3)), *size)).astype(dtype)
        cases.append({"x": x, "attrs": attrs})
    return cases


def _naive_pool(x: np.ndarray, attrs: dict[str, Any], average: bool) -> np.ndarray:
    """Spec-literal pooling, one window at a time: the oracle where onnx's kernel deviates from the spec.

    SAME_* padding is clamped at 0 when the stride exceeds the kernel (TensorFlow's rule, and what Conv does);
    ONNX Runtime refuses those cases for MaxPool and shifts the windows for AveragePool.
    """
    nd = x.ndim - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * nd)
    dil = attrs.get("dilations", [1] * nd)
    auto_pad = attrs.get("auto_pad", "NOTSET")
    begin, end, out = [], [], []
    for i in range(nd):
        size, keff = x.shape[2 + i], (kernel[i] - 1) * dil[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = int(np.ceil(size / strides[i]))
            total = max(0, (o - 1) * strides[i] + keff - size)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(b)
            end.append(total - b)
        elif auto_pad == "VALID":
            o = int(np.ceil((size - keff + 1) / strides[i]))
            begin.append(0)
            end.append(0)
        else:
            pads = attrs.get("pads", [0] * 2 * nd)
            begin.append(pads[i])
            end.append(pads[nd + i])
            ratio = (size + pads[i] + pads[nd + i] - keff) / strides[i]
            o = (int(np.ceil(ratio)) if attrs.get("ceil_mode") else int(np.floor(ratio))) + 1
            if attrs.get("ceil_mode") and (o - 1) * strides[i] >= size + pads[i]:
                o -= 1  # a window may not start in the end padding
        out.append(o)
    y = np.zeros((*x.shape[:2], *out), dtype=np.float64)
    for index in itertools.product(*(range(d) for d in y.shape)):
        taps = [[index[2 + i] * strides[i] - begin[i] + j * dil[i] for j in range(kernel[i])] for i in range(nd)]
        inside = [[p for p in t if 0 <= p < x.shape[2 + i]] for i, t in enumerate(taps)]
        values = [float(x[(*index[:2], *p)]) for p in itertools.product(*inside)]
        if not average:
            y[index] = max(values)
        elif attrs.get("count_include_pad"):
            padded = [[p for p in t if -begin[i] <= p < x.shape[2 + i] + end[i]] for i, t in enumerate(taps)]
            y[index] = sum(values) / np.prod([len(p) for p in padded])
        else:
            y[index] = sum(values) / len(values)
    return y


def _onnx_pool_deviation(x: np.ndarray, attrs: dict[str, Any], average: bool) -> str | None:
    """Why onnx's own pooling kernel cannot be the oracle for this case, if it cannot."""
    nd = x.ndim - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * nd)
    dil = attrs.get("dilations", [1] * nd)
    pads = attrs.get("pads", [0] * 2 * nd)
    if attrs.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER") and any(
        s > (k - 1) * d + 1 for s, k, d in zip(strides, kernel, dil)
    ):
        return _NEGATIVE_SAME
    if not average and attrs.get("auto_pad") == "SAME_LOWER":
        return "MaxPool SAME_LOWER: onnx computes floor(in / stride) outputs"
    if not average and set(strides) == {1} and set(dil) == {1} and any(pads):
        if nd != 2 or pads[1] != pads[2]:
            return "MaxPool with unit strides: onnx reads pads as (top, bottom, left, right)"
    if attrs.get("ceil_mode"):
        for i in range(nd):
            keff = (kernel[i] - 1) * dil[i] + 1
            span = x.shape[2 + i] + pads[i] + pads[nd + i] - keff
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
                o -= 1
            if (o - 1) * strides[i] + keff - x.shape[2 + i] - pads[i] - pads[nd + i] >= 2:
                return "ceil mode overhang >= 2: onnx moves half of it to the start"
    return None


_NEGATIVE_SAME = "SAME padding that would be negative"
_POOL_CASES = [("MaxPool", c) for c in _pool_cases(50, 20, average=False)] + [
    ("AveragePool", c) for c in _pool_cases(50, 30, average=True)
]


def _pool_id(case: tuple[str, dict[str, Any]]) -> str:
    return f"{case[0]}-{case[1]['x'].shape}-{case[1]['x'].dtype}-{case[1]['attrs']}"


@pytest.mark.parametrize("case", _POOL_CASES, ids=_pool_id)
def test_pool_matches_onnx(case: tuple[str, dict[str, Any]]) -> None:
    op, c = case
    reason = _onnx_pool_deviation(c["x"], c["attrs"], average=op == "AveragePool")
    if reason:
        pytest.skip(f"onnx's kernel deviates from the spec ({reason}); covered by the naive oracle")
    _compare(op, [c["x"]], c["attrs"])


@pytest.mark.parametrize("case", _POOL_CASES, ids=_pool_id)
def test_pool_matches_naive_oracle(case: tuple[str, dict[str, Any]]) -> None:
    op, c = case
    got = _run(_model(op, [c["x"]], c["attrs"]), [c["x"]], fast=True)[0]
    expected = _naive_pool(c["x"].astype(np.float64), c["attrs"], average=op == "AveragePool")
    assert got.dtype == c["x"].dtype
    np.testing.assert_allclose(got.astype(np.float64), expected, **_TOL[c["x"].dtype.type])


@pytest.mark.parametrize("case", _POOL_CASES, ids=_pool_id)
def test_pool_matches_onnx_runtime(case: tuple[str, dict[str, Any]]) -> None:
    op, c = case
    if _onnx_pool_deviation(c["x"], c["attrs"], average=op == "AveragePool") == _NEGATIVE_SAME:
        pytest.skip("ONNX Runtime rejects (MaxPool) or shifts (AveragePool) negative SAME padding")
    x = c["x"].astype(np.float32)
    model = _model(op, [x], c["attrs"])
    np.testing.assert_allclose(_run(model, [x], fast=True)[0], _ort(model, [x])[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1},
        {"kernel_shape": [3, 2], "strides": [1, 2], "dilations": [2, 1]},
        {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ],
)
def test_max_pool_indices_match_onnx_runtime(attrs: dict[str, Any], storage_order: int) -> None:
    rng = np.random.default_rng(40)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    attrs = {**attrs, "storage_order": storage_order}
    model = _model("MaxPool", [x], attrs, n_outputs=2)
    values, indices = _run(model, [x], fast=True)
    expected_values, expected_indices = _ort(model, [x])
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


def test_max_pool_indices_match_onnx_strided() -> None:
    rng = np.random.default_rng(41)
    for nd in (1, 2, 3):
        x = rng.standard_normal((1, 2, *([5] * nd))).astype(np.float32)
        attrs = {"kernel_shape": [2] * nd, "strides": [2] * nd, "pads": [1] * nd + [0] * nd}
        model = _model("MaxPool", [x], attrs, n_outputs=2)
        for e, g in zip(_run(model, [x], fast=False), _run(model, [x], fast=True)):
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_max_pool_integer_input(dtype: type) -> None:
    x = np.random.default_rng(42).integers(0, 100, (1, 2, 6, 6)).astype(dtype)
    model = _model("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})
    np.testing.assert_array_equal(_run(model, [x], fast=True)[0], _ort(model, [x])[0])


def test_sppf_max_pool_matches_onnx() -> None:
    x = np.random.default_rng(43).standard_normal((1, 4, 10, 10)).astype(np.float32)
    _compare("MaxPool", [x], {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 7), (2, 2, 3, 4, 2)])
def test_global_pool_matches_onnx(op: str, dtype: type, shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(44).standard_normal(shape).astype(dtype)
    if op == "GlobalMaxPool" and len(shape) != 4:
        # onnx's GlobalMaxPool reduces the wrong axes unless the input is 4-D.
        got = _run(_model(op, [x], {}), [x], fast=True)[0]
        np.testing.assert_array_equal(got, x.max(axis=tuple(range(2, x.ndim)), keepdims=True))
        return
    _compare(op, [x], {})


# ------------------------------------------------------------------------------------------ BatchNormalization


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3), (1, 4, 5), (2, 3, 4, 5), (1, 2, 3, 2, 2)])
def test_batch_normalization_matches_onnx(dtype: type, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(50)
    c = shape[1]
    x = rng.standard_normal(shape).astype(dtype)
    scale, bias, mean = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = rng.uniform(0.5, 2.0, c).astype(dtype)
    _compare("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": 1e-3})


def test_batch_normalization_training_mode_defers_to_onnx() -> None:
    rng = np.random.default_rng(51)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    params = [rng.standard_normal(3).astype(np.float32) for _ in range(3)] + [np.ones(3, np.float32)]
    _compare("BatchNormalization", [x, *params], {"training_mode": 1}, n_outputs=3)


# ------------------------------------------------------------------------------------------------------- Resize


def _resize_cases(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    cases = []
    combos = [
        ("nearest", "asymmetric", "floor"),
        ("nearest", "half_pixel", "round_prefer_floor"),
        ("nearest", "align_corners", "round_prefer_ceil"),
        ("nearest", "pytorch_half_pixel", "ceil"),
        ("linear", "half_pixel", None),
        ("linear", "pytorch_half_pixel", None),
        ("linear", "align_corners", None),
        ("linear", "asymmetric", None),
        ("cubic", "half_pixel", None),
        ("linear", "half_pixel_symmetric", None),
    ]
    for k in range(n):
        mode, ctm, nearest = combos[k % len(combos)]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        attrs: dict[str, Any] = {"mode": mode, "coordinate_transformation_mode": ctm}
        if nearest:
            attrs["nearest_mode"] = nearest
        dtype = rng.choice([np.float32, np.float64, np.float16])
        x = rng.standard_normal(shape).astype(dtype)
        if rng.random() < 0.5:
            scales = np.array([1, 1, *rng.choice([0.5, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0], 2)], np.float32)
            inputs = [x, None, scales]
        else:
            sizes = np.array([*shape[:2], *rng.integers(1, 9, 2)], np.int64)
            inputs = [x, None, None, sizes]
        cases.append({"inputs": inputs, "attrs": attrs})
    return cases


@pytest.mark.parametrize("case", _resize_cases(40, 60), ids=lambda c: f"{c['inputs'][0].shape}-{c['attrs']}")
def test_resize_matches_onnx(case: dict[str, Any]) -> None:
    # Fractional in * scale included: the spec's length_resized is that unfloored product (align_corners,
    # pytorch_half_pixel), as onnx's kernel and ONNX's backend test data have it (tests/reference/test_resize.py).
    _compare("Resize", case["inputs"], case["attrs"])


def test_resize_yolo_upsample_and_uint8() -> None:
    x = np.random.default_rng(61).standard_normal((1, 3, 4, 5)).astype(np.float32)
    _compare("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "nearest"})
    image = np.random.default_rng(62).integers(0, 256, (1, 3, 5, 7)).astype(np.uint8)
    sizes = np.array([1, 3, 9, 4], np.int64)
    _compare("Resize", [image, None, None, sizes], {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"})
    _compare("Resize", [image, None, None, sizes], {"mode": "linear"})


def test_resize_axes_defers_to_onnx() -> None:
    x = np.random.default_rng(63).standard_normal((1, 2, 3, 4)).astype(np.float32)
    _compare("Resize", [x, None, np.array([2, 2], np.float32)], {"mode": "linear", "axes": [2, 3]})


# -------------------------------------------------------------------------------------------------- Activations


@pytest.mark.parametrize("op", ["Sigmoid", "Relu"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_activation_matches_onnx(op: str, dtype: type) -> None:
    x = np.random.default_rng(70).standard_normal((2, 3, 4, 5)) * 10
    x.flat[:4] = [0.0, 1000.0, -1000.0, -100.0]
    with np.errstate(over="ignore", invalid="ignore"):  # onnx's own Sigmoid warns on +-1000
        _compare(op, [x.astype(dtype)], {})


def test_import_pulls_in_only_numpy_and_onnx() -> None:
    import subprocess
    import sys

    code = (
        "import sys, amdinfer; before = set(sys.modules); import amdinfer.reference; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "bad = new & {'onnxruntime', 'scipy', 'cv2', 'torch', 'torchvision', 'PIL'}; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
