"""NumPy kernels of Ultralytics' mask post-processing (``ultralytics/utils/ops.py`` 8.4): prototypes times
coefficients, PyTorch's bilinear resampling (``F.interpolate(mode="bilinear", align_corners=False)``, no
anti-aliasing), cropping to boxes, removing the letterbox and resizing to the image.

Example:
    >>> import numpy as np
    >>> bilinear(np.array([[[0.0, 1.0]]], np.float32), (1, 4)).round(3).tolist()
    [[[0.0, 0.25, 0.75, 1.0]]]
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["bilinear", "content_box", "crop_masks", "mask_logits", "masks_at_input", "masks_native", "unletterbox"]


def _taps(size_in: int, size_out: int, scale: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source rows and weights of PyTorch's ``area_pixel_compute_source_index`` (``align_corners=False``)."""
    step = size_in / size_out if scale is None else 1.0 / scale
    src = np.maximum((np.arange(size_out, dtype=np.float64) + 0.5) * step - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    return lo, hi, (src - lo).astype(np.float32)


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
    ``process_mask(..., upsample=True)``: logits upsampled (bilinear), ``> 0`` (sigmoid ``> 0.5``), then cropped."""
    if not len(coefficients):
        return np.zeros((0, *input_shape), np.uint8)
    up = bilinear(mask_logits(protos, coefficients), input_shape)
    return crop_masks((up > 0).astype(np.uint8), boxes)


def masks_native(
    protos: np.ndarray, coefficients: np.ndarray, boxes: np.ndarray, orig_shape: tuple[int, int]
) -> np.ndarray:
    """``uint8 (n, h, w)`` masks at the image's size from boxes in image pixels: Ultralytics'
    ``process_mask_native`` (``retina_masks=True``): logits upsampled by the smallest factor (1, 2 or 4) that puts
    the letterbox edge on whole pixels, cut and resized to the image, ``> 0``, cropped."""
    _, mh, mw = protos.shape
    h, w = orig_shape
    if not len(coefficients):
        return np.zeros((0, h, w), np.uint8)
    gain = min(4 * mh / h, 4 * mw / w)
    pad = (4 * mh - max(round(h * gain), 1)) | (4 * mw - max(round(w * gain), 1))
    f = 4 // math.gcd(4, pad | pad // 2)
    logits = mask_logits(protos, coefficients)
    if f > 1:
        logits = bilinear(logits, (mh * f, mw * f), scale=float(f))
    return crop_masks((unletterbox(logits, orig_shape) > 0).astype(np.uint8), boxes)
