"""Fast elementwise activations: no redundant passes or copies; in place when the engine's plan allows."""

from __future__ import annotations

import numpy as np
from onnx.reference.ops.op_relu import Relu as _OnnxRelu
from onnx.reference.ops.op_sigmoid import Sigmoid as _OnnxSigmoid

from amdinfer.reference._common import PlannedOp

__all__ = ["Relu", "Sigmoid", "relu", "sigmoid"]


def _sigmoid_into(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        np.negative(x, out=e)
        np.exp(e, out=e)
    e += 1
    return np.reciprocal(e, out=e)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function ``1 / (1 + exp(-x))`` (https://onnx.ai/onnx/operators/onnx__Sigmoid.html).

    ``exp(-x)`` overflowing to ``inf`` for very negative ``x`` yields the correct limit 0, and for finite values
    the reciprocal keeps full relative precision, so no two-branch formula is needed.

    Example:
        >>> sigmoid(np.array([0.0, 1000.0, -1000.0], np.float32))
        array([0.5, 1. , 0. ], dtype=float32)
    """
    return _sigmoid_into(x, np.empty_like(x))


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` in ``x``'s dtype (https://onnx.ai/onnx/operators/onnx__Relu.html).

    Example:
        >>> relu(np.array([-1.0, 2.0], np.float32))
        array([0., 2.], dtype=float32)
    """
    return np.maximum(x, x.dtype.type(0))


class Sigmoid(_OnnxSigmoid, PlannedOp):
    """ONNX Sigmoid through :func:`sigmoid` (https://onnx.ai/onnx/operators/onnx__Sigmoid.html)."""

    inplace_inputs = (0,)

    def _run(self, X: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        if not np.issubdtype(X.dtype, np.floating):
            return (sigmoid(X),)
        out = self._writable((X,), X.shape, X.dtype)
        return (_sigmoid_into(X, out if out is not None else self._output(X.shape, X.dtype)),)


class Relu(_OnnxRelu, PlannedOp):
    """ONNX Relu through :func:`relu` (https://onnx.ai/onnx/operators/onnx__Relu.html)."""

    inplace_inputs = (0,)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        out = self._writable((x,), x.shape, x.dtype)
        if out is None:
            out = self._output(x.shape, x.dtype)
        return (np.maximum(x, x.dtype.type(0), out=out),)
