"""What the preprocessing stages share: parameter and image checks, metadata, the bilinear resize."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InputError, OptionError
from ..stages import Preprocessor

__all__ = ["check_image", "opencv_available"]


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
    """Check that ``data`` is an ``(H, W)`` or ``(H, W, C)`` array of any dtype (for the pixel stages that also
    take floats: :class:`HwcToChw`, :class:`BgrToRgb`)."""
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


def _dtype_hint(dtype: np.dtype[Any]) -> str:
    """How to turn an image of ``dtype`` into uint8 pixels yourself (amdinfer never casts silently)."""
    if dtype == np.uint16:
        return "for a 16-bit image use (image >> 8).astype(np.uint8) (how LoadImage decodes 16-bit files)"
    if dtype.kind == "f":
        return (
            "for floats in [0, 1] use (image * 255).round().astype(np.uint8); "
            "scale and normalize after the geometric stages (Normalize)"
        )
    if dtype.kind == "b":
        return "for a mask use image.astype(np.uint8) * 255"
    if dtype.kind in "iu":
        return "map the values to 0..255 yourself, e.g. np.clip(image, 0, 255).astype(np.uint8)"
    return "decode it to pixels first (LoadImage)"


def _layout(channels: tuple[int, ...] | None, grey: bool) -> str:
    """The accepted layouts in words, e.g. ``"(H, W, 3) or (H, W)"``."""
    parts = ["(H, W, C)"] if channels is None else [f"(H, W, {c})" for c in channels]
    if grey:
        parts.append("(H, W)")
    return " or ".join(parts)


def _channel_hint(got: int, channels: tuple[int, ...], grey: bool) -> str:
    """How to get from ``got`` channels (0: a 2-D grey image) to one of ``channels``."""
    if 3 in channels and got == 4:
        return "; drop the alpha channel with image[..., :3] (LoadImage decodes files with alpha to RGB)"
    if 3 in channels and got in (0, 1):
        return "; repeat a grey image as np.repeat(image.reshape(*image.shape[:2], 1), 3, axis=2)"
    if not channels and grey and got >= 3:
        return "; decode it as grey (LoadImage('L')) or use mode 'RGB'"
    return ""


def check_image(data: Any, where: str, *, channels: tuple[int, ...] | None = None, grey: bool = True) -> np.ndarray:
    r"""The one rule for images entering the image stages (``LoadImage``'s pass-through arrays, the geometric
    stages) and a fused graph: a non-empty **uint8** numpy array ``(H, W, C)`` with ``C`` in ``channels``
    (any when ``None``) or, with ``grey``, ``(H, W)``.

    Anything else is an :class:`~amdinfer.errors.InputError` naming ``where``, what was received, what is
    expected and how to convert it: amdinfer never rescales pixels silently (a 16-bit or float image would
    otherwise give confident wrong answers).

    Example:
        >>> check_image(np.zeros((2, 2, 3), np.uint8), "image").shape
        (2, 2, 3)
        >>> try:
        ...     check_image(np.zeros((2, 2, 3), np.uint16), "image 0")
        ... except InputError as exc:
        ...     print(*str(exc).split("; "), sep="\n")
        image 0: got dtype uint16 (an image of shape (2, 2, 3)), expected uint8 (H, W, C) or (H, W)
        for a 16-bit image use (image >> 8).astype(np.uint8) (how LoadImage decodes 16-bit files)
    """
    expected = f"uint8 {_layout(channels, grey)}"
    if not isinstance(data, np.ndarray):
        raise InputError(
            f"{where}: got {type(data).__name__}, expected a numpy image {expected}; "
            "put LoadImage() first to decode paths or bytes"
        )
    if data.ndim not in (2, 3) or data.size == 0:
        raise InputError(f"{where}: got shape {data.shape}, expected a non-empty image {expected}")
    if data.dtype != np.uint8:
        raise InputError(
            f"{where}: got dtype {data.dtype} (an image of shape {data.shape}), expected {expected}; "
            f"{_dtype_hint(data.dtype)}"
        )
    got = 0 if data.ndim == 2 else int(data.shape[2])
    if (got == 0 and not grey) or (got and channels is not None and got not in channels):
        what = "a 2-D (grey) image" if got == 0 else f"an image with {got} channels"
        raise InputError(
            f"{where}: got {what} of shape {data.shape}, expected {expected}{_channel_hint(got, channels or (), grey)}"
        )
    return data


def _record_geometry(meta: dict[str, Any], before: np.ndarray, after: np.ndarray) -> None:
    meta.setdefault("orig_shape", (int(before.shape[0]), int(before.shape[1])))
    meta["input_shape"] = (int(after.shape[0]), int(after.shape[1]))


_RESIZE_BACKENDS = ("auto", "opencv", "numpy")


#: First imports of optional modules happen under this lock: OpenCV's ``cv2`` bootstraps itself by replacing
#: its own ``sys.modules`` entry, and a second thread (``Pipeline.map``'s workers) that looks it up or imports it
#: meanwhile saw ``ValueError: cv2.__spec__ is None`` or a half-initialised module.
_IMPORT_LOCK = threading.Lock()


def _have(module: str) -> bool:
    """Whether ``module`` can be imported (safe from several threads)."""
    with _IMPORT_LOCK:
        if module in sys.modules:
            return sys.modules[module] is not None
        return importlib.util.find_spec(module) is not None


def _import(module: str) -> Any:
    """``import module``, serialised with other first imports (see ``_IMPORT_LOCK``; ~1 us once imported)."""
    with _IMPORT_LOCK:
        return importlib.import_module(module)


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
    channels = 1 if image.ndim == 2 else image.shape[2]
    if _use_opencv(backend) and image.dtype in (np.uint8, np.float32) and image.ndim in (2, 3) and channels <= 4:
        cv2 = _import("cv2")
        return np.asarray(cv2.resize(image, size_wh, interpolation=cv2.INTER_LINEAR)).reshape(
            size_wh[1], size_wh[0], *image.shape[2:]
        )
    from ..reference import resize_bilinear

    return resize_bilinear(image, size_wh)
