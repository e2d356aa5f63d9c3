"""Quantization kernels with ONNX QuantizeLinear / DequantizeLinear and onnxruntime.quantization semantics."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["compute_scale_zero_point", "dequantize_linear", "fake_fp16", "fake_quant", "quantize_linear"]

_RANGES = {
    np.dtype(np.uint8): (0, 255),
    np.dtype(np.int8): (-128, 127),
    np.dtype(np.uint16): (0, 65535),
    np.dtype(np.int16): (-32768, 32767),
}
_SYMMETRIC = {np.dtype(np.int8): (-127, 127), np.dtype(np.int16): (-32767, 32767)}
_REDUCED = {
    np.dtype(np.uint8): (0, 127),
    np.dtype(np.int8): (-64, 64),
    np.dtype(np.uint16): (0, 32767),
    np.dtype(np.int16): (-16384, 16384),
}


def _qdtype(dtype: DTypeLike) -> np.dtype:
    d = np.dtype(dtype)
    if d not in _RANGES:
        raise ValueError(f"dtype: got {d}, expected one of {sorted(str(k) for k in _RANGES)}")
    return d


def _along(value: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A scale or zero point broadcastable against a tensor of rank ``ndim``: scalar, or 1-D along ``axis``."""
    v = np.asarray(value)
    if v.ndim == 0 or (v.size == 1 and v.ndim <= 1):
        return v.reshape(())
    if v.ndim != 1:
        raise ValueError(f"scale/zero_point: got shape {v.shape}, expected a scalar or a 1-D per-axis vector")
    axis = axis % ndim
    return v.reshape((-1,) + (1,) * (ndim - 1 - axis))


def quantize_linear(
    x: np.ndarray,
    scale: np.ndarray | float,
    zero_point: np.ndarray | int | None = None,
    *,
    axis: int = 1,
    dtype: DTypeLike | None = None,
) -> np.ndarray:
    """ONNX QuantizeLinear (https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html), as ONNX Runtime runs it.

    ``y = saturate(round_half_to_even(x / scale) + zero_point)``, the division in ``x``'s precision. ``scale`` and
    ``zero_point`` are scalars (per tensor) or 1-D along ``axis`` (per axis).

    Args:
        x: Float tensor.
        scale: Scale(s), same float type as ``x`` in ONNX.
        zero_point: Zero point(s); its dtype is the output dtype when given.
        axis: Axis of a per-axis scale.
        dtype: Output dtype when ``zero_point`` is not an array: int8, uint8, int16 or uint16 (default uint8).

    Returns:
        The quantized tensor.

    Example:
        >>> quantize_linear(np.array([0.0, 0.5, 1.5, 2.5, 1000.0], np.float32), 1.0, np.int8(0))
        array([  0,   0,   2,   2, 127], dtype=int8)
    """
    if isinstance(zero_point, np.ndarray | np.integer):
        out = np.dtype(zero_point.dtype)
        if dtype is not None and np.dtype(dtype) != out:
            raise ValueError(f"dtype: got {np.dtype(dtype)}, but zero_point is {out}")
    else:
        out = np.dtype(dtype or np.uint8)
    lo, hi = _RANGES[_qdtype(out)]
    x = np.asarray(x)
    s = _along(np.asarray(scale, dtype=x.dtype if x.dtype.kind == "f" else np.float32), x.ndim, axis)
    q = np.rint(x / s)
    if zero_point is not None:
        q = q + _along(np.asarray(zero_point), x.ndim, axis).astype(q.dtype)
    return np.clip(q, lo, hi).astype(out)


def dequantize_linear(
    x: np.ndarray,
    scale: np.ndarray | float,
    zero_point: np.ndarray | int | None = None,
    *,
    axis: int = 1,
) -> np.ndarray:
    """ONNX DequantizeLinear (https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html).

    ``y = (x - zero_point) * scale``, the subtraction exact, the product in float32 and cast to ``scale``'s dtype.

    Example:
        >>> dequantize_linear(np.array([0, 10, 255], np.uint8), np.float32(0.5), np.uint8(10))
        array([ -5. ,   0. , 122.5], dtype=float32)
    """
    x = np.asarray(x)
    s = np.asarray(scale)
    s_dtype = s.dtype if s.dtype.kind == "f" else np.dtype(np.float32)
    d = x.astype(np.float32)
    if zero_point is not None:
        d = d - _along(np.asarray(zero_point), x.ndim, axis).astype(np.float32)
    return (d * _along(s, x.ndim, axis).astype(np.float32)).astype(s_dtype)


