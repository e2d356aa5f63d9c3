"""Greedy non-maximum suppression, exact to torchvision.ops.nms, vectorised block by block.

Boxes are taken in score order, a block at a time. The candidates of a block are first tested against every box
kept so far (one broadcast comparison on int16 edges, then the exact IoU on the few pairs that pass); the
survivors are then resolved among themselves with their pairwise matrix as Python-int bitsets. Python only loops
over blocks and over a block's survivors, never over all pairs, and the kept set is the one the one-box-at-a-time
greedy algorithm gives.
"""

from __future__ import annotations

import numpy as np

__all__ = ["batched_nms", "nms"]

# A small first block finds the best boxes cheaply; later blocks are large to amortise the per-block overhead, and
# few of their candidates survive the boxes already kept.
_FIRST_BLOCK = 128
_BLOCK = 1024


def _as_float_boxes(boxes: np.ndarray, name: str = "boxes") -> np.ndarray:
    b = np.asarray(boxes)
    if b.ndim != 2 or b.shape[1] != 4:
        raise ValueError(f"{name}: got shape {b.shape}, expected (N, 4) as x1, y1, x2, y2")
    if not np.issubdtype(b.dtype, np.floating):
        b = b.astype(np.float32)
    return b


def _threshold_below(threshold: float, dtype: np.dtype) -> np.floating:
    """The largest ``dtype`` value ``t`` with ``iou > t`` equivalent to ``iou > threshold`` for ``dtype`` IoUs.

    torchvision compares the float IoU against a double threshold; comparing against the threshold rounded down
    to the IoU's own precision gives the same answers without promoting every IoU to float64.
    """
    t = np.asarray(threshold, dtype=dtype)[()]
    if float(t) > threshold:
        t = np.nextafter(t, dtype.type(-np.inf))
    return t  # type: ignore[return-value]


class _Boxes:
    """Score-sorted boxes, plus the operands of a cheap necessary test run on every (kept, candidate) pair.

    IoU above ``t >= 0`` needs an x-overlap above ``t`` times the candidate's width, and likewise in y: the kept box
    must reach past the candidate's edges moved inwards by ``t`` times its size. The inner edges get a relative
    margin, and all the edges are quantised to int16 outwards with a spare unit (lower edges down, upper edges up,
    far beyond float rounding, so the test can only let more pairs through), because comparing int16 costs half as
    much as float32. Pairs that pass get the exact IoU. Non-finite boxes or a negative threshold let every pair
    through.
    """

    def __init__(self, boxes: np.ndarray, threshold: float, classes: np.ndarray | None) -> None:
        self.boxes = np.ascontiguousarray(boxes)
        columns = np.ascontiguousarray(self.boxes.T)  # x1, y1, x2, y2 rows: long inner loops below
        self.area = (columns[2] - columns[0]) * (columns[3] - columns[1])
        lo, hi = columns[:2], columns[2:]
        finite = bool(np.isfinite(columns).all())
        if not finite or threshold < 0 or not len(self.area):
            # Non-finite boxes or a negative threshold (disjoint boxes exceed it): every pair gets the exact IoU.
            self.c_lo = self.k_lo = np.zeros_like(lo, dtype=np.int16)
            self.c_hi = self.k_hi = np.ones_like(hi, dtype=np.int16)
        else:
            scale = 32000 / max(float(np.abs(columns).max()), 1e-30)
            # Inner edges, then outward rounding with a spare unit, which covers float rounding many times over.
            inset = (threshold * (1 - 1e-4)) * (hi - lo)
            self.c_lo = _quantize(lo + inset, scale, -1)
            self.c_hi = _quantize(hi - inset, scale, 1)
            self.k_lo = _quantize(lo, scale, -1)
            self.k_hi = _quantize(hi, scale, 1)
        self.classes = None
        if classes is not None:
            if len(classes) and 0 <= classes.min() and classes.max() < 32767:
                self.classes = classes.astype(np.int16)
            else:
                self.classes = np.unique(classes, return_inverse=True)[1].ravel()  # type: ignore[assignment]

    def suppressed_by(self, kept: np.ndarray, cand: np.ndarray, threshold: np.floating) -> np.ndarray:
        """Bool (len(kept), len(cand)) matrix: box ``kept[j]`` has IoU above the threshold with box ``cand[i]``.

        Candidates run along the rows, which are the long axis for numpy's inner loops.
        """
        c_lo, c_hi = _take(self.c_lo, cand, 1), _take(self.c_hi, cand, 1)
        k_lo, k_hi = _take(self.k_lo, kept, 1)[:, :, None], _take(self.k_hi, kept, 1)[:, :, None]
        hit = c_hi[0] > k_lo[0]
        hit &= c_lo[0] < k_hi[0]
        hit &= c_hi[1] > k_lo[1]
        hit &= c_lo[1] < k_hi[1]
        if self.classes is not None:
            hit &= _take(self.classes, cand) == _take(self.classes, kept)[:, None]
        flat = hit.ravel().nonzero()[0]
        if len(flat):
            j = flat // hit.shape[1]
            i = flat - j * hit.shape[1]
            low = ~self.iou_above(_take(kept, j), _take(cand, i), threshold)
            hit.ravel()[flat[low]] = False
        return hit

    def iou_above(self, a: np.ndarray, b: np.ndarray, threshold: np.floating) -> np.ndarray:
        """IoU of boxes ``a[k]`` and ``b[k]`` above the threshold, with torchvision's float arithmetic.

        Zero-area pairs give 0/0 = nan, which is never above the threshold (the caller silences the warning).
        """
        box_a, box_b = _take(self.boxes, a), _take(self.boxes, b)
        zero = self.boxes.dtype.type(0)
        w = np.minimum(box_a[:, 2], box_b[:, 2])
        w -= np.maximum(box_a[:, 0], box_b[:, 0])
        h = np.minimum(box_a[:, 3], box_b[:, 3])
        h -= np.maximum(box_a[:, 1], box_b[:, 1])
        np.maximum(w, zero, out=w)
        np.maximum(h, zero, out=h)
        w *= h
        union = _take(self.area, a) + _take(self.area, b)
        union -= w
        return w / union > threshold


