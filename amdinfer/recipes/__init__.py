"""One-call pipelines for common models: :func:`yolo` builds a YOLO detector the way Ultralytics predicts,
:func:`classify` an image classifier (torchvision/timm or Ultralytics preprocessing, top-k with names).

Both pick the fast form by default (``fuse="auto"``): the fused graph (:meth:`amdinfer.Pipeline.fuse`) when
the engine runs on an accelerator (``engine.info.device`` is not the CPU), stage by stage on the CPU, where
the stages are the reference and as fast. ``fuse=True``/``False`` force one form; both give the same answers.

Every recipe (these two, :func:`amdinfer.ocr` and :func:`amdinfer.embed`) is one :class:`Recipe` record in
:data:`RECIPES`: its builder, the task that judges it, and the options ``amdinfer serve --recipe``,
``serve(recipe=...)`` and the model repository take for it (:func:`get_recipe` looks one up).

=====================  ==================================================================================
``_build.py``          what the recipes share: load, stages, int8 calibration on the recipe's preprocessing, fuse
``_yolo.py``           :func:`yolo`
``_classify.py``       :func:`classify`
``_segment.py``        :func:`segment` (semantic segmentation; its geometry in ``_segment_plan.py``)
=====================  ==================================================================================

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import yolov8
    >>> det = amdinfer.yolo(yolov8(image_size=64, num_classes=2), conf=0.25, providers=["CPUExecutionProvider"])
    >>> det(np.zeros((48, 80, 3), np.uint8)).image_shape
    (48, 80)
    >>> det.close()
    >>> get_recipe("yolo").builder_function() is yolo
    True
"""

from .._support._recipes import RECIPES, Recipe, RecipeOption, get_recipe
from ._build import class_names
from ._classify import classify
from ._segment import Segmenter, segment
from ._yolo import yolo

__all__ = [
    "RECIPES",
    "Recipe",
    "RecipeOption",
    "Segmenter",
    "class_names",
    "classify",
    "get_recipe",
    "segment",
    "yolo",
]
