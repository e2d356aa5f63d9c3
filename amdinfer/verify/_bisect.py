"""``bisect``: the first node whose output diverges while its inputs agree, and a minimal reproducer of it.

Both sides run once with every intermediate tensor (``Engine.run(outputs="all")``); the walk goes through the
float graph in topological order, each tensor judged on its own scale (per channel), and stops at the first
node whose outputs fail while all of its inputs pass: the fault is in that node, the later failures inherit it.
A quantized side (QDQ) is matched to the float graph by the tensors its Q/DQ pairs stand for.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import InputError, OptionError
from ._compare import _check_engine, _check_same_inputs, _engine_precision, _norm_precision
from ._metrics import as_float64
from ._report import _COLUMNS, TensorReport, _jsonable, _row, _text_table
from ._tensor import TolSpec, _compare_one, _is_16bit, _kind

__all__ = ["BisectReport", "BisectStep", "Reproducer", "bisect", "judge"]

#: A channel whose range is below this fraction of its tensor's range is judged against that fraction instead
#: (a channel the reference holds at zero would otherwise turn any rounding into an infinite relative error).
CHANNEL_FLOOR = 1e-4

_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


# ----------------------------------------------------------------------------------------------------- judging


def _channel_scale(b: np.ndarray, axis: int | None) -> np.ndarray | float:
    """The reference's range (``max |b|``) per slice along ``axis`` (the whole tensor when ``None`` or rank < 2)."""
    absb = np.abs(np.where(np.isfinite(b), b, 0.0))
    whole = float(absb.max()) if absb.size else 0.0
    whole = whole if whole > 0 else 1.0  # an all-zero reference: errors are judged as absolute numbers
    if axis is None or b.ndim < 2 or not -b.ndim <= axis < b.ndim or b.size == 0:
        return whole
    other = tuple(i for i in range(b.ndim) if i != axis % b.ndim)
    per = absb.max(axis=other, keepdims=True)
    return np.maximum(per, CHANNEL_FLOOR * whole)


def judge(
    name: str,
    actual: Any,
    expected: Any,
    *,
    precision: str | None = None,
    atol: TolSpec = None,
    rtol: TolSpec = None,
    rms_tol: TolSpec = None,
    elementwise: bool = True,
    axis: int | None = 1,
) -> TensorReport:
    """Compare one tensor on its own scale: both divided by the reference's range per channel, then ``compare``.

    An element passes when ``|a - b| <= atol * range_c + rtol * |b|`` with ``range_c`` the largest ``|b|`` in its
    channel (slice along ``axis``; at least ``CHANNEL_FLOOR`` of the tensor's range), and the RMS metric is that
    of the scaled tensors. ``max_abs`` of the report is in units of the channel's range; ``worst_actual`` and
    ``worst_expected`` are the raw values. Integer and bool tensors are compared exactly, unscaled.

    Example:
        >>> import numpy as np
        >>> boxes_and_scores = np.array([[[1000.0, 500.0]], [[0.9, 0.0]]]).reshape(1, 2, 2)
        >>> collapsed = boxes_and_scores * np.array([1.0, 0.0]).reshape(1, 2, 1)
        >>> judge("output0", collapsed, boxes_and_scores, precision="int8").passed
        False
    """
    a_raw, b_raw = np.asarray(actual), np.asarray(expected)
    prec = precision or ("fp16" if (_is_16bit(a_raw) or _is_16bit(b_raw)) else "fp32")
    kw: dict[str, Any] = dict(precision=prec, atol=atol, rtol=rtol, rms_tol=rms_tol, elementwise=elementwise)
    if a_raw.shape != b_raw.shape or _kind(a_raw) != _kind(b_raw) or _kind(b_raw) != "f":
        return _compare_one(name, a_raw, b_raw, topk=None, **kw)
    a = as_float64(a_raw, f"actual {name!r}")
    b = as_float64(b_raw, f"expected {name!r}")
    scale = _channel_scale(b, axis)
    report = _compare_one(name, a / scale, b / scale, topk=None, **kw)
    worst = report.worst_index
    return dataclasses.replace(
        report,
        actual_dtype=str(a_raw.dtype),
        expected_dtype=str(b_raw.dtype),
        worst_actual=None if worst is None else float(a[worst]),
        worst_expected=None if worst is None else float(b[worst]),
    )


