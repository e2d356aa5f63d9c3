"""Bring models as exporters really write them into a shape the quantizers can work on.

Paddle2ONNX keeps every weight in a ``Constant`` node, old exporters write opset 11 and unnamed nodes,
and most exporters leave dynamic dimensions. ONNX Runtime's quantizer only treats *initializers* as
weights and needs opset 13 for per-channel ``DequantizeLinear(axis=...)``. :func:`prepare_model` runs
ONNX Runtime's own quantization pre-processing (``quant_pre_process``: its basic graph optimizations fold
``Constant`` nodes into initializers and batch norms into convolutions, then ONNX shape inference),
upgrades old opsets with ``onnx.version_converter``, and names unnamed nodes, or raises
:class:`~amdinfer.ModelError` saying what to do.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from .._support._install import pip_extra
from ..errors import BackendUnavailableError, ModelError, OptionError
from ..model import ModelSource, ai_onnx_opset

__all__ = ["WEIGHTED_OPS", "fix_negative_dims", "prepare_model", "tail_nodes", "weighted_layers"]

log = logging.getLogger("amdinfer.quantize")

#: Op types that carry the weights of a "layer" (what ``keep_last_n`` and mixed precision count).
WEIGHTED_OPS: tuple[str, ...] = ("Conv", "ConvTranspose", "Gemm", "MatMul")

#: The lowest ``ai.onnx`` opset the int8 path accepts as is (per-channel ``DequantizeLinear`` has ``axis``).
MIN_QDQ_OPSET = 13

_IR_RE = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")


def _name_nodes(proto: onnx.ModelProto) -> int:
    """Give every unnamed node a unique, stable name (``<OpType>_<index>``); returns how many were named."""
    taken = {n.name for n in proto.graph.node if n.name}
    named = 0
    for i, node in enumerate(proto.graph.node):
        if node.name:
            continue
        name = f"{node.op_type}_{i}"
        while name in taken:
            name += "_"
        node.name = name
        taken.add(name)
        named += 1
    return named


def fix_negative_dims(proto: onnx.ModelProto) -> int:
    """Turn ``dim_value <= 0`` and ``dim_param "?"`` on graph inputs and outputs into distinct named dims, in place.

    Paddle2ONNX and some old exporters write ``-1`` (or ``0``) for "any size", or ``"?"`` on several axes
    (which ONNX would read as "these axes are equal"); ONNX spells "any size" as a distinct ``dim_param``.
    Returns how many dims were renamed (``<tensor>_dim<axis>``, or ``N`` for axis 0).

    Example:
        >>> from onnx import helper, TensorProto
        >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3])
        >>> g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x],
        ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3])])
        >>> m = helper.make_model(g)
        >>> fix_negative_dims(m), m.graph.input[0].type.tensor_type.shape.dim[0].dim_param
        (2, 'N')
    """
    fixed = 0
    for vi in list(proto.graph.input) + list(proto.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        for axis, dim in enumerate(tt.shape.dim):
            unknown = dim.HasField("dim_param") and dim.dim_param in ("?", "-1")
            if (dim.HasField("dim_value") and dim.dim_value <= 0) or unknown:
                dim.Clear()
                dim.dim_param = "N" if axis == 0 else f"{vi.name}_dim{axis}"
                fixed += 1
    return fixed


def _strip_unused_opsets(proto: onnx.ModelProto) -> None:
    """Drop opset imports no node uses (ONNX Runtime's optimizer adds every domain it knows)."""
    used = {n.domain or "" for n in proto.graph.node}
    for f in proto.functions:
        used.add(f.domain or "")
        used.update(n.domain or "" for n in f.node)
    keep = [o for o in proto.opset_import if (o.domain or "") in used or (o.domain or "") in ("", "ai.onnx")]
    if len(keep) != len(proto.opset_import):
        kept = [onnx.OperatorSetIdProto(domain=o.domain, version=o.version) for o in keep]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)


#: What ONNX Runtime's symbolic shape inference writes to the working directory when it gives up.
_SYMBOLIC_LEFTOVER = "sym_shape_infer_temp.onnx"


def _shape_inference_only(src: str, dst: str, skip_optimization: bool, skip_symbolic_shape: bool) -> None:
    """ONNX shape inference: what ``quant_pre_process`` does after optimizing, without symbolic shapes."""
    onnx.shape_inference.infer_shapes_path(src, dst)


