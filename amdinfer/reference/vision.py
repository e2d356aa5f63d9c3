"""Vision kernels ONNX does not define: resizing, letterbox, boxes, NMS and YOLO decoding.

Example:
    >>> import numpy as np
    >>> from amdinfer.reference.vision import letterbox, scale_boxes
    >>> image, ratio, pad = letterbox(np.zeros((480, 640, 3), np.uint8), 640)
    >>> scale_boxes(np.array([[0.0, 80.0, 640.0, 560.0]]), ratio, pad, (480, 640))
    array([[  0.,   0., 640., 480.]])
"""

from __future__ import annotations

from amdinfer.reference._boxes import box_iou, clip_boxes, scale_boxes, xywh2xyxy, xyxy2xywh
from amdinfer.reference._image import letterbox, linear_taps_fixed, resize_bilinear, resize_nearest
from amdinfer.reference._nms import batched_nms, nms
from amdinfer.reference._yolo import Layout, non_max_suppression, resolve_layout, yolo_decode

__all__ = [
    "Layout",
    "batched_nms",
    "box_iou",
    "clip_boxes",
    "letterbox",
    "linear_taps_fixed",
    "nms",
    "non_max_suppression",
    "resize_bilinear",
    "resize_nearest",
    "resolve_layout",
    "scale_boxes",
    "xywh2xyxy",
    "xyxy2xywh",
    "yolo_decode",
]
