"""The ``detect`` task: boxes matched to the float model's by class and IoU (precision, recall, F1, COCO AP50)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ._task_base import TaskMetric, _pick_output

__all__ = ["DetectTask", "average_precision50", "box_agreement"]


def _split_boxes(item: Any, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(boxes (K, 4), classes (K,), scores (K,) or None) of one image's answer."""
    if hasattr(item, "boxes") and hasattr(item, "classes"):  # amdinfer.results.Detections
        boxes = np.asarray(item.boxes, np.float64).reshape(-1, 4)
        scores = getattr(item, "scores", None)
        return boxes, np.asarray(item.classes).reshape(-1), None if scores is None else np.asarray(scores, np.float64)
    if isinstance(item, tuple) and len(item) in (2, 3):
        boxes = np.asarray(item[0], np.float64).reshape(-1, 4)
        classes = np.asarray(item[-1]).reshape(-1)
        scores = np.asarray(item[1], np.float64).reshape(-1) if len(item) == 3 else None
    else:
        arr = np.asarray(item, np.float64)
        if arr.size == 0:
            return np.zeros((0, 4)), np.zeros(0), np.zeros(0)
        if arr.ndim != 2 or (arr.shape[1] != 4 and arr.shape[1] < 6):
            raise InputError(
                f"{what}: got boxes of shape {arr.shape}, expected (K, 4), (K, 6+) rows x1 y1 x2 y2 score class, "
                "(boxes, classes), (boxes, scores, classes) or a Detections"
            )
        boxes = arr[:, :4]
        classes = arr[:, 5] if arr.shape[1] >= 6 else np.zeros(len(arr))
        scores = arr[:, 4] if arr.shape[1] >= 6 else None
    if len(boxes) != len(classes) or (scores is not None and len(scores) != len(boxes)):
        raise InputError(f"{what}: {len(boxes)} boxes but {len(classes)} classes")
    return boxes, classes, scores


def _iou_same_class(qb: np.ndarray, qc: np.ndarray, rb: np.ndarray, rc: np.ndarray) -> np.ndarray:
    from ..reference import box_iou

    m = box_iou(qb, rb).astype(np.float64)
    m[qc[:, None] != rc[None, :]] = 0.0
    return m


def _greedy_matches(m: np.ndarray, iou: float) -> int:
    """One-to-one matches of an IoU matrix, greedily by IoU (ties: the earlier pair)."""
    qi, ri = np.nonzero(m >= iou)
    order = np.argsort(-m[qi, ri], kind="stable")
    used_q: set[int] = set()
    used_r: set[int] = set()
    for k in order:
        a, b = int(qi[k]), int(ri[k])
        if a not in used_q and b not in used_r:
            used_q.add(a)
            used_r.add(b)
    return len(used_q)


def box_agreement(
    quantized: Sequence[Any], reference: Sequence[Any], iou: float = 0.5
) -> tuple[float, float, float, int]:
    """Precision, recall and F1 of the quantized box sets against the reference ones, and the reference count.

    Boxes match one to one when they have the same class and IoU >= ``iou``, greedily by IoU. Counts are
    summed over images (micro average). Two empty sets agree fully. A box set is ``(K, 4)`` xyxy (one
    class), ``(K, 6+)`` rows ``x1, y1, x2, y2, score, class``, ``(boxes, classes)``, ``(boxes, scores,
    classes)`` or a :class:`~amdinfer.results.Detections`.

    Example:
        >>> q = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]])]
        >>> r = [np.array([[1, 1, 10, 10]])]
        >>> box_agreement(q, r)
        (0.5, 1.0, 0.6666666666666666, 1)
    """
    if len(quantized) != len(reference):
        raise InputError(f"box_agreement: {len(quantized)} quantized images but {len(reference)} reference images")
    matched = n_q = n_r = 0
    for i, (q, r) in enumerate(zip(quantized, reference)):
        qb, qc, _ = _split_boxes(q, f"quantized boxes[{i}]")
        rb, rc, _ = _split_boxes(r, f"reference boxes[{i}]")
        n_q += len(qb)
        n_r += len(rb)
        if len(qb) and len(rb):
            matched += _greedy_matches(_iou_same_class(qb, qc, rb, rc), iou)
    if n_q == 0 and n_r == 0:
        return 1.0, 1.0, 1.0, 0
    precision = matched / n_q if n_q else 0.0
    recall = matched / n_r if n_r else 0.0
    f1 = 2 * precision * recall / (precision + recall) if matched else 0.0
    return precision, recall, f1, n_r


