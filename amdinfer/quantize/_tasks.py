"""Task metrics: a precision change judged in the model's own metric, against the float model's answers.

One small seam serves :func:`~amdinfer.quantize.evaluate`, the int8 accuracy guard, :class:`AutoMixedPrecision`
and anything that reads a budget such as ``"map50>=0.98"``: a :class:`TaskMetric` turns raw outputs into
answers (:meth:`TaskMetric.answers`), computes named metrics of the quantized answers with the float model's
answers as the truth (:meth:`TaskMetric.compute`), and judges them against :class:`Bound`\\ s
(:meth:`TaskMetric.judge`) into a :class:`TaskVerdict`: ``PASS``, ``FAIL`` or ``NOT JUDGED``.

============  ==========================================================================  ====================
task          metrics (float answers are the truth)                                        not judged below
============  ==========================================================================  ====================
``detect``    ``map50`` (COCO AP at IoU 0.5), ``f1``, ``precision``, ``recall``             8 images, 20 boxes
``classify``  ``top1`` (same top class), ``top5`` (float top class in the quantized top 5)  8 items
``ocr``       ``cer`` (character error rate), ``lines`` (lines read identically)            8 items, 20 lines
``embed``     ``cosine`` (mean row cosine), ``retrieval_top1`` (same nearest neighbour)     8 items
``generic``   ``cosine``, ``rms``: each output, or each channel group of one, on its scale   8 items
============  ==========================================================================  ====================

A detector or OCR model that gives far fewer answers than the float model (fewer than half, once the float
model gave at least :data:`COLLAPSE_MIN` answers) is a ``FAIL`` whatever else it measures, even on too few
items for a verdict: 0 boxes where the float model found 9 is a failure, not a lack of evidence.

Example:
    >>> import numpy as np
    >>> float_boxes = [np.array([[0, 0, 10, 10, 0.9, 1]])] * 10    # 10 images, 1 box each (x1 y1 x2 y2 score class)
    >>> verdict = DetectTask().judge([np.zeros((0, 6))] * 10, float_boxes, precision="int8")
    >>> verdict.verdict, verdict.metrics["recall"], verdict.reasons[0]
    ('FAIL', 0.0, 'collapsed: 0 boxes where the float model gave 10 (fewer than half)')
"""

from __future__ import annotations

import abc
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import onnx

from ..errors import InputError, OptionError

__all__ = [
    "COLLAPSE_MIN",
    "FAIL",
    "METRICS",
    "NOT_JUDGED",
    "PASS",
    "TASKS",
    "Bound",
    "ClassifyTask",
    "DetectTask",
    "EmbedTask",
    "GenericTask",
    "OcrTask",
    "TaskMetric",
    "TaskVerdict",
    "average_precision50",
    "box_agreement",
    "character_error_rate",
    "make_task",
    "scale_groups",
    "task_from_model",
]

PASS, FAIL, NOT_JUDGED = "PASS", "FAIL", "NOT JUDGED"
#: The task names (``evaluate(task=...)``, ``amdinfer quantize --task``; plus ``"auto"``).
TASKS = ("detect", "classify", "ocr", "embed", "generic")
#: Every metric a bound can name, with its direction: ``">="`` higher is better, ``"<="`` lower is better.
METRICS: dict[str, str] = {
    "map50": ">=",
    "f1": ">=",
    "precision": ">=",
    "recall": ">=",
    "top1": ">=",
    "top5": ">=",
    "cer": "<=",
    "lines": ">=",
    "cosine": ">=",
    "retrieval_top1": ">=",
    "rms": "<=",
}
#: The collapse rule applies once the float model gave at least this many answers (boxes, lines).
COLLAPSE_MIN = 5
#: Channels whose magnitudes span more than this factor are judged in groups (see :func:`scale_groups`).
SCALE_SPREAD = 100.0
#: A mixed-scale output splits at its widest gap between sorted channel magnitudes when it exceeds this factor.
SCALE_GAP = 10.0


