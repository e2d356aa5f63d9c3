"""Precision by budget: the fastest per-layer plan (int8 / fp16 / fp32) whose task metric meets a budget.

``AutoMixedPrecision(quantizer, data, budget="map50>=0.98")`` and ``amdinfer quantize --budget`` run this
search (documented in ``docs/quantization.md``, "Precision by budget"):

1. Measure the fastest plan: every candidate layer in int8 (what the quantizer keeps in float by itself, e.g.
   a YOLO decode head, stays in float), its task metrics on the held-out data, the float model's answers
   being the truth. If the budget holds, stop.
2. Rank the layers by :class:`AutoMixedPrecision`'s per-layer sensitivity (the task metric's error with only
   that layer quantized, ``mode="only"``, or what keeping only it in float saves, ``mode="keep"``).
3. Move the most sensitive layer still in int8 to the next precision of the ladder, re-measure, and stop as
   soon as the budget holds. The ladder follows the engine's provider: on a GPU ``fp16`` first, then ``fp32``
   for the layers where fp16 is not enough; on the CPU only ``fp32`` (fp16 brings no speed there: ONNX
   Runtime's CPU provider has few fp16 kernels and runs the rest in fp32 between casts).
4. The verdict of the chosen plan: ``PASS`` only when every bound holds on the held-out data; ``NOT JUDGED``
   when the data is too small for the task (the search still ran); ``FAIL`` when no plan meets the budget,
   with the best metrics reached.

Cost: one evaluation for the all-int8 plan, then (when it misses) one per candidate layer for the
sensitivities and one per step; int8 calibration ranges are computed once and reused.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ..errors import OptionError
from ._amp_result import BudgetStep, LayerSensitivity, MixedPrecisionResult
from ._data import Progress
from ._evaluate import _run_on_cpu
from ._task_base import FAIL, Bound, TaskMetric, TaskVerdict
from ._tasks import METRIC_TASKS, make_task, task_from_model

__all__ = ["BudgetOptions", "budget_task", "float_ladder", "parse_budget", "run_budget_search", "trial_quantizer"]

Outputs = Sequence[Mapping[str, np.ndarray]]
#: How fast each precision is, fastest first: a step only ever moves a layer up this list.
_RANK = {"int8": 0, "fp16": 1, "fp32": 2}


def parse_budget(budget: Any, argument: str = "budget") -> tuple[Bound, ...]:
    """The bounds of a budget: ``"map50>=0.98"``, ``"map50>=0.98,f1>=0.95"``, a :class:`Bound` or a list of them.

    Raises:
        OptionError: not a budget (the message names ``argument`` and the known metrics).

    Example:
        >>> parse_budget("map50>=0.98, f1>=0.95")
        (Bound('map50>=0.98'), Bound('f1>=0.95'))
    """
    if isinstance(budget, (str, Bound)):
        parts: list[Any] = budget.split(",") if isinstance(budget, str) else [budget]
    elif isinstance(budget, (list, tuple)) and budget:
        parts = list(budget)
    else:
        raise OptionError(
            f"{argument}: got {budget!r}, expected a budget such as 'map50>=0.98' (several joined by commas), "
            "a Bound or a list of them"
        )
    bounds: list[Bound] = []
    for part in parts:
        if isinstance(part, Bound):
            bounds.append(part)
            continue
        if not isinstance(part, str):
            raise OptionError(f"{argument}: got {part!r} in {budget!r}, expected 'METRIC>=VALUE' strings or Bounds")
        try:
            bounds.append(Bound.parse(part))
        except OptionError as exc:
            raise OptionError(f"{argument}: {exc}") from None
    twice = sorted({b.metric for b in bounds if sum(c.metric == b.metric for c in bounds) > 1})
    if twice:
        raise OptionError(f"{argument}: got {budget!r}, which bounds {twice} more than once; give one bound each")
    return tuple(bounds)


def budget_task(bounds: Sequence[Bound], task: str | TaskMetric, boxes: Any, iou: float) -> TaskMetric | None:
    """The task that judges the bounds (``None``: a YOLO detector, checked on the model by the search).

    Raises:
        OptionError: the bounds name metrics of different tasks (with ``task="auto"``) or of another task.

    Example:
        >>> budget_task(parse_budget("top1>=0.99,top5>=1"), "auto", None, 0.5)
        ClassifyTask()
    """
    if isinstance(task, TaskMetric) or task != "auto":
        metric = make_task(task, **({"boxes": boxes, "iou": iou} if task == "detect" else {}))
    else:
        tasks = sorted({METRIC_TASKS[b.metric] for b in bounds})
        if len(tasks) > 1:
            raise OptionError(
                f"budget: {[str(b) for b in bounds]} bound metrics of the tasks {tasks}; one budget is judged "
                "in one task: bound one task's metrics, or name the task (task=, --task)"
            )
        if tasks[0] == "detect" and boxes is None:
            return None
        metric = make_task(tasks[0], **({"boxes": boxes, "iou": iou} if tasks[0] == "detect" else {}))
    foreign = [str(b) for b in bounds if b.metric not in metric.metrics]
    if foreign:
        raise OptionError(
            f"budget: {foreign} are not metrics of task {metric.name!r}, which has {list(metric.metrics)}"
        )
    return metric


def float_ladder(providers: Sequence[str] | None) -> tuple[tuple[str, ...], str]:
    """The precisions a layer leaving int8 climbs, fastest first, for the engine's providers, and why.

    Raises:
        OptionError: ``providers`` is not a list of provider names.

    Example:
        >>> float_ladder(None)[0], float_ladder(["migraphx", "cpu"])[0]
        (('fp32',), ('fp16', 'fp32'))
    """
    if providers is None:
        providers = ["CPUExecutionProvider"]
    if isinstance(providers, str) or not providers or not all(isinstance(p, str) for p in providers):
        raise OptionError(
            f"providers: got {providers!r}, expected a list of provider names such as ['migraphx', 'cpu']"
        )
    from ..engines.ort import PROVIDERS, resolve_provider_name

    first = resolve_provider_name(providers[0])
    if not first.endswith("ExecutionProvider"):
        raise OptionError(
            f"providers: got {providers[0]!r}, expected an ONNX Runtime provider: one of "
            f"{sorted(r.short for r in PROVIDERS.values())} or a full name such as 'TensorrtExecutionProvider'"
        )
    if _device_type(first) == "cpu":
        return ("fp32",), (
            f"{first}: layers leave int8 for fp32, not fp16 (fp16 brings no speed on a CPU: ONNX Runtime's CPU "
            "provider has few fp16 kernels and runs the rest in fp32 between casts)"
        )
    return ("fp16", "fp32"), (
        f"{first} is a GPU provider: layers leave int8 for fp16 first, then fp32 where fp16 is not enough "
        "(measured on ONNX Runtime's CPU provider)"
    )


def _device_type(provider: str) -> str:
    from ..engines.ort import PROVIDERS, ort_device_type

    if provider in PROVIDERS:
        return ort_device_type(provider)
    return "cpu" if provider in ("CPUExecutionProvider", "OpenVINOExecutionProvider") else "gpu"


def _nonfinite(q: Outputs, r: Outputs) -> list[str]:
    """Outputs with NaN/Inf where the float model is finite."""
    bad = []
    for qo, ro in zip(q, r, strict=True):
        for k, v in qo.items():
            a, b = np.asarray(v), np.asarray(ro[k])
            if a.dtype.kind == "f" and (~np.isfinite(a) & np.isfinite(b)).any() and k not in bad:
                bad.append(k)
    return bad


def _tensor_error(q: Outputs, r: Outputs) -> float:
    """The largest output RMS error on its output's scale: ties of a coarse task metric are broken by it."""
    worst = 0.0
    for qo, ro in zip(q, r, strict=True):
        for k, v in qo.items():
            a, b = np.asarray(v, np.float64), np.asarray(ro[k], np.float64)
            if a.dtype.kind == "f" and a.shape == b.shape and a.size:
                scale = float(np.std(b)) or 1.0
                with np.errstate(invalid="ignore", over="ignore"):
                    err = float(np.sqrt(np.mean((a - b) ** 2))) / scale
                worst = max(worst, err if math.isfinite(err) else math.inf)
    return worst


