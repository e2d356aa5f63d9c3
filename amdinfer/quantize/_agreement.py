"""The accuracy guard of the int8 quantizers: cosine agreement of each float output with the float model.

A quantized model that answers something unrelated to the float model must not be handed over silently
(static activation quantization of a Transformer's attention mask did exactly that: sentence embeddings at a
mean cosine of 0.67 to the float ones, 0.35 for the worst, no warning). After quantizing,
:class:`~amdinfer.quantize.Int8Quantizer` and :class:`~amdinfer.quantize.DynamicInt8Quantizer` run the float
and the quantized model on a few of their samples (:data:`CHECK_SAMPLES` at most, spread over the data) on
ONNX Runtime CPU and compare each float output row by row (one row per batch item, the item's values
flattened): the cosine similarity of the two rows. An output whose channels have very different ranges (a
YOLO head's box coordinates, 0-1024, next to its class scores, 0-1) is compared per channel group
(:func:`~amdinfer.quantize.scale_groups`), so the coordinates cannot hide scores that rounded to zero. An
output (or group) whose mean cosine is below ``min_cosine`` fails the check. A detector (a YOLO head, or
Ultralytics' ``task: detect`` metadata) is judged by its boxes instead: it fails when its quantized form finds
fewer than half the float model's boxes on those samples (the task metric's collapse rule,
:class:`~amdinfer.quantize.DetectTask`) or matches them below F1 :data:`DETECTOR_FLOOR_F1`; the full task verdict
needs held-out data (:func:`~amdinfer.quantize.evaluate`). A failure is an :class:`AgreementError`
(a :class:`~amdinfer.errors.ModelError`) naming the output, the figure and what to try, or with
``low_accuracy="warn"`` a WARNING on the ``amdinfer.quantize`` logger. The figures stay on the quantizer
(``q.agreement``) and in ``q.describe().notes``.

Example:
    >>> import numpy as np
    >>> a = np.array([[1.0, 0.0], [0.0, 2.0]]); b = np.array([[1.0, 0.0], [2.0, 0.0]])
    >>> [round(float(c), 3) for c in row_cosines(a, b)]
    [1.0, 0.0]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ..errors import AgreementError, ModelError, OptionError
from ._tasks import TaskVerdict, make_task, scale_groups, task_from_model

__all__ = [
    "CHECK_SAMPLES",
    "LOW_ACCURACY",
    "AgreementCheck",
    "AgreementError",
    "OutputAgreement",
    "cosine_error",
    "row_cosines",
]

log = logging.getLogger("amdinfer.quantize")

#: The check runs at most this many samples of the quantizer's data, evenly spread over it.
CHECK_SAMPLES = 16
#: A detector whose boxes on the check's samples match the float model's below this F1 fails the guard (the guard
#: is a floor against broken models; the verdict in the user's metric needs held-out data: ``evaluate``).
DETECTOR_FLOOR_F1 = 0.5
#: ``low_accuracy=`` values: refuse the model, or hand it over with a logged warning.
LOW_ACCURACY = ("raise", "warn")


def row_cosines(quantized: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row (batch item, flattened) of ``quantized`` with ``reference``'s.

    Two zero rows agree (1.0); a zero row against a non-zero one, or a non-finite value, gives 0.0.

    Example:
        >>> row_cosines(np.zeros((1, 3)), np.zeros((1, 3))).tolist(), row_cosines(np.ones((1, 2)), -np.ones((1, 2)))
        ([1.0], array([-1.]))
    """
    a = np.asarray(quantized, np.float64)
    b = np.asarray(reference, np.float64)
    rows = a.shape[0] if a.ndim else 1
    a, b = a.reshape(rows, -1), b.reshape(rows, -1)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        cos = np.einsum("ij,ij->i", a, b) / (na * nb)
    cos = np.where((na == 0) & (nb == 0), 1.0, cos)
    return np.where(np.isfinite(cos), np.clip(cos, -1.0, 1.0), 0.0)


@dataclass(frozen=True)
class OutputAgreement:
    """One float output's cosine agreement with the float model over the checked rows.

    Example:
        >>> OutputAgreement("emb", 0.995, 0.99, 8).to_dict()["mean_cosine"]
        0.995
    """

    name: str
    mean_cosine: float
    min_cosine: float
    rows: int

    def to_dict(self) -> dict[str, Any]:
        """A plain dict."""
        return {"name": self.name, "mean_cosine": self.mean_cosine, "min_cosine": self.min_cosine, "rows": self.rows}


