"""amdinfer's tuned defaults for ONNX Runtime's GPU providers, with the reason for each choice.

On a GPU the provider's knobs decide most of the speed: on an H200 through the CUDA EP, ResNet-50
fp16 at batch 64 ran 8,853 img/s with IO bound on the device and 11,580 with NHWC, exhaustive cuDNN
algorithm search and CUDA graphs added. amdinfer turns such knobs on by default and maps the same
typed options onto each provider's own names (:func:`amdinfer.engines.ort.provider_options` does the
name mapping). The defaults and their reasons live in each provider's record
(:class:`~amdinfer.engines.ort.ExecutionProvider`, ``tuned``); this module plans and reports them.
A knob the caller sets explicitly always wins; ``tuning=False`` leaves every knob
the caller did not set at the provider's own default.

Graph capture is asked for only on graphs it can serve: ONNX Runtime refuses it for a model with
control-flow nodes (``Loop``, ``If``, ``Scan``: any node holding a subgraph, e.g. the dense NMS of a fused
detector), and logs an error line on stderr before it does. So :func:`control_flow_nodes` looks first: the
tuned default is then off, with the reason in ``info.settings["tuning"]`` and ``info.notes``, and a
caller's ``gpu_graphs=True`` is an :class:`~amdinfer.OptionError` naming the nodes.

============== ===================================== ================================== =====================
knob           CUDA EP                               ROCm EP                            MIGraphX EP
============== ===================================== ================================== =====================
prefer_nhwc    ``prefer_nhwc=1``                     (no option)                        (no option)
exhaustive     ``cudnn_conv_algo_search=EXHAUSTIVE`` ``miopen_conv_exhaustive_search=1`` ``migraphx_exhaustive_tune=1``
gpu_graphs     ``enable_cuda_graph=1``               ``enable_hip_graph=1``             (no option)
tunable_ops    provider default (off)                ``tunable_op_enable``/``_tuning``   (no option)
tf32           provider default (on)                 (no option)                        (no option)
============== ===================================== ================================== =====================

Example:
    >>> plan = plan_tuning("CUDAExecutionProvider", io_bound=True)
    >>> plan.knobs()["prefer_nhwc"], plan.knobs()["gpu_graphs"]
    (True, True)
    >>> plan_tuning("CUDAExecutionProvider", user={"gpu_graphs": False}, io_bound=True).choices["gpu_graphs"].source
    'user'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..._support._validate import check_bool, check_optional_bool
from ...errors import OptionError
from ._options import OrtOptions
from ._providers import CUDA_EP, GPU_PROVIDERS, PROVIDERS

__all__ = [
    "GPU_PROVIDERS",
    "NCHW_WHEN_VARYING",
    "SEARCH_EACH_PROCESS",
    "TUNABLE_KNOBS",
    "KnobChoice",
    "TuningPlan",
    "apply_tuning",
    "control_flow_nodes",
    "drop_default_graphs",
    "varying_inputs",
    "plan_tuning",
    "without_graphs",
]

#: The typed knobs amdinfer tunes, in the order they are reported.
TUNABLE_KNOBS: tuple[str, ...] = ("prefer_nhwc", "exhaustive_tune", "gpu_graphs", "tunable_ops", "tf32")

#: Graph-capture options of every provider (derived from the records).
_GRAPH_OPTIONS: tuple[str, ...] = tuple(n for p in PROVIDERS.values() for n in p.option_names("gpu_graphs"))


@dataclass(frozen=True)
class KnobChoice:
    """One knob's value for one provider, where it came from and why.

    Attributes:
        value: ``True``/``False``, or ``None`` for "the provider's own default".
        source: ``"user"`` (set explicitly), ``"amdinfer"`` (amdinfer's tuned default) or
            ``"provider"`` (left to ONNX Runtime).
        reason: why this value.
        options: the provider option names the knob maps to (empty if the provider has none).

    Example:
        >>> KnobChoice(True, "amdinfer", "faster", ("prefer_nhwc",)).to_dict()["source"]
        'amdinfer'
    """

    value: bool | None
    source: str
    reason: str
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy."""
        return {"value": self.value, "source": self.source, "reason": self.reason, "options": list(self.options)}


@dataclass(frozen=True)
class TuningPlan:
    """The knob values chosen for one provider.

    Attributes:
        provider: the full provider name.
        choices: knob name -> :class:`KnobChoice`, for every knob in :data:`TUNABLE_KNOBS`.
        io_bound: whether the engine binds IO on the device (needed for graphs).

    Example:
        >>> plan = plan_tuning("ROCMExecutionProvider", io_bound=True)
        >>> plan.knobs()["tunable_ops"], plan.extra_options()
        (True, {})
    """

    provider: str
    choices: dict[str, KnobChoice] = field(default_factory=dict)
    io_bound: bool = False

    def knobs(self) -> dict[str, bool | None]:
        """The knob values for :func:`~amdinfer.engines.ort.provider_options` (tf32 excluded, see
        :meth:`extra_options`)."""
        return {k: c.value for k, c in self.choices.items() if k != "tf32"}

    def extra_options(self) -> dict[str, str]:
        """Provider options for knobs :func:`~amdinfer.engines.ort.provider_options` does not map."""
        tf32 = self.choices.get("tf32")
        if tf32 is not None and tf32.value is not None and tf32.options:
            return {tf32.options[0]: "1" if tf32.value else "0"}
        return {}

    @property
    def gpu_graphs(self) -> bool:
        """Whether graph capture is on for this provider."""
        c = self.choices.get("gpu_graphs")
        return bool(c is not None and c.value and c.options)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy, as recorded in ``engine.info.settings["tuning"]``."""
        return {k: c.to_dict() for k, c in self.choices.items()}


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


_VARYING = "off: inputs vary beyond the batch axis ({}), a graph per shape; gpu_graphs=True captures them anyway"

#: Providers whose exhaustive search is kept by no one across processes: cuDNN times every convolution algorithm
#: again in each process for each new input shape (MIOpen keeps its results in its user database, the MIGraphX EP
#: its compiled programs in the cache). For a model fed many shapes that search is the cold start (seconds per
#: shape), so amdinfer's default there is cuDNN's HEURISTIC pick; fixed shapes keep the exhaustive search.
SEARCH_EACH_PROCESS: frozenset[str] = frozenset({CUDA_EP})
_SEARCH = (
    "off: inputs vary beyond the batch axis ({}) and cuDNN's exhaustive search would run again in every process for "
    "every new shape (seconds each on a cold start); HEURISTIC picks per shape at once; exhaustive_tune=True searches"
)
#: Providers where a new input shape costs seconds more in NHWC than in NCHW: measured on an H200 (CUDA EP 1.31.1,
#: docs/performance.md, issue 38), the PP-OCR cascade's first pass over 10 pages with every shape built on first use
#: took 49.8 s in NHWC and 24.7 s in NCHW, the warm pass 0.62 and 0.75 s. For inputs that vary, the cold start wins.
NCHW_WHEN_VARYING: frozenset[str] = frozenset({CUDA_EP})
_NCHW = (
    "off: inputs vary beyond the batch axis ({}); each new shape builds its NHWC convolutions for seconds (twice "
    "NCHW's cost on a cold start, measured); prefer_nhwc=True keeps NHWC"
)


def varying_inputs(model: onnx.ModelProto) -> tuple[str, ...]:
    """The graph inputs whose shape may change beyond the batch axis, as ``"name[axis]"`` per dynamic dim.

    Graph capture keeps one captured graph per input shape: a model fed many shapes (pages of any size, text lines
    of any width) would capture without end, and ONNX Runtime's replays of graphs captured for other shapes have
    been seen to fault on the CUDA EP (an OCR cascade on an H200). amdinfer's default leaves capture off for them.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn, transformer_encoder
        >>> varying_inputs(tiny_cnn()), varying_inputs(transformer_encoder())
        ((), ('input[1]',))
    """
    initializers = {t.name for t in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        out += [f"{value.name}[{k}]" for k, d in enumerate(dims) if k > 0 and not d.HasField("dim_value")]
    return tuple(out)


def control_flow_nodes(model: onnx.ModelProto) -> tuple[str, ...]:
    """The control-flow nodes of ``model``'s main graph, as ``"Loop 'name'"``: nodes holding a subgraph
    (``Loop``, ``If``, ``Scan``; one nested in a subgraph makes its outer node count) and calls of the model's
    local functions that contain one (ONNX Runtime inlines them). Graph capture cannot serve any of them.

    Example:
        >>> from onnx import helper
        >>> from amdinfer.testing.models import tiny_cnn
        >>> control_flow_nodes(tiny_cnn())
        ()
        >>> body = helper.make_graph([], "body", [], [])
        >>> node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=body, else_branch=body)
        >>> control_flow_nodes(helper.make_model(helper.make_graph([node], "g", [], [])))
        ("If 'branch'",)
    """
    functions = {(f.domain, f.name): f for f in model.functions}
    flow: set[tuple[str, str]] = set()
    changed = True
    while changed:  # functions may call functions: grow the set of those holding control flow to a fixed point
        changed = False
        for key, function in functions.items():
            if key not in flow and any(_has_subgraph(n) or (n.domain, n.op_type) in flow for n in function.node):
                flow.add(key)
                changed = True
    return tuple(
        f"{n.op_type} {n.name!r}" if n.name else n.op_type
        for n in model.graph.node
        if _has_subgraph(n) or (n.domain, n.op_type) in flow
    )


def _shown(nodes: Sequence[str], most: int = 5) -> str:
    more = f" and {len(nodes) - most} more" if len(nodes) > most else ""
    return ", ".join(nodes[:most]) + more


def _check_graphs_request(provider: str, io_bound: bool, control_flow: Sequence[str]) -> None:
    """A caller's ``gpu_graphs=True`` on ``provider``: refused when graph capture cannot serve the engine."""
    if not io_bound:
        raise OptionError(
            f"gpu_graphs=True on {provider}: graph capture needs IO bound to fixed device buffers; "
            "got io_binding=False, expected io_binding=True (or None)"
        )
    if control_flow:
        raise OptionError(
            f"gpu_graphs=True on {provider}: ONNX Runtime cannot capture a graph with control-flow nodes, "
            f"and the model has {_shown(control_flow)}; expected gpu_graphs=None or False for this model"
        )


