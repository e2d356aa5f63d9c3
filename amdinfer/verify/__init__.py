"""Prove an engine's answers: error metrics, tolerance verdicts, engine-vs-engine and per-layer comparison.

``compare(actual, expected)`` judges arrays or dicts of outputs against the reference with MIGraphX's
RMS metric, an elementwise ``|a - b| <= atol + rtol * |b|`` bound, and NaN/Inf accounting, using default
tolerances per precision (those of ``migraphx-driver verify``). ``compare_engines(a, b, inputs)`` runs
two engines on the same feeds; ``compare_layers`` (or ``per_layer=True``) walks every intermediate
tensor and names the first node whose output diverges; ``bisect(a, b, inputs, out_dir=...)`` also matches a model
with its quantized form, judges each tensor on its own scale and writes a minimal ONNX reproducer of that node.
``save_golden``/``load_golden`` keep a run's inputs and outputs in one ``.npz`` (what ``amdinfer run --save`` and
``verify --save-golden`` write, ``verify --golden`` reads).

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> from amdinfer.verify import compare
    >>> model = tiny_cnn()
    >>> x = np.ones((1, 3, 32, 32), np.float32)
    >>> ort = amdinfer.load(model, backend="ort", providers=["cpu"]).run(x)
    >>> ref = amdinfer.load(model, backend="reference", precision="fp64").run(x)
    >>> report = compare(ort, ref)
    >>> report.passed, report["logits"].rms < 1e-5
    (True, True)
"""

from __future__ import annotations

from ..reference._metrics import (
    DEFAULT_TOLERANCES,
    Tolerance,
    cosine_similarity,
    default_tolerance,
    max_abs_error,
    max_rel_error,
    nonfinite_counts,
    rms_error,
    topk_agreement,
    within_tolerance,
)
from ._bisect import BisectReport, BisectStep, Reproducer, bisect, judge
from ._compare import compare, compare_engines, compare_layers
from ._golden import Golden, load_golden, save_golden
from ._report import ComparisonReport, LayerEntry, LayerReport, TensorReport

__all__ = [
    "DEFAULT_TOLERANCES",
    "BisectReport",
    "BisectStep",
    "ComparisonReport",
    "Golden",
    "LayerEntry",
    "LayerReport",
    "Reproducer",
    "TensorReport",
    "Tolerance",
    "bisect",
    "compare",
    "compare_engines",
    "compare_layers",
    "cosine_similarity",
    "default_tolerance",
    "judge",
    "load_golden",
    "max_abs_error",
    "max_rel_error",
    "nonfinite_counts",
    "rms_error",
    "save_golden",
    "topk_agreement",
    "within_tolerance",
]
