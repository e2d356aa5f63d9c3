"""Elementwise binary ops that can write into a dead input (residual additions), when the engine's plan allows."""

from __future__ import annotations

import numpy as np
from onnx.reference.ops.op_add import Add as _OnnxAdd

from amdinfer.reference._common import PlannedOp

__all__ = ["Add"]


class Add(_OnnxAdd, PlannedOp):
    """ONNX Add with NumPy broadcasting (https://onnx.ai/onnx/operators/onnx__Add.html).

    Writes into an input the plan marked as dead when that input already has the broadcast shape.
    """

    inplace_inputs = (0, 1)

    def _run(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        if (self.overwrite or self.keep_output) and isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            shape = np.broadcast_shapes(a.shape, b.shape)
            dtype = np.result_type(a, b)
            out = self._writable((a, b), shape, dtype)
            if out is None and self.keep_output:
                out = self._output(shape, dtype)
            if out is not None:
                return (np.add(a, b, out=out),)
        return (np.asarray(np.add(a, b)),)