# ---------------------------------------------------------------------------------------------- bounds
@dataclass(frozen=True)
class Bound:
    """One threshold on one metric: ``map50 >= 0.95``, ``cer <= 0.03``.

    Example:
        >>> b = Bound.parse("map50>=0.98")
        >>> b, b.holds(0.99), b.holds(0.5), b.error(0.99), b.error_tolerance
        (Bound('map50>=0.98'), True, False, 0.010000000000000009, 0.020000000000000018)
    """

    metric: str
    op: str
    value: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise OptionError(f"bound: got metric {self.metric!r}, expected one of {list(METRICS)}")
        if self.op != METRICS[self.metric]:
            raise OptionError(
                f"bound on {self.metric}: got {self.op!r}, expected {METRICS[self.metric]!r} "
                f"({'higher' if METRICS[self.metric] == '>=' else 'lower'} is better)"
            )
        v = self.value
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise OptionError(f"bound on {self.metric}: got {v!r}, expected a finite number >= 0")
        if self.op == ">=" and v > 1:
            raise OptionError(f"bound on {self.metric}: got {v!r}, expected a fraction in [0, 1]")

    @classmethod
    def parse(cls, text: str) -> Bound:
        """``"f1>=0.95"``, ``"cer<=0.02"`` (spaces allowed).

        Raises:
            OptionError: not ``METRIC>=VALUE`` or ``METRIC<=VALUE`` with a known metric.
        """
        m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(>=|<=)\s*([0-9.eE+-]+)\s*", str(text))
        if m is None:
            raise OptionError(f"bound: got {text!r}, expected METRIC>=VALUE or METRIC<=VALUE, e.g. 'map50>=0.98'")
        try:
            value = float(m.group(3))
        except ValueError:
            raise OptionError(f"bound: got {text!r}, whose value {m.group(3)!r} is not a number") from None
        return cls(m.group(1), m.group(2), value)

    def holds(self, value: float | None) -> bool:
        """Whether ``value`` meets the bound (``None`` or NaN never does)."""
        if value is None or not math.isfinite(value):
            return False
        return value >= self.value if self.op == ">=" else value <= self.value

    def error(self, value: float | None) -> float:
        """The value as an error, lower is better: ``1 - value`` for ``>=`` metrics, ``value`` for ``<=``."""
        if value is None or not math.isfinite(value):
            return math.inf
        return 1.0 - value if self.op == ">=" else value

    @property
    def error_tolerance(self) -> float:
        """The bound as a bound on :meth:`error` (``AutoMixedPrecision(tolerance=...)``)."""
        return 1.0 - self.value if self.op == ">=" else self.value

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    def __repr__(self) -> str:
        return f"Bound({str(self)!r})"


@dataclass(frozen=True)
class TaskVerdict:
    """A task metric's judgement of the quantized answers against the float model's.

    Attributes:
        task: the task name.
        verdict: ``"PASS"``, ``"FAIL"`` or ``"NOT JUDGED"``.
        metrics: every metric computed (``None`` where it does not apply, e.g. ``map50`` without scores).
        bounds: the bounds judged.
        items: held-out items (images, rows, lines) judged.
        answers: ``(float answers, quantized answers)``: boxes, lines or items.
        reasons: why it failed, or why it was not judged, one line each.

    Example:
        >>> v = TaskVerdict("classify", "PASS", {"top1": 1.0}, (Bound.parse("top1>=0.97"),), 8, (8, 8))
        >>> v.passed, v.judged
        (True, True)
    """

    task: str
    verdict: str
    metrics: dict[str, float | None]
    bounds: tuple[Bound, ...]
    items: int
    answers: tuple[int, int]
    reasons: tuple[str, ...] = ()
    unit: str = "items"
    collapsed: bool = False

    @property
    def passed(self) -> bool:
        """``verdict == "PASS"``."""
        return self.verdict == PASS

    @property
    def judged(self) -> bool:
        """``verdict != "NOT JUDGED"``."""
        return self.verdict != NOT_JUDGED

    def summary(self) -> str:
        """One line: the metrics with their bounds."""
        bound_of = {b.metric: b for b in self.bounds}
        parts = []
        for name, value in self.metrics.items():
            if value is None:
                continue
            b = bound_of.get(name)
            parts.append(f"{name} {value:.4f}" + (f" ({b.op} {b.value:g})" if b is not None else ""))
        f, q = self.answers
        return f"{', '.join(parts) or 'no metric'}; {q} {self.unit} against the float model's {f}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "task": self.task,
            "verdict": self.verdict,
            "metrics": dict(self.metrics),
            "bounds": [str(b) for b in self.bounds],
            "items": self.items,
            "answers": {"float": self.answers[0], "quantized": self.answers[1], "unit": self.unit},
            "reasons": list(self.reasons),
            "collapsed": self.collapsed,
        }


