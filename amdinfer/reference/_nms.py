"""Greedy non-maximum suppression, exact to torchvision.ops.nms, vectorised block by block."""

from __future__ import annotations

import numpy as np

__all__ = ["batched_nms", "nms"]

# Candidates are examined in score order in blocks growing from _FIRST_BLOCK to _BLOCK.
_FIRST_BLOCK = 64
_BLOCK = 512
_CLASS_BLOCK = 1024


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
    return t


def _suppressed_by(
    cand: tuple[np.ndarray, ...],
    kept: tuple[np.ndarray, ...],
    threshold: np.floating,
) -> np.ndarray:
    """Bool (len(cand), len(kept)) matrix: kept box j overlaps candidate i with IoU above the threshold.

    ``cand`` and ``kept`` are ``(x1, y1, x2, y2, area)`` 1-D arrays. Only pairs that overlap at all get an IoU,
    computed with torchvision's arithmetic ``inter / (area_i + area_j - inter)`` in the boxes' dtype; dense blocks
    are evaluated whole, sparse ones pair by pair.
    """
    cx1, cy1, cx2, cy2, carea = (v[:, None] for v in cand)
    kx1, ky1, kx2, ky2, karea = kept
    if threshold < 0:
        # Even disjoint boxes (IoU 0) exceed a negative threshold: every pair needs its IoU.
        hit = np.ones((len(cx1), len(kx1)), dtype=bool)
    else:
        hit = kx1 < cx2
        hit &= kx2 > cx1
        hit &= ky1 < cy2
        hit &= ky2 > cy1
    with np.errstate(invalid="ignore", divide="ignore"):
        if 8 * np.count_nonzero(hit) > hit.size:
            w = np.minimum(cx2, kx2)
            w -= np.maximum(cx1, kx1)
            h = np.minimum(cy2, ky2)
            h -= np.maximum(cy1, ky1)
            np.maximum(w, 0, out=w)
            np.maximum(h, 0, out=h)
            w *= h
            union = carea + karea
            union -= w
            w /= union
            hit &= w > threshold
            return hit
    i, j = np.nonzero(hit)
    if len(i):
        low = ~_pairs_above(cand, kept, i, j, threshold)
        hit[i[low], j[low]] = False
    return hit


def _ragged_pairs(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All pairs ``(i, j)`` with ``lo[i] <= j < hi[i]``, without a Python loop."""
    counts = hi - lo
    i = np.repeat(np.arange(len(lo)), counts)
    starts = np.cumsum(counts) - counts
    j = np.arange(len(i)) - np.repeat(starts - lo, counts)
    return i, j


def _pairs_above(
    a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...], i: np.ndarray, j: np.ndarray, threshold: np.floating
) -> np.ndarray:
    """IoU of box ``a[i]`` with box ``b[j]`` above the threshold, pair by pair, with torchvision's arithmetic."""
    ax1, ay1, ax2, ay2, aarea = a
    bx1, by1, bx2, by2, barea = b
    w = np.minimum(ax2[i], bx2[j]) - np.maximum(ax1[i], bx1[j])
    h = np.minimum(ay2[i], by2[j]) - np.maximum(ay1[i], by1[j])
    np.maximum(w, 0, out=w)
    np.maximum(h, 0, out=h)
    inter = w * h
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (aarea[i] + barea[j] - inter) > threshold


def _greedy_dense(pair: np.ndarray) -> list[int]:
    """Greedy pass over a block given the full (m, m) "i suppresses j" matrix, one bitset (Python int) per row.

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


def _greedy_sparse(m: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """Greedy pass over a block given the edges ``src < dst`` (sorted by ``src``) of the suppression relation."""
    bounds = np.searchsorted(src, np.arange(m + 1)).tolist()
    targets = dst.tolist()
    removed = bytearray(m)
    chosen = []
    for i in range(m):
        if not removed[i]:
            chosen.append(i)
            for t in targets[bounds[i] : bounds[i + 1]]:
                removed[t] = 1
    return chosen


def _greedy(
    boxes: np.ndarray,
    threshold: float,
    classes: np.ndarray | None,
) -> np.ndarray:
    """Kept positions of boxes already sorted by decreasing score (and by class first when ``classes`` is given)."""
    n = len(boxes)
    dtype = boxes.dtype
    thr = _threshold_below(threshold, dtype)
    x1, y1, x2, y2 = (np.ascontiguousarray(boxes[:, k]) for k in range(4))
    area = (x2 - x1) * (y2 - y1)
    coords = (x1, y1, x2, y2, area)
    # Kept boxes, stored like ``coords`` in five preallocated columns.
    kept = np.empty((5, n), dtype=dtype)
    kept_pos = np.empty(n, dtype=np.int64)
    kept_cls = np.empty(n, dtype=np.int64)
    k = 0
    start = 0
    # Dense blocks grow: the first ones have few kept boxes to test against, later ones amortise the call overhead.
    # Class-aware blocks only ever compare boxes of one class, so they can be large from the start.
    block = _FIRST_BLOCK if classes is None else _CLASS_BLOCK
    while start < n:
        stop = min(n, start + block)
        block = min(2 * block, _BLOCK) if classes is None else block
        cand = tuple(v[start:stop] for v in coords)
        cand_cls = None if classes is None else classes[start:stop]
        alive = np.arange(stop - start)
        # 1) Candidates suppressed by a box kept in an earlier block. Boxes are grouped by class, so only the kept
        # boxes from the block's first class on can matter.
        if cand_cls is not None and k:
            # Boxes come grouped by class, so each candidate's rivals are one contiguous run of the kept boxes.
            kc = kept_cls[:k]
            i, j = _ragged_pairs(np.searchsorted(kc, cand_cls, "left"), np.searchsorted(kc, cand_cls, "right"))
            hit = np.zeros(len(alive), dtype=bool)
            hit[i[_pairs_above(cand, tuple(kept[:, :k]), i, j, thr)]] = True
            alive = np.flatnonzero(~hit)
        elif k:
            hit = _suppressed_by(cand, tuple(kept[:, :k]), thr)
            alive = np.flatnonzero(~hit.any(axis=1))
        m = len(alive)
        if m == 0:
            start = stop
            continue
        # 2) Greedy inside the block, with the suppression relation as one bitset (Python int) per candidate.
        # Bits at or before a candidate's own position are never read again, so the full matrix serves.
        c = tuple(v[alive] for v in cand)
        if cand_cls is None:
            chosen = _greedy_dense(_suppressed_by(c, c, thr))
        else:
            cc = cand_cls[alive]
            i, j = _ragged_pairs(np.arange(m) + 1, np.searchsorted(cc, cc, "right"))
            above = _pairs_above(c, c, i, j, thr)
            chosen = _greedy_sparse(m, i[above], j[above])
        pos = start + alive[chosen]
        kept_pos[k : k + len(pos)] = pos
        kept[:, k : k + len(pos)] = [v[pos] for v in coords]
        if classes is not None:
            kept_cls[k : k + len(pos)] = classes[pos]
        k += len(pos)
        start = stop
    return kept_pos[:k]


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
    return order[_greedy(np.ascontiguousarray(b[order]), float(iou_threshold), None)]


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
    c = c.astype(np.int64, copy=False)
    by_score = np.argsort(-s, kind="stable")
    order = by_score[np.argsort(c[by_score], kind="stable")]
    keep = np.sort(order[_greedy(np.ascontiguousarray(b[order]), float(iou_threshold), c[order])])
    return keep[np.argsort(-s[keep], kind="stable")]
