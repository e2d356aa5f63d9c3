"""The ONNX graph builder the fused stages write into, and the constants they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...preprocess import (
    CenterCrop,
    Letterbox,
    Resize,
)

_PREFIX = "fuse/"
_MIN_OPSET = 13
_GEOMETRY = (Letterbox, Resize, CenterCrop)
_MAX_WH = 7680.0
_META_KEY = "amdinfer.pipeline.fuse"
_NMS_MODES = ("per-class", "offset", "dense", "host")
#: Most candidates per image the ``"dense"`` NMS takes by default (its IoU matrix is k x k per image).
_MAX_CANDIDATES = 2048


# ---------------------------------------------------------------------------------------------- graph builder
class _Graph:
    """A tiny ONNX graph builder: every name it makes starts with ``prefix`` (``fuse/``)."""

    def __init__(self, opset: int, prefix: str = _PREFIX) -> None:
        self.opset = opset
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def _name(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}_{self._n}"

    def const(self, value: Any, dtype: Any = None, hint: str = "c") -> str:
        name = self._name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, outputs: int = 1, out: str | None = None, **attrs: Any) -> Any:
        names = [out] if out is not None else [self._name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self._name(op_type + "_node"), **attrs))
        return names[0] if outputs == 1 else names

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        if self.opset >= 18 or op_type == "ReduceSum":
            return self.op(op_type, x, self.const(list(axes), np.int64), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        c = self.const
        return self.op("Slice", x, c([start], np.int64), c([end], np.int64), c([axis], np.int64))

    def dims(self, x: str, start: int, end: int) -> str:
        """``Shape(x)[start:end]`` (``Shape``'s own ``start``/``end`` need opset 15; fused graphs may be 13)."""
        return self.slice(self.op("Shape", x), start, end, 0)

    def gather(self, x: str, index: Any, axis: int) -> str:
        return self.op("Gather", x, self.const(np.asarray(index, np.int64)), axis=axis)
