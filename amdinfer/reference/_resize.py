"""Fast Resize for the nearest and linear modes PyTorch exports; other modes go to onnx's kernel."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx.reference.ops.op_resize import Resize as _OnnxResize

__all__ = ["Resize", "resize"]

_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _source_coordinates(mode: str, n_in: int, n_out: int, scale: float, length: float) -> np.ndarray:
    """Map output pixel indices to input coordinates (the Resize ``coordinate_transformation_mode``).

    ``length`` is the spec's ``length_resized``: ``scale * n_in`` when ``scales`` is given, which may be fractional
    (``n_out`` is its floor), else ``n_out``. ``align_corners`` divides by ``length - 1`` and ``pytorch_half_pixel``
    tests ``length > 1``, exactly as the spec's formulas (and ONNX's backend test data) read.
    """
    x = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if length > 1 else np.zeros(n_out)
    if mode == "align_corners":
        return x * (n_in - 1) / (length - 1) if length != 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    raise ValueError(f"coordinate_transformation_mode: got {mode!r}, expected one of {_COORDINATE_MODES}")


def _nearest_index(coords: np.ndarray, rounding: str, n_in: int) -> np.ndarray:
    if rounding == "round_prefer_floor":
        idx = np.ceil(coords - 0.5)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    elif rounding == "floor":
        idx = np.floor(coords)
    elif rounding == "ceil":
        idx = np.ceil(coords)
    else:
        raise ValueError(f"nearest_mode: got {rounding!r}, expected one of {_NEAREST_MODES}")
    return np.clip(idx, 0, n_in - 1).astype(np.intp)


def resize(
    x: np.ndarray,
    *,
    scales: Sequence[float] | None = None,
    sizes: Sequence[int] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
) -> np.ndarray:
    """Nearest or (multi)linear Resize over all axes (https://onnx.ai/onnx/operators/onnx__Resize.html).

    Each axis is resized separately (linear interpolation is separable): output size ``floor(in * scale)`` or
    ``sizes``; source coordinate from ``coordinate_transformation_mode`` using the given scale (``out / in`` when
    ``sizes`` is given) and the spec's ``length_resized``, which is ``in * scale`` unfloored when ``scales`` is
    given (so ``align_corners`` downsampling 4 -> 2 at scale 0.6 divides by ``2.4 - 1``, not ``2 - 1``, as ONNX's
    backend test data ``test_resize_downsample_scales_linear_align_corners`` expects; ONNX Runtime's CPU kernel
    uses the integer length there) and ``out`` when ``sizes`` is given; nearest rounds with ``nearest_mode`` and
    clamps; linear clamps the coordinate to ``[0, in - 1]`` and blends the two neighbours.

    Args:
        x: Input of any rank.
        scales: One scale per axis (exclusive with ``sizes``).
        sizes: One output size per axis.
        mode: ``nearest`` or ``linear``.
        coordinate_transformation_mode: ``half_pixel``, ``pytorch_half_pixel``, ``align_corners`` or
            ``asymmetric``.
        nearest_mode: ``round_prefer_floor``, ``round_prefer_ceil``, ``floor`` or ``ceil``.

    Returns:
        The resized tensor in ``x``'s dtype (linear on integers rounds half to even and saturates).

    Example:
        >>> resize(np.array([[1.0, 2.0]], np.float32), scales=[1, 2], mode="nearest",
        ...        coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        array([[1., 1., 2., 2.]], dtype=float32)
    """
    if (scales is None) == (sizes is None):
        raise ValueError("resize: exactly one of scales and sizes must be given")
    if mode not in ("nearest", "linear"):
        raise ValueError(f"resize mode: got {mode!r}, expected 'nearest' or 'linear'")
    y = x
    integer = np.issubdtype(x.dtype, np.integer)
    for axis in range(x.ndim):
        n_in = x.shape[axis]
        if sizes is not None:
            n_out = int(sizes[axis])
            scale = n_out / n_in if n_in else 0.0
            length = float(n_out)
        else:
            scale = float(scales[axis])  # type: ignore[index]
            length = n_in * scale
            n_out = int(np.floor(length))
        if n_out == n_in and scale == 1.0:
            continue
        if n_out == 0 or n_in == 0:
            if n_out:
                raise ValueError(f"resize: axis {axis} has 0 elements, expected at least 1 to resize it to {n_out}")
            y = np.take(y, np.zeros(0, np.intp), axis=axis)  # nothing to sample: an empty axis
            continue
        coords = _source_coordinates(coordinate_transformation_mode, n_in, n_out, scale, length)
        if mode == "nearest":
            y = np.take(y, _nearest_index(coords, nearest_mode, n_in), axis=axis)
            continue
        if y.dtype == np.float16:
            y = y.astype(np.float32)
        elif not np.issubdtype(y.dtype, np.floating):
            y = y.astype(np.float64)
        coords = np.clip(coords, 0, n_in - 1)
        lo = np.floor(coords).astype(np.intp)
        hi = np.minimum(lo + 1, n_in - 1)
        shape = [1] * y.ndim
        shape[axis] = n_out
        w = (coords - lo).astype(y.dtype).reshape(shape)
        a = np.take(y, lo, axis=axis)
        b = np.take(y, hi, axis=axis)
        b -= a
        b *= w
        a += b
        y = a
    if integer and y.dtype.kind == "f":
        info = np.iinfo(x.dtype)
        y = np.clip(np.rint(y), info.min, info.max)
    return y.astype(x.dtype, copy=False)


class Resize(_OnnxResize):
    """ONNX Resize: nearest and linear through :func:`resize`; cubic, antialias, ``axes``,
    ``tf_crop_and_resize``, ``half_pixel_symmetric`` and ``keep_aspect_ratio_policy`` through onnx's kernel."""

    def _run(  # type: ignore[override]
        self,
        X: np.ndarray,
        roi: np.ndarray | None,
        scales: np.ndarray | None = None,
        sizes: np.ndarray | None = None,
        antialias: int | None = None,
        axes: Sequence[int] | None = None,
        coordinate_transformation_mode: str | None = None,
        cubic_coeff_a: float | None = None,
        exclude_outside: int | None = None,
        extrapolation_value: float | None = None,
        keep_aspect_ratio_policy: str | None = None,
        mode: str | None = None,
        nearest_mode: str | None = None,
    ) -> tuple[np.ndarray]:
        scales = None if scales is None or np.size(scales) == 0 else scales
        sizes = None if sizes is None or np.size(sizes) == 0 else sizes
        ctm = coordinate_transformation_mode or "half_pixel"
        fast = (
            (mode or "nearest") in ("nearest", "linear")
            and not antialias
            and axes is None
            and ctm in _COORDINATE_MODES
            and (nearest_mode or "round_prefer_floor") in _NEAREST_MODES
            and (sizes is None or (keep_aspect_ratio_policy or "stretch") == "stretch")
            and (scales is None) != (sizes is None)
            and (mode != "linear" or np.issubdtype(X.dtype, np.floating))
        )
        if not fast:
            return super()._run(
                X,
                roi,
                scales,
                sizes,
                antialias=antialias,
                axes=axes,
                coordinate_transformation_mode=coordinate_transformation_mode,
                cubic_coeff_a=cubic_coeff_a,
                exclude_outside=exclude_outside,
                extrapolation_value=extrapolation_value,
                keep_aspect_ratio_policy=keep_aspect_ratio_policy,
                mode=mode,
                nearest_mode=nearest_mode,
            )
        return (
            resize(
                X,
                scales=None if scales is None else [float(s) for s in scales],
                sizes=None if sizes is None else [int(s) for s in sizes],
                mode=mode or "nearest",
                coordinate_transformation_mode=ctm,
                nearest_mode=nearest_mode or "round_prefer_floor",
            ),
        )