# ---------------------------------------------------------------------------------------------- the seam
#: Default bounds per task and metric: (int8 and other 8-bit or unknown precisions, fp16/bf16/fp32).
DEFAULT_BOUNDS: dict[str, dict[str, tuple[float, float]]] = {
    "detect": {"map50": (0.95, 0.995), "f1": (0.95, 0.995)},
    "classify": {"top1": (0.97, 0.995)},
    "ocr": {"cer": (0.03, 0.005)},
    "embed": {"cosine": (0.98, 0.999)},
    "generic": {"cosine": (0.98, 0.999), "rms": (1e-1, 8e-2)},
}


def _sixteen_bit(precision: str | None) -> bool:
    return precision in ("fp16", "bf16", "fp32", "float16", "bfloat16")


class TaskMetric(abc.ABC):
    """A task's metric: answers from raw outputs, metrics against the float answers, bounds, verdict.

    Subclasses set :attr:`name`, :attr:`metrics` (the metric names :meth:`compute` returns, the first one
    the task's main metric), :attr:`unit` and :attr:`min_items`, and write :meth:`answers` and
    :meth:`compute`. :meth:`judge` is the template every verdict goes through.

    Example:
        >>> task = ClassifyTask()
        >>> task.name, task.metrics, [str(b) for b in task.default_bounds("int8")]
        ('classify', ('top1', 'top5'), ['top1>=0.97'])
    """

    name: ClassVar[str] = ""
    metrics: ClassVar[tuple[str, ...]] = ()
    #: What one answer is, for messages (``"boxes"``, ``"lines"``, ``"items"``).
    unit: ClassVar[str] = "items"
    #: Fewer held-out items than this: ``NOT JUDGED``.
    min_items: ClassVar[int] = 8
    #: Fewer float answers than this: ``NOT JUDGED`` (0: no such rule).
    min_answers: ClassVar[int] = 0
    #: Whether far fewer quantized answers than float ones is a failure (detections, text lines).
    collapses: ClassVar[bool] = False

    @abc.abstractmethod
    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        """One answer per held-out item from the raw outputs of each batch (a batch of N gives N answers)."""

    @abc.abstractmethod
    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        """The metrics of :attr:`metrics` of the quantized answers, the float model's answers as the truth."""

    def count(self, answers: Sequence[Any]) -> int:
        """How many answers the items hold (boxes, lines; one per item by default)."""
        return len(answers)

    def items(self, answers: Sequence[Any]) -> int:
        """How many held-out items the answers answer (one per answer by default)."""
        return len(answers)

    def default_bounds(self, precision: str | None) -> tuple[Bound, ...]:
        """The bounds of :data:`DEFAULT_BOUNDS` for a precision (int8 within 3 points, fp16 within 0.5)."""
        pick = 1 if _sixteen_bit(precision) else 0
        return tuple(Bound(m, METRICS[m], v[pick]) for m, v in DEFAULT_BOUNDS[self.name].items())

    def judge(
        self,
        quantized: Sequence[Any],
        reference: Sequence[Any],
        bounds: Sequence[Bound] | None = None,
        *,
        precision: str | None = "int8",
    ) -> TaskVerdict:
        """Compute the metrics and judge them: ``FAIL`` on a collapse or a bound missed, ``NOT JUDGED`` on too
        little data, else ``PASS``.

        Args:
            quantized: the quantized model's answers, one per item.
            reference: the float model's answers, one per item.
            bounds: the bounds (default :meth:`default_bounds` of ``precision``); each must name a metric of
                this task.
            precision: picks the default bounds.

        Raises:
            InputError: the two answer lists differ in length.
            OptionError: a bound names a metric this task does not compute.
        """
        if len(quantized) != len(reference):
            raise InputError(f"{self.name}: {len(quantized)} quantized answers but {len(reference)} float answers")
        chosen = tuple(self.default_bounds(precision) if bounds is None else bounds)
        foreign = [str(b) for b in chosen if b.metric not in self.metrics]
        if foreign:
            raise OptionError(f"bounds {foreign}: not metrics of task {self.name!r}, which has {list(self.metrics)}")
        n_f, n_q = self.count(reference), self.count(quantized)
        values = self.compute(quantized, reference)
        items = self.items(reference)
        failures: list[str] = []
        collapsed = self.collapses and n_f >= COLLAPSE_MIN and n_q < 0.5 * n_f
        if collapsed:
            failures.append(f"collapsed: {n_q} {self.unit} where the float model gave {n_f} (fewer than half)")
        short = self._too_little(items, n_f)
        if short and not collapsed:
            return TaskVerdict(self.name, NOT_JUDGED, values, chosen, items, (n_f, n_q), (short,), self.unit)
        for b in chosen:
            v = values.get(b.metric)
            if v is None:
                continue  # e.g. map50 of boxes without scores: judged by the other bounds
            if not b.holds(v):
                failures.append(f"{b.metric} {v:.4f} {'<' if b.op == '>=' else '>'} {b.value:g}")
        verdict = FAIL if failures else PASS
        return TaskVerdict(self.name, verdict, values, chosen, items, (n_f, n_q), tuple(failures), self.unit, collapsed)

    def _too_little(self, items: int, float_answers: int) -> str | None:
        if items < self.min_items or float_answers < self.min_answers:
            need = f">= {self.min_items} items" + (
                f" and >= {self.min_answers} float {self.unit}" if self.min_answers else ""
            )
            have = f"{items} items" + (f", {float_answers} float {self.unit}" if self.min_answers else "")
            return f"too little held-out data: {have}; a verdict needs {need}"
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ---------------------------------------------------------------------------------------------- helpers
def _float_outputs(out: Mapping[str, np.ndarray]) -> list[str]:
    return [k for k, v in out.items() if np.asarray(v).dtype.kind == "f"]


