"""``bisect``: the first node whose output diverges while its inputs agree, and a minimal reproducer of it.

Both sides run once with every intermediate tensor (``Engine.run(outputs="all")``); the walk goes through the
float graph in topological order, each tensor judged on its own scale (per channel), and stops at the first
node whose outputs fail while all of its inputs pass: the fault is in that node, the later failures inherit it.
A quantized side (QDQ) is matched to the float graph by the tensors its Q/DQ pairs stand for.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ._bisect_report import BisectReport, BisectStep, Reproducer  # re-exported
from ._bisect_repro import _check_out_dir, _search_local, _write_reproducer
from ._bisect_walk import _has_qdq, _Walk, judge  # judge: re-exported
from ._compare import _check_engine, _check_same_inputs, _engine_precision, _norm_precision
from ._tensor import TolSpec

__all__ = ["BisectReport", "BisectStep", "Reproducer", "bisect", "judge"]


def _as_engine(x: Any, what: str) -> Any:
    from ..engines.base import Engine

    if isinstance(x, Engine):
        return x
    from .._load import load

    try:
        return load(x)
    except OptionError:
        raise
    except Exception as exc:  # a path or proto that is not a model
        raise OptionError(f"{what}: got {type(x).__name__}, expected an Engine or a model ({exc})") from None


def bisect(
    actual: Any,
    expected: Any,
    inputs: Any,
    *,
    atol: TolSpec = None,
    rtol: TolSpec = None,
    rms_tol: TolSpec = None,
    precision: str | None = None,
    elementwise: bool = True,
    axis: int | None = 1,
    out_dir: str | Path | None = None,
    check: bool = True,
    local: bool = True,
    local_checks: int = 256,
) -> BisectReport:
    """Find the first node whose output diverges beyond tolerance while all of its inputs are within it.

    Both sides run once with every intermediate tensor (``supports_all_outputs``: the reference and the ONNX
    Runtime engines). The walk goes through the float graph (``expected``'s; ``actual``'s when only
    ``expected`` is a QDQ model) in topological order. A quantized side is matched by what its tensors stand
    for: the output of the ``DequantizeLinear`` of a ``QuantizeLinear`` of ``X`` is compared with the float
    ``X`` (what the next node reads); float tensors a quantizer removed (a Conv's output when it fused the
    Relu) are skipped and their nodes judged with the node that reads them (:attr:`BisectReport.group`).

    Each tensor is judged on its own scale (:func:`judge`): an element passes when
    ``|a - b| <= atol * range_c + rtol * |b|``, ``range_c`` the reference's largest magnitude in that element's
    channel (the slice along ``axis``), and the RMS metric of the scaled tensors must be within ``rms_tol``; so a
    head that concatenates box coordinates (0-1024) with scores (0-1) judges the scores on the scores' scale.

    Args:
        actual: the side under test: an engine, or a model (loaded with ``amdinfer.load``).
        expected: the reference side: an engine or a model; ``None``: ``actual``'s model on the reference
            backend in fp64.
        inputs: feeds: a dict name -> array, or one array for a one-input model.
        atol: the absolute tolerance in units of the channel's range (one number, or per tensor name).
        rtol: the relative tolerance (of ``|expected|``).
        rms_tol: bound on the RMS metric of the scaled tensors.
        precision: the precision whose defaults apply (:data:`~amdinfer.verify.DEFAULT_TOLERANCES`); ``None``:
            ``"int8"`` when one side's graph holds Q/DQ nodes, else the looser of the engines' precisions.
        elementwise: whether the elementwise bound counts (else RMS only).
        axis: the channel axis (``None``: one scale per tensor).
        out_dir: write the reproducer there (created if missing; its parent must exist).
        check: run the reproducer on both sides again and record whether it diverges the same way.
        local: confirm the first divergence by running its node alone on both sides, fed the expected side's
            inputs; when it agrees there (it only amplifies its inputs' errors), go on to the next node over
            tolerance, up to ``local_checks`` nodes. The culprit is the first that diverges alone.
        local_checks: how many nodes ``local`` runs at most.

    Returns:
        A :class:`BisectReport`: ``culprit`` the first diverging step (or ``None``), ``inputs`` its inputs'
        comparisons, ``reproducer`` what was written.

    Raises:
        OptionError: a side cannot return intermediate tensors, or ``out_dir`` cannot be written.
        InputError: the sides take different inputs.

    Example:
        >>> import numpy as np, onnx
        >>> from amdinfer.testing.models import tiny_cnn
        >>> from amdinfer.verify import bisect
        >>> good, bad = tiny_cnn(), tiny_cnn()
        >>> w = next(t for t in bad.graph.initializer if t.name == "conv2.weight")
        >>> w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) * 1.02, w.name))
        >>> report = bisect(bad, good, np.ones((1, 3, 32, 32), np.float32))
        >>> report.culprit.node, list(report.inputs), report.inputs["pool1"].passed
        ('conv2', ['pool1'], True)
    """
    prec = _norm_precision(precision) if precision is not None else None
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
        raise OptionError(f"axis: got {axis!r}, expected an int (the channel axis) or None")
    a, b = _sides(actual, expected)
    out = _check_out_dir(out_dir) if out_dir is not None else None
    tol = dict(atol=atol, rtol=rtol, rms_tol=rms_tol, elementwise=elementwise, axis=axis)
    walk = _walk(a, b, inputs, prec, tol)
    report = walk.run()
    report.actual, report.expected = _describe(a), _describe(b)
    report.tolerance = {"atol": atol, "rtol": rtol, "rms_tol": rms_tol, "elementwise": elementwise, "axis": axis}
    region = _search_local(report, walk, a, b, local_checks) if local and report.culprit is not None else None
    if out is not None and report.culprit is not None:
        report.reproducer = _write_reproducer(out, report, walk, a, b, check=check, region=region)
    return report


def _sides(actual: Any, expected: Any) -> tuple[Any, Any]:
    """The two engines (``expected=None``: ``actual``'s model on the reference backend in fp64), checked."""
    a = _as_engine(actual, "actual")
    if expected is None:
        from ..engines.reference import ReferenceEngine

        b = ReferenceEngine(a.model, precision="fp64")
    else:
        b = _as_engine(expected, "expected")
    _check_engine(b, "expected")
    for e, label in ((a, "actual"), (b, "expected")):
        if not e.supports_all_outputs:
            raise OptionError(
                f"{label}: backend {e.backend_name!r} cannot return intermediate tensors (outputs='all'); "
                "bisect needs backend='reference' or 'ort' on both sides"
            )
    _check_same_inputs(a, b)
    return a, b


def _walk(a: Any, b: Any, inputs: Any, prec: str | None, tol: dict[str, Any]) -> _Walk:
    """Both sides run once with every intermediate tensor, ready to walk the float graph."""
    pa, pb = a.model.proto, b.model.proto
    walk_on_actual = _has_qdq(pb) and not _has_qdq(pa)
    if prec is None:
        prec = "int8" if (_has_qdq(pa) or _has_qdq(pb)) else _engine_precision(a, b)
    feeds = dict(inputs) if isinstance(inputs, Mapping) else {a.inputs[0].name: inputs}
    ra = {**a.run(feeds, outputs="all")}
    rb = {**b.run(feeds, outputs="all")}
    return _Walk(pa if walk_on_actual else pb, pa, pb, ra, rb, feeds, prec, tol)


def _describe(engine: Any) -> str:
    info = engine.info
    providers = f", {', '.join(info.providers)}" if info.providers else ""
    return f"{info.backend} ({info.device}{providers}, {info.precision})"
