"""``AutoMixedPrecision``: find the fewest layers to keep in float so the model meets a tolerance, or (with
``budget=``) the fastest per-layer precision plan that meets a task-metric budget (``amdinfer.quantize._budget``).

Algorithm of the tolerance search (documented in ``docs/quantization.md``):

1. Reference outputs: the float model (or the engine you give, e.g. the float64 reference engine) on the
   evaluation data. ``error(S)`` is the metric of the model quantized with the layers in ``S`` kept in float.
2. ``error({})`` (everything quantized); if it meets the tolerance, nothing is kept.
3. Candidates: by default the layers of :func:`layer_groups` (a weighted node and the activation,
   normalization and residual nodes after it, kept in float together). Sensitivity of each candidate
   ``L``: ``mode="only"``: ``error`` of the model where only ``L`` is quantized (the error ``L`` brings on
   its own); ``mode="keep"``: ``error({}) - error({L})`` (what keeping ``L`` alone saves).
4. Sort the candidates by sensitivity, most sensitive first. ``error(all candidates)`` must meet the
   tolerance, else no choice of candidates can and the search says so. Binary search for the shortest
   prefix of the sorted list that meets the tolerance (this assumes that keeping more layers does not
   increase the error; the chosen set is always evaluated, so the result is verified, not assumed).
5. ``prune``: try dropping each kept layer, least sensitive first; a drop that still meets the tolerance
   stays dropped. The final set is the last one evaluated within tolerance.

Cost: ``n + 2 + log2(n) + k`` quantize-and-run evaluations for ``n`` candidates and ``k`` kept layers;
int8 calibration ranges are computed once and reused by every evaluation.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .._support._progress import check_progress
from ..errors import ModelError, OptionError
from ..model import ModelSource
from ._amp_result import BudgetStep, LayerSensitivity, MixedPrecisionResult
from ._base import QuantizationSpec, QuantizerBase
from ._budget import BudgetOptions, budget_task, float_ladder, parse_budget, run_budget_search, trial_quantizer
from ._data import Progress, materialize, to_feeds
from ._evaluate import _is_engine, _run_all, _run_on_cpu
from ._prepare import WEIGHTED_OPS, prepare_model, weighted_layers
from ._tasks import METRIC_TASKS, METRICS, NOT_JUDGED, Bound, TaskMetric, make_task, metric_error, task_from_model

__all__ = ["AutoMixedPrecision", "BudgetStep", "LayerSensitivity", "MixedPrecisionResult", "layer_groups"]

log = logging.getLogger("amdinfer.quantize")

Outputs = Sequence[Mapping[str, np.ndarray]]
Metric = str | TaskMetric | Callable[[Outputs, Outputs], float]

MODES = ("only", "keep")


def _metric_fn(
    metric: Metric, task: str | TaskMetric, boxes: Any, iou: float
) -> tuple[str, Callable[[Outputs, Outputs], float] | None]:
    """The metric's label and error function (``None``: decided on the model, for ``task="auto"``)."""
    if isinstance(metric, TaskMetric):
        return f"1 - {metric.metrics[0]}", metric_error(metric, metric.metrics[0])
    if callable(metric):
        return getattr(metric, "__name__", "custom"), metric
    if metric not in METRICS:
        raise OptionError(f"metric: got {metric!r}, expected one of {list(METRICS)}, a TaskMetric or a callable")
    name = task if isinstance(task, TaskMetric) else (METRIC_TASKS[metric] if task == "auto" else task)
    if isinstance(name, str) and name == "detect":
        if boxes is None and task != "detect":
            return f"1 - {metric}", None  # YOLO outputs decode themselves; checked on the model by search()
        return f"1 - {metric}", metric_error(make_task("detect", boxes=boxes, iou=iou), metric)
    fn = metric_error(make_task(name), metric)
    return fn.__name__, fn