def _pick_output(outputs: Sequence[Mapping[str, np.ndarray]], name: str | None, task: str, ndim: int | None) -> str:
    first = outputs[0]
    if name is not None:
        if name not in first:
            raise OptionError(f"task {task!r}: output {name!r} is not an output; the model has {list(first)}")
        return name
    floats = _float_outputs(first)
    if ndim is not None:
        sized = [k for k in floats if np.asarray(first[k]).ndim == ndim]
        if sized:
            return sized[0]
    if not floats:
        raise OptionError(f"task {task!r}: the model has no floating-point output (outputs {list(first)})")
    return floats[0]


def _rows(x: np.ndarray) -> np.ndarray:
    """One row per batch item (axis 0); a tensor of fewer than 2 dimensions is one row."""
    a = np.asarray(x)
    return a.reshape(a.shape[0], -1) if a.ndim >= 2 else a.reshape(1, -1)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row cosines: two zero rows agree (1), a zero row against another (or a non-finite value) gives 0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        cos = np.einsum("ij,ij->i", a, b) / (na * nb)
    cos = np.where((na == 0) & (nb == 0), 1.0, cos)
    return np.where(np.isfinite(cos), np.clip(cos, -1.0, 1.0), 0.0)


def _ranges(idx: np.ndarray) -> str:
    runs, start, prev = [], int(idx[0]), int(idx[0])
    for i in idx[1:]:
        if int(i) != prev + 1:
            runs.append((start, prev))
            start = int(i)
        prev = int(i)
    runs.append((start, prev))
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def scale_groups(reference: np.ndarray) -> list[tuple[str, int, np.ndarray]]:
    """Channel groups of one output that each get judged on their own scale: ``[(label, axis, channels)]``.

    Only outputs of 3 or more dimensions (channels at each position: detection heads, maps) are grouped; a
    2-D ``(N, features)`` output (logits, an embedding) is one kind of value, however its ranges differ. The
    channel axis is the shortest non-batch axis (YOLOv8's ``(N, 4 + nc, A)``: axis 1; YOLOv5's
    ``(N, A, 5 + nc)``: axis 2). When the channels' magnitudes (``max |x|`` over the other axes) span more
    than :data:`SCALE_SPREAD`, they split in two at the widest gap between sorted magnitudes (if it is wider
    than :data:`SCALE_GAP`): box coordinates (0-1024) and class scores (0-1) become two groups, while a
    class that rarely fires stays with the other scores. Otherwise the whole output is one group, labelled
    ``""``.

    Example:
        >>> x = np.zeros((1, 7, 100)); x[0, :4] = 500.0; x[0, 4:] = 0.5; x[0, 6] = 0.01
        >>> [(label, axis, ch.tolist()) for label, axis, ch in scale_groups(x)]
        [('ch 0-3', 1, [0, 1, 2, 3]), ('ch 4-6', 1, [4, 5, 6])]
    """
    a = np.asarray(reference)
    whole = [("", 0, np.arange(0))]
    if a.ndim < 3 or a.dtype.kind != "f" or a.size == 0:
        return whole
    axis = 1 + int(np.argmin(a.shape[1:]))
    if a.shape[axis] < 2 or a.shape[axis] > 4096:
        return whole
    moved = np.moveaxis(np.abs(np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)), axis, 0)
    mag = moved.reshape(moved.shape[0], -1).max(axis=1)
    live = np.sort(mag[mag > 0])[::-1]
    if live.size < 2 or live[0] / live[-1] <= SCALE_SPREAD:
        return whole
    gaps = live[:-1] / live[1:]
    cut = int(np.argmax(gaps))
    if gaps[cut] <= SCALE_GAP:
        return whole
    high = np.nonzero(mag >= live[cut])[0]
    low = np.nonzero(mag < live[cut])[0]  # channels that are all zero join the small-scale group
    return sorted(((f"ch {_ranges(g)}", axis, g) for g in (high, low)), key=lambda t: int(t[2][0]))


