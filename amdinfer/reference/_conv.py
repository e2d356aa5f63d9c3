"""Fast Conv and ConvTranspose kernels: im2col / col2im with one batched GEMM per call."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np
from onnx.reference.ops.op_conv import Conv as _OnnxConv
from onnx.reference.ops.op_conv_transpose import ConvTranspose as _OnnxConvTranspose

from amdinfer.reference._common import compute_dtype, conv_pads, normalize, window_slice

__all__ = ["Conv", "ConvTranspose", "conv", "conv_transpose"]

# Above this many im2col elements the batch is processed one image at a time to bound memory.
_MAX_COLS = 1 << 24
# Larger im2col buffers are allocated per call rather than kept alive between calls.
_MAX_SCRATCH_BYTES = 64 << 20


_workspace = threading.local()


def _scratch(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A per-thread reusable buffer: im2col columns die right after the GEMM, so fresh pages are wasted work."""
    size = int(np.prod(shape))
    if size * np.dtype(dtype).itemsize > _MAX_SCRATCH_BYTES:
        return np.empty(shape, dtype=dtype)
    key = np.dtype(dtype).str
    buffers: dict[str, np.ndarray] = _workspace.__dict__.setdefault("buffers", {})
    buf = buffers.get(key)
    if buf is None or buf.size < size:
        buf = np.empty(max(size, 1), dtype=dtype)
        buffers[key] = buf
    return buf[:size].reshape(shape)


