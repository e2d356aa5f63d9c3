"""A batch-1 export made batch-dynamic, with a proof: what the recipes' ``dynamic_batch`` does.

An export with a fixed batch of 1 (Ultralytics' default, ``torch.onnx.export`` without ``dynamic_axes``) holds
the 1 inside its graph: ``Reshape`` shapes such as ``[1, 4, 16, 21504]``. :func:`make_batch_dynamic` writes 0
there ("copy the input's batch"), puts ``N`` on axis 0 of every input and output and drops the intermediate
shapes recorded at batch 1. Nothing else of the graph changes, so the rewrite is only right when the batch is
carried by those Reshapes alone; :func:`prove_batch_dynamic` checks that it is, on ONNX Runtime's CPU EP:

* two distinct seeded inputs (the input's dtype: floats uniform in ``[0, 1)``, ``uint8`` over ``0..255``, other
  integers over ``0..15``) run as **one batch of 2** through the rewritten model, and each **alone** through the
  original at batch 1;
* every output of the rewrite must have axis 0 of 2 and the rest of the original's shape, and row ``i`` must
  equal the original's output on input ``i``: ``|got - want| <= RTOL * |want| + ATOL * scale`` elementwise, with
  ``RTOL = ATOL = 1e-4`` and ``scale`` the output's local magnitude (the largest ``|want|`` in the element's
  slice along the axis where that is smallest, so that class scores next to box coordinates in one YOLO tensor
  are judged at their own scale; at least 1e-3 of the output's largest value). That is fp32 reordering (a batch
  of 2 may take other kernels), never a row mixed with another or a batch folded into an axis. Integer and
  boolean outputs must be equal.

Anything else (the rewrite refused, an exception in either model, a shape or a value that differs) is a refusal,
with the reason. :func:`batch_dynamic_verdict` caches the verdict by the model's content hash (SHA-256) in the
compiled-model cache (:mod:`amdinfer.cache`; an entry ``dynamic_batch_proof``) and in this process, so the same
model is proven once.

Example:
    >>> from amdinfer.testing.models import yolov8
    >>> m = yolov8(image_size=64, num_classes=2)
    >>> for vi in list(m.graph.input) + list(m.graph.output):
    ...     vi.type.tensor_type.shape.dim[0].dim_value = 1
    >>> verdict = prove_batch_dynamic(m)
    >>> verdict.applied, verdict.why.startswith("proven on ONNX Runtime's CPU EP")
    (True, True)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import AmdinferError, ModelError

__all__ = ["ATOL", "RTOL", "Verdict", "batch_dynamic_verdict", "make_batch_dynamic", "prove_batch_dynamic"]

log = logging.getLogger("amdinfer")

#: the proof's tolerance: ``|got - want| <= RTOL * |want| + ATOL * scale`` (see the module)
RTOL = 1e-4
ATOL = 1e-4
#: the version of the rewrite and the proof, part of the cache key (a changed rule proves again)
RULE = 1
_MEMO: dict[str, Verdict] = {}


@dataclass(frozen=True)
class Verdict:
    """Whether a batch-1 model may be rewritten to a dynamic batch, and why.

    Attributes:
        applied: the rewrite is proven (the recipes then use it).
        why: what was checked, or why it was refused.
        cacheable: the verdict is the model's own (not "ONNX Runtime is missing"), so it may be cached.

    Example:
        >>> Verdict(False, "no").as_dict()
        {'applied': False, 'why': 'no'}
    """

    applied: bool
    why: str
    cacheable: bool = True

    def as_dict(self) -> dict[str, Any]:
        """``{"applied": bool, "why": str}``, what ``engine.info.settings["dynamic_batch"]`` records."""
        return {"applied": self.applied, "why": self.why}


def _batch_of(vi: onnx.ValueInfoProto) -> int | str | None:
    dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
    if not dims:
        return None
    return int(dims[0].dim_value) if dims[0].HasField("dim_value") else (dims[0].dim_param or "?")


def _check_axes(model: onnx.ModelProto) -> None:
    """Refuse a model whose inputs are not all of batch 1 or whose outputs' axis 0 cannot be the batch."""
    init = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in init and _batch_of(vi) != 1:
            raise ModelError(f"input {vi.name!r}: axis 0 is {_batch_of(vi)!r}, expected the fixed batch 1")
    for vi in model.graph.output:
        has_shape = vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
        if has_shape and _batch_of(vi) != 1:
            raise ModelError(f"output {vi.name!r}: axis 0 is {_batch_of(vi)!r}, not the batch (1)")


