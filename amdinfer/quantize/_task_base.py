"""The task-metric seam: :class:`Bound`, :class:`TaskVerdict`, :class:`TaskMetric` and the default bounds.

The tasks themselves live in ``_task_detect.py`` and ``_task_kinds.py``; :mod:`amdinfer.quantize._tasks`
gathers them (see its table).
"""

from __future__ import annotations

import abc
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError, OptionError

__all__ = [
    "COLLAPSE_MIN",
    "FAIL",
    "METRICS",
    "NOT_JUDGED",
    "PASS",
    "TASKS",
    "Bound",
    "HasVerdict",
    "TaskMetric",
    "TaskVerdict",
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


class HasVerdict:
    """``passed``/``judged`` read from a ``verdict`` attribute (``TaskVerdict``, ``QuantizationReport``).

    Example:
        >>> class V(HasVerdict):
        ...     verdict = NOT_JUDGED
        >>> V().passed, V().judged
        (False, False)
    """

    verdict: str

    @property
    def passed(self) -> bool:
        """``verdict == "PASS"``: the task metric met its bounds (on enough held-out data)."""
        return self.verdict == PASS

    @property
    def judged(self) -> bool:
        """``verdict != "NOT JUDGED"``."""
        return self.verdict != NOT_JUDGED


@dataclass(frozen=True)
class TaskVerdict(HasVerdict):
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
        >>> from amdinfer.quantize import ClassifyTask
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
