"""``evaluate``: what quantization cost, measured against the float model on held-out data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import OptionError
from ._base import Quantizer
from ._data import materialize, to_feeds
from ._metrics import _detect_task, _layer_errors, _output_errors, _task_metrics, _verdict
from ._report import AccuracyTolerance, QuantizationReport

__all__ = ["evaluate"]

TASKS = ("auto", "classifier", "detector", "generic")


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
        >>> report.precision, report.outputs["logits"].rms < 0.1
        ('int8', True)
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


def _check_options(task: str, boxes: Any, iou: Any, tolerance: Any) -> None:
    """``evaluate``'s option checks, before anything is loaded."""
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
