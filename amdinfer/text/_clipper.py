"""Clipper's polygon offset with round joins (``ClipperOffset``, Angus Johnson's Clipper 6.4), in NumPy.

DBNet post-processing grows each shrunk text region by ``area * ratio / perimeter`` with Clipper's
``JT_ROUND``/``ET_CLOSEDPOLYGON`` offset, as PaddleOCR and RapidOCR do through ``pyclipper``. This is that
algorithm for one simple polygon: integer input points (truncated, as pyclipper converts them), the
orientation fixed to positive, one offset point per vertex or an arc of ``steps`` points whose count comes from
the arc tolerance (0.25), each rounded half away from zero. Clipper then unions the result to remove
self-intersections; for the convex quadrilaterals DBNet gives that changes no point of the convex hull, which
is all ``cv2.minAreaRect`` reads afterwards.

Example:
    >>> pts = offset_round(np.array([[0, 0], [10, 0], [10, 4], [0, 4]], np.float32), 2.0)
    >>> pts.min(axis=0).tolist(), pts.max(axis=0).tolist()
    ([-2, -2], [12, 6])
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["offset_round"]

_ARC_TOLERANCE = 0.25  # pyclipper.PyclipperOffset's default


def _round(v: float) -> int:
    """Clipper's ``Round``: half away from zero."""
    return int(v - 0.5) if v < 0 else int(v + 0.5)


def _normal(a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float]:
    if a == b:
        return (0.0, 0.0)
    dx, dy = float(b[0] - a[0]), float(b[1] - a[1])
    f = 1.0 / math.sqrt(dx * dx + dy * dy)
    return (dy * f, -dx * f)


def offset_round(points: np.ndarray, delta: float) -> np.ndarray:
    """Offset the closed polygon ``points`` (``(n, 2)``) outward by ``delta`` with round joins.

    Returns:
        ``int64 (m, 2)`` points of the grown polygon (empty when the polygon has fewer than 3 distinct points).

    Example:
        >>> offset_round(np.array([[0, 0], [4, 0], [4, 4], [0, 4]], np.float32), 1.0).shape[1]
        2
    """
    raw = [(int(x), int(y)) for x, y in np.asarray(points, np.float64).reshape(-1, 2)]
    if not raw:
        return np.zeros((0, 2), np.int64)
    hi = len(raw) - 1
    while hi > 0 and raw[0] == raw[hi]:
        hi -= 1
    poly = [raw[0]]
    for p in raw[1 : hi + 1]:
        if p != poly[-1]:
            poly.append(p)
    if len(poly) < 3 or delta <= 0:
        return np.zeros((0, 2), np.int64) if len(poly) < 3 else np.asarray(poly, np.int64)
    area = 0.0
    for i in range(len(poly)):
        (x0, y0), (x1, y1) = poly[i - 1], poly[i]
        area += (x0 + x1) * (y0 - y1)
    if area * -0.5 < 0:  # Clipper's Orientation(): Area >= 0 is positive; fix to positive
        poly.reverse()
    y = min(_ARC_TOLERANCE, abs(delta) * _ARC_TOLERANCE) if _ARC_TOLERANCE > 0 else 0.25
    steps = math.pi / math.acos(1 - y / abs(delta))
    steps = min(steps, abs(delta) * math.pi)
    sin_s, cos_s = math.sin(2 * math.pi / steps), math.cos(2 * math.pi / steps)
    per_rad = steps / (2 * math.pi)
    n = len(poly)
    normals = [_normal(poly[j], poly[(j + 1) % n]) for j in range(n)]
    out: list[tuple[int, int]] = []
    k = n - 1
    for j in range(n):
        (nkx, nky), (njx, njy) = normals[k], normals[j]
        px, py = poly[j]
        sin_a = nkx * njy - njx * nky
        cos_a = nkx * njx + nky * njy
        if abs(sin_a * delta) < 1.0 and cos_a > 0:
            out.append((_round(px + nkx * delta), _round(py + nky * delta)))
            k = j
            continue
        sin_a = max(-1.0, min(1.0, sin_a))
        if sin_a * delta < 0:
            out.append((_round(px + nkx * delta), _round(py + nky * delta)))
            out.append((px, py))
            out.append((_round(px + njx * delta), _round(py + njy * delta)))
        else:
            a = math.atan2(sin_a, cos_a)
            count = max(_round(per_rad * abs(a)), 1)
            x, yv = nkx, nky
            for _ in range(count):
                out.append((_round(px + x * delta), _round(py + yv * delta)))
                x, yv = x * cos_s - sin_s * yv, x * sin_s + yv * cos_s
            out.append((_round(px + njx * delta), _round(py + njy * delta)))
        k = j
    pts = _clean(out)
    # Clipper's union hands the polygon back ending at its top-most vertex (the last of equals): the same order
    # gives cv2.minAreaRect the same floating-point sums.
    top = min(p[1] for p in pts)
    last = max(i for i, p in enumerate(pts) if p[1] == top)
    return np.asarray(pts[last + 1 :] + pts[: last + 1], np.int64)


def _clean(pts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop repeated and collinear vertices, as Clipper's union of the offset result does."""
    changed = True
    while changed and len(pts) >= 3:
        changed = False
        keep = []
        n = len(pts)
        for i in range(n):
            a, b, c = pts[i - 1], pts[i], pts[(i + 1) % n]
            if b == a or (b[0] - a[0]) * (c[1] - b[1]) == (b[1] - a[1]) * (c[0] - b[0]):
                changed = True
                continue
            keep.append(b)
        if changed:
            pts = keep
    return pts