def _pre_process(quant_pre_process: Any, opt: Path, dst: Path, skip_symbolic: bool, name: str) -> None:
    """``quant_pre_process`` without its optimizer; ONNX shape inference where symbolic inference gives up.

    ONNX Runtime's symbolic shape inference (used when sympy is installed) stops with "Incomplete symbolic
    shape inference" on some graphs, e.g. YOLO heads that build their anchor grids from ``Shape`` ops; ONNX's
    own shape inference (what runs without sympy) is enough for quantization, so the result does not depend on
    whether sympy happens to be installed.
    """
    since = time.time()
    try:
        quant_pre_process(str(opt), str(dst), skip_optimization=True, skip_symbolic_shape=skip_symbolic)
    except Exception as exc:
        _remove_symbolic_leftover(since)
        if skip_symbolic or not (
            "symbolic shape inference" in str(exc).lower()
            or (isinstance(exc, OSError) and _raised_in(exc, "symbolic_shape_infer.py"))  # cannot write its leftover
        ):
            raise
        log.info("model %s: symbolic shape inference gave up (%s); using ONNX shape inference", name, exc)
        quant_pre_process(str(opt), str(dst), skip_optimization=True, skip_symbolic_shape=True)


def _raised_in(exc: BaseException, filename: str) -> bool:
    return any(frame.filename.endswith(filename) for frame in traceback.extract_tb(exc.__traceback__))


def _remove_symbolic_leftover(since: float) -> None:
    """Remove what ONNX Runtime's symbolic shape inference left in the working directory when it gave up.

    It saves the graph it could not finish as ``sym_shape_infer_temp.onnx`` with its weights in a file named by
    a UUID, in the process's working directory (the trained MiniLM: 69 MB per call). Only files written since
    ``since`` (the call's start) are removed.
    """
    path = Path(_SYMBOLIC_LEFTOVER)
    try:
        if not path.is_file() or path.stat().st_mtime < since - 2.0:  # coarse file-system clocks
            return
        leftover = onnx.load_model(str(path), load_external_data=False)
        for t in leftover.graph.initializer:
            for entry in t.external_data:
                data = Path(entry.value)
                if entry.key == "location" and data.name == entry.value and data.is_file():
                    if data.stat().st_mtime >= since - 2.0:
                        data.unlink()
        path.unlink()
    except Exception as exc:  # best effort: a leftover that cannot be read or removed is only logged
        log.debug("could not remove ONNX Runtime's %s: %s", _SYMBOLIC_LEFTOVER, exc)


def _ort_preprocess(proto: onnx.ModelProto, name: str) -> onnx.ModelProto:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise BackendUnavailableError(
            f"quantization needs onnxruntime; {pip_extra('cpu')}", backend="ort", cause=str(exc)
        ) from exc
    # Symbolic shape inference needs sympy; ONNX shape inference covers convolutional models without it.
    skip_symbolic = importlib.util.find_spec("sympy") is None
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError:  # onnxruntime <= 1.22 imports sympy unconditionally there
        quant_pre_process = _shape_inference_only

    with tempfile.TemporaryDirectory(prefix="amdinfer-quant-") as tmp:
        src, opt, dst = Path(tmp) / "in.onnx", Path(tmp) / "opt.onnx", Path(tmp) / "out.onnx"
        current = proto
        for attempt in range(2):
            onnx.save_model(current, str(src))
            try:
                # quant_pre_process's own optimizer step only logs a failure and goes on unoptimized
                # (weights left in Constant nodes); run it here so a failure is an error.
                so = ort.SessionOptions()
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                so.optimized_model_filepath = str(opt)
                so.log_severity_level = 3
                ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
                _pre_process(quant_pre_process, opt, dst, skip_symbolic, name)
                break
            except Exception as exc:  # ONNX Runtime raises its own pybind types
                text = str(exc)
                m = _IR_RE.search(text)
                if m and attempt == 0:
                    current = ModelSource.from_any(current, check=False).with_ir_version(int(m.group(2))).proto
                    continue
                raise ModelError(
                    f"model {name}: ONNX Runtime's quantization pre-processing failed ({type(exc).__name__}: "
                    f"{text.strip().splitlines()[0] if text.strip() else 'no message'}); fold constants and fix "
                    "dynamic shapes first (e.g. `onnxsim model.onnx out.onnx`) or re-export with opset >= 13"
                ) from exc
        return onnx.load_model(str(dst))


