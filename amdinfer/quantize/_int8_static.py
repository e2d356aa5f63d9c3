"""ONNX Runtime's ``quantize_static`` run for ``Int8Quantizer``: its arguments, the ranges kept, its failures named.

:func:`run_quantize_static` maps the quantizer's settings (:class:`StaticSettings`) to ONNX Runtime's enums
and ``extra_options``, hands the calibration samples over one shape group per calibrator pass, keeps the
calibrated ranges in ``ranges`` where this ONNX Runtime can (>= 1.32: mixed precision reuses them), turns
ONNX Runtime's failures into amdinfer errors that name the step and the sample, and checks the scales of
what it wrote.

Example:
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> from amdinfer.quantize import Int8Quantizer
    >>> q = Int8Quantizer(calibration=[random_inputs(tiny_cnn())], progress=False, cache=False)
    >>> "QuantizeLinear" in {n.op_type for n in q.quantize(tiny_cnn()).graph.node}  # through run_quantize_static
    True
"""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx

from .._support._progress import show_progress
from ..errors import AmdinferError
from ..model import ModelSource
from ._int8_checks import check_scales, quantize_static_error, save_for_quantizer
from ._int8_reader import _import_quantization, _ort_prints_to_log, grouped_reader

__all__ = [
    "CALIBRATION_METHODS",
    "QUANT_FORMATS",
    "QUANT_TYPES",
    "TRANSFORMER_OP_TYPES",
    "StaticSettings",
    "run_quantize_static",
]

#: ``method=`` values and ONNX Runtime's ``CalibrationMethod`` member names.
CALIBRATION_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}
#: ``format=`` values and ONNX Runtime's ``QuantFormat`` member names.
QUANT_FORMATS = {"qdq": "QDQ", "qoperator": "QOperator"}
#: ``activation_type=`` / ``weight_type=`` values and ONNX Runtime's ``QuantType`` member names.
QUANT_TYPES = {"uint8": "QUInt8", "int8": "QInt8"}
#: What int8 quantizes in a Transformer by default: the linear layers, their outputs left in float.
TRANSFORMER_OP_TYPES = ("MatMul", "Gemm")


class StaticSettings(Protocol):
    """The settings of ``Int8Quantizer`` that ``quantize_static`` reads (the quantizer is one)."""

    method: str
    percentile: float
    per_channel: bool
    symmetric_activations: bool
    reduce_range: bool
    activation_type: str
    weight_type: str
    format: str
    progress: bool | None


def run_quantize_static(
    settings: StaticSettings,
    src: ModelSource,
    feeds: list[dict[str, np.ndarray]],
    *,
    op_types: list[str] | None,
    excluded: list[str],
    only: list[str] | None,
    transformer: bool,
    ranges: Path,
) -> onnx.ModelProto:
    """``src`` quantized by ONNX Runtime's ``quantize_static`` with ``settings``, calibrated on ``feeds``.

    Raises:
        ModelError: ONNX Runtime's quantizer failed (the message names the step).
        InputError: ONNX Runtime failed running a sample (the message names it), or the calibration drives a
            tensor to inf or NaN (the message names the tensor).
    """
    quantization = _import_quantization()
    extra: dict[str, Any] = {"ActivationSymmetric": settings.symmetric_activations}
    if transformer:  # outliers of 200 beside values of 1 after BERT's feed-forward layers
        extra["OpTypesToExcludeOutputQuantization"] = list(TRANSFORMER_OP_TYPES)
    if settings.method == "percentile":
        extra["CalibPercentile"] = settings.percentile
    # ONNX Runtime >= 1.32 can keep the calibrated ranges (mixed precision reuses them); older ones
    # calibrate on every call.
    reuse = "calibration_cache_path" in inspect.signature(quantization.quantize_static).parameters
    cache_kw = {"calibration_cache_path": str(ranges)} if reuse else {}
    reader = None
    if not (reuse and ranges.is_file()):
        reader = grouped_reader(quantization.CalibrationDataReader, feeds, progress=show_progress(settings.progress))
        # one calibrator pass per shape group (ONNX Runtime's "stride": the reader's range is a group);
        # min/max ranges and histograms merge across passes
        extra["CalibStridedMinMax"] = 1
    with tempfile.TemporaryDirectory(prefix="amdinfer-int8-") as tmp:
        inp, out = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
        save_for_quantizer(src, inp)
        try:
            with _ort_prints_to_log():
                quantization.quantize_static(
                    str(inp),
                    str(out),
                    reader,
                    quant_format=getattr(quantization.QuantFormat, QUANT_FORMATS[settings.format]),
                    op_types_to_quantize=op_types,
                    per_channel=settings.per_channel,
                    reduce_range=settings.reduce_range,
                    activation_type=getattr(quantization.QuantType, QUANT_TYPES[settings.activation_type]),
                    weight_type=getattr(quantization.QuantType, QUANT_TYPES[settings.weight_type]),
                    nodes_to_quantize=only,
                    nodes_to_exclude=excluded,
                    calibrate_method=getattr(quantization.CalibrationMethod, CALIBRATION_METHODS[settings.method]),
                    extra_options=extra,
                    **cache_kw,
                )
            quantized = onnx.load_model(str(out))
        except AmdinferError:
            raise
        except Exception as exc:  # ONNX Runtime's pybind errors, its asserts, NumPy's ValueErrors
            raise quantize_static_error(exc, src, reader, ranges if reuse else None, feeds) from exc
    check_scales(quantized, src.proto)
    return quantized
