"""Fast elementwise activations: no redundant passes or copies."""

from __future__ import annotations

import numpy as np
from onnx.reference.ops.op_relu import Relu as _OnnxRelu
from onnx.reference.ops.op_sigmoid import Sigmoid as _OnnxSigmoid

__all__ = ["Relu", "Sigmoid", "relu", "sigmoid"]


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function ``1 / (1 + exp(-x))`` (https://onnx.ai/onnx/operators/onnx__Sigmoid.html).

    ``exp(-x)`` overflowing to ``inf`` for very negative ``x`` yields the correct limit 0, and for finite values
    the reciprocal keeps full relative precision, so no two-branch formula is needed.

    Example:
        >>> sigmoid(np.array([0.0, 1000.0, -1000.0], np.float32))
        array([0.5, 1. , 0. ], dtype=float32)
    """
    with np.errstate(over="ignore"):
        e = np.negative(x)
        np.exp(e, out=e)
    e += 1
    return np.reciprocal(e, out=e)


def relu(x: np.ndarray) -> np.ndarray:
    """``max(x, 0)`` in ``x``'s dtype (https://onnx.ai/onnx/operators/onnx__Relu.html).

    Example:
        >>> relu(np.array([-1.0, 2.0], np.float32))
        array([0., 2.], dtype=float32)
    """
    return np.maximum(x, x.dtype.type(0))


class Sigmoid(_OnnxSigmoid):
    """ONNX Sigmoid through :func:`sigmoid` (https://onnx.ai/onnx/operators/onnx__Sigmoid.html)."""

    def _run(self, X: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        return (sigmoid(X),)


class Relu(_OnnxRelu):
    """ONNX Relu through :func:`relu` (https://onnx.ai/onnx/operators/onnx__Relu.html)."""

    def _run(self, x: np.ndarray) -> tuple[np.ndarray]:  # type: ignore[override]
        return (relu(x),)
