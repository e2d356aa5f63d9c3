"""Task metrics on labelled sets: COCO ``mAP50`` / ``mAP50-95`` of a detector (:func:`detection_map`).

:func:`load_detection_set` reads Ultralytics' YOLO dataset layout (``data.yaml``, ``images/``, ``labels/``) or a
COCO json into a :class:`DetectionSet`; :func:`detection_map` runs a detector over it (or takes its predictions)
and asks ``pycocotools`` for the metric (``pip install 'amdinfer-onnx[val]'``). ``amdinfer val`` prints the same
numbers (docs/cli.md).

Example:
    >>> import numpy as np
    >>> from amdinfer.metrics import DetectionSet, detection_map
    >>> truth = DetectionSet(("a.png",), (np.array([[0, 0, 10, 10.0]]),), (np.array([0]),), ("cat",), ((20, 20),), "x")
    >>> m = detection_map([np.array([[0, 0, 10, 10, 0.9, 0]])], truth)
    >>> round(m.map50, 6), round(m.map50_95, 6)
    (1.0, 1.0)
"""

from __future__ import annotations

from ._dataset import DetectionSet, load_detection_set, read_data_yaml
from ._map import ClassMap, DetectionMetrics, detection_map

__all__ = ["ClassMap", "DetectionMetrics", "DetectionSet", "detection_map", "load_detection_set", "read_data_yaml"]
