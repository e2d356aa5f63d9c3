"""Text detection stages: :class:`PageFit` (RapidOCR's page rules), :class:`DetResize` (PP-OCR's resize),
:class:`DetPad` (a few canvas sizes), :class:`DbPostprocess` (DBNet) and :class:`ReadingOrder`.

Example:
    >>> import numpy as np
    >>> from amdinfer.text import DetResize
    >>> DetResize(64)(np.zeros((40, 100, 3), np.uint8)).data.shape
    (64, 160, 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..preprocess import check_image
from ..results import TextLines
from ..stages import Postprocessor, Preprocessor, compose_affine
from ._clipper import offset_round
from ._cv import cv2

__all__ = [
    "PAGE",
    "PAGE_MAP",
    "DbPostprocess",
    "DetPad",
    "DetResize",
    "PageFit",
    "ReadingOrder",
    "db_boxes",
    "page_to_original",
    "reading_order",
]

#: Metadata keys :class:`PageFit` writes when it changes a page: the page the detector and the line crops see,
#: and ``(sx, sy, top)``, which takes a point ``(x, y)`` of it to ``(x * sx, (y - top) * sy)`` of the original.
PAGE, PAGE_MAP = "ocr_page", "ocr_page_map"


def _number(name: str, value: Any, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not np.isfinite(value):
        raise OptionError(f"{name}: got {value!r}, expected a number")
    if value < low or (high is not None and value > high):
        raise OptionError(f"{name}: got {value!r}, expected a value in [{low}, {high if high is not None else 'inf'}]")
    return float(value)


def _scaled(height: int, width: int, ratio: float) -> tuple[int, int]:
    """RapidOCR's ``reduce_max_side``/``increase_min_side`` arithmetic: truncate, then round to a multiple of 32."""
    return int(round(int(height * ratio) / 32) * 32), int(round(int(width * ratio) / 32) * 32)


class PageFit(Preprocessor):
    """RapidOCR's page rules before the detector, so that :func:`~amdinfer.text.ocr` sees extreme pages as it does.

    1. A page whose longer side is over ``max_side`` is scaled so that side becomes ``max_side``; then one whose
       shorter side is under ``min_side`` so that side reaches it. Each time both sides are rounded to multiples
       of 32 (``cv2.resize``, bilinear), so a thin page's aspect ratio changes (8x200 becomes 32x736).
    2. A page at most ``min_height`` high, or wider than ``strip_ratio`` to 1, gets black rows above and below,
       ``int((max(int(w / strip_ratio), min_height) * 2 - h) / 2)`` each: a strip becomes part of a page about
       ``strip_ratio / 2`` to 1. Without them :class:`DetResize` (shorter side to 736) would blow a 60x1200
       strip up to 736x14720, and DBNet splits such a line into words or finds nothing.

    A page that neither rule changes passes as it is and nothing is recorded. Otherwise the page (with its bands)
    goes to ``meta["ocr_page"]`` and ``meta["ocr_page_map"]`` says how it maps back (:func:`page_to_original`);
    :class:`DbPostprocess` then gives quads in that page, :class:`~amdinfer.text.QuadCrop` cuts the lines
    from it, and :class:`~amdinfer.text.AttachText` maps the quads back to the original, clipped to
    ``[0, width]`` and ``[0, height]``, as RapidOCR does. Needs OpenCV when it scales.

    Args:
        min_side: the shorter side's minimum (RapidOCR's ``min_side_len``), or ``None``.
        max_side: the longer side's maximum (``max_side_len``), or ``None``.
        strip_ratio: the width to height ratio above which a page is padded (``width_height_ratio``), or
            ``None`` (only ``min_height`` pads).
        min_height: pages at most this high are padded (``min_height``).

    Example:
        >>> PageFit().fit(60, 1200), PageFit().fit(8, 200), PageFit().fit(400, 640)
        ((60, 1200, 120), (32, 736, 76), (400, 640, 0))
    """

    def __init__(
        self,
        min_side: int | None = 30,
        max_side: int | None = 2000,
        *,
        strip_ratio: float | None = 8.0,
        min_height: int = 30,
    ) -> None:
        for name, v in (("min_side", min_side), ("max_side", max_side)):
            if v is not None and (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1):
                raise OptionError(f"{name}: got {v!r}, expected None or an int >= 1")
        if not isinstance(min_height, (int, np.integer)) or isinstance(min_height, bool) or min_height < 0:
            raise OptionError(f"min_height: got {min_height!r}, expected an int >= 0")
        self.min_side = None if min_side is None else int(min_side)
        self.max_side = None if max_side is None else int(max_side)
        self.strip_ratio = None if strip_ratio is None else _number("strip_ratio", strip_ratio, 1e-9)
        self.min_height = int(min_height)

    def fit(self, height: int, width: int) -> tuple[int, int, int]:
        """``(height, width, top)``: the page's size after scaling and the rows of black added above and below it
        (the page the detector sees is ``height + 2 * top`` high); sides of 0 mean it cannot be fitted.

        Example:
            >>> PageFit().fit(100, 4000)  # 50x2000, rounded to 64x1984, then 216 rows above and below
            (64, 1984, 216)
        """
        h, w = height, width
        if self.max_side is not None and max(h, w) > self.max_side:
            h, w = _scaled(h, w, float(self.max_side) / (h if h > w else w))
        if self.min_side is not None and h > 0 and w > 0 and min(h, w) < self.min_side:
            h, w = _scaled(h, w, float(self.min_side) / (h if h < w else w))
        if h <= 0 or w <= 0:
            return h, w, 0
        r = self.strip_ratio
        if h <= self.min_height or (r is not None and w / h > r):
            new_h = max(int(w / r) if r is not None else 0, self.min_height) * 2
            return h, w, int(abs(new_h - h) / 2)
        return h, w, 0

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = check_image(data, "PageFit")
        h, w = image.shape[:2]
        fh, fw, top = self.fit(h, w)
        if fh <= 0 or fw <= 0:
            raise InputError(f"PageFit: a page of size {(h, w)} scales to {(fh, fw)}, expected both sides >= 1")
        if (fh, fw, top) == (h, w, 0):
            return image
        page = image if (fh, fw) == (h, w) else np.asarray(cv2("PageFit").resize(image, (fw, fh)))
        if top:
            page = np.pad(page, ((top, top), (0, 0)) + ((0, 0),) * (page.ndim - 2))
        meta.setdefault("orig_shape", (h, w))
        meta["input_shape"] = (int(page.shape[0]), int(page.shape[1]))
        compose_affine(meta, fw / w, fh / h, 0.0, float(top))
        meta[PAGE] = page
        meta[PAGE_MAP] = (w / fw, h / fh, top)
        return page


