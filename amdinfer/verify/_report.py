"""Comparison reports: one tensor (:class:`TensorReport`), several outputs (:class:`ComparisonReport`),
and a per-layer walk through a graph (:class:`LayerReport`)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ComparisonReport", "LayerEntry", "LayerReport", "TensorReport"]


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}e}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)  # strict JSON has no NaN/Infinity
    return x


_COLUMNS = ("tensor", "shape", "max_abs", "max_rel", "rms", "cosine", "mismatches", "status")


def _row(r: TensorReport) -> list[str]:
    status = "ok" if r.passed else "FAIL: " + "; ".join(r.reasons)
    return [
        r.name,
        str(tuple(r.shape)),
        _num(r.max_abs),
        _num(r.max_rel),
        _num(r.rms),
        "-" if r.cosine is None else f"{r.cosine:.7f}",
        f"{r.mismatches}/{r.size}",
        status,
    ]


def _text_table(header: list[str], rows: list[list[str]], indent: str = "  ") -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for r in rows:
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _html_table(header: list[str], rows: list[list[str]], failed: list[bool]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for r, bad in zip(rows, failed):
        style = ' style="background:#fdd"' if bad else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


@dataclass
class TensorReport:
    """How one actual tensor compares with its expected value.

    Metrics run in float64 over the positions where both tensors are finite; NaN/Inf positions are
    counted separately and must agree.

    Attributes:
        name: the tensor's name (``"output"`` for a bare array).
        shape: its shape.
        actual_dtype: dtype of the actual tensor.
        expected_dtype: dtype of the expected tensor.
        size: number of elements.
        max_abs: ``max |a - b|``.
        max_rel: ``max |a - b| / |b|`` over ``b != 0``.
        rms: MIGraphX's RMS metric (see :func:`~amdinfer.verify.rms_error`).
        cosine: cosine similarity of the flattened tensors.
        mismatches: elements outside ``|a - b| <= atol + rtol * |b|`` (NaN/Inf disagreements included).
        worst_index: index of the largest ``|a - b|``, with ``worst_actual`` and ``worst_expected``.
        nan_actual, nan_expected, nan_mismatch, inf_actual, inf_expected, inf_mismatch: NaN/Inf accounting.
        rms_tol, atol, rtol: the tolerances applied.
        precision: the precision the defaults came from.
        elementwise: whether the elementwise check counts towards ``passed``.
        topk: ``k`` of the top-k agreement, if asked for, and ``topk_agreement`` its value.
        passed: RMS within ``rms_tol``, no elementwise mismatch (when ``elementwise``), NaN/Inf agree.
        reasons: why it failed (empty when it passed).

    Example:
        >>> import numpy as np
        >>> from amdinfer.verify import compare
        >>> r = compare(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
        >>> r.passed, r.max_abs, r.reasons[0].startswith("rms")
        (False, 0.5, True)
    """

    name: str
    shape: tuple[int, ...]
    actual_dtype: str
    expected_dtype: str
    size: int
    max_abs: float
    max_rel: float
    rms: float
    cosine: float | None
    mismatches: int
    worst_index: tuple[int, ...] | None
    worst_actual: float | None
    worst_expected: float | None
    nan_actual: int
    nan_expected: int
    nan_mismatch: int
    inf_actual: int
    inf_expected: int
    inf_mismatch: int
    rms_tol: float
    atol: float
    rtol: float
    precision: str
    elementwise: bool = True
    topk: int | None = None
    topk_agreement: float | None = None
    passed: bool = True
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (non-finite floats as strings)."""
        out = {k: _jsonable(v) for k, v in self.__dict__.items()}
        out["shape"] = list(self.shape)
        out["worst_index"] = None if self.worst_index is None else list(self.worst_index)
        out["reasons"] = list(self.reasons)
        return out

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` with this report when the comparison failed (for tests)."""
        if not self.passed:
            raise AssertionError(repr(self))

    def summary(self) -> str:
        """One line: the verdict and the key metrics."""
        verdict = "passed" if self.passed else "FAILED (" + "; ".join(self.reasons) + ")"
        return (
            f"{self.name} {tuple(self.shape)}: {verdict}; rms {_num(self.rms)} (tol {_num(self.rms_tol)}), "
            f"max_abs {_num(self.max_abs)}, max_rel {_num(self.max_rel)}, "
            f"mismatches {self.mismatches}/{self.size} (atol {_num(self.atol)}, rtol {_num(self.rtol)})"
        )

    def __repr__(self) -> str:
        lines = [f"TensorReport({self.summary()})"]
        if self.worst_index is not None and self.max_abs > 0:
            lines.append(
                f"  worst at {self.worst_index}: actual {self.worst_actual!r}, expected {self.worst_expected!r}"
            )
        if self.nan_actual or self.nan_expected or self.inf_actual or self.inf_expected:
            lines.append(
                f"  NaN {self.nan_actual} actual / {self.nan_expected} expected ({self.nan_mismatch} misplaced); "
                f"Inf {self.inf_actual} / {self.inf_expected} ({self.inf_mismatch} differing)"
            )
        if self.topk is not None:
            lines.append(f"  top-{self.topk} agreement {self.topk_agreement:.4f}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return _html_table(list(_COLUMNS), [_row(self)], [not self.passed])


@dataclass
class ComparisonReport:
    """How several named outputs compare; the aggregates are the worst over the outputs.

    Attributes:
        outputs: output name -> :class:`TensorReport`, in the order compared.
        precision: the precision the default tolerances came from.

    Example:
        >>> import numpy as np
        >>> from amdinfer.verify import compare
        >>> r = compare({"a": np.ones(3), "b": np.zeros(2)}, {"a": np.ones(3), "b": np.zeros(2)})
        >>> r.passed, r["a"].rms, list(r)
        (True, 0.0, ['a', 'b'])
    """

    outputs: dict[str, TensorReport]
    precision: str = "fp32"

    @property
    def passed(self) -> bool:
        """Whether every output passed."""
        return all(r.passed for r in self.outputs.values())

    @property
    def failed(self) -> list[str]:
        """Names of the outputs that failed."""
        return [n for n, r in self.outputs.items() if not r.passed]

    @property
    def max_abs(self) -> float:
        """The largest ``max_abs`` over the outputs."""
        return max((r.max_abs for r in self.outputs.values()), default=0.0)

    @property
    def max_rel(self) -> float:
        """The largest ``max_rel`` over the outputs."""
        return max((r.max_rel for r in self.outputs.values()), default=0.0)

    @property
    def rms(self) -> float:
        """The largest ``rms`` over the outputs."""
        return max((r.rms for r in self.outputs.values()), default=0.0)

    @property
    def cosine(self) -> float | None:
        """The smallest cosine similarity over the outputs."""
        values = [r.cosine for r in self.outputs.values() if r.cosine is not None]
        return min(values) if values else None

    @property
    def mismatches(self) -> int:
        """Elementwise mismatches summed over the outputs."""
        return sum(r.mismatches for r in self.outputs.values())

    def __getitem__(self, name: str) -> TensorReport:
        try:
            return self.outputs[name]
        except KeyError:
            raise KeyError(f"output {name!r}: not in this report; it has {list(self.outputs)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict: the aggregates and one dict per output."""
        return {
            "passed": self.passed,
            "precision": self.precision,
            "max_abs": _jsonable(self.max_abs),
            "max_rel": _jsonable(self.max_rel),
            "rms": _jsonable(self.rms),
            "cosine": _jsonable(self.cosine),
            "failed": self.failed,
            "outputs": {n: r.to_dict() for n, r in self.outputs.items()},
        }

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` with this report when any output failed (for tests)."""
        if not self.passed:
            raise AssertionError(repr(self))

    def __repr__(self) -> str:
        verdict = "passed" if self.passed else f"FAILED {self.failed}"
        head = (
            f"ComparisonReport({verdict}, {len(self.outputs)} output(s), precision {self.precision}; "
            f"worst rms {_num(self.rms)}, max_abs {_num(self.max_abs)}, max_rel {_num(self.max_rel)})"
        )
        rows = [_row(r) for r in self.outputs.values()]
        return head + "\n" + _text_table(list(_COLUMNS), rows)

    def _repr_html_(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        rows = [_row(r) for r in self.outputs.values()]
        return f"<p>ComparisonReport: <b>{verdict}</b> (precision {html.escape(self.precision)})</p>" + _html_table(
            list(_COLUMNS), rows, [not r.passed for r in self.outputs.values()]
        )


@dataclass
class LayerEntry:
    """One tensor of the per-layer walk: the node that wrote it and how it compares.

    Attributes:
        index: position of the node in the graph (topological order).
        node: the node's name (``"#<index>"`` when it has none).
        op_type: the node's operator (``domain::Op`` outside ai.onnx).
        tensor: the output tensor's name.
        report: the comparison of that tensor.

    Example:
        >>> LayerEntry(0, "conv1", "Conv", "x", None).node
        'conv1'
    """

    index: int
    node: str
    op_type: str
    tensor: str
    report: TensorReport | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "index": self.index,
            "node": self.node,
            "op_type": self.op_type,
            "tensor": self.tensor,
            "report": None if self.report is None else self.report.to_dict(),
        }


@dataclass
class LayerReport:
    """Per-layer comparison of two engines: every intermediate tensor in graph order, and the first divergence.

    Attributes:
        layers: one :class:`LayerEntry` per compared tensor, in topological order.
        skipped: tensor name -> why it was not compared (only one engine produced it, not a tensor...).
        precision: the precision the default tolerances came from.

    Example:
        >>> report = LayerReport(layers=[], skipped={})
        >>> report.first_divergence is None, report.passed
        (True, True)
    """

    layers: list[LayerEntry]
    skipped: dict[str, str] = field(default_factory=dict)
    precision: str = "fp32"

    @property
    def first_divergence(self) -> LayerEntry | None:
        """The first tensor (in topological order) that fails its tolerance, or ``None``."""
        return next((e for e in self.layers if e.report is not None and not e.report.passed), None)

    @property
    def passed(self) -> bool:
        """Whether every compared tensor agrees."""
        return self.first_divergence is None

    @property
    def diverged(self) -> list[LayerEntry]:
        """Every tensor that fails its tolerance."""
        return [e for e in self.layers if e.report is not None and not e.report.passed]

    def __getitem__(self, tensor: str) -> TensorReport:
        for e in self.layers:
            if e.tensor == tensor and e.report is not None:
                return e.report
        raise KeyError(f"tensor {tensor!r}: not compared in this report")

    def __len__(self) -> int:
        return len(self.layers)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        first = self.first_divergence
        return {
            "passed": self.passed,
            "precision": self.precision,
            "first_divergence": None if first is None else first.to_dict(),
            "layers": [e.to_dict() for e in self.layers],
            "skipped": dict(self.skipped),
        }

    def assert_passed(self) -> None:
        """Raise ``AssertionError`` naming the first divergent node when any layer failed (for tests)."""
        if not self.passed:
            raise AssertionError(repr(self))

    def _rows(self, window: int = 40) -> tuple[list[list[str]], list[bool]]:
        entries = self.layers
        first = self.first_divergence
        if len(entries) > window:
            centre = first.index if first is not None else entries[-1].index
            pos = next(i for i, e in enumerate(entries) if e.index == centre)
            lo = max(0, pos - window // 2)
            entries = entries[lo : lo + window]
        rows, bad = [], []
        for e in entries:
            r = e.report
            assert r is not None
            rows.append([str(e.index), e.node, e.op_type, *_row(r)])
            bad.append(not r.passed)
        return rows, bad

    def __repr__(self) -> str:
        first = self.first_divergence
        if first is None:
            head = f"LayerReport(all {len(self.layers)} tensors agree, precision {self.precision})"
        else:
            assert first.report is not None
            head = (
                f"LayerReport(first divergence at node {first.node!r} ({first.op_type}, #{first.index}), "
                f"tensor {first.tensor!r}: {'; '.join(first.report.reasons)}; "
                f"{len(self.diverged)}/{len(self.layers)} tensors diverge, precision {self.precision})"
            )
        rows, _ = self._rows()
        lines = [head, _text_table(["#", "node", "op", *_COLUMNS], rows)]
        if len(rows) < len(self.layers):
            lines.append(f"  ... {len(self.layers) - len(rows)} more tensors (see .layers or .to_dict())")
        if self.skipped:
            lines.append(
                f"  skipped {len(self.skipped)}: " + ", ".join(f"{k} ({v})" for k, v in list(self.skipped.items())[:5])
            )
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        first = self.first_divergence
        head = (
            "all tensors agree"
            if first is None
            else f"first divergence at node <b>{html.escape(first.node)}</b> ({html.escape(first.op_type)}), "
            f"tensor <code>{html.escape(first.tensor)}</code>"
        )
        rows, bad = self._rows()
        return f"<p>LayerReport: {head}</p>" + _html_table(["#", "node", "op", *_COLUMNS], rows, bad)
