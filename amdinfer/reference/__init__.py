"""NumPy reference kernels: fast ONNX op overrides, vision and quantization helpers.

Imports only numpy and onnx.
"""

from __future__ import annotations

from amdinfer.reference._ops import FAST_OPS, fast_ops

__all__ = ["FAST_OPS", "fast_ops"]
