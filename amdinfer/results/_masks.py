"""Instance masks of a segmentation model (:class:`Masks`): per-instance boolean masks in image pixels, their
polygons (Ultralytics' ``Masks.xy``/``xyn``) and COCO run-length encodings (what the server answers with).

Polygons are the outer contours of each mask (OpenCV ``findContours``, ``RETR_EXTERNAL``,
``CHAIN_APPROX_SIMPLE``), as Ultralytics' ``ops.masks2segments`` takes them: ``strategy="all"`` (its default since
8.4) joins an instance's separate parts into one polygon at their closest points, ``"largest"`` keeps the contour
with the most points. OpenCV is needed for polygons only (imported when asked).

Example:
    >>> import numpy as np
    >>> data = np.zeros((1, 4, 6), bool); data[0, 1:3, 2:5] = True
    >>> m = Masks(data)
    >>> m.xy[0].tolist()
    [[2.0, 1.0], [2.0, 2.0], [4.0, 2.0], [4.0, 1.0]]
    >>> m.rle()[0]
    {'size': [4, 6], 'counts': [9, 2, 2, 2, 2, 2, 5]}
    >>> bool((Masks.from_rle(m.rle(), (4, 6)).data == data).all())
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InputError

__all__ = ["STRATEGIES", "Masks", "mask_polygons", "rle_decode", "rle_encode"]

#: How :func:`mask_polygons` makes one polygon of a mask with several parts (Ultralytics' ``masks2segments``).
STRATEGIES = ("all", "largest")


def _cv2(what: str) -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{what} finds mask contours with OpenCV: pip install opencv-python-headless", backend="opencv"
        ) from exc
    return cv2


def _closest(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    d = ((a[:, None, :].astype(np.float64) - b[None, :, :]) ** 2).sum(-1)
    i, j = np.unravel_index(int(np.argmin(d)), d.shape)
    return int(i), int(j)


def _join(parts: list[np.ndarray]) -> np.ndarray:
    """One polygon through all ``parts``: each part is entered and left at its points closest to its neighbours in
    the list (a thin bridge between them), walked forward through the list and back (Ultralytics'
    ``merge_multi_segment``)."""
    n = len(parts)
    ends: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        a, b = _closest(parts[i - 1], parts[i])
        ends[i - 1].append(a)
        ends[i].append(b)
    walked: list[np.ndarray] = []
    for i in range(n):
        idx = ends[i]
        if len(idx) == 2 and idx[0] > idx[1]:
            idx = [len(parts[i]) - 1 - x for x in idx]
            parts[i] = parts[i][::-1]
        parts[i] = np.roll(parts[i], -idx[0], axis=0)
        parts[i] = np.concatenate([parts[i], parts[i][:1]])
        walked.append(parts[i] if i in (0, n - 1) else parts[i][: idx[1] - idx[0] + 1])
    for i in range(n - 2, 0, -1):
        walked.append(parts[i][abs(ends[i][1] - ends[i][0]) :])
    return np.concatenate(walked)


def mask_polygons(masks: np.ndarray, strategy: str = "all") -> list[np.ndarray]:
    """One ``float32 (n, 2)`` polygon ``x, y`` per mask of ``masks`` (``(k, H, W)``), in the masks' pixels; a
    mask with nothing set gives ``(0, 2)``. Ultralytics' ``ops.masks2segments(masks, strategy)``.

    Raises:
        OptionError: an unknown strategy.
        BackendUnavailableError: OpenCV is missing.

    Example:
        >>> m = np.zeros((1, 5, 9), np.uint8); m[0, 1:3, 1:3] = 1; m[0, 1:4, 5:8] = 1
        >>> mask_polygons(m, "largest")[0].tolist()  # the part whose contour has the most points
        [[5.0, 1.0], [5.0, 3.0], [7.0, 3.0], [7.0, 1.0]]
        >>> len(mask_polygons(m)[0])  # both parts, joined
        10
    """
    from ..errors import OptionError

    if strategy not in STRATEGIES:
        raise OptionError(f"strategy: got {strategy!r}, expected one of {STRATEGIES}")
    cv2 = _cv2("Masks.xy")
    out = []
    for m in np.asarray(masks):
        rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
        if not len(rows):
            out.append(np.zeros((0, 2), np.float32))
            continue
        # the set pixels' window with a margin of zeros (or the image edge): the same contours, found faster
        y0, x0 = max(int(rows[0]) - 1, 0), max(int(cols[0]) - 1, 0)
        window = np.ascontiguousarray(m[y0 : int(rows[-1]) + 2, x0 : int(cols[-1]) + 2], dtype=np.uint8)
        contours = cv2.findContours(window, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE, offset=(x0, y0))[0]
        parts = [c.reshape(-1, 2) for c in contours]
        if strategy == "largest":
            poly = parts[int(np.argmax([len(p) for p in parts]))]
        else:
            poly = _join(parts) if len(parts) > 1 else parts[0]
        out.append(poly.astype(np.float32))
    return out


def rle_encode(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed run-length encoding of one ``(H, W)`` mask: ``{"size": [H, W], "counts": [...]}``, runs
    over the pixels in column-major order starting with a run of zeros (what ``pycocotools.mask.frPyObjects``
    reads).

    Example:
        >>> rle_encode(np.array([[0, 1], [1, 1]], bool))
        {'size': [2, 2], 'counts': [1, 3]}
    """
    flat = np.asarray(mask, bool).reshape(mask.shape[0], mask.shape[1]).ravel(order="F")
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": [int(c) for c in counts]}


