"""Task metrics on labelled sets: COCO ``mAP50`` / ``mAP50-95`` of a detector (:func:`detection_map`), of an instance
segmenter's boxes and masks (:func:`mask_map`) and of a pose model's boxes and keypoints (:func:`keypoint_map`,
OKS), and the mean IoU of a semantic segmenter (:func:`segmentation_iou`).

:func:`load_detection_set` reads Ultralytics' YOLO dataset layout (``data.yaml``, ``images/``, ``labels/``) or a
COCO json into a :class:`DetectionSet` (``task="segment"`` adds the masks, ``"pose"`` the keypoints); the mAPs
are asked of ``pycocotools`` (``pip install 'amdinfer-onnx[val]'``). :func:`load_semantic_set` reads images and
label PNGs into a :class:`SemanticSet`; the IoUs are NumPy. ``amdinfer val`` prints the same numbers (docs/cli.md).

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
from ._labels import mask_area, polygon_rle
from ._map import ClassMap, DetectionMetrics, detection_map
from ._semantic import SegmentationMetrics, SemanticSet, confusion_matrix, load_semantic_set, segmentation_iou
from ._tasks_map import OKS_SIGMA, InstanceMetrics, keypoint_map, keypoint_sigmas, mask_map

__all__ = [
    "OKS_SIGMA",
    "ClassMap",
    "DetectionMetrics",
    "DetectionSet",
    "InstanceMetrics",
    "SegmentationMetrics",
    "SemanticSet",
    "confusion_matrix",
    "detection_map",
    "keypoint_map",
    "keypoint_sigmas",
    "load_detection_set",
    "load_semantic_set",
    "mask_area",
    "mask_map",
    "polygon_rle",
    "read_data_yaml",
    "segmentation_iou",
]
