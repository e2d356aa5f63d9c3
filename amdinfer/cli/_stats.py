"""Static facts about a model for ``amdinfer inspect``: sizes, op histogram, FLOPs/bytes estimate, op coverage.

Example:
    >>> from amdinfer.testing.models import tiny_cnn
    >>> from amdinfer.model import ModelSource
    >>> s = model_stats(ModelSource.from_any(tiny_cnn()), {"input": (1, 3, 32, 32)})
    >>> s["nodes"] > 0 and s["estimate"]["macs"] > 0
    True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from importlib import resources
from typing import Any

import numpy as np
import onnx

__all__ = ["estimate_macs", "migraphx_coverage", "model_stats", "ort_placement", "shipped_migraphx_operators"]

# Ops whose cost is about one operation per output element (the rest of the estimate's FLOPs).
_ELEMENTWISE = {
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Pow", "Erf",
    "HardSigmoid", "HardSwish", "Clip", "BatchNormalization", "Softmax", "LayerNormalization", "Gelu",
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "Neg", "Abs",
}  # fmt: skip


def _walk(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    out = []
    for n in graph.node:
        out.append(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out += _walk(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    out += _walk(g)
    return out


def _params(proto: onnx.ModelProto) -> tuple[int, int]:
    """(parameter count, parameter bytes) of initializers and Constant nodes."""
    count = nbytes = 0
    tensors = list(proto.graph.initializer)
    tensors += [a.t for n in _walk(proto.graph) if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    for t in tensors:
        n = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        count += n
        nbytes += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return count, nbytes


def _dims(vi: onnx.ValueInfoProto) -> list[int | str | None]:
    out: list[int | str | None] = []
    for d in vi.type.tensor_type.shape.dim:
        out.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
    return out


def _concrete(proto: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto:
    """A copy with the inputs' shapes set and shapes inferred through the graph."""
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    for vi in m.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[vi.name]):
                d.Clear()
                d.dim_value = int(v)
    try:
        return onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:  # shape inference is best effort: an estimate with fewer nodes beats no estimate
        return m


