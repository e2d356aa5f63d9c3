"""Fast BatchNormalization (inference): one fused multiply-add per element, in place when the plan allows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx.reference.ops.op_batch_normalization import BatchNormalization_14 as _OnnxBatchNormalization

from amdinfer.reference._common import PlannedOp, compute_dtype

__all__ = ["BatchNormalization", "batch_normalization", "batchnorm_coefficients"]


def batchnorm_coefficients(
    scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """``a = scale / sqrt(var + epsilon)`` and ``c = bias - mean * a`` in float64, so that ``y = x * a + c``."""
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    c = bias.astype(np.float64) - mean.astype(np.float64) * a
    return a, c


def batch_normalization(
    x: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    *,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """Inference-mode BatchNormalization (https://onnx.ai/onnx/operators/onnx__BatchNormalization.html).

    ``y = x * a + c`` with ``a = scale / sqrt(var + epsilon)`` and ``c = bias - mean * a``; the per-channel
    coefficients are computed in float64 and rounded once to the compute dtype.

    Example:
        >>> ones = np.ones(2, np.float32)
        >>> batch_normalization(np.zeros((1, 2, 1, 1), np.float32), ones, ones, ones * 0, ones, epsilon=0.0)[0, :, 0, 0]
        array([1., 1.], dtype=float32)
    """
    a, c = batchnorm_coefficients(scale, bias, mean, var, epsilon)
    return _apply(x, a, c, None)


def _apply(x: np.ndarray, a: np.ndarray, c: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    ct = compute_dtype(x.dtype)
    shape = (-1,) + (1,) * (x.ndim - 2)
    ac, cc = a.astype(ct, copy=False).reshape(shape), c.astype(ct, copy=False).reshape(shape)
    if out is None or ct != x.dtype:
        y = x.astype(ct, copy=False) * ac
        y += cc
        return y.astype(x.dtype, copy=False)
    np.multiply(x, ac, out=out)
    out += cc
    return out


class BatchNormalization(_OnnxBatchNormalization, PlannedOp):
    """ONNX BatchNormalization; inference mode through :func:`batch_normalization`, training mode through onnx.

    With constant parameters the coefficients are computed once at load. When the engine's plan folds the
    node into the convolution that feeds it (``folded_into``), the convolution already applied it.
    """

    inplace_inputs = (0,)
    #: The Conv kernel this node was folded into by the plan (it then returns its input as it is).
    folded_into: Any = None

    def prepare(self, constants: Mapping[str, np.ndarray]) -> None:
        names = list(self.onnx_node.input[1:5])
        if getattr(self, "training_mode", 0) or len(names) < 4 or not all(n in constants for n in names):
            return
        params = [constants[n] for n in names]
        if any(not isinstance(p, np.ndarray) or p.ndim != 1 for p in params):
            return
        epsilon = getattr(self, "epsilon", None)
        scale, bias, mean, var = params
        a, c = batchnorm_coefficients(scale, bias, mean, var, 1e-5 if epsilon is None else float(epsilon))
        self.constant_params = (params, a, c)

    def _run(  # type: ignore[override]
        self,
        x: np.ndarray,
        scale: np.ndarray,
        bias: np.ndarray,
        mean: np.ndarray,
        var: np.ndarray,
        epsilon: float | None = None,
        momentum: float | None = None,
        training_mode: int | None = None,
        **legacy: Any,  # is_test / spatial of opset < 9, meaningless in inference mode
    ) -> tuple[np.ndarray, ...]:
        if training_mode:
            return super()._run(x, scale, bias, mean, var, epsilon, momentum, training_mode)
        if self.folded_into is not None and self.folded_into.folded_last_run:
            return (x,)
        known = self.__dict__.get("constant_params")
        if known is not None and all(p is q for p, q in zip(known[0], (scale, bias, mean, var))):
            a, c = known[1], known[2]
        else:
            eps = 1e-5 if epsilon is None else float(epsilon)
            a, c = batchnorm_coefficients(scale, bias, mean, var, eps)
        out = self._writable((x,), x.shape, x.dtype)
        if out is None and self.keep_output:
            out = self._output(x.shape, x.dtype)
        return (_apply(x, a, c, out),)
