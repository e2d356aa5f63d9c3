"""What :func:`~amdinfer.quantize.evaluate` returns: the tolerances it judges by and the report it writes."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ._task_base import HasVerdict
from ._tasks import METRICS, NOT_JUDGED, Bound, TaskVerdict

__all__ = ["AccuracyTolerance", "LayerError", "OutputError", "QuantizationReport"]


@dataclass(frozen=True)
class AccuracyTolerance:
    """The verdict's bounds, one field per metric (:data:`~amdinfer.quantize.METRICS`). ``None`` skips a bound.

    The fields of the chosen task's metrics bound its verdict (``map50``, ``f1``, ``precision``, ``recall``:
    detect; ``top1``, ``top5``: classify; ``cer``, ``lines``: ocr; ``cosine``, ``retrieval_top1``: embed;
    ``cosine``, ``rms``: generic). ``rms`` also bounds each output's error (on its own scale) for any task; a
    field the task has no metric for is an error.

    Agreement with the float model bounds the accuracy change: if the quantized model's top-1 agrees with
    the float model's on a fraction ``g`` of the samples, its accuracy differs from the float model's by at
    most ``1 - g`` on any labelled set drawn like them. So ``top1=0.97`` means "within 3 points".

    Example:
        >>> AccuracyTolerance.default("int8", "classify")
        AccuracyTolerance(top1=0.97)
        >>> [str(b) for b in AccuracyTolerance.default("fp16", "detect").bounds()]
        ['map50>=0.995', 'f1>=0.995']
    """

    map50: float | None = None
    f1: float | None = None
    precision: float | None = None
    recall: float | None = None
    top1: float | None = None
    top5: float | None = None
    cer: float | None = None
    lines: float | None = None
    cosine: float | None = None
    retrieval_top1: float | None = None
    rms: float | None = None

    def __post_init__(self) -> None:
        for b in self._fields():
            if b[1] is not None:
                name, v = b
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                    raise OptionError(f"tolerance.{name}: got {v!r}, expected a number >= 0 or None")
                if METRICS[name] == ">=" and v > 1:
                    raise OptionError(f"tolerance.{name}: got {v!r}, expected a fraction in [0, 1] or None")

    def _fields(self) -> list[tuple[str, float | None]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    @classmethod
    def default(cls, precision: str | None, task: str) -> AccuracyTolerance:
        """The task's default bounds (:data:`amdinfer.quantize._tasks.DEFAULT_BOUNDS`): int8 within 3 points of
        the float model (detectors: F1 and mAP50 >= 0.95, the issue's target), fp16 within 0.5 point."""
        from ._tasks import make_task

        return cls(**{b.metric: b.value for b in make_task(task).default_bounds(precision)})

    def bounds(self) -> list[Bound]:
        """The bounds given (fields not ``None``)."""
        return [Bound(name, METRICS[name], float(v)) for name, v in self._fields() if v is not None]

    def to_dict(self) -> dict[str, float | None]:
        """A plain dict."""
        return asdict(self)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={v!r}" for name, v in self._fields() if v is not None)
        return f"AccuracyTolerance({shown})"


@dataclass(frozen=True)
class OutputError:
    """Error of one model output (or one channel group of it) over all samples, on its own scale.

    Attributes:
        name: the output's name.
        rms: MIGraphX's scale-free RMS error (:func:`amdinfer.verify.rms_error`), of the group's channels only.
        max_abs: largest absolute difference.
        nonfinite: NaN/Inf values in the quantized output where the reference is finite.
        cosine: mean cosine similarity of each item's values (``None`` for integer outputs).
        group: ``""`` (the whole output) or the channels judged together (``"ch 4-14"``): an output whose
            channels have very different ranges (box coordinates next to class scores) is judged per group.

    Example:
        >>> OutputError("logits", 0.01, 0.2, 0).to_dict()["rms"]
        0.01
    """

    name: str
    rms: float
    max_abs: float
    nonfinite: int
    cosine: float | None = None
    group: str = ""

    @property
    def label(self) -> str:
        """``name``, or ``name[ch a-b]`` for a channel group."""
        return f"{self.name}[{self.group}]" if self.group else self.name

    def to_dict(self) -> dict[str, Any]:
        """A plain dict."""
        return asdict(self)


@dataclass(frozen=True)
class LayerError:
    """Error of one intermediate tensor (first evaluation sample), in graph order.

    Example:
        >>> LayerError("conv1_out", "conv1", "Conv", 0.002).op_type
        'Conv'
    """

    tensor: str
    node: str
    op_type: str
    rms: float

    def to_dict(self) -> dict[str, Any]:
        """A plain dict."""
        return asdict(self)


@dataclass
class QuantizationReport(HasVerdict):
    """The accuracy cost of a quantized model against its float reference, judged in the task's metric.

    Attributes:
        precision: the quantized model's precision.
        task: ``"detect"``, ``"classify"``, ``"ocr"``, ``"embed"`` or ``"generic"``.
        task_reason: why that task (named, metadata, output layout...).
        samples: evaluation batches run.
        outputs: per-output errors, keyed by output name, or ``name[ch a-b]`` for the channel groups of an
            output whose channels have very different ranges.
        judgement: the task metric's :class:`~amdinfer.quantize.TaskVerdict` (metrics, bounds, answer counts).
        tolerance: the bounds of the verdict.
        verdict: ``"PASS"``, ``"FAIL"`` or ``"NOT JUDGED"`` (too little held-out data; the reason in
            ``failures``).
        failures: why it failed or was not judged, one line each.
        layers: per-layer errors when ``per_layer=True``.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> from amdinfer.quantize import Fp16Quantizer, evaluate
        >>> data = [random_inputs(tiny_cnn(), batch=4, seed=s) for s in range(2)]
        >>> report = evaluate(Fp16Quantizer(), tiny_cnn(), data)
        >>> report.verdict, report.task, report.metrics["top1"]
        ('PASS', 'classify', 1.0)
    """

    precision: str
    task: str
    samples: int
    outputs: dict[str, OutputError]
    judgement: TaskVerdict
    tolerance: AccuracyTolerance
    verdict: str
    failures: list[str] = field(default_factory=list)
    task_reason: str = ""
    layers: list[LayerError] | None = None

    @property
    def metrics(self) -> dict[str, float | None]:
        """The task's metrics (``map50``, ``f1``, ``top1``, ``cer``, ``cosine``...)."""
        return self.judgement.metrics

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "precision": self.precision,
            "task": self.task,
            "task_reason": self.task_reason,
            "samples": self.samples,
            "verdict": self.verdict,
            "passed": self.passed,
            "metrics": dict(self.metrics),
            "judgement": self.judgement.to_dict(),
            "outputs": {k: v.to_dict() for k, v in self.outputs.items()},
            "tolerance": self.tolerance.to_dict(),
            "failures": list(self.failures),
            "layers": None if self.layers is None else [layer.to_dict() for layer in self.layers],
        }

    def worst_layers(self, n: int = 5) -> list[LayerError]:
        """The ``n`` intermediate tensors with the largest error (needs ``per_layer=True``)."""
        if self.layers is None:
            raise OptionError("worst_layers: the report has no per-layer errors; call evaluate(..., per_layer=True)")
        return sorted(self.layers, key=lambda e: -e.rms if math.isfinite(e.rms) else -math.inf)[:n]

    def __repr__(self) -> str:
        j = self.judgement
        lines = [
            f"QuantizationReport({self.precision} vs float, {self.task}, {self.samples} samples, {j.items} items): "
            f"{self.verdict}"
        ]
        lines.append(f"  {self.task}: {j.summary()}")
        width = max([len(n) for n in self.outputs] + [6])
        rms_bound = f"  (rms <= {self.tolerance.rms:g})" if self.tolerance.rms is not None else ""
        lines.append(f"  {'output':<{width}}  {'rms':>9}  {'max_abs':>9}  {'cosine':>9}  nonfinite{rms_bound}")
        for name, e in self.outputs.items():
            cos = f"{e.cosine:9.4f}" if e.cosine is not None else f"{'-':>9}"
            lines.append(f"  {name:<{width}}  {e.rms:9.3g}  {e.max_abs:9.3g}  {cos}  {e.nonfinite:9d}")
        if self.layers:
            worst = ", ".join(f"{e.node} ({e.op_type}) {e.rms:.3g}" for e in self.worst_layers(3))
            lines.append(f"  worst layers: {worst}")
        mark = "?" if self.verdict == NOT_JUDGED else "!"
        for f in self.failures:
            lines.append(f"  {mark} {f}")
        return "\n".join(lines)

    def plot(self, path: str | Path | None = None, *, log_scale: bool = True) -> Any:
        """Plot the per-layer error along the graph (needs matplotlib and ``per_layer=True``).

        Args:
            path: save the figure there (PNG, SVG, PDF by suffix); ``None`` only returns it.
            log_scale: logarithmic y axis.

        Returns:
            The ``matplotlib.figure.Figure``.

        Raises:
            ImportError: matplotlib is not installed (``pip install matplotlib``).
            OptionError: the report has no per-layer errors.
        """
        if self.layers is None:
            raise OptionError("plot: the report has no per-layer errors; call evaluate(..., per_layer=True)")
        try:
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise ImportError("QuantizationReport.plot needs matplotlib: pip install matplotlib") from exc
        fig = Figure(figsize=(10, 4), layout="tight")
        ax = fig.add_subplot()
        ys = [e.rms for e in self.layers]
        ax.plot(range(len(ys)), ys, marker=".", linewidth=0.8)
        for k, e in enumerate(self.worst_layers(3)):
            i = self.layers.index(e)
            right = i > len(ys) / 2  # the label reads away from the nearer edge, so it stays on the canvas
            ax.annotate(
                _short(e.node), (i, e.rms), xytext=(-8 if right else 8, -14 * (k + 1)), textcoords="offset points",
                ha="right" if right else "left", va="top", fontsize=7, arrowprops={"arrowstyle": "-", "lw": 0.5},
            )  # fmt: skip
        if log_scale and any(y > 0 for y in ys):
            ax.set_yscale("log")
        ax.set_xlabel("tensor (graph order)")
        ax.set_ylabel("RMS error vs float (MIGraphX metric)")
        ax.set_title(f"{self.precision}: per-layer error ({self.verdict})")
        if path is not None:  # a temporary file beside it, renamed over: a planted symbolic link is not followed
            from .._support._files import write_atomic

            fmt = Path(path).suffix.lstrip(".").lower() or "png"
            write_atomic(path, lambda f: fig.savefig(f, format=fmt, bbox_inches="tight"), argument="path")
        return fig


def _short(name: str, most: int = 48) -> str:
    """A node name for a plot label: at most ``most`` characters, the middle elided (the ends tell layers apart).

    Example:
        >>> _short("/model.22/cv2.2/cv2.2.0/conv/Conv_quant", 24)
        '/model.22/c…v/Conv_quant'
    """
    if len(name) <= most:
        return name
    half = (most - 1) // 2
    return name[:half] + "…" + name[len(name) - (most - 1 - half) :]
