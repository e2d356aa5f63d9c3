"""Shared helpers for the fast ONNX kernels: attribute normalisation, padding geometry, the planning hooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "BufferBudget",
    "PlannedOp",
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


class BufferBudget:
    """How many bytes of output buffers one engine may keep alive between runs (shared by its kernels)."""

    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = int(limit)


class PlannedOp:
    """Hooks through which the reference engine's execution plan (:mod:`amdinfer.reference._plan`) speeds a kernel up.

    The defaults are the safe behaviour of a kernel used on its own (``ReferenceEvaluator(new_ops=...)``, a
    subgraph): fresh output arrays, inputs never written. The plan, which knows the whole graph and which
    tensors the caller asked for, may set on each instance before a run:

    * ``overwrite``: input positions the kernel may write its result into (the tensor is dead after this
      node: produced by a planned kernel, used once, not requested);
    * ``keep_output``: the output may live in a buffer kept across runs (no alias of it is returned);
    * ``budget``: the engine's :class:`BufferBudget` for such buffers.

    ``prepare(constants)`` is called once at load with the graph's initializers, to pre-pack weights.
    Planned kernels never return a view of an input they were not allowed to overwrite.
    """

    #: Input positions this kernel is able to compute in place (the plan picks among them).
    inplace_inputs: ClassVar[tuple[int, ...]] = ()
    overwrite: tuple[int, ...] = ()
    keep_output: bool = False
    budget: BufferBudget | None = None

    def prepare(self, constants: Mapping[str, np.ndarray]) -> None:
        """Pre-compute what only depends on constant inputs (called once at load by the plan)."""

    def _output(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An output array: a buffer kept across runs when the plan allows it and the budget has room."""
        if not self.keep_output or self.budget is None:
            return np.empty(shape, dtype)
        buf: np.ndarray | None = self.__dict__.get("_kept")
        if buf is not None and buf.shape == shape and buf.dtype == dtype:
            return buf
        if buf is not None:
            self.budget.left += buf.nbytes
            self.__dict__.pop("_kept")
        out = np.empty(shape, dtype)
        if out.nbytes <= self.budget.left:
            self.budget.left -= out.nbytes
            self.__dict__["_kept"] = out
        return out

    def _writable(self, args: Sequence[Any], shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        """The first input the plan lets this kernel overwrite that can hold a result of ``shape``/``dtype``."""
        for i in self.overwrite:
            t = args[i]
            if isinstance(t, np.ndarray) and t.shape == shape and t.dtype == dtype and t.flags.writeable:
                return t
        return None
