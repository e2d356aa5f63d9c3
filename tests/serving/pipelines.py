"""Pipelines served by the tests, built the same way in the server and in the test (seeded models)."""

from __future__ import annotations

import amdinfer
from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
from amdinfer.preprocess import Cast, HwcToChw, Letterbox, Normalize
from amdinfer.testing.models import tiny_cnn, yolov8


def classify() -> amdinfer.Pipeline:
    """uint8 HWC images -> tiny CNN logits (one output array per item)."""
    return amdinfer.Pipeline(
        preprocess=[HwcToChw(), Cast("float32")],
        engine=tiny_cnn(seed=4),
        backend="ort",
        providers=["CPUExecutionProvider"],
    )


def detect() -> amdinfer.Pipeline:
    """uint8 HWC images of any size -> Detections (a different box count per image)."""
    return amdinfer.Pipeline(
        preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(seed=1, image_size=64, num_classes=4),
        backend="ort",
        providers=["CPUExecutionProvider"],
        postprocess=[YoloDecode(conf_threshold=0.018), Nms(), ScaleBoxes()],
    )
