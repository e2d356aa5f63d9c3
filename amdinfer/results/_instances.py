"""What :class:`~amdinfer.results.Detections` carries besides boxes for segmentation and pose models: its
``masks`` (:class:`~amdinfer.results.Masks`), ``keypoints`` (:class:`~amdinfer.results.Keypoints`) and, between a
segmentation decode and the mask stage, the ``coefficients`` of each box; their checks, selection, JSON, tensors
and pictures.

JSON (``to_dict()``): ``masks`` as COCO run-length encodings (exact; the constructor reads them back),
``polygons`` (``Masks.xy`` as ``[[x, y], ...]``), ``keypoints`` as ``(k, K, 3)`` nested lists. Rows
(``summary()``): Ultralytics' ``segments`` ``{"x": [...], "y": [...]}`` and ``keypoints`` ``{"x", "y",
"visible"}``. Tensors (the server): ``masks`` ``BYTES (k,)``, one RLE's JSON text per box, and ``keypoints``
``float32 (k, K, 3)``.

Example:
    >>> import numpy as np
    >>> m, kp, c = instances(1, np.ones((1, 2, 2), bool), [[[1, 1, 0.5]]], None, "Detections")
    >>> len(m), kp.data.shape, c
    (1, (1, 1, 3), None)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import InputError
from ._base import _json_list
from ._keypoints import Keypoints
from ._masks import Masks
from ._tensors import _bytes, _strings

__all__ = [
    "instance_dict",
    "instance_rows",
    "instance_tensors",
    "instances",
    "instances_from_tensors",
    "select_instances",
]


def _masks(value: Any, polygons: Any, k: int, what: str) -> Masks | None:
    if value is None:
        if polygons is not None:
            raise InputError(f"{what}: polygons: got polygons without masks, expected masks= as well")
        return None
    if isinstance(value, Masks):
        masks = value if polygons is None else Masks(value.data, polygons, strategy=value.strategy)
    elif isinstance(value, (list, tuple)) and value and isinstance(value[0], (dict, str, bytes)):
        masks = Masks(Masks.from_rle(value).data, polygons)
    else:
        arr = np.asarray(value)
        if arr.ndim != 3:
            raise InputError(f"{what}: masks: got shape {arr.shape}, expected (k, H, W) masks, Masks or RLE dicts")
        masks = Masks(arr, polygons)
    if len(masks) != k:
        raise InputError(f"{what}: got {len(masks)} masks for {k} boxes, expected one per box")
    return masks


def instances(
    k: int,
    masks: Any,
    keypoints: Any,
    coefficients: Any,
    what: str,
    *,
    polygons: Any = None,
    image_shape: tuple[int, int] | None = None,
) -> tuple[Masks | None, Keypoints | None, np.ndarray | None]:
    """The checked ``masks``, ``keypoints`` and ``coefficients`` of a result of ``k`` boxes.

    Raises:
        InputError: a count other than ``k``, or a shape these fields do not have.
    """
    out_masks = _masks(masks, polygons, k, what)
    if out_masks is not None and image_shape is not None and len(out_masks) and out_masks.shape != image_shape:
        raise InputError(f"{what}: masks: got size {out_masks.shape}, expected image_shape {image_shape}")
    kp = None
    if keypoints is not None:
        kp = keypoints if isinstance(keypoints, Keypoints) else Keypoints(keypoints, image_shape)
        if kp.image_shape is None and image_shape is not None:
            kp = Keypoints(kp.data, image_shape)
        if len(kp) != k:
            raise InputError(f"{what}: got keypoints for {len(kp)} boxes, expected {k} (one (K, 3) per box)")
    coef = None
    if coefficients is not None:
        coef = np.asarray(coefficients, np.float32)
        if coef.ndim != 2 or coef.shape[0] != k:
            raise InputError(f"{what}: coefficients: got shape {coef.shape}, expected ({k}, num_masks)")
    return out_masks, kp, coef


def select_instances(det: Any, index: np.ndarray) -> dict[str, Any]:
    """The constructor's ``masks``, ``keypoints`` and ``coefficients`` of ``det``'s rows at ``index`` (ints)."""
    return {
        "masks": None if det.masks is None else det.masks.select(index),
        "keypoints": None if det.keypoints is None else det.keypoints.select(index),
        "coefficients": None if det.coefficients is None else det.coefficients[index],
    }


def instance_dict(det: Any) -> dict[str, Any]:
    """The JSON fields of ``det``'s masks and keypoints (none without them)."""
    out: dict[str, Any] = {}
    if det.masks is not None:
        out["masks"] = det.masks.rle()
        out["polygons"] = [_json_list(p) for p in det.masks.xy]
    if det.keypoints is not None:
        out["keypoints"] = _json_list(det.keypoints.data)
    return out


def instance_rows(det: Any, rows: list[dict[str, Any]], normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """``rows`` (one per box) with Ultralytics' ``segments`` and ``keypoints`` added, normalized when asked."""
    if det.masks is None and det.keypoints is None:
        return rows
    h, w = det.image_shape if normalize and det.image_shape is not None else (1, 1)

    def num(values: np.ndarray) -> list[Any]:
        return _json_list(np.round(values.astype(np.float64), decimals))

    for i, row in enumerate(rows):
        if det.masks is not None:
            p = det.masks.xy[i]
            row["segments"] = {"x": num(p[:, 0] / w), "y": num(p[:, 1] / h)}
        if det.keypoints is not None:
            k = det.keypoints.data[i]
            row["keypoints"] = {"x": num(k[:, 0] / w), "y": num(k[:, 1] / h)}
            if k.shape[1] == 3:
                row["keypoints"]["visible"] = num(k[:, 2])
    return rows


def instance_tensors(det: Any) -> dict[str, np.ndarray]:
    """``masks`` (``BYTES (k,)`` RLE JSON texts) and ``keypoints`` (``float32 (k, K, 3)``) when ``det`` has them."""
    out: dict[str, np.ndarray] = {}
    if det.masks is not None:
        out["masks"] = _bytes([json.dumps(r, separators=(",", ":")) for r in det.masks.rle()])
    if det.keypoints is not None:
        out["keypoints"] = det.keypoints.data
    return out


def instances_from_tensors(t: dict[str, np.ndarray], image_shape: tuple[int, int] | None) -> dict[str, Any]:
    """The constructor's ``masks`` and ``keypoints`` from :func:`instance_tensors`' tensors."""
    out: dict[str, Any] = {}
    if "masks" in t:
        rles = _strings(t["masks"], "Detections: masks")
        out["masks"] = Masks.from_rle(rles, image_shape if image_shape is not None and not rles else None)
    if "keypoints" in t:
        out["keypoints"] = Keypoints(t["keypoints"], image_shape)
    return out
