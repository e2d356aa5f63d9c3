"""amdinfer: run ONNX models fast on AMD GPUs, and prove the answers.

``import amdinfer`` needs only numpy and onnx; backends import their runtime on first use.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> engine = amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"])
    >>> sorted(engine.run(np.zeros((1, 3, 32, 32), np.float32)))
    ['logits']
"""

from __future__ import annotations

import importlib
from typing import Any

from ._load import load
from .engines._dlpack import DeviceArray
from .engines._prepared import PreparedRun
from .engines.base import Engine, EngineInfo
from .engines.registry import backend_names, register_backend
from .errors import (
    AgreementError,
    AmdinferError,
    BackendUnavailableError,
    BundleError,
    CacheError,
    EngineClosedError,
    InputError,
    ModelError,
    OptionError,
    StageError,
    StageInputError,
    UnsupportedOperatorError,
)
from .model import ModelSource
from .types import ShapeBounds, TensorSpec

__version__ = "0.1.0"

__all__ = [
    "AgreementError",
    "AmdinferError",
    "BackendUnavailableError",
    "BundleError",
    "CacheError",
    "Classification",
    "Detections",
    "DeviceArray",
    "Embeddings",
    "Engine",
    "EngineClosedError",
    "EngineInfo",
    "EnginePool",
    "FusedPipeline",
    "InputError",
    "ModelError",
    "ModelSource",
    "OptionError",
    "Pipeline",
    "PreparedRun",
    "Sample",
    "SegmentationMap",
    "ShapeBounds",
    "StageError",
    "StageInputError",
    "TensorSpec",
    "TextLines",
    "UnsupportedOperatorError",
    "backend_names",
    "class_names",
    "classify",
    "embed",
    "load",
    "ocr",
    "register_backend",
    "segment",
    "yolo",
    "__version__",
]

# Heavier parts load on first attribute access so `import amdinfer` stays light.
_LAZY = {
    "EnginePool": ("amdinfer.pool", "EnginePool"),
    "Pipeline": ("amdinfer.pipeline", "Pipeline"),
    "FusedPipeline": ("amdinfer.pipeline", "FusedPipeline"),
    "yolo": ("amdinfer.recipes", "yolo"),
    "classify": ("amdinfer.recipes", "classify"),
    "segment": ("amdinfer.recipes", "segment"),
    "SegmentationMap": ("amdinfer.results", "SegmentationMap"),
    "class_names": ("amdinfer.recipes", "class_names"),
    "Detections": ("amdinfer.results", "Detections"),
    "Classification": ("amdinfer.results", "Classification"),
    "TextLines": ("amdinfer.results", "TextLines"),
    "Embeddings": ("amdinfer.results", "Embeddings"),
    "Sample": ("amdinfer.stages", "Sample"),
    "ocr": ("amdinfer.text", "ocr"),
    "embed": ("amdinfer.text", "embed"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in (
        "reference",
        "verify",
        "testing",
        "preprocess",
        "postprocess",
        "quantize",
        "cache",
        "profile",
        "bench",
        "pipeline",
        "results",
        "stages",
        "recipes",
        "metrics",
        "bundle",
    ):
        return importlib.import_module(f"amdinfer.{name}")
    raise AttributeError(f"module 'amdinfer' has no attribute {name!r}")
