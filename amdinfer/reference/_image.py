"""Image resizing with OpenCV's conventions, and Ultralytics' letterbox."""

from __future__ import annotations

import numpy as np

__all__ = ["letterbox", "linear_taps_fixed", "resize_bilinear", "resize_nearest"]

# OpenCV's INTER_LINEAR on 8-bit images uses 11-bit fixed-point weights.
_COEF_BITS = 11
_COEF_SCALE = 1 << _COEF_BITS


def _linear_taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source pixels and the weight of the second one, exactly as cv2.resize(INTER_LINEAR) computes them."""
    if n_in < 1 or n_out < 1:
        raise ValueError(f"resize taps: got {n_in} -> {n_out} pixels, expected at least 1 on both sides")
    scale = 1.0 / (n_out / n_in)
    f = ((np.arange(n_out) + 0.5) * scale - 0.5).astype(np.float32)
    lo = np.floor(f).astype(np.int64)
    f = f - lo
    f[lo < 0] = 0
    lo[lo < 0] = 0
    top = lo >= n_in - 1
    f[top] = 0
    lo[top] = n_in - 1
    return lo, np.minimum(lo + 1, n_in - 1), f


def linear_taps_fixed(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's 8-bit INTER_LINEAR taps along one axis: source indices ``i0, i1`` and 11-bit integer weights
    ``w0, w1`` (``w0 + w1 == 2048``), as ``cv2.resize`` computes them. Both sizes must be at least 1
    (``ValueError`` otherwise).

    Example:
        >>> [a.tolist() for a in linear_taps_fixed(2, 4)]
        [[0, 0, 0, 1], [1, 1, 1, 1], [2048, 1536, 512, 2048], [0, 512, 1536, 0]]
    """
    lo, hi, f = _linear_taps(n_in, n_out)
    return lo, hi, np.rint((1 - f) * _COEF_SCALE).astype(np.int64), np.rint(f * _COEF_SCALE).astype(np.int64)


def _new_size(size: tuple[int, int]) -> tuple[int, int]:
    """``(new_w, new_h)`` as positive ints."""
    new_w, new_h = int(size[0]), int(size[1])
    if new_w <= 0 or new_h <= 0:
        raise ValueError(f"size: got {size}, expected positive (new_w, new_h)")
    return new_w, new_h


def resize_bilinear(image: np.ndarray, size: tuple[int, int], *, rounding: str = "round") -> np.ndarray:
    """Bilinear resize matching ``cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)``.

    Half-pixel centres (``src = (dst + 0.5) * in / out - 0.5``), clamped at the borders. Float images are
    interpolated in float32 (float64 stays float64); 8-bit images use OpenCV's 11-bit fixed-point weights and
    rounding, which reproduces OpenCV to within 1 (OpenCV's SIMD paths round some pixels differently).

    Args:
        image: (H, W) or (H, W, C) image.
        size: ``(new_w, new_h)``, in OpenCV's order.
        rounding: for uint8, how the vertical pass rounds: ``"round"`` (OpenCV's scalar path,
            ``(v + 2**21) >> 22``) or ``"simd"`` (OpenCV's SIMD path ``VResizeLinearVec_32s8u``, which x86 builds
            use: ``((((S0 >> 4) * b0) >> 16) + (((S1 >> 4) * b1) >> 16) + 2) >> 2``, a truncation that comes out
            up to 1 lower; what ``cv2.resize`` returns on x86, and what a fused graph computes).

    Returns:
        The resized image, same dtype and channel layout.

    Example:
        >>> resize_bilinear(np.array([[0.0, 1.0]], np.float32), (4, 1))
        array([[0.  , 0.25, 0.75, 1.  ]], dtype=float32)
    """
    new_w, new_h = _new_size(size)
    h, w = image.shape[:2]
    x0, x1, fx = _linear_taps(w, new_w)
    y0, y1, fy = _linear_taps(h, new_h)
    extra = (1,) * (image.ndim - 2)
    if image.dtype == np.uint8:
        ax1 = np.rint(fx * _COEF_SCALE).astype(np.int64)
        ax0 = np.rint((1 - fx) * _COEF_SCALE).astype(np.int64)
        ay1 = np.rint(fy * _COEF_SCALE).astype(np.int64)
        ay0 = np.rint((1 - fy) * _COEF_SCALE).astype(np.int64)
        src = image.astype(np.int64)
        rows = src[:, x0] * ax0.reshape(1, -1, *extra) + src[:, x1] * ax1.reshape(1, -1, *extra)
        if rounding == "simd":
            t0 = ((rows[y0] >> 4) * ay0.reshape(-1, 1, *extra)) >> 16
            t1 = ((rows[y1] >> 4) * ay1.reshape(-1, 1, *extra)) >> 16
            return ((t0 + t1 + 2) >> 2).clip(0, 255).astype(np.uint8)
        if rounding != "round":
            raise ValueError(f"rounding: got {rounding!r}, expected 'round' or 'simd'")
        out = rows[y0] * ay0.reshape(-1, 1, *extra) + rows[y1] * ay1.reshape(-1, 1, *extra)
        shift = 2 * _COEF_BITS
        return ((out + (1 << (shift - 1))) >> shift).clip(0, 255).astype(np.uint8)
    ct = np.float64 if image.dtype == np.float64 else np.float32
    src = image.astype(ct, copy=False)
    wx1 = fx.astype(ct).reshape(1, -1, *extra)
    wy1 = fy.astype(ct).reshape(-1, 1, *extra)
    rows = src[:, x0] * (1 - wx1) + src[:, x1] * wx1
    out = rows[y0] * (1 - wy1) + rows[y1] * wy1
    if np.issubdtype(image.dtype, np.integer):
        info = np.iinfo(image.dtype)
        return np.clip(np.rint(out), info.min, info.max).astype(image.dtype)
    return out.astype(image.dtype, copy=False)


