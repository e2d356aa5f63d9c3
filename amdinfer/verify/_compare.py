"""``compare`` (arrays or dicts of arrays), ``compare_engines`` and ``compare_layers`` (per-layer mode)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..engines._checks import tensors_only
from ..errors import InputError, OptionError
from ..reference._metrics import DEFAULT_TOLERANCES
from ..types import normalize_precision
from ._report import ComparisonReport, LayerEntry, LayerReport, TensorReport
from ._tensor import TolSpec, _compare_one

__all__ = ["compare", "compare_engines", "compare_layers"]

# Precisions from tightest to loosest default tolerance.
_LOOSENESS = {"fp64": 0, "fp32": 1, "bf16": 2, "fp16": 3, "int8": 4}


def _norm_precision(precision: str | None) -> str | None:
    if precision is None:
        return None
    p = normalize_precision(precision)
    if p not in DEFAULT_TOLERANCES:  # pragma: no cover - every known precision has defaults
        raise OptionError(f"precision: got {precision!r}, expected one of {list(DEFAULT_TOLERANCES)}")
    return p


def compare(
    actual: Any,
    expected: Any,
    atol: TolSpec = None,
    rtol: TolSpec = None,
    *,
    rms_tol: TolSpec = None,
    precision: str | None = None,
    elementwise: bool = True,
    topk: int | None = None,
    outputs: Sequence[str] | None = None,
    name: str = "output",
) -> TensorReport | ComparisonReport:
    """Compare actual tensors with expected ones (the reference): errors, NaN/Inf accounting, verdict.

    A tensor passes when MIGraphX's RMS metric is within ``rms_tol``, every element satisfies
    ``|a - b| <= atol + rtol * |b|`` (turn this off with ``elementwise=False`` to judge by RMS only, as
    ``migraphx-driver verify`` does unless ``MIGRAPHX_VERIFY_ENABLE_ALLCLOSE`` is set), NaNs sit at the
    same positions and Infs are equal. Integer and bool tensors must agree exactly unless tolerances
    are given.

    Args:
        actual: an array, or a dict name -> array (e.g. an engine's outputs).
        expected: the same kind as ``actual``, same names and shapes.
        atol: absolute tolerance: one number, or a dict name -> number (others keep the default).
        rtol: relative tolerance, the same way.
        rms_tol: bound on the RMS metric, the same way.
        precision: the precision of the computation under test; picks the defaults in
            :data:`~amdinfer.verify.DEFAULT_TOLERANCES`. ``None``: ``"fp16"`` when either tensor is
            float16/bfloat16 (the rule of MIGraphX's driver), else ``"fp32"``.
        elementwise: whether elementwise mismatches fail the comparison.
        topk: also compute the top-``k`` agreement along the last axis (reported, not judged).
        outputs: with dicts, compare only these names.
        name: the name a bare array gets in the report.

    Returns:
        A :class:`TensorReport` for arrays; a :class:`ComparisonReport` for dicts (``report["logits"]`` per
        output, and ``passed``/``max_abs``/``max_rel``/``rms`` the worst over outputs).

    Raises:
        InputError: shapes differ, dtypes are of different kinds (float vs int vs bool), dict names
            differ, or a tensor is not numeric.
        OptionError: a tolerance is negative or not a number, or an unknown precision.

    Example:
        >>> import numpy as np
        >>> from amdinfer.verify import compare
        >>> report = compare({"logits": np.float32([1.0, 2.0])}, {"logits": np.float32([1.0, 2.0001])})
        >>> report.passed, report["logits"].max_abs < 2e-4
        (True, True)
    """
    prec = _norm_precision(precision)
    if not isinstance(elementwise, bool):
        raise OptionError(f"elementwise: got {elementwise!r}, expected True or False")
    if topk is not None and (not isinstance(topk, int) or isinstance(topk, bool) or topk < 1):
        raise OptionError(f"topk: got {topk!r}, expected None or an int >= 1")
    kw: dict[str, Any] = dict(precision=prec, atol=atol, rtol=rtol, rms_tol=rms_tol, elementwise=elementwise, topk=topk)
    a_map, b_map = isinstance(actual, Mapping), isinstance(expected, Mapping)
    if a_map != b_map:
        raise InputError(
            f"compare: got actual as {type(actual).__name__} and expected as {type(expected).__name__}; "
            "pass two arrays or two dicts"
        )
    tolerances = (("atol", atol), ("rtol", rtol), ("rms_tol", rms_tol))
    if not a_map:
        for what, spec in tolerances:
            if isinstance(spec, Mapping):
                raise OptionError(f"{what}: per-output tolerances need dicts of outputs, got arrays")
        if outputs is not None:
            raise OptionError("outputs: only applies when comparing dicts of outputs")
        return _compare_one(name, actual, expected, **kw)
    names = _output_names(actual, expected, outputs)
    for what, spec in tolerances:
        if isinstance(spec, Mapping):
            unknown = [k for k in spec if k not in names]
            if unknown:
                raise OptionError(f"{what}: got tolerances for {unknown}, expected names among {names}")
    reports = {n: _compare_one(n, actual[n], expected[n], **kw) for n in names}
    return ComparisonReport(reports, precision=prec or _auto_precision(reports.values()))


def _output_names(actual: Mapping[str, Any], expected: Mapping[str, Any], outputs: Sequence[str] | None) -> list[str]:
    """The names to compare: ``outputs``, else all of ``actual``'s; both dicts must hold them (and no others)."""
    names = list(outputs) if outputs is not None else list(actual)
    missing_a = [n for n in names if n not in actual]
    missing_b = [n for n in names if n not in expected]
    extra_b = [n for n in expected if n not in actual] if outputs is None else []
    if missing_a or missing_b or extra_b:
        parts = []
        if missing_a:
            parts.append(f"missing in actual: {missing_a}")
        if missing_b:
            parts.append(f"missing in expected: {missing_b}")
        if extra_b:
            parts.append(f"only in expected: {extra_b}")
        raise InputError("compare: the outputs differ; " + "; ".join(parts) + " (pass outputs=[...] to pick)")
    return names


def _auto_precision(reports: Any) -> str:
    precs = [r.precision for r in reports if r.precision != "exact"]
    return max(precs, key=lambda p: _LOOSENESS.get(p, 1)) if precs else "fp32"


def _engine_precision(*engines: Any) -> str | None:
    precs = []
    for e in engines:
        p = getattr(getattr(e, "info", None), "precision", None)
        if p in _LOOSENESS:
            precs.append(p)
    if not precs:
        return None
    loosest = max(precs, key=lambda p: _LOOSENESS[p])
    # fp32 leaves the choice to the arrays: float16 outputs (an fp16 model) get fp16 tolerances.
    return None if loosest == "fp32" else loosest


def _check_engine(x: Any, what: str) -> None:
    from ..engines.base import Engine

    if not isinstance(x, Engine):
        raise OptionError(f"{what}: got {type(x).__name__}, expected an amdinfer Engine (amdinfer.load(...))")


def _check_same_inputs(a: Any, b: Any) -> None:
    sa = {s.name: s for s in a.inputs}
    sb = {s.name: s for s in b.inputs}
    if set(sa) != set(sb):
        raise InputError(f"engines take different inputs: a takes {sorted(sa)}, b takes {sorted(sb)}")
    for name, x in sa.items():
        y = sb[name]
        fixed_differ = any(isinstance(p, int) and isinstance(q, int) and p != q for p, q in zip(x.shape, y.shape))
        if x.dtype != y.dtype or x.rank != y.rank or x.container != y.container or fixed_differ:
            raise InputError(f"engines disagree on input {name!r}: a takes {x!r}, b takes {y!r}")


def _prepare_feeds(inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return dict(inputs)
    return inputs  # one array for a one-input model; Engine.run checks it


def _run_both(a: Any, b: Any, inputs: Any, outputs: Any, precision: str | None) -> tuple[Any, Any, str | None]:
    """Both engines' outputs on the same feeds, and the precision whose tolerances apply."""
    feeds = _prepare_feeds(inputs)
    ra = a.run(feeds, outputs=outputs)
    rb = b.run(feeds, outputs=outputs)
    prec = _norm_precision(precision) if precision is not None else _engine_precision(a, b)
    return ra, rb, prec


def compare_engines(
    a: Any,
    b: Any,
    inputs: Any,
    *,
    outputs: Sequence[str] | None = None,
    atol: TolSpec = None,
    rtol: TolSpec = None,
    rms_tol: TolSpec = None,
    precision: str | None = None,
    elementwise: bool = True,
    topk: int | None = None,
    per_layer: bool = False,
) -> ComparisonReport | LayerReport:
    """Run two engines on the same feeds and compare their outputs; ``b`` is the expected side.

    Args:
        a: the engine under test (e.g. ORT on a GPU).
        b: the reference (e.g. ``amdinfer.load(model, backend="reference", precision="fp64")``).
        inputs: feeds: a dict name -> array, or one array for a one-input model.
        outputs: output names to compare (default: all of ``a``'s outputs).
        atol, rtol, rms_tol, elementwise, topk: see :func:`compare`.
        precision: the precision whose defaults apply; ``None``: the looser of the two engines'
            ``info.precision`` (float16 outputs of an fp32 engine still get fp16 tolerances).
        per_layer: compare every intermediate tensor too and name the first divergent node
            (:func:`compare_layers`).

    Returns:
        A :class:`ComparisonReport` (or a :class:`LayerReport` with ``per_layer=True``).

    Raises:
        OptionError: ``a`` or ``b`` is not an engine.
        InputError: the engines take different inputs (names, dtypes, fixed dims), lack a requested output,
            or return outputs of different shapes or dtype kinds.
        ModelError: a compared output is a sequence or optional value (compare tensors, named in ``outputs``).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> from amdinfer.verify import compare_engines
        >>> model = tiny_cnn()
        >>> ort = amdinfer.load(model, backend="ort", providers=["cpu"])
        >>> ref = amdinfer.load(model, backend="reference", precision="fp64")
        >>> compare_engines(ort, ref, np.ones((1, 3, 32, 32), np.float32)).passed
        True
    """
    _check_engine(a, "a")
    _check_engine(b, "b")
    if per_layer:
        return compare_layers(
            a, b, inputs, atol=atol, rtol=rtol, rms_tol=rms_tol, precision=precision, elementwise=elementwise
        )
    _check_same_inputs(a, b)
    names = list(outputs) if outputs is not None else [s.name for s in a.outputs]
    compared = [s for s in a.outputs if s.name in names]
    tensors_only([], compared, "compare_engines (it compares tensors; pick tensor outputs with outputs=)")
    for engine, label in ((a, "a"), (b, "b")):
        have = {s.name for s in engine.outputs}
        missing = [n for n in names if n not in have]
        if missing:
            raise InputError(f"outputs: engine {label} ({engine!r}) has no output(s) {missing}; it has {sorted(have)}")
    ra, rb, prec = _run_both(a, b, inputs, names, precision)
    report = compare(
        ra, rb, atol, rtol, rms_tol=rms_tol, precision=prec, elementwise=elementwise, topk=topk, outputs=names
    )
    assert isinstance(report, ComparisonReport)  # dicts in, so one report per output
    return report


def _graph_tensors(proto: Any) -> list[tuple[int, str, str, str]]:
    """``(node index, node name, op type, tensor)`` for every node output, in graph order, then graph outputs."""
    out = []
    seen: set[str] = set()
    for i, node in enumerate(proto.graph.node):
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        for t in node.output:
            if t and t not in seen:
                seen.add(t)
                out.append((i, node.name or f"#{i}", op, t))
    for o in proto.graph.output:
        if o.name not in seen:
            seen.add(o.name)
            out.append((len(proto.graph.node), o.name, "graph input/initializer", o.name))
    return out


def compare_layers(
    engine: Any,
    reference: Any,
    inputs: Any,
    *,
    atol: TolSpec = None,
    rtol: TolSpec = None,
    rms_tol: TolSpec = None,
    precision: str | None = None,
    elementwise: bool = True,
) -> LayerReport:
    """Compare every intermediate tensor of two engines and name the first node whose output diverges.

    Both engines run with ``outputs="all"``; tensors are walked in the graph's topological order (the
    order of the reference's model), so the first divergent tensor is where the error enters: the
    layers after it inherit it. Tensors only one engine returns, and non-tensor values, are listed in
    ``skipped``; a shape or dtype-kind disagreement at a layer counts as a divergence there.

    Args:
        engine: the engine under test, or a model (loaded with ``amdinfer.load(model)``).
        reference: the reference engine; ``None`` loads ``engine``'s model on the reference backend in
            fp64.
        inputs: feeds: a dict name -> array, or one array for a one-input model.
        atol, rtol, rms_tol, elementwise: see :func:`compare` (dicts are keyed by tensor name).
        precision: the precision whose defaults apply; ``None``: the looser of the engines' precisions.

    Returns:
        A :class:`LayerReport`; ``report.first_divergence`` is ``None`` when every layer agrees.

    Raises:
        OptionError: an engine cannot return intermediate tensors (``supports_all_outputs``).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> from amdinfer.verify import compare_layers
        >>> ort = amdinfer.load(tiny_cnn(), backend="ort", providers=["cpu"])
        >>> report = compare_layers(ort, None, np.ones((1, 3, 32, 32), np.float32))
        >>> report.first_divergence is None, len(report.layers)
        (True, 8)
    """
    from ..engines.base import Engine

    if not isinstance(engine, Engine):
        from .._load import load

        engine = load(engine)
    if reference is None:
        from ..engines.reference import ReferenceEngine

        reference = ReferenceEngine(engine.model, precision="fp64")
    _check_engine(reference, "reference")
    for e, label in ((engine, "engine"), (reference, "reference")):
        if not e.supports_all_outputs:
            raise OptionError(
                f"{label}: backend {e.backend_name!r} cannot return intermediate tensors (outputs='all'); "
                "per-layer comparison needs backend='reference' or 'ort'"
            )
    _check_same_inputs(engine, reference)
    ra, rb, prec = _run_both(engine, reference, inputs, "all", precision)
    kw: dict[str, Any] = dict(precision=prec, atol=atol, rtol=rtol, rms_tol=rms_tol, elementwise=elementwise, topk=None)
    layers: list[LayerEntry] = []
    skipped: dict[str, str] = {}
    for index, node, op, tensor in _graph_tensors(reference.model.proto):
        if tensor not in ra or tensor not in rb:
            where = "engine" if tensor not in ra else "reference"
            skipped[tensor] = f"not returned by the {where}"
            continue
        x, y = ra[tensor], rb[tensor]
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
            skipped[tensor] = "not a tensor"
            continue
        try:
            report = _compare_one(tensor, x, y, **kw)
        except InputError as exc:
            report = _failed_report(tensor, x, y, str(exc), prec or "fp32")
        layers.append(LayerEntry(index, node, op, tensor, report))
    return LayerReport(layers, skipped, precision=prec or _auto_precision(e.report for e in layers))


def _failed_report(name: str, x: np.ndarray, y: np.ndarray, why: str, precision: str) -> TensorReport:
    nan = float("nan")
    return TensorReport(
        name=name,
        shape=tuple(x.shape),
        actual_dtype=str(x.dtype),
        expected_dtype=str(y.dtype),
        size=int(x.size),
        max_abs=nan,
        max_rel=nan,
        rms=nan,
        cosine=None,
        mismatches=int(max(x.size, y.size)),
        worst_index=None,
        worst_actual=None,
        worst_expected=None,
        nan_actual=0,
        nan_expected=0,
        nan_mismatch=0,
        inf_actual=0,
        inf_expected=0,
        inf_mismatch=0,
        rms_tol=nan,
        atol=nan,
        rtol=nan,
        precision=precision,
        passed=False,
        reasons=[why],
    )
