"""Quantization kernels: ONNX QuantizeLinear / DequantizeLinear, fake-quant int8/fp16, calibration scales.

Example:
    >>> import numpy as np
    >>> from amdinfer.reference.quant import compute_scale_zero_point, fake_quant
    >>> scale, zp = compute_scale_zero_point(np.float32(-1.0), np.float32(1.0), np.int8, symmetric=True)
    >>> fake_quant(np.array([0.5], np.float32), scale, zp)
    array([0.503937], dtype=float32)
"""

from __future__ import annotations

from amdinfer.reference._quant import (
    compute_scale_zero_point,
    dequantize_linear,
    fake_fp16,
    fake_quant,
    quantize_linear,
)

__all__ = ["compute_scale_zero_point", "dequantize_linear", "fake_fp16", "fake_quant", "quantize_linear"]
