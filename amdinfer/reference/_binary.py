"""Elementwise binary ops that can write into a dead input (residual additions, SiLU's product), when the
engine's plan allows."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from onnx.reference.ops.op_add import Add as _OnnxAdd
from onnx.reference.ops.op_mul import Mul as _OnnxMul

from amdinfer.reference._common import PlannedOp

__all__ = ["Add", "Mul"]


class _InPlaceBinary(PlannedOp):
    """``ufunc(a, b)`` with NumPy broadcasting, written into an input the plan marked as dead when that input
    already has the broadcast shape and the result's dtype."""

    ufunc: ClassVar[Any]
    inplace_inputs = (0, 1)

    def _run(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        if (self.overwrite or self.keep_output) and isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            shape = np.broadcast_shapes(a.shape, b.shape)
            dtype = np.result_type(a, b)
            out = self._writable((a, b), shape, dtype)
            if out is None and self.keep_output:
                out = self._output(shape, dtype)
            if out is not None:
                return (type(self).ufunc(a, b, out=out),)
        return (np.asarray(type(self).ufunc(a, b)),)


class Add(_InPlaceBinary, _OnnxAdd):
    """ONNX Add (https://onnx.ai/onnx/operators/onnx__Add.html), in place when the plan allows."""

    ufunc = np.add


class Mul(_InPlaceBinary, _OnnxMul):
    """ONNX Mul (https://onnx.ai/onnx/operators/onnx__Mul.html), in place when the plan allows."""

    ufunc = np.multiply