@dataclass(frozen=True)
class BudgetOptions:
    """What a budget search needs from :class:`~amdinfer.quantize.AutoMixedPrecision`'s options.

    Example:
        >>> BudgetOptions(parse_budget("top1>=0.99"), None, "only", False, ("fp32",), ()).mode
        'only'
    """

    bounds: tuple[Bound, ...]
    task: TaskMetric | None
    mode: str
    progress: bool | None
    ladder: tuple[str, ...]
    notes: tuple[str, ...]
    iou: float = 0.5


def trial_quantizer(
    base: Any, groups: Mapping[str, Sequence[str]], keep: Sequence[str], only: Sequence[str] | None
) -> Any:
    """``base`` with the nodes of candidate groups ``keep`` in float, or with only those of ``only`` quantized (the
    trial quantizer of the mixed-precision and the budget searches)."""
    keep_nodes = [n for c in keep for n in groups[c]]
    only_nodes = None if only is None else [n for c in only for n in groups[c]]
    return base._with_float_nodes(keep=keep_nodes, only=only_nodes)


class _Measured:
    """One plan's model, verdict and budget check."""

    def __init__(self, model: onnx.ModelProto, verdict: TaskVerdict, holds: bool, error: float, tie: float) -> None:
        self.model, self.verdict, self.holds, self.error, self.tie = model, verdict, holds, error, tie


