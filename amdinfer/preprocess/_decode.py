"""Image decoding: :class:`LoadImage`."""

from __future__ import annotations

import io
import os
import sys
from typing import Any

import numpy as np

from .._support._files import read_regular
from ..errors import BackendUnavailableError, InputError, OptionError
from ..stages import Preprocessor
from ._common import _have, _import, check_image
from ._image_header import DEFAULT_MAX_IMAGE_PIXELS, ImageHeader, check_image_pixels, check_max_image_pixels

__all__ = ["LoadImage"]

_DECODERS = ("auto", "pillow", "opencv", "nvjpeg")
_MODES = ("RGB", "BGR", "L")


class LoadImage(Preprocessor):
    """Decode an image from a path or encoded bytes to uint8; arrays that already are that image pass through.

    Both decoders apply the EXIF orientation of JPEG files and decode to the same pixels by one rule:

    * 8-bit images as they are; **16-bit** images (PNG, TIFF, PGM; grey, RGB, with alpha) as ``v >> 8``, the
      high byte (what OpenCV's ``IMREAD_COLOR`` gives for a 16-bit PNG);
    * an alpha channel is dropped (not composited), a palette is expanded, grey is repeated into RGB (``"L"``
      turns colour into luma, within 1 between the decoders);
    * 32-bit integer or floating-point images (float TIFF, EXR) are refused: there is no one right way to
      map them to 0..255.

    A Pillow image (``PIL.Image.Image``) is converted by the same rule, as its pixels are (its EXIF
    orientation is not applied: ``ImageOps.exif_transpose`` it first if you want that).

    **The pixel limit.** A path or encoded bytes are decoded only when their header declares at most
    ``max_pixels`` pixels (width x height), read from the header before any decoder runs
    (:func:`~amdinfer.preprocess.check_image_pixels`), the same for every decoder: a decompression bomb (a
    small file that declares a huge image) is an :class:`~amdinfer.errors.InputError` that says the declared
    size and the limit, not gigabytes of memory. A format whose size cannot be read from its header is refused
    too. A Pillow image larger than the limit is refused alike. The default is Pillow's
    ``PIL.Image.MAX_IMAGE_PIXELS`` (89,478,485: a 9459 x 9459 image). With ``backend="pillow"`` and a limit
    above Pillow's own, Pillow's check still applies (it warns above ``MAX_IMAGE_PIXELS``, refuses above twice
    that): raise ``PIL.Image.MAX_IMAGE_PIXELS`` too for images you trust.

    An array passes through unchanged only when it is what decoding would give: uint8 ``(H, W, 3)`` for
    ``"RGB"``/``"BGR"``, uint8 ``(H, W)`` for ``"L"`` (:func:`~amdinfer.preprocess.check_image`); anything else
    (uint16, float, RGBA ...) is an :class:`~amdinfer.errors.InputError` that says how to convert it.

    Args:
        mode: ``"RGB"`` (``(H, W, 3)`` uint8), ``"BGR"`` (OpenCV's order) or ``"L"`` (grey ``(H, W)``).
        backend: ``"pillow"``, ``"opencv"``, or ``"auto"`` (Pillow if installed, else OpenCV; but an 8-bit
            grey or colour JPEG in ``"RGB"``/``"BGR"`` with OpenCV when installed: the same pixels, 3-4x Pillow's
            rate). Neither is a dependency of amdinfer; install one (``pip install pillow`` or
            ``opencv-python-headless``).
            ``"nvjpeg"``: JPEG files decoded on the NVIDIA GPU (nvJPEG through ``torchvision.io.decode_jpeg``;
            needs torch and torchvision with CUDA) and copied back to the host; other formats are decoded on the
            host (OpenCV if installed, else Pillow). nvJPEG's pixels differ from libjpeg-turbo's at sharp
            colour edges (its chroma upsampling; on a document page: mean 0.11 levels, 0.1 % of values by more
            than 12).
        max_pixels: the most pixels (width x height) an image's header may declare, ``1 .. 2**30`` (OpenCV's
            own limit); default 89,478,485 (:data:`~amdinfer.preprocess.DEFAULT_MAX_IMAGE_PIXELS`).

    Raises:
        OptionError: unknown ``mode`` or ``backend``; ``max_pixels`` not an int in ``1 .. 2**30``.
        BackendUnavailableError: the named decoder (or, for ``"auto"``, either) is not installed; raised at
            construction for a named backend and on the first path/bytes for ``"auto"``.
        InputError: (when called) an unreadable path, undecodable bytes, a header that declares more than
            ``max_pixels`` pixels (or whose size cannot be read), a 32-bit or float image, or an array that is
            not the uint8 image ``mode`` describes.

    Example:
        >>> import numpy as np
        >>> LoadImage()(np.zeros((2, 2, 3), np.uint8)).data.shape  # arrays pass through
        (2, 2, 3)
        >>> import struct, zlib
        >>> def chunk(kind, data):
        ...     return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        >>> bomb = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0))
        >>> LoadImage(max_pixels=1_000_000)(bomb)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: LoadImage: 33 bytes: refused as a decompression bomb: its PNG header declares \
20000 x 20000 (width x height) = 400,000,000 pixels, above the limit of 1,000,000 pixels (...)
    """

    def __init__(self, mode: str = "RGB", *, backend: str = "auto", max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> None:
        if mode not in _MODES:
            raise OptionError(f"mode: got {mode!r}, expected one of {_MODES}")
        if backend not in _DECODERS:
            raise OptionError(f"backend: got {backend!r}, expected one of {_DECODERS}")
        self.mode = mode
        self.backend = backend
        self.max_pixels = check_max_image_pixels(max_pixels, "LoadImage: max_pixels")
        if backend != "auto":
            self._decoder()

    def _decoder(self) -> str:
        resolved = self.__dict__.get("_resolved")
        if resolved is None:  # once: each call would otherwise look the decoders up under the import lock
            resolved = self.__dict__["_resolved"] = self._resolve()
        return resolved

    def _resolve(self) -> str:
        if self.backend == "nvjpeg":
            from ._nvjpeg import check_nvjpeg

            check_nvjpeg()
            return "nvjpeg"
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
            image = check_image(data, "LoadImage", channels=() if self.mode == "L" else (3,), grey=self.mode == "L")
        else:
            if isinstance(data, (str, os.PathLike)):
                # Regular files only: a FIFO would block the pipeline, /dev/zero would fill memory.
                raw = read_regular(data, "LoadImage: cannot read image", error=InputError)
                what = repr(os.fspath(data))
                meta.setdefault("path", os.fspath(data))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                what = f"{len(data)} bytes"
                raw = bytes(data)
            elif _is_pil(data):
                self._check_pil_size(data)
                image = self._from_pil(data, f"a Pillow {data.mode!r} image")
                meta.setdefault("orig_shape", (int(image.shape[0]), int(image.shape[1])))
                return image
            else:
                raise InputError(
                    f"LoadImage: got {type(data).__name__}, expected a path, encoded bytes, a Pillow image or a numpy "
                    "image"
                )
            image = self._decode(raw, what)
        meta.setdefault("orig_shape", (int(image.shape[0]), int(image.shape[1])))
        return image

    def _auto_jpeg(self) -> str:
        """``"auto"``'s decoder for a plain JPEG: OpenCV when installed (Pillow's pixels, 3-4x its rate)."""
        resolved = self.__dict__.get("_resolved_jpeg")
        if resolved is None:
            resolved = self.__dict__["_resolved_jpeg"] = "opencv" if _have("cv2") else "pillow"
        return resolved

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_resolved", "_resolved_jpeg"):  # resolved again where it is unpickled (another process may
            state.pop(key, None)  # lack a decoder)
        return state

    def _check_pil_size(self, pil: Any) -> None:
        """A Pillow image (perhaps opened, not yet loaded) within ``max_pixels``."""
        width, height = pil.size
        if width * height > self.max_pixels:
            raise InputError(
                f"LoadImage: a Pillow {pil.mode!r} image of {width} x {height} (width x height) = "
                f"{width * height:,} pixels: refused as a decompression bomb, above the limit of {self.max_pixels:,} "
                "pixels (LoadImage(max_pixels=...))"
            )

    def _decode(self, raw: bytes, what: str) -> np.ndarray:
        decoder = self._decoder()
        try:  # from the header, before any decoder allocates what it declares
            header = check_image_pixels(raw, self.max_pixels)
        except InputError as exc:
            raise InputError(f"LoadImage: {what}: {exc}") from None
        if decoder == "pillow" and self.backend == "auto" and self.mode != "L" and _plain_jpeg(header):
            decoder = self._auto_jpeg()
        if decoder == "nvjpeg":
            from ._nvjpeg import decode_jpeg_on_gpu, is_jpeg

            if is_jpeg(raw):
                try:
                    return decode_jpeg_on_gpu(raw, self.mode)
                except RuntimeError as exc:  # torchvision's error for a corrupt JPEG
                    raise InputError(f"LoadImage: {what}: not a decodable JPEG (nvJPEG: {exc})") from exc
            decoder = "opencv" if _have("cv2") else "pillow"  # other formats: on the host (documented)
        if decoder == "pillow":
            from PIL import Image, ImageOps, UnidentifiedImageError

            try:
                with Image.open(io.BytesIO(raw)) as pil:
                    # Apply the EXIF orientation, as OpenCV's decoder does, so both backends agree.
                    return self._from_pil(ImageOps.exif_transpose(pil), what)
            except (UnidentifiedImageError, OSError) as exc:
                raise InputError(f"LoadImage: {what}: not a decodable image ({exc})") from exc
            except Image.DecompressionBombError as exc:
                # only with max_pixels above Pillow's own limit (the header check came first)
                raise InputError(
                    f"LoadImage: {what}: refused as a decompression bomb by Pillow ({exc}); raise "
                    "PIL.Image.MAX_IMAGE_PIXELS too for images you trust"
                ) from exc
        cv2 = sys.modules.get("cv2") or _import("cv2")
        # ANYDEPTH: 16-bit stays 16-bit, and _to_uint8 applies the one rule (OpenCV's own conversion rounds for
        # some formats, e.g. 16-bit TIFF, where Pillow takes the high byte).
        flag = cv2.IMREAD_GRAYSCALE if self.mode == "L" else cv2.IMREAD_COLOR
        # A JPEG in RGB: libjpeg-turbo writes RGB itself (IMREAD_COLOR_RGB, OpenCV >= 4.10; the same pixels in the
        # other order), so no channel swap follows. Other formats swap below (OpenCV 5.0's IMREAD_COLOR_RGB gives
        # zeros for a 16-bit TIFF).
        in_rgb = self.mode == "RGB" and header.format == "JPEG" and hasattr(cv2, "IMREAD_COLOR_RGB")
        if in_rgb:
            flag = cv2.IMREAD_COLOR_RGB
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), flag | cv2.IMREAD_ANYDEPTH)
        if image is None:
            raise InputError(f"LoadImage: {what}: not a decodable image (OpenCV could not decode it)")
        image = _to_uint8(image, what, f"OpenCV {image.dtype}")
        if self.mode == "RGB" and image.ndim == 3 and not in_rgb:
            # In place, SIMD, without the GIL: a NumPy copy of image[..., ::-1] cost as much as the decode. (It
            # runs on OpenCV's own pool: see amdinfer.preprocess.opencv_threads.)
            return cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=image)
        return image

    def _from_pil(self, pil: Any, what: str) -> np.ndarray:
        """A Pillow image's pixels in ``mode`` by the one rule (no EXIF rotation here: see :meth:`process`)."""
        if pil.mode.startswith("I") or pil.mode == "F":
            # 16-bit grey ("I;16", or "I" holding 0..65535 for PGM); Pillow's convert() would clip it to 255.
            # Multi-channel 16-bit images already come as their high bytes.
            grey = _to_uint8(np.asarray(pil), what, f"Pillow mode {pil.mode!r}")
            image = grey if self.mode == "L" else np.repeat(grey[..., None], 3, axis=2)
        else:
            image = np.asarray(pil.convert("L" if self.mode == "L" else "RGB"), dtype=np.uint8).copy()
        return image[..., ::-1].copy() if self.mode == "BGR" else image


