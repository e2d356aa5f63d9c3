"""Box format conversions, IoU, clipping and letterbox inversion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["box_iou", "clip_boxes", "scale_boxes", "xywh2xyxy", "xyxy2xywh"]


def _float(boxes: np.ndarray) -> np.ndarray:
    b = np.asarray(boxes)
    if b.shape[-1:] != (4,):
        raise ValueError(f"boxes: got shape {b.shape}, expected (..., 4)")
    return b if np.issubdtype(b.dtype, np.floating) else b.astype(np.float32)


def xywh2xyxy(boxes: np.ndarray) -> np.ndarray:
    """Centre ``(cx, cy, w, h)`` to corners ``(x1, y1, x2, y2)``, over the last axis.

    Example:
        >>> xywh2xyxy(np.array([10.0, 10.0, 4.0, 2.0]))
        array([ 8.,  9., 12., 11.])
    """
    b = _float(boxes)
    half = b[..., 2:] / 2
    return np.concatenate([b[..., :2] - half, b[..., :2] + half], axis=-1)


def xyxy2xywh(boxes: np.ndarray) -> np.ndarray:
    """Corners ``(x1, y1, x2, y2)`` to centre ``(cx, cy, w, h)``, over the last axis.

    Example:
        >>> xyxy2xywh(np.array([8.0, 9.0, 12.0, 11.0]))
        array([10., 10.,  4.,  2.])
    """
    b = _float(boxes)
    return np.concatenate([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], axis=-1)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of (N, 4) and (M, 4) ``xyxy`` boxes as an (N, M) matrix.

    ``inter / (area_a + area_b - inter)``; a pair whose union is empty gets 0.

    Example:
        >>> box_iou(np.array([[0.0, 0, 2, 2]]), np.array([[1.0, 0, 3, 2], [5.0, 5, 6, 6]]))
        array([[0.33333333, 0.        ]])
    """
    a, b = _float(a), _float(b)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0).astype(inter.dtype)


def clip_boxes(boxes: np.ndarray, shape_hw: Sequence[int]) -> np.ndarray:
    """Clip ``xyxy`` boxes to an image: x to ``[0, w]``, y to ``[0, h]``.

    Example:
        >>> clip_boxes(np.array([[-5.0, 2, 700, 500]]), (480, 640))
        array([[  0.,   2., 640., 480.]])
    """
    b = _float(boxes).copy()
    h, w = shape_hw[0], shape_hw[1]
    b[..., [0, 2]] = b[..., [0, 2]].clip(0, w)
    b[..., [1, 3]] = b[..., [1, 3]].clip(0, h)
    return b


def scale_boxes(
    boxes: np.ndarray,
    ratio: float | Sequence[float],
    pad: Sequence[float],
    orig_shape_hw: Sequence[int] | None = None,
) -> np.ndarray:
    """Map ``xyxy`` boxes from a letterboxed image back to the original image (undoes :func:`letterbox`).

    The content of the letterboxed image starts at ``(round(pad_w - 0.1), round(pad_h - 0.1))``, the integer
    offset letterbox really used for the half-values it returns (and 0 for ``(0.0, 0.0)``); that offset is
    subtracted, the result divided by the ratio per axis, then clipped to ``orig_shape_hw`` when given.

    Args:
        boxes: (..., 4) boxes in letterboxed pixels.
        ratio: letterbox's ``(ratio_w, ratio_h)``, or one gain for both axes.
        pad: letterbox's ``(pad_w, pad_h)``.
        orig_shape_hw: Original image ``(h, w)`` to clip to; no clipping when None.

    Returns:
        The boxes in original pixels, as a new float array.

    Example:
        >>> scale_boxes(np.array([[0.0, 80.0, 640.0, 560.0]]), (1.0, 1.0), (0.0, 80.0), (480, 640))
        array([[  0.,   0., 640., 480.]])
    """
    b = _float(boxes).copy()
    rw, rh = (ratio, ratio) if np.ndim(ratio) == 0 else (ratio[0], ratio[1])  # type: ignore[index]
    left, top = round(pad[0] - 0.1), round(pad[1] - 0.1)
    b[..., [0, 2]] = (b[..., [0, 2]] - left) / rw
    b[..., [1, 3]] = (b[..., [1, 3]] - top) / rh
    return clip_boxes(b, orig_shape_hw) if orig_shape_hw is not None else b
