"""The list of fast kernels handed to ``onnx.reference.ReferenceEvaluator(new_ops=...)``."""

from __future__ import annotations

from onnx.reference.op_run import OpRun

from amdinfer.reference._activation import Relu, Sigmoid
from amdinfer.reference._binary import Add, Mul
from amdinfer.reference._conv import Conv, ConvTranspose
from amdinfer.reference._norm import BatchNormalization
from amdinfer.reference._pool import AveragePool, GlobalAveragePool, GlobalMaxPool, MaxPool
from amdinfer.reference._resize import Resize

__all__ = ["FAST_OPS", "fast_ops"]

FAST_OPS: list[type[OpRun]] = [
    Add,
    AveragePool,
    BatchNormalization,
    Conv,
    ConvTranspose,
    GlobalAveragePool,
    GlobalMaxPool,
    MaxPool,
    Mul,
    Relu,
    Resize,
    Sigmoid,
]


def fast_ops() -> list[type[OpRun]]:
    """Fast NumPy kernels that override onnx's reference ones, for ``ReferenceEvaluator(new_ops=...)``.

    Returns:
        A fresh list of :class:`onnx.reference.op_run.OpRun` subclasses, one per ONNX op type.

    Example:
        >>> from onnx.reference import ReferenceEvaluator
        >>> from amdinfer.reference import fast_ops
        >>> evaluator = ReferenceEvaluator(model, new_ops=fast_ops())  # doctest: +SKIP
    """
    return list(FAST_OPS)
