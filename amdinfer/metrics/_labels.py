"""The labels of the YOLO tasks beyond boxes: instance masks and keypoints, in Ultralytics' txt form and in COCO json.

* Segment (Ultralytics' YOLO-seg labels): ``class x1 y1 x2 y2 ...`` per object, a normalized polygon; its box is
  the polygon's bounding box and its mask the polygon rasterized in the image's pixels by ``pycocotools``
  (``frPyObjects``, as COCO rasterizes its own polygons). A ``class cx cy w h`` line is the box's rectangle.
  COCO json: ``segmentation`` as polygons, uncompressed or compressed RLE (what ``COCO.annToRLE`` reads).
* Pose (Ultralytics' pose labels): ``class cx cy w h px1 py1 [v1] ...`` normalized, ``kpt_shape`` ``(K, D)``
  values after the box; with ``D = 2`` a keypoint is visible unless a coordinate is negative (Ultralytics'
  ``verify_image_label``). COCO json: ``keypoints`` ``[x, y, v] * K`` and ``num_keypoints``.

Each true mask is held as a compressed COCO RLE (``pycocotools.mask``), each image's keypoints as ``float64
(k, K, 3)`` ``x, y, v`` in pixels (``v > 0``: labelled), and the area COCO scales OKS by: the json's ``area``,
else the box's area times 0.53 (Ultralytics' pose val).

Example:
    >>> import numpy as np
    >>> rle = polygon_rle([[0, 0, 4, 0, 4, 2, 0, 2]], (3, 6))
    >>> rle["size"], mask_area(rle)
    ([3, 6], 8)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InputError

__all__ = ["mask_area", "polygon_rle"]

#: Ultralytics' pose val: a true object's area for OKS is its box's area times this (COCO's mean ratio).
BOX_AREA_RATIO = 0.53


def _mask_utils() -> Any:
    try:
        from pycocotools import mask
    except ImportError:
        from .._support._install import pip_extra

        raise BackendUnavailableError(
            f"instance masks are rasterized and compared by pycocotools, which is not installed: {pip_extra('val')}"
        ) from None
    return mask


def polygon_rle(polygons: Any, size: tuple[int, int]) -> dict[str, Any]:
    """One compressed COCO RLE of the polygons (each a flat ``x1, y1, x2, y2, ...`` list in pixels) of one object
    in an image of ``size`` ``(height, width)``: ``pycocotools.mask.frPyObjects`` and ``merge``.

    Raises:
        BackendUnavailableError: ``pycocotools`` is not installed.

    Example:
        >>> polygon_rle([[0, 0, 2, 0, 2, 2, 0, 2]], (4, 4))["size"]
        [4, 4]
    """
    mask = _mask_utils()
    h, w = int(size[0]), int(size[1])
    polys = [[float(v) for v in p] for p in polygons if len(p) >= 6]
    if not polys:
        return dict(mask.encode(np.zeros((h, w, 1), np.uint8, order="F"))[0])
    return dict(mask.merge(mask.frPyObjects(polys, h, w)))


def mask_area(rle: dict[str, Any]) -> int:
    """The pixels set in a compressed COCO RLE (``pycocotools.mask.area``).

    Example:
        >>> mask_area(polygon_rle([[0, 0, 2, 0, 2, 2, 0, 2]], (4, 4)))
        4
    """
    return int(_mask_utils().area(rle))


def masks_rle(data: np.ndarray) -> list[dict[str, Any]]:
    """Compressed COCO RLEs of ``bool (k, H, W)`` masks (``pycocotools.mask.encode``)."""
    if not len(data):
        return []
    stacked = np.asfortranarray(np.asarray(data, bool).transpose(1, 2, 0).astype(np.uint8))
    return [dict(r) for r in _mask_utils().encode(stacked)]


def coco_segmentation(segm: Any, size: tuple[int, int], where: str) -> dict[str, Any]:
    """A json ``segmentation`` as one compressed RLE, read as ``COCO.annToRLE`` reads it."""
    mask = _mask_utils()
    h, w = int(size[0]), int(size[1])
    if isinstance(segm, list):
        return polygon_rle(segm, (h, w))
    if isinstance(segm, dict) and isinstance(segm.get("counts"), list):
        return dict(mask.frPyObjects(segm, h, w))
    if isinstance(segm, dict) and isinstance(segm.get("counts"), (str, bytes)):
        counts = segm["counts"]
        return {
            "size": [int(v) for v in segm["size"]],
            "counts": counts.encode() if isinstance(counts, str) else counts,
        }
    raise InputError(f"{where}: segmentation: got {str(segm)[:60]!r}, expected polygons or an RLE dict")


def parse_line(line: str, path: Path, n: int, nc: int, expect: str) -> list[float]:
    """The numbers of one label line, its class checked."""
    try:
        values = [float(v) for v in line.split()]
    except ValueError:
        values = []
    if len(values) < 5 or values[0] != int(values[0]):
        raise InputError(f"labels: {str(path)!r} line {n}: got {line.strip()[:60]!r}, expected {expect}")
    c = int(values[0])
    if not 0 <= c < nc:
        raise InputError(f"labels: {str(path)!r} line {n}: class {c} is outside names (0..{nc - 1})")
    return values


def yolo_segment_labels(path: Path, size: tuple[int, int], nc: int) -> tuple[np.ndarray, np.ndarray, tuple[Any, ...]]:
    """Boxes, classes and mask RLEs of one YOLO-seg label file (none when it is missing)."""
    h, w = size
    boxes, classes, masks = [], [], []
    if path.is_file():
        expect = "'class x1 y1 x2 y2 ...' (a normalized polygon, Ultralytics' segment labels) or 'class cx cy w h'"
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            values = parse_line(line, path, n, nc, expect)
            if len(values) == 5:
                cx, cy, bw, bh = values[1:]
                xs, ys = [cx - bw / 2, cx + bw / 2, cx + bw / 2, cx - bw / 2], [cy - bh / 2] * 2 + [cy + bh / 2] * 2
            elif len(values) % 2 == 1 and len(values) >= 7:
                xs, ys = values[1::2], values[2::2]
            else:
                raise InputError(
                    f"labels: {str(path)!r} line {n}: got {len(values) - 1} coordinates, expected {expect}"
                )
            px, py = np.asarray(xs) * w, np.asarray(ys) * h
            boxes.append([px.min(), py.min(), px.max(), py.max()])
            classes.append(int(values[0]))
            masks.append(polygon_rle([np.column_stack([px, py]).ravel().tolist()], size))
    return np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(classes, np.int64), tuple(masks)


def yolo_pose_labels(
    path: Path, size: tuple[int, int], nc: int, kpt_shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Boxes, classes, keypoints ``(k, K, 3)`` and OKS areas of one YOLO pose label file."""
    h, w = size
    k, d = kpt_shape
    boxes, classes, points = [], [], []
    if path.is_file():
        expect = f"'class cx cy w h' and {k} keypoints of {d} values (kpt_shape [{k}, {d}], normalized)"
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            values = parse_line(line, path, n, nc, expect)
            if len(values) != 5 + k * d:
                raise InputError(f"labels: {str(path)!r} line {n}: got {len(values)} numbers, expected {5 + k * d}: "
                                 f"{expect}")  # fmt: skip
            cx, cy, bw, bh = values[1:5]
            boxes.append([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h])
            classes.append(int(values[0]))
            kp = np.asarray(values[5:], np.float64).reshape(k, d)
            if d == 2:
                v = np.where((kp[:, 0] < 0) | (kp[:, 1] < 0), 0.0, 2.0)
            else:
                v = kp[:, 2]
            points.append(np.column_stack([kp[:, 0] * w, kp[:, 1] * h, v]))
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    areas = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) * BOX_AREA_RATIO
    return b, np.asarray(classes, np.int64), np.asarray(points, np.float64).reshape(-1, k, 3), areas


def coco_keypoints(anns: list[dict[str, Any]], k: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Keypoints ``(n, K, 3)`` and OKS areas of COCO json annotations (``area``, else the box's area x 0.53)."""
    points, areas = [], []
    for a in anns:
        kp = np.asarray(a.get("keypoints", []), np.float64)
        if kp.size != 3 * k:
            raise InputError(f"{where}: annotation {a.get('id')}: got {kp.size} keypoint values, expected 3 * {k}")
        points.append(kp.reshape(k, 3))
        _, _, bw, bh = (float(v) for v in a["bbox"])
        areas.append(float(a["area"]) if "area" in a else bw * bh * BOX_AREA_RATIO)
    return np.asarray(points, np.float64).reshape(-1, k, 3), np.asarray(areas, np.float64)