def prepare_model(model: Any, *, min_opset: int = MIN_QDQ_OPSET, optimize: bool = True) -> onnx.ModelProto:
    """Return a copy of ``model`` that ONNX Runtime's quantizers handle: folded, upgraded, named.

    Steps: ONNX Runtime's ``quant_pre_process`` (basic graph optimizations: ``Constant`` nodes become
    initializers, batch norms fold into convolutions; then shape inference; symbolic shape inference when
    sympy is installed), unused opset imports dropped, ``ai.onnx`` opset raised to ``min_opset`` with
    ``onnx.version_converter`` when lower, unnamed nodes named ``<OpType>_<index>``. Dynamic dimensions
    are kept: calibration and evaluation data fix them.

    Args:
        model: path, bytes, ``onnx.ModelProto`` or :class:`~amdinfer.ModelSource`.
        min_opset: lowest ``ai.onnx`` opset wanted (13: per-channel ``DequantizeLinear``).
        optimize: run ``quant_pre_process`` (turn off only for a model already prepared).

    Returns:
        A new ``onnx.ModelProto``.

    Raises:
        ModelError: the model cannot be read, pre-processed or upgraded; the message says what to do.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> prepared = prepare_model(tiny_cnn())
        >>> [n.op_type for n in prepared.graph.node][:3]
        ['Conv', 'Relu', 'MaxPool']
    """
    src = ModelSource.from_any(model)
    if not isinstance(min_opset, int) or isinstance(min_opset, bool) or min_opset < 1:
        raise OptionError(f"min_opset: got {min_opset!r}, expected a positive int")
    proto = onnx.ModelProto()
    proto.CopyFrom(src.proto)
    opset = ai_onnx_opset(proto)
    if opset == 0:
        raise ModelError(f"model {src.name}: imports no ai.onnx opset; expected a standard ONNX model")
    if any(n.op_type == "Constant" for n in proto.graph.node) and not optimize:
        log.info("model %s: weights in Constant nodes are left there (optimize=False)", src.name)
    if optimize:
        proto = _ort_preprocess(proto, src.name)
        _strip_unused_opsets(proto)
    if opset < min_opset:
        try:
            from onnx import version_converter

            upgraded = version_converter.convert_version(proto, min_opset)
            onnx.checker.check_model(upgraded)
        except Exception as exc:
            raise ModelError(
                f"model {src.name}: opset {opset} could not be upgraded to {min_opset} by onnx.version_converter "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); "
                f"re-export the model with opset >= {min_opset}"
            ) from exc
        log.info("model %s: opset %d upgraded to %d for quantization", src.name, opset, min_opset)
        proto = upgraded
    if fix_negative_dims(proto):
        log.info("model %s: negative (any-size) dims on inputs/outputs renamed as dynamic dims", src.name)
    named = _name_nodes(proto)
    if named:
        log.info("model %s: named %d unnamed nodes <OpType>_<index>", src.name, named)
    return proto


def weighted_layers(proto: onnx.ModelProto, op_types: Sequence[str] = WEIGHTED_OPS) -> list[str]:
    """Names of the nodes that carry weights (``Conv``, ``ConvTranspose``, ``Gemm``, ``MatMul``), in graph order.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> weighted_layers(tiny_cnn())
        ['conv1', 'conv2', 'fc']
    """
    return [n.name for n in proto.graph.node if n.op_type in op_types]


def tail_nodes(proto: onnx.ModelProto, n: int) -> list[str]:
    """The last ``n`` weighted layers and every node after the first of them (the model's "head").

    Nodes are taken in graph order, which ONNX requires to be topological.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> tail_nodes(tiny_cnn(), 1)
        ['fc']
        >>> tail_nodes(tiny_cnn(), 2)
        ['conv2', 'relu2', 'avgpool', 'flatten', 'fc']
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise OptionError(f"keep_last_n: got {n!r}, expected an int >= 0")
    if n == 0:
        return []
    layers = weighted_layers(proto)
    if not layers:
        return []
    first = layers[max(0, len(layers) - n)]
    names = [node.name for node in proto.graph.node]
    return names[names.index(first) :]
