"""The NumPy reference engine: ``onnx.reference.ReferenceEvaluator`` plus amdinfer's fast kernels.

This is the oracle every accelerator's output is checked against. It does not reimplement ONNX: it runs
``onnx.reference.ReferenceEvaluator`` and swaps in the fast NumPy kernels of :mod:`amdinfer.reference`
(Conv, pooling, Resize, ...) through the evaluator's ``new_ops=`` hook. On top of that it adds a float64
mode (:func:`to_float64` rewrites a copy of the model) and per-layer outputs (``run(..., outputs="all")``).

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> engine = amdinfer.load(tiny_cnn(), backend="reference", precision="fp64")
    >>> out = engine.run(np.zeros((1, 3, 32, 32), np.float32))
    >>> out["logits"].dtype, engine.info.settings["dtype"]
    (dtype('float32'), 'float64')
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from ..errors import AmdinferError, InputError, ModelError, OptionError, UnsupportedOperatorError
from ..model import ModelSource
from ..types import TensorSpec
from ._options import EngineOptions, document_options, option_doc
from .base import Engine, EngineInfo

__all__ = ["FLOAT_TYPES", "ReferenceEngine", "ReferenceOptions", "to_float64"]

#: The ONNX element types the float64 mode promotes (float8 types are quantization formats and stay).
FLOAT_TYPES: frozenset[int] = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16})

# Integer attributes that name an element type (Cast.to, RandomNormal.dtype, EyeLike.dtype, ...).
_DTYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype"})
_ONNX_DOMAINS = ("", "ai.onnx")
_PRECISIONS = ("fp32", "fp16", "fp64")


def _check_opsets(source: ModelSource) -> None:
    """Refuse opsets newer than the installed onnx defines: the evaluator would run them with older semantics."""
    known = onnx.defs.C.schema_version_map()
    for domain, version in source.opsets.items():
        key = "" if domain == "ai.onnx" else domain
        if key not in known:
            continue  # custom domains: their nodes are refused (or run by new_ops) by name
        low, high = known[key]
        if not low <= version <= high:
            raise ModelError(
                f"model {source.name}: declares opset {version} of domain {domain or 'ai.onnx'!r}, but onnx "
                f"{onnx.__version__} (the reference engine) defines opsets {low}..{high}; re-export the model "
                "with a supported opset or upgrade onnx"
            )


# ---------------------------------------------------------------------------------------------- fp64 rewrite
def _promote_type(tp: onnx.TypeProto) -> None:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        if tp.tensor_type.elem_type in FLOAT_TYPES:
            tp.tensor_type.elem_type = TensorProto.DOUBLE
    elif kind == "sparse_tensor_type":
        if tp.sparse_tensor_type.elem_type in FLOAT_TYPES:
            tp.sparse_tensor_type.elem_type = TensorProto.DOUBLE
    elif kind == "sequence_type":
        _promote_type(tp.sequence_type.elem_type)
    elif kind == "optional_type":
        _promote_type(tp.optional_type.elem_type)
    elif kind == "map_type":
        _promote_type(tp.map_type.value_type)


def _promote_tensor(t: TensorProto) -> None:
    if t.data_type not in FLOAT_TYPES:
        return
    value = numpy_helper.to_array(t).astype(np.float64)  # exact: every promoted type is a subset of float64
    promoted = numpy_helper.from_array(value, t.name)
    promoted.doc_string = t.doc_string
    t.CopyFrom(promoted)


def _promote_node(node: onnx.NodeProto) -> None:
    for attr in node.attribute:
        if attr.type == AttributeProto.TENSOR:
            _promote_tensor(attr.t)
        elif attr.type == AttributeProto.TENSORS:
            for t in attr.tensors:
                _promote_tensor(t)
        elif attr.type == AttributeProto.SPARSE_TENSOR:
            _promote_tensor(attr.sparse_tensor.values)
        elif attr.type == AttributeProto.SPARSE_TENSORS:
            for st in attr.sparse_tensors:
                _promote_tensor(st.values)
        elif attr.type == AttributeProto.GRAPH:
            _promote_graph(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            for g in attr.graphs:
                _promote_graph(g)
        elif attr.type == AttributeProto.TYPE_PROTO:
            _promote_type(attr.tp)
        elif attr.type == AttributeProto.TYPE_PROTOS:
            for tp in attr.type_protos:
                _promote_type(tp)
        elif attr.type == AttributeProto.INT and attr.name in _DTYPE_ATTRIBUTES and attr.i in FLOAT_TYPES:
            attr.i = TensorProto.DOUBLE
    if node.domain not in _ONNX_DOMAINS:
        return
    if node.op_type == "Constant":
        # value_float(s) always make float32; spell them as a float64 tensor instead.
        for i, attr in enumerate(node.attribute):
            if attr.name in ("value_float", "value_floats"):
                value = np.array(attr.f if attr.name == "value_float" else list(attr.floats), np.float32)
                del node.attribute[i]
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value.astype(np.float64))))
                break
    elif node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
        # The default fill value is a float32 zero.
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, np.float64))))


def _promote_graph(graph: onnx.GraphProto) -> None:
    for vi in (*graph.input, *graph.output, *graph.value_info):
        _promote_type(vi.type)
    for t in graph.initializer:
        _promote_tensor(t)
    for st in graph.sparse_initializer:
        _promote_tensor(st.values)
    for node in graph.node:
        _promote_node(node)


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose floating-point tensors, types and casts are all float64.

    Promotes every float32, float16 and bfloat16 (:data:`FLOAT_TYPES`) element type in the graph's
    inputs, outputs and ``value_info``; initializers (dense and sparse); ``Constant`` values (including
    ``value_float``/``value_floats``); tensor attributes such as ``ConstantOfShape.value`` (and its
    implicit float32 zero); element-type attributes ``to``/``dtype``/``output_dtype`` (``Cast``,
    ``RandomNormal``, ``EyeLike``, ...); subgraphs (``If``, ``Loop``, ``Scan``) and model-local functions.
    The promotion of stored values is exact. Float8 types are quantization formats and stay as they are.

    Args:
        model: the model (not modified).

    Returns:
        The float64 model.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = to_float64(tiny_cnn())
        >>> m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
        True
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _promote_graph(out.graph)
    for fn in out.functions:
        for node in fn.node:
            _promote_node(node)
        for vi in getattr(fn, "value_info", ()):
            _promote_type(vi.type)
    return out


# ---------------------------------------------------------------------------------------------- helpers
def _has_float16(model: onnx.ModelProto) -> bool:
    g = model.graph
    if any(t.data_type == TensorProto.FLOAT16 for t in g.initializer):
        return True
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            return True
    for node in g.node:
        for a in node.attribute:
            if a.type == AttributeProto.INT and a.name in _DTYPE_ATTRIBUTES and a.i == TensorProto.FLOAT16:
                return True
            if a.type == AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                return True
    return False


def _compute_dtype(source: ModelSource) -> str:
    """The floating dtype the graph mostly computes in (its float inputs/initializers), for ``info``."""
    counts: dict[str, int] = {}
    g = source.proto.graph
    types = [t.data_type for t in g.initializer] + [v.type.tensor_type.elem_type for v in g.input]
    for t in types:
        if t in FLOAT_TYPES or t == TensorProto.DOUBLE:
            name = np.dtype(helper.tensor_dtype_to_np_dtype(t)).name
            counts[name] = counts.get(name, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else "float32"


def _node_outputs(graph: onnx.GraphProto) -> list[str]:
    """Every tensor a top-level node writes, in graph (topological) order, then graph outputs not yet listed."""
    names: list[str] = []
    seen: set[str] = set()
    for node in graph.node:
        for name in node.output:
            if name and name not in seen:
                seen.add(name)
                names.append(name)
    for out in graph.output:
        if out.name not in seen:
            seen.add(out.name)
            names.append(out.name)
    return names


def _unsupported_ops(model: onnx.ModelProto, new_ops: Sequence[type]) -> list[str]:
    from onnx.reference.ops import load_op

    custom = {(getattr(c, "op_domain", ""), c.__name__) for c in new_ops}
    local = {(f.domain, f.name) for f in model.functions}
    opsets = {o.domain or "": o.version for o in model.opset_import}
    bad: set[str] = set()

    def walk(nodes: Iterable[onnx.NodeProto]) -> None:
        for node in nodes:
            key = (node.domain, node.op_type)
            if key not in custom and key not in local:
                try:
                    load_op(node.domain, node.op_type, opsets.get(node.domain), node=node)
                except Exception:
                    bad.add(node.op_type if node.domain in _ONNX_DOMAINS else f"{node.domain}::{node.op_type}")
            for a in node.attribute:
                if a.type == AttributeProto.GRAPH:
                    walk(a.g.node)
                elif a.type == AttributeProto.GRAPHS:
                    for g in a.graphs:
                        walk(g.node)

    walk(model.graph.node)
    return sorted(bad)


def _to_float64(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float64)


def _each(value: Any, fn: Callable[[np.ndarray], Any]) -> Any:
    """``fn`` applied to a tensor, to each tensor of a sequence (a list), or nothing for an absent optional."""
    if isinstance(value, list):
        return [fn(v) for v in value]
    return value if value is None else fn(value)


# ---------------------------------------------------------------------------------------------- the engine
@document_options
@dataclass(frozen=True)
class ReferenceOptions(EngineOptions):
    """Everything :class:`ReferenceEngine` takes: the shared engine options and its own, validated as built.

    ``precision``: ``"fp32"``, ``"fp64"`` or ``"fp16"`` (``"int8"`` only together with ``quantizer=``; ``"bf16"``
    is not offered: NumPy has no bfloat16 arithmetic). ``device`` is accepted for a uniform signature and ignored
    (a note says so): the engine runs on the CPU.

    Example:
        >>> ReferenceOptions(precision="fp64", keep_fp64=True).keep_fp64
        True
        >>> ReferenceOptions(keep_fp64=True)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: keep_fp64=True: needs precision='fp64', got precision='fp32'
    """

    fast: bool = field(
        default=True,
        metadata=option_doc(
            "whether to use amdinfer.reference.fast_ops", "(``False``: only the evaluator's own kernels)."
        ),
    )
    keep_fp64: bool = field(
        default=False,
        metadata=option_doc(
            "with precision fp64, return float outputs as float64",
            "(and report them so in ``engine.outputs``) instead of casting them back.",
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.precision not in _PRECISIONS and not (self.precision == "int8" and self.quantizer is not None):
            raise OptionError(
                f"precision: got {self.precision!r}, expected one of {list(_PRECISIONS)} for backend 'reference' "
                "('int8' needs quantizer=, 'bf16' is not offered: NumPy has no bfloat16 arithmetic)"
            )
        for name in ("fast", "keep_fp64"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise OptionError(f"{name}: got {getattr(self, name)!r}, expected True or False")
            self._set(name, bool(getattr(self, name)))
        if self.keep_fp64 and self.precision != "fp64":
            raise OptionError(f"keep_fp64=True: needs precision='fp64', got precision={self.precision!r}")


class ReferenceEngine(Engine):
    """Runs a model on ``onnx.reference.ReferenceEvaluator`` with amdinfer's fast NumPy kernels.

    Precision modes:

    * ``"fp32"`` (default): the model as it is, with its own dtypes; agrees with ONNX Runtime on CPU to
      float32 rounding.
    * ``"fp64"``: the oracle. A copy of the model is rewritten by :func:`to_float64` (inputs, weights,
      constants, casts and arithmetic in float64); float feeds are cast up exactly; outputs are cast back
      to the model's declared dtypes unless ``keep_fp64=True``.
    * ``"fp16"``: runs float16 models as they are (the model must hold float16 tensors; to run a float32
      model in float16, convert it first, e.g. with a quantizer).

    Thread safety: ``run`` may be called from several threads, but calls on one engine run one at a time
    (a per-engine lock), because some of ``onnx.reference``'s kernels keep per-call state on the kernel
    object (e.g. ``Scan``, ``TfIdfVectorizer``). For parallel work use one engine per thread or process
    (engines pickle).

    Args:
        model: path, bytes, ``onnx.ModelProto`` or ``ModelSource``.
        options: a :class:`ReferenceOptions` record (``None``: built from ``keywords``).
        **keywords: :class:`ReferenceOptions` fields (every option is documented there), when no record is given.

    Raises:
        OptionError: an unknown precision, ``keep_fp64`` without ``"fp64"``, or ``"fp16"`` on a model
            without float16 tensors.
        UnsupportedOperatorError: ``onnx.reference`` has no kernel for an operator of the model.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = ReferenceEngine(tiny_cnn())
        >>> outs = engine.run(np.zeros((1, 3, 32, 32), np.float32), outputs="all")
        >>> list(outs)[:3]
        ['conv1', 'relu1', 'pool1']
    """

    backend_name = "reference"
    options_type = ReferenceOptions
    _options: ReferenceOptions
    supports_all_outputs = True
    supports_containers = True
    accepts_zero_size = True  # onnx.reference's kernels define empty tensors; the oracle must take what ONNX does

    def _load(self, source: ModelSource) -> tuple[list[TensorSpec], list[TensorSpec], EngineInfo]:
        from onnx.reference import ReferenceEvaluator

        fast, keep_fp64, device = self._options.fast, self._options.keep_fp64, self._device
        _check_opsets(source)
        if self._precision == "fp16" and not _has_float16(source.proto):
            raise OptionError(
                f"precision='fp16': model {source.name} has no float16 tensors, and the reference engine runs "
                "float16 models as they are; convert the model to float16 first (e.g. quantizer=) or use "
                "precision='fp32' or 'fp64'"
            )
        self._fp64 = self._precision == "fp64"
        self._keep_fp64 = bool(keep_fp64)
        new_ops: list[type] = []
        if fast:
            from ..reference import fast_ops

            new_ops = list(fast_ops())
        proto = to_float64(source.proto) if self._fp64 else source.proto
        info = EngineInfo(backend="reference", device="cpu", runtime_version=onnx.__version__)
        info.settings = {
            "fast_kernels": sorted(c.__name__ for c in new_ops),
            "dtype": "float64" if self._fp64 else _compute_dtype(source),
            "keep_fp64": self._keep_fp64,
        }
        if device:
            info.notes.append(f"device={device} ignored: the reference engine runs on the CPU")
        try:
            self._evaluator: Any = ReferenceEvaluator(proto, new_ops=new_ops or None)
        except (NotImplementedError, RuntimeError, TypeError, ValueError) as exc:
            bad = _unsupported_ops(proto, new_ops)
            if bad:
                raise UnsupportedOperatorError(
                    f"model {source.name}: onnx {onnx.__version__}'s reference evaluator has no kernel for {bad} "
                    f"({exc}); run it on backend='ort' instead",
                    operators=bad,
                ) from None
            raise ModelError(
                f"model {source.name}: onnx.reference cannot load it: {type(exc).__name__}: {exc}"
            ) from None
        self._graph = proto.graph
        self._run_lock = threading.Lock()
        self._plan: Any = None
        if new_ops:
            from ..reference._plan import ExecutionPlan

            # In place, kept buffers, BatchNorm folded into Conv (not in float64: the oracle follows the graph).
            self._plan = ExecutionPlan(
                self._evaluator.rt_nodes_, self._evaluator.rt_inits_, fold_batchnorm=not self._fp64
            )
            info.settings["batchnorm_folded"] = self._plan.folded
        self._all_names = _node_outputs(proto.graph)
        self._known = (
            set(self._all_names) | {i.name for i in proto.graph.input} | {t.name for t in proto.graph.initializer}
        )
        self._float_inputs = {s.name for s in source.inputs if s.dtype.kind == "f"} if self._fp64 else set()
        self._declared = {s.name: s.dtype for s in source.outputs}
        self._intermediate_dtypes: dict[str, np.dtype] | None = None
        outputs = source.outputs
        if self._keep_fp64:
            outputs = [replace(s, dtype=np.dtype(np.float64)) if s.dtype.kind == "f" else s for s in outputs]
        return list(source.inputs), list(outputs), info

    # ------------------------------------------------------------------ running
    @property
    def evaluator(self) -> Any:
        """The underlying ``onnx.reference.ReferenceEvaluator`` (running the float64 copy in fp64 mode).

        Its fast kernels are put back to their safe defaults here (no in-place work, no buffers kept across
        runs, no BatchNorm folding), so direct ``evaluator.run`` calls return independent arrays; the next
        :meth:`run` of the engine plans them again.
        """
        if self._plan is not None:
            with self._run_lock:
                self._plan.reset()
        return self._evaluator

    def _run(self, feeds: dict[str, Any], outputs: list[str] | None) -> dict[str, np.ndarray]:
        if self._fp64:
            feeds = {k: (_each(v, _to_float64) if k in self._float_inputs else v) for k, v in feeds.items()}
        if outputs == ["*"]:
            names = self._all_names
        else:
            names = outputs if outputs is not None else self._output_names
            unknown = [n for n in names if n not in self._known]
            if unknown:
                raise InputError(f"outputs: got {unknown}, expected names of tensors in the graph")
        try:
            with self._run_lock:
                if self._plan is not None:
                    self._plan.apply(names)
                values = self._evaluator.run(names, feeds)
        except AmdinferError:
            raise
        except Exception as exc:
            raise AmdinferError(
                f"onnx.reference failed while running model {self._source.name}: {type(exc).__name__}: {exc}"
            ) from exc
        result = dict(zip(names, values))
        if self._fp64 and not self._keep_fp64:
            result = {n: _each(v, partial(self._cast_back, n)) for n, v in result.items()}
        return result

    def _cast_back(self, name: str, value: Any) -> Any:
        if not isinstance(value, np.ndarray) or value.dtype != np.float64:
            return value
        dtype = self._declared.get(name)
        if dtype is None:
            dtype = self._original_dtypes().get(name)
        if dtype is None or dtype.kind != "f" or dtype == np.float64:
            return value
        return value.astype(dtype)

    def _original_dtypes(self) -> dict[str, np.dtype]:
        """Element types of every tensor in the original model (shape inference), to cast intermediates back."""
        if self._intermediate_dtypes is None:
            proto = self._source.proto
            try:
                inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
            except Exception:  # inference is best effort; unknown types stay float64
                inferred = proto
            g = inferred.graph
            found: dict[str, np.dtype] = {}
            for vi in (*g.input, *g.output, *g.value_info):
                et = vi.type.tensor_type.elem_type
                if et:
                    try:
                        found[vi.name] = np.dtype(helper.tensor_dtype_to_np_dtype(et))
                    except (KeyError, TypeError, ValueError):
                        continue
            self._intermediate_dtypes = found
        return self._intermediate_dtypes

    def _close(self) -> None:
        self._evaluator = None