def average_precision50(predictions: Sequence[Any], truth: Sequence[Any], iou: float = 0.5) -> float | None:
    """COCO mean average precision at one IoU (``AP50``): ``truth`` boxes as ground truth, ``predictions``
    with their scores.

    As ``pycocotools``' ``COCOeval`` (bbox, area "all", no detection limit, no crowd): per class, each image's
    predictions by decreasing score take the unmatched true box of the same class with the highest IoU
    >= ``iou``; the precision/recall curve over all images (predictions by decreasing score) is made
    monotone and read at the 101 recall points 0, 0.01, ..., 1; the mean over those is the class's AP, and
    the result is the mean over the classes that have true boxes. Both empty: 1.0; true boxes without a
    class: 0.0 for it. Predictions without scores give ``None``.

    Example:
        >>> truth = [np.array([[0, 0, 10, 10, 1, 0], [20, 20, 30, 30, 1, 0]])]
        >>> preds = [np.array([[0, 0, 10, 10, 0.9, 0], [50, 50, 60, 60, 0.8, 0], [20, 20, 30, 30, 0.7, 0]])]
        >>> round(average_precision50(preds, truth), 4)   # recall 0.5 at precision 1, 1.0 at 2/3
        0.835
    """
    if len(predictions) != len(truth):
        raise InputError(f"average_precision50: {len(predictions)} prediction images but {len(truth)} truth images")
    per_class: dict[int, list[tuple[float, bool]]] = {}
    n_true: dict[int, int] = {}
    for i, (p, t) in enumerate(zip(predictions, truth)):
        pb, pc, ps = _split_boxes(p, f"predictions[{i}]")
        tb, tc, _ = _split_boxes(t, f"truth[{i}]")
        if ps is None:
            if len(pb):
                return None
            ps = np.zeros(0)
        pc, tc = pc.astype(np.int64), tc.astype(np.int64)
        for c in np.unique(tc):
            n_true[int(c)] = n_true.get(int(c), 0) + int(np.count_nonzero(tc == c))
        for c in np.unique(pc):
            sel = np.nonzero(pc == c)[0]
            sel = sel[np.argsort(-ps[sel], kind="stable")]
            gt = np.nonzero(tc == c)[0]
            ious = _iou_same_class(pb[sel], pc[sel], tb[gt], tc[gt]) if len(gt) else np.zeros((len(sel), 0))
            used = np.zeros(len(gt), bool)
            rows = per_class.setdefault(int(c), [])
            for k in range(len(sel)):
                best, m = min(iou, 1 - 1e-10), -1
                for g in range(len(gt)):
                    if used[g] or ious[k, g] < best:
                        continue
                    best, m = ious[k, g], g
                if m >= 0:
                    used[m] = True
                rows.append((float(ps[sel[k]]), m >= 0))
    if not n_true:
        return 1.0 if not per_class or not any(per_class.values()) else 0.0
    recall_points = np.linspace(0.0, 1.0, 101)
    aps = []
    for c, npig in n_true.items():
        rows = per_class.get(c, [])
        if not rows:
            aps.append(0.0)
            continue
        scores = np.array([s for s, _ in rows])
        hit = np.array([h for _, h in rows])
        order = np.argsort(-scores, kind="mergesort")
        tp = np.cumsum(hit[order]).astype(np.float64)
        fp = np.cumsum(~hit[order]).astype(np.float64)
        rc = tp / npig
        pr = tp / (tp + fp + np.spacing(1))
        pr = np.maximum.accumulate(pr[::-1])[::-1]
        inds = np.searchsorted(rc, recall_points, side="left")
        q = np.where(inds < len(pr), pr[np.minimum(inds, len(pr) - 1)], 0.0)
        aps.append(float(q.mean()))
    return float(np.mean(aps))


