"""Sliced inference for large images: :class:`Tiles` (a fan-out), :class:`MergeTiles` (a gather) and
:class:`SlicedPipeline`, which wraps any detector with them.

The geometry and the merge are SAHI's (``sahi`` 0.12.8 ``get_sliced_prediction``): the tiles of
:func:`~amdinfer.reference.slice_boxes`, plus the whole image when there are two tiles or more
(``perform_standard_pred``), each answered by the detector in its own pixels, shifted back by its tile's corner,
and merged by :func:`~amdinfer.reference.merge_predictions` (``"GREEDYNMM"`` or ``"NMS"``, ``"IOS"`` or
``"IOU"``, per class or not). The tiles of one image, or of a stream of images, run through the detector's own
``run_batch``/``map``, so they batch through its executor like any other items. SAHI's automatic switch to NMS/IOU
for a confidence threshold under 0.1 is not copied: the merge is what you ask for.

Example:
    >>> import amdinfer
    >>> from amdinfer.testing.squares import planted_squares, square_detector
    >>> image, boxes = planted_squares(1500, 2000, count=12, seed=0)
    >>> detector = amdinfer.yolo(square_detector(image_size=640), providers=["cpu"])
    >>> len(detector(image))  # the whole image letterboxed to 640: the 16-pixel squares are 5 pixels wide
    0
    >>> sliced = SlicedPipeline(detector, tiles=Tiles(640, 640), owns_detector=True)
    >>> found = sliced(image)
    >>> len(found), found.image_shape
    (12, (1500, 2000))
    >>> sliced.close()
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..errors import InputError, OptionError, StageError, StageInputError
from ..postprocess import ScaleBoxes
from ..preprocess import Letterbox, LoadImage
from ..reference._slicing import POSTPROCESS_TYPES, _check_match, merge_predictions, slice_boxes
from ..results import Detections
from ..stages import FanOut, Gather, Pieces, Sample, _source
from ._map import PipelineMap, map_options
from ._source_images import KEY, call, preprocess

__all__ = ["MergeTiles", "SlicedPipeline", "Tiles"]

#: a piece's metadata key: its tile ``(x1, y1, x2, y2)`` in the image's pixels
TILE = "tile"
#: the item's metadata key :class:`Tiles` writes: the image's ``(height, width)``, tiles, whole image added
SLICES = "slices"
#: the metadata key of a piece :class:`SlicedPipeline` letterboxed itself (the whole image; for a fixed-size
#: detector, a tile of an image smaller than a tile): the geometry its boxes go back through
WHOLE = "whole_letterbox"


class Tiles(FanOut):
    """Cut an image into overlapping tiles (SAHI's ``slice_image``), plus the whole image: the fan-out of slicing.

    The data is the image (an ``(H, W[, C])`` array, in the channel order the inner detector takes), or, used after
    a detector in a cascade (:class:`~amdinfer.pipeline.SubPipeline`), that detector's answer with the picture
    ``LoadImage`` kept (``keep_image=True``; RGB): the answer is then the whole-image prediction and no whole image
    is added. Each piece's metadata has ``"tile"`` (``x1, y1, x2, y2``); the item's has ``"slices"``.

    Args:
        slice_height, slice_width: the tile size in pixels (SAHI's names).
        overlap_height_ratio, overlap_width_ratio: the overlap of neighbouring tiles, a fraction in ``[0, 1)``.
        perform_standard_pred: also answer the whole image (downscaled by the detector's letterbox) when there
            are two tiles or more, so that objects larger than a tile are found (SAHI's default, ``True``).

    Raises:
        OptionError: bad arguments.
        InputError: (when called) no image: neither an image array nor a kept picture.

    Example:
        >>> tiles = Tiles(64, 64, overlap_height_ratio=0.25, overlap_width_ratio=0.25)
        >>> split = tiles(np.zeros((100, 120, 3), np.uint8))
        >>> [p.meta["tile"] for p in split.data.items]  # six tiles, then the whole image
        ... # doctest: +NORMALIZE_WHITESPACE
        [(0, 0, 64, 64), (48, 0, 112, 64), (56, 0, 120, 64), (0, 36, 64, 100), (48, 36, 112, 100),
         (56, 36, 120, 100), (0, 0, 120, 100)]
    """

    def __init__(
        self,
        slice_height: int,
        slice_width: int,
        *,
        overlap_height_ratio: float = 0.2,
        overlap_width_ratio: float = 0.2,
        perform_standard_pred: bool = True,
    ) -> None:
        slice_boxes(slice_height, slice_width, slice_height, slice_width, overlap_height_ratio, overlap_width_ratio)
        if not isinstance(perform_standard_pred, bool):
            raise OptionError(f"perform_standard_pred: got {perform_standard_pred!r}, expected True or False")
        self.slice_height, self.slice_width = int(slice_height), int(slice_width)
        self.overlap_height_ratio, self.overlap_width_ratio = float(overlap_height_ratio), float(overlap_width_ratio)
        self.perform_standard_pred = perform_standard_pred

    def boxes(self, height: int, width: int) -> np.ndarray:
        """The tiles of a ``height x width`` image, ``(n, 4)`` ``x1, y1, x2, y2`` (SAHI's ``get_slice_bboxes``).

        Example:
            >>> Tiles(100, 100).boxes(100, 250).tolist()
            [[0, 0, 100, 100], [80, 0, 180, 100], [150, 0, 250, 100]]
        """
        return slice_boxes(
            height, width, self.slice_height, self.slice_width, self.overlap_height_ratio, self.overlap_width_ratio
        )

    def process(self, data: Any, meta: dict[str, Any]) -> Pieces:
        if isinstance(data, np.ndarray):
            if data.ndim not in (2, 3) or not data.shape[0] or not data.shape[1]:
                raise InputError(f"Tiles: got an array of shape {data.shape}, expected an (H, W[, C]) image")
            image, parent = data, None
        else:
            image, parent = _source(meta, "Tiles"), data
        h, w = image.shape[:2]
        boxes = self.boxes(h, w)
        items = [Sample(image[y1:y2, x1:x2], {TILE: (x1, y1, x2, y2)}) for x1, y1, x2, y2 in boxes.tolist()]
        whole = self.perform_standard_pred and len(items) > 1
        if whole and parent is None:
            items.append(Sample(image, {TILE: (0, 0, w, h)}))
        meta[SLICES] = {"image_shape": (h, w), "tiles": len(boxes), "whole": whole}
        return Pieces(parent, items)


class MergeTiles(Gather):
    """Shift the tiles' detections back to the image's pixels and merge them (SAHI's postprocess): slicing's gather.

    Every piece's answer must be :class:`~amdinfer.results.Detections` in that piece's pixels; with a detector's
    answer as the parent (the cascade form of :class:`Tiles`) it joins them when ``perform_standard_pred`` said so.
    The merged detections are best first, with the labels of the boxes whose class they carry.

    Args:
        postprocess_type: ``"GREEDYNMM"`` (SAHI's default: overlapping boxes merge into the best one, the union
            box) or ``"NMS"`` (the best one stays, the others go).
        postprocess_match_metric: ``"IOS"`` (intersection over the smaller box, SAHI's default) or ``"IOU"``.
        postprocess_match_threshold: a pair matches at a metric ``>=`` this (SAHI's default 0.5).
        postprocess_class_agnostic: merge boxes of different classes too (SAHI's default ``False``).

    Raises:
        OptionError: bad arguments.
        InputError: (when gathering) a piece's answer is not Detections.

    Example:
        >>> from amdinfer.results import Detections
        >>> pieces = [Sample(None, {"tile": (0, 0, 64, 64)}), Sample(None, {"tile": (48, 0, 112, 64)})]
        >>> answers = [Detections([[50, 10, 60, 20]], [0.9], [0]), Detections([[2, 10, 12, 20]], [0.8], [0])]
        >>> MergeTiles().gather(None, answers, pieces, {"slices": {"image_shape": (64, 112)}}).boxes.tolist()
        [[50.0, 10.0, 60.0, 20.0]]
    """

    def __init__(
        self,
        *,
        postprocess_type: str = "GREEDYNMM",
        postprocess_match_metric: str = "IOS",
        postprocess_match_threshold: float = 0.5,
        postprocess_class_agnostic: bool = False,
    ) -> None:
        if postprocess_type not in POSTPROCESS_TYPES:
            raise OptionError(
                f"postprocess_type: got {postprocess_type!r}, expected one of {list(POSTPROCESS_TYPES)} "
                "(SAHI's NMM and LSNMS are not implemented)"
            )
        _check_match(postprocess_match_metric, postprocess_match_threshold)
        if not isinstance(postprocess_class_agnostic, bool):
            raise OptionError(f"postprocess_class_agnostic: got {postprocess_class_agnostic!r}, expected True or False")
        self.postprocess_type = postprocess_type
        self.postprocess_match_metric = postprocess_match_metric
        self.postprocess_match_threshold = float(postprocess_match_threshold)
        self.postprocess_class_agnostic = postprocess_class_agnostic

    def gather(self, parent: Any, results: list[Any], pieces: list[Sample], meta: dict[str, Any]) -> Detections:
        info = meta.get(SLICES) or {}
        parts: list[tuple[Detections, tuple[int, int]]] = []
        for i, (r, p) in enumerate(zip(results, pieces)):
            if not isinstance(r, Detections):
                raise InputError(f"MergeTiles: piece {i}: got {type(r).__name__}, expected Detections in its pixels")
            x1, y1 = p.meta.get(TILE, (0, 0, 0, 0))[:2]
            parts.append((r, (x1, y1)))
        if isinstance(parent, Detections) and info.get("whole", False):
            parts.append((parent, (0, 0)))
        shape = info.get("image_shape") or (parent.image_shape if isinstance(parent, Detections) else None)
        return self.merge(parts, shape)

    def merge(self, parts: list[tuple[Detections, tuple[int, int]]], image_shape: Any = None) -> Detections:
        """Detections of pieces with their ``(x, y)`` offsets, shifted and merged into one :class:`Detections`.

        Example:
            >>> from amdinfer.results import Detections
            >>> a, b = Detections([[0, 0, 10, 10]], [0.9], [0]), Detections([[0, 0, 10, 10]], [0.7], [0])
            >>> MergeTiles(postprocess_type="NMS").merge([(a, (0, 0)), (b, (100, 0))]).boxes.tolist()
            [[0.0, 0.0, 10.0, 10.0], [100.0, 0.0, 110.0, 10.0]]
        """
        boxes = [d.boxes.astype(np.float64) + np.array([x, y, x, y], np.float64) for d, (x, y) in parts]
        all_boxes = np.concatenate(boxes) if boxes else np.zeros((0, 4))
        scores = np.concatenate([d.scores for d, _ in parts]) if parts else np.zeros(0, np.float32)
        classes = np.concatenate([d.classes for d, _ in parts]) if parts else np.zeros(0, np.int64)
        labelled = bool(parts) and all(d.labels is not None for d, _ in parts)
        labels = [lab for d, _ in parts for lab in (d.labels or [])] if labelled else None
        merged, merged_scores, source = merge_predictions(
            all_boxes,
            scores.astype(np.float64),
            classes,
            postprocess_type=self.postprocess_type,
            match_metric=self.postprocess_match_metric,
            match_threshold=self.postprocess_match_threshold,
            class_agnostic=self.postprocess_class_agnostic,
        )
        order = np.argsort(-merged_scores, kind="stable")
        src = source[order]
        return Detections(
            merged[order],
            merged_scores[order],
            classes[src],
            [labels[i] for i in src.tolist()] if labels is not None else None,
            None if image_shape is None else tuple(image_shape),
        )


def _host_stages(detector: Any) -> Any:
    """The detector's host stages: a Pipeline's ``preprocess``, a fused one's host stages."""
    stages = getattr(detector, "preprocess", None)
    return getattr(detector, "_host", ()) if stages is None else stages


def _loader(detector: Any) -> LoadImage | None:
    """The detector's first stage when it decodes images."""
    stages = _host_stages(detector)
    first = stages[0] if stages else None
    return first if isinstance(first, LoadImage) else None


def _letterbox(detector: Any) -> Letterbox | None:
    """The detector's host letterbox when its stages are exactly ``[LoadImage,] Letterbox, ...``: the stage that
    :class:`SlicedPipeline` applies to the whole image itself, so that piece reaches the detector at its input
    size, as the tiles do (equal pieces batch on one engine shape; see :meth:`SlicedPipeline._split`)."""
    stages = list(_host_stages(detector))
    if stages and isinstance(stages[0], LoadImage):
        stages = stages[1:]
    first = stages[0] if stages else None
    return first if isinstance(first, Letterbox) else None


def _fixed_size(detector: Any) -> tuple[int, int] | None:
    """The one ``(H, W)`` a detector fused with ``image_size`` takes (its letterbox in the graph, none on the
    host), else ``None``."""
    size = getattr(detector, "image_size", None)
    if size is None or _letterbox(detector) is not None:
        return None
    return (int(size[0]), int(size[1]))


class SlicedPipeline:
    """A detector run on the tiles of each image, their answers merged: sliced inference (SAHI's) for any detector.

    Each image is decoded once (by the detector's ``LoadImage``), cut by ``tiles`` (:class:`Tiles`), the pieces run
    through the detector's ``run_batch`` (one call for all the images of a ``run_batch``; a stream through its
    ``map``, tiles of consecutive images sharing batches), and ``merge`` (:class:`MergeTiles`) gathers each image's
    answers into :class:`~amdinfer.results.Detections` in its pixels, with its picture kept when the detector keeps
    pictures. The detector is any object whose ``run_batch``/``map`` answer image arrays with Detections: an
    :class:`~amdinfer.Pipeline`, a :class:`~amdinfer.pipeline.fuse.FusedPipeline`, :func:`amdinfer.yolo`'s result.
    ``amdinfer.yolo(model, tiles=(h, w))`` builds one.

    A detector fused with a fixed ``image_size`` (``Pipeline.fuse(image_size=(h, w))``: its letterbox inside the
    graph) takes pictures of that size only: the tiles must be that size, and the pieces that are not (the whole
    image; the tiles of an image smaller than a tile) are letterboxed to it here, by ``letterbox``.

    Args:
        detector: the detector (taking arrays in its own channel order).
        tiles: the :class:`Tiles` fan-out.
        merge: the :class:`MergeTiles` gather (default: SAHI's GREEDYNMM, IOS 0.5, per class).
        owns_detector: close the detector with this pipeline.
        letterbox: the :class:`~amdinfer.preprocess.Letterbox` that brings the whole image to the detector's input
            size (default: the detector's own host ``Letterbox``; for a detector fused with a fixed ``image_size``,
            ``Letterbox(image_size)``, Ultralytics' defaults, as :func:`amdinfer.yolo` builds it: pass the one
            your detector was fused from when it differs).

    Raises:
        OptionError: bad arguments; tiles of another size than a fixed-size detector's ``image_size``.

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.squares import planted_squares, square_detector
        >>> sliced = amdinfer.yolo(square_detector(image_size=320), tiles=(320, 320), providers=["cpu"])
        >>> images = [planted_squares(700, 900, count=k, seed=k)[0] for k in (3, 5)]
        >>> [len(d) for d in sliced.run_batch(images)], [len(d) for d in sliced.map(images)]
        ([3, 5], [3, 5])
        >>> sliced.close()
    """

    def __init__(
        self,
        detector: Any,
        *,
        tiles: Tiles,
        merge: MergeTiles | None = None,
        owns_detector: bool = False,
        letterbox: Letterbox | None = None,
    ) -> None:
        if not callable(getattr(detector, "run_batch", None)) or not callable(getattr(detector, "map", None)):
            raise OptionError(
                f"detector: got {type(detector).__name__}, expected a detector pipeline with run_batch() and map() "
                "(amdinfer.Pipeline, FusedPipeline, amdinfer.yolo(...))"
            )
        if not isinstance(tiles, Tiles):
            raise OptionError(f"tiles: got {type(tiles).__name__}, expected an amdinfer.pipeline.Tiles")
        merge = MergeTiles() if merge is None else merge
        if not isinstance(merge, MergeTiles):
            raise OptionError(f"merge: got {type(merge).__name__}, expected an amdinfer.pipeline.MergeTiles")
        if letterbox is not None and not isinstance(letterbox, Letterbox):
            raise OptionError(f"letterbox: got {type(letterbox).__name__}, expected an amdinfer.preprocess.Letterbox")
        self._fixed = _fixed_size(detector)
        tile = (tiles.slice_height, tiles.slice_width)
        if self._fixed is not None and tile != self._fixed:
            raise OptionError(
                f"tiles: got {tile[0]}x{tile[1]} for a {type(detector).__name__} fused with image_size={self._fixed}, "
                f"expected tiles of that size (it takes pictures of that size only); or fuse it with image_size=None"
            )
        self.detector, self.tiles, self.merge = detector, tiles, merge
        self._owns = bool(owns_detector)
        self._load = _loader(detector)
        self._whole = letterbox or _letterbox(detector) or (None if self._fixed is None else Letterbox(self._fixed))
        self._keep = bool(getattr(detector, "_keep_image", False))

    @property
    def engine(self) -> Any:
        """The detector's engine."""
        return self.detector.engine

    def __repr__(self) -> str:
        name = type(self.detector).__name__
        return f"SlicedPipeline(\n  detector={name},\n  tiles={self.tiles!r},\n  merge={self.merge!r},\n)"

    # ------------------------------------------------------------------ running
    def _split(self, index: int, item: Any) -> tuple[Sample, Pieces]:
        """Image ``index`` decoded (its picture kept) and cut into pieces."""
        if self._load is not None:
            sample = preprocess(index, Sample.wrap(item), [self._load], keep_image=self._keep)
        elif isinstance(item, np.ndarray):
            sample = Sample(item, {KEY: item} if self._keep and item.ndim == 3 else {})
        else:
            raise StageInputError(
                f"item {index}: got {type(item).__name__}, expected an image array (the detector does not start "
                "with LoadImage, so paths and bytes cannot be decoded)"
            )
        try:
            split = self.tiles(sample)
        except Exception as exc:
            kind = StageInputError if isinstance(exc, InputError) else StageError
            raise kind(f"item {index}: Tiles: {type(exc).__name__}: {exc}") from exc
        pieces: Pieces = split.data
        info = split.meta.get(SLICES) or {}
        if self._whole is not None and pieces.parent is None:
            last = len(pieces.items) - 1
            for k, piece in enumerate(pieces.items):  # the whole image; any piece a fixed-size detector refuses
                if (k == last and info.get("whole")) or (self._fixed and piece.data.shape[:2] != self._fixed):
                    pieces.items[k] = self._letterboxed(index, piece)
        return split, pieces

    def _letterboxed(self, index: int, whole: Sample) -> Sample:
        """A piece (the whole image; for a detector fused with a fixed size, any piece not of that size) letterboxed
        here by the detector's own stage (or ``letterbox``): the detector's letterbox of that
        canvas is the identity (scale 1, no padding), so its pixels and answers are the ones the detector would
        make from the image, and its boxes go back through the canvas's geometry (``ScaleBoxes``) before the
        merge. Why: every piece then has the detector's input size (tiles of that size), so a GPU batch of them
        runs on one fused engine instead of falling back to the host geometry for a window of mixed sizes."""
        assert self._whole is not None
        try:
            canvas = self._whole(Sample(whole.data))
        except Exception as exc:
            kind = StageInputError if isinstance(exc, InputError) else StageError
            raise kind(f"item {index}: Letterbox of a piece: {type(exc).__name__}: {exc}") from exc
        geometry = {k: canvas.meta[k] for k in ("affine", "orig_shape") if k in canvas.meta}
        return Sample(canvas.data, {**whole.meta, WHOLE: geometry})

    def _gather(self, split: Sample, pieces: Pieces, results: list[Any]) -> Detections:
        meta = dict(split.meta)
        results = list(results)
        for k, piece in enumerate(pieces.items):  # a letterboxed piece's boxes back in that piece's pixels
            geometry = piece.meta.get(WHOLE)
            if geometry is not None and isinstance(results[k], Detections):
                results[k] = ScaleBoxes()(Sample(results[k], dict(geometry))).data
        det = self.merge.gather(pieces.parent, results, pieces.items, meta)
        image = meta.get(KEY)
        if image is not None:
            det.image = image
        return det

    def __call__(self, image: Any) -> Any:
        """One image's merged detections; a list, a glob or a folder: a list of them (as :class:`~amdinfer.Pipeline`).

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.squares import square_detector
            >>> sliced = amdinfer.yolo(square_detector(image_size=64), tiles=64, providers=["cpu"])
            >>> sliced(np.zeros((100, 150, 3), np.uint8)).image_shape
            (100, 150)
            >>> sliced.close()
        """
        if self._load is not None:
            return call(self.run_batch, image)
        return self.run_batch([image])[0]

    def run_batch(self, images: Iterable[Any]) -> list[Detections]:
        """The merged detections of each image, in order; the tiles of all of them in one detector ``run_batch``.

        Raises:
            StageError: an image failed to decode or cut (naming its index), or the detector failed on a piece
                (naming the image and its piece).
        """
        splits = [self._split(i, item) for i, item in enumerate(images)]
        flat = [p.data for _, pieces in splits for p in pieces.items]
        try:
            answers = self.detector.run_batch(flat)
        except StageError as exc:
            raise self._piece_error(exc, [len(p) for _, p in splits]) from exc
        out, k = [], 0
        for split, pieces in splits:
            out.append(self._gather(split, pieces, answers[k : k + len(pieces)]))
            k += len(pieces)
        return out

    @staticmethod
    def _piece_error(exc: StageError, counts: list[int]) -> StageError:
        index = getattr(exc, "index", None)
        if not isinstance(index, int):
            return exc
        image, first = 0, 0
        while image < len(counts) - 1 and index >= first + counts[image]:
            first += counts[image]
            image += 1
        kind = StageInputError if isinstance(exc, StageInputError) else StageError
        return kind(f"image {image}, piece {index - first}: {exc}")

    def map(
        self, items: Iterable[Any], *, batch_size: int | str | None = "auto", workers: int | None = None
    ) -> PipelineMap:
        """A stream of images: their tiles through the detector's ``map`` (``batch_size`` tiles per engine call,
        ``workers`` threads placing and finishing them), merged per image, in order.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.squares import square_detector
            >>> sliced = amdinfer.yolo(square_detector(image_size=64), tiles=64, providers=["cpu"])
            >>> [d.image_shape for d in sliced.map([np.zeros((90, 70, 3), np.uint8)] * 2, batch_size=4)]
            [(90, 70), (90, 70)]
            >>> sliced.close()
        """
        map_options(items, batch_size, workers, what="images")
        return PipelineMap(self._stream(iter(items), batch_size, workers))

    def _stream(self, items: Iterator[Any], batch_size: Any, workers: Any) -> Iterator[Detections]:
        pending: deque[tuple[Sample, Pieces]] = deque()  # filled on the detector's input thread, in order

        def pieces() -> Iterator[Any]:
            for i, item in enumerate(items):
                split, cut = self._split(i, item)
                pending.append((split, cut))
                yield from (p.data for p in cut.items)

        results = self.detector.map(pieces(), batch_size=batch_size, workers=workers)
        try:
            for first in results:
                split, cut = pending.popleft()
                got = [first] + [next(results) for _ in range(len(cut) - 1)]
                yield self._gather(split, cut, got)
        finally:
            results.close()

    def close(self) -> None:
        """Close the detector when this pipeline owns it (the recipe's); safe to call twice."""
        if self._owns:
            self.detector.close()

    def __enter__(self) -> SlicedPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
