"""The geometry of :func:`amdinfer.segment`: the canvas an image is padded to, the patches it is cut into, and the
weights that blend the patches' logits back into one map.

An image of ``h x w`` runs **whole** when its padded canvas fits the bound: padded at the bottom and right (edge
pixels repeated) to the next multiple of ``size_step`` (a multiple of the model's stride), so that every image of a
size step meets one engine shape. Otherwise, or with ``patch=``, it runs in **patches**: the image padded to a
multiple of the stride (at least one patch), patches of ``patch`` pixels whose origins are multiples of the stride
(so their pooling grid is the whole image's), consecutive ones overlapping by ``overlap`` pixels (rounded to the
stride), the last one flush with the canvas's end. The logits of the patches are averaged with per-pixel weights
(:func:`blend_weights`) and cut back to ``h x w``.

Example:
    >>> plan = plan_image(100, 150, stride=4, size_step=32, bound=None, patch=None, overlap=0.25)
    >>> plan.canvas, plan.windows
    ((128, 160), ((0, 0, 128, 160),))
    >>> plan = plan_image(100, 150, stride=4, size_step=4, bound=None, patch=(64, 64), overlap=0.25)
    >>> plan.canvas, len(plan.windows), plan.windows[1]
    ((100, 152), 6, (0, 48, 64, 112))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BLENDS", "ImagePlan", "blend_weights", "plan_image", "starts"]

#: how patches' logits are averaged where they overlap
BLENDS = ("linear", "gaussian", "mean")


@dataclass(frozen=True)
class ImagePlan:
    """Where an image runs: the ``canvas`` ``(H, W)`` it is padded to and the ``windows`` ``(y0, x0, y1, x1)`` on
    it (one, the whole canvas, when it runs whole), and the image's own size ``(h, w)``.

    Example:
        >>> ImagePlan((8, 8), ((0, 0, 8, 8),), (7, 5)).patched
        False
    """

    canvas: tuple[int, int]
    windows: tuple[tuple[int, int, int, int], ...]
    size: tuple[int, int]

    @property
    def patched(self) -> bool:
        """Whether the image runs in patches (windows smaller than the canvas)."""
        y0, x0, y1, x1 = self.windows[0]
        return len(self.windows) > 1 or (y1 - y0, x1 - x0) != self.canvas


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def starts(length: int, patch: int, overlap: int, stride: int) -> list[int]:
    """Patch origins along one axis of ``length`` (a multiple of ``stride``, at least ``patch``): every
    ``patch - overlap`` pixels, the last flush with the end; all multiples of ``stride``.

    Example:
        >>> starts(160, 64, 16, 4), starts(64, 64, 16, 4)
        ([0, 48, 96], [0])
    """
    step = max(patch - overlap, stride)
    out = [*range(0, length - patch, step), length - patch]
    return sorted(set(out))


def plan_image(
    h: int,
    w: int,
    *,
    stride: int,
    size_step: int,
    bound: tuple[int, int] | None,
    patch: tuple[int, int] | None,
    overlap: float,
    minimum: tuple[int, int] = (1, 1),
) -> ImagePlan:
    """The :class:`ImagePlan` of an ``h x w`` image (see the module): whole when ``patch`` is ``None`` and the
    canvas (``size_step`` multiples, at least ``minimum``) fits ``bound``; else patches of ``patch`` (or the
    bound, rounded down to the stride)."""
    canvas = (max(_up(h, size_step), minimum[0]), max(_up(w, size_step), minimum[1]))
    if patch is None and (bound is None or (canvas[0] <= bound[0] and canvas[1] <= bound[1])):
        return ImagePlan(canvas, ((0, 0, *canvas),), (h, w))
    if patch is None:
        assert bound is not None
        patch = (bound[0] // stride * stride, bound[1] // stride * stride)
    ph, pw = patch
    canvas = (max(_up(h, stride), ph), max(_up(w, stride), pw))
    oy = round(ph * overlap / stride) * stride
    ox = round(pw * overlap / stride) * stride
    rows, cols = starts(canvas[0], ph, oy, stride), starts(canvas[1], pw, ox, stride)
    windows = tuple((y, x, y + ph, x + pw) for y in rows for x in cols)
    return ImagePlan(canvas, windows, (h, w))


def _ramp(length: int, before: int, after: int) -> np.ndarray:
    """Linear weights along one axis: rising over the ``before`` pixels shared with the previous patch, falling
    over the ``after`` pixels shared with the next, 1 elsewhere (never 0, so every pixel has weight)."""
    t = np.arange(length, dtype=np.float32) + 0.5
    w = np.ones(length, np.float32)
    if before > 0:
        w = np.minimum(w, t / before)
    if after > 0:
        w = np.minimum(w, (length - t) / after)
    return w


def _axis_weights(length: int, lo: int, hi: int, others: list[tuple[int, int]], blend: str) -> np.ndarray:
    if blend == "mean":
        return np.ones(hi - lo, np.float32)
    if blend == "gaussian":  # nnU-Net's importance map: sigma = 1/8 of the patch, floored above 0
        t = np.arange(hi - lo, dtype=np.float32) + 0.5
        sigma = (hi - lo) / 8
        return np.maximum(np.exp(-((t - (hi - lo) / 2) ** 2) / (2 * sigma**2)), 1e-3).astype(np.float32)
    before = max((b - lo for a, b in others if a < lo < b), default=0)
    after = max((hi - a for a, b in others if a < hi < b), default=0)
    return _ramp(hi - lo, before, after)


def blend_weights(plan: ImagePlan, index: int, blend: str) -> np.ndarray:
    """``float32 (ph, pw)``: the weight of window ``index``'s logits at each of its pixels (``linear``: ramps over
    the pixels it shares with its neighbours, 1 on the image's edges; ``gaussian``; ``mean``: all 1).

    Example:
        >>> plan = plan_image(8, 16, stride=4, size_step=4, bound=None, patch=(8, 8), overlap=0.5)
        >>> blend_weights(plan, 0, "linear")[0].round(3).tolist()
        [1.0, 1.0, 1.0, 1.0, 0.875, 0.625, 0.375, 0.125]
    """
    y0, x0, y1, x1 = plan.windows[index]
    rows = [(a, c) for a, _, c, _ in plan.windows if (a, c) != (y0, y1)]
    cols = [(b, d) for _, b, _, d in plan.windows if (b, d) != (x0, x1)]
    wy = _axis_weights(plan.canvas[0], y0, y1, rows, blend)
    wx = _axis_weights(plan.canvas[1], x0, x1, cols, blend)
    return wy[:, None] * wx[None, :]
