"""COCO mAP of detections on a labelled set, computed by ``pycocotools`` (the reference implementation).

:func:`detection_map` takes a detector (anything with ``map``: :func:`amdinfer.yolo`'s pipeline) or its
predictions, and a :class:`~amdinfer.metrics.DetectionSet` (or the path of one), builds the COCO ground truth
and results in memory, and reads ``COCOeval``'s accumulated precision: ``mAP50`` (IoU 0.5) and ``mAP50-95``
(the mean over IoU 0.50:0.05:0.95), overall and per class, area "all".

Example:
    >>> import numpy as np
    >>> from amdinfer.metrics import DetectionSet, detection_map
    >>> truth = DetectionSet(("a.png",), (np.array([[0, 0, 10, 10.0]]),), (np.array([0]),), ("cat",), ((20, 20),), "x")
    >>> round(detection_map([np.array([[0, 0, 10, 10, 0.9, 0]])], truth).map50, 6)
    1.0
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InputError
from ._dataset import DetectionSet, load_detection_set

__all__ = ["ClassMap", "DetectionMetrics", "detection_map", "mean_stages"]


@dataclass(frozen=True)
class ClassMap:
    """One class's row of :class:`DetectionMetrics`.

    Attributes:
        index: the class index; name: its name.
        images: images with at least one true box of it; instances: its true boxes.
        map50, map50_95: its AP at IoU 0.5 and over 0.50:0.95, ``None`` when the set has no box of it (COCO
            leaves such a class out of the mean).

    Example:
        >>> ClassMap(0, "cat", 1, 2, 0.5, 0.25).map50
        0.5
    """

    index: int
    name: str
    images: int
    instances: int
    map50: float | None
    map50_95: float | None


@dataclass(frozen=True)
class DetectionMetrics:
    """What :func:`detection_map` measured.

    Attributes:
        map50: COCO AP at IoU 0.5, the mean over the classes that have true boxes.
        map50_95: COCO AP averaged over IoU 0.50:0.05:0.95 (``stats[0]`` of ``COCOeval``).
        per_class: one :class:`ClassMap` per class of the set's ``names``.
        images, instances: the set's images and true boxes.
        seconds: wall time of the detector over the set (``None`` when predictions were given).
        library: the metric library and its version.
        stages: mean milliseconds per image in each stage (``preprocess``, ``inference``, ``postprocess``) from
            the results' ``speed``; empty when the results carry none (a fused pipeline, predictions by hand).

    Example:
        >>> m = DetectionMetrics(0.5, 0.25, (), 2, 3, 0.1)
        >>> round(m.images_per_second, 1), m.to_dict()["mAP50"]
        (20.0, 0.5)
    """

    map50: float
    map50_95: float
    per_class: tuple[ClassMap, ...]
    images: int
    instances: int
    seconds: float | None = None
    library: str = field(default="pycocotools")
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def images_per_second(self) -> float | None:
        """Images per second of the detector over the set, or ``None``."""
        return None if not self.seconds else self.images / self.seconds

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for JSON (``mAP50``, ``mAP50-95``, ``per_class``, ``images``, ``instances``, ``speed``).

        Example:
            >>> DetectionMetrics(1.0, 0.9, (ClassMap(0, "a", 1, 1, 1.0, 0.9),), 1, 1).to_dict()["per_class"][0]["name"]
            'a'
        """
        speed = None
        if self.seconds:
            speed = {"seconds": self.seconds, "images_per_second": self.images_per_second,
                     "ms_per_image": 1000 * self.seconds / max(self.images, 1), **self.stages}  # fmt: skip
        rows = [
            {"class": c.index, "name": c.name, "images": c.images, "instances": c.instances, "mAP50": c.map50,
             "mAP50-95": c.map50_95}
            for c in self.per_class
        ]  # fmt: skip
        return {"mAP50": self.map50, "mAP50-95": self.map50_95, "images": self.images, "instances": self.instances,
                "per_class": rows, "speed": speed, "library": self.library}  # fmt: skip

    def summary(self) -> str:
        """Ultralytics' val table: one line for all classes, then one per class with true boxes.

        Example:
            >>> print(DetectionMetrics(1.0, 0.9, (ClassMap(0, "a", 1, 1, 1.0, 0.9),), 1, 1).summary())
                           Class     Images  Instances      mAP50   mAP50-95
                             all          1          1      1.000      0.900
                               a          1          1      1.000      0.900
        """
        lines = [f"{'Class':>20} {'Images':>10} {'Instances':>10} {'mAP50':>10} {'mAP50-95':>10}"]
        lines.append(f"{'all':>20} {self.images:>10} {self.instances:>10} {self.map50:>10.3f} {self.map50_95:>10.3f}")
        for c in self.per_class:
            if c.map50 is not None and c.map50_95 is not None:
                name = c.name[:20]
                lines.append(f"{name:>20} {c.images:>10} {c.instances:>10} {c.map50:>10.3f} {c.map50_95:>10.3f}")
        return "\n".join(lines)


