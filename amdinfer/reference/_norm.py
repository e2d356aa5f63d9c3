"""Fast BatchNormalization (inference): one fused multiply-add per element."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.reference.ops.op_batch_normalization import BatchNormalization_14 as _OnnxBatchNormalization

from amdinfer.reference._common import compute_dtype

__all__ = ["BatchNormalization", "batch_normalization"]


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
    ct = compute_dtype(x.dtype)
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    c = bias.astype(np.float64) - mean.astype(np.float64) * a
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = x.astype(ct, copy=False) * a.astype(ct).reshape(shape)
    y += c.astype(ct).reshape(shape)
    return y.astype(x.dtype, copy=False)


class BatchNormalization(_OnnxBatchNormalization):
    """ONNX BatchNormalization; inference mode through :func:`batch_normalization`, training mode through onnx."""

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
        eps = 1e-5 if epsilon is None else float(epsilon)
        return (batch_normalization(x, scale, bias, mean, var, epsilon=eps),)
