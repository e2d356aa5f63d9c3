"""COCO mAP of the YOLO tasks beyond boxes: instance masks (:func:`mask_map`, ``COCOeval(iouType="segm")``) and
keypoints (:func:`keypoint_map`, ``COCOeval(iouType="keypoints")``: OKS), each next to the box mAP of the same
predictions, as Ultralytics' segment and pose ``val`` print Box and Mask (or Pose) columns.

Example:
    >>> import numpy as np
    >>> from amdinfer.metrics import DetectionSet, keypoint_map
    >>> kp = np.array([[[2, 2, 2], [8, 8, 2]]], np.float64)
    >>> truth = DetectionSet(("a.png",), (np.array([[0, 0, 10, 10.0]]),), (np.array([0]),), ("person",),
    ...                      ((20, 20),), "x", keypoints=(kp,), areas=(np.array([53.0]),))
    >>> m = keypoint_map([np.array([[0, 0, 10, 10, 0.9, 0, 2, 2, 1, 8, 8, 1]])], truth)
    >>> round(m.box.map50_95, 6), round(m.pose.map50_95, 6)
    (1.0, 1.0)
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from . import _labels
from ._dataset import DetectionSet, load_detection_set
from ._map import DetectionMetrics, _evaluate, _prediction_rows, _run, mean_stages

__all__ = ["OKS_SIGMA", "InstanceMetrics", "keypoint_map", "keypoint_sigmas", "mask_map"]

#: COCO's per-keypoint OKS sigmas of its 17 person keypoints (``pycocotools`` ``Params.kpt_oks_sigmas``,
#: Ultralytics' ``OKS_SIGMA``).
OKS_SIGMA = (
    np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87, 0.89, 0.89])
    / 10.0
)


def keypoint_sigmas(kpt_shape: tuple[int, int] | int) -> np.ndarray:
    """The OKS sigmas Ultralytics' pose val uses: :data:`OKS_SIGMA` for COCO's 17 keypoints, else ``1 / K`` for each
    of ``K`` keypoints (``PoseValidator.init_metrics``: ``OKS_SIGMA if kpt_shape == [17, 3] else np.ones(K) / K``;
    amdinfer also takes ``(17, 2)`` as COCO's persons).

    Example:
        >>> keypoint_sigmas((17, 3))[:2].round(6).tolist(), keypoint_sigmas((4, 2)).tolist()
        ([0.026, 0.025], [0.25, 0.25, 0.25, 0.25])
    """
    k = int(kpt_shape if isinstance(kpt_shape, int) else kpt_shape[0])
    return OKS_SIGMA.copy() if k == 17 else np.full(k, 1.0 / k)


@dataclass(frozen=True)
class InstanceMetrics:
    """What :func:`mask_map` or :func:`keypoint_map` measured: the box mAP and the task's own.

    Attributes:
        task: ``"segment"`` or ``"pose"``.
        box: the boxes' :class:`DetectionMetrics` (``COCOeval`` ``bbox``).
        mask: ``task="segment"``: the masks' (``segm``); else ``None``.
        pose: ``task="pose"``: the keypoints' (``keypoints``, OKS); else ``None``.

    Example:
        >>> from amdinfer.metrics import ClassMap, DetectionMetrics
        >>> row = (ClassMap(0, "a", 1, 1, 1.0, 0.9),)
        >>> m = InstanceMetrics("segment", DetectionMetrics(1.0, 0.9, row, 1, 1), DetectionMetrics(1.0, 0.8, row, 1, 1))
        >>> m.own.map50_95, m.to_dict()["mask"]["mAP50-95"]
        (0.8, 0.8)
    """

    task: str
    box: DetectionMetrics
    mask: DetectionMetrics | None = None
    pose: DetectionMetrics | None = None

    @property
    def own(self) -> DetectionMetrics:
        """The task's own metrics: :attr:`mask` or :attr:`pose`."""
        own = self.mask if self.task == "segment" else self.pose
        assert own is not None
        return own

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for JSON: ``task``, ``mAP50`` and ``mAP50-95`` of the task's own metric (mask or pose),
        ``box`` and ``mask``/``pose`` (each as :meth:`DetectionMetrics.to_dict`), ``images``, ``instances``,
        ``speed``, ``library``."""
        box, own = self.box.to_dict(), self.own.to_dict()
        key = "mask" if self.task == "segment" else "pose"
        common = {k: box.pop(k) for k in ("images", "instances", "speed", "library")}
        for k in ("images", "instances", "speed", "library"):
            own.pop(k)
        return {"task": self.task, "mAP50": self.own.map50, "mAP50-95": self.own.map50_95, **common, "box": box,
                key: own}  # fmt: skip

    def summary(self) -> str:
        """Ultralytics' segment/pose val table: Box and Mask (or Pose) mAP50 and mAP50-95 per class.

        Example:
            >>> from amdinfer.metrics import ClassMap, DetectionMetrics
            >>> row = (ClassMap(0, "a", 1, 1, 1.0, 0.9),)
            >>> one = DetectionMetrics(1.0, 0.9, row, 1, 1)
            >>> print(InstanceMetrics("pose", one, pose=one).summary())
                           Class     Images  Instances      Box(mAP50  mAP50-95)     Pose(mAP50  mAP50-95)
                             all          1          1          1.000      0.900          1.000      0.900
                               a          1          1          1.000      0.900          1.000      0.900
        """
        kind = "Mask" if self.task == "segment" else "Pose"
        own = self.own
        lines = [f"{'Class':>20} {'Images':>10} {'Instances':>10} {'Box(mAP50':>14} {'mAP50-95)':>10} "
                 f"{kind + '(mAP50':>14} {'mAP50-95)':>10}"]  # fmt: skip

        def row(name: str, images: int, n: int, b: tuple[Any, Any], o: tuple[Any, Any]) -> str:
            cells = [f"{v:>14.3f}" if i % 2 == 0 else f"{v:>10.3f}" for i, v in enumerate((*b, *o))]
            return f"{name[:20]:>20} {images:>10} {n:>10} " + " ".join(cells)

        lines.append(row("all", self.box.images, self.box.instances, (self.box.map50, self.box.map50_95),
                         (own.map50, own.map50_95)))  # fmt: skip
        for b, o in zip(self.box.per_class, own.per_class):
            if b.map50 is not None and o.map50 is not None:
                lines.append(row(b.name, b.images, b.instances, (b.map50, b.map50_95), (o.map50, o.map50_95)))
        return "\n".join(lines)


def _predictions(model_or_predictions: Any, dataset: DetectionSet, batch_size: Any, progress: Any) -> Any:
    seconds = None
    if hasattr(model_or_predictions, "map") and callable(model_or_predictions):
        t0 = time.perf_counter()
        predictions = _run(model_or_predictions, dataset, batch_size, progress)
        seconds = time.perf_counter() - t0
    else:
        predictions = list(model_or_predictions)
    if len(predictions) != len(dataset):
        raise InputError(
            f"predictions: got {len(predictions)}, expected one per image of {dataset.source!r} ({len(dataset)})"
        )
    return predictions, seconds


def _load(data: Any, task: str, split: str, images: Any, kpt_shape: Any = None) -> DetectionSet:
    if isinstance(data, DetectionSet):
        have = data.task
        if have != task:
            raise InputError(f"data: {data.source!r} holds {have} labels, expected {task} labels "
                             f"(load_detection_set(..., task={task!r}))")  # fmt: skip
        return data
    return load_detection_set(data, split=split, images=images, task=task, kpt_shape=kpt_shape)


def mask_map(
    segmenter_or_predictions: Any,
    data: DetectionSet | str | os.PathLike[str],
    *,
    max_dets: int = 100,
    split: str = "val",
    images: str | os.PathLike[str] | None = None,
    batch_size: int | str | None = "auto",
    progress: bool | None = False,
) -> InstanceMetrics:
    """COCO box and mask ``mAP50`` / ``mAP50-95`` of an instance segmenter (or its predictions), by ``pycocotools``
    (``COCOeval`` ``bbox`` and ``segm``; the predicted masks encoded by ``pycocotools.mask.encode``).

    Args:
        segmenter_or_predictions: :func:`amdinfer.yolo`'s pipeline of a ``-seg`` model (run through ``map``,
            timed), or one prediction per image: :class:`~amdinfer.results.Detections` with ``masks`` in the
            image's pixels, or a pair ``(rows, masks)``: ``(k, 6)`` ``x1, y1, x2, y2, score, class`` and ``bool
            (k, H, W)``.
        data: a :class:`DetectionSet` read with ``task="segment"``, or what :func:`load_detection_set` reads.
        max_dets, split, images, batch_size, progress: as :func:`detection_map`.

    Returns:
        An :class:`InstanceMetrics` with ``box`` and ``mask``.

    Raises:
        InputError: as :func:`detection_map`; a prediction without masks, or masks of another size than its image.
        BackendUnavailableError: ``pycocotools`` is not installed.

    Example:
        >>> import numpy as np
        >>> from amdinfer.metrics import DetectionSet, polygon_rle
        >>> rle = polygon_rle([[0, 0, 4, 0, 4, 4, 0, 4]], (8, 8))  # a 4 x 4 square
        >>> truth = DetectionSet(("a.png",), (np.array([[0, 0, 4, 4.0]]),), (np.array([0]),), ("cat",),
        ...                      ((8, 8),), "x", masks=((rle,),))
        >>> half = np.zeros((1, 8, 8), bool); half[0, :4, 2:6] = True  # overlaps half the square: IoU 8 / 24
        >>> m = mask_map([(np.array([[0, 0, 4, 4, 0.9, 0]]), half)], truth)
        >>> round(m.box.map50, 6), round(m.mask.map50, 6)
        (1.0, 0.0)
    """
    dataset = _load(data, "segment", split, images)
    predictions, seconds = _predictions(segmenter_or_predictions, dataset, batch_size, progress)
    rows, masks = [], []
    for i, p in enumerate(predictions):
        r, m = p if isinstance(p, tuple) else (p, getattr(p, "masks", None))
        rows.append(_prediction_rows(r, i, len(dataset.names)))
        if m is None and len(rows[-1]):
            raise InputError(f"predictions[{i}]: got no masks, expected Detections with masks (a -seg model)")
        arr = np.zeros((0, *dataset.sizes[i]), bool) if m is None else np.asarray(getattr(m, "data", m), bool)
        if arr.shape != (len(rows[-1]), *dataset.sizes[i]):
            h, w = dataset.sizes[i]
            raise InputError(f"predictions[{i}]: masks: got shape {arr.shape}, expected ({len(rows[-1])}, {h}, {w}): "
                             "one per box in the image's pixels")  # fmt: skip
        masks.append(arr)
    gt_fields = [{"segmentation": dict(r), "area": _labels.mask_area(r)} for ms in dataset.masks for r in ms]
    dt_fields = [{"segmentation": r, "area": _labels.mask_area(r)} for m in masks for r in _labels.masks_rle(m)]
    stages = mean_stages(predictions)
    box = dataclasses.replace(_evaluate(dataset, rows, max_dets, seconds), stages=stages)
    mask = _evaluate(dataset, rows, max_dets, seconds, iou_type="segm", extra=(gt_fields, dt_fields))
    return InstanceMetrics("segment", box, mask=dataclasses.replace(mask, stages=stages))


def keypoint_map(
    pose_or_predictions: Any,
    data: DetectionSet | str | os.PathLike[str],
    *,
    max_dets: int = 100,
    sigmas: Any = None,
    kpt_shape: tuple[int, int] | None = None,
    split: str = "val",
    images: str | os.PathLike[str] | None = None,
    batch_size: int | str | None = "auto",
    progress: bool | None = False,
) -> InstanceMetrics:
    """COCO box and keypoint (OKS) ``mAP50`` / ``mAP50-95`` of a pose model (or its predictions), by
    ``pycocotools`` (``COCOeval`` ``bbox`` and ``keypoints``).

    A true object with no labelled keypoint is ignored by the OKS mAP (COCO's rule), and counted by the box mAP.

    Args:
        pose_or_predictions: :func:`amdinfer.yolo`'s pipeline of a pose model (run through ``map``, timed), or one
            prediction per image: :class:`~amdinfer.results.Detections` with ``keypoints`` in the image's pixels,
            or ``(k, 6 + K * D)`` arrays ``x1, y1, x2, y2, score, class`` then ``K`` keypoints of ``D`` (2 or 3)
            values (Ultralytics' pose rows).
        data: a :class:`DetectionSet` read with ``task="pose"``, or what :func:`load_detection_set` reads
            (``kpt_shape`` goes to it when the yaml has none).
        sigmas: the per-keypoint OKS sigmas (default: :func:`keypoint_sigmas` of the set's ``K``).
        max_dets, split, images, batch_size, progress: as :func:`detection_map`.

    Returns:
        An :class:`InstanceMetrics` with ``box`` and ``pose``.

    Raises:
        InputError: as :func:`detection_map`; predictions of another keypoint count than the set, or sigmas not
            one per keypoint.
        BackendUnavailableError: ``pycocotools`` is not installed.

    Example:
        >>> import numpy as np
        >>> from amdinfer.metrics import DetectionSet
        >>> truth = DetectionSet(("a.png",), (np.array([[0, 0, 10, 10.0]]),), (np.array([0]),), ("p",), ((20, 20),),
        ...                      "x", keypoints=(np.array([[[5, 5, 2.0]]]),), areas=(np.array([100.0]),))
        >>> off = np.array([[0, 0, 10, 10, 0.9, 0, 8, 9]])  # 5 px off, sigma 1: OKS exp(-25 / (4 * 2 * 100)) = 0.97
        >>> round(keypoint_map([off], truth).pose.map50_95, 6)  # matched at IoU 0.50 ... 0.95
        1.0
    """
    dataset = _load(data, "pose", split, images, kpt_shape)
    predictions, seconds = _predictions(pose_or_predictions, dataset, batch_size, progress)
    k = int(dataset.keypoints[0].shape[1]) if dataset.keypoints else 0
    chosen = keypoint_sigmas(k) if sigmas is None else np.asarray(sigmas, np.float64).reshape(-1)
    if chosen.shape != (k,) or not np.all(chosen > 0):
        raise InputError(f"sigmas: got {chosen.shape[0]} values, expected {k} positive ones (one per keypoint)")
    rows, points = [], []
    for i, p in enumerate(predictions):
        kp = getattr(p, "keypoints", None)
        if kp is not None or hasattr(p, "boxes"):
            r, arr = p, None if kp is None else np.asarray(getattr(kp, "data", kp), np.float64)
        else:
            a = np.asarray(p, np.float64)
            a = a.reshape(0, 6 + 3 * k) if a.size == 0 else a
            d = (a.shape[1] - 6) / k if a.ndim == 2 and k else 0
            if d not in (2, 3):
                raise InputError(f"predictions[{i}]: got shape {a.shape}, expected (k, 6 + {k} * 2 or 3): x1, y1, "
                                 "x2, y2, score, class, then the keypoints")  # fmt: skip
            r, arr = a[:, :6], a[:, 6:].reshape(len(a), k, int(d))
        rows.append(_prediction_rows(r, i, len(dataset.names)))
        if arr is None or arr.ndim != 3 or arr.shape[:2] != (len(rows[-1]), k):
            what = "none" if arr is None else f"shape {arr.shape}"
            raise InputError(f"predictions[{i}]: keypoints: got {what}, expected ({len(rows[-1])}, {k}, 2 or 3)")
        points.append(arr)
    gt_fields = [{"keypoints": _flat(kp), "num_keypoints": int((kp[:, 2] > 0).sum()), "area": float(a)}
                 for kps, areas in zip(dataset.keypoints, dataset.areas) for kp, a in zip(kps, areas)]  # fmt: skip
    dt_fields = [{"keypoints": _flat(kp)} for kps in points for kp in kps]
    stages = mean_stages(predictions)
    box = dataclasses.replace(_evaluate(dataset, rows, max_dets, seconds), stages=stages)
    pose = _evaluate(dataset, rows, max_dets, seconds, iou_type="keypoints", extra=(gt_fields, dt_fields),
                     sigmas=chosen)  # fmt: skip
    return InstanceMetrics("pose", box, pose=dataclasses.replace(pose, stages=stages))


def _flat(kp: np.ndarray) -> list[float]:
    """``x, y, v`` per keypoint, flat (a prediction without visibility gets ``v = 1``)."""
    kp = np.asarray(kp, np.float64)
    if kp.shape[1] == 2:
        kp = np.column_stack([kp, np.ones(len(kp))])
    return [float(v) for v in kp.ravel()]
