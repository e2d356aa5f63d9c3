"""What the result classes share: the label and kept-image checks, when Jupyter gets a picture, and the rule
for odd values: rows with a NaN or infinite number are left out of pictures (one logged warning counts them), and
JSON is strict (``null`` for a non-finite number, never ``NaN``/``Infinity``).

Example:
    >>> _labels(["a", "b"], 2, "Detections")
    ['a', 'b']
    >>> _json_list(np.array([1.5, np.nan, np.inf], np.float32))
    [1.5, None, None]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from . import _draw

__all__ = ["_MAX_ROWS", "_drawable", "_dumps", "_image", "_json_list", "_labels", "_shows_picture"]

_MAX_ROWS = 10

log = logging.getLogger("amdinfer.results")


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


def _json_list(values: Any) -> list[Any]:
    """``values.tolist()`` with ``None`` for each NaN or infinite number: what strict JSON can carry (``null``).

    ``np.asarray(..., dtype=np.float32)`` reads ``None`` back as NaN, so
    ``Result(**json.loads(r.to_json(orient="columns")))`` keeps a non-finite entry non-finite (an infinity comes
    back as NaN).
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "fc":
        return arr.tolist()
    bad = ~np.isfinite(arr)
    if not bad.any():
        return arr.tolist()
    out = arr.astype(object)
    out[bad] = None
    return out.tolist()


def _dumps(data: Any, kwargs: dict[str, Any]) -> str:
    """``json.dumps(data, **kwargs)``, strict: a NaN or infinity left in ``data`` is a ``ValueError``, never
    the ``NaN``/``Infinity`` tokens that strict JSON parsers refuse (``to_dict()`` has already made them ``None``)."""
    kwargs["allow_nan"] = False
    return json.dumps(data, **kwargs)


def _drawable(what: str, rows_name: str, *columns: np.ndarray) -> np.ndarray:
    """Which rows a picture draws: ``bool (k,)``, true where every number of the row in every column (arrays
    with ``k`` rows: coordinates, scores) is finite. The others are left out, with one warning that counts them
    and names the first rows; a picture never fails on a NaN or infinite box, score or polygon.

    Example:
        >>> _drawable("Detections.plot", "boxes", np.array([[0, 0, 1, 1], [0, np.nan, 1, 1]]), np.ones(2)).tolist()
        [True, False]
        >>> _drawable("Detections.plot", "boxes", np.zeros((0, 4)), np.zeros(0)).shape  # no rows: nothing to check
        (0,)
    """
    keep = np.ones(len(columns[0]), bool)
    if not len(keep):  # reshape(0, -1) is ambiguous to NumPy: an empty result draws no row
        return keep
    for col in columns:
        keep &= np.isfinite(np.asarray(col, np.float64).reshape(len(keep), -1)).all(axis=1)
    if not keep.all():
        rows = np.flatnonzero(~keep).tolist()
        shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
        log.warning(
            "%s: %d of %d %s not drawn: NaN or infinite coordinates or scores (row%s %s)",
            what,
            len(rows),
            len(keep),
            rows_name,
            "s" * (len(rows) != 1),
            shown,
        )
    return keep