def _failed(name: str, why: str, precision: str) -> TensorReport:
    nan = float("nan")
    return TensorReport(name, (), "?", "?", 0, nan, nan, nan, None, 0, None, None, None, 0, 0, 0, 0, 0, 0,
                        nan, nan, nan, precision, passed=False, reasons=[why])  # fmt: skip


# ---------------------------------------------------------------------------------------------- graph matching


def _has_qdq(proto: onnx.ModelProto) -> bool:
    return any(n.op_type in _QDQ_OPS for n in proto.graph.node)


def _visible(proto: onnx.ModelProto) -> dict[str, str]:
    """Float tensor name -> the tensor its consumers read in a QDQ graph (``X`` -> ``X_DequantizeLinear_Output``).

    Found from the structure: a ``DequantizeLinear`` whose input a ``QuantizeLinear`` of ``X`` wrote stands for
    ``X``. ONNX Runtime renames a quantized graph output ``X`` to ``X_QuantizeLinear_Input`` before the pair and
    gives the DequantizeLinear output the name ``X``, which then matches by name.
    """
    q_source = {n.output[0]: n.input[0] for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.output}
    out: dict[str, str] = {}
    for n in proto.graph.node:
        if n.op_type == "DequantizeLinear" and n.input and n.input[0] in q_source and n.output:
            src = q_source[n.input[0]]
            if src.endswith("_QuantizeLinear_Input"):
                continue  # the graph-output case: its DequantizeLinear output already has the float name
            out.setdefault(src, n.output[0])
    return out


def _constants(proto: onnx.ModelProto) -> set[str]:
    names = {i.name for i in proto.graph.initializer}
    names |= {o for n in proto.graph.node if n.op_type == "Constant" for o in n.output}
    return names


# ----------------------------------------------------------------------------------------------------- reports


@dataclass
class BisectStep:
    """One node of the walk through the float graph.

    Attributes:
        index: its position in the graph (topological order).
        node: its name (``"#<index>"`` when it has none).
        op_type: its operator (``domain::Op`` outside ai.onnx).
        outputs: output tensor -> its comparison (the outputs both sides returned).
        status: ``"ok"``, ``"diverges"`` (the first divergence: inputs within tolerance, an output not),
            ``"inherited"`` (an output fails after the first divergence), ``"amplifies"`` (over tolerance, but
            the node alone, fed the expected side's inputs, agrees: it amplifies its inputs' small errors) or
            ``"not compared"`` (no output of it has a counterpart on both sides, e.g. a Conv whose Relu the
            quantizer fused: it is judged with the node that reads it).

    Example:
        >>> BisectStep(3, "conv2", "Conv", {}, "ok").status
        'ok'
    """

    index: int
    node: str
    op_type: str
    outputs: dict[str, TensorReport]
    status: str

    @property
    def passed(self) -> bool:
        """Whether every compared output is within tolerance."""
        return all(r.passed for r in self.outputs.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "index": self.index,
            "node": self.node,
            "op_type": self.op_type,
            "status": self.status,
            "outputs": {k: r.to_dict() for k, r in self.outputs.items()},
        }


@dataclass
class Reproducer:
    """The minimal model around the first diverging node, its inputs and both sides' outputs, in one folder.

    Attributes:
        directory: the folder.
        files: what each file is -> its path (``model``, or ``actual_model`` and ``expected_model``;
            ``inputs``, ``expected``, ``actual``, ``report``, ``readme``).
        command: the ``amdinfer verify`` command that compares the two sides on the reproducer.
        reproduced: whether the reproducer, run on both sides, diverges at the same outputs (``None``: not run).
        check: the reproducer's comparison (output -> report), when it was run.
        note: why it was not run, or what its result means.

    Example:
        >>> Reproducer(Path("repro"), {}, "amdinfer verify repro/model.onnx", None).reproduced is None
        True
    """

    directory: Path
    files: dict[str, Path]
    command: str
    reproduced: bool | None
    check: dict[str, TensorReport] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "directory": str(self.directory),
            "files": {k: str(v) for k, v in self.files.items()},
            "command": self.command,
            "reproduced": self.reproduced,
            "check": {k: r.to_dict() for k, r in self.check.items()},
            "note": self.note,
        }


