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

import numpy as np

__all__ = [
    "bilinear",
    "bilinear_window",
    "content_box",
    "crop_masks",
    "mask_logits",
    "masks_at_input",
    "masks_native",
    "unletterbox",
    "unletterbox_binary",
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
