"""Fast pooling kernels: separable window reductions on strided slices."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
from onnx.reference.op_run import OpRun
from onnx.reference.ops.op_average_pool import AveragePool_19 as _OnnxAveragePool
from onnx.reference.ops.op_max_pool import MaxPool as _OnnxMaxPool

from amdinfer.reference._common import compute_dtype, normalize, pad_constant, pool_geometry, window_slice

__all__ = [
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "MaxPool",
    "average_pool",
    "max_pool",
]


def _lowest(dtype: np.dtype) -> float | int:
    if np.issubdtype(dtype, np.integer):
        return int(np.iinfo(dtype).min)
    return -np.inf


def _reduce_axis(
    x: np.ndarray,
    axis: int,
    kernel: int,
    stride: int,
    dilation: int,
    out: int,
    op: Callable[..., np.ndarray],
) -> np.ndarray:
    """Reduce windows of one axis with a binary ufunc (``np.maximum`` or ``np.add``)."""
    index: list[slice] = [slice(None)] * x.ndim
    result = None
    for k in range(kernel):
        index[axis] = window_slice(k * dilation, stride, out)
        part = x[tuple(index)]
        result = part.copy() if result is None else op(result, part, out=result)
    assert result is not None
    return result


def _prepare(
    x: np.ndarray,
    auto_pad: str | None,
    ceil_mode: int | None,
    dilations: Sequence[int] | None,
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> tuple[tuple[int, ...], ...]:
    nd = x.ndim - 2
    kernel = tuple(int(k) for k in kernel_shape)
    strides_ = normalize(strides, nd, 1)
    dilations_ = normalize(dilations, nd, 1)
    out, begin, end = pool_geometry(auto_pad, x.shape[2:], kernel, strides_, dilations_, pads, ceil_mode)
    # Pad exactly what the windows touch: ceil mode may need more than the explicit end pads, floor mode less.
    reach = tuple(
        (out[i] - 1) * strides_[i] + (kernel[i] - 1) * dilations_[i] + 1 - begin[i] - x.shape[2 + i] for i in range(nd)
    )
    return kernel, strides_, dilations_, out, begin, end, reach


def max_pool(
    x: np.ndarray,
    kernel_shape: Sequence[int],
    *,
    auto_pad: str | None = "NOTSET",
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    storage_order: int = 0,
    strides: Sequence[int] | None = None,
    return_indices: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Max pooling with ONNX MaxPool semantics (https://onnx.ai/onnx/operators/onnx__MaxPool.html).

    Args:
        x: Input (N, C, *spatial), float or 8-bit integer.
        kernel_shape: Window size per spatial axis.
        auto_pad: ``NOTSET``, ``SAME_UPPER``, ``SAME_LOWER`` or ``VALID``.
        ceil_mode: Use ceil instead of floor for the output shape.
        dilations: Per spatial axis; default 1.
        pads: ``[x1_begin, ..., x1_end, ...]``; padded positions never win.
        storage_order: 0 for row-major indices, 1 for column-major (2-D only).
        strides: Per spatial axis; default 1.
        return_indices: Also return the flat index of each maximum into ``x`` (first maximum wins on ties).

    Returns:
        The pooled tensor, and the int64 indices when ``return_indices``.

    Example:
        >>> max_pool(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), [2, 2], strides=[2, 2])[0, 0]
        array([[ 5.,  7.],
               [13., 15.]], dtype=float32)
    """
    kernel, strides_, dilations_, out, begin, _, reach = _prepare(
        x, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides
    )
    xp = pad_constant(x, begin, reach, _lowest(x.dtype))
    if not return_indices:
        y = xp
        for i in range(len(kernel)):
            y = _reduce_axis(y, 2 + i, kernel[i], strides_[i], dilations_[i], out[i], np.maximum)
        return y
    return _max_pool_with_indices(x, xp, kernel, strides_, dilations_, out, begin, storage_order)


def _max_pool_with_indices(
    x: np.ndarray,
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
    begin: Sequence[int],
    storage_order: int,
) -> tuple[np.ndarray, np.ndarray]:
    nd = len(kernel)
    in_shape = x.shape[2:]
    if storage_order and nd == 2:
        axis_stride = [1, in_shape[0]]
    else:
        axis_stride = [int(np.prod(in_shape[i + 1 :])) for i in range(nd)]
    best = None
    best_pos = None
    for offset in itertools.product(*(range(k) for k in kernel)):
        index = tuple(window_slice(offset[i] * dilations[i], strides[i], out[i]) for i in range(nd))
        value = xp[tuple([slice(None), slice(None), *index])]
        # Spatial position (in the unpadded input) of this kernel offset for every output pixel.
        pos = np.zeros(out, dtype=np.int64)
        for i in range(nd):
            coord = np.arange(out[i]) * strides[i] + offset[i] * dilations[i] - begin[i]
            pos = pos + (coord * axis_stride[i]).reshape((-1,) + (1,) * (nd - 1 - i))
        if best is None:
            best = value.copy()
            best_pos = np.broadcast_to(pos, value.shape).copy()
            continue
        better = value > best
        np.copyto(best, value, where=better)
        np.copyto(best_pos, pos, where=better)  # type: ignore[arg-type]
    assert best is not None and best_pos is not None
    plane = int(np.prod(in_shape))
    base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[0], x.shape[1], *(1,) * nd) * plane
    return best, best_pos + base


