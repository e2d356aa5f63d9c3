"""Decoding of YOLO detector outputs and Ultralytics-compatible non-maximum suppression."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from amdinfer.reference._boxes import xywh2xyxy
from amdinfer.reference._nms import nms

__all__ = ["Layout", "non_max_suppression", "resolve_layout", "yolo_decode"]

Layout = Literal["auto", "v5", "v8", "e2e"]
_LAYOUTS = ("auto", "v5", "v8", "e2e")


def resolve_layout(output: np.ndarray, layout: Layout = "auto") -> str:
    """The concrete layout of a YOLO output: ``v8``, ``v5`` or ``e2e``.

    ``auto`` follows Ultralytics: a last axis of 6 is end-to-end ``(N, k, 6)``; otherwise the shorter of the two
    trailing axes holds the channels, so ``(N, 4 + nc, A)`` is v8 and ``(N, A, 5 + nc)`` is v5. A single-class v5
    model also has 6 channels: pass ``layout="v5"`` for it.

    Example:
        >>> resolve_layout(np.zeros((1, 84, 8400))), resolve_layout(np.zeros((1, 25200, 85)))
        ('v8', 'v5')
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: got {layout!r}, expected one of {_LAYOUTS}")
    if output.ndim != 3:
        raise ValueError(f"output: got shape {output.shape}, expected (N, channels, anchors) or (N, anchors, channels)")
    if layout != "auto":
        return layout
    if output.shape[-1] == 6:
        return "e2e"
    return "v8" if output.shape[1] < output.shape[2] else "v5"


