"""OpenCV for the OCR stages: imported on first use, with the install hint when it is missing."""

from __future__ import annotations

from typing import Any

from .._support._install import pip_extra
from ..errors import BackendUnavailableError

__all__ = ["cv2"]


def cv2(who: str) -> Any:
    """The ``cv2`` module, or a :class:`~amdinfer.errors.BackendUnavailableError` naming ``who`` needs it.

    Example:
        >>> cv2("DbPostprocess").__name__
        'cv2'
    """
    try:
        import cv2 as module
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{who}: needs OpenCV (contours, minimum-area rectangles, perspective warps): {pip_extra('vision')}",
            backend="opencv",
            cause=str(exc),
        ) from None
    return module
