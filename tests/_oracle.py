"""onnx's own ReferenceEvaluator: the independent truth for engine outputs.

A module of its own, not a conftest import: ``tests/robustness/conftest.py`` is also a module named
``conftest``, and pytest keeps only the last conftest it imported under that name.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator


def oracle(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``model`` on ``feeds`` with ``onnx.reference.ReferenceEvaluator``; outputs by name."""
    ev = ReferenceEvaluator(model)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ev.run(None, feeds)))
