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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InputError

__all__ = [
    "STRATEGIES",
    "DeferredPolygons",
    "Masks",
    "Window",
    "mask_polygons",
    "rle_decode",
    "rle_encode",
    "window_polygons",
]

#: How :func:`mask_polygons` makes one polygon of a mask with several parts (Ultralytics' ``masks2segments``).
STRATEGIES = ("all", "largest")

#: One mask as a window of its plane: ``(top, left, mask)``, a ``bool (h, w)`` array placed at ``top, left`` of a
#: plane that is ``False`` elsewhere (:meth:`Masks.from_windows`; ``None`` in a list: a mask with nothing set).
Window = tuple[int, int, np.ndarray]


def _cv2(what: str) -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{what} finds mask contours with OpenCV: pip install opencv-python-headless", backend="opencv"
        ) from exc
    return cv2


def _closest(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":  # contour pixels: exact in int64, the float64 form's argmin
        dx = a[:, 0, None].astype(np.int64) - b[None, :, 0]
        dy = a[:, 1, None].astype(np.int64) - b[None, :, 1]
        d = dx * dx + dy * dy
    else:
        d = ((a[:, None, :].astype(np.float64) - b[None, :, :]) ** 2).sum(-1)
    k = int(np.argmin(d))
    return k // d.shape[1], k % d.shape[1]


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
        p, k = parts[i], idx[0] % len(parts[i])
        parts[i] = np.concatenate((p[k:], p[:k], p[k : k + 1]))  # rolled to start at idx[0], closed
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
        out.append(_polygon(cv2, window, x0, y0, strategy))
    return out


def _polygon(cv2: Any, window: np.ndarray, x0: int, y0: int, strategy: str) -> np.ndarray:
    contours = cv2.findContours(window, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE, offset=(x0, y0))[0]
    parts = [c.reshape(-1, 2) for c in contours]
    if strategy == "largest":
        poly = parts[int(np.argmax([len(p) for p in parts]))]
    else:
        poly = _join(parts) if len(parts) > 1 else parts[0]
    return poly.astype(np.float32)


def window_polygons(
    windows: Sequence[Window | None], shape: tuple[int, int], strategy: str = "all"
) -> list[np.ndarray]:
    """:func:`mask_polygons` of masks given as :data:`Window` s (``(top, left, mask)``, ``None``: nothing set) in
    planes of ``shape``: the same polygons, without the planes.

    Raises:
        OptionError: an unknown strategy.
        BackendUnavailableError: OpenCV is missing.

    Example:
        >>> window_polygons([(1, 2, np.ones((2, 3), bool)), None], (4, 6))[0].tolist()
        [[2.0, 1.0], [2.0, 2.0], [4.0, 2.0], [4.0, 1.0]]
    """
    from ..errors import OptionError

    if strategy not in STRATEGIES:
        raise OptionError(f"strategy: got {strategy!r}, expected one of {STRATEGIES}")
    cv2 = _cv2("Masks.xy")
    h, w = shape
    out = []
    for item in windows:
        rows = cols = np.zeros(0, np.int64)
        if item is not None:
            top, left, m = item
            rows, cols = np.flatnonzero(m.any(1)) + top, np.flatnonzero(m.any(0)) + left
        if item is None or not len(rows):
            out.append(np.zeros((0, 2), np.float32))
            continue
        y0, x0 = max(int(rows[0]) - 1, 0), max(int(cols[0]) - 1, 0)  # as mask_polygons cuts the plane
        window = _plane_part(item, (y0, min(int(rows[-1]) + 2, h)), (x0, min(int(cols[-1]) + 2, w)))
        out.append(_polygon(cv2, window.view(np.uint8), x0, y0, strategy))
    return out


def _plane_part(item: Window, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """``rows x cols`` (contiguous ``bool``) of the plane holding the window ``item``."""
    top, left, m = item
    out = np.zeros((rows[1] - rows[0], cols[1] - cols[0]), bool)
    a0, a1 = max(rows[0], top), min(rows[1], top + m.shape[0])
    b0, b1 = max(cols[0], left), min(cols[1], left + m.shape[1])
    if a0 < a1 and b0 < b1:
        out[a0 - rows[0] : a1 - rows[0], b0 - cols[0] : b1 - cols[0]] = m[a0 - top : a1 - top, b0 - left : b1 - left]
    return out


def rle_encode(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed run-length encoding of one ``(H, W)`` mask: ``{"size": [H, W], "counts": [...]}``, runs
    over the pixels in column-major order starting with a run of zeros (what ``pycocotools.mask.frPyObjects``
    reads).

    Example:
        >>> rle_encode(np.array([[0, 1], [1, 1]], bool))
        {'size': [2, 2], 'counts': [1, 3]}
    """
    m = np.asarray(mask, bool).reshape(mask.shape[0], mask.shape[1])
    rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
    if not len(rows):
        return _rle_window(None, m.shape)
    r0, c0 = int(rows[0]), int(cols[0])
    return _rle_window((r0, c0, m[r0 : int(rows[-1]) + 1, c0 : int(cols[-1]) + 1]), m.shape)


def _rle_window(item: Window | None, shape: tuple[int, int]) -> dict[str, Any]:
    """:func:`rle_encode` of the plane of ``shape`` that holds the window ``item``, from the window alone: the
    changes in column-major order are those inside its columns, each column padded with one zero below (a real
    zero when the window leaves a row out; else the columns are one run of the flat order)."""
    h, w = shape
    size = [int(h), int(w)]
    if item is None or not item[2].size:
        return {"size": size, "counts": [h * w]}
    top, left, m = item
    if m.shape[0] == h:  # whole columns: a stretch of the flat order
        flat = np.concatenate([[False], m.T.ravel(), [False]])
        at = left * h + np.flatnonzero(flat[1:] != flat[:-1])
    else:
        padded = np.zeros((m.shape[1], m.shape[0] + 1), bool)
        padded[:, :-1] = m.T
        flat = np.concatenate([[False], padded.ravel()])
        col, row = np.divmod(np.flatnonzero(flat[1:] != flat[:-1]), m.shape[0] + 1)
        at = (left + col) * h + top + row
    bounds = np.concatenate([[0], at[at < h * w], [h * w]])
    return {"size": size, "counts": np.diff(bounds).tolist()}


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


class DeferredPolygons:
    """Polygons made when first asked for: ``fn(items)`` gives one polygon per item; a selection of the masks selects
    the items, so nothing is found before :attr:`Masks.xy` is read (picklable when ``fn`` is).

    Example:
        >>> d = DeferredPolygons(lambda items: [np.full((1, 2), v, np.float32) for v in items], [1, 2, 3])
        >>> [p.tolist() for p in d.select([2, 0])()]
        [[[3.0, 3.0]], [[1.0, 1.0]]]
    """

    __slots__ = ("fn", "items")

    def __init__(self, fn: Callable[[list[Any]], Sequence[Any]], items: Sequence[Any]) -> None:
        self.fn, self.items = fn, list(items)

    def __call__(self) -> Sequence[Any]:
        return self.fn(self.items)

    def select(self, index: Sequence[int]) -> DeferredPolygons:
        """The same polygons of the items at ``index``."""
        return DeferredPolygons(self.fn, [self.items[int(i)] for i in index])


def _checked_windows(windows: Sequence[Any], shape: tuple[int, int]) -> list[Window | None]:
    out: list[Window | None] = []
    for i, item in enumerate(windows):
        if item is None:
            out.append(None)
            continue
        top, left, m = int(item[0]), int(item[1]), np.asarray(item[2])
        if m.ndim != 2 or top < 0 or left < 0 or top + m.shape[0] > shape[0] or left + m.shape[1] > shape[1]:
            raise InputError(
                f"Masks.from_windows: window {i}: got a {m.shape} mask at ({top}, {left}), expected a 2-D mask "
                f"inside the {shape} plane"
            )
        out.append((top, left, m if m.dtype == bool else m > 0))
    return out


class Masks:
    """Per-instance boolean masks in pixels of one image, one per detection (``Detections.masks``).

    Args:
        data: ``bool (k, H, W)`` masks (anything ``> 0`` is set).
        polygons: one ``float32 (n, 2)`` polygon per mask in the same pixels; a callable giving them (called when
            :attr:`xy` is first read; a :class:`DeferredPolygons` stays unfound through :meth:`select`); or
            ``None``: found from the masks when first asked for (:func:`mask_polygons`). :func:`amdinfer.yolo`
            gives those Ultralytics' ``Masks.xy`` gives: contours of the masks at the model's input size, mapped
            to the image.
        strategy: how :attr:`xy` joins a mask's parts when it finds them (``"all"`` or ``"largest"``).

    Attributes:
        data: the ``bool (k, H, W)`` masks (made from the windows when first read, for :meth:`from_windows`).
        shape: ``(H, W)``.

    Raises:
        InputError: ``data`` is not 3-D, or the polygons are not one ``(n, 2)`` array per mask.

    Example:
        >>> m = Masks(np.ones((2, 3, 4), bool))
        >>> len(m), m.shape, m.areas.tolist()
        (2, (3, 4), [12, 12])
    """

    __slots__ = ("_data", "_pending", "_polygons", "_windows", "shape", "strategy")

    def __init__(self, data: Any, polygons: Any = None, *, strategy: str = "all") -> None:
        arr = np.asarray(data)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3:
            raise InputError(f"Masks: data: got shape {arr.shape}, expected (k, H, W) masks")
        self._data: np.ndarray | None = arr if arr.dtype == bool else arr > 0
        self._windows: list[Window | None] | None = None
        self.shape = (int(arr.shape[1]), int(arr.shape[2]))
        self.strategy = strategy
        self._set_polygons(polygons)

    @classmethod
    def from_windows(
        cls, windows: Sequence[Any], shape: tuple[int, int], polygons: Any = None, *, strategy: str = "all"
    ) -> Masks:
        """Masks given as one :data:`Window` ``(top, left, mask)`` per instance (``None``: nothing set) in planes
        of ``shape``: :attr:`areas`, :meth:`rle`, :attr:`xy` and :meth:`select` work on the windows, and
        :attr:`data` is made when first read (what :class:`~amdinfer.tasks.SegmentMasks` gives: no ``k`` planes
        of the image's size until someone reads them).

        Raises:
            InputError: a window is not 2-D or does not fit in ``shape``.

        Example:
            >>> m = Masks.from_windows([(1, 2, np.ones((2, 3), bool)), None], (4, 6))
            >>> m.areas.tolist(), m.rle()[0]["counts"], m.data.sum(axis=(1, 2)).tolist()
            ([6, 0], [9, 2, 2, 2, 2, 2, 5], [6, 0])
        """
        shape = (int(shape[0]), int(shape[1]))
        self = cls.__new__(cls)
        self._data, self._windows = None, _checked_windows(windows, shape)
        self.shape, self.strategy = shape, strategy
        self._set_polygons(polygons)
        return self

    def _set_polygons(self, polygons: Any) -> None:
        self._polygons: list[np.ndarray] | None = None
        self._pending: Any = None
        if callable(polygons):
            self._pending = polygons
        elif polygons is not None:
            self._polygons = self._checked(polygons)

    def _checked(self, polygons: Sequence[Any]) -> list[np.ndarray]:
        polys = [np.asarray(p, np.float32).reshape(-1, 2) for p in polygons]
        if len(polys) != len(self):
            raise InputError(f"Masks: got {len(polys)} polygons for {len(self)} masks, expected one per mask")
        return polys

    @property
    def data(self) -> np.ndarray:
        """The ``bool (k, H, W)`` masks."""
        if self._data is None:
            windows, self._windows = self._windows or [], None  # from now on the planes are the masks
            self._data = np.zeros((len(windows), *self.shape), bool)
            for i, item in enumerate(windows):
                if item is not None:
                    top, left, m = item
                    self._data[i, top : top + m.shape[0], left : left + m.shape[1]] = m
        return self._data

    def __len__(self) -> int:
        return len(self._windows) if self._data is None else int(self._data.shape[0])  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Masks({len(self)} of {self.shape[1]}x{self.shape[0]})"

    @property
    def areas(self) -> np.ndarray:
        """``int64 (k,)`` pixels set in each mask."""
        if self._windows is not None:
            return np.array([0 if w is None else np.count_nonzero(w[2]) for w in self._windows], np.int64)
        return np.count_nonzero(self.data.reshape(len(self), -1), axis=1).astype(np.int64)

    @property
    def xy(self) -> list[np.ndarray]:
        """One ``float32 (n, 2)`` polygon per mask in pixels (Ultralytics' ``Masks.xy``)."""
        if self._polygons is None:
            if self._pending is not None:
                self._polygons, self._pending = self._checked(self._pending()), None
            elif self._windows is not None:
                self._polygons = window_polygons(self._windows, self.shape, self.strategy)
            else:
                self._polygons = mask_polygons(self.data, self.strategy)
        return self._polygons

    @property
    def xyn(self) -> list[np.ndarray]:
        """:attr:`xy` divided by the width (x) and height (y) (Ultralytics' ``Masks.xyn``)."""
        h, w = self.shape
        return [(p / np.array([w, h], np.float32)).astype(np.float32) for p in self.xy]

    def select(self, index: Any) -> Masks:
        """The masks at ``index`` (int indices, or a bool mask), with their polygons when known (or deferred)."""
        index = np.asarray(index)
        idx = np.flatnonzero(index) if index.dtype == bool else index.reshape(-1).astype(np.int64)
        polys: Any = None
        if self._polygons is not None:
            polys = [self._polygons[int(i)] for i in idx]
        elif self._pending is not None:
            polys = self._pending.select(idx) if hasattr(self._pending, "select") else [self.xy[int(i)] for i in idx]
        if self._windows is not None:
            return Masks.from_windows([self._windows[int(i)] for i in idx], self.shape, polys, strategy=self.strategy)
        return Masks(self.data[idx].reshape(len(idx), *self.shape), polys, strategy=self.strategy)

    def rle(self) -> list[dict[str, Any]]:
        """One :func:`rle_encode` dict per mask."""
        if self._windows is not None:
            return [_rle_window(w, self.shape) for w in self._windows]
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
