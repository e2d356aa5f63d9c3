"""Pictures of masks and keypoints: masks blended as Ultralytics' ``Annotator.masks`` does, keypoints and the COCO
skeleton as its ``Annotator.kpts`` (discs and lines drawn in NumPy, without anti-aliasing).

Example:
    >>> import numpy as np
    >>> image = np.zeros((4, 4, 3), np.uint8)
    >>> masks = np.zeros((1, 4, 4), bool); masks[0, :2] = True
    >>> blend_masks(image, masks, [(255, 56, 56)])[0, 0].tolist()  # half of the colour over black
    [127, 28, 28]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._keypoints import KPT_COLORS, LIMB_COLORS, SKELETON

__all__ = ["blend_masks", "draw_keypoints"]


def blend_masks(image: np.ndarray, masks: np.ndarray, colors: Sequence[Any], alpha: float = 0.5) -> np.ndarray:
    """A copy of ``image`` (uint8 ``(H, W, 3)`` or ``(H, W)``) with each ``bool (H, W)`` mask laid over in its
    colour: ``image * prod(1 - alpha * m) + max(alpha * m * colour)``, truncated to uint8 (Ultralytics' blend).

    Example:
        >>> two = np.ones((2, 1, 1), bool)
        >>> blend_masks(np.full((1, 1, 3), 200, np.uint8), two, [(0, 0, 0), (255, 0, 0)])[0, 0].tolist()
        [177, 50, 50]
    """
    if not len(masks):
        return image.copy()
    grey = image.ndim == 2
    rgb = np.stack([image] * 3, -1) if grey else image
    cols = np.asarray(colors, np.float32).reshape(len(masks), 1, 1, 3) / 255.0 * np.float32(alpha)
    keep = np.ones((*rgb.shape[:2], 1), np.float32)
    top = np.zeros((*rgb.shape[:2], 3), np.float32)
    for m, c in zip(masks, cols):
        mf = m[..., None].astype(np.float32)
        keep *= 1 - mf * np.float32(alpha)
        np.maximum(top, mf * c, out=top)
    out = ((rgb.astype(np.float32) / 255.0 * keep + top) * 255).astype(np.uint8)
    return out.mean(-1).astype(np.uint8) if grey else out


def _disc(out: np.ndarray, cx: float, cy: float, r: int, color: np.ndarray) -> None:
    h, w = out.shape[:2]
    x0, x1, y0, y1 = max(cx - r, 0), min(cx + r + 1, w), max(cy - r, 0), min(cy + r + 1, h)
    if x0 >= x1 or y0 >= y1:
        return
    yy, xx = np.mgrid[y0:y1, x0:x1]
    out[y0:y1, x0:x1][(xx - cx) ** 2 + (yy - cy) ** 2 <= r * r] = color


def _line(out: np.ndarray, p: tuple[int, int], q: tuple[int, int], width: int, color: np.ndarray) -> None:
    h, w = out.shape[:2]
    half = max(width / 2, 0.5)
    x0, x1 = max(int(min(p[0], q[0]) - half), 0), min(int(max(p[0], q[0]) + half) + 1, w)
    y0, y1 = max(int(min(p[1], q[1]) - half), 0), min(int(max(p[1], q[1]) + half) + 1, h)
    if x0 >= x1 or y0 >= y1:
        return
    yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float64)
    dx, dy = q[0] - p[0], q[1] - p[1]
    t = np.clip(((xx - p[0]) * dx + (yy - p[1]) * dy) / max(dx * dx + dy * dy, 1e-12), 0, 1)
    near = (xx - p[0] - t * dx) ** 2 + (yy - p[1] - t * dy) ** 2 <= half * half
    out[y0:y1, x0:x1][near] = color


def draw_keypoints(
    image: np.ndarray, keypoints: np.ndarray, *, radius: int = 5, line_width: int = 2, conf: float = 0.25
) -> np.ndarray:
    """A copy of ``image`` with each detection's keypoints (``(k, K, 3)`` or ``(k, K, 2)`` pixels) drawn as
    Ultralytics' ``Annotator.kpts``: the last detection first; a point whose visibility is below ``conf`` (without
    visibility: at ``(0, 0)``) is left out; 17-point (COCO) poses also get the skeleton, ``ceil(line_width / 2)``
    wide, in Ultralytics' colours (other layouts: the class palette by keypoint index).

    Example:
        >>> kp = np.zeros((1, 17, 3)); kp[0, :, :2] = 8; kp[0, :, 2] = 0.9
        >>> out = draw_keypoints(np.zeros((16, 16, 3), np.uint8), kp, radius=2)
        >>> out[8, 8].tolist(), out[0, 0].tolist()  # the last limb (green) is drawn over the points
        ([0, 255, 0], [0, 0, 0])
    """
    from ._draw import PALETTE

    out = image.copy()
    grey = out.ndim == 2
    for kpts in keypoints[::-1]:
        n, dims = kpts.shape
        pose = n == 17 and dims in (2, 3)
        finite = np.isfinite(kpts).all(1)
        for i, k in enumerate(kpts):
            if not finite[i] or (k[2] < conf if dims == 3 else (k[0] == 0 and k[1] == 0)):
                continue
            color = np.asarray(KPT_COLORS[i] if pose else PALETTE[i % len(PALETTE)])
            _disc(out, int(k[0]), int(k[1]), radius, color.mean() if grey else color)
        if not pose:
            continue
        for j, (a, b) in enumerate(SKELETON):
            ka, kb = kpts[a], kpts[b]
            if not (finite[a] and finite[b]):
                continue
            if dims == 3 and (ka[2] < conf or kb[2] < conf):
                continue
            if dims == 2 and not (ka[:2].any() and kb[:2].any()):
                continue
            p, q = (int(ka[0]), int(ka[1])), (int(kb[0]), int(kb[1]))
            if min(p + q) < 0:
                continue
            color = np.asarray(LIMB_COLORS[j])
            _line(out, p, q, math.ceil(line_width / 2), color.mean() if grey else color)
    return out