def plan_tuning(
    provider: str,
    *,
    user: Mapping[str, bool | None] | None = None,
    tuning: bool = True,
    io_bound: bool = False,
    control_flow: Sequence[str] = (),
    varying: Sequence[str] = (),
) -> TuningPlan:
    """Choose each knob for ``provider``: the caller's value, else amdinfer's tuned default, else the provider's.

    Args:
        provider: full provider name (``"CUDAExecutionProvider"``, ...). The CPU EP and unknown
            providers get no knobs.
        user: knob -> value the caller passed (``None`` = not set). Unknown knob names are an
            :class:`~amdinfer.OptionError`.
        tuning: ``False`` keeps the provider's defaults for every knob the caller did not set.
        io_bound: whether inputs and outputs are bound to device buffers (IOBinding); graph capture
            needs it, so without it ``gpu_graphs`` defaults to off.
        control_flow: the model's control-flow nodes (:func:`control_flow_nodes`); graph capture cannot
            serve them, so with any ``gpu_graphs`` defaults to off.
        varying: the model's input dims that vary beyond the batch axis (:func:`varying_inputs`): with any,
            ``gpu_graphs`` defaults to off, ``exhaustive_tune`` on :data:`SEARCH_EACH_PROCESS` providers, and
            ``prefer_nhwc`` on :data:`NCHW_WHEN_VARYING` providers.

    Returns:
        A :class:`TuningPlan` with one :class:`KnobChoice` per knob.

    Raises:
        OptionError: an unknown knob, or ``gpu_graphs=True`` without IO binding or on a model with
            control-flow nodes.

    Example:
        >>> plan_tuning("MIGraphXExecutionProvider").knobs()
        {'prefer_nhwc': None, 'exhaustive_tune': True, 'gpu_graphs': None, 'tunable_ops': None}
        >>> plan_tuning("CUDAExecutionProvider", tuning=False).knobs()["exhaustive_tune"] is None
        True
        >>> plan = plan_tuning("CUDAExecutionProvider", io_bound=True, control_flow=["Loop 'nms'"])
        >>> plan.choices["gpu_graphs"].reason
        "off: the model has control-flow nodes (Loop 'nms'), which graph capture cannot serve"
    """
    user = dict(user or {})
    unknown = sorted(set(user) - set(TUNABLE_KNOBS))
    if unknown:
        raise OptionError(f"tuning knobs: got {unknown}, expected names among {list(TUNABLE_KNOBS)}")
    for name, value in user.items():
        check_optional_bool(name, value, none_means="None: amdinfer's tuned default")
    check_bool("tuning", tuning)
    choices: dict[str, KnobChoice] = {}
    record = PROVIDERS.get(provider)
    for knob in TUNABLE_KNOBS:
        tuned = record.tuned.get(knob) if record is not None else None
        requested = user.get(knob)
        if record is None or tuned is None:
            reason = f"{provider} has no tunable knobs" if provider else "no provider"
            choices[knob] = KnobChoice(requested, "user" if requested is not None else "provider", reason)
            continue
        options, default, why = record.option_names(knob), tuned.value, tuned.reason
        if requested is not None:
            if knob == "gpu_graphs" and requested and options:
                _check_graphs_request(provider, io_bound, control_flow)
            reason = "set by the caller" if options else f"set by the caller, but {why}; not applied"
            choices[knob] = KnobChoice(requested, "user", reason, options)
        elif not options:
            choices[knob] = KnobChoice(None, "provider", why, options)
        elif not tuning:
            choices[knob] = KnobChoice(None, "provider", "tuning=False: provider default", options)
        elif default is None:
            choices[knob] = KnobChoice(None, "provider", why, options)
        else:
            off = _off_because(knob, provider, io_bound, control_flow, varying)
            choices[knob] = KnobChoice(False if off else default, "amdinfer", off or why, options)
    return TuningPlan(provider=provider, choices=choices, io_bound=io_bound)