@dataclass(frozen=True)
class AgreementCheck:
    """What the accuracy guard measured: per float output, the cosine with the float model, and the verdict.

    Attributes:
        outputs: per float output, or per channel group ``name[ch a-b]`` of an output whose channels have very
            different ranges (integer outputs are not compared).
        samples: samples run.
        threshold: the bound on each output's mean cosine.
        failed: names of the outputs below it.
        task: a detector's task judgement on the samples (``None`` for other models); a collapse (far fewer
            boxes than the float model) fails the check.

    Example:
        >>> c = AgreementCheck({"emb": OutputAgreement("emb", 0.5, 0.2, 4)}, 1, 0.98, ("emb",))
        >>> c.passed, c.summary()
        (False, "output 'emb' mean cosine 0.5000 (worst row 0.2000) < 0.98")
    """

    outputs: dict[str, OutputAgreement]
    samples: int
    threshold: float
    failed: tuple[str, ...] = field(default_factory=tuple)
    task: TaskVerdict | None = None

    @property
    def collapsed(self) -> bool:
        """The quantized detector's boxes are far off the float model's: fewer than half of them (the task's
        collapse rule), or an F1 below :data:`DETECTOR_FLOOR_F1` against them (boxes where the float model has none)."""
        if self.task is None:
            return False
        f1 = self.task.metrics.get("f1")
        return self.task.collapsed or (f1 is not None and f1 < DETECTOR_FLOOR_F1)

    @property
    def passed(self) -> bool:
        """No output below the threshold; for a detector, no collapse of its boxes (its cosines are shown, not
        decisive: raw score channels are mostly near zero, where a cosine says more about rounding noise than about
        the answers — NudeNet's int8 score channels: cosine 0.76 with the same 2 boxes as the float model)."""
        if self.task is not None:
            return not self.collapsed
        return not self.failed

    def summary(self) -> str:
        """One line: the failing outputs' figures, else every output's (and the detector's boxes)."""
        shown = self.failed or (() if self.collapsed else tuple(self.outputs))
        sign = "<" if self.failed else ">="
        if self.task is not None and not self.collapsed:
            shown = ()  # a detector that kept its boxes: the boxes are the figure (its cosines stay in to_dict())
        parts = [
            f"output {n!r} mean cosine {self.outputs[n].mean_cosine:.4f} "
            f"(worst row {self.outputs[n].min_cosine:.4f}) {sign} {self.threshold:g}"
            for n in shown
        ]
        if self.task is not None:
            f, q = self.task.answers
            f1 = self.task.metrics.get("f1")
            boxes = f"{q} boxes against the float model's {f}" + ("" if f1 is None else f" (F1 {f1:.3f} at IoU 0.5)")
            parts.append(self.task.reasons[0] if self.collapsed and self.task.collapsed else boxes)
        return "; ".join(parts) if parts else "no float output to compare"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "outputs": {k: v.to_dict() for k, v in self.outputs.items()},
            "samples": self.samples,
            "threshold": self.threshold,
            "passed": self.passed,
            "task": None if self.task is None else self.task.to_dict(),
        }


