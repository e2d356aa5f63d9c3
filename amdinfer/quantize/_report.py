"""``evaluate``: what quantization cost, measured against the float model on held-out data."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import InputError, OptionError
from ..reference import box_iou
from ..verify import max_abs_error, rms_error, topk_agreement
from ._base import Quantizer
from ._data import materialize, to_feeds

__all__ = [
    "AccuracyTolerance",
    "LayerError",
    "OutputError",
    "QuantizationReport",
    "box_agreement",
    "evaluate",
]

TASKS = ("auto", "classifier", "detector", "generic")

#: What a detector's ``boxes=`` callable returns for one image: ``(K, 4)`` xyxy boxes (one class),
#: ``(K, 6+)`` rows ``x1, y1, x2, y2, score, class`` (the Ultralytics NMS layout), or ``(boxes, classes)``.
BoxSet = Any


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
        if path is not None:
            fig.savefig(str(path))
        return fig


# ---------------------------------------------------------------------------------------------- metrics
def _split_boxes(item: BoxSet, what: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(item, tuple) and len(item) == 2:
        boxes = np.asarray(item[0], np.float64).reshape(-1, 4)
        classes = np.asarray(item[1]).reshape(-1)
    else:
        arr = np.asarray(item, np.float64)
        if arr.size == 0:
            return np.zeros((0, 4)), np.zeros(0)
        if arr.ndim != 2 or (arr.shape[1] not in (4,) and arr.shape[1] < 6):
            raise InputError(f"{what}: got boxes of shape {arr.shape}, expected (K, 4), (K, 6+) or (boxes, classes)")
        boxes = arr[:, :4]
        classes = arr[:, 5] if arr.shape[1] >= 6 else np.zeros(len(arr))
    if len(boxes) != len(classes):
        raise InputError(f"{what}: {len(boxes)} boxes but {len(classes)} classes")
    return boxes, classes


def box_agreement(
    quantized: Sequence[BoxSet], reference: Sequence[BoxSet], iou: float = 0.5
) -> tuple[float, float, float, int]:
    """Precision, recall and F1 of the quantized box sets against the reference ones, and the reference count.

    Boxes match one to one when they have the same class and IoU >= ``iou``, greedily by IoU. Counts are
    summed over images (micro average). Two empty sets agree fully.

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
        qb, qc = _split_boxes(q, f"quantized boxes[{i}]")
        rb, rc = _split_boxes(r, f"reference boxes[{i}]")
        n_q += len(qb)
        n_r += len(rb)
        if not len(qb) or not len(rb):
            continue
        m = box_iou(qb, rb).astype(np.float64)
        m[qc[:, None] != rc[None, :]] = 0.0
        qi, ri = np.nonzero(m >= iou)
        order = np.argsort(-m[qi, ri], kind="stable")
        used_q: set[int] = set()
        used_r: set[int] = set()
        for k in order:
            a, b = int(qi[k]), int(ri[k])
            if a not in used_q and b not in used_r:
                used_q.add(a)
                used_r.add(b)
        matched += len(used_q)
    if n_q == 0 and n_r == 0:
        return 1.0, 1.0, 1.0, 0
    precision = matched / n_q if n_q else 0.0
    recall = matched / n_r if n_r else 0.0
    f1 = 2 * precision * recall / (precision + recall) if matched else 0.0
    return precision, recall, f1, n_r


# ---------------------------------------------------------------------------------------------- running
def _is_engine(x: Any) -> bool:
    from ..engines.base import Engine

    return isinstance(x, Engine)


def _load_cpu(model: Any, **options: Any) -> Any:
    from .._load import load
    from ..model import ModelSource
    from ._prepare import fix_negative_dims

    src = ModelSource.from_any(model)
    if any(
        (d.HasField("dim_value") and d.dim_value <= 0) or d.dim_param in ("?", "-1")
        for vi in list(src.proto.graph.input) + list(src.proto.graph.output)
        for d in vi.type.tensor_type.shape.dim
    ):
        proto = onnx.ModelProto()
        proto.CopyFrom(src.proto)
        fix_negative_dims(proto)  # Paddle's -1 means "any size"; the engine would take it literally
        src = ModelSource.from_any(proto, check=False)
    return load(src, backend="ort", providers=["CPUExecutionProvider"], **options)


def _model_precision(proto: onnx.ModelProto, default: str) -> str:
    """``"int8"`` for a model with quantize/dequantize or QLinear ops, ``"fp16"`` with fp16 weights."""
    ops = {n.op_type for n in proto.graph.node}
    if ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"}:
        return "int8"
    if any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer):
        return "fp16"
    return default