class DetectTask(TaskMetric):
    """Detections matched to the float model's by class and IoU: ``map50``, ``f1``, ``precision``, ``recall``.

    The float model's boxes are the ground truth; the quantized model's boxes, with their scores, the
    predictions. Without ``boxes=``, raw YOLO outputs (v8/v11 ``(N, 4 + nc, A)``, v5 ``(N, A, 5 + nc)``,
    end-to-end ``(N, k, 6)``) are decoded with :func:`amdinfer.reference.non_max_suppression` at
    Ultralytics' ``predict`` defaults (``conf=0.25``, ``iou=0.7``, ``max_det=300``), boxes in model-input
    pixels.

    Args:
        boxes: ``boxes(outputs) -> [box set per image]`` decoding one batch's outputs (e.g. decode + NMS);
            a box set as :func:`box_agreement` reads it.
        iou: the IoU at which boxes match.
        conf, nms_iou, max_det: the YOLO decode when ``boxes`` is not given.
        output: the output that holds the YOLO predictions (default: the first float output).

    Example:
        >>> out = np.zeros((1, 6, 8), np.float32)                      # v8: 4 + 2 classes, 8 anchors
        >>> out[0, :, 0] = [50, 40, 20, 10, 0.1, 0.9]
        >>> DetectTask().answers([{"output0": out}])[0].tolist()      # x1 y1 x2 y2 score class
        [[40.0, 35.0, 60.0, 45.0, 0.8999999761581421, 1.0]]
    """

    name = "detect"
    metrics = ("map50", "f1", "precision", "recall")
    unit = "boxes"
    min_answers = 20
    collapses = True

    def __init__(
        self,
        *,
        boxes: Callable[[dict[str, np.ndarray]], Any] | None = None,
        iou: float = 0.5,
        conf: float = 0.25,
        nms_iou: float = 0.7,
        max_det: int = 300,
        output: str | None = None,
    ) -> None:
        if boxes is not None and not callable(boxes):
            raise OptionError(f"boxes: got {boxes!r}, expected a callable")
        for name, value in (("iou", iou), ("conf", conf), ("nms_iou", nms_iou)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise OptionError(f"{name}: got {value!r}, expected a float in [0, 1]")
        if iou <= 0:
            raise OptionError(f"iou: got {iou!r}, expected a float in (0, 1]")
        if not isinstance(max_det, int) or isinstance(max_det, bool) or max_det < 1:
            raise OptionError(f"max_det: got {max_det!r}, expected an int >= 1")
        self.boxes, self.iou, self.conf, self.nms_iou, self.max_det = boxes, float(iou), conf, nms_iou, max_det
        self.output = output

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        found: list[Any] = []
        for i, o in enumerate(outputs):
            res = self.boxes(dict(o)) if self.boxes is not None else self._decode(o)
            if isinstance(res, np.ndarray) and res.ndim == 2:
                res = [res]  # one image per batch
            try:
                found.extend(list(res))
            except TypeError:
                raise InputError(
                    f"boxes(outputs[{i}]): got {type(res).__name__}, expected one box set per image"
                ) from None
        return found

    def _decode(self, out: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        from ..reference import non_max_suppression

        name = _pick_output([out], self.output, self.name, 3)
        x = np.asarray(out[name])
        if x.ndim != 3 or x.dtype.kind != "f":
            raise OptionError(
                f"task 'detect': output {name!r} of shape {x.shape} is not a YOLO layout ((N, 4 + nc, A), "
                "(N, A, 5 + nc) or (N, k, 6)); give boxes=, a callable turning one batch's outputs into box sets"
            )
        return non_max_suppression(x, self.conf, self.nms_iou, max_det=self.max_det)

    def count(self, answers: Sequence[Any]) -> int:
        return sum(len(_split_boxes(a, "boxes")[0]) for a in answers)

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        p, r, f1, _ = box_agreement(quantized, reference, iou=self.iou)
        return {"map50": average_precision50(quantized, reference, self.iou), "f1": f1, "precision": p, "recall": r}

    def __repr__(self) -> str:
        return f"DetectTask(iou={self.iou:g}{', boxes=' + repr(self.boxes) if self.boxes else ''})"