def estimate_macs(proto: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Multiply-accumulates of Conv/ConvTranspose/MatMul/Gemm, element ops of the rest, activation bytes.

    Shapes come from ONNX shape inference with the inputs set to ``shapes``; nodes whose shapes stay
    unknown are counted in ``unknown_nodes``.

    Example:
        >>> from onnx import helper, TensorProto
        >>> import numpy as np
        >>> w = onnx.numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
        >>> g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
        >>> estimate_macs(helper.make_model(g), {"x": (1, 3, 8, 8)})["macs"]  # 4*8*8 outputs x 3*3*3
        6912
    """
    m = _concrete(proto, shapes)
    known: dict[str, list[Any]] = {}
    itemsize: dict[str, int] = {}
    for vi in [*m.graph.input, *m.graph.value_info, *m.graph.output]:
        known[vi.name] = _dims(vi)
        et = vi.type.tensor_type.elem_type
        if et:
            itemsize[vi.name] = onnx.helper.tensor_dtype_to_np_dtype(et).itemsize
    for t in m.graph.initializer:
        known[t.name] = list(t.dims)

    def shape(name: str) -> list[int] | None:
        s = known.get(name)
        if s is None or not all(isinstance(d, int) and d > 0 for d in s):
            return None
        return s  # type: ignore[return-value]

    macs = other = act_bytes = unknown = 0
    for n in m.graph.node:
        outs = [shape(o) for o in n.output if o]
        y = outs[0] if outs else None
        if y is None:
            unknown += 1
            continue
        for o, s in zip(n.output, outs):
            if s is not None:
                act_bytes += int(np.prod(s, dtype=np.int64)) * itemsize.get(o, 4)
        ny = int(np.prod(y, dtype=np.int64))
        if n.op_type in ("Conv", "ConvTranspose"):
            w, x = shape(n.input[1]), shape(n.input[0])
            if w is None or x is None:
                unknown += 1
            elif n.op_type == "Conv":
                macs += ny * int(np.prod(w[1:], dtype=np.int64))
            else:
                macs += int(np.prod(x, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
        elif n.op_type == "MatMul":
            a = shape(n.input[0])
            if a is None:
                unknown += 1
            else:
                macs += ny * a[-1]
        elif n.op_type == "Gemm":
            a = shape(n.input[0])
            trans_a = next((at.i for at in n.attribute if at.name == "transA"), 0)
            if a is None:
                unknown += 1
            else:
                macs += ny * (a[0] if trans_a else a[-1])
        elif n.op_type in _ELEMENTWISE:
            other += ny
    return {"macs": macs, "flops": 2 * macs + other, "activation_bytes": act_bytes, "unknown_nodes": unknown}


def model_stats(source: Any, shapes: Mapping[str, tuple[int, ...]] | None) -> dict[str, Any]:
    """Everything ``inspect`` prints except coverage."""
    proto = source.proto
    nodes = _walk(proto.graph)
    params, param_bytes = _params(proto)
    size = source.path.stat().st_size if getattr(source, "path", None) else len(source.to_bytes())
    hist = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in nodes)
    dynamic = {}
    for kind, specs in (("input", source.inputs), ("output", source.outputs)):
        for s in specs:
            axes = {i: d for i, d in enumerate(s.shape) if not isinstance(d, int)}
            if axes:
                dynamic[s.name] = {
                    "kind": kind,
                    "axes": {str(i): (d if d is not None else "?") for i, d in axes.items()},
                }
    out: dict[str, Any] = {
        "name": source.name,
        "file_bytes": size,
        "ir_version": source.ir_version,
        "opsets": source.opsets,
        "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
        "sha256": source.sha256,
        "nodes": len(nodes),
        "top_level_nodes": len(proto.graph.node),
        "parameters": params,
        "parameter_bytes": param_bytes,
        "inputs": [{"name": s.name, "dtype": str(s.dtype), "shape": list(s.shape)} for s in source.inputs],
        "outputs": [{"name": s.name, "dtype": str(s.dtype), "shape": list(s.shape)} for s in source.outputs],
        "dynamic": dynamic,
        "op_histogram": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
    }
    if shapes is not None:
        est = estimate_macs(proto, shapes)
        out["estimate"] = {"input_shapes": {k: list(v) for k, v in shapes.items()}, **est}
        out["estimate"]["bytes"] = param_bytes + est["activation_bytes"]
    return out


def shipped_migraphx_operators() -> tuple[list[str], str]:
    """MIGraphX's ONNX operator list shipped with amdinfer, and where it was recorded."""
    text = resources.files("amdinfer").joinpath("data/migraphx_onnx_operators.txt").read_text()
    ops, header = [], []
    for line in text.splitlines():
        if line.startswith("#"):
            header.append(line.lstrip("# "))
        elif line.strip():
            ops.append(line.strip())
    where = next((h for h in header if "Recorded from" in h), "")
    commit = where.split(" at ", 1)[1].split(" ")[0][:12] if " at " in where else "?"
    return ops, f"AMDMIGraphX source at {commit} (list shipped with amdinfer)"


def migraphx_coverage(source: Any) -> dict[str, Any]:
    """Operators MIGraphX has no ONNX parser for; from ``migraphx`` when it imports, else the shipped list."""
    from ..engines._migraphx_support import unsupported_operators

    try:
        from ..engines._migraphx_support import import_migraphx

        mgx = import_migraphx()
        ops, version = list(mgx.get_onnx_operators()), f"migraphx {getattr(mgx, '__version__', '?')} (installed)"
    except Exception:
        ops, version = shipped_migraphx_operators()
    bad = unsupported_operators(source.operators(), ops)
    return {"operators_from": version, "unsupported": bad, "supported": not bad}


def ort_placement(source: Any) -> dict[str, Any]:
    """Per GPU provider in this onnxruntime build: does every node go to it with CPU fallback disabled?"""
    try:
        from ..engines import ort as ort_engine

        ort = ort_engine.import_ort()
    except ImportError as exc:
        return {"onnxruntime": None, "providers": {}, "note": str(exc).splitlines()[0]}
    available = ort.get_available_providers()
    result: dict[str, Any] = {"onnxruntime": ort.__version__, "providers": {}}
    gpu = [p for p in ort_engine.PROVIDER_ORDER if p in available and p != "CPUExecutionProvider"]
    for prov in gpu:
        cause = ort_engine.probe_provider(prov)
        if cause is not None:
            result["providers"][prov] = f"cannot load here: {str(cause).splitlines()[0]}"
            continue
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        try:
            ort.InferenceSession(source.to_bytes(), so, providers=[prov, "CPUExecutionProvider"])
        except Exception as exc:
            result["providers"][prov] = f"some nodes would fall back to the CPU: {str(exc).splitlines()[0][:300]}"
        else:
            result["providers"][prov] = "every node placed on it (CPU fallback disabled)"
    if not gpu:
        result["note"] = f"no GPU provider in this onnxruntime build ({', '.join(available)}): nothing to place"
    return result
