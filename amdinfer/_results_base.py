"""What the result classes share: the label and kept-image checks, and when Jupyter gets a picture.

Example:
    >>> _labels(["a", "b"], 2, "Detections")
    ['a', 'b']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _draw
from .errors import InputError

__all__ = ["_MAX_ROWS", "_image", "_labels", "_shows_picture"]

_MAX_ROWS = 10


def _labels(labels: Sequence[str] | None, n: int, what: str) -> list[str] | None:
    if labels is None:
        return None
    out = [str(v) for v in labels]
    if len(out) != n:
        raise InputError(f"{what}: got {len(out)} labels, expected {n} (one per entry)")
    return out


def _image(image: Any, shape: tuple[int, int] | None, what: str) -> np.ndarray | None:
    """The kept source image, checked: uint8 ``(H, W, 3)`` RGB or ``(H, W)`` grey, of ``shape`` when known."""
    if image is None:
        return None
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim not in (2, 3) or not image.size:
        got = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise InputError(f"{what}: image: got {got}, expected a uint8 (H, W, 3) RGB or (H, W) grey array")
    if image.ndim == 3 and image.shape[2] != 3:
        raise InputError(f"{what}: image: got shape {image.shape}, expected (H, W, 3) RGB or (H, W) grey")
    if shape is not None and tuple(image.shape[:2]) != shape:
        raise InputError(f"{what}: image: got size {image.shape[:2]}, expected {shape} (image_shape)")
    return image


def _shows_picture(image: np.ndarray | None) -> bool:
    """Whether Jupyter gets the picture (an image is kept and Pillow can write the labels) or the table."""
    return image is not None and _draw._have("PIL")