def detection_map(
    detector_or_predictions: Any,
    data: DetectionSet | str | os.PathLike[str],
    *,
    max_dets: int = 100,
    split: str = "val",
    images: str | os.PathLike[str] | None = None,
    batch_size: int | str | None = "auto",
    progress: bool | None = False,
) -> DetectionMetrics:
    """COCO ``mAP50`` and ``mAP50-95`` of a detector (or its predictions) on a labelled set, by ``pycocotools``.

    Args:
        detector_or_predictions: a detector with ``map`` (:func:`amdinfer.yolo`'s pipeline: it runs over the set's
            images through ``map``, the fast path, and is timed), or the predictions, one per image of the set in
            its order: :class:`~amdinfer.results.Detections` (boxes in the image's pixels) or arrays ``(k, 6)``
            ``x1, y1, x2, y2, score, class``. Class indices are indices into the set's ``names``.
        data: a :class:`~amdinfer.metrics.DetectionSet`, or what :func:`load_detection_set` reads (a
            ``data.yaml``, a dataset folder, a COCO ``.json``); ``split`` and ``images`` go to it.
        max_dets: the most detections per image that count (COCO's 100; Ultralytics' val keeps 300).
        batch_size: the detector's ``map`` batch size.
        progress: a progress bar over the images (``None``: on a terminal only).

    Returns:
        A :class:`DetectionMetrics`. Both empty (no true box, no prediction): a class has no AP and is left out;
        a set with no true box at all raises.

    Raises:
        InputError: predictions of another count than the set's images, a class index outside ``names``, a
            set with no true box, or a malformed prediction (naming the image).
        BackendUnavailableError: ``pycocotools`` is not installed (``pip install amdinfer-onnx[val]``).

    Example:
        >>> import numpy as np
        >>> truth = DetectionSet(("a.png", "b.png"), (np.array([[0, 0, 10, 10.0]]), np.array([[5, 5, 15, 15.0]])),
        ...                      (np.array([0]), np.array([0])), ("cat",), ((20, 20), (20, 20)), "x")
        >>> half = [np.array([[0, 0, 10, 10, 0.9, 0]]), np.zeros((0, 6))]  # recall 1/2 at precision 1
        >>> round(detection_map(half, truth).map50, 4)  # 51 of COCO's 101 recall points
        0.505
    """
    dataset = data if isinstance(data, DetectionSet) else load_detection_set(data, split=split, images=images)
    if not dataset.images:
        raise InputError(f"data: {dataset.source!r} has no image, expected at least one")
    seconds = None
    if hasattr(detector_or_predictions, "map") and callable(detector_or_predictions):
        t0 = time.perf_counter()
        predictions = _run(detector_or_predictions, dataset, batch_size, progress)
        seconds = time.perf_counter() - t0
    else:
        predictions = list(detector_or_predictions)
    if len(predictions) != len(dataset):
        raise InputError(
            f"predictions: got {len(predictions)}, expected one per image of {dataset.source!r} ({len(dataset)})"
        )
    rows = [_prediction_rows(p, i, len(dataset.names)) for i, p in enumerate(predictions)]
    metrics = _evaluate(dataset, rows, max_dets, seconds)
    return dataclasses.replace(metrics, stages=mean_stages(predictions))


def mean_stages(results: Sequence[Any]) -> dict[str, float]:
    """The mean of the results' ``speed`` (or of the ``speed`` dicts themselves) per stage, in milliseconds per
    item, over the results that timed it.

    Example:
        >>> from amdinfer.results import Detections
        >>> mean_stages([Detections([], [], [])])  # built by hand: no stage timed
        {}
    """
    sums: dict[str, list[float]] = {}
    for r in results:
        speed = r if isinstance(r, Mapping) else getattr(r, "speed", None)
        for stage, ms in (speed or {}).items():
            if ms is not None:
                sums.setdefault(stage, []).append(float(ms))
    return {stage: sum(v) / len(v) for stage, v in sums.items()}


def _run(detector: Any, dataset: DetectionSet, batch_size: Any, progress: bool | None) -> list[Any]:
    from .._support._progress import progress_bar

    out = []
    with progress_bar("val", len(dataset), unit="image", enabled=progress) as bar:
        with detector.map(list(dataset.images), batch_size=batch_size) as results:
            for r in results:
                out.append(r)
                bar.update()
    return out