def _off_because(
    knob: str, provider: str, io_bound: bool, control_flow: Sequence[str], varying: Sequence[str]
) -> str | None:
    """Why amdinfer turns a tuned-on ``knob`` off for this model (``None``: it keeps its tuned default)."""
    if knob == "gpu_graphs" and control_flow:
        return f"off: the model has control-flow nodes ({_shown(control_flow)}), which graph capture cannot serve"
    if knob == "exhaustive_tune" and varying and provider in SEARCH_EACH_PROCESS:
        return _SEARCH.format(_shown(varying))
    if knob == "gpu_graphs" and varying:
        return _VARYING.format(_shown(varying))
    if knob == "prefer_nhwc" and varying and provider in NCHW_WHEN_VARYING:
        return _NCHW.format(_shown(varying))
    if knob == "gpu_graphs" and not io_bound:
        return "off: graph capture needs IO bound to fixed device buffers (io_binding=False)"
    return None


def apply_tuning(
    provider: str,
    knobs: Mapping[str, Any],
    options: OrtOptions,
    settings: dict[str, Any],
    *,
    control_flow: Sequence[str] = (),
    varying: Sequence[str] = (),
    notes: list[str] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Tuned knob values for :func:`~amdinfer.engines.ort.provider_options`, plus options it does not map.

    Records the plan in ``settings["tuning"][provider]``.

    Args:
        provider: full provider name.
        knobs: the engine's typed provider knobs as the caller gave them (``None``: not set).
        options: the engine's :class:`~amdinfer.engines.ort.OrtOptions` (``tf32``, ``tuning``, ``io_binding``).
        settings: ``engine.info.settings`` (updated).
        control_flow: the model's control-flow nodes (:func:`control_flow_nodes`).
        varying: the model's input dims that vary beyond the batch axis (:func:`varying_inputs`).
        notes: ``engine.info.notes``: when the control-flow nodes turned amdinfer's default graph capture
            off, one line says so (nothing is printed).

    Raises:
        OptionError: see :func:`plan_tuning`.

    Returns:
        ``(knobs, extra_options)``.

    Example:
        >>> settings = {}
        >>> from amdinfer.engines.ort import OrtOptions
        >>> knobs, extra = apply_tuning("CUDAExecutionProvider", {"prefer_nhwc": None}, OrtOptions(), settings)
        >>> knobs["prefer_nhwc"], settings["tuning"]["CUDAExecutionProvider"]["prefer_nhwc"]["source"]
        (True, 'amdinfer')
    """
    user = {k: knobs.get(k) for k in TUNABLE_KNOBS if k != "tf32"}
    user["tf32"] = options.tf32
    io_bound = options.binds_io(provider)
    plan = plan_tuning(
        provider, user=user, tuning=options.tuning, io_bound=io_bound, control_flow=control_flow, varying=varying
    )
    settings.setdefault("tuning", {})[provider] = plan.to_dict()
    graphs = plan.choices["gpu_graphs"]
    if notes is not None and (control_flow or varying) and graphs.source == "amdinfer" and graphs.options and io_bound:
        notes.append(f"{provider}: graph capture (gpu_graphs) {graphs.reason}")
    out = dict(knobs)
    out.update(plan.knobs())
    return out, plan.extra_options()


def drop_default_graphs(error: str, names: list[str], opts: list[dict[str, str]], settings: dict[str, Any]) -> bool:
    """After a session-creation error about graph capture, turn amdinfer's default graphs off (in ``opts``).

    Only graphs that amdinfer chose are dropped; a caller's ``gpu_graphs=True`` stays an error. The
    reason is recorded in ``settings["tuning"]``.

    Returns:
        Whether something was changed (then creating the session again may succeed).

    Example:
        >>> settings = {"tuning": {"CUDAExecutionProvider": {"gpu_graphs": {"source": "amdinfer", "value": True}}}}
        >>> opts = [{"enable_cuda_graph": "1"}]
        >>> drop_default_graphs("This session cannot use the graph capture feature as requested by the user "
        ...                     "as all compute graph nodes have not been partitioned", ["CUDAExecutionProvider"],
        ...                     opts, settings)
        True
        >>> opts
        [{'enable_cuda_graph': '0'}]
    """
    if "cannot use the graph capture feature" not in error:
        return False
    changed = False
    for name, o in zip(names, opts):
        choice = settings.get("tuning", {}).get(name, {}).get("gpu_graphs")
        if not choice or choice.get("source") != "amdinfer":
            continue
        for key in _GRAPH_OPTIONS:
            if o.get(key) == "1":
                o[key] = "0"
                changed = True
        if changed:
            first = error.strip().splitlines()[0] if error.strip() else error
            choice["value"] = False
            choice["reason"] = f"off: ONNX Runtime refused graph capture for this model ({first})"
    return changed


def without_graphs(options: Mapping[str, str]) -> dict[str, str]:
    """A copy of one provider's options with graph capture off (for sessions run with plain ``session.run``).

    Example:
        >>> without_graphs({"enable_cuda_graph": "1", "device_id": "0"})
        {'enable_cuda_graph': '0', 'device_id': '0'}
    """
    return {k: ("0" if k in _GRAPH_OPTIONS else v) for k, v in options.items()}