def group_views(q: np.ndarray, r: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``[(label, quantized rows, reference rows)]`` for each scale group of the reference (rows: batch items)."""
    out: list[tuple[str, np.ndarray, np.ndarray]] = []
    for label, axis, idx in scale_groups(r):
        if not label:
            out.append((label, q, r))
        else:
            out.append((label, np.take(q, idx, axis=axis), np.take(r, idx, axis=axis)))
    return out


# ---------------------------------------------------------------------------------------------- detect
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


# ---------------------------------------------------------------------------------------------- classify
def _ranked(row: np.ndarray) -> np.ndarray:
    x = np.nan_to_num(np.asarray(row, np.float64).ravel(), nan=-np.inf)
    return np.argsort(-x, kind="stable")  # ties go to the lower index, NaN ranks lowest


class ClassifyTask(TaskMetric):
    """Class scores, the float model's top class the truth: ``top1`` (the quantized top class is the same)
    and ``top5`` (the float top class is among the quantized five best; ``None`` below 5 classes).

    Args:
        output: the class-score output (default: the first 2-D float output).

    Example:
        >>> q = [np.array([0.1, 0.7, 0.2]), np.array([0.5, 0.4, 0.1])]
        >>> f = [np.array([0.1, 0.8, 0.1]), np.array([0.3, 0.6, 0.1])]
        >>> ClassifyTask().compute(q, f)
        {'top1': 0.5, 'top5': None}
    """

    name = "classify"
    metrics = ("top1", "top5")

    def __init__(self, *, output: str | None = None) -> None:
        self.output = output

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        name = _pick_output(outputs, self.output, self.name, 2)
        return [row for o in outputs for row in _rows(o[name])]

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        if not reference:
            return {"top1": 1.0, "top5": None}
        top1 = top5 = 0
        classes = min(np.asarray(r).size for r in reference)
        for q, r in zip(quantized, reference):
            truth = _ranked(r)[0]
            ranked = _ranked(q)
            top1 += int(ranked[0] == truth)
            top5 += int(truth in ranked[:5])
        n = len(reference)
        return {"top1": top1 / n, "top5": top5 / n if classes >= 5 else None}


# ---------------------------------------------------------------------------------------------- embed
class EmbedTask(TaskMetric):
    """Embeddings: ``cosine`` (mean row cosine with the float embedding) and ``retrieval_top1`` (each item's
    nearest other item, by cosine among the quantized embeddings, is the one the float embeddings give).

    Args:
        output: the embedding output (default: the first 2-D float output, else the first float output with
            each item flattened).

    Example:
        >>> f = [np.array([1.0, 0.0]), np.array([0.9, 0.1]), np.array([0.0, 1.0])]
        >>> q = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.1, 0.9])]
        >>> {k: round(v, 3) for k, v in EmbedTask().compute(q, f).items()}
        {'cosine': 0.701, 'retrieval_top1': 0.333}
    """

    name = "embed"
    metrics = ("cosine", "retrieval_top1")

    def __init__(self, *, output: str | None = None) -> None:
        self.output = output

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        name = _pick_output(outputs, self.output, self.name, 2)
        return [row for o in outputs for row in _rows(o[name])]

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        if not reference:
            return {"cosine": 1.0, "retrieval_top1": None}
        q = np.stack([np.asarray(a, np.float64).ravel() for a in quantized])
        f = np.stack([np.asarray(a, np.float64).ravel() for a in reference])
        cosine = float(_cosines(q, f).mean())
        if len(f) < 3:
            return {"cosine": cosine, "retrieval_top1": None}
        return {"cosine": cosine, "retrieval_top1": float(np.mean(_nearest(q) == _nearest(f)))}


def _nearest(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.nan_to_num(x / np.where(norm == 0, 1.0, norm))
    sim = u @ u.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1)


# ---------------------------------------------------------------------------------------------- ocr
def _edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def character_error_rate(quantized: Sequence[Sequence[Any]], reference: Sequence[Sequence[Any]]) -> float:
    """Levenshtein edits (insertions, deletions, substitutions) over the reference's characters, summed over
    lines. Lines are strings or sequences of token ids; two empty sets give 0.

    Example:
        >>> character_error_rate(["hallo", "world"], ["hello", "world"])
        0.1
    """
    edits = sum(_edit_distance(q, r) for q, r in zip(quantized, reference))
    chars = sum(len(r) for r in reference)
    if chars == 0:
        return 0.0 if edits == 0 else 1.0
    return edits / chars


def _is_page(answer: Any) -> bool:
    return hasattr(answer, "texts") and hasattr(answer, "boxes")


def _ctc(row: np.ndarray) -> tuple[int, ...]:
    ids = np.argmax(np.asarray(row), axis=-1) if np.asarray(row).ndim == 2 else np.asarray(row).ravel()
    out, prev = [], -1
    for i in ids.tolist():
        if i != prev and i != 0:
            out.append(int(i))
        prev = i
    return tuple(out)


class OcrTask(TaskMetric):
    """Text: ``cer`` (character error rate against the float text) and ``lines`` (share of float lines read
    identically).

    Answers are either one text line per item (a string or a token sequence; from a recogniser's raw
    ``(N, T, classes)`` output, greedy CTC: argmax, repeats merged, blank 0 dropped) or one page per item (a
    :class:`~amdinfer.results.TextLines` of :func:`amdinfer.ocr`). Pages: the lines match one to one by box
    IoU >= ``iou`` (greedily); a float line without a match counts all its characters as errors, a quantized
    line without one all of its own.

    Args:
        output: the recogniser output (default: the first 3-D float output).
        iou: the box IoU at which lines of two pages match.

    Example:
        >>> OcrTask().compute(["hallo", "world"], ["hello", "world"])
        {'cer': 0.1, 'lines': 0.5}
    """

    name = "ocr"
    metrics = ("cer", "lines")
    unit = "lines"
    min_answers = 20
    collapses = True

    def __init__(self, *, output: str | None = None, iou: float = 0.5) -> None:
        if not isinstance(iou, (int, float)) or isinstance(iou, bool) or not 0.0 < iou <= 1.0:
            raise OptionError(f"iou: got {iou!r}, expected a float in (0, 1]")
        self.output, self.iou = output, float(iou)

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        name = _pick_output(outputs, self.output, self.name, 3)
        found: list[Any] = []
        for o in outputs:
            x = np.asarray(o[name])
            if x.ndim != 3:
                raise OptionError(
                    f"task 'ocr': output {name!r} of shape {x.shape} is not a recogniser's (N, T, classes); "
                    "judge the cascade's pages (OcrTask().judge(quantized_pages, float_pages))"
                )
            found.extend(_ctc(row) for row in x)
        return found

    def count(self, answers: Sequence[Any]) -> int:
        return sum(len(a.texts) if _is_page(a) else int(len(a) > 0) for a in answers)

    def _pairs(self, quantized: Sequence[Any], reference: Sequence[Any]) -> tuple[list[Any], list[Any], int]:
        """Matched (quantized, float) texts, unmatched ones paired with an empty line, and the float line count."""
        qs: list[Any] = []
        rs: list[Any] = []
        n_float = 0
        for q, r in zip(quantized, reference):
            if not _is_page(r):
                qs.append(q)
                rs.append(r)
                n_float += 1
                continue
            qt, rt = [t or "" for t in (q.texts or [])], [t or "" for t in (r.texts or [])]
            n_float += len(rt)
            pairs = _match_lines(np.asarray(q.boxes).reshape(-1, 4), np.asarray(r.boxes).reshape(-1, 4), self.iou)
            for a, b in pairs:
                qs.append(qt[a])
                rs.append(rt[b])
            for b in sorted(set(range(len(rt))) - {b for _, b in pairs}):
                qs.append("")
                rs.append(rt[b])
            for a in sorted(set(range(len(qt))) - {a for a, _ in pairs}):
                qs.append(qt[a])
                rs.append("")
        return qs, rs, n_float

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        qs, rs, n_float = self._pairs(quantized, reference)
        edits = sum(_edit_distance(q, r) for q, r in zip(qs, rs))
        chars = sum(len(r) for r in rs)
        cer = (0.0 if edits == 0 else 1.0) if chars == 0 else edits / chars
        same = sum(1 for q, r in zip(qs, rs) if len(r) and tuple(q) == tuple(r))
        float_lines = sum(1 for r in rs if len(r)) if n_float else 0
        return {"cer": cer, "lines": same / float_lines if float_lines else 1.0}


def _match_lines(qb: np.ndarray, rb: np.ndarray, iou: float) -> list[tuple[int, int]]:
    from ..reference import box_iou

    if not len(qb) or not len(rb):
        return []
    m = box_iou(qb.astype(np.float64), rb.astype(np.float64))
    qi, ri = np.nonzero(m >= iou)
    order = np.argsort(-m[qi, ri], kind="stable")
    used_q: set[int] = set()
    used_r: set[int] = set()
    pairs = []
    for k in order:
        a, b = int(qi[k]), int(ri[k])
        if a not in used_q and b not in used_r:
            used_q.add(a)
            used_r.add(b)
            pairs.append((a, b))
    return pairs


# ---------------------------------------------------------------------------------------------- generic
@dataclass(frozen=True)
class GroupError:
    """One output, or one channel group of it (``group`` names the channels), judged on its own scale.

    Example:
        >>> GroupError("output0", "ch 4-14", 0.02, 0.0).label
        'output0[ch 4-14]'
    """

    output: str
    group: str
    rms: float
    cosine: float
    rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name`` or ``name[ch a-b]``."""
        return f"{self.output}[{self.group}]" if self.group else self.output