def average_pool(
    x: np.ndarray,
    kernel_shape: Sequence[int],
    *,
    auto_pad: str | None = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> np.ndarray:
    """Average pooling with ONNX AveragePool semantics (https://onnx.ai/onnx/operators/onnx__AveragePool.html).

    The divisor counts the window positions inside the input (``count_include_pad=0``) or inside the input plus
    its explicit pads (``count_include_pad=1``); positions a ceil-mode window runs past the pads never count.

    Args:
        x: Input (N, C, *spatial).
        kernel_shape: Window size per spatial axis.
        auto_pad: ``NOTSET``, ``SAME_UPPER``, ``SAME_LOWER`` or ``VALID``.
        ceil_mode: Use ceil instead of floor for the output shape.
        count_include_pad: Count padded positions in the divisor.
        dilations: Per spatial axis; default 1.
        pads: ``[x1_begin, ..., x1_end, ...]``.
        strides: Per spatial axis; default 1.

    Returns:
        The pooled tensor in ``x``'s dtype (float16 accumulates in float32).

    Example:
        >>> average_pool(np.ones((1, 1, 3, 3), np.float32), [3, 3], pads=[1, 1, 1, 1])[0, 0, 0]
        array([1., 1., 1.], dtype=float32)
    """
    kernel, strides_, dilations_, out, begin, end, reach = _prepare(
        x, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides
    )
    ct = compute_dtype(x.dtype)
    y = pad_constant(x, begin, reach, 0, ct)
    nd = len(kernel)
    for i in range(nd):
        y = _reduce_axis(y, 2 + i, kernel[i], strides_[i], dilations_[i], out[i], np.add)
    # The valid region is a box, so the divisor is the outer product of per-axis counts.
    divisor = np.ones((1,) * nd, dtype=ct)
    for i in range(nd):
        pos = np.arange(out[i])[:, None] * strides_[i] - begin[i] + np.arange(kernel[i])[None, :] * dilations_[i]
        lo, hi = (-begin[i], x.shape[2 + i] + end[i]) if count_include_pad else (0, x.shape[2 + i])
        count = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(ct)
        divisor = divisor * count.reshape((-1,) + (1,) * (nd - 1 - i))
    y /= divisor
    return y.astype(x.dtype, copy=False)


class MaxPool(_OnnxMaxPool):
    """ONNX MaxPool through :func:`max_pool` (https://onnx.ai/onnx/operators/onnx__MaxPool.html)."""

    def _run(  # type: ignore[override]
        self,
        x: np.ndarray,
        auto_pad: str | None = None,
        ceil_mode: int | None = None,
        dilations: Sequence[int] | None = None,
        kernel_shape: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        storage_order: int | None = None,
        strides: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, ...]:
        assert kernel_shape is not None
        with_indices = len(self.output) > 1 and bool(self.output[1])
        result = max_pool(
            x,
            kernel_shape,
            auto_pad=auto_pad,
            ceil_mode=ceil_mode or 0,
            dilations=dilations,
            pads=pads,
            storage_order=storage_order or 0,
            strides=strides,
            return_indices=with_indices,
        )
        return result if isinstance(result, tuple) else (result,)


class AveragePool(_OnnxAveragePool):
    """ONNX AveragePool through :func:`average_pool` (https://onnx.ai/onnx/operators/onnx__AveragePool.html)."""

    def _run(  # type: ignore[override]
        self,
        x: np.ndarray,
        auto_pad: str | None = None,
        ceil_mode: int | None = None,
        count_include_pad: int | None = None,
        dilations: Sequence[int] | None = None,
        kernel_shape: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
    ) -> tuple[np.ndarray]:
        assert kernel_shape is not None
        return (
            average_pool(
                x,
                kernel_shape,
                auto_pad=auto_pad,
                ceil_mode=ceil_mode or 0,
                count_include_pad=count_include_pad or 0,
                dilations=dilations,
                pads=pads,
                strides=strides,
            ),
        )


class GlobalAveragePool(OpRun):
    """ONNX GlobalAveragePool (https://onnx.ai/onnx/operators/onnx__GlobalAveragePool.html)."""

    def _run(self, x: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        axes = tuple(range(2, x.ndim))
        return (x.mean(axis=axes, keepdims=True, dtype=compute_dtype(x.dtype)).astype(x.dtype),)


class GlobalMaxPool(OpRun):
    """ONNX GlobalMaxPool (https://onnx.ai/onnx/operators/onnx__GlobalMaxPool.html)."""

    def _run(self, x: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        return (x.max(axis=tuple(range(2, x.ndim)), keepdims=True),)