def page_to_original(
    quads: np.ndarray, meta: dict[str, Any], shape: tuple[int, int] | None
) -> tuple[np.ndarray, tuple[int, int] | None]:
    """Quads found in a :class:`PageFit` page, in the original image: ``(quads, orig_shape)``; ``(quads, shape)``
    as given when the page was not changed (no ``meta["ocr_page_map"]``).

    RapidOCR's ``map_boxes_to_original``: the band's rows subtracted, each axis scaled back (float32), then
    clipped to ``[0, width]`` and ``[0, height]``.

    Example:
        >>> q = np.array([[[10, 130], [90, 130], [90, 150], [10, 150]]], np.float32)
        >>> out, shape = page_to_original(q, {"ocr_page_map": (0.5, 0.25, 120), "orig_shape": (8, 200)}, None)
        >>> out[0].tolist(), shape
        ([[5.0, 2.5], [45.0, 2.5], [45.0, 7.5], [5.0, 7.5]], (8, 200))
    """
    if PAGE_MAP not in meta:
        return quads, shape
    sx, sy, top = meta[PAGE_MAP]
    oh, ow = (int(v) for v in meta["orig_shape"])
    q = np.array(quads, np.float32).reshape(-1, 4, 2)
    q[:, :, 1] -= top
    q[:, :, 0] *= sx
    q[:, :, 1] *= sy
    q = np.where(q < 0, 0, q)
    q[..., 0] = np.where(q[..., 0] > ow, ow, q[..., 0])
    q[..., 1] = np.where(q[..., 1] > oh, oh, q[..., 1])
    return q, (oh, ow)


