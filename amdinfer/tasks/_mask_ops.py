"""NumPy kernels of Ultralytics' mask post-processing (``ultralytics/utils/ops.py`` 8.4): prototypes times
coefficients, PyTorch's bilinear resampling (``F.interpolate(mode="bilinear", align_corners=False)``, no
anti-aliasing), cropping to boxes, removing the letterbox and resizing to the image.

Example:
    >>> import numpy as np
    >>> bilinear(np.array([[[0.0, 1.0]]], np.float32), (1, 4)).round(3).tolist()
    [[[0.0, 0.25, 0.75, 1.0]]]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from ..results._masks import Window

__all__ = [
    "Window",
    "bilinear",
    "bilinear_above",
    "bilinear_window",
    "content_box",
    "crop_masks",
    "mask_logits",
    "masks_at_input",
    "masks_native",
    "stack_windows",
    "unletterbox",
    "unletterbox_binary",
    "unletterbox_windows",
    "windows_at_input",
    "windows_native",
]


@functools.lru_cache(maxsize=64)
def _taps(size_in: int, size_out: int, scale: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source rows and weights of PyTorch's ``area_pixel_compute_source_index`` (``align_corners=False``)."""
    step = size_in / size_out if scale is None else 1.0 / scale
    src = np.maximum((np.arange(size_out, dtype=np.float64) + 0.5) * step - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    for a in (lo, hi, t := (src - lo).astype(np.float32)):
        a.setflags(write=False)
    return lo, hi, t


def bilinear_window(
    x: np.ndarray, size: tuple[int, int], rows: tuple[int, int], cols: tuple[int, int], scale: float | None = None
) -> np.ndarray:
    """``bilinear(x[None], size, scale)[0, rows[0]:rows[1], cols[0]:cols[1]]`` for one ``(h, w)`` map, computed from
    the input pixels that window reads only (the same arithmetic, so the same numbers)."""
    lo_r, hi_r, t_r = (a[rows[0] : rows[1]] for a in _taps(x.shape[0], size[0], scale))
    lo_c, hi_c, t_c = (a[cols[0] : cols[1]] for a in _taps(x.shape[1], size[1], scale))
    first = int(lo_r.min())
    x = np.asarray(x[first : int(hi_r.max()) + 1], np.float32)
    x = x[:, lo_c] * (1 - t_c) + x[:, hi_c] * t_c
    return x[lo_r - first] * (1 - t_r)[:, None] + x[hi_r - first] * t_r[:, None]


def _box_window(box: np.ndarray, shape: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The rows and columns :func:`crop_masks` keeps for ``box``: ``ceil(y1) <= r < ceil(y2)``, the same for x."""
    x1, y1, x2, y2 = (float(v) for v in np.asarray(box, np.float32))
    r0, r1 = (min(max(math.ceil(v), 0), shape[0]) for v in (y1, y2))
    c0, c1 = (min(max(math.ceil(v), 0), shape[1]) for v in (x1, x2))
    return ((r0, r1), (c0, c1)) if r0 < r1 and c0 < c1 else None


def bilinear(x: np.ndarray, size: tuple[int, int], scale: float | None = None) -> np.ndarray:
    """``(n, h, w)`` float maps resampled to ``size`` ``(H, W)`` as ``torch.nn.functional.interpolate(x[None],
    size, mode="bilinear")`` (``scale``: the ``scale_factor`` form, which maps coordinates by ``1 / scale``)."""
    x = np.asarray(x, np.float32)
    (h_out, w_out), (h, w) = size, x.shape[1:]
    lo, hi, t = _taps(w, w_out, scale)
    x = x[:, :, lo] * (1 - t) + x[:, :, hi] * t
    lo, hi, t = _taps(h, h_out, scale)
    return x[:, lo, :] * (1 - t)[:, None] + x[:, hi, :] * t[:, None]


def mask_logits(protos: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """``float32 (n, mh, mw)``: ``coefficients (n, nm) @ protos (nm, mh, mw)``, the masks before the threshold."""
    nm, mh, mw = protos.shape
    flat = coefficients.astype(np.float32) @ protos.astype(np.float32).reshape(nm, -1)
    return flat.reshape(-1, mh, mw)


def crop_masks(masks: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """``masks`` (``(n, H, W)``) zeroed outside their boxes: column ``c`` is kept where ``x1 <= c < x2`` and row
    ``r`` where ``y1 <= r < y2`` (Ultralytics' ``crop_mask``, pixel indices against box coordinates)."""
    n, h, w = masks.shape
    b = boxes.astype(np.float32).reshape(n, 4, 1)
    cols = np.arange(w, dtype=np.float32)[None]
    rows = np.arange(h, dtype=np.float32)[None]
    keep_c = (cols >= b[:, 0]) & (cols < b[:, 2])
    keep_r = (rows >= b[:, 1]) & (rows < b[:, 3])
    return masks * (keep_r[:, :, None] & keep_c[:, None, :])


def content_box(input_shape: tuple[int, int], orig_shape: tuple[int, int]) -> tuple[int, int, int, int]:
    """``top, left, bottom, right`` of the image inside a centred letterbox of ``input_shape``, as Ultralytics'
    ``scale_masks`` computes it from the two shapes (each side ``max(round(side * gain), 1)``)."""
    (h1, w1), (h0, w0) = input_shape, orig_shape
    gain = min(h1 / h0, w1 / w0)
    new_h, new_w = max(round(h0 * gain), 1), max(round(w0 * gain), 1)
    top, left = round((h1 - new_h) / 2 - 0.1), round((w1 - new_w) / 2 - 0.1)
    return top, left, top + new_h, left + new_w


def unletterbox(masks: np.ndarray, orig_shape: tuple[int, int]) -> np.ndarray:
    """Float ``(n, h, w)`` maps of a letterboxed input cut to the image inside and resized (bilinear) to
    ``orig_shape``: Ultralytics' ``scale_masks(masks, orig_shape)`` without ``ratio_pad``."""
    if tuple(masks.shape[1:]) == tuple(orig_shape):
        return masks.astype(np.float32)
    top, left, bottom, right = content_box(masks.shape[1:], orig_shape)
    return bilinear(masks[:, top:bottom, left:right], orig_shape)


def masks_at_input(
    protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, input_shape: tuple[int, int]
) -> np.ndarray:
    """``uint8 (n, H, W)`` masks at the model's input size from boxes in input pixels: Ultralytics'
    ``process_mask(..., upsample=True)``: logits upsampled (bilinear), ``> 0`` (sigmoid ``> 0.5``), then cropped.
    Only each box's window is resampled (what the crop keeps; the same numbers there)."""
    out = np.zeros((len(coefficients), *input_shape), np.uint8)
    logits = mask_logits(protos, coefficients) if len(coefficients) else None
    for i in range(len(out)):
        window = _box_window(boxes[i], input_shape)
        if window is not None and logits is not None:
            (r0, r1), (c0, c1) = window
            out[i, r0:r1, c0:c1] = bilinear_window(logits[i], input_shape, window[0], window[1]) > 0
    return out


def unletterbox_binary(masks: np.ndarray, orig_shape: tuple[int, int]) -> np.ndarray:
    """``bool (n, h, w)``: :func:`unletterbox` of 0/1 masks, ``> 0.5``, resampling only the output pixels whose
    source taps touch a set pixel (the others are 0)."""
    n = len(masks)
    if tuple(masks.shape[1:]) == tuple(orig_shape):
        return masks > 0.5
    top, left, bottom, right = content_box(masks.shape[1:], orig_shape)
    crop = masks[:, top:bottom, left:right]
    lo_r, hi_r, _ = _taps(crop.shape[1], orig_shape[0], None)
    lo_c, hi_c, _ = _taps(crop.shape[2], orig_shape[1], None)
    out = np.zeros((n, *orig_shape), bool)
    for i in range(n):
        rows, cols = np.flatnonzero(crop[i].any(1)), np.flatnonzero(crop[i].any(0))
        if not len(rows):
            continue
        y0, y1 = int(np.searchsorted(hi_r, rows[0])), int(np.searchsorted(lo_r, rows[-1], "right"))
        x0, x1 = int(np.searchsorted(hi_c, cols[0])), int(np.searchsorted(lo_c, cols[-1], "right"))
        out[i, y0:y1, x0:x1] = bilinear_window(crop[i], orig_shape, (y0, y1), (x0, x1)) > 0.5
    return out


def masks_native(
    protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, orig_shape: tuple[int, int]
) -> np.ndarray:
    """``uint8 (n, h, w)`` masks at the image's size from boxes in image pixels: Ultralytics'
    ``process_mask_native`` (``retina_masks=True``): logits upsampled by the smallest factor (1, 2 or 4) that puts
    the letterbox edge on whole pixels, cut and resized to the image, ``> 0``, cropped (only each box's window is
    resized)."""
    _, mh, mw = protos.shape
    h, w = orig_shape
    out = np.zeros((len(coefficients), h, w), np.uint8)
    if not len(coefficients):
        return out
    gain = min(4 * mh / h, 4 * mw / w)
    pad = (4 * mh - max(round(h * gain), 1)) | (4 * mw - max(round(w * gain), 1))
    f = 4 // math.gcd(4, pad | pad // 2)
    logits = mask_logits(protos, coefficients)
    if f > 1:
        logits = bilinear(logits, (mh * f, mw * f), scale=float(f))
    same = tuple(logits.shape[1:]) == tuple(orig_shape)
    top, left, bottom, right = (0, 0, h, w) if same else content_box(logits.shape[1:], orig_shape)
    for i in range(len(out)):
        window = _box_window(boxes[i], orig_shape)
        if window is None:
            continue
        (r0, r1), (c0, c1) = window
        src = logits[i, top:bottom, left:right]
        values = src[r0:r1, c0:c1] if same else bilinear_window(src, orig_shape, window[0], window[1])
        out[i, r0:r1, c0:c1] = values > 0
    return out


# The fast paths: the same masks as the kernels above (bit for bit: the tests hold them to it), made from each box's
# window only, with the float arithmetic done only where a pixel's four bilinear taps leave its side in doubt.

_SMALL = 40_000  # output pixels under which bilinear_above blends them all (fewer NumPy calls)
_SURE = (np.float32(1e-20), np.float32(1e30))  # taps between these blend to > 0 in float32 (no underflow, no inf)


def _read(x: np.ndarray, offset: tuple[int, int], rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """``rows x cols`` of a plane that holds ``x`` at ``offset`` and zeros elsewhere (a view when inside ``x``)."""
    (r0, r1), (c0, c1), (top, left) = rows, cols, offset
    if top <= r0 and left <= c0 and r1 <= top + x.shape[0] and c1 <= left + x.shape[1]:
        return x[r0 - top : r1 - top, c0 - left : c1 - left]
    out = np.zeros((r1 - r0, c1 - c0), x.dtype)
    a0, a1 = max(r0, top), min(r1, top + x.shape[0])
    b0, b1 = max(c0, left), min(c1, left + x.shape[1])
    if a0 < a1 and b0 < b1:
        out[a0 - r0 : a1 - r0, b0 - c0 : b1 - c0] = x[a0 - top : a1 - top, b0 - left : b1 - left]
    return out


def _tap_bits(src: np.ndarray, binary: bool) -> np.ndarray:
    """Per input pixel: 1 (any blend of such taps is on the False side), 2 (on the True side), 4 (in doubt)."""
    if binary:  # 0/1 maps, threshold 0.5: all-0 taps blend to 0, all-1 taps to 1 +- an ulp
        return np.asarray(src, bool).view(np.uint8) + np.uint8(1)
    # threshold 0: taps <= 0 blend to <= 0 or NaN (non-negative weights); taps in (1e-20, 1e30) to > 0 (the
    # larger weight of each pair is >= 0.5: no product underflows to 0, no sum overflows); the rest is computed
    bits = (src <= 0).view(np.uint8) | (((src > _SURE[0]) & (src < _SURE[1])).view(np.uint8) << 1)
    bits[bits == 0] = 4
    return bits


def bilinear_above(
    x: np.ndarray,
    size: tuple[int, int],
    rows: tuple[int, int],
    cols: tuple[int, int],
    *,
    binary: bool = False,
    scale: float | None = None,
    in_shape: tuple[int, int] | None = None,
    offset: tuple[int, int] = (0, 0),
) -> np.ndarray:
    """``bool``: ``bilinear_window(plane, size, rows, cols, scale) > t`` with the same bits, where ``plane`` is
    ``in_shape`` (default ``x.shape``) holding ``x`` at ``offset`` and zeros elsewhere, and ``t`` is 0 (logits)
    or 0.5 (``binary``: ``x`` holds 0/1). A pixel whose four taps all lie on one side of ``t`` gets that side;
    the others are blended with :func:`bilinear_window`'s float32 arithmetic (so the same numbers).

    Example:
        >>> x = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
        >>> bool((bilinear_above(x, (8, 8), (0, 8), (0, 8)) == (bilinear(x[None], (8, 8))[0] > 0)).all())
        True
    """
    h_in, w_in = x.shape if in_shape is None else in_shape
    lo_r, hi_r, t_r = (a[rows[0] : rows[1]] for a in _taps(h_in, size[0], scale))
    lo_c, hi_c, t_c = (a[cols[0] : cols[1]] for a in _taps(w_in, size[1], scale))
    r_lo, c_lo = int(lo_r[0]), int(lo_c[0])  # the taps never decrease
    src = _read(x, offset, (r_lo, int(hi_r[-1]) + 1), (c_lo, int(hi_c[-1]) + 1))
    lr, hr, lc, hc = lo_r - r_lo, hi_r - r_lo, lo_c - c_lo, hi_c - c_lo
    threshold = 0.5 if binary else 0.0
    if len(lr) * len(lc) >= _SMALL:  # below, a few NumPy calls beat the many the bookkeeping of doubt costs
        cell = _tap_bits(src, binary)  # -> the bits of the four taps of the cell whose top-left tap is each pixel
        cell[:-1] |= cell[1:]  # hi = lo + 1, or lo itself at the last row/column
        cell[:, :-1] |= cell[:, 1:]
        doubt = (cell > 2)[:, lc]  # (input rows, output columns)
        if 4 * np.count_nonzero(doubt) <= doubt.size:  # else mostly in doubt: blend every pixel
            out = (cell == 2)[:, lc][lr]
            i, cc = np.nonzero(doubt)
            if len(i):  # each input row's cells in doubt, repeated over the output rows that read it
                count = np.bincount(lr, minlength=len(src))[i]
                starts = np.searchsorted(lr, i)
                rr = np.repeat(starts - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
                cc = np.repeat(cc, count)
                h = _across(src, lc, hc, t_c)
                out[rr, cc] = (h[lr[rr], cc] * (1 - t_r)[rr] + h[hr[rr], cc] * t_r[rr]) > threshold
            return out
    h = _across(src, lc, hc, t_c)  # bilinear_window's arithmetic
    return (h[lr] * (1 - t_r)[:, None] + h[hr] * t_r[:, None]) > threshold


def _across(src: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The horizontal pass of :func:`bilinear_window` (float32)."""
    xs = np.asarray(src, np.float32)
    return xs[:, lo] * (1 - t) + xs[:, hi] * t


def windows_at_input(
    protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, input_shape: tuple[int, int]
) -> list[Window | None]:
    """:func:`masks_at_input` as one :data:`Window` per box (its crop window; ``None``: the box holds no pixel).

    Example:
        >>> w = windows_at_input(np.ones((1, 4, 4), np.float32), np.array([[1.0]]), np.array([[2, 3, 9, 12]]), (16, 16))
        >>> w[0][:2], w[0][2].shape
        ((3, 2), (9, 7))
    """
    if not len(coefficients):
        return []
    logits = mask_logits(protos, coefficients)
    out: list[Window | None] = []
    for i in range(len(logits)):
        window = _box_window(boxes[i], input_shape)
        if window is None:
            out.append(None)
            continue
        out.append((window[0][0], window[1][0], bilinear_above(logits[i], input_shape, *window)))
    return out


def unletterbox_windows(
    windows: Sequence[Window | None], input_shape: tuple[int, int], orig_shape: tuple[int, int]
) -> list[Window | None]:
    """:func:`unletterbox_binary` of masks given as :data:`Window` s at ``input_shape``: one window per mask in
    ``orig_shape`` pixels (``None``: nothing set).

    Example:
        >>> w = unletterbox_windows([(4, 0, np.ones((8, 8), bool))], (16, 16), (8, 16))
        >>> w[0][:2], w[0][2].shape, bool(w[0][2].all())
        ((0, 0), (8, 8), True)
    """
    same = tuple(input_shape) == tuple(orig_shape)
    top, left, bottom, right = (0, 0, *orig_shape) if same else content_box(input_shape, orig_shape)
    size = (bottom - top, right - left)
    lo_r, hi_r, _ = _taps(size[0], orig_shape[0], None)
    lo_c, hi_c, _ = _taps(size[1], orig_shape[1], None)
    out: list[Window | None] = []
    for item in windows:
        if item is None:
            out.append(None)
            continue
        r0, c0, m = item  # the part inside the letterbox's image, in its pixels
        a, b = max(top - r0, 0), max(left - c0, 0)
        m, r0, c0 = m[a : max(bottom - r0, 0), b : max(right - c0, 0)], r0 + a - top, c0 + b - left
        rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
        if not len(rows):
            out.append(None)
            continue
        if same:
            out.append((r0, c0, m > 0.5))
            continue
        y0, y1 = int(np.searchsorted(hi_r, r0 + rows[0])), int(np.searchsorted(lo_r, r0 + rows[-1], "right"))
        x0, x1 = int(np.searchsorted(hi_c, c0 + cols[0])), int(np.searchsorted(lo_c, c0 + cols[-1], "right"))
        mask = bilinear_above(m, orig_shape, (y0, y1), (x0, x1), binary=True, in_shape=size, offset=(r0, c0))
        out.append((y0, x0, mask))
    return out


def windows_native(
    protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, orig_shape: tuple[int, int]
) -> list[Window | None]:
    """:func:`masks_native` as one :data:`Window` per box (its crop window in the image; ``None``: the box holds
    no pixel). The ``1, 2 or 4`` upsampling is computed on the prototype pixels each window reads only.

    Example:
        >>> w = windows_native(np.ones((1, 4, 4), np.float32), np.array([[1.0]]), np.array([[0, 0, 8, 4]]), (8, 16))
        >>> w[0][:2], w[0][2].shape, bool(w[0][2].all())
        ((0, 0), (4, 8), True)
    """
    if not len(coefficients):
        return []
    _, mh, mw = protos.shape
    h, w = orig_shape
    gain = min(4 * mh / h, 4 * mw / w)
    pad = (4 * mh - max(round(h * gain), 1)) | (4 * mw - max(round(w * gain), 1))
    f = 4 // math.gcd(4, pad | pad // 2)
    logits = mask_logits(protos, coefficients)
    up = (mh * f, mw * f)
    same = up == tuple(orig_shape)
    top, left, bottom, right = (0, 0, h, w) if same else content_box(up, orig_shape)
    lo_r, hi_r, _ = _taps(bottom - top, h, None)
    lo_c, hi_c, _ = _taps(right - left, w, None)
    scale = float(f) if f > 1 else None
    out: list[Window | None] = []
    for i in range(len(logits)):
        window = _box_window(boxes[i], orig_shape)
        if window is None:
            out.append(None)
            continue
        (r0, r1), (c0, c1) = window
        if same:  # no resize to the image: the upsampled logits' window (f == 1: the logits themselves)
            mask = bilinear_above(logits[i], up, *window, scale=scale) if f > 1 else logits[i, r0:r1, c0:c1] > 0
            out.append((r0, c0, mask))
            continue
        rows = (top + int(lo_r[r0]), top + int(hi_r[r1 - 1]) + 1)  # the upsampled pixels the window reads
        cols = (left + int(lo_c[c0]), left + int(hi_c[c1 - 1]) + 1)
        src = logits[i] if f == 1 else bilinear_window(logits[i], up, rows, cols, scale)
        at = (-top, -left) if f == 1 else (rows[0] - top, cols[0] - left)  # where src lies in the cut
        mask = bilinear_above(src, orig_shape, *window, in_shape=(bottom - top, right - left), offset=at)
        out.append((r0, c0, mask))
    return out


def stack_windows(windows: Sequence[Window | None], shape: tuple[int, int]) -> np.ndarray:
    """``bool (n, H, W)``: the :data:`Window` s placed in planes of ``shape``.

    Example:
        >>> stack_windows([(1, 2, np.ones((1, 2), bool)), None], (3, 4)).astype(int).sum(axis=(1, 2)).tolist()
        [2, 0]
    """
    out = np.zeros((len(windows), *shape), bool)
    for i, item in enumerate(windows):
        if item is not None:
            r0, c0, m = item
            out[i, r0 : r0 + m.shape[0], c0 : c0 + m.shape[1]] = m
    return out