def resize_nearest(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize matching ``cv2.resize(image, size, interpolation=cv2.INTER_NEAREST)``.

    Source pixel ``floor(dst * in / out)`` (OpenCV's legacy rule, not half-pixel), clamped to the image.

    Args:
        image: (H, W) or (H, W, C) image.
        size: ``(new_w, new_h)``, in OpenCV's order.

    Returns:
        The resized image, same dtype.

    Example:
        >>> resize_nearest(np.array([[1, 2]], np.uint8), (4, 1))
        array([[1, 1, 2, 2]], dtype=uint8)
    """
    new_w, new_h = _new_size(size)
    h, w = image.shape[:2]
    xs = np.minimum(np.floor(np.arange(new_w) * (1.0 / (new_w / w))).astype(np.int64), w - 1)
    ys = np.minimum(np.floor(np.arange(new_h) * (1.0 / (new_h / h))).astype(np.int64), h - 1)
    return image[ys][:, xs]


def letterbox(
    image_hwc: np.ndarray,
    new_shape: int | tuple[int, int] = 640,
    *,
    color: tuple[int, ...] | int = (114, 114, 114),
    auto: bool = False,
    scale_fill: bool = False,
    scaleup: bool = True,
    center: bool = True,
    stride: int = 32,
) -> tuple[np.ndarray, tuple[float, float], tuple[float, float]]:
    """Resize keeping the aspect ratio and pad, with Ultralytics ``LetterBox`` semantics.

    With ``(h, w)`` the image size and ``(new_h, new_w)`` the target:

    * ``r = min(new_h / h, new_w / w)``, capped at 1 unless ``scaleup``;
    * the content is resized to ``(round(w * r), round(h * r))`` (Python's round, half to even), each at least 1
      (a very elongated image keeps one row or column; Ultralytics would ask ``cv2.resize`` for 0 and fail), with
      :func:`resize_bilinear`, only if that differs from ``(w, h)``;
    * ``dw, dh = new_w - round(w * r), new_h - round(h * r)``; with ``auto`` they become ``dw % stride,
      dh % stride`` (the smallest stride-multiple canvas); otherwise with ``scale_fill`` the image is stretched to
      the target, there is no padding and the ratio is per axis;
    * with ``center`` the padding is split: ``dw /= 2, dh /= 2``, ``top, bottom = round(dh - 0.1),
      round(dh + 0.1)`` and ``left, right`` likewise (an odd pixel goes to the bottom/right); without it all the
      padding goes to the bottom/right;
    * padding is filled with ``color``.

    Args:
        image_hwc: (H, W, C) or (H, W) image.
        new_shape: Target ``(new_h, new_w)``, or one int for a square.
        color: Padding value per channel (or one value).
        auto: Pad only to the next multiple of ``stride``.
        scale_fill: Stretch to the target without padding (ignored with ``auto``).
        scaleup: Allow enlarging; when False the image is only ever shrunk.
        center: Centre the content; otherwise it sits at the top-left.
        stride: Stride for ``auto``.

    Returns:
        ``(image, (ratio_w, ratio_h), (pad_w, pad_h))``: the letterboxed image, the scale applied to x and y, and
        the offset of the content: ``(dw, dh)`` after halving when ``center`` (e.g. ``20.5``; the content starts at
        ``round(dw - 0.1)``), ``(0.0, 0.0)`` otherwise. :func:`scale_boxes` undoes it.

    Example:
        >>> image, ratio, pad = letterbox(np.zeros((480, 640, 3), np.uint8), 640)
        >>> image.shape, ratio, pad
        ((640, 640, 3), (1.0, 1.0), (0.0, 80.0))
    """
    h, w = image_hwc.shape[:2]
    new_h, new_w = (new_shape, new_shape) if isinstance(new_shape, int) else (int(new_shape[0]), int(new_shape[1]))
    r = min(new_h / h, new_w / w)
    if not scaleup:
        r = min(r, 1.0)
    ratio = (r, r)
    unpad_w, unpad_h = max(1, round(w * r)), max(1, round(h * r))
    dw: float = new_w - unpad_w
    dh: float = new_h - unpad_h
    if auto:
        dw, dh = dw % stride, dh % stride
    elif scale_fill:
        dw, dh = 0.0, 0.0
        unpad_w, unpad_h = new_w, new_h
        ratio = (new_w / w, new_h / h)
    if center:
        dw /= 2
        dh /= 2
    if (w, h) != (unpad_w, unpad_h):
        image_hwc = resize_bilinear(image_hwc, (unpad_w, unpad_h))
    top, bottom = (round(dh - 0.1) if center else 0), round(dh + 0.1)
    left, right = (round(dw - 0.1) if center else 0), round(dw + 0.1)
    out = np.empty((unpad_h + top + bottom, unpad_w + left + right, *image_hwc.shape[2:]), dtype=image_hwc.dtype)
    fill = np.asarray(color)
    if fill.ndim and (image_hwc.ndim != 3 or image_hwc.shape[2] != fill.size):
        fill = fill.ravel()[0]  # Ultralytics pads multispectral and grey images with the first value
    out[...] = fill.astype(image_hwc.dtype)
    out[top : top + unpad_h, left : left + unpad_w] = image_hwc
    pad = (float(dw), float(dh)) if center else (0.0, 0.0)
    return out, (float(ratio[0]), float(ratio[1])), pad