class DetResize(Preprocessor):
    """PP-OCR's detector resize: scale so the shorter (``"min"``) or longer (``"max"``) side reaches ``limit``,
    then round each side to a multiple of ``multiple`` (``cv2.resize``, bilinear).

    With ``limit_type="min"`` an image whose shorter side already is ``>= limit`` keeps its scale (only the
    rounding applies); with ``"max"`` one whose longer side is ``<= limit`` does. Records ``"orig_shape"``,
    ``"input_shape"`` and ``"affine"``. Needs OpenCV.

    Args:
        limit: the side length (PP-OCR: 736 with ``"min"``, RapidOCR's default; 960 with ``"max"``).
        limit_type: ``"min"`` or ``"max"``.
        multiple: both sides become multiples of it (DBNet: 32).

    Example:
        >>> DetResize(736).target(400, 640)
        (736, 1184)
    """

    def __init__(self, limit: int = 736, limit_type: str = "min", *, multiple: int = 32) -> None:
        for name, v in (("limit", limit), ("multiple", multiple)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise OptionError(f"{name}: got {v!r}, expected an int >= 1")
        if limit_type not in ("min", "max"):
            raise OptionError(f"limit_type: got {limit_type!r}, expected 'min' or 'max'")
        self.limit = int(limit)
        self.limit_type = limit_type
        self.multiple = int(multiple)

    def target(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` the model sees for an image of this size (PP-OCR's arithmetic).

        Example:
            >>> DetResize(736, "max").target(400, 640)
            (384, 640)
        """
        h, w = height, width
        if self.limit_type == "max":
            ratio = float(self.limit) / max(h, w) if max(h, w) > self.limit else 1.0
        else:
            ratio = float(self.limit) / min(h, w) if min(h, w) < self.limit else 1.0
        m = self.multiple
        return int(round(int(h * ratio) / m) * m), int(round(int(w * ratio) / m) * m)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        image = check_image(data, "DetResize")
        h, w = image.shape[:2]
        th, tw = self.target(h, w)
        if th <= 0 or tw <= 0:
            raise InputError(f"DetResize: image of size {(h, w)} rounds to {(th, tw)}, expected both sides >= 1")
        out = np.asarray(cv2("DetResize").resize(image, (tw, th)))
        meta.setdefault("orig_shape", (h, w))
        meta["input_shape"] = (th, tw)
        compose_affine(meta, tw / w, th / h, 0.0, 0.0)
        return out


class DetPad(Preprocessor):
    """Pad a normalised ``(C, H, W)`` page on the bottom and right with ``value`` up to multiples of ``multiple``.

    Pages then come in a few canvas sizes instead of one per page, so that a GPU engine meets few input shapes
    (:func:`~amdinfer.text.ocr`'s ``shape_buckets``; ONNX Runtime's CUDA EP rebuilds its convolutions' state on
    every new shape). ``value=0.0`` is PP-OCR's padding after normalising. :class:`DbPostprocess` reads only
    the page's own part of the map (``meta["input_shape"]``, from :class:`DetResize`). ``multiple=1`` pads nothing.

    Args:
        multiple: both sides are padded up to a multiple of it (>= 1).
        value: the fill value.

    Example:
        >>> s = DetPad(64)(np.ones((3, 40, 100), np.float32))
        >>> s.data.shape, float(s.data[0, 39, 99]), float(s.data[0, 40, 100])
        ((3, 64, 128), 1.0, 0.0)
    """

    def __init__(self, multiple: int = 256, value: float = 0.0) -> None:
        if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
            raise OptionError(f"multiple: got {multiple!r}, expected an int >= 1")
        self.multiple = multiple
        self.value = _number("value", value, -np.inf)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if not isinstance(data, np.ndarray) or data.ndim != 3:
            raise InputError(f"DetPad: got {getattr(data, 'shape', type(data).__name__)}, expected a (C, H, W) array")
        m = self.multiple
        h, w = data.shape[1:]
        size = (-(-h // m) * m, -(-w // m) * m)
        if size == (h, w):
            return data
        out = np.full((data.shape[0], *size), self.value, data.dtype)
        out[:, :h, :w] = data
        return out


def _mini_box(cv: Any, contour: np.ndarray) -> tuple[np.ndarray, float]:
    """``cv2.minAreaRect``'s corners ordered top-left, top-right, bottom-right, bottom-left (PP-OCR's rule)."""
    rect = cv.minAreaRect(contour)
    points = sorted(list(cv.boxPoints(rect)), key=lambda p: p[0])
    i1, i4 = (0, 1) if points[1][1] > points[0][1] else (1, 0)
    i2, i3 = (2, 3) if points[3][1] > points[2][1] else (3, 2)
    return np.array([points[i1], points[i2], points[i3], points[i4]]), min(rect[1])


def _box_score(cv: Any, prob: np.ndarray, box: np.ndarray) -> float:
    """Mean probability inside the quadrilateral (DBNet's "fast" score)."""
    h, w = prob.shape[:2]
    box = box.copy()
    xmin = np.clip(np.floor(box[:, 0].min()).astype(np.int32), 0, w - 1)
    xmax = np.clip(np.ceil(box[:, 0].max()).astype(np.int32), 0, w - 1)
    ymin = np.clip(np.floor(box[:, 1].min()).astype(np.int32), 0, h - 1)
    ymax = np.clip(np.ceil(box[:, 1].max()).astype(np.int32), 0, h - 1)
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    box[:, 0] = box[:, 0] - xmin
    box[:, 1] = box[:, 1] - ymin
    cv.fillPoly(mask, box.reshape(1, -1, 2).astype(np.int32), 1)
    return float(cv.mean(prob[ymin : ymax + 1, xmin : xmax + 1], mask)[0])


def _clockwise(pts: np.ndarray) -> np.ndarray:
    xs = pts[np.argsort(pts[:, 0]), :]
    left, right = xs[:2], xs[2:]
    tl, bl = left[np.argsort(left[:, 1]), :]
    tr, br = right[np.argsort(right[:, 1]), :]
    return np.array([tl, tr, br, bl], dtype="float32")


def db_boxes(
    prob: np.ndarray,
    dest_shape: tuple[int, int],
    *,
    thresh: float = 0.3,
    box_thresh: float = 0.5,
    max_candidates: int = 1000,
    unclip_ratio: float = 1.6,
    dilate: bool = True,
    min_size: int = 3,
) -> tuple[np.ndarray, np.ndarray]:
    """DBNet post-processing of one probability map: text quadrilaterals in a ``dest_shape`` image.

    PaddleOCR's ``DBPostProcess`` (score mode "fast") step by step: threshold (``> thresh``), optional 2x2
    dilation, contours, minimum-area rectangle, mean-probability score (``>= box_thresh``), growth by
    ``area * unclip_ratio / perimeter`` (Clipper's round offset, :mod:`amdinfer.text._clipper`, no pyclipper),
    a second rectangle, scaling to ``dest_shape`` with rounding, clockwise corners, clipping, and dropping
    lines of 3 pixels or less.

    Returns:
        ``(quads float32 (k, 4, 2), scores float32 (k,))`` in contour order.

    Example:
        >>> prob = np.zeros((64, 64), np.float32); prob[20:30, 10:50] = 0.9
        >>> quads, scores = db_boxes(prob, (128, 128))
        >>> quads.shape, round(float(scores[0]), 2)
        ((1, 4, 2), 0.8)
    """
    cv = cv2("db_boxes")
    prob = np.asarray(prob, np.float32)
    if prob.ndim == 3 and prob.shape[0] == 1:
        prob = prob[0]
    if prob.ndim != 2:
        raise InputError(f"db_boxes: probability map: got shape {prob.shape}, expected (H, W) or (1, H, W)")
    height, width = prob.shape
    dest_h, dest_w = dest_shape
    mask = (prob > thresh).astype(np.uint8)
    if dilate:
        mask = cv.dilate(mask, np.array([[1, 1], [1, 1]]))
    contours, _ = cv.findContours(mask * 255, cv.RETR_LIST, cv.CHAIN_APPROX_SIMPLE)
    quads, scores = [], []
    for contour in contours[:max_candidates]:
        points, side = _mini_box(cv, contour)
        if side < min_size:
            continue
        score = _box_score(cv, prob, points.reshape(-1, 2))
        if box_thresh > score:
            continue
        area = _area(points)
        perimeter = float(np.sum(np.linalg.norm(points.astype(np.float64) - np.roll(points, -1, 0), axis=1)))
        grown = offset_round(points, area * unclip_ratio / perimeter).reshape(-1, 1, 2)
        if not len(grown):
            continue
        box, side = _mini_box(cv, grown.astype(np.int32))
        if side < min_size + 2:
            continue
        box[:, 0] = np.clip(np.round(box[:, 0] / width * dest_w), 0, dest_w)
        box[:, 1] = np.clip(np.round(box[:, 1] / height * dest_h), 0, dest_h)
        quad = _clockwise(box.astype(np.int32))
        quad[:, 0] = np.clip(quad[:, 0], 0, dest_w - 1).astype(np.int64)
        quad[:, 1] = np.clip(quad[:, 1], 0, dest_h - 1).astype(np.int64)
        if int(np.linalg.norm(quad[0] - quad[1])) <= 3 or int(np.linalg.norm(quad[0] - quad[3])) <= 3:
            continue
        quads.append(quad)
        scores.append(score)
    return np.asarray(quads, np.float32).reshape(-1, 4, 2), np.asarray(scores, np.float32)


def _area(points: np.ndarray) -> float:
    p = points.astype(np.float64)
    x, y = p[:, 0], p[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


class DbPostprocess(Postprocessor):
    """DBNet's probability map of one page -> :class:`~amdinfer.results.TextLines` (quads, box scores, no text).

    The quads are in the original image (``meta["orig_shape"]``, which :class:`DetResize` records), or in
    :class:`PageFit`'s page where it changed the page (``meta["ocr_page"]``); see :func:`db_boxes` for the
    steps. Defaults are RapidOCR's. Needs OpenCV, not pyclipper.

    Args:
        thresh: pixel probability threshold.
        box_thresh: smallest mean probability of a kept box.
        max_candidates: most contours looked at.
        unclip_ratio: how far boxes grow (DBNet shrinks text regions in training).
        dilate: dilate the binary map by 2x2 first.
        output: which model output to read, for a model with several.

    Example:
        >>> prob = np.zeros((1, 64, 64), np.float32); prob[0, 20:30, 10:50] = 0.9
        >>> lines = DbPostprocess()(__import__("amdinfer").stages.Sample(prob, {"orig_shape": (32, 32)})).data
        >>> len(lines), lines.image_shape
        (1, (32, 32))
    """

    output_type = TextLines
    output_description = "TextLines"

    def __init__(
        self,
        *,
        thresh: float = 0.3,
        box_thresh: float = 0.5,
        max_candidates: int = 1000,
        unclip_ratio: float = 1.6,
        dilate: bool = True,
        output: str | None = None,
    ) -> None:
        self.thresh = _number("thresh", thresh, 0.0, 1.0)
        self.box_thresh = _number("box_thresh", box_thresh, 0.0, 1.0)
        if not isinstance(max_candidates, int) or isinstance(max_candidates, bool) or max_candidates < 1:
            raise OptionError(f"max_candidates: got {max_candidates!r}, expected an int >= 1")
        self.max_candidates = max_candidates
        self.unclip_ratio = _number("unclip_ratio", unclip_ratio, 0.0)
        if not isinstance(dilate, bool):
            raise OptionError(f"dilate: got {dilate!r}, expected True or False")
        self.dilate = dilate
        self.output = output

    def process(self, data: Any, meta: dict[str, Any]) -> TextLines:
        prob = self._select_output(self, data, self.output)
        if not isinstance(prob, np.ndarray):
            raise InputError(f"DbPostprocess: got {type(prob).__name__}, expected the (1, H, W) probability map")
        page = meta.get(PAGE)  # PageFit's page: the quads are in it until AttachText maps them back
        shape = page.shape[:2] if page is not None else (meta.get("orig_shape") or prob.shape[-2:])
        own = meta.get("input_shape")  # the page's part of a padded canvas (DetPad)
        if own is not None and tuple(prob.shape[-2:]) != tuple(own):
            prob = prob[..., : int(own[0]), : int(own[1])]
        quads, scores = db_boxes(
            prob,
            (int(shape[0]), int(shape[1])),
            thresh=self.thresh,
            box_thresh=self.box_thresh,
            max_candidates=self.max_candidates,
            unclip_ratio=self.unclip_ratio,
            dilate=self.dilate,
        )
        return TextLines(quads, None, scores, (int(shape[0]), int(shape[1])))


def reading_order(quads: np.ndarray, y_tolerance: float = 10) -> np.ndarray:
    """Indices that put text lines in reading order: by the top-left corner's y, lines whose y differs from the
    previous one by less than ``y_tolerance`` pixels joined into one row, each row left to right (RapidOCR's
    ``sorted_boxes``).

    Example:
        >>> q = np.array([[[50, 5]] * 4, [[0, 0]] * 4, [[0, 40]] * 4], np.float32)
        >>> reading_order(q).tolist()
        [1, 0, 2]
    """
    quads = np.asarray(quads)
    if not len(quads):
        return np.zeros(0, np.int64)
    y = quads[:, 0, 1]
    by_y = np.argsort(y, kind="stable")
    rows = np.concatenate([[0], np.cumsum(np.diff(y[by_y]) >= y_tolerance)])
    return by_y[np.lexsort((quads[by_y, 0, 0], rows))]


class ReadingOrder(Postprocessor):
    """Sort :class:`~amdinfer.results.TextLines` into reading order (:func:`reading_order`).

    Example:
        >>> from amdinfer.results import TextLines
        >>> q = np.array([[[50, 5]] * 4, [[0, 0]] * 4], np.float32)
        >>> ReadingOrder()(TextLines(q, ["b", "a"], [1, 1])).data.texts
        ['a', 'b']
    """

    output_type = TextLines
    output_description = "TextLines"

    def __init__(self, y_tolerance: float = 10) -> None:
        self.y_tolerance = _number("y_tolerance", y_tolerance, 0.0)

    def process(self, data: Any, meta: dict[str, Any]) -> TextLines:
        if not isinstance(data, TextLines):
            raise InputError(f"ReadingOrder: got {type(data).__name__}, expected TextLines")
        return data.select(reading_order(data.quads, self.y_tolerance))
