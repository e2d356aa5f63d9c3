"""Sliced inference kernels, naive NumPy oracles of SAHI 0.12.8 (``sahi.slicing``, ``sahi.postprocess``).

* :func:`slice_boxes`: the tiles of an image, as ``sahi.slicing.get_slice_bboxes`` cuts them (row by row, the last
  tile of a row or column shifted back inside the image).
* :func:`box_ios`: pairwise intersection over the smaller area ("IOS"), next to :func:`~amdinfer.reference.box_iou`.
* :func:`match_nms`, :func:`greedy_nmm`: SAHI's NMS and greedy non-maximum merging on one group of boxes
  (``metric >= threshold`` is a match; candidates in SAHI's order: score descending, ties by ``x1, y1, x2, y2``).
* :func:`merge_predictions`: SAHI's ``NMSPostprocess`` / ``GreedyNMMPostprocess`` on a whole list, per class or
  class-agnostic, with the merge rule (union box, the higher score, the class of the higher-scored box).

Example:
    >>> slice_boxes(10, 10, 6, 6, 0.0, 0.0).tolist()
    [[0, 0, 6, 6], [4, 0, 10, 6], [0, 4, 6, 10], [4, 4, 10, 10]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError, OptionError

__all__ = ["POSTPROCESS_TYPES", "box_ios", "greedy_nmm", "match_nms", "merge_predictions", "slice_boxes"]

#: the merge rules SAHI's ``postprocess_type`` names that amdinfer implements
POSTPROCESS_TYPES = ("GREEDYNMM", "NMS")
_METRICS = ("IOS", "IOU")


def _size(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise OptionError(f"{name}: got {value!r}, expected an int >= 1 (pixels)")
    return int(value)


def _ratio(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 <= value < 1:
        raise OptionError(f"{name}: got {value!r}, expected a fraction in [0, 1) of the tile")
    return float(value)


def slice_boxes(
    image_height: int,
    image_width: int,
    slice_height: int,
    slice_width: int,
    overlap_height_ratio: float = 0.2,
    overlap_width_ratio: float = 0.2,
) -> np.ndarray:
    """The tiles of an ``image_height x image_width`` image: ``(n, 4)`` int64 ``x1, y1, x2, y2``, row by row.

    ``sahi.slicing.get_slice_bboxes`` (0.12.8) with a given slice size, step for step: tiles start every
    ``slice - int(ratio * slice)`` pixels; a tile that would cross the right or bottom edge is shifted back to end
    at it (so every tile has the slice size when the image is at least that large), and a row or column ends at
    the first tile that reaches the edge.

    Raises:
        OptionError: a size is not a positive int, or a ratio is outside ``[0, 1)``.

    Example:
        >>> slice_boxes(100, 250, 100, 100, 0.2, 0.2).tolist()
        [[0, 0, 100, 100], [80, 0, 180, 100], [150, 0, 250, 100]]
        >>> slice_boxes(50, 40, 64, 64).tolist()  # smaller than a tile: one tile, the image
        [[0, 0, 40, 50]]
    """
    h, w = _size("image_height", image_height), _size("image_width", image_width)
    sh, sw = _size("slice_height", slice_height), _size("slice_width", slice_width)
    y_overlap = int(_ratio("overlap_height_ratio", overlap_height_ratio) * sh)
    x_overlap = int(_ratio("overlap_width_ratio", overlap_width_ratio) * sw)
    out: list[list[int]] = []
    y_min = y_max = 0
    while y_max < h:
        x_min = x_max = 0
        y_max = y_min + sh
        while x_max < w:
            x_max = x_min + sw
            if y_max > h or x_max > w:
                x_max, y_max = min(w, x_max), min(h, y_max)
                x_min, y_min = max(0, x_max - sw), max(0, y_max - sh)
            out.append([x_min, y_min, x_max, y_max])
            x_min = x_max - x_overlap
        y_min = y_max - y_overlap
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def _boxes(name: str, boxes: Any) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64)
    if b.ndim != 2 or b.shape[1] != 4:
        raise InputError(f"{name}: got shape {b.shape}, expected (n, 4) x1, y1, x2, y2")
    return b


def _pairwise(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """IoU or IoS of every pair, 0 where the denominator is not positive (float64)."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    if metric == "IOU":
        denom = area_a[:, None] + area_b[None, :] - inter
    else:
        denom = np.minimum(area_a[:, None], area_b[None, :])
    out = np.zeros_like(inter)
    np.divide(inter, denom, out=out, where=denom > 0)
    return out


