"""Preprocessing stages: image decoding, geometry, colour order, layout, normalization, dtype, batching.

Each stage checks its parameters when built and calls a NumPy kernel of :mod:`amdinfer.reference` (or a
one-line NumPy expression) on one image. Geometric stages (:class:`Letterbox`, :class:`Resize`,
:class:`CenterCrop`) take ``(H, W, C)`` or ``(H, W)`` images and record in the sample's metadata how they
moved pixels, so :class:`~amdinfer.postprocess.ScaleBoxes` can map boxes back to the original image.

Example:
    >>> import numpy as np
    >>> from amdinfer.preprocess import Letterbox, HwcToChw, Normalize
    >>> sample = Letterbox(64)(np.zeros((48, 32, 3), np.uint8))
    >>> sample.data.shape, sample.meta["orig_shape"], sample.meta["letterbox"]["pad"]
    ((64, 64, 3), (48, 32), (10.5, 0.0))
    >>> HwcToChw()(Normalize(scale=1 / 255)(sample)).data.shape
    (3, 64, 64)
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._files import read_regular
from .errors import BackendUnavailableError, InputError, OptionError, StageError
from .stages import Preprocessor, Sample, compose_affine

__all__ = [
    "BgrToRgb",
    "Cast",
    "CenterCrop",
    "HwcToChw",
    "Letterbox",
    "LetterboxGeometry",
    "LoadImage",
    "Normalize",
    "Resize",
    "letterbox_geometry",
    "opencv_available",
    "stack",
]


# ---------------------------------------------------------------------------------------------- validation
def _hw(name: str, value: Any) -> tuple[int, int]:
    """An int or ``(height, width)`` of positive ints."""
    given = value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value), int(value))
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)
        or min(value) < 1
    ):
        raise OptionError(f"{name}: got {given!r}, expected a positive int or (height, width) of positive ints")
    return (int(value[0]), int(value[1]))


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise OptionError(f"{name}: got {value!r}, expected True or False")
    return bool(value)


def _image(stage: Preprocessor, data: Any) -> np.ndarray:
    """Check that ``data`` is an ``(H, W)`` or ``(H, W, C)`` array."""
    if not isinstance(data, np.ndarray):
        raise InputError(
            f"{type(stage).__name__}: got {type(data).__name__}, expected a numpy image (H, W, C); "
            "put LoadImage() first to decode paths or bytes"
        )
    if data.ndim not in (2, 3) or data.size == 0:
        raise InputError(
            f"{type(stage).__name__}: got shape {data.shape}, expected a non-empty (H, W, C) or (H, W) image"
        )
    return data


def _record_geometry(meta: dict[str, Any], before: np.ndarray, after: np.ndarray) -> None:
    meta.setdefault("orig_shape", (int(before.shape[0]), int(before.shape[1])))
    meta["input_shape"] = (int(after.shape[0]), int(after.shape[1]))


_RESIZE_BACKENDS = ("auto", "opencv", "numpy")


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def opencv_available() -> bool:
    """Whether ``cv2`` can be imported (geometric stages with ``backend="auto"`` then use it).

    Example:
        >>> isinstance(opencv_available(), bool)
        True
    """
    return _have("cv2")


def _resize_backend(value: Any) -> str:
    if value not in _RESIZE_BACKENDS:
        raise OptionError(f"backend: got {value!r}, expected one of {_RESIZE_BACKENDS}")
    if value == "opencv" and not _have("cv2"):
        raise BackendUnavailableError(
            "backend='opencv': OpenCV is not installed; pip install opencv-python-headless", backend="opencv"
        )
    return str(value)


def _use_opencv(backend: str) -> bool:
    return backend == "opencv" or (backend == "auto" and _have("cv2"))


def _resize(image: np.ndarray, size_wh: tuple[int, int], backend: str) -> np.ndarray:
    """Bilinear resize to ``(w, h)``: ``cv2.resize`` when OpenCV is used, else the NumPy kernel (within 1 of it)."""
    if _use_opencv(backend) and image.dtype in (np.uint8, np.float32) and image.ndim in (2, 3) and image.shape[-1] <= 4:
        import cv2

        return np.asarray(cv2.resize(image, size_wh, interpolation=cv2.INTER_LINEAR)).reshape(
            size_wh[1], size_wh[0], *image.shape[2:]
        )
    from .reference import resize_bilinear

    return resize_bilinear(image, size_wh)


# ---------------------------------------------------------------------------------------------- decoding
_DECODERS = ("auto", "pillow", "opencv")
_MODES = ("RGB", "BGR", "L")


class LoadImage(Preprocessor):
    """Decode an image from a path or encoded bytes; arrays pass through unchanged.

    Both decoders apply the EXIF orientation of JPEG files.

    Args:
        mode: ``"RGB"`` (``(H, W, 3)`` uint8), ``"BGR"`` (OpenCV's order) or ``"L"`` (grey ``(H, W)``).
        backend: ``"pillow"``, ``"opencv"``, or ``"auto"`` (Pillow if installed, else OpenCV). Neither is a
            dependency of amdinfer; install one (``pip install pillow`` or ``opencv-python-headless``).

    Raises:
        OptionError: unknown ``mode`` or ``backend``.
        BackendUnavailableError: the named decoder (or, for ``"auto"``, either) is not installed; raised at
            construction for a named backend and on the first path/bytes for ``"auto"``.

    Example:
        >>> import numpy as np
        >>> LoadImage()(np.zeros((2, 2, 3), np.uint8)).data.shape  # arrays pass through
        (2, 2, 3)
    """

    def __init__(self, mode: str = "RGB", *, backend: str = "auto") -> None:
        if mode not in _MODES:
            raise OptionError(f"mode: got {mode!r}, expected one of {_MODES}")
        if backend not in _DECODERS:
            raise OptionError(f"backend: got {backend!r}, expected one of {_DECODERS}")
        self.mode = mode
        self.backend = backend
        if backend != "auto":
            self._decoder()

    def _decoder(self) -> str:
        if self.backend == "pillow" or (self.backend == "auto" and _have("PIL")):
            if not _have("PIL"):
                raise BackendUnavailableError("LoadImage(backend='pillow'): pip install pillow", backend="pillow")
            return "pillow"
        if self.backend == "opencv" or self.backend == "auto":
            if not _have("cv2"):
                hint = "pip install pillow (or opencv-python-headless)"
                raise BackendUnavailableError(
                    f"LoadImage(backend={self.backend!r}): no image decoder installed; {hint}", backend=self.backend
                )
            return "opencv"
        raise AssertionError(self.backend)  # pragma: no cover

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if isinstance(data, np.ndarray):
            image = data
        else:
            if isinstance(data, (str, os.PathLike)):
                # Regular files only: a FIFO would block the pipeline, /dev/zero would fill memory.
                raw = read_regular(data, "LoadImage: cannot read image", error=InputError)
                what = repr(os.fspath(data))
                meta.setdefault("path", os.fspath(data))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                what = f"{len(data)} bytes"
                raw = bytes(data)
            else:
                raise InputError(
                    f"LoadImage: got {type(data).__name__}, expected a path, encoded bytes or a numpy image"
                )
            image = self._decode(raw, what)
        meta.setdefault("orig_shape", (int(image.shape[0]), int(image.shape[1])))
        return image

    def _decode(self, raw: bytes, what: str) -> np.ndarray:
        if self._decoder() == "pillow":
            from PIL import Image, ImageOps, UnidentifiedImageError

            try:
                with Image.open(io.BytesIO(raw)) as pil:
                    # Apply the EXIF orientation, as OpenCV's decoder does, so both backends agree.
                    pil = ImageOps.exif_transpose(pil).convert("L" if self.mode == "L" else "RGB")
                    image = np.asarray(pil, dtype=np.uint8).copy()
            except (UnidentifiedImageError, OSError) as exc:
                raise InputError(f"LoadImage: {what}: not a decodable image ({exc})") from exc
            except Image.DecompressionBombError as exc:
                raise InputError(
                    f"LoadImage: {what}: refused as a decompression bomb ({exc}); raise "
                    "PIL.Image.MAX_IMAGE_PIXELS for images you trust"
                ) from exc
            return image[..., ::-1].copy() if self.mode == "BGR" else image
        import cv2

        flag = cv2.IMREAD_GRAYSCALE if self.mode == "L" else cv2.IMREAD_COLOR
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), flag)
        if image is None:
            raise InputError(f"LoadImage: {what}: not a decodable image (OpenCV could not decode it)")
        return np.ascontiguousarray(image[..., ::-1]) if self.mode == "RGB" else image


# ---------------------------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class LetterboxGeometry:
    """Where :class:`Letterbox` puts an image of a given size (see :func:`letterbox_geometry`).

    Attributes:
        resized: ``(height, width)`` of the resized content.
        pads: ``(top, bottom, left, right)`` padding in pixels.
        shape: ``(height, width)`` of the result.
        ratio: the kernel's ``(ratio_w, ratio_h)``.
        pad: the kernel's half paddings ``(dw, dh)`` (``(0, 0)`` without ``center``).
        affine: ``(sx, sy, tx, ty)`` with per-axis gains ``sx = round(w * r) / w``, ``sy = round(h * r) / h``
            (Ultralytics >= 8.4 ``scale_boxes``) and the integer padding offsets.

    Example:
        >>> letterbox_geometry((427, 640), Letterbox(320)).resized
        (214, 320)
    """

    resized: tuple[int, int]
    pads: tuple[int, int, int, int]
    shape: tuple[int, int]
    ratio: tuple[float, float]
    pad: tuple[float, float]
    affine: tuple[float, float, float, float]


def letterbox_geometry(image_shape: tuple[int, int], stage: Letterbox) -> LetterboxGeometry:
    """The sizes, paddings and box mapping :class:`Letterbox` uses for an image of ``(height, width)``; the
    same arithmetic as :func:`amdinfer.reference.letterbox`.

    Example:
        >>> g = letterbox_geometry((480, 640), Letterbox(320))
        >>> g.resized, g.pads, g.shape, g.affine
        ((240, 320), (40, 40, 0, 0), (320, 320), (0.5, 0.5, 0.0, 40.0))
    """
    h, w = int(image_shape[0]), int(image_shape[1])
    new_h, new_w = stage.new_shape
    r = min(new_h / h, new_w / w)
    if not stage.scaleup:
        r = min(r, 1.0)
    ratio = (r, r)
    unpad_w, unpad_h = round(w * r), round(h * r)
    dw: float = new_w - unpad_w
    dh: float = new_h - unpad_h
    if stage.auto:
        dw, dh = dw % stage.stride, dh % stage.stride
    elif stage.scale_fill:
        dw, dh = 0.0, 0.0
        unpad_w, unpad_h = new_w, new_h
        ratio = (new_w / w, new_h / h)
    if stage.center:
        dw /= 2
        dh /= 2
    top, bottom = (round(dh - 0.1) if stage.center else 0), round(dh + 0.1)
    left, right = (round(dw - 0.1) if stage.center else 0), round(dw + 0.1)
    pad = (float(dw), float(dh)) if stage.center else (0.0, 0.0)
    return LetterboxGeometry(
        resized=(unpad_h, unpad_w),
        pads=(top, bottom, left, right),
        shape=(unpad_h + top + bottom, unpad_w + left + right),
        ratio=(float(ratio[0]), float(ratio[1])),
        pad=pad,
        affine=(unpad_w / w, unpad_h / h, float(left), float(top)),
    )


class Letterbox(Preprocessor):
    """Resize keeping the aspect ratio, then pad to ``new_shape``: Ultralytics' ``LetterBox`` exactly.

    The scale is ``r = min(new_h / h, new_w / w)`` (capped at 1 with ``scaleup=False``), the resized size
    ``(round(w * r), round(h * r))`` by bilinear interpolation, and the padding split
    ``round(d - 0.1)`` / ``round(d + 0.1)`` around the image with ``center=True`` (all of it right/bottom
    otherwise), computed by :func:`amdinfer.reference.letterbox`. Records ``"letterbox"`` (the kernel's
    ``ratio`` and ``pad``: half paddings ``(dw, dh)``, the content starting at ``round(dw - 0.1)``),
    ``"orig_shape"``, ``"input_shape"`` and ``"affine"`` in the metadata.

    Args:
        new_shape: target ``(height, width)``, or one int for a square.
        auto: pad only to the next multiple of ``stride`` (smallest rectangle) instead of ``new_shape``.
        scale_fill: stretch to ``new_shape`` without padding (aspect ratio not kept).
        scaleup: allow enlarging small images (``False``: only shrink, as for validation).
        center: split the padding on both sides (``False``: pad right and bottom only).
        stride: model stride for ``auto``.
        color: pad value per channel.
        backend: ``"auto"`` (OpenCV's ``cv2.resize``/``cv2.copyMakeBorder`` when OpenCV is installed, as
            Ultralytics does, else the NumPy kernel), ``"opencv"`` or ``"numpy"``. The NumPy kernel is the
            reference: it rounds where OpenCV's x86 SIMD path truncates, so the two differ by at most 1.

    The box mapping recorded in ``"affine"`` uses per-axis gains ``round(w * r) / w`` and ``round(h * r) / h``
    (the exact scale of the resized content, as Ultralytics >= 8.4 ``scale_boxes``).

    Raises:
        OptionError: a parameter has the wrong type or range.
        BackendUnavailableError: ``backend="opencv"`` without OpenCV.

    Example:
        >>> out = Letterbox((64, 64))(np.zeros((32, 48, 3), np.uint8))
        >>> out.data.shape, out.meta["letterbox"]["ratio"], out.meta["letterbox"]["pad"]
        ((64, 64, 3), (1.3333333333333333, 1.3333333333333333), (0.0, 10.5))
        >>> out.meta["affine"]  # x * 64/48, y * 43/32 (round(32 * 4/3) rows) + 10: content from row round(10.5 - 0.1)
        (1.3333333333333333, 1.34375, 0.0, 10.0)
    """

    def __init__(
        self,
        new_shape: int | tuple[int, int] = 640,
        *,
        auto: bool = False,
        scale_fill: bool = False,
        scaleup: bool = True,
        center: bool = True,
        stride: int = 32,
        color: tuple[int, ...] = (114, 114, 114),
        backend: str = "auto",
    ) -> None:
        self.backend = _resize_backend(backend)
        self.new_shape = _hw("new_shape", new_shape)
        self.auto = _flag("auto", auto)
        self.scale_fill = _flag("scale_fill", scale_fill)
        self.scaleup = _flag("scaleup", scaleup)
        self.center = _flag("center", center)
        if self.auto and self.scale_fill:
            raise OptionError("auto and scale_fill: got both True, expected at most one")
        if not isinstance(stride, (int, np.integer)) or isinstance(stride, bool) or stride < 1:
            raise OptionError(f"stride: got {stride!r}, expected a positive int")
        self.stride = int(stride)
        if isinstance(color, (int, float, np.number)) and not isinstance(color, bool):
            color = (color,) * 3
        if (
            not isinstance(color, (tuple, list))
            or not color
            or not all(isinstance(c, (int, float, np.number)) and not isinstance(c, bool) for c in color)
        ):
            raise OptionError(f"color: got {color!r}, expected a number or a tuple of numbers per channel")
        self.color = tuple(color)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = _image(self, data)
        if image.ndim == 3 and len(self.color) not in (1, image.shape[2]):
            raise InputError(
                f"Letterbox: got an image with {image.shape[2]} channels, expected {len(self.color)} "
                f"(color={self.color})"
            )
        geo = letterbox_geometry(image.shape[:2], self)
        h, w = image.shape[:2]
        content = image if geo.resized == (h, w) else _resize(image, (geo.resized[1], geo.resized[0]), self.backend)
        top, bottom, left, right = geo.pads
        fill = np.asarray(self.color)
        if fill.ndim and (image.ndim != 3 or image.shape[2] != fill.size):
            fill = fill.ravel()[0]  # Ultralytics pads multispectral and grey images with the first value
        out = np.empty((*geo.shape, *image.shape[2:]), dtype=image.dtype)
        if top or bottom or left or right:
            out[...] = fill.astype(image.dtype)
        out[top : top + geo.resized[0], left : left + geo.resized[1]] = content
        meta["letterbox"] = {"ratio": geo.ratio, "pad": geo.pad}
        _record_geometry(meta, image, out)
        compose_affine(meta, *geo.affine)
        return out


class Resize(Preprocessor):
    """Bilinear resize: the shorter side to ``size`` (aspect kept), or exactly ``(height, width)``.

    With an int, the shorter side becomes ``size`` and the longer ``int(size * long / short)``, as
    ``torchvision.transforms.Resize(int)`` computes it. Records ``"orig_shape"``, ``"input_shape"`` and
    ``"affine"`` in the metadata.

    Args:
        size: the shorter side (int) or the exact ``(height, width)``.
        backend: ``"auto"`` (``cv2.resize`` when OpenCV is installed, else the NumPy kernel), ``"opencv"`` or
            ``"numpy"`` (the reference; within 1 of OpenCV on uint8).

    Raises:
        OptionError: ``size`` is not a positive int or pair.
        BackendUnavailableError: ``backend="opencv"`` without OpenCV.

    Example:
        >>> Resize(16)(np.zeros((32, 64, 3), np.uint8)).data.shape
        (16, 32, 3)
        >>> Resize((10, 20))(np.zeros((32, 64, 3), np.uint8)).data.shape
        (10, 20, 3)
    """

    def __init__(self, size: int | tuple[int, int], *, backend: str = "auto") -> None:
        self.backend = _resize_backend(backend)
        _hw("size", size)
        self.size = int(size) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))

    def target(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` an image of this size is resized to.

        Example:
            >>> Resize(224).target(480, 640)
            (224, 298)
        """
        if isinstance(self.size, tuple):
            return self.size
        short, long = (height, width) if height <= width else (width, height)
        new_short, new_long = self.size, int(self.size * long / short)
        return (new_short, new_long) if height <= width else (new_long, new_short)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = _image(self, data)
        h, w = image.shape[:2]
        th, tw = self.target(h, w)
        out = image if (th, tw) == (h, w) else _resize(image, (tw, th), self.backend)
        _record_geometry(meta, image, out)
        compose_affine(meta, tw / w, th / h, 0.0, 0.0)
        return out


class CenterCrop(Preprocessor):
    """Crop the centre ``(height, width)`` (torchvision's offsets ``round((h - th) / 2)``).

    Records ``"orig_shape"``, ``"input_shape"`` and ``"affine"`` in the metadata.

    Args:
        size: crop size, an int for a square.

    Raises:
        OptionError: ``size`` is not a positive int or pair.
        InputError: (when called) the image is smaller than ``size``.

    Example:
        >>> CenterCrop(2)(np.arange(16).reshape(4, 4)).data.tolist()
        [[5, 6], [9, 10]]
    """

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = _hw("size", size)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = _image(self, data)
        h, w = image.shape[:2]
        th, tw = self.size
        if th > h or tw > w:
            raise InputError(f"CenterCrop: got an image of size {(h, w)}, expected at least {self.size}")
        top, left = round((h - th) / 2.0), round((w - tw) / 2.0)
        out = image[top : top + th, left : left + tw]
        _record_geometry(meta, image, out)
        compose_affine(meta, 1.0, 1.0, -float(left), -float(top))
        return out


# ---------------------------------------------------------------------------------------------- colour, layout, values
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


# ---------------------------------------------------------------------------------------------- batching
def stack(samples: Iterable[Any]) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Stack preprocessed items into one batch along a new axis 0, keeping each item's metadata.

    Args:
        samples: :class:`~amdinfer.stages.Sample` objects or arrays, all of one shape and dtype.

    Returns:
        ``(batch, metas)``.

    Raises:
        StageError: no items, or items of different shapes or dtypes (e.g. ``Letterbox(auto=True)`` or
            ``Resize(int)`` on images of different aspect ratios).

    Example:
        >>> batch, metas = stack([np.zeros((3, 4, 4)), np.ones((3, 4, 4))])
        >>> batch.shape, metas
        ((2, 3, 4, 4), [{}, {}])
    """
    wrapped = [Sample.wrap(s) for s in samples]
    if not wrapped:
        raise StageError("stack: got no items, expected at least one")
    arrays = []
    for i, s in enumerate(wrapped):
        if not isinstance(s.data, np.ndarray):
            raise StageError(f"stack: item {i} is {type(s.data).__name__}, expected a numpy array")
        arrays.append(s.data)
    first = arrays[0]
    for i, a in enumerate(arrays[1:], start=1):
        if a.shape != first.shape or a.dtype != first.dtype:
            raise StageError(
                f"stack: item {i} has shape {a.shape} {a.dtype}, item 0 has {first.shape} {first.dtype}; "
                "a batch needs one shape and dtype (use a fixed-size Letterbox/Resize, or batch_size=1)"
            )
    return np.stack(arrays), [s.meta for s in wrapped]
