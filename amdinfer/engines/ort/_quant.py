"""Quantizers on ONNX Runtime: the MIGraphX EP's own knobs, or the quantizer's rewritten model elsewhere.

The MIGraphX EP converts a model itself (``migraphx_fp16_enable``; ``migraphx_int8_enable`` with a
calibration table computed here by ONNX Runtime's calibrator from the quantizer's calibration feeds).
Every other provider runs the model :meth:`Quantizer.quantize <amdinfer.quantize.Quantizer.quantize>`
returns. ``precision="fp16"`` without a quantizer runs the rewrite of the ``precision_quantizer`` the engine
was given (:func:`amdinfer.load` gives :func:`amdinfer.quantize.precision_quantizer`: ``Fp16Quantizer()``),
so ``precision="fp16"`` and ``quantizer=Fp16Quantizer()`` give the same graph on every provider; this
module never imports :mod:`amdinfer.quantize`, which sits above the engines.

Example:
    >>> from amdinfer.quantize import Fp16Quantizer
    >>> from pathlib import Path
    >>> migraphx_ep_options(Fp16Quantizer(op_block_list=[]), None, Path("."))
    ({'migraphx_fp16_enable': '1'}, [])
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..._support._calib_groups import grouped_reader
from ...model import ModelSource, min_ir_version
from .._migraphx_quant import migraphx_unhonoured
from ._providers import MIGRAPHX_EP, PROVIDERS

__all__ = ["calibration_table", "migraphx_ep_options"]

log = logging.getLogger("amdinfer.ort")

_METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile", "distribution": "Distribution"}


def migraphx_ep_options(quantizer: Any, model: Any, workdir: Path) -> tuple[dict[str, str], list[str]]:
    """The MIGraphX EP's provider options for ``quantizer``, and what the EP cannot honour.

    Args:
        quantizer: a :class:`~amdinfer.quantize.Quantizer`.
        model: the float model (int8: calibrated on it).
        workdir: where the int8 calibration table is written.
    """
    spec = quantizer.describe()
    opts = dict(PROVIDERS[MIGRAPHX_EP].precision[spec.precision])
    if spec.precision == "int8":
        table = calibration_table(model, quantizer.calibration_feeds(model), spec, workdir)
        opts.update({o.name: o.value(str(table)) for o in PROVIDERS[MIGRAPHX_EP].options["int8_calibration_table"]})
    return opts, migraphx_unhonoured(spec)


def calibration_table(model: Any, feeds: list[dict[str, np.ndarray]], spec: Any, workdir: Path) -> Path:
    """ONNX Runtime's calibration table (``calibration.flatbuffers``: tensor name -> range) for ``feeds``.

    The EP reads it with ``migraphx_int8_use_native_calibration_table=0``.

    Samples of several shapes (text-line crops of several widths, for a model with dynamic axes) calibrate
    one shape group per ``collect_data`` pass (:func:`amdinfer._support._calib_groups.grouped_reader`): ONNX
    Runtime's histogram calibrators (entropy, percentile, distribution) stack what one pass collects, and
    merge ranges and histograms across passes.

    Example:
        >>> from types import SimpleNamespace
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> import tempfile
        >>> cnn = tiny_cnn(seed=0)
        >>> feeds = [random_inputs(cnn, batch=1, seed=s) for s in range(2)]
        >>> spec = SimpleNamespace(method="minmax", percentile=None)
        >>> calibration_table(cnn, feeds, spec, Path(tempfile.mkdtemp())).name
        'calibration.flatbuffers'
    """
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator
    from onnxruntime.quantization.quant_utils import write_calibration_table

    method = spec.method or "minmax"
    src = ModelSource.from_any(model, check=False)
    # The calibrator runs the model on the installed ONNX Runtime, which may read only older IR versions
    # than the onnx that wrote it; the lowest IR that holds the model is safe for both.
    src = src.with_ir_version(min_ir_version(src.proto))
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "calibration_model.onnx"
    onnx.save_model(src.proto, str(path))

    reader = grouped_reader(CalibrationDataReader, feeds, progress=False, logger=log)
    calibrator = create_calibrator(
        path,
        None,
        augmented_model_path=str(workdir / "calibration_augmented.onnx"),
        calibrate_method=getattr(CalibrationMethod, _METHODS[method]),
        extra_options={"percentile": spec.percentile} if method == "percentile" else {},
    )
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):  # the histogram calibrators print progress
        for k in range(len(reader)):  # one pass per shape group; the calibrator merges across passes
            reader.set_range(k, k + 1)
            calibrator.collect_data(reader)
        ranges = calibrator.compute_data()
    if buf.getvalue().strip():
        log.debug("onnxruntime.quantization: %s", buf.getvalue().strip())
    write_calibration_table(dict(ranges.items()), dir=str(workdir))
    return workdir / "calibration.flatbuffers"