def _im2col(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    out: Sequence[int],
    dtype: np.dtype,
) -> np.ndarray:
    """Gather (N, C, *spatial) into (N, C, prod(kernel), *out), reading zeros outside the input.

    One strided copy per kernel offset; the padding is never materialised: the output positions whose tap falls
    in the padding are zeroed instead.
    """
    n, c = x.shape[:2]
    nd = len(kernel)
    cols = _scratch((n, c, int(np.prod(kernel)), *out), dtype)
    for k, offset in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        dst: list[slice] = []
        src: list[slice] = []
        zero: list[tuple[int, slice]] = []
        for i in range(nd):
            shift = offset[i] * dilations[i] - begin[i]
            size = x.shape[2 + i]
            # Output j reads input j * stride + shift; keep the j whose tap lies in [0, size).
            lo = min(out[i], max(0, -(shift // strides[i])))
            hi = max(lo, min(out[i], -(-(size - shift) // strides[i])))
            dst.append(slice(lo, hi))
            src.append(window_slice(lo * strides[i] + shift, strides[i], hi - lo) if hi > lo else slice(0, 0))
            if lo > 0:
                zero.append((i, slice(0, lo)))
            if hi < out[i]:
                zero.append((i, slice(hi, out[i])))
        plane = cols[:, :, k]
        for axis, part in zero:
            index: list[slice] = [slice(None)] * (2 + nd)
            index[2 + axis] = part
            plane[tuple(index)] = 0
        plane[tuple([slice(None), slice(None), *dst])] = x[tuple([slice(None), slice(None), *src])]
    return cols


def conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str | None = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """N-D convolution with ONNX Conv semantics (https://onnx.ai/onnx/operators/onnx__Conv.html).

    Args:
        x: Input (N, C, *spatial).
        w: Weights (M, C / group, *kernel).
        b: Optional bias (M,).
        auto_pad: ``NOTSET``, ``SAME_UPPER``, ``SAME_LOWER`` or ``VALID``.
        dilations: Per spatial axis; default 1.
        group: Number of groups.
        pads: ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``; default 0.
        strides: Per spatial axis; default 1.

    Returns:
        (N, M, *out) in ``x``'s dtype (float16 accumulates in float32).

    Example:
        >>> x = np.ones((1, 2, 5, 5), np.float32); w = np.ones((4, 2, 3, 3), np.float32)
        >>> conv(x, w, pads=[1, 1, 1, 1]).shape
        (1, 4, 5, 5)
    """
    nd = x.ndim - 2
    if nd < 1:
        raise ValueError(f"Conv input: got shape {x.shape}, expected (N, C, *spatial)")
    n, c = x.shape[:2]
    m = w.shape[0]
    kernel = tuple(w.shape[2:])
    if c != w.shape[1] * group or m % group:
        raise ValueError(f"Conv weights: got shape {w.shape} for input {x.shape} and group={group}")
    strides = normalize(strides, nd, 1)
    dilations = normalize(dilations, nd, 1)
    begin, end = conv_pads(auto_pad, x.shape[2:], kernel, strides, dilations, pads)
    ct = compute_dtype(x.dtype)
    out = tuple(
        (x.shape[2 + i] + begin[i] + end[i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nd)
    )
    cg, mg = c // group, m // group
    ksize = int(np.prod(kernel))
    length = int(np.prod(out))
    wr = w.astype(ct, copy=False).reshape(group, mg, cg * ksize)
    y = np.empty((n, group, mg, length), dtype=ct)
    chunk = n if n * c * ksize * length <= _MAX_COLS else 1
    for start in range(0, n, chunk):
        xs = x[start : start + chunk]
        if ksize == 1 and not any(begin) and not any(end):
            index = tuple(window_slice(0, s, o) for s, o in zip(strides, out))
            cols = xs[tuple([slice(None), slice(None), *index])].astype(ct, copy=False)
        else:
            cols = _im2col(xs, kernel, strides, dilations, begin, out, ct)
        cols = cols.reshape(len(xs), group, cg * ksize, length)
        np.matmul(wr, cols, out=y[start : start + chunk])
    y = y.reshape(n, m, *out)
    if b is not None:
        y += b.astype(ct, copy=False).reshape(-1, *(1,) * nd)
    return y.astype(x.dtype, copy=False)


def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    auto_pad: str | None = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """Transposed convolution with ONNX ConvTranspose semantics (https://onnx.ai/onnx/operators/onnx__ConvTranspose.html).

    Padding follows the ONNX specification: with ``output_shape`` (or SAME_*) the total padding is
    ``stride * (in - 1) + output_padding + dilated_kernel - out``, split as ``begin = total // 2`` for SAME_UPPER
    and ``begin = total - total // 2`` otherwise. (ONNX Runtime splits the output_shape/SAME cases the other way
    round; explicit ``pads`` and ``output_padding``, which PyTorch exports, are unambiguous.)

    Args:
        x: Input (N, C, *spatial).
        w: Weights (C, M / group, *kernel).
        b: Optional bias (M,).
        auto_pad: ``NOTSET``, ``SAME_UPPER``, ``SAME_LOWER`` or ``VALID``.
        dilations: Per spatial axis; default 1.
        group: Number of groups.
        output_padding: Extra size added at the end of each spatial axis; default 0.
        output_shape: Spatial output shape; overrides ``pads``.
        pads: ``[x1_begin, ..., x1_end, ...]``; default 0.
        strides: Per spatial axis; default 1.

    Returns:
        (N, M, *out) in ``x``'s dtype.

    Example:
        >>> x = np.ones((1, 1, 2, 2), np.float32); w = np.ones((1, 1, 2, 2), np.float32)
        >>> conv_transpose(x, w, strides=[2, 2]).shape
        (1, 1, 4, 4)
    """
    nd = x.ndim - 2
    n, c = x.shape[:2]
    in_shape = x.shape[2:]
    kernel = tuple(w.shape[2:])
    if c != w.shape[0] or c % group:
        raise ValueError(f"ConvTranspose weights: got shape {w.shape} for input {x.shape} and group={group}")
    cg, mg = c // group, w.shape[1]
    m = mg * group
    strides = normalize(strides, nd, 1)
    dilations = normalize(dilations, nd, 1)
    out_pad = normalize(output_padding, nd, 0)[:nd]
    full = [strides[i] * (in_shape[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    natural = [full[i] + out_pad[i] for i in range(nd)]
    if (output_shape is not None and len(output_shape) > 0) or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None and len(output_shape) > 0:
            size = [int(v) for v in output_shape][-nd:]
        else:
            size = [in_shape[i] * strides[i] for i in range(nd)]
        total = [natural[i] - size[i] for i in range(nd)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
    else:
        p = (0,) * (2 * nd) if auto_pad == "VALID" else normalize(pads, 2 * nd, 0)
        begin = list(p[:nd])
        size = [natural[i] - p[i] - p[nd + i] for i in range(nd)]
    ct = compute_dtype(x.dtype)
    ksize = int(np.prod(kernel))
    length = int(np.prod(in_shape))
    xr = x.astype(ct, copy=False).reshape(n, group, cg, length)
    wt = w.astype(ct, copy=False).reshape(group, cg, mg * ksize).transpose(0, 2, 1)
    cols = np.matmul(wt, xr).reshape(n, m, ksize, *in_shape)
    # The canvas covers both the full correlation and the requested window, which may stick out on either side.
    lo = [min(0, begin[i]) for i in range(nd)]
    hi = [max(full[i], begin[i] + size[i]) for i in range(nd)]
    canvas = np.zeros((n, m, *(hi[i] - lo[i] for i in range(nd))), dtype=ct)
    for k, offset in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        index = tuple(window_slice(offset[i] * dilations[i] - lo[i], strides[i], in_shape[i]) for i in range(nd))
        canvas[tuple([slice(None), slice(None), *index])] += cols[:, :, k]
    crop = tuple(slice(begin[i] - lo[i], begin[i] - lo[i] + size[i]) for i in range(nd))
    y = canvas[tuple([slice(None), slice(None), *crop])]
    if b is not None:
        y = y + b.astype(ct, copy=False).reshape(-1, *(1,) * nd)
    return np.ascontiguousarray(y.astype(x.dtype, copy=False))


class Conv(_OnnxConv):
    """ONNX Conv through :func:`conv` (https://onnx.ai/onnx/operators/onnx__Conv.html)."""

    def _run(  # type: ignore[override]
        self,
        X: np.ndarray,
        W: np.ndarray,
        B: np.ndarray | None = None,
        auto_pad: str | None = None,
        dilations: Sequence[int] | None = None,
        group: int | None = None,
        kernel_shape: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> tuple[np.ndarray]:
        if kernel_shape is not None and len(kernel_shape) and tuple(kernel_shape) != tuple(W.shape[2:]):
            return super()._run(X, W, B, auto_pad, dilations, group, kernel_shape, pads, strides)
        return (
            conv(
                X,
                W,
                B,
                auto_pad=auto_pad,
                dilations=dilations,
                group=group or 1,
                pads=pads,
                strides=strides,
            ),
        )


class ConvTranspose(_OnnxConvTranspose):
    """ONNX ConvTranspose through :func:`conv_transpose` (https://onnx.ai/onnx/operators/onnx__ConvTranspose.html)."""

    def _run(  # type: ignore[override]
        self,
        X: np.ndarray,
        W: np.ndarray,
        B: np.ndarray | None = None,
        auto_pad: str | None = None,
        dilations: Sequence[int] | None = None,
        group: int | None = None,
        kernel_shape: Sequence[int] | None = None,
        output_padding: Sequence[int] | None = None,
        output_shape: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> tuple[np.ndarray]:
        return (
            conv_transpose(
                X,
                W,
                B,
                auto_pad=auto_pad,
                dilations=dilations,
                group=group or 1,
                output_padding=output_padding,
                output_shape=output_shape,
                pads=pads,
                strides=strides,
            ),
        )