def make_batch_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a batch-1 export with a dynamic batch axis ``N`` (the rewrite only; prove it with
    :func:`prove_batch_dynamic`).

    Every ``Reshape`` whose constant shape (an initializer or a ``Constant`` node) starts with 1 gets 0 there (copy
    the input's batch; a constant also used elsewhere is copied first), inputs and outputs get ``N`` on axis 0,
    and the intermediate shapes recorded at batch 1 are dropped.

    Raises:
        ModelError: an input's axis 0 is not 1, an output's is not 1, or such a ``Reshape`` has ``allowzero=1``
            (its 0 would mean an empty axis).

    Example:
        >>> from onnx import TensorProto, helper
        >>> m = helper.make_model(helper.make_graph(
        ...     [helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
        ...     [numpy_helper.from_array(np.array([1, 6], np.int64), "s")]))
        >>> d = make_batch_dynamic(m)
        >>> d.graph.input[0].type.tensor_type.shape.dim[0].dim_param, numpy_helper.to_array(d.graph.initializer[0])
        ('N', array([0, 6]))
    """
    _check_axes(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    del graph.value_info[:]
    for vi in list(graph.input) + list(graph.output):
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        if dims and vi.name not in {t.name for t in graph.initializer}:
            dims[0].dim_param = "N"
    inits = {t.name: t for t in graph.initializer}
    constants = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    shared = {name for name, count in uses.items() if count > 1}
    for node in graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        name = node.input[1]
        shape = _constant(name, inits, constants)
        if shape is None or shape.ndim != 1 or not shape.size or shape[0] != 1:
            continue
        if any(a.name == "allowzero" and a.i for a in node.attribute):
            raise ModelError(f"node {node.name or node.output[0]!r}: a Reshape with allowzero=1 holds the batch 1")
        shape = shape.copy()
        shape[0] = 0
        if name in inits and name not in shared:
            inits[name].CopyFrom(numpy_helper.from_array(shape, name))
        else:  # a Constant node, or a constant others read too: a rewritten copy, shared by the Reshapes
            copy = f"{name}__batch0"
            if copy not in inits:
                inits[copy] = numpy_helper.from_array(shape, copy)
                graph.initializer.append(inits[copy])
            node.input[1] = copy
    _drop_unused(graph, set(inits) - {t.name for t in model.graph.initializer}, uses)
    return out


def _drop_unused(graph: onnx.GraphProto, added: set[str], before: dict[str, int]) -> None:
    """Remove the constants that only the rewritten Reshapes read (their copies replace them), so that a runtime
    does not warn about unused initializers."""
    used = {name for node in graph.node for name in node.input} | {v.name for v in [*graph.input, *graph.output]}
    gone = {name for name in before if name not in used and name not in added}
    keep = [t for t in graph.initializer if t.name not in gone]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)
    nodes = [n for n in graph.node if not (n.op_type == "Constant" and n.output and n.output[0] in gone)]
    if len(nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(nodes)


def _constant(name: str, inits: dict[str, onnx.TensorProto], constants: dict[str, onnx.NodeProto]) -> Any:
    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = constants.get(name)
    value = next((a.t for a in node.attribute if a.name == "value"), None) if node is not None else None
    return None if value is None else numpy_helper.to_array(value)


def _feeds(model: onnx.ModelProto, seed: int) -> list[dict[str, np.ndarray]]:
    """Two distinct seeded batch-1 feeds for ``model``'s inputs (see the module for the ranges)."""
    from ..model import onnx_dtype_to_numpy

    rng = np.random.default_rng(seed)
    init = {t.name for t in model.graph.initializer}
    rows: list[dict[str, np.ndarray]] = [{}, {}]
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = vi.type.tensor_type.shape.dim
        shape = [1] + [int(d.dim_value) if d.HasField("dim_value") else -1 for d in dims[1:]]
        if min(shape) < 1:
            raise ModelError(f"input {vi.name!r}: an axis other than the batch is not fixed; the proof needs its size")
        dtype = onnx_dtype_to_numpy(vi.type.tensor_type.elem_type)
        for row in rows:
            if dtype.kind == "f":
                row[vi.name] = rng.random(shape).astype(dtype)
            elif dtype == np.uint8:
                row[vi.name] = rng.integers(0, 256, shape).astype(dtype)
            elif dtype.kind in "iu":
                row[vi.name] = rng.integers(0, 16, shape).astype(dtype)
            elif dtype.kind == "b":
                row[vi.name] = rng.random(shape) < 0.5
            else:
                raise ModelError(f"input {vi.name!r}: dtype {dtype} has no seeded proof input")
    return rows


def _scale(want: np.ndarray) -> np.ndarray:
    """The elementwise scale of one row's output (see the module): the smallest per-slice magnitude over its axes."""
    a = np.abs(want.astype(np.float64))
    if a.ndim == 0 or not a.size:
        return a
    scale = np.full(a.shape, np.inf)
    for axis in range(a.ndim):
        others = tuple(k for k in range(a.ndim) if k != axis)
        scale = np.minimum(scale, a.max(axis=others, keepdims=True) if others else a)
    return np.maximum(scale, 1e-3 * float(a.max()))


def _compare(name: str, got: np.ndarray, want: list[np.ndarray]) -> tuple[str | None, float]:
    """Why output ``name`` of the batch of 2 (``got``) is not the rows ``want`` (each of batch 1), else
    ``(None, worst error / tolerance)``."""
    if got.ndim == 0 or got.shape[0] != 2 or any(w.shape[:1] != (1,) or w.shape[1:] != got.shape[1:] for w in want):
        return f"output {name!r}: axis 0 is not the batch (shape {got.shape} for 2 rows, {want[0].shape} for 1)", 0.0
    worst = 0.0
    for i, w in enumerate(want):
        g = got[i : i + 1]
        if w.dtype.kind not in "fc":
            if not np.array_equal(g, w):
                return f"output {name!r}: row {i} differs from the model's output at batch 1 (integer values)", 0.0
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        bound = RTOL * np.abs(w64) + ATOL * _scale(w[0])[None]
        error = np.abs(g64 - w64)
        both_nan = np.isnan(g64) & np.isnan(w64)
        ratio = np.where(both_nan, 0.0, error / np.maximum(bound, np.finfo(np.float64).tiny))
        largest = float(np.nanmax(ratio, initial=0.0)) if ratio.size else 0.0
        if np.isnan(ratio).any() or largest > 1.0:
            return (
                f"output {name!r}: row {i} differs from the model's output at batch 1 (largest difference "
                f"{float(np.nanmax(np.where(both_nan, 0, error))):.3g}, {largest:.3g} x the tolerance)"
            ), largest
        worst = max(worst, largest)
    return None, worst


def prove_batch_dynamic(model: onnx.ModelProto, *, seed: int = 0) -> Verdict:
    """Rewrite ``model`` (:func:`make_batch_dynamic`) and prove the rewrite on ONNX Runtime's CPU EP: a batch of 2
    seeded inputs against each input alone through the original (the module says how). Never raises: a refusal is
    a :class:`Verdict` with ``applied=False`` and the reason.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> prove_batch_dynamic(tiny_cnn()).why  # its batch is already dynamic
        "not rewritten: input 'input': axis 0 is 'N', expected the fixed batch 1"
    """
    try:
        rewritten = make_batch_dynamic(model)
        rows = _feeds(model, seed)
    except ModelError as exc:
        return Verdict(False, f"not rewritten: {exc}")
    try:
        import onnxruntime as ort
    except ImportError:
        return Verdict(False, "not proven: onnxruntime is not installed (the proof runs on its CPU EP)", False)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    cpu = ["CPUExecutionProvider"]
    try:
        original = ort.InferenceSession(model.SerializeToString(), options, providers=cpu)
        want = [original.run(None, row) for row in rows]
        names = [o.name for o in original.get_outputs()]
        del original
    except Exception as exc:  # not the rewrite's fault, but nothing is proven
        return Verdict(False, f"not proven: the model fails at batch 1 ({type(exc).__name__}: {exc})"[:600])
    try:
        dynamic = ort.InferenceSession(rewritten.SerializeToString(), options, providers=cpu)
        got = dynamic.run(None, {k: np.concatenate([r[k] for r in rows]) for k in rows[0]})
    except Exception as exc:  # ORT's errors (a Reshape that folds the batch, a Concat of a batch-1 constant, ...)
        return Verdict(False, f"refused: the rewrite fails at a batch of 2 ({type(exc).__name__}: {exc})"[:600])
    worst = 0.0
    for k, name in enumerate(names):
        problem, ratio = _compare(name, np.asarray(got[k]), [np.asarray(w[k]) for w in want])
        if problem is not None:
            return Verdict(False, f"refused: {problem}")
        worst = max(worst, ratio)
    return Verdict(
        True,
        "proven on ONNX Runtime's CPU EP: a batch of 2 seeded inputs gives each one's batch-1 outputs "
        f"(largest difference {worst:.2g} x the tolerance |d| <= {RTOL:g} |want| + {ATOL:g} x the output's scale)",
    )


def _cache_parts(source: Any) -> dict[str, Any]:
    try:
        import onnxruntime as ort

        version = str(ort.__version__)
    except ImportError:
        version = "none"
    return {"kind": "dynamic_batch_proof", "model": source.sha256, "rule": RULE, "onnxruntime": version}


def batch_dynamic_verdict(
    source: Any, *, cache_dir: str | Path | None = None, cache: bool = True
) -> tuple[Verdict, onnx.ModelProto | None]:
    """The verdict of :func:`prove_batch_dynamic` on ``source`` (a :class:`~amdinfer.model.ModelSource`), proven
    once per model: cached by its SHA-256 (and the rule's and ONNX Runtime's versions) in this process and, unless
    ``cache=False``, in the compiled-model cache (``cache_dir``, else the default folder). Returns the verdict
    and, when it is applied, the rewritten model (the rewrite is deterministic: redone, never stored).

    Example:
        >>> import tempfile
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import tiny_cnn
        >>> verdict, model = batch_dynamic_verdict(ModelSource(tiny_cnn()), cache_dir=tempfile.mkdtemp())
        >>> verdict.applied, model is None
        (False, True)
    """
    from ..cache import CompiledModelCache

    parts = _cache_parts(source)
    key = CompiledModelCache.key(**parts)
    verdict = _MEMO.get(key)
    store = CompiledModelCache(cache_dir) if cache else None
    if verdict is None and store is not None:
        verdict = _read(store, key, parts)
    if verdict is None:
        verdict = prove_batch_dynamic(source.proto)
        if verdict.cacheable and store is not None:
            _write(store, key, parts, verdict)
    if verdict.cacheable:
        _MEMO[key] = verdict
    return verdict, (make_batch_dynamic(source.proto) if verdict.applied else None)


def _read(cache: Any, key: str, parts: dict[str, Any]) -> Verdict | None:
    try:
        path = cache.get(key, parts=parts)
        raw = json.loads(path.read_text()) if path is not None else None
    except (AmdinferError, OSError, ValueError) as exc:
        log.debug("dynamic batch proof: cache entry %s unreadable (%s); proving again", key, exc)
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("applied"), bool) or not isinstance(raw.get("why"), str):
        return None
    return Verdict(raw["applied"], raw["why"])


def _write(cache: Any, key: str, parts: dict[str, Any], verdict: Verdict) -> None:
    try:
        cache.put(key, lambda tmp: tmp.write_text(json.dumps(verdict.as_dict())), parts=parts, suffix=".json")
    except (AmdinferError, OSError) as exc:  # a read-only cache folder: the verdict stays in this process
        log.debug("dynamic batch proof: verdict not cached (%s)", exc)
