"""Building a :class:`~amdinfer.quantize.PrecisionCertificate`: from a report (:func:`certify`), from the int8
accuracy check (:func:`certify_check`), and the precision of each layer (:func:`layer_precisions`).

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> from amdinfer.quantize import Int8Quantizer, evaluate
    >>> model = tiny_cnn()
    >>> q = Int8Quantizer(calibration=[random_inputs(model, batch=4, seed=s) for s in range(4)], progress=False,
    ...                   cache=False)
    >>> qmodel = q.quantize(model)
    >>> held_out = [random_inputs(model, batch=4, seed=s) for s in range(10, 14)]
    >>> report = evaluate(qmodel, model, held_out, task="generic")
    >>> cert = certify(report, float_model=model, quantized_model=qmodel, data=held_out, quantizer=q)
    >>> cert.verdict == report.verdict, cert.data.samples, cert.layer_counts()
    (True, 4, {'int8': 3})
    >>> cert.attach(qmodel) is qmodel, cert.matches(qmodel)
    (True, True)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .._certificate._core import DataRecord, LayerPrecision, PrecisionCertificate, SpeedRecord, Threshold
from .._certificate._io import model_sha256, versions
from ..errors import CertificateError, OptionError
from ..model import ModelSource
from ._agreement import AgreementCheck, OutputAgreement
from ._data import data_hash
from ._prepare import WEIGHTED_OPS
from ._report import QuantizationReport
from ._tasks import Bound, TaskVerdict

__all__ = ["MAX_LAYERS", "agreement_from_certificate", "certify", "certify_check", "layer_precisions"]

#: At most this many layers are recorded (a certificate stays small enough for a cache manifest).
MAX_LAYERS = 2000
#: What the int8 accuracy check's certificates say produced the verdict.
CHECK = "int8 accuracy check"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _feeds(data: Iterable[Any]) -> list[Mapping[str, np.ndarray]]:
    """Feed dicts of ``data`` (a bare array is one feed of an unnamed input)."""
    out: list[Mapping[str, np.ndarray]] = []
    for item in data:
        out.append(item if isinstance(item, Mapping) else {"": np.asarray(item)})
    return out


def _float_sha(model: Any) -> str:
    if isinstance(model, str) and len(model) == 64:
        return model
    return ModelSource.from_any(model, check=False).sha256


def _quantized_proto(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    return ModelSource.from_any(model, check=False).proto


def certify(
    report: QuantizationReport,
    *,
    float_model: Any,
    quantized_model: Any,
    data: Iterable[Any],
    data_source: str = "held-out",
    quantizer: Any = None,
    search: Any = None,
    speed: SpeedRecord | None = None,
) -> PrecisionCertificate:
    """The certificate of a :func:`~amdinfer.quantize.evaluate` report.

    Args:
        report: the report (its verdict, task metrics and bounds).
        float_model: the float model (path, bytes, ``ModelProto``, ``ModelSource``) or its SHA-256.
        quantized_model: the quantized model (its hash, without a certificate, is recorded; its layers are read).
        data: the held-out samples the report was made on (feed dicts or arrays): hashed and counted.
        data_source: where the data came from (``"--eval pages/"``).
        quantizer: the quantizer that made the model: its settings, the layers it kept in float and why
            (an :class:`~amdinfer.quantize.Int8Quantizer`'s detector head, an
            :class:`~amdinfer.quantize.AutoMixedPrecision`'s kept layers and per-layer sensitivity).
        search: a :class:`~amdinfer.quantize.MixedPrecisionResult` (a budget search's) whose kept layers and
            per-layer sensitivity are recorded.
        speed: latency against fp32 when measured; ``None`` records "not measured".

    Raises:
        OptionError: ``report`` is not a :class:`~amdinfer.quantize.QuantizationReport`.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> from amdinfer.quantize import Fp16Quantizer, evaluate
        >>> model, held_out = tiny_cnn(), [random_inputs(tiny_cnn(), batch=4, seed=s) for s in range(2)]
        >>> qmodel = Fp16Quantizer().quantize(model)
        >>> cert = certify(evaluate(qmodel, model, held_out), float_model=model, quantized_model=qmodel, data=held_out)
        >>> cert.precision, cert.verdict, cert.speed is None, cert.layer_counts()
        ('fp16', 'PASS', True, {'fp16': 3})
    """
    if not isinstance(report, QuantizationReport):
        raise OptionError(f"report: got {type(report).__name__}, expected a QuantizationReport")
    feeds = _feeds(data)
    proto = _quantized_proto(quantized_model)
    j = report.judgement
    thresholds = tuple(Threshold(b.metric, b.op, b.value, j.metrics.get(b.metric)) for b in j.bounds)
    if report.tolerance.rms is not None and report.task != "generic":
        worst = max((e.rms for e in report.outputs.values()), default=None)
        thresholds += (Threshold("rms", "<=", report.tolerance.rms, worst),)
    reasons, sensitivity = layer_notes(quantizer)
    more_reasons, more_sensitivity = _search_notes(search)
    reasons.update(more_reasons)
    sensitivity.update(more_sensitivity)
    plan = dict(getattr(search, "plan", None) or getattr(getattr(quantizer, "result", None), "plan", None) or {})
    return PrecisionCertificate(
        precision=report.precision,
        task=report.task,
        verdict=report.verdict,
        judged_by="evaluate",
        metrics=dict(j.metrics),
        thresholds=thresholds,
        answers=(int(j.answers[0]), int(j.answers[1])),
        unit=j.unit,
        reasons=tuple(report.failures),
        data=DataRecord(int(j.items), len(feeds), data_hash(feeds), data_source),
        layers=layer_precisions(proto, reasons=reasons, sensitivity=sensitivity, plan=plan),
        float_sha256=_float_sha(float_model),
        quantized_sha256=model_sha256(proto),
        versions=versions(),
        speed=speed,
        task_reason=report.task_reason,
        quantizer=_settings(quantizer),
        created=_now(),
    )


def certify_check(
    check: AgreementCheck,
    *,
    float_model: Any,
    quantized_model: onnx.ModelProto,
    feeds: Sequence[Mapping[str, np.ndarray]],
    quantizer: Any = None,
) -> PrecisionCertificate:
    """The certificate of the int8 accuracy check (:class:`~amdinfer.quantize.AgreementCheck`): each float
    output's mean cosine against ``min_cosine``, and a detector's boxes (the collapse rule), on the
    calibration samples it ran (``feeds``, the data recorded: not held out)."""
    thresholds = tuple(
        Threshold(f"cosine {a.name}", ">=", check.threshold, a.mean_cosine) for a in check.outputs.values()
    )
    metrics: dict[str, float | None] = {f"cosine {a.name}": a.mean_cosine for a in check.outputs.values()}
    task = check.task
    if task is not None:
        metrics.update(task.metrics)
    rows = sum(a.rows for a in check.outputs.values()) // max(1, len(check.outputs))
    reasons, sensitivity = layer_notes(quantizer)
    return PrecisionCertificate(
        precision="int8",
        task=task.task if task is not None else "generic",
        verdict="PASS" if check.passed else "FAIL",
        judged_by=CHECK,
        metrics=metrics,
        thresholds=thresholds,
        answers=task.answers if task is not None else (rows, rows),
        unit=task.unit if task is not None else "rows",
        reasons=() if check.passed else (check.summary(),),
        data=DataRecord(task.items if task is not None else rows, len(feeds), data_hash(feeds), "calibration samples"),
        layers=layer_precisions(quantized_model, reasons=reasons, sensitivity=sensitivity),
        float_sha256=_float_sha(float_model),
        quantized_sha256=model_sha256(quantized_model),
        versions=versions(),
        task_reason="the int8 quantizer's accuracy check",
        quantizer=_settings(quantizer),
        check=check.to_dict(),
        created=_now(),
    )


def agreement_from_certificate(cert: PrecisionCertificate) -> AgreementCheck:
    """The :class:`~amdinfer.quantize.AgreementCheck` a certificate of the int8 check recorded (a cache hit
    reuses it instead of running the check again).

    Raises:
        CertificateError: the certificate holds no check's figures, or damaged ones.
    """
    d = cert.check
    if cert.judged_by != CHECK or not isinstance(d, Mapping):
        raise CertificateError(f"precision certificate: judged by {cert.judged_by!r}, holds no int8 check's figures")
    try:
        outputs = {
            str(k): OutputAgreement(str(v["name"]), float(v["mean_cosine"]), float(v["min_cosine"]), int(v["rows"]))
            for k, v in d["outputs"].items()
        }
        threshold = float(d["threshold"])
        t = d.get("task")
        task = None
        if t is not None:
            a = t["answers"]
            task = TaskVerdict(
                str(t["task"]),
                str(t["verdict"]),
                {str(k): None if v is None else float(v) for k, v in t["metrics"].items()},
                tuple(Bound.parse(b) for b in t["bounds"]),
                int(t["items"]),
                (int(a["float"]), int(a["quantized"])),
                tuple(str(r) for r in t["reasons"]),
                str(a["unit"]),
                bool(t["collapsed"]),
            )
        failed = tuple(n for n, o in outputs.items() if not o.mean_cosine >= threshold)
        return AgreementCheck(outputs, int(d["samples"]), threshold, failed, task)
    except (KeyError, TypeError, ValueError, AttributeError, OptionError) as exc:
        raise CertificateError(f"precision certificate: the int8 check's figures are damaged ({exc!r})") from None


def _settings(quantizer: Any) -> dict[str, Any]:
    settings = getattr(quantizer, "settings", None)
    return dict(settings()) if callable(settings) else {}


def layer_notes(quantizer: Any) -> tuple[dict[str, str], dict[str, float]]:
    """What ``quantizer`` knows of its layers: ``(node -> why it stays in float, node -> sensitivity)``.

    An :class:`~amdinfer.quantize.AutoMixedPrecision` gives its search's kept layers and every candidate's
    sensitivity, and what its wrapped quantizer knows; an :class:`~amdinfer.quantize.Int8Quantizer` its
    detector head and ``exclude_nodes``.

    Example:
        >>> layer_notes(None)
        ({}, {})
    """
    reasons: dict[str, str] = {}
    sensitivity: dict[str, float] = {}
    result = getattr(quantizer, "result", None)
    inner = getattr(quantizer, "quantizer", None)
    if inner is not None and inner is not quantizer:
        reasons, sensitivity = layer_notes(inner)
    head = getattr(quantizer, "head", None)
    for node in getattr(head, "float_nodes", ()) or ():
        reasons[str(node)] = "detector head"
    for node in getattr(quantizer, "exclude_nodes", ()) or ():
        reasons.setdefault(str(node), "excluded")
    more_reasons, more_sensitivity = _search_notes(result)
    reasons.update(more_reasons)
    sensitivity.update(more_sensitivity)
    return reasons, sensitivity


def _search_notes(result: Any) -> tuple[dict[str, str], dict[str, float]]:
    """A mixed-precision search's kept layers and per-layer sensitivity (empty for ``None``)."""
    reasons: dict[str, str] = {}
    sensitivity: dict[str, float] = {}
    for k in getattr(result, "sensitivities", None) or []:
        sensitivity[str(k.node)] = float(k.sensitivity)
    for k in getattr(result, "kept", None) or []:
        reasons[str(k.node)] = "kept by the mixed-precision search"
    return reasons, sensitivity


_INT8_OPS = ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm", "QAttention")


def layer_precisions(
    model: onnx.ModelProto,
    *,
    reasons: Mapping[str, str] | None = None,
    sensitivity: Mapping[str, float] | None = None,
    plan: Mapping[str, str] | None = None,
) -> tuple[LayerPrecision, ...]:
    """The precision of each weighted layer (``Conv``, ``Gemm``, ``MatMul``...) of a quantized model, and of
    each node ``reasons`` names (e.g. a detector head's decode), in graph order, read from the graph itself:
    ``int8`` for the integer ops and for a layer whose weight (or, for a ``MatMul`` of two activations, both
    inputs) comes out of a ``DequantizeLinear`` (through any ``Cast``); ``fp16`` for a layer with fp16
    weights; else ``fp32``. A budget search's ``plan`` (layer -> ``"fp16"``/``"fp32"``) names the float
    precision of the layers it moved out of int8 (an fp16 layer between casts reads as float from its weights).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> [(p.node, p.precision, p.reason) for p in layer_precisions(tiny_cnn(), reasons={"conv1": "excluded"})][0]
        ('conv1', 'fp32', 'excluded')
    """
    reasons = dict(reasons or {})
    sensitivity = dict(sensitivity or {})
    made_by = {out: n for n in model.graph.node for out in n.output}

    def dequantized(name: str) -> bool:  # through Casts (a mixed fp16/int8 graph casts around the DQ)
        for _ in range(8):
            node = made_by.get(name)
            if node is None or node.op_type != "Cast" or not node.input:
                return node is not None and node.op_type == "DequantizeLinear"
            name = node.input[0]
        return False

    fp16_inits = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
    out: list[LayerPrecision] = []
    for node in model.graph.node:
        weighted = node.op_type in WEIGHTED_OPS or node.op_type in _INT8_OPS
        if not weighted and node.name not in reasons:
            continue
        dq = [dequantized(i) for i in node.input[:2]]
        if node.op_type in _INT8_OPS or (
            weighted and len(dq) == 2 and (dq[1] if node.op_type != "MatMul" else all(dq))
        ):
            precision = "int8"
        elif any(i in fp16_inits for i in node.input):
            precision = "fp16"
        else:
            precision = "fp32"
        if precision != "int8" and (plan or {}).get(node.name) in ("fp16", "fp32"):
            precision = str((plan or {})[node.name])
        why = reasons.get(node.name) or ("quantized" if precision == "int8" else "kept in float")
        out.append(LayerPrecision(node.name, node.op_type, precision, why, sensitivity.get(node.name)))
        if len(out) >= MAX_LAYERS:
            break
    return tuple(out)
