"""Shared helpers for the fast ONNX kernels: attribute normalisation and padding geometry."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "compute_dtype",
    "conv_pads",
    "normalize",
    "pad_constant",
    "pool_geometry",
    "window_slice",
]


def normalize(value: Sequence[int] | None, n: int, default: int) -> tuple[int, ...]:
    """Return ``value`` as a tuple of ``n`` ints, or ``(default,) * n`` when it is missing."""
    if value is None or len(value) == 0:
        return (default,) * n
    return tuple(int(v) for v in value)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """Dtype the arithmetic runs in: float16 accumulates in float32, everything else in itself."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def conv_pads(
    auto_pad: str | None,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int] | None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Begin and end pads of a Conv, following the ONNX ``auto_pad`` rules.

    SAME_* targets ``ceil(in / stride)`` outputs; SAME_UPPER puts the odd pixel at the end, SAME_LOWER at the start.
    """
    nd = len(in_shape)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(nd):
            target = -(-in_shape[i] // strides[i])
            needed = max(0, (target - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_shape[i])
            head = needed // 2 if auto_pad == "SAME_UPPER" else (needed + 1) // 2
            begin.append(head)
            end.append(needed - head)
        return tuple(begin), tuple(end)
    if auto_pad == "VALID":
        return (0,) * nd, (0,) * nd
    p = normalize(pads, 2 * nd, 0)
    return p[:nd], p[nd:]


def pool_geometry(
    auto_pad: str | None,
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int] | None,
    ceil_mode: int | None,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Output shape, begin pads and end pads of a pooling op (ONNX MaxPool/AveragePool, opset 19+ rules).

    With explicit pads, ``out = floor_or_ceil((in + pads - dilated_kernel) / stride) + 1``; in ceil mode a window
    that would start inside the end padding is dropped. The returned end pads are the explicit ones: windows that run
    past them (ceil mode) see the pooling identity, not data.
    """
    nd = len(in_shape)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        # The same pads as a Conv's; SAME_* windows number ceil(in / stride), VALID ones only the full windows.
        begin, end = conv_pads(auto_pad, in_shape, kernel, strides, dilations, pads)
        out = []
        for i in range(nd):
            if auto_pad == "VALID":
                keff = (kernel[i] - 1) * dilations[i] + 1
                out.append(-(-(in_shape[i] - keff + 1) // strides[i]))
            else:
                out.append(-(-in_shape[i] // strides[i]))
        return tuple(out), begin, end
    p = normalize(pads, 2 * nd, 0)
    begin, end = p[:nd], p[nd:]
    out = []
    for i in range(nd):
        keff = (kernel[i] - 1) * dilations[i] + 1
        span = in_shape[i] + begin[i] + end[i] - keff
        if ceil_mode:
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= in_shape[i] + begin[i]:
                o -= 1
        else:
            o = span // strides[i] + 1
        out.append(o)
    return tuple(out), begin, end


def pad_constant(
    x: np.ndarray,
    begin: Sequence[int],
    end: Sequence[int],
    value: float | int,
    dtype: np.dtype | None = None,
) -> np.ndarray:
    """Pad the trailing ``len(begin)`` axes of ``x`` with ``value``; negative pads crop, all-zero pads copy nothing."""
    dtype = np.dtype(dtype or x.dtype)
    nd = len(begin)
    lead = x.ndim - nd
    if not any(begin) and not any(end):
        return x if x.dtype == dtype else x.astype(dtype)
    # Negative pads crop the input first, so the rest of the function deals with non-negative pads only.
    crop = tuple(slice(max(0, -b), x.shape[lead + i] - max(0, -e)) for i, (b, e) in enumerate(zip(begin, end)))
    x = x[tuple([Ellipsis, *crop])]  # type: ignore[list-item]
    begin = [max(0, b) for b in begin]
    end = [max(0, e) for e in end]
    shape = x.shape[:lead] + tuple(x.shape[lead + i] + begin[i] + end[i] for i in range(nd))
    out = np.full(shape, value, dtype=dtype)
    out[tuple([Ellipsis, *(slice(b, b + x.shape[lead + i]) for i, b in enumerate(begin))])] = x  # type: ignore[index]
    return out


def window_slice(offset: int, stride: int, count: int) -> slice:
    """Slice picking ``count`` positions ``offset, offset + stride, ...`` along one axis."""
    return slice(offset, offset + stride * (count - 1) + 1, stride)
