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

__all__ = ["opencv_available"]


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
    if _use_opencv(backend) and image.dtype in (np.uint8, np.float32) and image.ndim in (2, 3) and image.shape[-1] <= 4:
        cv2 = _import("cv2")
        return np.asarray(cv2.resize(image, size_wh, interpolation=cv2.INTER_LINEAR)).reshape(
            size_wh[1], size_wh[0], *image.shape[2:]
        )
    from ..reference import resize_bilinear

    return resize_bilinear(image, size_wh)
