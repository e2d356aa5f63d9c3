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


# ---------------------------------------------------------------------------------------------- a fixed canvas
def host_canvas(host: Sequence[Any]) -> tuple[int, int] | None:
    """The ``(height, width)`` every image's canvas has when the last host stage is geometry with a fixed output
    (``Letterbox`` without ``auto``, ``Resize`` to a ``(h, w)``, ``CenterCrop``), else ``None``.

    Example:
        >>> host_canvas([Letterbox(640)]), host_canvas([Letterbox(640, auto=True)]), host_canvas([])
        ((640, 640), None, None)
    """
    last = host[-1] if host else None
    hw: Any = None
    if isinstance(last, Letterbox):
        hw = None if last.auto else last.new_shape
    elif isinstance(last, Resize):
        hw = last.size if isinstance(last.size, tuple) else None
    elif isinstance(last, CenterCrop):
        hw = last.size
    return None if hw is None else (int(hw[0]), int(hw[1]))


def fix_canvas(model: onnx.ModelProto, hw: tuple[int, int], name: str = "images") -> onnx.ModelProto:
    """``model`` with the height and width of its ``(N, H, W, C)`` input ``name`` declared as ``hw`` (where they
    are symbolic): the engine then sees one canvas, not an input varying beyond the batch axis, and keeps the
    tuning of fixed shapes (one session, cuDNN's exhaustive search).

    Example:
        >>> from onnx import TensorProto
        >>> x = helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", "H", "W", 3])
        >>> y = helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", "H", "W", 3])
        >>> m = helper.make_model(helper.make_graph([helper.make_node("Identity", ["images"], ["y"])], "g", [x], [y]))
        >>> [d.dim_value or d.dim_param for d in fix_canvas(m, (64, 48)).graph.input[0].type.tensor_type.shape.dim]
        ['N', 64, 48, 3]
    """
    for value in model.graph.input:
        if value.name != name:
            continue
        dims = value.type.tensor_type.shape.dim
        if len(dims) == 4:
            for axis, size in zip((1, 2), hw):
                if not dims[axis].HasField("dim_value"):
                    dims[axis].Clear()
                    dims[axis].dim_value = int(size)
    return model
