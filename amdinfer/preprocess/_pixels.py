"""Pixel stages: colour order (:class:`BgrToRgb`), layout (:class:`HwcToChw`), :class:`Normalize`, :class:`Cast`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..stages import Preprocessor
from ._common import _image

__all__ = ["BgrToRgb", "Cast", "HwcToChw", "Normalize"]


class BgrToRgb(Preprocessor):
    """Reverse the channel order of an ``(H, W, 3)`` image (BGR <-> RGB; the same flip both ways).

    Free: the result is a view with a negative channel stride (no copy); the next stage that copies
    (a resize, ``HwcToChw``, ``Normalize``) folds the flip into its own pass, and a fused graph does it with one
    ``Gather`` on the device.

    Example:
        >>> BgrToRgb()(np.array([[[1, 2, 3]]])).data.tolist()
        [[[3, 2, 1]]]
    """

    def __init__(self) -> None:
        pass

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = _image(self, data)
        if image.ndim != 3 or image.shape[2] != 3:
            raise InputError(f"BgrToRgb: got shape {image.shape}, expected (H, W, 3)")
        return image[..., ::-1]


class HwcToChw(Preprocessor):
    """Move channels first: ``(H, W, C) -> (C, H, W)``; a grey ``(H, W)`` image becomes ``(1, H, W)``.

    Example:
        >>> HwcToChw()(np.zeros((4, 5, 3))).data.shape
        (3, 4, 5)
    """

    def __init__(self) -> None:
        pass

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = _image(self, data)
        if image.ndim == 2:
            return image[None]
        return np.ascontiguousarray(image.transpose(2, 0, 1))


def _per_channel(name: str, value: Any) -> np.ndarray | None:
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise OptionError(f"{name}: got {value!r}, expected a number or one number per channel") from None
    if arr.ndim > 1 or arr.size == 0 or arr.dtype.kind not in "fiu" or not np.all(np.isfinite(arr)):
        raise OptionError(f"{name}: got {value!r}, expected a finite number or a sequence of them (one per channel)")
    return arr.reshape(-1)


class Normalize(Preprocessor):
    """``(x * scale - mean) / std`` in float32, ``mean`` and ``std`` per channel.

    Args:
        mean: subtracted after scaling; a number or one per channel (``None``: 0).
        std: divisor after subtracting; a number or one per channel (``None``: 1). No zeros.
        scale: multiplier applied first, e.g. ``1 / 255``. When ``1 / scale`` is a whole number (``1 / 255``),
            the pixels are divided by it instead (``x / 255.0``, as Ultralytics and torchvision do; multiplying
            by the rounded ``1 / 255`` differs in the last bit for some values).
        channel_axis: the channel axis of the image: ``-1`` for ``(H, W, C)`` (the default, as images are
            decoded), ``0`` after :class:`HwcToChw`.
        dtype: floating dtype of the result.

    Raises:
        OptionError: bad numbers, a zero ``std``, or a non-floating ``dtype``.
        InputError: (when called) the channel count differs from the number of means/stds.

    Example:
        >>> Normalize(mean=[0.5], std=[0.5], scale=1 / 255)(np.array([[[0, 255]]], np.uint8)).data.tolist()
        [[[-1.0, 1.0]]]
    """

    def __init__(
        self,
        mean: float | Sequence[float] | None = None,
        std: float | Sequence[float] | None = None,
        scale: float = 1.0,
        *,
        channel_axis: int = -1,
        dtype: Any = "float32",
    ) -> None:
        mean_arr = _per_channel("mean", mean)
        std_arr = _per_channel("std", std)
        if std_arr is not None and np.any(std_arr == 0):
            raise OptionError(f"std: got {std!r}, expected non-zero values")
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)) or not np.isfinite(scale):
            raise OptionError(f"scale: got {scale!r}, expected a finite number")
        if not isinstance(channel_axis, (int, np.integer)) or isinstance(channel_axis, bool):
            raise OptionError(f"channel_axis: got {channel_axis!r}, expected an int (-1 for HWC, 0 for CHW)")
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise OptionError(f"dtype: got {dtype!r}, expected a floating numpy dtype") from None
        if dt.kind != "f":
            raise OptionError(f"dtype: got {dt}, expected a floating dtype (float32, float16, float64)")
        self.mean = None if mean is None else tuple(float(v) for v in mean_arr)  # type: ignore[union-attr]
        self.std = None if std is None else tuple(float(v) for v in std_arr)  # type: ignore[union-attr]
        self.scale = float(scale)
        self.channel_axis = int(channel_axis)
        self.dtype = dt

    @property
    def divisor(self) -> float | None:
        """The whole number the pixels are divided by (``1 / scale``), or ``None`` when ``scale`` multiplies.

        Example:
            >>> Normalize(scale=1 / 255).divisor, Normalize(scale=0.5).divisor, Normalize().divisor
            (255.0, 2.0, None)
        """
        if self.scale in (0.0, 1.0):
            return None
        inv = 1.0 / self.scale
        return float(round(inv)) if abs(inv - round(inv)) < 1e-9 * abs(inv) and abs(inv) > 1 else None

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if not isinstance(data, np.ndarray) or data.dtype.kind not in "fiub":
            shown = f"array of {data.dtype}" if isinstance(data, np.ndarray) else type(data).__name__
            raise InputError(f"Normalize: got {shown}, expected a numeric numpy array")
        work = np.float64 if self.dtype == np.float64 else np.float32
        divisor = self.divisor
        if divisor is not None:
            x = data.astype(work)
            x /= work(divisor)
        else:
            x = data.astype(work) if self.scale == 1.0 else data.astype(work) * work(self.scale)
        for name, values in (("mean", self.mean), ("std", self.std)):
            if values is None:
                continue
            v = np.asarray(values, dtype=work)
            if v.size > 1:
                axis = self.channel_axis
                if not -x.ndim <= axis < x.ndim:
                    raise InputError(f"Normalize: channel_axis={axis} is out of range for shape {x.shape}")
                if x.shape[axis] != v.size:
                    raise InputError(
                        f"Normalize: {name} has {v.size} values, but the image of shape {x.shape} has "
                        f"{x.shape[axis]} channels on axis {axis} (set channel_axis=0 after HwcToChw)"
                    )
                shape = [1] * x.ndim
                shape[axis] = v.size
                v = v.reshape(shape)
            if name == "mean":
                x -= v
            else:
                x /= v
        return x if x.dtype == self.dtype else x.astype(self.dtype)


class Cast(Preprocessor):
    """Convert to ``dtype`` (the engine never casts silently, so put this last when the model needs it).

    Args:
        dtype: anything ``np.dtype`` accepts, e.g. ``"float16"``.

    Raises:
        OptionError: ``dtype`` is not a numpy dtype.

    Example:
        >>> Cast("float16")(np.ones(2, np.float32)).data.dtype
        dtype('float16')
    """

    def __init__(self, dtype: Any) -> None:
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise OptionError(f"dtype: got {dtype!r}, expected a numpy dtype such as 'float32'") from None

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if not isinstance(data, np.ndarray):
            raise InputError(f"Cast: got {type(data).__name__}, expected a numpy array")
        return data.astype(self.dtype, copy=False)
