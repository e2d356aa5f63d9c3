"""``bisect``'s walk: each tensor judged on its own scale, a QDQ graph matched to the float one, the culprit.

:func:`judge` compares one tensor per channel on the reference's range; :func:`_visible` finds what a QDQ
graph's tensors stand for in the float graph; :class:`_Walk` goes through the float graph in topological
order and stops at the first node whose outputs fail while its inputs pass.

Example:
    >>> import numpy as np
    >>> judge("x", np.array([[1.0, 0.0101]]), np.array([[1.0, 0.01]]), axis=None).passed
    True
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx

from ..errors import InputError
from ..reference._metrics import as_float64
from ._bisect_report import BisectReport, BisectStep
from ._report import TensorReport
from ._tensor import TolSpec, _compare_one, _is_16bit, _kind

__all__ = ["CHANNEL_FLOOR", "judge"]

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