def _decode_one(
    pred: np.ndarray,
    layout: str,
    conf_threshold: float,
    multi_label: bool,
    classes: Sequence[int] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's (boxes, scores, classes) above the threshold, in anchor order (row-major when multi-label)."""
    if layout == "e2e":
        keep = pred[:, 4] > conf_threshold
        boxes, scores, cls = pred[keep, :4], pred[keep, 4], pred[keep, 5]
    else:
        if layout == "v8":
            x = pred.T
            cls_scores = x[:, 4:]
            candidate = cls_scores.max(axis=1, initial=-np.inf) > conf_threshold
        else:
            x = pred
            candidate = x[:, 4] > conf_threshold
        x = x[candidate]
        boxes = xywh2xyxy(x[:, :4])
        cls_scores = x[:, 4:] if layout == "v8" else x[:, 5:] * x[:, 4:5]
        if multi_label and cls_scores.shape[1] > 1:
            i, j = np.nonzero(cls_scores > conf_threshold)
            boxes, scores, cls = boxes[i], cls_scores[i, j], j.astype(pred.dtype)
        else:
            j = cls_scores.argmax(axis=1) if cls_scores.shape[1] else np.zeros(len(x), np.int64)
            scores = np.take_along_axis(cls_scores, j[:, None], axis=1)[:, 0] if len(x) else cls_scores[:, :1][:, 0]
            keep = scores > conf_threshold
            boxes, scores, cls = boxes[keep], scores[keep], j[keep].astype(pred.dtype)
    if classes is not None:
        keep = np.isin(cls, np.asarray(classes))
        boxes, scores, cls = boxes[keep], scores[keep], cls[keep]
    return boxes, scores, cls.astype(np.int64)


def yolo_decode(
    output: np.ndarray,
    layout: Layout = "auto",
    conf_threshold: float = 0.25,
    *,
    multi_label: bool = False,
    classes: Sequence[int] | None = None,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per-image detections above a confidence threshold from a raw YOLO output (no NMS).

    Layouts (see :func:`resolve_layout`):

    * ``v8``: ``(N, 4 + nc, A)``, rows ``cx, cy, w, h`` then class scores; score = class score.
    * ``v5``: ``(N, A, 5 + nc)``, ``cx, cy, w, h, objectness`` then class scores; anchors need objectness above
      the threshold, and score = objectness * class score.
    * ``e2e``: ``(N, k, 6)``, ``x1, y1, x2, y2, score, class`` (already suppressed); kept when score is above the
      threshold.

    With ``multi_label`` every (anchor, class) pair above the threshold is a detection (when there are several
    classes); otherwise each anchor gives its best class if that is above the threshold. ``classes`` keeps only
    the listed class ids. All comparisons are strict (``>``), as in Ultralytics.

    Args:
        output: Raw model output.
        layout: ``auto``, ``v8``, ``v5`` or ``e2e``.
        conf_threshold: Minimum score, exclusive.
        multi_label: One detection per class above the threshold instead of the best class only.
        classes: Class ids to keep; all when None.

    Returns:
        One ``(boxes_xyxy (k, 4), scores (k,), classes int64 (k,))`` per image, in anchor order.

    Example:
        >>> out = np.zeros((1, 6, 2), np.float32)          # v8: 2 anchors, 2 classes
        >>> out[0, :, 0] = [50, 50, 20, 10, 0.9, 0.1]
        >>> boxes, scores, cls = yolo_decode(out, "v8")[0]
        >>> boxes, scores, cls
        (array([[40., 45., 60., 55.]], dtype=float32), array([0.9], dtype=float32), array([0]))
    """
    kind = resolve_layout(output, layout)
    return [_decode_one(pred, kind, conf_threshold, multi_label, classes) for pred in output]


def non_max_suppression(
    prediction: np.ndarray,
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    *,
    classes: Sequence[int] | None = None,
    agnostic: bool = False,
    multi_label: bool = False,
    max_det: int = 300,
    max_nms: int = 30000,
    max_wh: int = 7680,
    layout: Layout = "auto",
) -> list[np.ndarray]:
    """Ultralytics ``non_max_suppression`` for v8, v5 and end-to-end outputs.

    Each image is decoded with :func:`yolo_decode`; when more than ``max_nms`` detections remain, the
    ``max_nms`` best are kept (v5 always sorts by score first, as YOLOv5 does); then greedy NMS (:func:`nms`,
    torchvision semantics) runs on the boxes shifted by ``class * max_wh`` (0 when ``agnostic``), Ultralytics'
    offset trick, so classes never suppress each other and the IoUs are bit-for-bit Ultralytics'; at most
    ``max_det`` detections are kept. End-to-end outputs skip NMS and keep the first ``max_det`` detections above
    the threshold.

    Args:
        prediction: Raw output, (N, 4 + nc, A), (N, A, 5 + nc) or (N, k, 6).
        conf_threshold: Minimum score, exclusive.
        iou_threshold: IoU above which a lower-scored box is suppressed.
        classes: Class ids to keep; all when None.
        agnostic: Let boxes of different classes suppress each other.
        multi_label: One detection per class above the threshold.
        max_det: Maximum detections per image.
        max_nms: Maximum detections entering NMS.
        max_wh: Class offset of the offset trick; larger than any box coordinate.
        layout: ``auto``, ``v8``, ``v5`` or ``e2e``.

    Returns:
        One (k, 6) array per image: ``x1, y1, x2, y2, score, class``, by decreasing score (end-to-end: in model
        order).

    Example:
        >>> out = np.zeros((1, 5, 8), np.float32)          # v8: 8 anchors, 1 class
        >>> out[0, :, 0] = [50, 50, 20, 20, 0.9]; out[0, :, 1] = [51, 50, 20, 20, 0.8]
        >>> non_max_suppression(out)[0]
        array([[40. , 40. , 60. , 60. ,  0.9,  0. ]], dtype=float32)
    """
    if not 0 <= conf_threshold <= 1 or not 0 <= iou_threshold <= 1:
        raise ValueError(f"thresholds: got conf={conf_threshold}, iou={iou_threshold}, expected values in [0, 1]")
    kind = resolve_layout(prediction, layout)
    results = []
    for pred in prediction:
        boxes, scores, cls = _decode_one(pred, kind, conf_threshold, multi_label, classes)
        det = np.concatenate([boxes, scores[:, None], cls[:, None].astype(boxes.dtype)], axis=1)
        if kind == "e2e":
            results.append(det[:max_det])
            continue
        if len(det) > max_nms or (kind == "v5" and len(det)):
            det = det[np.argsort(-det[:, 4], kind="stable")[:max_nms]]
        offset = det[:, 5:6] * (0 if agnostic else max_wh)
        keep = nms(det[:, :4] + offset, det[:, 4], iou_threshold)[:max_det]
        results.append(det[keep])
    return results
