"""``amdinfer.yolo(model, task="detect")`` on a segmentation or a pose model (issue 41): the boxes alone, decoded past
the mask coefficients or keypoints.

Two truths: the model's own task pipeline (``amdinfer.yolo(model)``: its boxes, scores and classes, on images where
no box loses its mask) and the detector's stages run by hand on the prediction rows ``4 + nc`` of ``output0``
(``YoloDecode("v8")``, ``Nms``, ``ScaleBoxes`` after the recipe's own ``Letterbox``), the layout of a plain
detection head.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.errors import OptionError
from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
from amdinfer.stages import Sample
from amdinfer.testing.models import yolov8, yolov8_pose, yolov8_seg

CPU = {"providers": ["CPUExecutionProvider"]}
IMAGES = [np.random.default_rng(s).integers(0, 255, (h, w, 3), dtype=np.uint8) for s, (h, w) in
          enumerate([(48, 80), (80, 64), (64, 64)])]  # fmt: skip
#: (builder, rows past 4 + nc: mask coefficients or keypoints)
MODELS = {"segment": (lambda: yolov8_seg(image_size=64, num_classes=2), 32), "pose": (lambda: yolov8_pose(
    image_size=64), 51)}  # fmt: skip


def _by_hand(model: onnx.ModelProto, image: np.ndarray, extra: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The detector's stages on ``output0``'s first ``4 + nc`` rows (a detection head's layout)."""
    with amdinfer.yolo(model, conf=0.01, **CPU) as ref:  # only its preprocessing and engine
        sample = Sample.wrap(image)
        for stage in ref.preprocess:
            sample = stage(sample)
        feeds = {ref.engine.inputs[0].name: sample.data[None]}
        pred = ref.engine.run(feeds)[ref.engine.outputs[0].name][0]
    sample = Sample(pred[: pred.shape[0] - extra], sample.meta)
    for stage in (YoloDecode("v8", 0.01), Nms(iou_threshold=0.7, class_offset=7680), ScaleBoxes()):
        sample = stage(sample)
    det = sample.data
    return det.boxes, det.scores, det.classes


@pytest.mark.parametrize("task", sorted(MODELS))
def test_task_detect_answers_the_task_pipelines_boxes_and_the_detector_stages_by_hand(task: str) -> None:
    build, extra = MODELS[task]
    model = build()
    with amdinfer.yolo(model, conf=0.01, **CPU) as full, amdinfer.yolo(model, task="detect", conf=0.01, **CPU) as det:
        assert [type(s).__name__ for s in det.postprocess][1:] == ["BoxesOnly", "Nms", "ScaleBoxes"]
        got, want = det.run_batch(IMAGES), full.run_batch(IMAGES)
    for image, g, w in zip(IMAGES, got, want):
        assert len(g) > 0 and g.masks is None and g.keypoints is None and g.coefficients is None
        boxes, scores, classes = _by_hand(model, image, extra)
        assert np.array_equal(g.boxes, boxes) and np.array_equal(g.scores, scores)
        assert np.array_equal(g.classes, classes)
        assert len(w) == len(g), "a box lost its mask: pick images where none does"
        assert np.array_equal(g.boxes, w.boxes) and np.array_equal(g.scores, w.scores)
        assert np.array_equal(g.classes, w.classes) and g.labels == w.labels


def test_a_detection_model_keeps_its_chain() -> None:
    with amdinfer.yolo(yolov8(image_size=64), task="detect", **CPU) as det:
        assert [type(s).__name__ for s in det.postprocess] == ["YoloDecode", "Nms", "ScaleBoxes"]


def test_task_detect_slices_a_segmentation_models_boxes() -> None:
    """What the tiles refusal of a seg model points to (``task='detect'`` slices its boxes): boxes in the image's
    pixels, no masks."""
    with amdinfer.yolo(yolov8_seg(image_size=64, num_classes=2), task="detect", tiles=(64, 64), conf=0.01,
                       **CPU) as sliced:  # fmt: skip
        assert type(sliced).__name__ == "SlicedPipeline"
        r = sliced(np.random.default_rng(7).integers(0, 255, (100, 140, 3), dtype=np.uint8))
    assert len(r) > 0 and r.masks is None and r.image_shape == (100, 140)
    assert (r.boxes[:, 2] <= 140).all() and (r.boxes[:, 3] <= 100).all()


def test_fuse_true_with_task_detect_on_a_seg_model_is_refused_naming_its_outputs() -> None:
    with pytest.raises(OptionError, match=r"fuse: got True with task='detect' on a segment model \(outputs "
                                          r"\['output0', 'output1'\]\)"):  # fmt: skip
        amdinfer.yolo(yolov8_seg(image_size=64, num_classes=2), task="detect", fuse=True, **CPU)
