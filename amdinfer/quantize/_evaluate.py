"""``evaluate``: what quantization cost, measured against the float model on held-out data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import OptionError
from ._base import Quantizer
from ._data import materialize, to_feeds
from ._metrics import _layer_errors, _output_errors
from ._report import AccuracyTolerance, OutputError, QuantizationReport
from ._tasks import FAIL, NOT_JUDGED, PASS, TASKS, Bound, TaskMetric, TaskVerdict, make_task, task_from_model

__all__ = ["evaluate"]

#: ``task=`` names: the tasks and ``"auto"`` (chosen from the model).
TASK_CHOICES = ("auto", *TASKS)


def _is_engine(x: Any) -> bool:
    from ..engines.base import Engine

    return isinstance(x, Engine)


def _load_cpu(model: Any) -> Any:
    """The model on ONNX Runtime's CPU provider, at the precision its graph carries (nothing to rewrite, so
    the registry builds it directly: quantize sits below ``amdinfer.load``)."""
    from ..engines.registry import get_backend
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
    return get_backend("ort").build(src, {"providers": ["CPUExecutionProvider"]})


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


def _run_on_cpu(model: Any, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """``model``'s outputs on each feed, on an ONNX Runtime CPU engine opened for this and closed after."""
    engine = _load_cpu(model)
    try:
        return _run_all(engine, feeds)
    finally:
        engine.close()


def evaluate(
    quantized: Any,
    reference: Any,
    data: Iterable[Any],
    *,
    task: str | TaskMetric = "auto",
    boxes: Callable[[dict[str, np.ndarray]], Any] | None = None,
    tolerance: AccuracyTolerance | None = None,
    per_layer: bool = False,
    precision: str | None = None,
    iou: float = 0.5,
    input_name: str | None = None,
    max_samples: int | None = None,
) -> QuantizationReport:
    """Run the quantized model and its float reference on held-out data and judge the difference in the
    task's own metric, the float model's answers being the truth.

    Args:
        quantized: an :class:`~amdinfer.Engine`, a quantized model (path, bytes, ``ModelProto``; run on
            ONNX Runtime CPU), or a :class:`~amdinfer.quantize.Quantizer`, applied to ``reference``.
        reference: the float model or an engine running it (e.g. ``backend="reference", precision="fp64"``).
        data: held-out samples: feed dicts or arrays (one batch each). Do not reuse calibration data.
        task: ``"detect"`` (boxes matched by class and IoU: ``map50``, ``f1``, precision, recall; raw YOLO
            outputs are decoded and suppressed, or give ``boxes``), ``"classify"`` (``top1``, ``top5``),
            ``"ocr"`` (``cer``, ``lines`` of a recogniser's CTC output), ``"embed"`` (``cosine``,
            ``retrieval_top1``), ``"generic"`` (each output, or each channel group of an output whose
            channels have very different ranges, on its own scale: ``cosine``, ``rms``), a
            :class:`~amdinfer.quantize.TaskMetric`, or ``"auto"``: detect with ``boxes``, else from the model
            (:func:`~amdinfer.quantize.task_from_model`: Ultralytics' ``task`` metadata, a YOLO output layout,
            one 2-D float output -> classify, else generic).
        boxes: for detectors, ``boxes(outputs) -> [box set per image]`` decoding the outputs of one batch
            (e.g. decode + NMS); a box set is ``(K, 4)`` xyxy, ``(K, 6+)`` xyxy/score/class, ``(boxes, classes)``,
            ``(boxes, scores, classes)`` or a :class:`~amdinfer.results.Detections`. Boxes without scores get
            no ``map50``.
        tolerance: the bounds (default :meth:`AccuracyTolerance.default` for the precision and task).
        per_layer: also compare every intermediate tensor on the first sample (``outputs="all"``).
        precision: the quantized precision for the report (default: the quantizer's or engine's).
        iou: the IoU at which boxes match.
        input_name: the input that bare arrays feed (multi-input models).
        max_samples: evaluate at most this many samples.

    Returns:
        A :class:`QuantizationReport` whose ``verdict`` is ``"PASS"`` only when the task metric meets its
        bounds; ``"FAIL"`` when it does not, when the quantized model gives far fewer answers (boxes, lines)
        than the float model, or when it gives NaN/Inf where the float model does not; ``"NOT JUDGED"`` when
        the held-out data is too small for a verdict (e.g. fewer than 8 images or 20 float boxes).

    Raises:
        OptionError: an unknown task, a detector without ``boxes`` whose output is no YOLO layout, a
            tolerance field the task has no metric for, or per-layer on an engine without it.
        InputError: the data does not fit the model or holds NaN or inf (the message names the sample's index
            and the input), or the outputs differ in shape.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> from amdinfer.quantize import Int8Quantizer
        >>> model = tiny_cnn()
        >>> calib = [random_inputs(model, batch=4, seed=s) for s in range(4)]
        >>> held_out = [random_inputs(model, batch=4, seed=s) for s in range(10, 12)]
        >>> q = Int8Quantizer(calibration=calib, progress=False, cache=False)
        >>> report = evaluate(q, model, held_out, task="generic")
        >>> report.precision, report.verdict, report.outputs["logits"].rms < 0.1
        ('int8', 'PASS', True)
    """
    _check_options(task, boxes, iou, tolerance)
    opened: list[Any] = []
    try:
        r_engine = reference if _is_engine(reference) else _load_cpu(reference)
        if r_engine is not reference:
            opened.append(r_engine)
        # The data is checked before the quantized model is built: a bad sample should not cost a quantization.
        items = materialize(data, what="data", max_samples=max_samples, progress=False)
        feeds = to_feeds(items, r_engine.model.proto, what="data", input_name=input_name, finite=True)
        q_engine, q_precision = _open_quantized(quantized, reference, opened)
        precision = precision or q_precision
        q_out, r_out = _run_all(q_engine, feeds), _run_all(r_engine, feeds)
        metric, reason = _choose_task(task, boxes, iou, r_engine.model.proto, r_out, feeds)
        report = _judge(metric, q_out, r_out, precision, tolerance)
        report.task_reason = reason
        report.layers = _layer_errors(q_engine, r_engine, feeds[0]) if per_layer else None
        return report
    finally:
        for e in opened:
            e.close()