def layer_groups(proto: onnx.ModelProto) -> dict[str, list[str]]:
    """Each weighted node with the nodes after it up to the next weighted node (its activation, residual add...).

    Keeping a layer in float keeps its whole group, so no quantize/dequantize pair is left between the layer
    and its activation. Nodes before the first weighted node join the first group.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> layer_groups(tiny_cnn())
        {'conv1': ['conv1', 'relu1', 'pool1'], 'conv2': ['conv2', 'relu2', 'avgpool', 'flatten'], 'fc': ['fc']}
    """
    groups: dict[str, list[str]] = {}
    lead: list[str] = []
    current: str | None = None
    for node in proto.graph.node:
        if node.op_type in WEIGHTED_OPS:
            current = node.name
            groups[current] = [*lead, node.name] if not groups else [node.name]
            lead = []
        elif current is None:
            lead.append(node.name)
        else:
            groups[current].append(node.name)
    return groups


class AutoMixedPrecision(QuantizerBase):
    """Quantize with ``quantizer`` but keep the fewest layers in float that meet ``tolerance``, or move the
    fewest layers, most sensitive first, out of int8 until the task metric meets ``budget``.

    Works for :class:`~amdinfer.quantize.Fp16Quantizer` and :class:`~amdinfer.quantize.Int8Quantizer`.
    It is itself a quantizer: ``amdinfer.load(model, quantizer=AutoMixedPrecision(...))`` runs the search
    and loads the result, and :attr:`result` tells what was kept. The algorithm is in the module docstring.

    Args:
        quantizer: the quantizer to apply (its own block lists and exclusions stay in force).
        data: evaluation samples (feed dicts or arrays), distinct from int8 calibration data.
        budget: the task-metric bounds the plan must meet on ``data``, e.g. ``"map50>=0.98"``, ``"f1>=0.95"``,
            ``"top1>=0.99"``, ``"cer<=0.02"``, ``"cosine>=0.99"`` (several joined by commas, all of one task;
            a :class:`~amdinfer.quantize.Bound` or a list of them). The search starts from every layer in int8,
            moves the most sensitive layer to the next precision of the ladder (``providers``) at each step,
            and stops as soon as the budget holds; :attr:`MixedPrecisionResult.verdict` is ``PASS`` only when
            it holds on enough held-out data, ``NOT JUDGED`` on too little, else ``FAIL``. Give either
            ``budget`` or ``tolerance``.
        providers: with ``budget``: the ONNX Runtime providers the quantized model will run on. The first one
            picks the ladder: a GPU provider (``migraphx``, ``rocm``, ``cuda``...) moves layers to fp16, then
            fp32; the CPU (default) straight to fp32, since fp16 brings no speed there.
        tolerance: the bound on the metric's error (``error <= tolerance``); the error of a metric where higher
            is better is ``1 - value`` (``metric="map50", tolerance=0.02`` means ``map50 >= 0.98``), of ``cer``
            and ``rms`` the value.
        metric: with ``tolerance`` (default ``"rms"``): a task metric's name (:data:`~amdinfer.quantize.METRICS`):
            ``"rms"`` (largest RMS error over the outputs and their channel groups, each on its own scale),
            ``"cosine"`` (lowest mean cosine of one), ``"top1"``/``"top5"`` (classify), ``"map50"``/``"f1"``
            (detect: YOLO outputs are decoded, or give ``boxes``), ``"cer"`` (ocr), ``"retrieval_top1"``
            (embed); a :class:`~amdinfer.quantize.TaskMetric` (its first metric); or ``callable(quantized_outs,
            reference_outs)`` over lists of output dicts, lower is better.
        task: the task whose metric ``metric`` names (``"auto"``: the metric's own task, ``cosine`` and ``rms``
            over every output); e.g. ``task="embed", metric="cosine"`` for the embedding's cosine.
        boxes: box decoder for the detect metrics (see :func:`~amdinfer.quantize.evaluate`).
        reference: an engine giving the reference outputs (e.g. ``backend="reference", precision="fp64"``);
            default the float model on ONNX Runtime CPU.
        mode: ``"only"`` (quantize one layer at a time) or ``"keep"`` (keep one layer at a time in float).
        candidates: ``None``: the layers, each a weighted node (Conv, ConvTranspose, Gemm, MatMul) with the
            nodes after it up to the next one (:func:`layer_groups`); ``"all"``: every node on its own; or a
            list of node names, each on its own.
        prune: after the prefix search, try dropping kept layers one by one.
        iou: IoU for box matching.
        input_name: the input that bare arrays feed (multi-input models).
        progress: a progress bar over the sensitivity pass, one count per layer: ``None`` (default) only
            when stderr is a terminal, ``True``/``False`` always/never.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> from amdinfer.quantize import Int8Quantizer
        >>> model = tiny_cnn()
        >>> calib = [random_inputs(model, batch=4, seed=s) for s in range(4)]
        >>> data = [random_inputs(model, batch=8, seed=s) for s in (10, 11)]
        >>> int8 = Int8Quantizer(calibration=calib, progress=False, cache=False)
        >>> full = AutoMixedPrecision(int8, data, tolerance=1e9, progress=False).search(model).full_error
        >>> amp = AutoMixedPrecision(int8, data, tolerance=full / 2, progress=False)  # half the int8 error
        >>> result = amp.search(model)
        >>> result.passed, len(result.kept_nodes) > 0, result.error <= full / 2 < result.full_error
        (True, True, True)
        >>> by_budget = AutoMixedPrecision(int8, data, budget="top1>=0.9", progress=False).search(model)
        >>> by_budget.verdict.verdict, by_budget.steps[0].moved, sorted(set(by_budget.plan.values()))
        ('PASS', (), ['int8'])
    """

    def __init__(
        self,
        quantizer: QuantizerBase,
        data: Iterable[Any],
        *,
        budget: str | Bound | Sequence[str | Bound] | None = None,
        providers: Sequence[str] | None = None,
        tolerance: float | None = None,
        metric: Metric | None = None,
        task: str | TaskMetric = "auto",
        boxes: Callable[[dict[str, np.ndarray]], Any] | None = None,
        reference: Any = None,
        mode: str = "only",
        candidates: Sequence[str] | str | None = None,
        prune: bool = True,
        iou: float = 0.5,
        input_name: str | None = None,
        progress: bool | None = None,
    ) -> None:
        if not isinstance(quantizer, QuantizerBase) or isinstance(quantizer, AutoMixedPrecision):
            raise OptionError(
                f"quantizer: got {quantizer!r}, expected an Fp16Quantizer, Int8Quantizer or DynamicInt8Quantizer"
            )
        self.budget = self._check_budget(budget, tolerance, metric, providers, quantizer)
        if budget is not None:
            tolerance = self.budget[0].error_tolerance
        if (
            not isinstance(tolerance, (int, float))
            or isinstance(tolerance, bool)
            or not tolerance >= 0
            or not math.isfinite(tolerance)
        ):
            raise OptionError(f"tolerance: got {tolerance!r}, expected a finite float >= 0")
        if mode not in MODES:
            raise OptionError(f"mode: got {mode!r}, expected one of {list(MODES)}")
        if candidates is not None and candidates != "all":
            if isinstance(candidates, str) or not all(isinstance(c, str) for c in candidates):
                raise OptionError(f"candidates: got {candidates!r}, expected None, 'all' or a list of node names")
        if reference is not None and not _is_engine(reference):
            raise OptionError(f"reference: got {type(reference).__name__}, expected an amdinfer Engine or None")
        if not isinstance(prune, bool):
            raise OptionError(f"prune: got {prune!r}, expected True or False")
        self.quantizer = quantizer
        self.tolerance = float(tolerance)
        self._budget_task = budget_task(self.budget, task, boxes, iou) if self.budget else None
        metric = metric if metric is not None else (self.budget[0].metric if self.budget else "rms")
        self.metric_name, self._metric = _metric_fn(metric, task, boxes, iou)
        self._metric_spec = (metric, iou)
        self._ladder, ladder_note = float_ladder(providers) if self.budget else (("fp32",), "")
        self._budget_notes: list[str] = [ladder_note] if self.budget else []
        if self.budget:
            self.metric_name = ",".join(str(b) for b in self.budget)
        self.mode = mode
        self.candidates = candidates if candidates in (None, "all") else list(candidates)  # type: ignore[arg-type]
        self.prune = prune
        self.reference = reference
        self.input_name = input_name
        self.progress = check_progress(progress)
        self._data = data
        self._items: list[Any] | None = None
        self.result: MixedPrecisionResult | None = None

    @staticmethod
    def _check_budget(
        budget: Any, tolerance: Any, metric: Any, providers: Any, quantizer: QuantizerBase
    ) -> tuple[Bound, ...]:
        """The budget's bounds (empty without one); a budget excludes ``tolerance`` and ``metric``."""
        if budget is None:
            if tolerance is None:
                raise OptionError("tolerance: got None, expected a finite float >= 0 (or give budget='top1>=0.99')")
            if providers is not None:
                raise OptionError("providers: picks the precisions a budget search moves layers to; give budget=")
            return ()
        for name, value in (("tolerance", tolerance), ("metric", metric)):
            if value is not None:
                raise OptionError(f"{name}: got {value!r} together with budget={budget!r}; the budget names both")
        if quantizer.precision != "int8":
            raise OptionError(
                f"budget: searches int8 / fp16 / fp32 plans; got a {quantizer.precision} quantizer "
                f"({type(quantizer).__name__}), expected an Int8Quantizer"
            )
        return parse_budget(budget)

    @property
    def precision(self) -> str:  # type: ignore[override]
        """The wrapped quantizer's precision."""
        return self.quantizer.precision

    def settings(self) -> dict[str, Any]:
        """The wrapped quantizer's settings plus the search's."""
        return {
            **self.quantizer.settings(),
            "mixed_precision": {
                **({"budget": [str(b) for b in self.budget], "ladder": list(self._ladder)} if self.budget else {}),
                "tolerance": self.tolerance,
                "metric": self.metric_name,
                "mode": self.mode,
                "candidates": self.candidates,
                "prune": self.prune,
            },
        }

    # ------------------------------------------------------------------ search
    def _evaluate(
        self, q: QuantizerBase, prepared: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], ref: Outputs
    ) -> tuple[float, onnx.ModelProto]:
        proto = q._quantize_prepared(prepared)
        outs = _run_on_cpu(proto, feeds)
        if self._metric is None:
            raise OptionError("AutoMixedPrecision: the metric is chosen by search(); call search(model) first")
        err = float(self._metric(outs, ref))
        return (err if math.isfinite(err) else math.inf), proto

    def search(self, model: Any) -> MixedPrecisionResult:
        """Run the search on ``model`` and return (and keep in :attr:`result`) what it found.

        Raises:
            ModelError: the model cannot be prepared.
            OptionError: ``candidates`` names nodes the model does not have.
            InputError: a sample of ``data`` does not fit the model or holds NaN or inf (the message names
                the sample's index and the input).
        """
        src = ModelSource.from_any(model)
        prepared = prepare_model(src, optimize=getattr(self.quantizer, "prepare", True))
        base = self.quantizer._with_float_nodes()
        if hasattr(base, "_cache"):
            base._cache = None  # trial models are not worth a cache entry each
        if self._items is None:
            self._items = materialize(self._data, what="data", progress=False)
        feeds = to_feeds(self._items, prepared, what="data", input_name=self.input_name, finite=True)
        ref = self._reference_outputs(src, feeds)
        op_of = {n.name: n.op_type for n in prepared.graph.node}
        if self.budget:
            groups = self._candidate_groups(prepared, base, op_of)
            notes = (*self._budget_notes, *self._fixed_float_note(base, prepared))
            options = BudgetOptions(
                self.budget, self._budget_task, self.mode, self.progress, self._ladder, notes, self._metric_spec[1]
            )
            self.result = run_budget_search(options, base, groups, prepared, feeds, ref, op_of)
            return self.result
        if self._metric is None:  # a detect metric without boxes=: the model's outputs must be a YOLO head
            name, reason = task_from_model(src.proto, ref, feeds)
            if name != "detect":
                raise OptionError(
                    f"metric={self._metric_spec[0]!r}: the model is not a detector whose outputs decode as YOLO "
                    f"({reason}); give boxes=, a callable turning one batch's outputs into box sets"
                )
            self._metric = metric_error(make_task("detect", iou=self._metric_spec[1]), str(self._metric_spec[0]))
        trials = _Trials(self, base, self._candidate_groups(prepared, base, op_of), prepared, feeds, ref)
        cands = [k for k, v in trials.groups.items() if v]

        full_error, full_model = trials.error()
        trials.full_error = full_error
        log.info(
            "mixed precision: all quantized, %s = %.4g (tolerance %.4g)", self.metric_name, full_error, self.tolerance
        )
        if full_error <= self.tolerance or not cands:
            return self._finish(trials, full_model, [], full_error, full_error <= self.tolerance, full_error, [])

        order = sorted(self._sensitivities(trials, cands, op_of, full_error), key=lambda x: -x.sensitivity)
        names = [x.node for x in order]
        float_error, best_model = trials.error(keep=names)
        if float_error > self.tolerance:
            return self._finish(trials, best_model, order, float_error, False, float_error, order)
        kept, best_err, best_model = self._fewest_float_layers(trials, names, float_error, best_model)
        by_name = {x.node: x for x in order}
        kept_layers = [by_name[k] for k in names if k in kept]
        return self._finish(trials, best_model, kept_layers, best_err, True, float_error, order)

    @staticmethod
    def _fixed_float_note(base: Any, prepared: onnx.ModelProto) -> list[str]:
        """What the quantizer keeps in float whatever the plan (a YOLO decode head), for the result's notes."""
        excluded = base._excluded(prepared) if hasattr(base, "_excluded") else []
        head = getattr(base, "head", None)
        if not excluded:
            return []
        what = f" ({head.summary()})" if head is not None else ""
        return [f"{len(excluded)} nodes stay in float in every plan, as the quantizer keeps them{what}"]

    def _reference_outputs(self, src: ModelSource, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """The float outputs every trial is compared with: ``reference=``'s, else ONNX Runtime CPU's."""
        if self.reference is not None:
            return _run_all(self.reference, feeds)
        return _run_on_cpu(src, feeds)

    def _candidate_groups(self, prepared: onnx.ModelProto, base: Any, op_of: Mapping[str, str]) -> dict[str, list[str]]:
        """Candidate name -> the nodes kept in float with it, minus those the quantizer already excludes."""
        if self.candidates is None:
            groups = layer_groups(prepared)
        elif self.candidates == "all":
            groups = {n.name: [n.name] for n in prepared.graph.node}
        else:
            unknown = [c for c in self.candidates if c not in op_of]
            if unknown:
                raise OptionError(
                    f"candidates: nodes {unknown} are not in the prepared model; expected names such as "
                    f"{weighted_layers(prepared)[:6]}"
                )
            groups = {c: [c] for c in self.candidates}
        already = set(getattr(base, "exclude_nodes", [])) | set(getattr(base, "node_block_list", []))
        return {k: [n for n in v if n not in already] for k, v in groups.items() if k not in already}

    def _sensitivities(
        self, trials: _Trials, cands: Sequence[str], op_of: Mapping[str, str], full_error: float
    ) -> list[LayerSensitivity]:
        """How much each candidate alone moves the error (``mode``: kept in float, or quantized alone)."""
        sens: list[LayerSensitivity] = []
        with Progress("amdinfer: layer sensitivity", len(cands), enabled=self.progress, unit="layer") as bar:
            for c in cands:
                if self.mode == "only":
                    s, _ = trials.error(only=[c])
                else:
                    e, _ = trials.error(keep=[c])
                    s = full_error - e
                sens.append(LayerSensitivity(c, op_of[c], float(s)))
                bar.update()
        return sens

    def _fewest_float_layers(
        self, trials: _Trials, names: list[str], best_err: float, best_model: onnx.ModelProto
    ) -> tuple[list[str], float, onnx.ModelProto]:
        """Bisect the shortest prefix of ``names`` (most sensitive first) that meets the tolerance, then prune."""
        lo, hi = 0, len(names)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            e, m = trials.error(keep=names[:mid])
            if e <= self.tolerance:
                hi, best_err, best_model = mid, e, m
            else:
                lo = mid
        kept = names[:hi]
        if self.prune and len(kept) > 1:
            for name in list(reversed(kept)):
                trial = [k for k in kept if k != name]
                if not trial:
                    break
                e, m = trials.error(keep=trial)
                if e <= self.tolerance:
                    kept, best_err, best_model = trial, e, m
        return kept, best_err, best_model

    def _finish(
        self,
        trials: _Trials,
        model: onnx.ModelProto,
        kept: list[LayerSensitivity],
        error: float,
        passed: bool,
        float_error: float,
        sensitivities: list[LayerSensitivity],
    ) -> MixedPrecisionResult:
        self.result = MixedPrecisionResult(
            model,
            kept,
            error,
            self.tolerance,
            passed,
            trials.full_error,
            float_error,
            sensitivities,
            self.metric_name,
            self.mode,
            trials.evaluations,
        )
        return self.result

    # ------------------------------------------------------------------ protocol
    def quantize(self, model: Any) -> onnx.ModelProto:
        """Search and return the mixed-precision model.

        Raises:
            ModelError: no choice of candidate layers meets the tolerance (the message gives the best error).
        """
        result = self.search(model)
        if self.budget and not result.passed:
            verdict = result.verdict
            if verdict is not None and verdict.verdict == NOT_JUDGED:
                log.warning("mixed precision: budget %s not judged: %s", self.metric_name, "; ".join(verdict.reasons))
                return result.model
            raise ModelError(
                f"mixed precision: budget {self.metric_name} not met even with the "
                f"{len(result.kept)} most sensitive of {len(result.sensitivities)} layers out of int8 (best: "
                f"{verdict.summary() if verdict is not None else result.error}); relax the budget, add candidates "
                "(candidates='all') or use a higher precision"
            )
        if not result.passed:
            raise ModelError(
                f"mixed precision: {self.metric_name} {result.float_error:.4g} even with all "
                f"{len(result.sensitivities)} candidate layers in float, above the tolerance {self.tolerance:.4g}; "
                "raise the tolerance, add candidates (candidates='all') or use a higher precision"
            )
        return result.model

    def _quantize_prepared(self, prepared: onnx.ModelProto) -> onnx.ModelProto:
        return self.quantize(prepared)

    def _with_float_nodes(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> QuantizerBase:
        raise OptionError("AutoMixedPrecision cannot be nested")

    def _note(self) -> str:
        if self.budget and self.result is not None:
            moved = {p: [c for c, q in self.result.plan.items() if q == p] for p in ("fp16", "fp32")}
            shown = ", ".join(f"{p} {v}" for p, v in moved.items() if v) or "every layer int8"
            verdict = self.result.verdict.verdict if self.result.verdict is not None else "not judged"
            return f"precision by budget {self.metric_name} ({verdict}): {shown}"
        kept = self.result.kept_nodes if self.result is not None else "(search not run)"
        return f"mixed precision keeps {kept} in float; the native path quantizes every layer of the chosen kinds"

    def describe(self) -> QuantizationSpec:
        """The wrapped quantizer's description, marked as mixed precision (the kept layers in ``notes``)."""
        return dataclasses.replace(self.quantizer.describe(), mixed=True, notes=(self._note(),))

    def calibration_feeds(self, model: Any) -> list[dict[str, np.ndarray]]:
        """The wrapped quantizer's calibration feeds."""
        return self.quantizer.calibration_feeds(model)


class _Trials:
    """The trial models of one search: each keeps some candidate groups in float and is scored once."""

    def __init__(
        self,
        amp: AutoMixedPrecision,
        base: Any,
        groups: dict[str, list[str]],
        prepared: onnx.ModelProto,
        feeds: list[dict[str, np.ndarray]],
        ref: list[dict[str, np.ndarray]],
    ) -> None:
        self.amp, self.base, self.groups, self.prepared, self.feeds, self.ref = amp, base, groups, prepared, feeds, ref
        self.evaluations = 0
        self.full_error = math.nan

    def error(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> tuple[float, onnx.ModelProto]:
        """(error, model) with the nodes of ``keep`` in float, or only those of ``only`` quantized."""
        self.evaluations += 1
        return self.amp._evaluate(
            trial_quantizer(self.base, self.groups, keep, only), self.prepared, self.feeds, self.ref
        )