def box_ios(a: Any, b: Any) -> np.ndarray:
    """Pairwise intersection over the smaller box's area of ``(n, 4)`` and ``(m, 4)`` ``xyxy`` boxes: ``(n, m)``.

    A pair whose smaller box has no area gets 0 (as SAHI's ``_safe_ratio``).

    Example:
        >>> box_ios([[0, 0, 4, 4]], [[2, 0, 4, 2], [4, 4, 6, 6]]).tolist()  # the small box lies inside the big one
        [[1.0, 0.0]]
    """
    return _pairwise(_boxes("a", a), _boxes("b", b), "IOS")


def _check_match(match_metric: Any, match_threshold: Any) -> tuple[str, float]:
    if match_metric not in _METRICS:
        raise OptionError(f"postprocess_match_metric: got {match_metric!r}, expected one of {list(_METRICS)}")
    if isinstance(match_threshold, bool) or not isinstance(match_threshold, (int, float, np.floating)):
        raise OptionError(f"postprocess_match_threshold: got {match_threshold!r}, expected a float in [0, 1]")
    if not 0 <= match_threshold <= 1:
        raise OptionError(f"postprocess_match_threshold: got {match_threshold!r}, expected a float in [0, 1]")
    return str(match_metric), float(match_threshold)


def _order(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """SAHI's candidate order: score descending, ties by ``x1``, then ``y1``, ``x2``, ``y2`` ascending."""
    return np.lexsort((boxes[:, 3], boxes[:, 2], boxes[:, 1], boxes[:, 0], -scores))


def _matrix(boxes: np.ndarray, metric: str) -> np.ndarray:
    # SAHI compares a float32 matrix with the threshold; so does the oracle (the same match at a boundary)
    return _pairwise(boxes, boxes, metric).astype(np.float32)


def match_nms(boxes: Any, scores: Any, *, match_metric: str = "IOU", match_threshold: float = 0.5) -> list[int]:
    """SAHI's NMS on one group: the kept indices, best first; a kept box removes every later box whose metric with
    it is ``>= match_threshold``.

    Example:
        >>> match_nms([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30]], [0.9, 0.8, 0.7])
        [0, 2]
    """
    b, s = _boxes("boxes", boxes), np.asarray(scores, np.float64).reshape(-1)
    metric, threshold = _check_match(match_metric, match_threshold)
    matrix, keep = _matrix(b, metric), []
    removed = np.zeros(len(b), bool)
    for i in _order(b, s):
        if not removed[i]:
            keep.append(int(i))
            removed |= matrix[i] >= threshold
    return keep


def greedy_nmm(
    boxes: Any, scores: Any, *, match_metric: str = "IOU", match_threshold: float = 0.5
) -> dict[int, list[int]]:
    """SAHI's greedy non-maximum merging on one group: ``{kept index: [indices merged into it, best first]}``, the
    keys best first. Each kept box takes every later box not taken yet whose metric with it (the box as it came,
    not merged) is ``>= match_threshold``.

    Example:
        >>> greedy_nmm([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30]], [0.9, 0.8, 0.7])
        {0: [1], 2: []}
    """
    b, s = _boxes("boxes", boxes), np.asarray(scores, np.float64).reshape(-1)
    metric, threshold = _check_match(match_metric, match_threshold)
    matrix, order = _matrix(b, metric), _order(b, s)
    taken = np.zeros(len(b), bool)
    out: dict[int, list[int]] = {}
    for k, i in enumerate(order):
        if taken[i]:
            continue
        later = order[k + 1 :]
        later = later[~taken[later]]
        merged = later[matrix[i, later] >= threshold]
        taken[merged] = True
        out[int(i)] = [int(j) for j in merged]
    return out


def _groups(classes: np.ndarray, class_agnostic: bool) -> list[np.ndarray]:
    """The index groups merged on their own: all boxes, or one group per class (ascending, as ``np.unique``)."""
    if class_agnostic:
        return [np.arange(len(classes))]
    return [np.flatnonzero(classes == c) for c in np.unique(classes)]


def merge_predictions(
    boxes: Any,
    scores: Any,
    classes: Any,
    *,
    postprocess_type: str = "GREEDYNMM",
    match_metric: str = "IOS",
    match_threshold: float = 0.5,
    class_agnostic: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SAHI's ``NMSPostprocess`` / ``GreedyNMMPostprocess`` on a list of predictions: ``(boxes, scores, source)``.

    ``source[k]`` is the input index whose class (and label) answer ``k`` carries. Per class (``class_agnostic=False``,
    classes in ascending order) or over all boxes, :func:`match_nms` keeps boxes; :func:`greedy_nmm` groups them,
    then each kept box absorbs its group in order where its merged box still matches (``>= match_threshold``):
    the union box, the higher score, and the class of the higher-scored one (the absorbed one on a tie). Answers come
    in SAHI's order (NMS: by score, best first; greedy NMM: group by group).

    Raises:
        OptionError: an unknown ``postprocess_type`` or ``match_metric``, a threshold outside ``[0, 1]``.
        InputError: boxes not ``(n, 4)``, or counts that differ.

    Example:
        >>> b, s, src = merge_predictions([[0, 0, 10, 10], [2, 0, 12, 10], [40, 0, 50, 9]], [0.9, 0.6, 0.8], [0, 0, 1])
        >>> b.tolist(), s.tolist(), src.tolist()
        ([[0.0, 0.0, 12.0, 10.0], [40.0, 0.0, 50.0, 9.0]], [0.9, 0.8], [0, 2])
    """
    if postprocess_type not in POSTPROCESS_TYPES:
        raise OptionError(f"postprocess_type: got {postprocess_type!r}, expected one of {list(POSTPROCESS_TYPES)}")
    metric, threshold = _check_match(match_metric, match_threshold)
    b = _boxes("boxes", boxes)
    s = np.asarray(scores, np.float64).reshape(-1)
    c = np.asarray(classes).reshape(-1)
    if s.shape[0] != len(b) or c.shape[0] != len(b):
        raise InputError(f"got {len(b)} boxes, {s.shape[0]} scores and {c.shape[0]} classes, expected the same count")
    groups = _groups(c, bool(class_agnostic))
    if postprocess_type == "NMS":
        keep = [
            int(g[i]) for g in groups for i in match_nms(b[g], s[g], match_metric=metric, match_threshold=threshold)
        ]
        if not class_agnostic:
            keep.sort(key=lambda i: s[i], reverse=True)  # Python's sort is stable, as SAHI's
        return b[keep].reshape(-1, 4), s[keep], np.array(keep, np.int64)
    out_boxes, out_scores, source = [], [], []
    for g in groups:
        for keep_local, merged in greedy_nmm(b[g], s[g], match_metric=metric, match_threshold=threshold).items():
            box, score, src = b[g[keep_local]].copy(), s[g[keep_local]], int(g[keep_local])
            for j in (int(g[m]) for m in merged):
                if _pairwise(box[None], b[j][None], metric)[0, 0] >= threshold:
                    src = src if score > s[j] else j
                    box = np.concatenate([np.minimum(box[:2], b[j, :2]), np.maximum(box[2:], b[j, 2:])])
                    score = max(score, s[j])
            out_boxes.append(box)
            out_scores.append(score)
            source.append(src)
    return np.array(out_boxes, np.float64).reshape(-1, 4), np.array(out_scores, np.float64), np.array(source, np.int64)
