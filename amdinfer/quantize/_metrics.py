"""The tensor side of :func:`~amdinfer.quantize.evaluate`: per-output (per channel group) and per-layer errors.

The task metrics (boxes, classes, text, embeddings) live in :mod:`amdinfer.quantize._tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..reference import max_abs_error, rms_error
from ._report import LayerError, OutputError
from ._task_base import _cosines, _rows
from ._tasks import group_views

__all__: list[str] = []


def _concat(outs: Sequence[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    """One output over all samples, stacked along axis 0 (flattened into one row where shapes differ)."""
    arrays = [np.asarray(o[name]) for o in outs]
    try:
        return np.concatenate([a if a.ndim else a.reshape(1) for a in arrays], axis=0)
    except ValueError:  # dynamic shapes that differ between samples
        return np.concatenate([a.ravel() for a in arrays])[None]


def _output_errors(
    q: Sequence[Mapping[str, np.ndarray]], r: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, OutputError]:
    """Each output's errors; a float output whose channels have very different ranges, per channel group
    (:func:`~amdinfer.quantize._tasks.scale_groups`), keyed ``name[ch a-b]``."""
    errors: dict[str, OutputError] = {}
    for name in r[0]:
        a, b = _concat(q, name), _concat(r, name)
        if a.shape != b.shape:
            raise InputError(f"output {name!r}: quantized shape {a.shape} differs from the reference's {b.shape}")
        groups = group_views(a, b) if b.dtype.kind == "f" else [("", a, b)]
        for label, ga, gb in groups:
            af, bf = ga.astype(np.float64, copy=False), gb.astype(np.float64, copy=False)
            nonfinite = int(np.count_nonzero(~np.isfinite(af) & np.isfinite(bf)))
            cosine = float(_cosines(_rows(ga), _rows(gb)).mean()) if b.dtype.kind == "f" and ga.size else None
            e = OutputError(name, rms_error(ga, gb), max_abs_error(ga, gb), nonfinite, cosine, label)
            errors[e.label] = e
    return errors


def _layer_errors(q_engine: Any, r_engine: Any, feed: Mapping[str, np.ndarray]) -> list[LayerError]:
    for e, what in ((q_engine, "quantized"), (r_engine, "reference")):
        if not getattr(e, "supports_all_outputs", False):
            raise OptionError(
                f"per_layer=True: the {what} engine ({type(e).__name__}) cannot return intermediate tensors; "
                "use the ORT or reference backend"
            )
    q_all = q_engine.run(dict(feed), outputs="all")
    r_all = r_engine.run(dict(feed), outputs="all")
    out = []
    for node in r_engine.model.proto.graph.node:
        for t in node.output:
            if not t or t not in q_all or t not in r_all:
                continue
            a, b = np.asarray(q_all[t]), np.asarray(r_all[t])
            if a.shape != b.shape or a.dtype.kind not in "fiu" or b.dtype.kind != "f":
                continue
            out.append(LayerError(tensor=t, node=node.name, op_type=node.op_type, rms=rms_error(a, b)))
    return out
