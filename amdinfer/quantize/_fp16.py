"""``Fp16Quantizer``: ONNX Runtime's float16 converter with block lists, mapped to MIGraphX's knobs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx

from .._support._install import pip_extra
from ..errors import BackendUnavailableError, ModelError, OptionError
from ._base import QuantizationSpec, QuantizerBase
from ._prepare import prepare_model, tail_nodes

__all__ = ["NUMERICALLY_SENSITIVE_OPS", "Fp16Quantizer", "default_fp16_op_block_list", "precision_quantizer"]

#: Ops whose fp16 result overflows (fp16 max is 65504) or loses most of its bits on ordinary inputs:
#: exponentials and powers overflow, sums of many terms or of squares overflow and round badly,
#: normalizations divide by a variance computed from such sums, logarithms near 1 lose their digits.
#: MIGraphX's fp16 guidance is the same: keep reductions, softmax and normalization statistics in fp32.
NUMERICALLY_SENSITIVE_OPS: tuple[str, ...] = (
    "Exp",
    "Log",
    "Pow",
    "Softmax",
    "LogSoftmax",
    "ReduceMean",
    "ReduceSum",
    "ReduceSumSquare",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceProd",
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
)


def default_fp16_op_block_list() -> tuple[str, ...]:
    """ONNX Runtime's ``float16.DEFAULT_OP_BLOCK_LIST`` (ops without fp16 kernels) plus
    :data:`NUMERICALLY_SENSITIVE_OPS`: the default ``op_block_list`` (``DEFAULT_FP16_OP_BLOCK_LIST``).

    Example:
        >>> {"Softmax", "TopK"} <= set(default_fp16_op_block_list())
        True
    """
    return tuple(dict.fromkeys(tuple(_float16_module().DEFAULT_OP_BLOCK_LIST) + NUMERICALLY_SENSITIVE_OPS))


def _float16_module() -> Any:
    """``onnxruntime.transformers.float16``, imported on first use."""
    try:
        from onnxruntime.transformers import float16
    except ImportError as exc:  # pragma: no cover - part of every onnxruntime wheel
        raise BackendUnavailableError(
            f"Fp16Quantizer needs onnxruntime (onnxruntime.transformers.float16); {pip_extra('cpu')}",
            backend="ort",
            cause=str(exc),
        ) from exc
    return float16


def __getattr__(name: str) -> Any:
    # Resolved on first use so that importing amdinfer.quantize does not import onnxruntime.
    if name == "DEFAULT_FP16_OP_BLOCK_LIST":
        return default_fp16_op_block_list()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _str_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise OptionError(f"{name}: got {value!r}, expected a list of strings")
    bad = [v for v in value if not isinstance(v, str)]
    if bad:
        raise OptionError(f"{name}: got non-string entries {bad!r}, expected a list of strings")
    return list(dict.fromkeys(value))


def _check_nodes(name: str, wanted: Sequence[str], proto: onnx.ModelProto) -> None:
    names = {n.name for n in proto.graph.node}
    unknown = [w for w in wanted if w not in names]
    if unknown:
        sample = sorted(names)[:8]
        raise OptionError(
            f"{name}: nodes {unknown} are not in the model (after folding constants and batch norms into "
            f"convolutions); expected node names such as {sample}"
        )


def _topological_sort(graph: onnx.GraphProto) -> None:
    """Sort ``graph.node`` topologically, in place (ONNX Runtime's helper; a stable Kahn sort where the
    installed onnxruntime cannot import it without sympy)."""
    try:
        from onnxruntime.transformers.onnx_model import OnnxModel
    except ImportError:  # onnxruntime <= 1.22 imports sympy there
        OnnxModel = None
    if OnnxModel is not None:
        OnnxModel.graph_topological_sort(graph, is_deterministic=True)
        return
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending = list(graph.node)
    ordered: list[onnx.NodeProto] = []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            raise ValueError(f"graph {graph.name!r}: has a cycle or a dangling input; cannot sort it")
        for n in ready:
            ordered.append(n)
            available.update(n.output)
        pending = [n for n in pending if all(n is not r for r in ready)]
    copies = [onnx.NodeProto() for _ in ordered]
    for c, n in zip(copies, ordered):
        c.CopyFrom(n)
    del graph.node[:]
    graph.node.extend(copies)


def _drop_cast_round_trips(model: onnx.ModelProto) -> int:
    """Let ``Cast(fp32 -> fp16) -> Cast(fp16 -> fp32)`` pairs read the fp32 tensor directly; returns how many.

    With ``keep_io_types`` the converter casts each fp32 input to fp16 first and casts it back for blocked
    nodes, so a blocked first layer would still see its input rounded to fp16.
    """
    g = model.graph
    fp32 = {vi.name for vi in [*g.input, *g.value_info] if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    fp32 |= {t.name for t in g.initializer if t.data_type == onnx.TensorProto.FLOAT}

    def cast_to(node: onnx.NodeProto) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None

    down = {n.output[0]: n for n in g.node if cast_to(n) == onnx.TensorProto.FLOAT16 and n.input[0] in fp32}
    rewired = 0
    for node in g.node:
        if cast_to(node) == onnx.TensorProto.FLOAT and node.input[0] in down:
            node.input[0] = down[node.input[0]].input[0]  # now an fp32 -> fp32 Cast: an identity ORT removes
            rewired += 1
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for name, node in down.items():
        if name not in used:
            g.node.remove(node)
    return rewired


class Fp16Quantizer(QuantizerBase):
    """Convert a model to fp16 with ONNX Runtime's ``convert_float_to_float16``.

    Args:
        keep_io_types: keep float32 inputs and outputs (casts are inserted inside the graph).
        op_block_list: op types left in float32; default :func:`default_fp16_op_block_list`.
        node_block_list: node names left in float32.
        keep_last_n: keep the last ``n`` weighted layers (Conv, ConvTranspose, Gemm, MatMul) and every
            node after the first of them (the model's head) in float32.
        min_positive_val: smaller magnitudes in weights are clamped to this (fp16 subnormal limit).
        max_finite_val: larger magnitudes in weights are clamped to this (fp16 max).
        prepare: run :func:`~amdinfer.quantize.prepare_model` first (folds ``Constant`` weights and batch
            norms, upgrades old opsets); turn off for a model you prepared yourself.

    Engines with a native fp16 knob read :meth:`describe`: MIGraphX native maps it to
    ``migraphx.quantize_fp16(prog, ins_names=["all"])``, the ONNX Runtime MIGraphX EP to
    ``migraphx_fp16_enable``. Neither can keep single ops or nodes in fp32, so block lists and
    ``keep_last_n`` are reported as not honoured there.

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> q = Fp16Quantizer(keep_last_n=1)
        >>> m16 = q.quantize(tiny_cnn())
        >>> sum(t.data_type == onnx.TensorProto.FLOAT16 for t in m16.graph.initializer)
        4
        >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"], quantizer=q)
        >>> engine.info.precision
        'fp16'
    """

    precision = "fp16"

    def __init__(
        self,
        *,
        keep_io_types: bool = True,
        op_block_list: Sequence[str] | None = None,
        node_block_list: Sequence[str] = (),
        keep_last_n: int = 0,
        min_positive_val: float = 5.96e-08,
        max_finite_val: float = 65504.0,
        prepare: bool = True,
    ) -> None:
        if not isinstance(keep_io_types, bool):
            raise OptionError(f"keep_io_types: got {keep_io_types!r}, expected True or False")
        self.keep_io_types = keep_io_types
        self.op_block_list = (
            list(default_fp16_op_block_list()) if op_block_list is None else _str_list("op_block_list", op_block_list)
        )
        self.node_block_list = _str_list("node_block_list", node_block_list)
        if not isinstance(keep_last_n, int) or isinstance(keep_last_n, bool) or keep_last_n < 0:
            raise OptionError(f"keep_last_n: got {keep_last_n!r}, expected an int >= 0")
        self.keep_last_n = keep_last_n
        for name, value in (("min_positive_val", min_positive_val), ("max_finite_val", max_finite_val)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise OptionError(f"{name}: got {value!r}, expected a positive finite float")
        if max_finite_val > 65504.0:
            raise OptionError(f"max_finite_val: got {max_finite_val!r}, expected at most 65504 (fp16 max)")
        self.min_positive_val = float(min_positive_val)
        self.max_finite_val = float(max_finite_val)
        if not isinstance(prepare, bool):
            raise OptionError(f"prepare: got {prepare!r}, expected True or False")
        self.prepare = prepare
        self._only: list[str] | None = None

    # ------------------------------------------------------------------ protocol
    def settings(self) -> dict[str, Any]:
        """The settings that change the converted model.

        Example:
            >>> Fp16Quantizer(keep_last_n=2).settings()["keep_last_n"]
            2
        """
        out: dict[str, Any] = {
            "kind": "fp16",
            "keep_io_types": self.keep_io_types,
            "op_block_list": sorted(self.op_block_list),
            "node_block_list": list(self.node_block_list),
            "keep_last_n": self.keep_last_n,
            "min_positive_val": self.min_positive_val,
            "max_finite_val": self.max_finite_val,
            "prepare": self.prepare,
        }
        if self._only is not None:
            out["only_nodes"] = list(self._only)
        return out

    def quantize(self, model: Any) -> onnx.ModelProto:
        """Return the fp16 model.

        Args:
            model: path, bytes, ``onnx.ModelProto`` or :class:`~amdinfer.ModelSource`.

        Raises:
            ModelError: the model cannot be prepared (see :func:`~amdinfer.quantize.prepare_model`), or the
                float16 conversion failed (the message names the step; the cause is chained).
            OptionError: ``node_block_list`` names a node the model does not have.

        Example:
            >>> from amdinfer.testing.models import tiny_cnn
            >>> [i.type.tensor_type.elem_type for i in Fp16Quantizer().quantize(tiny_cnn()).graph.input]
            [1]
        """
        proto = prepare_model(model, optimize=self.prepare)
        return self._quantize_prepared(proto)

    def _quantize_prepared(self, prepared: onnx.ModelProto) -> onnx.ModelProto:
        convert_float_to_float16 = _float16_module().convert_float_to_float16
        _check_nodes("node_block_list", self.node_block_list, prepared)
        blocked = list(self.node_block_list) + tail_nodes(prepared, self.keep_last_n)
        if self._only is not None:
            _check_nodes("only", self._only, prepared)
            blocked += [n.name for n in prepared.graph.node if n.name not in self._only]
        proto = onnx.ModelProto()
        proto.CopyFrom(prepared)
        step = "converting to float16 (onnxruntime.transformers.float16)"
        try:
            converted = convert_float_to_float16(
                proto,
                min_positive_val=self.min_positive_val,
                max_finite_val=self.max_finite_val,
                keep_io_types=self.keep_io_types,
                op_block_list=list(self.op_block_list),
                node_block_list=list(dict.fromkeys(blocked)),
            )
            step = "removing Cast round trips"
            _drop_cast_round_trips(converted)
            # The converter appends the input casts last; ONNX requires topological order (ORT tolerates it).
            step = "sorting the converted graph"
            _topological_sort(converted.graph)
        except Exception as exc:  # ONNX Runtime's converter and ONNX's helpers raise plain ValueErrors etc.
            text = str(exc).strip()
            raise ModelError(
                f"model {prepared.graph.name!r}: fp16 quantization failed while {step} ({type(exc).__name__}: "
                f"{text.splitlines()[0] if text else 'no message'})"
            ) from exc
        return converted

    def describe(self) -> QuantizationSpec:
        """What this quantizer asks for, for engines with native fp16 knobs.

        Example:
            >>> Fp16Quantizer(op_block_list=[], node_block_list=["fc"]).describe().node_block_list
            ('fc',)
        """
        return QuantizationSpec(
            precision="fp16",
            keep_io_types=self.keep_io_types,
            op_block_list=tuple(self.op_block_list),
            node_block_list=tuple(self.node_block_list),
            keep_last_n=self.keep_last_n,
            mixed=self._only is not None,
        )

    def _with_float_nodes(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> Fp16Quantizer:
        clone = Fp16Quantizer(
            keep_io_types=self.keep_io_types,
            op_block_list=list(self.op_block_list),
            node_block_list=list(dict.fromkeys(list(self.node_block_list) + list(keep))),
            keep_last_n=self.keep_last_n,
            min_positive_val=self.min_positive_val,
            max_finite_val=self.max_finite_val,
            prepare=self.prepare,
        )
        clone._only = None if only is None else list(only)
        return clone


def precision_quantizer(precision: str, *, keep_io_types: bool = True) -> Fp16Quantizer | None:
    """The quantizer a bare ``precision=`` stands for where the runtime rewrites the model (``None``: none).

    ``precision="fp16"`` is ``Fp16Quantizer(keep_io_types=...)`` (the default block list keeps numerically
    sensitive ops in float32), so ``precision="fp16"`` and ``quantizer=Fp16Quantizer()`` give the same graph;
    float32 and float64 need no rewrite. :func:`amdinfer.load` hands this function to the backends
    (:class:`~amdinfer._support._quant_protocol.PrecisionQuantizer`), and :meth:`amdinfer.Pipeline.fuse` asks it too.

    Example:
        >>> precision_quantizer("fp16").settings()["keep_io_types"], precision_quantizer("fp32")
        (True, None)
    """
    if precision != "fp16":
        return None
    return Fp16Quantizer(keep_io_types=keep_io_types)
