"""``bisect``'s results: one :class:`BisectStep` per node, the :class:`BisectReport` and its :class:`Reproducer`.

Example:
    >>> BisectReport(steps=[BisectStep(0, "conv1", "Conv", {}, "not compared")], culprit=None).verdict
    'no divergence: all 0 compared tensors within tolerance'
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._report import _COLUMNS, TensorReport, _jsonable, _row, _text_table

__all__ = ["BisectReport", "BisectStep", "Reproducer"]


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
