"""What :class:`~amdinfer.quantize.AutoMixedPrecision` found: :class:`LayerSensitivity`, :class:`BudgetStep` and
:class:`MixedPrecisionResult` (a tolerance search's kept layers, a budget search's plan and steps)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from ._task_base import PASS, Bound, TaskVerdict

__all__ = ["BudgetStep", "LayerSensitivity", "MixedPrecisionResult"]


@dataclass(frozen=True)
class LayerSensitivity:
    """How much one layer's quantization costs.

    Attributes:
        node: the node name.
        op_type: its op type.
        sensitivity: ``mode="only"``: the error with only this layer quantized; ``mode="keep"``: how much
            the error drops when only this layer is kept in float.

    Example:
        >>> LayerSensitivity("conv1", "Conv", 0.02).node
        'conv1'
    """

    node: str
    op_type: str
    sensitivity: float


@dataclass(frozen=True)
class BudgetStep:
    """One measured plan of a budget search: the layers it moved out of int8 and the task metrics it reached.

    Attributes:
        moved: the layers this step moved (none for the first, all-int8 plan).
        precision: where they went: ``"fp16"`` or ``"fp32"`` (``"int8"`` for the first plan).
        metrics: the task metrics of the plan on the held-out data (float answers as the truth).
        holds: every bound of the budget holds (and the answers did not collapse).
        float_layers: how many candidate layers are out of int8 after this step.

    Example:
        >>> s = BudgetStep((), "int8", {"top1": 0.4}, False, 0)
        >>> s.describe(("top1",))
        'all int8: top1 0.4000 (budget missed)'
    """

    moved: tuple[str, ...]
    precision: str
    metrics: dict[str, float | None]
    holds: bool
    float_layers: int

    def describe(self, names: tuple[str, ...]) -> str:
        """One line: what moved and the metrics ``names`` reached."""
        what = f"{', '.join(self.moved)} -> {self.precision}" if self.moved else "all int8"
        shown = ", ".join(f"{n} {v:.4f}" for n in names if (v := self.metrics.get(n)) is not None)
        return f"{what}: {shown or 'no metric'} ({'budget holds' if self.holds else 'budget missed'})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "moved": list(self.moved),
            "precision": self.precision,
            "metrics": dict(self.metrics),
            "holds": self.holds,
            "float_layers": self.float_layers,
        }


@dataclass
class MixedPrecisionResult:
    """What :meth:`AutoMixedPrecision.search` found.

    Attributes:
        model: the mixed-precision model.
        kept: layers kept in float (a budget search: moved out of int8), most sensitive first.
        error: the end-to-end error of ``model`` (the metric; a budget: its first bound's, ``1 - value`` for a
            metric where higher is better).
        tolerance: the bound it had to meet.
        passed: ``error <= tolerance``; a budget search: its verdict is ``PASS``.
        full_error: the error with every layer quantized.
        float_error: the error with every candidate layer kept in float (the best reachable; a budget search
            that stopped early did not measure it: NaN).
        sensitivities: every candidate layer, most sensitive first.
        metric: the metric's name.
        mode: ``"only"`` or ``"keep"``.
        evaluations: quantize-and-run evaluations made.
        budget: a budget search's bounds (empty for a tolerance search).
        plan: a budget search's precision per candidate layer (``"int8"``, ``"fp16"``, ``"fp32"``).
        steps: a budget search's measured plans, the all-int8 one first, in the order tried.
        verdict: a budget search's verdict on the chosen plan: ``PASS`` only when the budget holds on the
            held-out data, ``NOT JUDGED`` on too little of it, else ``FAIL`` (with the best metrics reached).
        notes: what the search chose and why (e.g. fp32, not fp16, for a CPU).

    Example:
        >>> r = MixedPrecisionResult(onnx.ModelProto(), [], 0.01, 0.02, True, 0.01, 0.0, [], "rms", "only", 1)
        >>> r.kept_nodes
        []
    """

    model: onnx.ModelProto
    kept: list[LayerSensitivity]
    error: float
    tolerance: float
    passed: bool
    full_error: float
    float_error: float
    sensitivities: list[LayerSensitivity] = field(default_factory=list)
    metric: str = "rms"
    mode: str = "only"
    evaluations: int = 0
    budget: tuple[Bound, ...] = ()
    plan: dict[str, str] = field(default_factory=dict)
    steps: list[BudgetStep] = field(default_factory=list)
    verdict: TaskVerdict | None = None
    notes: tuple[str, ...] = ()

    @property
    def kept_nodes(self) -> list[str]:
        """Names of the layers kept in float."""
        return [k.node for k in self.kept]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (without the model)."""
        out: dict[str, Any] = {
            "kept": [{"node": k.node, "op_type": k.op_type, "sensitivity": k.sensitivity} for k in self.kept],
            "error": self.error,
            "tolerance": self.tolerance,
            "passed": self.passed,
            "full_error": self.full_error,
            "float_error": self.float_error,
            "sensitivities": [
                {"node": k.node, "op_type": k.op_type, "sensitivity": k.sensitivity} for k in self.sensitivities
            ],
            "metric": self.metric,
            "mode": self.mode,
            "evaluations": self.evaluations,
        }
        if self.budget:
            out.update(
                budget=[str(b) for b in self.budget],
                plan=dict(self.plan),
                steps=[s.to_dict() for s in self.steps],
                verdict=self.verdict.to_dict() if self.verdict is not None else None,
                notes=list(self.notes),
            )
        return out

    def __repr__(self) -> str:
        if self.budget:
            return self._budget_repr()
        verdict = "PASS" if self.passed else "FAIL"
        lines = [
            f"MixedPrecisionResult({self.metric} {self.error:.4g} <= {self.tolerance:.4g}: {verdict}; "
            f"all quantized {self.full_error:.4g}, all candidates in float {self.float_error:.4g}; "
            f"{len(self.kept)} of {len(self.sensitivities)} layers kept, {self.evaluations} evaluations)"
        ]
        for k in self.kept:
            lines.append(f"  keep {k.node} ({k.op_type}) sensitivity {k.sensitivity:.4g}")
        return "\n".join(lines)

    def _budget_repr(self) -> str:
        names = tuple(dict.fromkeys(b.metric for b in self.budget))
        verdict = self.verdict.verdict if self.verdict is not None else ("PASS" if self.passed else "FAIL")
        counts = {p: sum(v == p for v in self.plan.values()) for p in ("int8", "fp16", "fp32")}
        lines = [
            f"MixedPrecisionResult(budget {','.join(str(b) for b in self.budget)}: {verdict}; "
            + ", ".join(f"{n} {p}" for p, n in counts.items() if n)
            + f" of {len(self.plan)} layers; {len(self.steps)} steps, {self.evaluations} evaluations)"
        ]
        for i, s in enumerate(self.steps):
            lines.append(f"  step {i}: {s.describe(names)}")
        for node, precision in self.plan.items():
            if precision != "int8":
                lines.append(f"  {precision} {node}")
        if self.verdict is not None and self.verdict.verdict != PASS:
            lines.extend(f"  {r}" for r in self.verdict.reasons)
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)