def _plain_jpeg(header: ImageHeader) -> bool:
    """An 8-bit grey or colour JPEG: OpenCV and Pillow decode it to the same pixels (one libjpeg-turbo IDCT and
    upsampling; both apply its EXIF orientation). CMYK and 12-bit JPEGs keep ``"auto"``'s Pillow."""
    return header.format == "JPEG" and header.sample_bits == 8 and header.components in (1, 3)


def _is_pil(data: Any) -> bool:
    """Whether ``data`` is a Pillow image (without importing Pillow when the caller never did)."""
    image = sys.modules.get("PIL.Image")
    return image is not None and isinstance(data, image.Image)


def _to_uint8(image: np.ndarray, what: str, source: str) -> np.ndarray:
    """Decoded pixels as uint8 by the one rule: 8-bit as is, 16-bit ``v >> 8``; other depths refused.

    Pillow gives 16-bit PGM as mode ``"I"`` (int32 holding 0..65535): accepted when its values fit 16 bits.
    """
    if image.dtype == np.uint8:
        return image
    if image.dtype == np.uint16 or (
        image.dtype.kind in "iu" and image.size and image.min() >= 0 and image.max() <= 0xFFFF
    ):
        return (image >> 8).astype(np.uint8)
    raise InputError(
        f"LoadImage: {what}: a {image.dtype} image ({source}); amdinfer decodes 8- and 16-bit images only "
        "(16-bit as v >> 8); convert it to 8-bit yourself and pass the uint8 array"
    )
