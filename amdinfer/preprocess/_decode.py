"""Image decoding: :class:`LoadImage`."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from .._files import read_regular
from ..errors import BackendUnavailableError, InputError, OptionError
from ..stages import Preprocessor
from ._common import _have, _import

__all__ = ["LoadImage"]

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
        cv2 = _import("cv2")
        flag = cv2.IMREAD_GRAYSCALE if self.mode == "L" else cv2.IMREAD_COLOR
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), flag)
        if image is None:
            raise InputError(f"LoadImage: {what}: not a decodable image (OpenCV could not decode it)")
        return np.ascontiguousarray(image[..., ::-1]) if self.mode == "RGB" else image