def _quantize(values: np.ndarray, scale: float, direction: int) -> np.ndarray:
    """``values * scale`` as int16, rounded one unit further down (``direction=-1``) or up (``1``)."""
    q = np.floor(values * scale) if direction < 0 else np.ceil(values * scale)
    q += direction
    return np.clip(q, -32768, 32767).astype(np.int16)


def _take(values: np.ndarray, index: np.ndarray, axis: int = 0) -> np.ndarray:
    """``values[index]`` along ``axis``; ``np.take`` without bounds checks is several times faster than indexing."""
    return values.take(index, axis=axis, mode="clip")


def _greedy_block(pair: np.ndarray) -> list[int]:
    """Greedy pass over one block given its (m, m) "i suppresses j" matrix, one bitset (Python int) per row.

    Bits at or before a row's own position are never read again, so the symmetric matrix serves as is.
    """
    m = len(pair)
    packed = np.packbits(pair, axis=1, bitorder="little").tobytes()
    width = (m + 7) // 8
    suppressed = 0
    chosen = []
    for i in range(m):
        if not (suppressed >> i) & 1:
            chosen.append(i)
            suppressed |= int.from_bytes(packed[i * width : (i + 1) * width], "little")
    return chosen


def _greedy(boxes: np.ndarray, threshold: float, classes: np.ndarray | None) -> np.ndarray:
    """Kept positions of boxes sorted by decreasing score; ``classes`` restricts suppression to one class."""
    n = len(boxes)
    cols = _Boxes(boxes, threshold, classes)
    thr = _threshold_below(threshold, boxes.dtype)
    kept = np.empty(n, dtype=np.int64)
    k = 0
    start = 0
    block = _FIRST_BLOCK
    with np.errstate(invalid="ignore", divide="ignore"):
        while start < n:
            cand = np.arange(start, min(n, start + block))
            start += block
            block = _BLOCK
            # 1) Drop the candidates a box kept in an earlier block suppresses.
            if k:
                cand = cand[~cols.suppressed_by(kept[:k], cand, thr).any(axis=0)]
            if not len(cand):
                continue
            # 2) Greedy inside the block.
            chosen = cand[_greedy_block(cols.suppressed_by(cand, cand, thr))]
            kept[k : k + len(chosen)] = chosen
            k += len(chosen)
    return kept[:k]


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy non-maximum suppression with ``torchvision.ops.nms`` semantics.

    Boxes are visited by decreasing score (ties by lower index first); a box is kept unless a kept box overlaps it
    with IoU strictly greater than ``iou_threshold``. IoU is ``inter / (area_a + area_b - inter)`` evaluated in the
    boxes' floating dtype, so the kept set is identical to torchvision's, and to ``cv2.dnn.NMSBoxes`` with a score
    threshold below every score.

    Args:
        boxes: (N, 4) boxes as x1, y1, x2, y2.
        scores: (N,) scores.
        iou_threshold: Boxes overlapping a kept box with IoU above this are discarded.

    Returns:
        int64 indices of the kept boxes, by decreasing score.

    Example:
        >>> boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], np.float32)
        >>> nms(boxes, np.array([0.9, 0.8, 0.7], np.float32), 0.5)
        array([0, 2])
    """
    b = _as_float_boxes(boxes)
    s = np.asarray(scores)
    if s.shape != (len(b),):
        raise ValueError(f"scores: got shape {s.shape}, expected ({len(b)},)")
    if not len(b):
        return np.empty(0, dtype=np.int64)
    order = np.argsort(-s, kind="stable")
    return order[_greedy(_take(b, order), float(iou_threshold), None)]


def batched_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Class-aware :func:`nms`: boxes only suppress boxes of the same class (``torchvision.ops.batched_nms``).

    IoUs are computed on the original coordinates (no coordinate-offset trick, so no precision is lost).

    Args:
        boxes: (N, 4) boxes as x1, y1, x2, y2.
        scores: (N,) scores.
        classes: (N,) integer class of each box.
        iou_threshold: Boxes overlapping a kept box of their class with IoU above this are discarded.

    Returns:
        int64 indices of the kept boxes, by decreasing score (ties by lower index first).

    Example:
        >>> boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10]], np.float32)
        >>> batched_nms(boxes, np.array([0.9, 0.8], np.float32), np.array([0, 1]), 0.5)
        array([0, 1])
    """
    b = _as_float_boxes(boxes)
    s = np.asarray(scores)
    c = np.asarray(classes)
    if s.shape != (len(b),) or c.shape != (len(b),):
        raise ValueError(f"scores, classes: got shapes {s.shape}, {c.shape}, expected ({len(b)},)")
    if not len(b):
        return np.empty(0, dtype=np.int64)
    order = np.argsort(-s, kind="stable")
    return order[_greedy(_take(b, order), float(iou_threshold), _take(c.astype(np.int64, copy=False), order))]