def _prediction_rows(p: Any, i: int, nc: int) -> np.ndarray:
    """``(k, 6)`` float64 ``x1, y1, x2, y2, score, class`` of one image's prediction."""
    if hasattr(p, "boxes") and hasattr(p, "scores") and hasattr(p, "classes"):
        a = np.concatenate(
            [np.asarray(p.boxes, np.float64).reshape(-1, 4), np.asarray(p.scores, np.float64).reshape(-1, 1),
             np.asarray(p.classes, np.float64).reshape(-1, 1)], axis=1,
        )  # fmt: skip
    else:
        a = np.asarray(p, np.float64)
        if a.size == 0:
            a = a.reshape(0, 6)
        if a.ndim != 2 or a.shape[1] != 6:
            raise InputError(f"predictions[{i}]: got shape {a.shape}, expected (k, 6) x1, y1, x2, y2, score, class")
    if not np.all(np.isfinite(a)):
        raise InputError(f"predictions[{i}]: got non-finite values, expected finite boxes, scores and classes")
    bad = a[(a[:, 5] < 0) | (a[:, 5] >= nc), 5]
    if bad.size:
        raise InputError(
            f"predictions[{i}]: class {int(bad[0])} is outside the set's {nc} names, expected 0..{nc - 1} "
            "(a model trained on other classes?)"
        )
    return a


def _evaluate(
    dataset: DetectionSet,
    rows: Sequence[np.ndarray],
    max_dets: int,
    seconds: float | None,
    *,
    iou_type: str = "bbox",
    extra: tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]] | None = None,
    sigmas: np.ndarray | None = None,
) -> DetectionMetrics:
    """COCOeval of ``iou_type`` (``bbox``, ``segm``, ``keypoints``); ``extra``: the fields each true and each
    predicted annotation adds (its ``segmentation`` or ``keypoints``, in the order of the boxes and rows)."""
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError:
        from .._support._install import pip_extra

        raise BackendUnavailableError(
            f"detection_map needs pycocotools, which is not installed: {pip_extra('val')}"
        ) from None
    instances = dataset.instances()
    if not sum(instances):
        raise InputError(f"data: {dataset.source!r} has no true box, expected at least one labelled object")
    gt, dt = _coco_dicts(dataset, rows)
    if extra is not None:
        for anns, fields in zip((gt["annotations"], dt["annotations"]), extra):
            for ann, more in zip(anns, fields, strict=True):
                ann.update(more)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco_gt, coco_dt = COCO(), COCO()
        coco_gt.dataset, coco_dt.dataset = gt, dt
        coco_gt.createIndex()
        coco_dt.createIndex()
        ev = COCOeval(coco_gt, coco_dt, iou_type)
        ev.params.maxDets = [int(max_dets)] if iou_type == "keypoints" else [1, 10, int(max_dets)]
        if sigmas is not None:
            ev.params.kpt_oks_sigmas = np.asarray(sigmas, np.float64)
        ev.evaluate()
        ev.accumulate()
    precision = ev.eval["precision"][:, :, :, 0, -1]  # IoU x recall x class, area "all", max_dets
    per_class = []
    for k, name in enumerate(dataset.names):
        p = precision[:, :, k]
        has = bool(instances[k]) and bool((p > -1).any())
        images = sum(1 for c in dataset.classes if np.any(c == k))
        ap50 = float(p[0].mean()) if has else None
        ap = float(p.mean()) if has else None
        per_class.append(ClassMap(k, name, images, instances[k], ap50, ap))
    valid = [c for c in per_class if c.map50 is not None]
    map50 = float(np.mean([c.map50 for c in valid]))
    map50_95 = float(np.mean([c.map50_95 for c in valid]))
    library = f"pycocotools {_version('pycocotools')}"
    return DetectionMetrics(map50, map50_95, tuple(per_class), len(dataset), sum(instances), seconds, library)


def _version(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _coco_dicts(dataset: DetectionSet, rows: Sequence[np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ground truth and the results as COCO datasets (ids from 1: COCOeval reads id 0 as "no match")."""
    categories = [{"id": k + 1, "name": name} for k, name in enumerate(dataset.names)]
    imgs = [{"id": i + 1, "height": h, "width": w} for i, (h, w) in enumerate(dataset.sizes)]
    gts: list[dict[str, Any]] = []
    dts: list[dict[str, Any]] = []
    for i, (boxes, classes, pred) in enumerate(zip(dataset.boxes, dataset.classes, rows)):
        for b, c in zip(boxes, classes):
            gts.append(_ann(len(gts) + 1, i + 1, int(c) + 1, b))
        for r in pred:
            dts.append({**_ann(len(dts) + 1, i + 1, int(r[5]) + 1, r[:4]), "score": float(r[4])})
    return (
        {"images": imgs, "annotations": gts, "categories": categories},
        {"images": imgs, "annotations": dts, "categories": categories},
    )


def _ann(ann_id: int, image_id: int, category_id: int, xyxy: Any) -> dict[str, Any]:
    x1, y1, x2, y2 = (float(v) for v in xyxy)
    w, h = max(x2 - x1, 0.0), max(y2 - y1, 0.0)
    return {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": [x1, y1, w, h], "area": w * h,
            "iscrowd": 0}  # fmt: skip