def group_errors(
    quantized: Sequence[Mapping[str, np.ndarray]], reference: Sequence[Mapping[str, np.ndarray]]
) -> list[GroupError]:
    """Each float output's (or channel group's, :func:`scale_groups`) RMS on its own range and mean row cosine.

    Samples are stacked along axis 0 (one row per batch item); where their shapes differ (dynamic axes),
    each item is one row and the output is one group.

    Raises:
        InputError: a quantized output's shape differs from the float one's.
    """
    from ..verify import rms_error

    found = []
    for name in _float_outputs(reference[0]):
        qa = [np.asarray(q[name]) for q in quantized]
        ra = [np.asarray(r[name]) for r in reference]
        for i, (a, b) in enumerate(zip(qa, ra)):
            if a.shape != b.shape:
                raise InputError(
                    f"output {name!r}, sample {i}: quantized shape {a.shape} differs from the float model's {b.shape}"
                )
        try:
            q_all = np.concatenate([a if a.ndim else a.reshape(1) for a in qa], axis=0)
            r_all = np.concatenate([b if b.ndim else b.reshape(1) for b in ra], axis=0)
        except ValueError:  # dynamic shapes that differ between samples
            cos = np.concatenate([_cosines(_rows(a), _rows(b)) for a, b in zip(qa, ra)])
            rms = rms_error(np.concatenate([a.ravel() for a in qa]), np.concatenate([b.ravel() for b in ra]))
            found.append(GroupError(name, "", rms, float(cos.mean()), int(cos.size)))
            continue
        for label, a, b in group_views(q_all, r_all):
            cos = _cosines(_rows(a), _rows(b))
            found.append(GroupError(name, label, rms_error(a, b), float(cos.mean()), int(cos.size)))
    return found


