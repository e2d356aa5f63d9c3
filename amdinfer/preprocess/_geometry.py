"""Geometric stages: :class:`Letterbox` (and its :func:`letterbox_geometry`, :func:`letterbox_into`),
:class:`Resize`, :class:`CenterCrop`.

Each takes a uint8 ``(H, W, C)`` or ``(H, W)`` image (:func:`~amdinfer.preprocess.check_image`: the rule a
fused graph's input follows too) and records in the sample's metadata how it moved pixels (``"orig_shape"``,
``"input_shape"``, ``"affine"``), so :class:`~amdinfer.postprocess.ScaleBoxes` can map boxes back to the
original image. Each can also write its result into a given array (``write_into``: a slot of a batch buffer,
so a batch is made without a per-image copy or ``np.stack``); ``canvas`` says the shape it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..stages import Preprocessor, compose_affine
from ._common import _flag, _hw, _import, _record_geometry, _resize, _resize_backend, _use_opencv, check_image

__all__ = ["CenterCrop", "Letterbox", "LetterboxGeometry", "Resize", "letterbox_geometry", "letterbox_into"]


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
    # At least one pixel: a very elongated image (20000 x 3 into 640) would round its short side to 0, which
    # cv2.resize refuses (Ultralytics fails there); one row or column is the nearest image that exists.
    unpad_w, unpad_h = max(1, round(w * r)), max(1, round(h * r))
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
    ``(round(w * r), round(h * r))`` by bilinear interpolation (at least 1 pixel each: a very elongated image
    keeps one row or column where Ultralytics' ``cv2.resize`` would be asked for 0), and the padding split
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
        InputError: (when called) the image is not uint8 ``(H, W, C)`` or ``(H, W)``, or has a channel count
            other than ``len(color)`` (when ``color`` has several values); see
            :func:`~amdinfer.preprocess.check_image`.

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

    def _check(self, data: Any) -> np.ndarray:
        channels = None if len(self.color) == 1 else (len(self.color),)  # one pad value per channel
        return check_image(data, "Letterbox", channels=channels)

    def _fill(self, image: np.ndarray) -> np.ndarray:
        fill = np.asarray(self.color)
        if fill.ndim and (image.ndim != 3 or image.shape[2] != fill.size):
            fill = fill.ravel()[0]  # Ultralytics pads multispectral and grey images with the first value
        return fill.astype(image.dtype)

    def _record(self, meta: dict[str, Any], image: np.ndarray, geo: LetterboxGeometry) -> None:
        meta["letterbox"] = {"ratio": geo.ratio, "pad": geo.pad}
        meta.setdefault("orig_shape", (int(image.shape[0]), int(image.shape[1])))
        meta["input_shape"] = (int(geo.shape[0]), int(geo.shape[1]))
        compose_affine(meta, *geo.affine)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        # The reference form (a resized copy, then a padded copy); write_into makes the same pixels in place.
        image = self._check(data)
        geo = letterbox_geometry(image.shape[:2], self)
        h, w = image.shape[:2]
        content = image if geo.resized == (h, w) else _resize(image, (geo.resized[1], geo.resized[0]), self.backend)
        out = _pad(content, geo.pads, self._fill(image), _use_opencv(self.backend))
        self._record(meta, image, geo)
        return out

    def canvas(self, data: Any) -> tuple[int, ...]:
        """The shape of the result for image ``data`` (checked as when called): ``(height, width[, C])``.

        Example:
            >>> Letterbox(64).canvas(np.zeros((48, 32, 3), np.uint8))
            (64, 64, 3)
        """
        image = self._check(data)
        return (*letterbox_geometry(image.shape[:2], self).shape, *image.shape[2:])

    def write_into(self, data: Any, out: np.ndarray, meta: dict[str, Any]) -> None:
        """Letterbox ``data`` into ``out`` (of shape :meth:`canvas`; e.g. a slot of a batch buffer) and record
        the metadata in ``meta``: the same pixels and metadata as calling the stage, without its copies
        (:func:`letterbox_into`).

        Raises:
            InputError: ``data`` is not an image the stage takes, or ``out`` is not a uint8 array of
                :meth:`canvas`'s shape.

        Example:
            >>> image, out, meta = np.full((48, 32, 3), 9, np.uint8), np.empty((64, 64, 3), np.uint8), {}
            >>> Letterbox(64).write_into(image, out, meta)
            >>> bool((out == Letterbox(64)(image).data).all()), meta["affine"]
            (True, (1.34375, 1.3333333333333333, 10.0, 0.0))
        """
        image = self._check(data)
        geo = letterbox_geometry(image.shape[:2], self)
        _check_out(out, (*geo.shape, *image.shape[2:]), "Letterbox")
        letterbox_into(image, out, geo, self._fill(image), backend=self.backend)
        self._record(meta, image, geo)


def letterbox_into(
    image: np.ndarray, out: np.ndarray, geometry: LetterboxGeometry, fill: Any, *, backend: str = "auto"
) -> None:
    """Write the letterboxed ``image`` into ``out`` (``geometry.shape`` plus the image's channels): the image
    resized straight into the interior (``cv2.resize(dst=...)`` when OpenCV is used, else the NumPy kernel
    and one copy), ``fill`` into the four border strips only. Bit-identical to :class:`Letterbox`'s result
    (the resize and padding it uses), without its two full-canvas copies.

    Example:
        >>> stage = Letterbox((4, 6))
        >>> image, out = np.full((2, 2), 7, np.uint8), np.empty((4, 6), np.uint8)
        >>> letterbox_into(image, out, letterbox_geometry((2, 2), stage), np.uint8(0))
        >>> out.tolist()
        [[0, 7, 7, 7, 7, 0], [0, 7, 7, 7, 7, 0], [0, 7, 7, 7, 7, 0], [0, 7, 7, 7, 7, 0]]
    """
    top, bottom, left, right = geometry.pads
    height, width = out.shape[:2]
    _resize_into(image, out[top : height - bottom, left : width - right], backend)
    fill = np.asarray(fill)
    value = fill.ravel()[0] if fill.size and np.all(fill == fill.ravel()[0]) else fill
    out[:top] = value
    out[height - bottom :] = value
    out[top : height - bottom, :left] = value
    out[top : height - bottom, width - right :] = value


def _resize_into(image: np.ndarray, dst: np.ndarray, backend: str) -> None:
    """:func:`_resize` of ``image`` to ``dst``'s size, written into ``dst`` (may be a row-strided view)."""
    h, w = dst.shape[:2]
    if image.shape[:2] == (h, w):
        dst[...] = image.reshape(dst.shape)
        return
    channels = 1 if image.ndim == 2 else image.shape[2]
    if _use_opencv(backend) and image.dtype in (np.uint8, np.float32) and channels <= 4:
        cv2 = _import("cv2")
        got = cv2.resize(image, (w, h), dst=dst, interpolation=cv2.INTER_LINEAR)
        if got.__array_interface__["data"][0] != dst.__array_interface__["data"][0]:
            dst[...] = np.asarray(got).reshape(dst.shape)  # the binding could not write in place: one copy
        return
    dst[...] = _resize(image, (w, h), backend).reshape(dst.shape)


def _check_out(out: Any, shape: tuple[int, ...], where: str) -> None:
    if not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != np.uint8:
        got = f"shape {out.shape} dtype {out.dtype}" if isinstance(out, np.ndarray) else type(out).__name__
        raise InputError(f"{where}: out: got {got}, expected a uint8 array of shape {shape}")


def _pad(content: np.ndarray, pads: tuple[int, int, int, int], fill: np.ndarray, opencv: bool) -> np.ndarray:
    """``content`` with ``(top, bottom, left, right)`` borders of ``fill`` (a scalar or one value per channel).

    ``cv2.copyMakeBorder`` when OpenCV is used (what Ultralytics calls); else only the borders are written, a
    uniform fill as a scalar: broadcasting a per-channel triple over a whole 1024x1024 canvas took ~10 ms.
    """
    top, bottom, left, right = pads
    h, w = content.shape[:2]
    shape = (h + top + bottom, w + left + right, *content.shape[2:])
    channels = content.shape[2] if content.ndim == 3 else 1
    if opencv and content.dtype in (np.uint8, np.float32) and channels <= 4:
        cv2 = _import("cv2")
        border = [float(v) for v in np.broadcast_to(fill, (channels,))] + [0.0] * (4 - channels)
        out = cv2.copyMakeBorder(content, top, bottom, left, right, cv2.BORDER_CONSTANT, value=border)
        return np.asarray(out).reshape(shape)
    out = np.empty(shape, dtype=content.dtype)
    value = fill.ravel()[0] if fill.size and np.all(fill == fill.ravel()[0]) else fill
    out[:top] = value
    out[top + h :] = value
    out[top : top + h, :left] = value
    out[top : top + h, left + w :] = value
    out[top : top + h, left : left + w] = content
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
        InputError: (when called) the image is not uint8 ``(H, W, C)`` or ``(H, W)``.

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
        image = check_image(data, "Resize")
        h, w = image.shape[:2]
        th, tw = self.target(h, w)
        out = image if (th, tw) == (h, w) else _resize(image, (tw, th), self.backend)
        _record_geometry(meta, image, out)
        compose_affine(meta, tw / w, th / h, 0.0, 0.0)
        return out

    def canvas(self, data: Any) -> tuple[int, ...]:
        """The shape of the result for image ``data`` (checked as when called): ``(height, width[, C])``.

        Example:
            >>> Resize(16).canvas(np.zeros((32, 64, 3), np.uint8))
            (16, 32, 3)
        """
        image = check_image(data, "Resize")
        return (*self.target(*image.shape[:2]), *image.shape[2:])

    def write_into(self, data: Any, out: np.ndarray, meta: dict[str, Any]) -> None:
        """Resize ``data`` straight into ``out`` (of shape :meth:`canvas`) and record the metadata in ``meta``:
        the same pixels and metadata as calling the stage.

        Raises:
            InputError: ``data`` is not an image the stage takes, or ``out`` is not a uint8 array of
                :meth:`canvas`'s shape.

        Example:
            >>> out, meta = np.empty((16, 32, 3), np.uint8), {}
            >>> Resize(16).write_into(np.full((32, 64, 3), 5, np.uint8), out, meta)
            >>> int(out.max()), meta["input_shape"]
            (5, (16, 32))
        """
        image = check_image(data, "Resize")
        h, w = image.shape[:2]
        th, tw = self.target(h, w)
        _check_out(out, (th, tw, *image.shape[2:]), "Resize")
        _resize_into(image, out, self.backend)
        _record_geometry(meta, image, out)
        compose_affine(meta, tw / w, th / h, 0.0, 0.0)


class CenterCrop(Preprocessor):
    """Crop the centre ``(height, width)`` (torchvision's offsets ``round((h - th) / 2)``).

    Records ``"orig_shape"``, ``"input_shape"`` and ``"affine"`` in the metadata.

    Args:
        size: crop size, an int for a square.

    Raises:
        OptionError: ``size`` is not a positive int or pair.
        InputError: (when called) the image is not uint8 ``(H, W, C)`` or ``(H, W)``, or smaller than ``size``.

    Example:
        >>> CenterCrop(2)(np.arange(16, dtype=np.uint8).reshape(4, 4)).data.tolist()
        [[5, 6], [9, 10]]
    """

    def __init__(self, size: int | tuple[int, int]) -> None:
        self.size = _hw("size", size)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = self._check(data)
        h, w = image.shape[:2]
        th, tw = self.size
        top, left = round((h - th) / 2.0), round((w - tw) / 2.0)
        out = image[top : top + th, left : left + tw]
        _record_geometry(meta, image, out)
        compose_affine(meta, 1.0, 1.0, -float(left), -float(top))
        return out

    def _check(self, data: Any) -> np.ndarray:
        image = check_image(data, "CenterCrop")
        if self.size[0] > image.shape[0] or self.size[1] > image.shape[1]:
            raise InputError(f"CenterCrop: got an image of size {image.shape[:2]}, expected at least {self.size}")
        return image

    def canvas(self, data: Any) -> tuple[int, ...]:
        """The shape of the result for image ``data`` (checked as when called): ``(height, width[, C])``.

        Example:
            >>> CenterCrop(2).canvas(np.zeros((4, 4, 3), np.uint8))
            (2, 2, 3)
        """
        return (*self.size, *self._check(data).shape[2:])

    def write_into(self, data: Any, out: np.ndarray, meta: dict[str, Any]) -> None:
        """Copy the crop of ``data`` into ``out`` (of shape :meth:`canvas`) and record the metadata in ``meta``.

        Example:
            >>> out = np.empty((2, 2), np.uint8)
            >>> CenterCrop(2).write_into(np.arange(16, dtype=np.uint8).reshape(4, 4), out, {})
            >>> out.tolist()
            [[5, 6], [9, 10]]
        """
        _check_out(out, self.canvas(data), "CenterCrop")
        out[...] = self.process(data, meta)


class PadWidth(Preprocessor):
    """Pad the width axis on the right with ``value``, after normalising (PP-OCR pads text lines with 0.0).

    The width comes from ``width`` or, when ``None``, from ``meta["pad_width"]`` (which
    :class:`~amdinfer.text.TextResize` writes). An item already wider is an error, never cut.

    Args:
        width: the padded width, or ``None`` to read it from the metadata.
        value: the fill value (in the array's dtype).
        axis: the width axis: ``-1`` for ``(C, H, W)`` (after ``HwcToChw``), ``1`` for ``(H, W, C)``.

    Raises:
        OptionError: bad arguments.
        InputError: (when called) no width in the metadata, or an item wider than the width.

    Example:
        >>> import numpy as np
        >>> PadWidth(5)(np.ones((1, 2, 3), np.float32)).data[0, 0].tolist()
        [1.0, 1.0, 1.0, 0.0, 0.0]
    """

    def __init__(self, width: int | None = None, value: float = 0.0, *, axis: int = -1) -> None:
        if width is not None and (not isinstance(width, (int, np.integer)) or isinstance(width, bool) or width < 1):
            raise OptionError(f"width: got {width!r}, expected an int >= 1 or None (read meta['pad_width'])")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise OptionError(f"value: got {value!r}, expected a number")
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise OptionError(f"axis: got {axis!r}, expected an int")
        self.width = None if width is None else int(width)
        self.value = float(value)
        self.axis = int(axis)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if not isinstance(data, np.ndarray) or data.ndim < 2:
            raise InputError(f"PadWidth: got {getattr(data, 'shape', type(data).__name__)}, expected an array")
        width = self.width
        if width is None:
            if "pad_width" not in meta:
                raise InputError(
                    "PadWidth: the item's metadata has no 'pad_width' (TextResize writes it); pass width= or put "
                    "TextResize before it"
                )
            width = int(meta["pad_width"])
        axis = self.axis % data.ndim
        have = data.shape[axis]
        if have > width:
            raise InputError(f"PadWidth: item is {have} wide on axis {axis}, expected at most {width}")
        if have == width:
            return data
        shape = list(data.shape)
        shape[axis] = width
        out = np.full(shape, self.value, dtype=data.dtype)
        index = [slice(None)] * data.ndim
        index[axis] = slice(0, have)
        out[tuple(index)] = data
        return out