def rle_decode(rle: Any, what: str = "rle_decode") -> np.ndarray:
    """The ``bool (H, W)`` mask of a :func:`rle_encode` dict (or its JSON text).

    Raises:
        InputError: not such a dict, or counts that do not add up to ``H * W``.

    Example:
        >>> rle_decode({"size": [2, 2], "counts": [1, 3]}).astype(int).tolist()
        [[0, 1], [1, 1]]
    """
    if isinstance(rle, (bytes, str)):
        try:
            rle = json.loads(rle)
        except ValueError as exc:
            raise InputError(f"{what}: got text that is not JSON ({exc})") from None
    ok = isinstance(rle, dict) and isinstance(rle.get("size"), list) and isinstance(rle.get("counts"), list)
    if not ok:
        raise InputError(f"{what}: got {type(rle).__name__}, expected {{'size': [H, W], 'counts': [int, ...]}}")
    h, w = (int(v) for v in rle["size"])
    counts = np.asarray(rle["counts"], np.int64)
    if counts.sum() != h * w or (counts < 0).any():
        raise InputError(f"{what}: counts add up to {int(counts.sum())}, expected H * W = {h * w}")
    values = np.arange(len(counts)) % 2 == 1
    return np.repeat(values, counts).reshape(w, h).T.copy()


class Masks:
    """Per-instance boolean masks in pixels of one image, one per detection (``Detections.masks``).

    Args:
        data: ``bool (k, H, W)`` masks (anything ``> 0`` is set).
        polygons: one ``float32 (n, 2)`` polygon per mask in the same pixels, or ``None``: found from ``data``
            when first asked for (:func:`mask_polygons`). :func:`amdinfer.yolo` gives those Ultralytics'
            ``Masks.xy`` gives: contours of the masks at the model's input size, mapped to the image.
        strategy: how :attr:`xy` joins a mask's parts when it finds them (``"all"`` or ``"largest"``).

    Attributes:
        data: the ``bool (k, H, W)`` masks.
        shape: ``(H, W)``.

    Raises:
        InputError: ``data`` is not 3-D, or the polygons are not one ``(n, 2)`` array per mask.

    Example:
        >>> m = Masks(np.ones((2, 3, 4), bool))
        >>> len(m), m.shape, m.areas.tolist()
        (2, (3, 4), [12, 12])
    """

    __slots__ = ("_polygons", "data", "shape", "strategy")

    def __init__(self, data: Any, polygons: Sequence[Any] | None = None, *, strategy: str = "all") -> None:
        arr = np.asarray(data)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3:
            raise InputError(f"Masks: data: got shape {arr.shape}, expected (k, H, W) masks")
        self.data = arr if arr.dtype == bool else arr > 0
        self.shape = (int(arr.shape[1]), int(arr.shape[2]))
        self.strategy = strategy
        self._polygons: list[np.ndarray] | None = None
        if polygons is not None:
            polys = [np.asarray(p, np.float32).reshape(-1, 2) for p in polygons]
            if len(polys) != len(arr):
                raise InputError(f"Masks: got {len(polys)} polygons for {len(arr)} masks, expected one per mask")
            self._polygons = polys

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __repr__(self) -> str:
        return f"Masks({len(self)} of {self.shape[1]}x{self.shape[0]})"

    @property
    def areas(self) -> np.ndarray:
        """``int64 (k,)`` pixels set in each mask."""
        return self.data.sum(axis=(1, 2)).astype(np.int64)

    @property
    def xy(self) -> list[np.ndarray]:
        """One ``float32 (n, 2)`` polygon per mask in pixels (Ultralytics' ``Masks.xy``)."""
        if self._polygons is None:
            self._polygons = mask_polygons(self.data, self.strategy)
        return self._polygons

    @property
    def xyn(self) -> list[np.ndarray]:
        """:attr:`xy` divided by the width (x) and height (y) (Ultralytics' ``Masks.xyn``)."""
        h, w = self.shape
        return [(p / np.array([w, h], np.float32)).astype(np.float32) for p in self.xy]

    def select(self, index: np.ndarray) -> Masks:
        """The masks at ``index`` (int indices), with their polygons when known."""
        polys = None if self._polygons is None else [self._polygons[int(i)] for i in index]
        return Masks(self.data[index], polys, strategy=self.strategy)

    def rle(self) -> list[dict[str, Any]]:
        """One :func:`rle_encode` dict per mask."""
        return [rle_encode(m) for m in self.data]

    @classmethod
    def from_rle(cls, rles: Sequence[Any], shape: tuple[int, int] | None = None) -> Masks:
        """Masks from :meth:`rle` dicts (or their JSON texts), all of one size (``shape`` when given; it is the
        size of an empty stack).

        Raises:
            InputError: an encoding is broken or of another size.
        """
        data = [rle_decode(r, f"Masks.from_rle: item {i}") for i, r in enumerate(rles)]
        want = tuple(shape) if shape is not None else (data[0].shape if data else (0, 0))
        for i, m in enumerate(data):
            if m.shape != want:
                raise InputError(f"Masks.from_rle: item {i}: got size {m.shape}, expected {want}")
        return cls(np.stack(data) if data else np.zeros((0, *want), bool))