class GenericTask(TaskMetric):
    """Tensors: each float output, or each channel group of an output whose channels have very different
    ranges (:func:`scale_groups`), judged on its own scale; ``cosine`` is the worst mean row cosine and
    ``rms`` the worst RMS (:func:`amdinfer.verify.rms_error`, scale-free) over them.

    Example:
        >>> q = [{"y": np.ones((8, 4))}]; f = [{"y": np.ones((8, 4))}]
        >>> GenericTask().judge(GenericTask().answers(q), GenericTask().answers(f)).verdict
        'PASS'
    """

    name = "generic"
    metrics = ("cosine", "rms")

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        return [dict(o) for o in outputs]

    def count(self, answers: Sequence[Any]) -> int:
        return self.items(answers)

    def items(self, answers: Sequence[Any]) -> int:
        return sum(_items(a) for a in answers)  # batch rows, not batches

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        errors = group_errors(quantized, reference)
        if not errors:
            return {"cosine": None, "rms": None}
        return {"cosine": min(e.cosine for e in errors), "rms": max(e.rms for e in errors)}


def _items(out: Mapping[str, np.ndarray]) -> int:
    first = next(iter(out.values()), None)
    a = np.asarray(first) if first is not None else np.zeros(0)
    return int(a.shape[0]) if a.ndim else 1


