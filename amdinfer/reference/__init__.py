"""NumPy reference kernels: fast ONNX op overrides, vision and quantization helpers.

``amdinfer.reference`` imports only numpy and onnx.

Example:
    >>> from onnx.reference import ReferenceEvaluator
    >>> from amdinfer.reference import fast_ops
    >>> evaluator = ReferenceEvaluator(model, new_ops=fast_ops())  # doctest: +SKIP
"""

from __future__ import annotations

from amdinfer.reference._conv import conv, conv_transpose
from amdinfer.reference._ops import FAST_OPS, fast_ops
from amdinfer.reference._pool import average_pool, max_pool
from amdinfer.reference._resize import resize
from amdinfer.reference.quant import (
    compute_scale_zero_point,
    dequantize_linear,
    fake_fp16,
    fake_quant,
    quantize_linear,
)
from amdinfer.reference.vision import (
    Layout,
    batched_nms,
    box_iou,
    clip_boxes,
    letterbox,
    linear_taps_fixed,
    nms,
    non_max_suppression,
    resize_bilinear,
    resize_nearest,
    resolve_layout,
    scale_boxes,
    xywh2xyxy,
    xyxy2xywh,
    yolo_decode,
)

from ._metrics import max_abs_error, rms_error
from ._slicing import box_ios, greedy_nmm, match_nms, merge_predictions, slice_boxes

__all__ = [
    "FAST_OPS",
    "Layout",
    "average_pool",
    "batched_nms",
    "box_ios",
    "box_iou",
    "clip_boxes",
    "compute_scale_zero_point",
    "conv",
    "conv_transpose",
    "dequantize_linear",
    "fake_fp16",
    "fake_quant",
    "fast_ops",
    "greedy_nmm",
    "letterbox",
    "linear_taps_fixed",
    "match_nms",
    "max_abs_error",
    "max_pool",
    "merge_predictions",
    "nms",
    "non_max_suppression",
    "quantize_linear",
    "resize",
    "resize_bilinear",
    "resize_nearest",
    "resolve_layout",
    "rms_error",
    "scale_boxes",
    "slice_boxes",
    "xywh2xyxy",
    "xyxy2xywh",
    "yolo_decode",
]