@dataclass
class BisectReport:
    """Where two sides start to disagree: the first node whose outputs diverge while its inputs agree.

    Attributes:
        steps: one :class:`BisectStep` per node of the float graph, in topological order.
        culprit: the first step whose outputs diverge while its inputs agree and that diverges alone too (run
            by itself on the expected side's inputs); ``None`` when no step does.
        first_divergence: the first step over tolerance with its inputs within it (the culprit, unless that
            step only amplified its inputs' errors; then the culprit is a later one, or ``None``).
        group: names of the nodes the culprit stands for (it and the nodes before it whose outputs were not
            compared, e.g. a Conv fused with its Relu by the quantizer), in graph order.
        inputs: the culprit's inputs (the float graph's names) -> their comparison (``None``: a graph input both
            sides are fed identically).
        graph_inputs: graph inputs a side transforms (an int8 input quantization) -> their comparison.
        skipped: tensor -> why it was not compared.
        precision: the precision the default tolerances came from.
        tolerance: the tolerances given (``None``: the precision's default) and the channel axis.
        actual: the side under test, in words; ``expected`` the reference side.
        reproducer: the reproducer written (``out_dir=``), else ``None``.

    Example:
        >>> report = BisectReport(steps=[], culprit=None)
        >>> report.passed, report.verdict
        (True, 'no divergence: all 0 compared tensors within tolerance')
    """

    steps: list[BisectStep]
    culprit: BisectStep | None
    group: list[str] = field(default_factory=list)
    inputs: dict[str, TensorReport | None] = field(default_factory=dict)
    graph_inputs: dict[str, TensorReport] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    tolerance: dict[str, Any] = field(default_factory=dict)
    actual: str = "actual"
    expected: str = "expected"
    reproducer: Reproducer | None = None
    first_divergence: BisectStep | None = None
    local_checks: int = 0
    local: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.first_divergence is None:
            self.first_divergence = self.culprit

    @property
    def passed(self) -> bool:
        """Whether no compared tensor diverges (graph inputs included)."""
        ok_inputs = all(r.passed for r in self.graph_inputs.values())
        return self.culprit is None and self.first_divergence is None and ok_inputs

    @property
    def checked(self) -> list[BisectStep]:
        """The steps before the culprit whose outputs were compared (all within tolerance)."""
        stop = self.culprit.index if self.culprit is not None else math.inf
        return [s for s in self.steps if s.index < stop and s.outputs]

    @property
    def diverged(self) -> list[BisectStep]:
        """Every step with an output outside tolerance (the culprit and those that inherit it)."""
        return [s for s in self.steps if s.status in ("diverges", "inherited", "amplifies")]

    @property
    def verdict(self) -> str:
        """One line: the node named, or that nothing diverges."""
        compared = sum(len(s.outputs) for s in self.steps)
        bad_inputs = [n for n, r in self.graph_inputs.items() if not r.passed]
        if bad_inputs:
            return f"divergence enters at graph input(s) {bad_inputs}: the actual side changes them (quantization)"
        c = self.culprit
        first = self.first_divergence
        if c is None and first is not None:
            return (
                f"error accumulates from node {first.node!r} ({first.op_type}, #{first.index}) on: "
                f"{len(self.diverged)} nodes over tolerance, none of the {self.local_checks} run alone on the "
                "expected side's inputs diverges by itself"
            )
        if c is None:
            return f"no divergence: all {compared} compared tensors within tolerance"
        if all(r is None or r.passed for r in self.inputs.values()):
            inputs = f"its {len(self.inputs)} input(s) within tolerance"
        else:
            inputs = "it diverges alone too, fed the expected side's values of its inputs"
        amplified = ""
        if first is not None and first is not c:
            amplified = f" (over tolerance from {first.node!r}, #{first.index}, on, amplified errors)"
        worst = max(c.outputs.values(), key=lambda r: (not r.passed, _finite(r.rms)))
        fused = f" (with {', '.join(repr(g) for g in self.group if g != c.node)})" if len(self.group) > 1 else ""
        return (
            f"first divergence at node {c.node!r} ({c.op_type}, #{c.index}){fused}: output {worst.name!r} "
            f"{'; '.join(worst.reasons)}; {inputs}; "
            f"{len(self.diverged) - 1} other node(s) over tolerance{amplified}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        c = self.culprit
        return {
            "passed": self.passed,
            "verdict": self.verdict,
            "actual": self.actual,
            "expected": self.expected,
            "precision": self.precision,
            "tolerance": {k: _jsonable(v) for k, v in self.tolerance.items()},
            "culprit": None if c is None else c.to_dict(),
            "first_divergence": None if self.first_divergence is None else self.first_divergence.node,
            "group": list(self.group),
            "inputs": {k: None if r is None else r.to_dict() for k, r in self.inputs.items()},
            "graph_inputs": {k: r.to_dict() for k, r in self.graph_inputs.items()},
            "checked": [s.node for s in self.checked],
            "diverged": [s.node for s in self.diverged],
            "steps": [s.to_dict() for s in self.steps],
            "skipped": dict(self.skipped),
            "reproducer": None if self.reproducer is None else self.reproducer.to_dict(),
        }

    def table_rows(self, top: int = 5) -> list[list[str]]:
        """Rows of the table: the last ``top`` checked nodes, the culprit's inputs and the culprit's outputs."""
        rows: list[list[str]] = []
        c = self.culprit
        if c is None:
            chosen = sorted(
                ((s, r) for s in self.steps for r in s.outputs.values()), key=lambda sr: -_finite(sr[1].rms)
            )[:top]
            return [["largest error", str(s.index), s.node, s.op_type, *_row(r)] for s, r in chosen]
        inputs = set(self.inputs)
        for s in self.checked[-top:] if top else []:
            for r in s.outputs.values():
                if r.name not in inputs:
                    rows.append(["checked", str(s.index), s.node, s.op_type, *_row(r)])
        for name, rep in self.inputs.items():
            if rep is not None:
                src = next((s for s in self.steps if name in s.outputs), None)
                idx, node, op = (str(src.index), src.node, src.op_type) if src else ("-", "(graph input)", "-")
                rows.append(["input", idx, node, op, *_row(rep)])
        for r in c.outputs.values():
            rows.append(["DIVERGES" if not r.passed else "output", str(c.index), c.node, c.op_type, *_row(r)])
        return rows

    def table(self, top: int = 5) -> str:
        """The table of :meth:`table_rows` as text."""
        return _text_table(["role", "#", "node", "op", *_COLUMNS], self.table_rows(top))

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` naming the first diverging node (for tests)."""
        if not self.passed:
            raise AssertionError(repr(self))

    def __repr__(self) -> str:
        lines = [f"BisectReport({self.verdict}; precision {self.precision})", self.table()]
        if self.reproducer is not None:
            lines.append(f"  reproducer in {self.reproducer.directory}: {self.reproducer.command}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from ._report import _html_table

        rows = self.table_rows()
        return f"<p>BisectReport: <b>{html.escape(self.verdict)}</b></p>" + _html_table(
            ["role", "#", "node", "op", *_COLUMNS], rows, [r[0] == "DIVERGES" for r in rows]
        )


def _finite(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else math.inf


# ------------------------------------------------------------------------------------------------------- bisect


def _as_engine(x: Any, what: str) -> Any:
    from ..engines.base import Engine

    if isinstance(x, Engine):
        return x
    import amdinfer

    try:
        return amdinfer.load(x)
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
        >>> import numpy as np, amdinfer
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
    out = _check_out_dir(out_dir) if out_dir is not None else None
    pa, pb = a.model.proto, b.model.proto
    walk_on_actual = _has_qdq(pb) and not _has_qdq(pa)
    if prec is None:
        prec = "int8" if (_has_qdq(pa) or _has_qdq(pb)) else _engine_precision(a, b)
    feeds = dict(inputs) if isinstance(inputs, Mapping) else {a.inputs[0].name: inputs}
    ra = {**a.run(feeds, outputs="all")}
    rb = {**b.run(feeds, outputs="all")}
    tol = dict(atol=atol, rtol=rtol, rms_tol=rms_tol, elementwise=elementwise, axis=axis)
    walk = _Walk(pa if walk_on_actual else pb, pa, pb, ra, rb, feeds, prec, tol)
    report = walk.run()
    report.actual, report.expected = _describe(a), _describe(b)
    report.tolerance = {"atol": atol, "rtol": rtol, "rms_tol": rms_tol, "elementwise": elementwise, "axis": axis}
    region = _search_local(report, walk, a, b, local_checks) if local and report.culprit is not None else None
    if out is not None and report.culprit is not None:
        report.reproducer = _write_reproducer(out, report, walk, a, b, check=check, region=region)
    return report


def _describe(engine: Any) -> str:
    info = engine.info
    providers = f", {', '.join(info.providers)}" if info.providers else ""
    return f"{info.backend} ({info.device}{providers}, {info.precision})"


class _Walk:
    """The walk through the float graph: matching, judging, grouping, and the culprit."""

    def __init__(
        self, walk: Any, pa: Any, pb: Any, ra: dict, rb: dict, feeds: dict, prec: str | None, tol: dict
    ) -> None:
        self.proto = walk
        self.pa, self.pb = pa, pb
        self.ra, self.rb, self.feeds = ra, rb, feeds
        self.prec, self.tol = prec, tol
        self.vis_a, self.vis_b = _visible(pa), _visible(pb)
        self.const = _constants(walk)
        self.graph_inputs = [i.name for i in walk.graph.input if i.name not in {t.name for t in walk.graph.initializer}]
        self.producer: dict[str, int] = {}
        for i, n in enumerate(walk.graph.node):
            for t in n.output:
                if t:
                    self.producer.setdefault(t, i)
        self.reports: dict[str, TensorReport] = {}
        self.skipped: dict[str, str] = {}
        self.values: dict[str, tuple[Any, Any]] = {}  # float name -> (actual value, expected value)

    def value(self, side: str, name: str) -> Any:
        run, vis = (self.ra, self.vis_a) if side == "a" else (self.rb, self.vis_b)
        seen = vis.get(name, name)
        if seen in run:
            return run[seen]
        if name in self.feeds and seen == name:
            return self.feeds[name]
        return None

    def counterpart(self, side: str, name: str) -> str:
        return (self.vis_a if side == "a" else self.vis_b).get(name, name)

    def compare(self, name: str) -> TensorReport | None:
        x, y = self.value("a", name), self.value("b", name)
        if x is None or y is None:
            self.skipped[name] = f"no counterpart on the {'actual' if x is None else 'expected'} side"
            return None
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
            self.skipped[name] = "not a tensor"
            return None
        try:
            r = judge(name, x, y, precision=self.prec, **self.tol)
        except InputError as exc:
            r = _failed(name, str(exc), self.prec or "fp32")
        self.reports[name] = r
        self.values[name] = (x, y)
        return r

    def effective_inputs(self, index: int) -> tuple[list[str], list[int]]:
        """The compared tensors (or graph inputs) node ``index`` reads, through nodes with no compared output."""
        inputs: list[str] = []
        group: list[int] = []
        todo, seen = [index], set()
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            group.append(i)
            for t in self.proto.graph.node[i].input:
                if not t or t in self.const or t in inputs:
                    continue
                if t in self.reports or t in self.graph_inputs or t not in self.producer:
                    inputs.append(t)
                else:
                    todo.append(self.producer[t])
        return inputs, sorted(group)

    def run(self) -> BisectReport:
        graph_inputs: dict[str, TensorReport] = {}
        for name in self.graph_inputs:
            if self.counterpart("a", name) != name or self.counterpart("b", name) != name:
                r = self.compare(name)
                if r is not None:
                    graph_inputs[name] = r
        steps: list[BisectStep] = []
        culprit: BisectStep | None = None
        self.group: list[int] = []
        self.region_inputs: list[str] = []
        for i, node in enumerate(self.proto.graph.node):
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            outs = {t: r for t in node.output if t and (r := self.compare(t)) is not None}
            step = BisectStep(i, node.name or f"#{i}", op, outs, "ok" if outs else "not compared")
            if outs and not step.passed:
                if culprit is None:
                    ins, group = self.effective_inputs(i)
                    if all(self.reports[t].passed for t in ins if t in self.reports):
                        step.status, culprit = "diverges", step
                        self.group, self.region_inputs = group, ins
                    else:
                        step.status = "inherited"
                else:
                    step.status = "inherited"
            steps.append(step)
        names = [steps[i].node for i in self.group]
        input_reports = {t: self.reports.get(t) for t in self.region_inputs}
        return BisectReport(steps, culprit, names, input_reports, graph_inputs, dict(self.skipped), self.prec or "fp32")


# --------------------------------------------------------------------------------------------------- reproducer


def _check_out_dir(out_dir: str | Path) -> Path:
    from .._files import check_path

    p = check_path(out_dir, "out_dir").expanduser()
    if p.exists() and not p.is_dir():
        raise OptionError(f"out_dir: got {str(out_dir)!r}, a file; expected a folder (created if missing)")
    if not p.parent.is_dir():
        raise OptionError(f"out_dir: got {str(out_dir)!r}, but folder '{p.parent}' does not exist")
    return p


def _value_info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(value.shape))


def _extract(
    proto: onnx.ModelProto,
    outputs: list[str],
    stop: set[str],
    values: Mapping[str, np.ndarray],
    input_values: Mapping[str, np.ndarray],
    rename: Mapping[str, str],
) -> onnx.ModelProto:
    """The nodes that compute ``outputs`` from the tensors in ``stop`` (graph inputs of the result) and constants.

    ``values`` give the outputs' types and ``input_values`` the inputs' (in the reproducer's dtype: a Cast to the
    graph's own dtype is added where they differ, e.g. a float16 graph fed float32); ``rename`` renames tensors.
    """
    g = proto.graph
    producer = {t: i for i, n in enumerate(g.node) for t in n.output if t}
    inits = {t.name: t for t in g.initializer}
    graph_inputs = {i.name for i in g.input}
    keep: set[int] = set()
    needed_inits: list[str] = []
    inputs: list[str] = []
    todo = list(outputs)
    seen: set[str] = set()
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in stop or (t in graph_inputs and t not in inits):
            inputs.append(t)
        elif t in inits:
            needed_inits.append(t)
        elif t in producer:
            keep.add(producer[t])
            node = g.node[producer[t]]
            todo.extend(node.input)
            for attr in node.attribute:  # a subgraph's outer-scope names
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    local = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
                    local |= {i.name for i in sub.initializer}
                    todo.extend(x for n in sub.node for x in n.input if x and x not in local)
        else:
            raise InputError(f"reproducer: tensor {t!r} has no producer, initializer or input in the graph")
    nodes = [onnx.NodeProto() for _ in sorted(keep)]
    for dst, i in zip(nodes, sorted(keep)):
        dst.CopyFrom(g.node[i])
    new_inputs, casts = [], []
    for t in sorted(inputs, key=lambda x: list(input_values).index(x) if x in input_values else 0):
        fed = input_values[t]
        own = values.get(t)
        if own is not None and own.dtype != fed.dtype and _kind(own) == _kind(fed) == "f":
            inner = f"{t}__as_{own.dtype}"
            for n in nodes:
                n.input[:] = [inner if x == t else x for x in n.input]
            to = onnx.helper.np_dtype_to_tensor_dtype(own.dtype)
            casts.append(onnx.helper.make_node("Cast", [t], [inner], name=f"{t}__cast", to=to))
        new_inputs.append(_value_info(t, fed))
    graph = onnx.helper.make_graph(
        casts + nodes,
        "amdinfer_bisect_reproducer",
        new_inputs,
        [_value_info(t, values[t]) for t in outputs],
        [inits[t] for t in sorted(set(needed_inits))],
    )
    model = onnx.helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    model.functions.extend(proto.functions)
    _rename(model, rename)
    return model


def _rename(model: onnx.ModelProto, rename: Mapping[str, str]) -> None:
    if not rename:
        return
    g = model.graph
    for n in g.node:
        n.input[:] = [rename.get(x, x) for x in n.input]
        n.output[:] = [rename.get(x, x) for x in n.output]
    for v in [*g.input, *g.output]:
        v.name = rename.get(v.name, v.name)


def _actual_rename(proto: onnx.ModelProto, outputs: list[str], vis: Mapping[str, str]) -> tuple[list[str], dict]:
    """The quantized side's tensors for ``outputs`` and the renames that give them the float names."""
    names = {t for n in proto.graph.node for t in n.output}
    targets, rename = [], {}
    for t in outputs:
        seen = vis.get(t, t)
        targets.append(seen)
        if seen != t:
            rename[seen] = t
            if t in names:
                rename[t] = f"{t}_QuantizeLinear_Input"
    return targets, rename


def _pad_inputs(model: onnx.ModelProto, wanted: Mapping[str, np.ndarray]) -> None:
    """Add the inputs the other side's reproducer takes and this one does not (unused): one inputs file for both."""
    have = {i.name for i in model.graph.input}
    for t, v in wanted.items():
        if t not in have:
            model.graph.input.append(_value_info(t, v))


def _load_spec(engine: Any, same_model: bool) -> dict[str, Any]:
    """``amdinfer.load`` options that run a reproducer the way ``engine`` ran the full model."""
    info = engine.info
    spec: dict[str, Any] = {"backend": info.backend}
    if info.backend == "ort" and info.providers:
        spec["providers"] = list(info.providers)
    precision = info.precision
    if not same_model and precision in ("fp16", "bf16", "int8"):
        precision = "fp32"  # the extracted graph is the rewritten one already (fp16 casts, Q/DQ)
    spec["precision"] = precision
    return spec


def _flags(spec: Mapping[str, Any], against: bool) -> list[str]:
    if against:
        flags = ["--against", spec["backend"]]
        if "providers" in spec:
            flags += ["--against-providers", ",".join(spec["providers"])]
        if spec["backend"] == "reference" and spec["precision"] in ("fp64", "fp32"):
            flags += ["--reference-precision", spec["precision"]]
        return flags
    flags = ["--backend", spec["backend"]]
    if "providers" in spec:
        flags += ["--providers", ",".join(spec["providers"])]
    return [*flags, "--precision", spec["precision"]]


@dataclass
class _Region:
    """A node's reproducer in memory: the models per side, the inputs, both sides' outputs in the full run."""

    models: dict[str, onnx.ModelProto]
    inputs: dict[str, np.ndarray]
    expected: dict[str, Any]
    actual: dict[str, Any]
    outputs: list[str]
    same: bool


def _region(walk: _Walk, a: Any, b: Any, step: BisectStep, region_inputs: list[str]) -> _Region:
    """Extract ``step``'s node (and the nodes it stands for) from each side's graph, inputs as graph inputs."""
    outputs = list(step.outputs)
    expected_in = {t: np.asarray(walk.values[t][1] if t in walk.values else walk.feeds[t]) for t in region_inputs}
    exp_vals = {t: walk.values[t][1] for t in outputs}
    act_vals = {t: walk.values[t][0] for t in outputs}
    walk_is_b = walk.proto is walk.pb
    stop = (set(walk.reports) | set(walk.graph_inputs)) - set(outputs)
    float_vals = {**{t: v[1 if walk_is_b else 0] for t, v in walk.values.items()}, **expected_in}
    float_model = _extract(walk.proto, outputs, stop, float_vals, expected_in, {})
    same = a.model.sha256 == b.model.sha256
    models: dict[str, onnx.ModelProto] = {}
    if same:
        models["model"] = float_model
    else:
        other, side = (walk.pa, "a") if walk_is_b else (walk.pb, "b")
        run = walk.ra if side == "a" else walk.rb
        vis = walk.vis_a if side == "a" else walk.vis_b
        targets, rename = _actual_rename(other, outputs, vis)
        other_names = {t for n in other.graph.node for t in n.output} | {i.name for i in other.graph.input}
        other_stop = {t for t in stop if t in other_names}
        own_vals = {**{k: np.asarray(v) for k, v in run.items() if isinstance(v, np.ndarray)}, **walk.feeds}
        fed = {t: expected_in.get(t, float_vals.get(t)) for t in other_stop}
        try:
            other_model = _extract(
                other, targets, other_stop, own_vals, {k: v for k, v in fed.items() if v is not None}, rename
            )
        except InputError as exc:
            raise InputError(f"reproducer of the {'actual' if side == 'a' else 'expected'} side: {exc}") from None
        for i in other_model.graph.input:
            v = expected_in.get(i.name, fed.get(i.name))
            if i.name not in expected_in and v is not None:
                expected_in[i.name] = np.asarray(v)
        _pad_inputs(float_model, expected_in)
        _pad_inputs(other_model, expected_in)
        fm, om = ("expected_model", "actual_model") if walk_is_b else ("actual_model", "expected_model")
        models[fm], models[om] = float_model, other_model
    return _Region(models, expected_in, exp_vals, act_vals, outputs, same)


def _run_region(region: _Region, a: Any, b: Any, walk: _Walk) -> tuple[bool | None, dict[str, TensorReport], str]:
    """Run the region on both sides (as each side ran the full model): (diverges?, comparisons, what it means)."""
    import amdinfer

    spec_a, spec_b = _load_spec(a, region.same), _load_spec(b, region.same)
    ma = region.models["model"] if region.same else region.models["actual_model"]
    mb = region.models["model"] if region.same else region.models["expected_model"]
    try:
        with amdinfer.load(ma, **spec_a) as ea, amdinfer.load(mb, **spec_b) as eb:
            xa, xb = ea.run(dict(region.inputs)), eb.run(dict(region.inputs))
    except Exception as exc:  # the check is best effort: the files are written either way
        return None, {}, f"not run: {type(exc).__name__}: {exc}"
    check = {t: judge(t, xa[t], xb[t], precision=walk.prec, **walk.tol) for t in region.outputs}
    reproduced = not all(r.passed for r in check.values())
    note = (
        "the node alone, fed the expected side's inputs, diverges the same way: the fault is in the node"
        if reproduced
        else "the node alone agrees on exact inputs: the divergence comes from how it amplifies its inputs' "
        "small (within tolerance) errors"
    )
    return reproduced, check, note


def _search_local(report: BisectReport, walk: _Walk, a: Any, b: Any, limit: int) -> _Region | None:
    """From the first divergence on, the first diverging node that diverges alone on the expected side's inputs.

    A node that does not (it amplifies its inputs' small errors) is marked ``"amplifies"`` and the search goes
    on; the one found becomes the culprit (``first_divergence`` keeps the first node over tolerance).
    """
    first = report.culprit
    assert first is not None
    tried = 0
    for step in report.steps[first.index :]:
        if step.status not in ("diverges", "inherited"):
            continue
        if tried >= limit:
            break
        tried += 1
        ins, group = walk.effective_inputs(step.index)
        region = _region(walk, a, b, step, ins)
        reproduced, check, note = _run_region(region, a, b, walk)
        if reproduced is False:
            step.status = "amplifies"
            continue
        step.status = "diverges"
        report.culprit = step
        report.group = [report.steps[i].node for i in group]
        report.inputs = {t: walk.reports.get(t) for t in ins}
        walk.region_inputs = ins
        report.local = (reproduced, check, note)
        return region
    report.culprit = None  # every diverging node only amplifies its inputs' errors (or the limit was reached)
    report.local_checks = tried
    return None


def _write_reproducer(
    out: Path, report: BisectReport, walk: _Walk, a: Any, b: Any, *, check: bool, region: _Region | None = None
) -> Reproducer:
    from .._files import write_atomic
    from ._golden import save_golden

    culprit = report.culprit
    assert culprit is not None
    out.mkdir(exist_ok=True)
    if region is None:
        region = _region(walk, a, b, culprit, list(walk.region_inputs))
    files: dict[str, Path] = {}
    names = {"model": "model.onnx", "actual_model": "actual.onnx", "expected_model": "expected.onnx"}
    for key, m in region.models.items():
        files[key] = write_atomic(out / names[key], m.SerializeToString(), argument="out_dir")
    arrays = dict(region.inputs)
    files["inputs"] = write_atomic(out / "inputs.npz", lambda f: np.savez(f, **arrays), argument="out_dir")  # type: ignore[arg-type]
    meta_e, meta_a = {"engine": report.expected}, {"engine": report.actual}
    files["expected"] = save_golden(out / "expected.npz", region.inputs, region.expected, meta_e, what="out_dir")
    files["actual"] = save_golden(out / "actual.npz", region.inputs, region.actual, meta_a, what="out_dir")
    spec_a, spec_b = _load_spec(a, region.same), _load_spec(b, region.same)
    positional = [str(files["model"])] if region.same else [str(files["actual_model"]), str(files["expected_model"])]
    cmd = ["amdinfer", "verify", *positional, "--inputs", str(files["inputs"])]
    command = shlex.join([*cmd, *_flags(spec_a, False), *_flags(spec_b, True)])
    repro = Reproducer(out, files, command, None)
    if report.local is not None:
        repro.reproduced, repro.check, repro.note = report.local
    elif check:
        repro.reproduced, repro.check, repro.note = _run_region(region, a, b, walk)
    files["report"] = write_atomic(
        out / "bisect.json",
        json.dumps(report.to_dict() | {"reproducer": repro.to_dict()}, indent=2).encode(),
        argument="out_dir",
    )
    files["readme"] = write_atomic(out / "README.md", _readme(report, repro).encode(), argument="out_dir")
    return repro


def _readme(report: BisectReport, repro: Reproducer) -> str:
    c = report.culprit
    assert c is not None
    lines = [
        f"# amdinfer bisect: node {c.node!r} ({c.op_type})",
        "",
        f"actual: {report.actual}; expected: {report.expected}; precision {report.precision}",
        "",
        report.verdict,
        "",
        "```",
        report.table(top=0),
        "```",
        "",
        "Files: " + ", ".join(f"`{p.name}` ({k})" for k, p in repro.files.items()),
        "(inputs.npz: one array per input, captured from the expected side; expected.npz / actual.npz: the",
        "golden format of `amdinfer verify --golden`, the inputs and each side's outputs in the full model).",
        "",
        "Reproduce:",
        "",
        "```console",
        f"$ {repro.command}",
        "```",
        "",
        f"Checked: {repro.note}" if repro.note else "",
    ]
    return "\n".join(lines) + "\n"