# ---------------------------------------------------------------------------------------------- choosing
_TASK_CLASSES: dict[str, type[TaskMetric]] = {
    "detect": DetectTask,
    "classify": ClassifyTask,
    "ocr": OcrTask,
    "embed": EmbedTask,
    "generic": GenericTask,
}
#: Ultralytics' ``task`` metadata -> the task that judges it (segment, pose and obb heads carry more than
#: boxes in their first output: they are judged as tensors until they have a metric of their own).
_ULTRALYTICS = {"detect": "detect", "classify": "classify"}
#: The recipes' tasks (``amdinfer.yolo`` builds a detector...).
RECIPE_TASKS = {"yolo": "detect", "classify": "classify", "ocr": "ocr", "embed": "embed"}


def make_task(task: str | TaskMetric, **options: Any) -> TaskMetric:
    """The :class:`TaskMetric` of a task name (``options`` go to its constructor), or ``task`` itself.

    Example:
        >>> make_task("detect", iou=0.6)
        DetectTask(iou=0.6)
    """
    if isinstance(task, TaskMetric):
        if options:
            raise OptionError(f"task: got a TaskMetric ({task!r}) together with {sorted(options)}; pass one")
        return task
    if task not in _TASK_CLASSES:
        raise OptionError(f"task: got {task!r}, expected one of {['auto', *TASKS]} or a TaskMetric")
    return _TASK_CLASSES[task](**options)


def _input_hw(feeds: Sequence[Mapping[str, np.ndarray]]) -> tuple[int, int] | None:
    for v in feeds[0].values() if feeds else ():
        a = np.asarray(v)
        if a.ndim == 4 and a.dtype.kind == "f":
            return int(a.shape[2]), int(a.shape[3])
    return None


def task_from_model(
    proto: onnx.ModelProto | None,
    outputs: Sequence[Mapping[str, np.ndarray]] = (),
    feeds: Sequence[Mapping[str, np.ndarray]] = (),
    *,
    recipe: str | None = None,
) -> tuple[str, str]:
    """The task a model's answers are judged in, and why: ``(task, reason)``.

    In order: the recipe that built the pipeline (``yolo`` -> detect, ...); Ultralytics' ``task`` metadata
    (``detect``, ``classify``); the first output's layout: a YOLO head (v8/v11 ``(N, 4 + nc, A)`` or v5
    ``(N, 3A, 5 + nc)`` with ``A`` the anchors of the input size at strides 8/16/32); one 2-D float output
    of several columns -> classify; else generic. Embedding and OCR models are named (``task="embed"``).

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> out = [{"output0": np.zeros((1, 6, 84), np.float32)}]
        >>> task_from_model(None, out, [{"images": np.zeros((1, 3, 64, 64), np.float32)}])
        ('detect', 'output0 is a YOLO v8 head (1, 6, 84)')
    """
    if recipe is not None:
        if recipe not in RECIPE_TASKS:
            raise OptionError(f"recipe: got {recipe!r}, expected one of {list(RECIPE_TASKS)}")
        return RECIPE_TASKS[recipe], f"the {recipe} recipe"
    meta = {p.key: p.value for p in proto.metadata_props} if proto is not None else {}
    if meta.get("task") in _ULTRALYTICS:
        return _ULTRALYTICS[meta["task"]], f"metadata task: {meta['task']}"
    if not outputs:
        return "generic", "no outputs to look at"
    first = outputs[0]
    floats = _float_outputs(first)
    if floats:
        name = floats[0]
        a = np.asarray(first[name])
        hw = _input_hw(feeds)
        if a.ndim == 3 and hw is not None:
            from ..postprocess import detect_layout

            layout = detect_layout(a.shape[1:], hw)
            anchors = sum(-(-hw[0] // s) * -(-hw[1] // s) for s in (8, 16, 32))
            if (layout == "v8" and a.shape[2] == anchors) or (layout == "v5" and a.shape[1] == 3 * anchors):
                return "detect", f"{name} is a YOLO {layout} head {a.shape}"
    if len(first) == 1 and floats:
        a = np.asarray(first[floats[0]])
        if a.ndim == 2 and a.shape[1] >= 2:
            return "classify", f"one 2-D float output {floats[0]} {a.shape}"
    return "generic", "no task metadata or known output layout"
