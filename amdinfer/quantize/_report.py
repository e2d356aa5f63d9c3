"""What :func:`~amdinfer.quantize.evaluate` returns: the tolerances it judges by and the report it writes."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OptionError

__all__ = ["AccuracyTolerance", "LayerError", "OutputError", "QuantizationReport"]


@dataclass(frozen=True)
class AccuracyTolerance:
    """The verdict's bounds. ``None`` skips a check.

    Agreement with the float model bounds the accuracy change: if the quantized model's top-1 agrees with
    the float model's on a fraction ``g`` of the samples, its accuracy differs from the float model's by at
    most ``1 - g`` on any labelled set drawn like them. So ``top1=0.97`` means "within 3 points".

    Attributes:
        top1: minimum top-1 agreement with the float model (classifiers).
        top5: minimum top-5 overlap (classifiers with at least 5 classes).
        box_f1: minimum F1 of the quantized box set against the float model's (detectors).
        rms: maximum MIGraphX RMS error (:func:`amdinfer.verify.rms_error`) of each output.

    Example:
        >>> AccuracyTolerance.default("int8", "classifier")
        AccuracyTolerance(top1=0.97, top5=None, box_f1=None, rms=None)
    """

    top1: float | None = None
    top5: float | None = None
    box_f1: float | None = None
    rms: float | None = None

    def __post_init__(self) -> None:
        for name in ("top1", "top5", "box_f1"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise OptionError(f"tolerance.{name}: got {v!r}, expected a fraction in [0, 1] or None")
        if self.rms is not None and not (isinstance(self.rms, (int, float)) and self.rms >= 0):
            raise OptionError(f"tolerance.rms: got {self.rms!r}, expected a float >= 0 or None")

    @classmethod
    def default(cls, precision: str, task: str) -> AccuracyTolerance:
        """The issue's targets: int8 within 3 points, fp16 within 0.5 point of the float model.

        Without a task metric (``task="generic"``) the bound is :data:`amdinfer.verify.DEFAULT_TOLERANCES`'
        RMS for the precision.
        """
        from ..verify import default_tolerance

        agree = 0.995 if precision in ("fp16", "bf16") else 0.97
        if task == "classifier":
            return cls(top1=agree)
        if task == "detector":
            return cls(box_f1=agree)
        return cls(rms=default_tolerance(precision if precision != "fp32" else "fp16").rms)

    def to_dict(self) -> dict[str, float | None]:
        """A plain dict."""
        return asdict(self)


@dataclass(frozen=True)
class OutputError:
    """Error of one model output over all samples.

    Attributes:
        name: the output's name.
        rms: MIGraphX's scale-free RMS error (:func:`amdinfer.verify.rms_error`).
        max_abs: largest absolute difference.
        nonfinite: NaN/Inf values in the quantized output where the reference is finite.

    Example:
        >>> OutputError("logits", 0.01, 0.2, 0).to_dict()["rms"]
        0.01
    """

    name: str
    rms: float
    max_abs: float
    nonfinite: int

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
class QuantizationReport:
    """The accuracy cost of a quantized model against its float reference.

    Attributes:
        precision: the quantized model's precision.
        task: ``"classifier"``, ``"detector"`` or ``"generic"``.
        samples: evaluation batches run.
        outputs: per-output errors.
        top1, top5: agreement with the float model (classifiers).
        box_precision, box_recall, box_f1: the quantized box set against the float one (detectors).
        boxes_reference: boxes the float model found in all samples.
        tolerance: the bounds of the verdict.
        passed: the verdict.
        failures: why it failed, one line per bound.
        layers: per-layer errors when ``per_layer=True``.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> from amdinfer.quantize import Fp16Quantizer, evaluate
        >>> data = [random_inputs(tiny_cnn(), batch=4, seed=s) for s in range(2)]
        >>> report = evaluate(Fp16Quantizer(), tiny_cnn(), data)
        >>> report.passed, report.task, report.top1
        (True, 'classifier', 1.0)
    """

    precision: str
    task: str
    samples: int
    outputs: dict[str, OutputError]
    tolerance: AccuracyTolerance
    passed: bool
    failures: list[str] = field(default_factory=list)
    top1: float | None = None
    top5: float | None = None
    box_precision: float | None = None
    box_recall: float | None = None
    box_f1: float | None = None
    boxes_reference: int | None = None
    layers: list[LayerError] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        out = asdict(self)
        out["outputs"] = {k: v.to_dict() for k, v in self.outputs.items()}
        out["tolerance"] = self.tolerance.to_dict()
        out["layers"] = None if self.layers is None else [layer.to_dict() for layer in self.layers]
        return out

    def worst_layers(self, n: int = 5) -> list[LayerError]:
        """The ``n`` intermediate tensors with the largest error (needs ``per_layer=True``)."""
        if self.layers is None:
            raise OptionError("worst_layers: the report has no per-layer errors; call evaluate(..., per_layer=True)")
        return sorted(self.layers, key=lambda e: -e.rms if math.isfinite(e.rms) else -math.inf)[:n]

    def __repr__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        lines = [f"QuantizationReport({self.precision} vs float, {self.task}, {self.samples} samples): {verdict}"]
        tol = self.tolerance
        if self.top1 is not None:
            bound = f" (>= {tol.top1:.3f})" if tol.top1 is not None else ""
            lines.append(f"  top-1 agreement {self.top1:.4f}{bound}")
        if self.top5 is not None:
            bound = f" (>= {tol.top5:.3f})" if tol.top5 is not None else ""
            lines.append(f"  top-5 overlap   {self.top5:.4f}{bound}")
        if self.box_f1 is not None:
            bound = f" (>= {tol.box_f1:.3f})" if tol.box_f1 is not None else ""
            lines.append(
                f"  boxes: F1 {self.box_f1:.4f}{bound}, precision {self.box_precision:.4f}, "
                f"recall {self.box_recall:.4f} against {self.boxes_reference} float boxes"
            )
        width = max([len(n) for n in self.outputs] + [6])
        rms_bound = f"  (rms <= {tol.rms:g})" if tol.rms is not None else ""
        lines.append(f"  {'output':<{width}}  {'rms':>9}  {'max_abs':>9}  nonfinite{rms_bound}")
        for name, e in self.outputs.items():
            lines.append(f"  {name:<{width}}  {e.rms:9.3g}  {e.max_abs:9.3g}  {e.nonfinite:9d}")
        if self.layers:
            worst = ", ".join(f"{e.node} ({e.op_type}) {e.rms:.3g}" for e in self.worst_layers(3))
            lines.append(f"  worst layers: {worst}")
        for f in self.failures:
            lines.append(f"  ! {f}")
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
        for e in self.worst_layers(3):
            i = self.layers.index(e)
            ax.annotate(e.node, (i, e.rms), fontsize=7, rotation=20)
        if log_scale and any(y > 0 for y in ys):
            ax.set_yscale("log")
        ax.set_xlabel("tensor (graph order)")
        ax.set_ylabel("RMS error vs float (MIGraphX metric)")
        ax.set_title(f"{self.precision}: per-layer error ({'PASS' if self.passed else 'FAIL'})")
        if path is not None:  # a temporary file beside it, renamed over: a planted symbolic link is not followed
            from .._files import write_atomic

            fmt = Path(path).suffix.lstrip(".").lower() or "png"
            write_atomic(path, lambda f: fig.savefig(f, format=fmt), argument="path")
        return fig