def fake_quant(
    x: np.ndarray,
    scale: np.ndarray | float,
    zero_point: np.ndarray | int | None = None,
    *,
    axis: int = 1,
    dtype: DTypeLike | None = None,
) -> np.ndarray:
    """Quantize then dequantize: the values a QDQ pair lets through, in ``x``'s dtype.

    Example:
        >>> fake_quant(np.array([0.26, -3.0], np.float32), np.float32(0.1), np.int8(0))
        array([ 0.3, -3. ], dtype=float32)
    """
    q = quantize_linear(x, scale, zero_point, axis=axis, dtype=dtype)
    return dequantize_linear(q, np.asarray(scale, dtype=np.asarray(x).dtype), zero_point, axis=axis)


def fake_fp16(x: np.ndarray) -> np.ndarray:
    """Round to float16 and back, like a Cast to FLOAT16 and back: round to nearest even, overflow to +-inf.

    Example:
        >>> fake_fp16(np.array([0.1, 70000.0], np.float32))
        array([0.09997559,        inf], dtype=float32)
    """
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(x.dtype)


def compute_scale_zero_point(
    rmin: np.ndarray | float,
    rmax: np.ndarray | float,
    qtype: DTypeLike = np.int8,
    *,
    symmetric: bool = False,
    reduce_range: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point for a calibrated range, as ``onnxruntime.quantization.quant_utils.compute_scale_zp``.

    The range is widened to include 0 and, when ``symmetric``, to ``[-absmax, absmax]``. The integer range is the
    type's (``reduce_range``: 7 bits for 8-bit types; ``symmetric`` int8/int16: ``[-127, 127]`` /
    ``[-32767, 32767]``). ``scale = (rmax - rmin) / (qmax - qmin)`` computed in float64 and stored in ``rmax``'s
    float type; ``zero_point = round((qmin + qmax) / 2)`` when symmetric, else ``round(qmin - rmin / scale)``
    (half to even). A scale below the type's smallest normal becomes 1 with zero point 0.

    Args:
        rmin: Range minimum (float32 scalar or per-channel array; its dtype is the scale's dtype).
        rmax: Range maximum.
        qtype: int8, uint8, int16 or uint16.
        symmetric: Symmetric range.
        reduce_range: Use 7 bits of an 8-bit type (15 of a 16-bit one).

    Returns:
        ``(scale, zero_point)``, the zero point in ``qtype``.

    Example:
        >>> compute_scale_zero_point(np.float32(-1.0), np.float32(3.0), np.uint8)
        (array(0.01568628, dtype=float32), array(64, dtype=uint8))
    """
    q = _qdtype(qtype)
    if reduce_range:
        qmin, qmax = _REDUCED[q]
    elif symmetric and q in _SYMMETRIC:
        qmin, qmax = _SYMMETRIC[q]
    else:
        qmin, qmax = _RANGES[q]
    lo = np.asarray(rmin)
    hi = np.asarray(rmax)
    if lo.dtype.kind != "f":
        lo = lo.astype(np.float32)
    if hi.dtype.kind != "f":
        hi = hi.astype(np.float32)
    lo = np.minimum(lo, np.array(0, dtype=lo.dtype))
    hi = np.maximum(hi, np.array(0, dtype=hi.dtype))
    if symmetric:
        absmax = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -absmax, absmax
    scale = (hi.astype(np.float64) - lo.astype(np.float64)) / float(qmax - qmin)
    finfo = np.finfo(hi.dtype)
    stored = scale.astype(hi.dtype)
    tiny = finfo.smallest_subnormal if hi.dtype == np.float16 else finfo.tiny
    small = (stored if hi.dtype == np.float16 else scale) < tiny
    if symmetric:
        zp = np.full(scale.shape, np.round((qmin + qmax) / 2.0))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            zp = np.round(qmin - lo / scale)
    zp = np.where(small, 0, zp)
    stored = np.where(small, np.array(1, dtype=hi.dtype), stored).astype(hi.dtype)
    return stored, zp.astype(q)
