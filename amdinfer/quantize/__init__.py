"""Quantization: fp16, calibrated and dynamic int8, accuracy checks and reports, automatic mixed precision.

One quantizer object serves every backend through the :class:`Quantizer` protocol: engines without a
native knob call :meth:`~Quantizer.quantize` (ONNX Runtime's float16 converter, ``quantize_static`` in
QDQ format, or ``quantize_dynamic`` for :class:`DynamicInt8Quantizer`); engines with one read
:meth:`~Quantizer.describe` (a :class:`QuantizationSpec`) and map it to their knobs
(``migraphx.quantize_fp16`` / ``quantize_int8``; the ONNX Runtime MIGraphX EP's ``migraphx_fp16_enable`` /
int8 calibration table). What a path cannot honour is reported in ``engine.info.notes``. The int8 quantizers
check their result against the float model (cosine of each float output, each channel group of an output
whose channels have very different ranges, and a detector's box count: :class:`AgreementCheck`) and refuse
one that lost it (:class:`AgreementError`); :func:`evaluate` judges what quantization cost in the task's own
metric (:class:`TaskMetric`: ``detect``, ``classify``, ``ocr``, ``embed``, ``generic``), the float model's
answers being the truth, with a verdict ``PASS``, ``FAIL`` or ``NOT JUDGED``; :class:`AutoMixedPrecision`
keeps the fewest layers in float that meet a tolerance of a task metric.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> from amdinfer.quantize import Int8Quantizer, evaluate
    >>> model = tiny_cnn()
    >>> calib = [random_inputs(model, batch=4, seed=s) for s in range(4)]
    >>> q = Int8Quantizer(calibration=calib, progress=False, cache=False)
    >>> engine = amdinfer.load(model, providers=["cpu"], quantizer=q)
    >>> report = evaluate(engine, model, [random_inputs(model, batch=8, seed=9)])
    >>> report.task, report.precision, report.verdict in ("PASS", "FAIL")
    ('classify', 'int8', True)
"""

from __future__ import annotations

from typing import Any

from .._certificate._core import DataRecord, LayerPrecision, PrecisionCertificate, SpeedRecord, Threshold
from .._certificate._io import CERTIFICATE_KEY, attach_certificate, model_sha256, read_certificate
from ..engines._migraphx_quant import MigraphxQuantPlan
from ._agreement import AgreementCheck, AgreementError, OutputAgreement
from ._amp import AutoMixedPrecision, BudgetStep, LayerSensitivity, MixedPrecisionResult, layer_groups
from ._base import QuantizationSpec, Quantizer, QuantizerBase
from ._certify import certify, layer_precisions
from ._dynamic import DynamicInt8Quantizer
from ._evaluate import evaluate
from ._fp16 import NUMERICALLY_SENSITIVE_OPS, Fp16Quantizer, default_fp16_op_block_list, precision_quantizer
from ._int8 import CALIBRATION_METHODS, QUANT_FORMATS, QUANT_TYPES, Int8Quantizer
from ._prepare import WEIGHTED_OPS, prepare_model, tail_nodes, weighted_layers
from ._report import AccuracyTolerance, LayerError, OutputError, QuantizationReport
from ._tasks import (
    FAIL,
    METRICS,
    NOT_JUDGED,
    PASS,
    TASKS,
    Bound,
    ClassifyTask,
    DetectTask,
    EmbedTask,
    GenericTask,
    OcrTask,
    TaskMetric,
    TaskVerdict,
    average_precision50,
    box_agreement,
    character_error_rate,
    make_task,
    scale_groups,
    task_from_model,
)
from ._transformer import is_transformer, mask_path_nodes

__all__ = [
    "CALIBRATION_METHODS",
    "CERTIFICATE_KEY",
    "DEFAULT_FP16_OP_BLOCK_LIST",
    "FAIL",
    "METRICS",
    "NOT_JUDGED",
    "NUMERICALLY_SENSITIVE_OPS",
    "PASS",
    "QUANT_FORMATS",
    "QUANT_TYPES",
    "TASKS",
    "WEIGHTED_OPS",
    "AccuracyTolerance",
    "AgreementCheck",
    "AgreementError",
    "AutoMixedPrecision",
    "Bound",
    "BudgetStep",
    "ClassifyTask",
    "DataRecord",
    "DetectTask",
    "DynamicInt8Quantizer",
    "EmbedTask",
    "Fp16Quantizer",
    "GenericTask",
    "Int8Quantizer",
    "LayerError",
    "LayerPrecision",
    "LayerSensitivity",
    "MigraphxQuantPlan",
    "MixedPrecisionResult",
    "OcrTask",
    "OutputAgreement",
    "OutputError",
    "PrecisionCertificate",
    "QuantizationReport",
    "QuantizationSpec",
    "Quantizer",
    "QuantizerBase",
    "SpeedRecord",
    "TaskMetric",
    "TaskVerdict",
    "Threshold",
    "attach_certificate",
    "average_precision50",
    "box_agreement",
    "certify",
    "character_error_rate",
    "default_fp16_op_block_list",
    "evaluate",
    "is_transformer",
    "layer_groups",
    "layer_precisions",
    "make_task",
    "mask_path_nodes",
    "model_sha256",
    "precision_quantizer",
    "prepare_model",
    "read_certificate",
    "scale_groups",
    "tail_nodes",
    "task_from_model",
    "weighted_layers",
]


def __getattr__(name: str) -> Any:
    # ONNX Runtime's block list is read on first use: importing amdinfer.quantize does not import onnxruntime.
    if name == "DEFAULT_FP16_OP_BLOCK_LIST":
        return default_fp16_op_block_list()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