def _judge(
    metric: TaskMetric,
    q_out: Sequence[Mapping[str, np.ndarray]],
    r_out: Sequence[Mapping[str, np.ndarray]],
    precision: str,
    tolerance: AccuracyTolerance | None,
) -> QuantizationReport:
    """The report of ``metric`` on both models' outputs (without task reason and layers)."""
    tol = tolerance or AccuracyTolerance.default(precision, metric.name)
    outputs = _output_errors(q_out, r_out)
    judgement = metric.judge(
        metric.answers(q_out), metric.answers(r_out), _task_bounds(tol, metric), precision=precision
    )
    verdict, failures = _verdict(judgement, outputs, tol)
    return QuantizationReport(precision, metric.name, len(r_out), outputs, judgement, tol, verdict, failures)


def _choose_task(
    task: str | TaskMetric,
    boxes: Any,
    iou: float,
    proto: onnx.ModelProto,
    outputs: list[dict[str, np.ndarray]],
    feeds: Sequence[Mapping[str, np.ndarray]],
) -> tuple[TaskMetric, str]:
    """The task metric and why it was chosen."""
    if isinstance(task, TaskMetric):
        return task, "given"
    if task == "auto":
        name, reason = ("detect", "boxes= given") if boxes is not None else task_from_model(proto, outputs, feeds)
    else:
        name, reason = task, "named"
    if name == "detect":
        return make_task("detect", boxes=boxes, iou=iou), reason
    return make_task(name), reason


def _task_bounds(tol: AccuracyTolerance, metric: TaskMetric) -> list[Bound]:
    """The tolerance's bounds on the task's metrics; ``rms`` is an output bound of any task."""
    bounds = tol.bounds()
    foreign = [str(b) for b in bounds if b.metric not in metric.metrics and b.metric != "rms"]
    if foreign:
        raise OptionError(
            f"tolerance: {foreign} are not metrics of task {metric.name!r}, which has {list(metric.metrics)}"
        )
    return [b for b in bounds if b.metric in metric.metrics]


def _verdict(
    judgement: TaskVerdict, outputs: Mapping[str, OutputError], tol: AccuracyTolerance
) -> tuple[str, list[str]]:
    """The report's verdict: the task's, made a FAIL by NaN/Inf outputs or an ``rms`` bound of a named task."""
    failures = list(judgement.reasons) if judgement.verdict == FAIL else []
    for label, e in outputs.items():
        if e.nonfinite:
            failures.append(f"output {label!r}: {e.nonfinite} NaN/Inf values where the float model is finite")
        if tol.rms is not None and judgement.task != "generic" and not e.rms <= tol.rms:
            failures.append(f"output {label!r}: rms {e.rms:.3g} > {tol.rms:.3g}")
    if failures:
        return FAIL, failures
    if judgement.verdict == NOT_JUDGED:
        return NOT_JUDGED, list(judgement.reasons)
    return PASS, []


def _check_options(task: Any, boxes: Any, iou: Any, tolerance: Any) -> None:
    """``evaluate``'s option checks, before anything is loaded."""
    if not isinstance(task, TaskMetric) and task not in TASK_CHOICES:
        raise OptionError(f"task: got {task!r}, expected one of {list(TASK_CHOICES)} or a TaskMetric")
    if boxes is not None and not callable(boxes):
        raise OptionError(f"boxes: got {boxes!r}, expected a callable")
    if boxes is not None and task not in ("auto", "detect"):
        raise OptionError(f"boxes: given with task={task!r}; boxes= decodes a detector's outputs (task='detect')")
    if not (isinstance(iou, (int, float)) and 0.0 < iou <= 1.0):
        raise OptionError(f"iou: got {iou!r}, expected a float in (0, 1]")
    if tolerance is not None and not isinstance(tolerance, AccuracyTolerance):
        raise OptionError(f"tolerance: got {type(tolerance).__name__}, expected an AccuracyTolerance")


def _open_quantized(quantized: Any, reference: Any, opened: list[Any]) -> tuple[Any, str]:
    """(quantized engine, its precision); an engine opened here is appended to ``opened``."""
    if isinstance(quantized, Quantizer):
        source = reference.model if _is_engine(reference) else reference
        q_engine = _load_cpu(quantized.quantize(source))
        opened.append(q_engine)
        return q_engine, quantized.precision
    if _is_engine(quantized):
        return quantized, _model_precision(quantized.model.proto, quantized.info.precision)
    q_engine = _load_cpu(quantized)
    opened.append(q_engine)
    return q_engine, _model_precision(q_engine.model.proto, "quantized")