class _BudgetSearch:
    def __init__(
        self,
        opts: BudgetOptions,
        base: Any,
        groups: dict[str, list[str]],
        prepared: onnx.ModelProto,
        feeds: list[dict[str, np.ndarray]],
        ref: list[dict[str, np.ndarray]],
        task: TaskMetric,
    ) -> None:
        self.opts, self.base, self.groups, self.prepared, self.feeds, self.ref = (
            opts,
            base,
            groups,
            prepared,
            feeds,
            ref,
        )
        self.task, self.bounds = task, opts.bounds
        self.ref_answers = task.answers(ref)
        self.evaluations = 0

    def model(self, plan: Mapping[str, str], only: Sequence[str] | None = None) -> onnx.ModelProto:
        """The model of a plan (candidate -> precision), or with only the candidates ``only`` in int8."""
        from ._fp16 import Fp16Quantizer

        keep = [c for c, p in plan.items() if p != "int8"]
        proto = trial_quantizer(self.base, self.groups, keep, only)._quantize_prepared(self.prepared)
        half = [n for c, p in plan.items() if p == "fp16" for n in self.groups[c]]
        if half:  # the int8 model keeps these layers in fp32; convert just them
            proto = Fp16Quantizer(prepare=False)._with_float_nodes(only=half)._quantize_prepared(proto)
        return proto

    def measure(self, plan: Mapping[str, str], only: Sequence[str] | None = None) -> _Measured:
        self.evaluations += 1
        proto = self.model(plan, only)
        outs = _run_on_cpu(proto, self.feeds)
        verdict = self.task.judge(self.task.answers(outs), self.ref_answers, self.bounds, precision="int8")
        bad = _nonfinite(outs, self.ref)
        if bad:
            reasons = (*verdict.reasons, f"outputs {bad}: NaN/Inf where the float model is finite")
            verdict = dataclasses.replace(verdict, verdict=FAIL, reasons=reasons)
        values = verdict.metrics
        holds = not verdict.collapsed and not bad and all(b.holds(values.get(b.metric)) for b in self.bounds)
        error = max(b.error(values.get(b.metric)) for b in self.bounds)
        return _Measured(proto, verdict, holds, error, _tensor_error(outs, self.ref))

    def sensitivities(self, cands: Sequence[str], op_of: Mapping[str, str], full: _Measured) -> list[LayerSensitivity]:
        """The candidates, most sensitive first (ties broken by the output tensors' error)."""
        rung = self.opts.ladder[0]
        scored: list[tuple[float, float, LayerSensitivity]] = []
        with Progress("amdinfer: layer sensitivity", len(cands), enabled=self.opts.progress, unit="layer") as bar:
            for c in cands:
                if self.opts.mode == "only":
                    m = self.measure({}, only=[c])
                    s, tie = m.error, m.tie
                else:
                    m = self.measure({c: rung})
                    s, tie = full.error - m.error, full.tie - m.tie
                scored.append((s, tie, LayerSensitivity(c, op_of[c], float(s))))
                bar.update()
        return [x[2] for x in sorted(scored, key=lambda x: (-x[0], -x[1]))]

    def run(self, op_of: Mapping[str, str]) -> MixedPrecisionResult:
        cands = [k for k, v in self.groups.items() if v]
        plan = dict.fromkeys(cands, "int8")
        first = self.measure(plan)
        steps = [BudgetStep((), "int8", dict(first.verdict.metrics), first.holds, 0)]
        best, best_plan, last = first, dict(plan), first
        order: list[LayerSensitivity] = []
        if not first.holds and cands:
            order = self.sensitivities(cands, op_of, first)
            for rung in self.opts.ladder:
                for layer in order:
                    if _RANK[plan[layer.node]] >= _RANK[rung]:
                        continue
                    plan[layer.node] = rung
                    last = self.measure(plan)
                    moved = sum(p != "int8" for p in plan.values())
                    steps.append(BudgetStep((layer.node,), rung, dict(last.verdict.metrics), last.holds, moved))
                    if last.holds or last.error < best.error:
                        best, best_plan = last, dict(plan)
                    if last.holds:
                        break
                if last.holds:
                    break
        all_float = bool(order) and all(p == "fp32" for p in plan.values()) and not last.holds
        return self._result(best, best_plan, first, order, steps, last.error if all_float else math.nan)

    def _result(
        self,
        best: _Measured,
        plan: dict[str, str],
        first: _Measured,
        order: list[LayerSensitivity],
        steps: list[BudgetStep],
        float_error: float,
    ) -> MixedPrecisionResult:
        verdict = best.verdict
        if not best.holds and verdict.verdict != FAIL:  # e.g. too little data and the budget missed anyway
            missed = tuple(
                f"{b.metric} {v:.4f} misses {b}"
                if (v := verdict.metrics.get(b.metric)) is not None
                else f"no {b.metric}"
                for b in self.bounds
                if not b.holds(verdict.metrics.get(b.metric))
            )
            if verdict.judged:
                verdict = dataclasses.replace(verdict, verdict=FAIL, reasons=(*verdict.reasons, *missed))
        by_name = {x.node: x for x in order}
        kept = [by_name[c] for c in by_name if plan.get(c, "int8") != "int8"]
        opts = self.opts
        return MixedPrecisionResult(
            best.model,
            kept,
            best.error,
            max(self.bounds[0].error_tolerance, 0.0),
            verdict.passed,
            first.error,
            float_error,
            order,
            ",".join(str(b) for b in self.bounds),
            opts.mode,
            self.evaluations,
            budget=tuple(self.bounds),
            plan=plan,
            steps=steps,
            verdict=verdict,
            notes=opts.notes,
        )


def run_budget_search(
    opts: BudgetOptions,
    base: Any,
    groups: dict[str, list[str]],
    prepared: onnx.ModelProto,
    feeds: list[dict[str, np.ndarray]],
    ref: list[dict[str, np.ndarray]],
    op_of: Mapping[str, str],
) -> MixedPrecisionResult:
    """The budget search of ``opts`` on a prepared model (the module docstring says how).

    Raises:
        OptionError: a detect budget on a model whose outputs are no YOLO head (and no ``boxes=``).
    """
    task = opts.task
    if task is None:  # a detect budget without boxes=: the outputs must be a YOLO head
        name, reason = task_from_model(prepared, ref, feeds)
        if name != "detect":
            raise OptionError(
                f"budget={','.join(str(b) for b in opts.bounds)!r}: the model is not a detector whose outputs "
                f"decode as YOLO ({reason}); give boxes=, a callable turning one batch's outputs into box sets"
            )
        task = make_task("detect", iou=opts.iou)
    return _BudgetSearch(opts, base, groups, prepared, feeds, ref, task).run(op_of)