def _run_all(engine: Any, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    return [engine.run(dict(f)) for f in feeds]


def _concat(outs: Sequence[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    arrays = [np.asarray(o[name]) for o in outs]
    try:
        return np.concatenate([a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1) for a in arrays], axis=0)
    except ValueError:  # dynamic shapes that differ between samples
        return np.concatenate([a.ravel() for a in arrays])


def _detect_task(outputs: Sequence[Mapping[str, np.ndarray]], boxes: Any) -> str:
    if boxes is not None:
        return "detector"
    first = outputs[0]
    if len(first) == 1:
        arr = np.asarray(next(iter(first.values())))
        if arr.ndim == 2 and arr.shape[1] >= 2 and arr.dtype.kind == "f":
            return "classifier"
    return "generic"


def _output_errors(
    q: Sequence[Mapping[str, np.ndarray]], r: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, OutputError]:
    errors = {}
    for name in r[0]:
        a, b = _concat(q, name), _concat(r, name)
        if a.shape != b.shape:
            raise InputError(f"output {name!r}: quantized shape {a.shape} differs from the reference's {b.shape}")
        af, bf = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
        nonfinite = int(np.count_nonzero(~np.isfinite(af) & np.isfinite(bf)))
        errors[name] = OutputError(name=name, rms=rms_error(a, b), max_abs=max_abs_error(a, b), nonfinite=nonfinite)
    return errors


def _classifier_scores(outs: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
    name = next(iter(outs[0]))
    return np.concatenate([np.asarray(o[name]).reshape(np.asarray(o[name]).shape[0], -1) for o in outs], axis=0)


def _collect_boxes(
    outs: Sequence[Mapping[str, np.ndarray]], boxes: Callable[[dict[str, np.ndarray]], Any]
) -> list[Any]:
    found: list[Any] = []
    for i, o in enumerate(outs):
        res = boxes(dict(o))
        if isinstance(res, np.ndarray) and res.ndim == 2:
            res = [res]  # one image per batch
        try:
            found.extend(list(res))
        except TypeError:
            raise InputError(f"boxes(outputs[{i}]): got {type(res).__name__}, expected one box set per image") from None
    return found


def _task_metrics(
    task: str,
    q: Sequence[Mapping[str, np.ndarray]],
    r: Sequence[Mapping[str, np.ndarray]],
    boxes: Any,
    iou: float,
) -> dict[str, Any]:
    if task == "classifier":
        a, b = _classifier_scores(q), _classifier_scores(r)
        return {
            "top1": topk_agreement(a, b, k=1),
            "top5": topk_agreement(a, b, k=5) if a.shape[-1] >= 5 else None,
        }
    if task == "detector":
        p, rc, f1, n = box_agreement(_collect_boxes(q, boxes), _collect_boxes(r, boxes), iou=iou)
        return {"box_precision": p, "box_recall": rc, "box_f1": f1, "boxes_reference": n}
    return {}


def _verdict(metrics: Mapping[str, Any], outputs: Mapping[str, OutputError], tol: AccuracyTolerance) -> list[str]:
    failures = []
    for key, label in (("top1", "top-1 agreement"), ("top5", "top-5 overlap"), ("box_f1", "box F1")):
        bound = getattr(tol, key)
        value = metrics.get(key)
        if bound is not None and value is not None and value < bound:
            failures.append(f"{label} {value:.4f} < {bound:.4f}")
    for name, e in outputs.items():
        if tol.rms is not None and not e.rms <= tol.rms:
            failures.append(f"output {name!r}: rms {e.rms:.3g} > {tol.rms:.3g}")
        if e.nonfinite:
            failures.append(f"output {name!r}: {e.nonfinite} NaN/Inf values where the float model is finite")
    return failures


def _layer_errors(q_engine: Any, r_engine: Any, feed: Mapping[str, np.ndarray]) -> list[LayerError]:
    for e, what in ((q_engine, "quantized"), (r_engine, "reference")):
        if not getattr(e, "supports_all_outputs", False):
            raise OptionError(
                f"per_layer=True: the {what} engine ({type(e).__name__}) cannot return intermediate tensors; "
                "use the ORT or reference backend"
            )
    q_all = q_engine.run(dict(feed), outputs="all")
    r_all = r_engine.run(dict(feed), outputs="all")
    out = []
    for node in r_engine.model.proto.graph.node:
        for t in node.output:
            if not t or t not in q_all or t not in r_all:
                continue
            a, b = np.asarray(q_all[t]), np.asarray(r_all[t])
            if a.shape != b.shape or a.dtype.kind not in "fiu" or b.dtype.kind != "f":
                continue
            out.append(LayerError(tensor=t, node=node.name, op_type=node.op_type, rms=rms_error(a, b)))
    return out


def evaluate(
    quantized: Any,
    reference: Any,
    data: Iterable[Any],
    *,
    task: str = "auto",
    boxes: Callable[[dict[str, np.ndarray]], Any] | None = None,
    tolerance: AccuracyTolerance | None = None,
    per_layer: bool = False,
    precision: str | None = None,
    iou: float = 0.5,
    input_name: str | None = None,
    max_samples: int | None = None,
) -> QuantizationReport:
    """Run the quantized model and its float reference on held-out data and judge the difference.

    Args:
        quantized: an :class:`~amdinfer.Engine`, a quantized model (path, bytes, ``ModelProto``; run on
            ONNX Runtime CPU), or a :class:`~amdinfer.quantize.Quantizer`, applied to ``reference``.
        reference: the float model or an engine running it (e.g. ``backend="reference", precision="fp64"``).
        data: held-out samples: feed dicts or arrays (one batch each). Do not reuse calibration data.
        task: ``"classifier"`` (top-1/top-5 agreement), ``"detector"`` (box-set agreement; needs ``boxes``),
            ``"generic"`` (output errors only) or ``"auto"`` (detector with ``boxes``, classifier for one
            2-D float output, else generic).
        boxes: for detectors, ``boxes(outputs) -> [box set per image]`` decoding the outputs of one batch
            (e.g. decode + NMS); a box set is ``(K, 4)`` xyxy, ``(K, 6+)`` xyxy/score/class, or ``(boxes, classes)``.
        tolerance: the bounds (default :meth:`AccuracyTolerance.default` for the precision and task).
        per_layer: also compare every intermediate tensor on the first sample (``outputs="all"``).
        precision: the quantized precision for the report (default: the quantizer's or engine's).
        iou: the IoU at which boxes match.
        input_name: the input that bare arrays feed (multi-input models).
        max_samples: evaluate at most this many samples.

    Returns:
        A :class:`QuantizationReport`.

    Raises:
        OptionError: an unknown task, a detector without ``boxes``, or per-layer on an engine without it.
        InputError: the data does not fit the model, or the outputs differ in shape.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> from amdinfer.quantize import Int8Quantizer
        >>> model = tiny_cnn()
        >>> calib = [random_inputs(model, batch=4, seed=s) for s in range(4)]
        >>> held_out = [random_inputs(model, batch=4, seed=s) for s in range(10, 12)]
        >>> q = Int8Quantizer(calibration=calib, progress=False, cache=False)
        >>> report = evaluate(q, model, held_out, task="generic")
        >>> report.precision, report.outputs["logits"].rms < 0.1
        ('int8', True)
    """
    if task not in TASKS:
        raise OptionError(f"task: got {task!r}, expected one of {list(TASKS)}")
    if task == "detector" and boxes is None:
        raise OptionError("task='detector': give boxes=, a callable turning one batch's outputs into box sets")
    if boxes is not None and not callable(boxes):
        raise OptionError(f"boxes: got {boxes!r}, expected a callable")
    if not (isinstance(iou, (int, float)) and 0.0 < iou <= 1.0):
        raise OptionError(f"iou: got {iou!r}, expected a float in (0, 1]")
    if tolerance is not None and not isinstance(tolerance, AccuracyTolerance):
        raise OptionError(f"tolerance: got {type(tolerance).__name__}, expected an AccuracyTolerance")
    opened: list[Any] = []
    try:
        r_engine = reference if _is_engine(reference) else _load_cpu(reference)
        if r_engine is not reference:
            opened.append(r_engine)
        if isinstance(quantized, Quantizer):
            source = reference.model if _is_engine(reference) else reference
            q_precision = quantized.precision
            q_engine = _load_cpu(quantized.quantize(source))
            opened.append(q_engine)
        elif _is_engine(quantized):
            q_engine = quantized
            q_precision = _model_precision(quantized.model.proto, quantized.info.precision)
        else:
            q_engine = _load_cpu(quantized)
            opened.append(q_engine)
            q_precision = _model_precision(q_engine.model.proto, "quantized")
        precision = precision or q_precision
        items = materialize(data, what="data", max_samples=max_samples, progress=False)
        feeds = to_feeds(items, r_engine.model.proto, what="data", input_name=input_name)
        r_out = _run_all(r_engine, feeds)
        q_out = _run_all(q_engine, feeds)
        chosen = _detect_task(r_out, boxes) if task == "auto" else task
        outputs = _output_errors(q_out, r_out)
        metrics = _task_metrics(chosen, q_out, r_out, boxes, iou)
        tol = tolerance or AccuracyTolerance.default(precision, chosen)
        failures = _verdict(metrics, outputs, tol)
        layers = _layer_errors(q_engine, r_engine, feeds[0]) if per_layer else None
        return QuantizationReport(
            precision=precision,
            task=chosen,
            samples=len(feeds),
            outputs=outputs,
            tolerance=tol,
            passed=not failures,
            failures=failures,
            layers=layers,
            **metrics,
        )
    finally:
        for e in opened:
            e.close()