def check_min_cosine(value: Any) -> float | None:
    """``min_cosine=``: ``None`` (no check) or a float in [-1, 1]."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or abs(value) > 1:
        raise OptionError(f"min_cosine: got {value!r}, expected a float in [-1, 1] or None (no check)")
    return float(value)


def check_low_accuracy(value: Any) -> str:
    """``low_accuracy=``: one of :data:`LOW_ACCURACY`."""
    if value not in LOW_ACCURACY:
        raise OptionError(f"low_accuracy: got {value!r}, expected one of {list(LOW_ACCURACY)}")
    return str(value)


def spread(feeds: Sequence[Mapping[str, np.ndarray]], n: int = CHECK_SAMPLES) -> list[Mapping[str, np.ndarray]]:
    """At most ``n`` of ``feeds``, evenly spread (every shape group of sorted data gets its share)."""
    if len(feeds) <= n:
        return list(feeds)
    return [feeds[i] for i in np.linspace(0, len(feeds) - 1, n).round().astype(int)]


def _ort_outputs(proto: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """``proto``'s outputs on each feed, on a plain ONNX Runtime CPU session (no amdinfer preparation: the
    check compares numerics, and a preparation such as the transformer fusion would only cost time)."""
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, dict(f)))) for f in feeds]


def measure(
    quantized: onnx.ModelProto, reference: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], threshold: float
) -> AgreementCheck:
    """Run both models on ONNX Runtime CPU over ``feeds`` (spread to :data:`CHECK_SAMPLES`) and compare."""
    chosen = spread(feeds)
    try:
        q_out, r_out = _ort_outputs(quantized, chosen), _ort_outputs(reference, chosen)
    except Exception as exc:  # ONNX Runtime's errors: the quantized model does not load or run
        text = str(exc).strip().splitlines()
        raise ModelError(
            f"model {reference.graph.name or '<ModelProto>'}: the accuracy check could not run the float and the "
            f"quantized model on ONNX Runtime CPU ({type(exc).__name__}: {text[0] if text else 'no message'}); "
            "pass min_cosine=None to skip it"
        ) from exc
    found = {
        name: OutputAgreement(name, float(cos.mean()), float(cos.min()), int(cos.size))
        for name, cos in _float_cosines(q_out, r_out).items()
    }
    failed = tuple(n for n, a in found.items() if not a.mean_cosine >= threshold)
    return AgreementCheck(found, len(chosen), threshold, failed, _detector_check(reference, q_out, r_out, chosen))


def _detector_check(
    reference: onnx.ModelProto,
    q_out: Sequence[Mapping[str, np.ndarray]],
    r_out: Sequence[Mapping[str, np.ndarray]],
    feeds: Sequence[Mapping[str, np.ndarray]],
) -> TaskVerdict | None:
    """A detector's boxes on the check's samples (its collapse fails the check), else ``None``."""
    if task_from_model(reference, r_out, feeds)[0] != "detect":
        return None
    task = make_task("detect")
    try:
        return task.judge(task.answers(q_out), task.answers(r_out), precision="int8")
    except (OptionError, ValueError):  # detect metadata on outputs that are no YOLO layout: cosines only
        return None


def enforce(check: AgreementCheck, *, what: str, model: str, low_accuracy: str, hints: str) -> None:
    """Raise :class:`AgreementError` for a failed ``check`` (``low_accuracy="raise"``), else log a warning."""
    if check.passed:
        log.info("%s of %s: %s", what, model, check.summary())
        return
    text = (
        f"{what} of model {model}: {check.summary()} against the float model on {check.samples} of its samples; "
        f"the quantized model's answers differ from the float model's. Try: {hints}. To accept it anyway, pass "
        "low_accuracy='warn' (the figures stay in quantizer.agreement) or min_cosine=None"
    )
    if low_accuracy == "raise":
        raise AgreementError(text, check=check)
    log.warning("%s (handed over: low_accuracy='warn')", text)


def cosine_error(quantized: Sequence[Mapping[str, np.ndarray]], reference: Sequence[Mapping[str, np.ndarray]]) -> float:
    """``1 -`` the lowest mean row cosine over the float outputs and their channel groups.

    Example:
        >>> r = [{"e": np.array([[1.0, 0.0]])}]; q = [{"e": np.array([[1.0, 1.0]])}]
        >>> round(cosine_error(q, r), 4)
        0.2929
    """
    return 1.0 - min((float(cos.mean()) for cos in _float_cosines(quantized, reference).values()), default=1.0)


def _float_cosines(
    quantized: Sequence[Mapping[str, np.ndarray]], reference: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Each float output's row cosines (:func:`row_cosines`) over all samples, per channel group
    (``name[ch a-b]``) where the output's channels have very different ranges; integer outputs are skipped.
    The groups come from the first sample's float output (a sample of another channel count is one row)."""
    found: dict[str, list[np.ndarray]] = {}
    for name in reference[0]:
        first = np.asarray(reference[0][name])
        if first.dtype.kind != "f":
            continue
        groups = scale_groups(first)
        for q, r in zip(quantized, reference):
            a, b = np.asarray(q[name]), np.asarray(r[name])
            fits = all(not label or (b.ndim > axis and b.shape[axis] == first.shape[axis]) for label, axis, _ in groups)
            for label, axis, idx in groups if fits else [("", 0, np.arange(0))]:
                key = f"{name}[{label}]" if label else name
                views = (a, b) if not label else (np.take(a, idx, axis=axis), np.take(b, idx, axis=axis))
                found.setdefault(key, []).append(row_cosines(*views))
    return {k: np.concatenate(v) for k, v in found.items()}
