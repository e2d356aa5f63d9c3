"""Fused attention: ONNX Runtime's transformer optimizer as a preparation of the ORT engine (``transformer_fusion=``).

``onnxruntime.transformers.optimizer.optimize_model`` (model type ``"bert"``, heads and hidden size detected from
the graph) rewrites a BERT-style encoder into ONNX Runtime's contrib ops: ``Attention``, ``SkipLayerNormalization``,
``BiasGelu``, ``EmbedLayerNormalization``. Only the Python fusions run (``opt_level=0``): the engine's own session
applies ONNX Runtime's graph optimizations afterwards, and the optimizer's ONNX Runtime pre-pass imports PyTorch.
The attention mask stays the raw ``[batch, seq]`` mask (``AttentionMaskFormat.AttentionMask``): the optimizer's
BERT default (a 1-D mask index) is only right for right-padded batches, and a mask with zeros elsewhere would
change the answers silently.

Which providers take the fused graph is in :data:`FUSING_PROVIDERS`; the MIGraphX EP, TensorRT and plugin EPs
fuse the graph themselves or lack the contrib ops, so ``"auto"`` leaves the model alone for them.

Example:
    >>> from amdinfer.testing.models import transformer_encoder
    >>> source = ModelSource(transformer_encoder(), name="encoder.onnx")
    >>> info = EngineInfo("ort")
    >>> fused = TransformerFusion(True, cache=None).apply("CPUExecutionProvider", source, info)
    >>> info.settings["transformer_fusion"]["fused"]
    {'Attention': 1, 'BiasGelu': 1, 'SkipLayerNormalization': 2}
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx

from ...errors import BackendUnavailableError, CacheError, ModelError, OptionError
from ...model import ModelSource, graphs_of
from .._info import EngineInfo
from ._providers import CPU_EP, CUDA_EP, ROCM_EP
from ._rewrite_cache import cached_rewrite

__all__ = [
    "AUTO_PROVIDERS",
    "FUSING_PROVIDERS",
    "MATCH_OPS",
    "TransformerFusion",
    "check_transformer_fusion",
    "fused_op_counts",
    "has_attention_pattern",
]

log = logging.getLogger("amdinfer.ort")

#: Providers that run the contrib ops the optimizer emits (``transformer_fusion=True`` is taken on them).
FUSING_PROVIDERS = (CPU_EP, CUDA_EP, ROCM_EP)
#: Providers ``"auto"`` fuses for: the GPU ones. On the CPU EP the fused MiniLM measured no faster (ONNX Runtime's
#: CPU session fuses LayerNorm and Gelu on its own; docs/engines.md) while an uncached load pays the optimizer's
#: 1.5-2.5 s, so ``"auto"`` leaves the CPU alone and ``True`` asks for it.
AUTO_PROVIDERS = (CUDA_EP, ROCM_EP)
#: Fused op types whose appearance means the graph matched (attention, or residual Add + LayerNorm).
MATCH_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization")
#: The op types a fusion produces (the optimizer's own statistics list).
_FUSED_OPS = (
    "EmbedLayerNormalization",
    "Attention",
    "MultiHeadAttention",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "GemmFastGelu",
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "RotaryEmbedding",
)
#: What the optimizer is asked to do (part of the cache key).
_RECIPE = {"model_type": "bert", "num_heads": 0, "hidden_size": 0, "opt_level": 0, "attention_mask": "raw"}
_MAX_BYTES = 1_800_000_000  # one protobuf; larger models keep external data the optimizer would have to rewrite


def check_transformer_fusion(value: Any) -> str | bool:
    """``transformer_fusion=``: ``"auto"``, ``True`` or ``False``.

    Example:
        >>> check_transformer_fusion("on")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: transformer_fusion: got 'on', expected 'auto', True or False
    """
    if isinstance(value, bool) or (isinstance(value, str) and value == "auto"):
        return value
    raise OptionError(f"transformer_fusion: got {value!r}, expected 'auto', True or False")


def _op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for g in graphs_of(model.graph) for n in g.node)


def fused_op_counts(before: onnx.ModelProto, after: onnx.ModelProto) -> dict[str, int]:
    """Fused op type -> how many more ``after`` holds than ``before``, sorted by name, zeros left out.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> fused_op_counts(tiny_cnn(), tiny_cnn())
        {}
    """
    old, new = _op_counts(before), _op_counts(after)
    return {op: new[op] - old[op] for op in sorted(_FUSED_OPS) if new[op] > old[op]}


#: Ops that may sit between the score MatMul, the Softmax and the MatMul with V (scale, mask, casts, dropout).
_BETWEEN = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Cast", "Dropout", "Identity"})


def has_attention_pattern(model: onnx.ModelProto) -> bool:
    """Whether a ``Softmax`` of ``model`` has a ``MatMul`` a few elementwise steps above it and one below it.

    The cheap test ``transformer_fusion="auto"`` runs before calling the optimizer, so that a CNN ending in a
    Softmax never pays for it.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn, transformer_encoder
        >>> has_attention_pattern(transformer_encoder()), has_attention_pattern(tiny_cnn())
        (True, False)
    """
    return any(_graph_has_attention(g) for g in graphs_of(model.graph))


def _graph_has_attention(graph: onnx.GraphProto) -> bool:
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def near_matmul(names: Any, upward: bool, depth: int = 4) -> bool:
        for name in names:
            nodes = ([producer[name]] if name in producer else []) if upward else consumers.get(name, [])
            for node in nodes:
                if node.op_type in ("MatMul", "FusedMatMul"):
                    return True
                further = node.input if upward else node.output
                if depth and node.op_type in _BETWEEN and near_matmul(further, upward, depth - 1):
                    return True
        return False

    return any(
        n.op_type == "Softmax" and near_matmul(n.input[:1], True) and near_matmul(n.output[:1], False)
        for n in graph.node
    )


def _summary(counts: dict[str, int]) -> str:
    order = sorted(counts, key=lambda op: (op not in MATCH_OPS, op))
    return ", ".join(f"{op} x{counts[op]}" for op in order)


def _optimizer() -> Any:
    """``onnxruntime.transformers.optimizer``, checked to be usable (it needs sympy for shape inference)."""
    try:
        import sympy  # noqa: F401  # the optimizer's symbolic shape inference guards SkipLayerNormalization
        from onnxruntime.transformers import optimizer
    except ImportError as exc:
        raise BackendUnavailableError(
            f"transformer_fusion: ONNX Runtime's transformer optimizer cannot be imported ({exc}); it needs "
            "onnxruntime and sympy: pip install sympy",
            backend="onnxruntime.transformers",
            cause=str(exc),
        ) from None
    return optimizer


@contextlib.contextmanager
def _quiet(optimizer: Any, said: list[str]) -> Iterator[None]:
    """Keep the optimizer's log records and prints off the console; collect its warnings in ``said``."""

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if "producer not matched" not in text:  # it expects PyTorch's exporter; irrelevant to the match
                said.append(text)

    stems = {p.stem for p in Path(optimizer.__file__).parent.glob("*.py")}
    names = [n for n in list(logging.root.manager.loggerDict) if n.rsplit(".", 1)[-1] in stems]
    loggers = [logging.getLogger(n) for n in names]
    saved = [(lg.propagate, lg.level) for lg in loggers]
    handler = Keep(logging.WARNING)
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
        lg.setLevel(logging.WARNING)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield
    finally:
        for lg, (propagate, level) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.propagate, lg.level = propagate, level
        said.extend(line for line in out.getvalue().splitlines() if line.strip())


class TransformerFusion:
    """Decides, runs and caches the transformer fusion of one engine (``transformer_fusion=``).

    Args:
        mode: ``"auto"`` (fuse for :data:`AUTO_PROVIDERS` when the graph matches), ``True`` (required: an
            error when the provider cannot take it or nothing fuses) or ``False``.
        cache: the engine's :class:`~amdinfer.cache.CompiledModelCache`, or ``None``.
        quantizer: the engine's quantizer; under ``"auto"`` an int8 or mixed one gets the unfused graph (its node
            choices and accuracy report are made for the standard ops), ``True`` fuses before it quantizes.

    What happened is recorded in ``info.settings["transformer_fusion"]`` and, when the optimizer ran, in a note.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> info = EngineInfo("ort")
        >>> src = ModelSource(tiny_cnn(), name="cnn.onnx")
        >>> TransformerFusion("auto", cache=None).apply("CUDAExecutionProvider", src, info) is src
        True
        >>> info.settings["transformer_fusion"]["reason"]
        'no attention pattern (MatMul -> Softmax -> MatMul)'
    """

    def __init__(self, mode: str | bool, *, cache: Any, quantizer: Any = None) -> None:
        self.mode = check_transformer_fusion(mode)
        self.cache = cache
        low = quantizer is not None and str(getattr(quantizer, "precision", "")) not in ("fp16", "bf16")
        #: Why ``"auto"`` leaves the graph to an int8/mixed quantizer (its node choices are for the standard ops).
        self._quantized = f"the {type(quantizer).__name__} quantizes the unfused graph" if low else None
        self._done: dict[str, tuple[ModelSource, dict[str, int], list[str], dict[str, Any] | None]] = {}

    def apply(self, provider: str, source: ModelSource, info: EngineInfo) -> ModelSource:
        """The model ``provider`` runs: ``source`` fused, or ``source`` itself (the reason recorded).

        Raises:
            OptionError: ``transformer_fusion=True`` with a provider that cannot take the fused graph.
            ModelError: ``transformer_fusion=True`` and nothing fuses.
            BackendUnavailableError: ``transformer_fusion=True`` and the optimizer cannot be imported.
        """
        mode = self.mode
        record: dict[str, Any] = {"mode": mode, "applied": False, "fused": {}, "reason": None}
        info.settings["transformer_fusion"] = record
        if mode is False:
            record["reason"] = "transformer_fusion=False"
            return source
        if provider not in FUSING_PROVIDERS:
            why = (
                f"{provider} does not take ONNX Runtime's contrib Transformer ops (it fuses the graph itself or "
                "lacks them)"
            )
            if mode is True:
                raise OptionError(
                    f"transformer_fusion=True: {why}; use transformer_fusion='auto' (which skips it there) or a "
                    f"provider among {list(FUSING_PROVIDERS)}"
                )
            record["reason"] = why
            return source
        if mode == "auto" and provider not in AUTO_PROVIDERS:
            record["reason"] = (
                f"{provider}: the fused graph measured no faster there (ONNX Runtime's session fuses LayerNorm and "
                "Gelu itself); transformer_fusion=True fuses anyway"
            )
            return source
        present = _op_counts(source.proto)
        if any(present[op] for op in MATCH_OPS):
            record["reason"] = "the model already holds fused ops"
            record["fused"] = {op: present[op] for op in sorted(_FUSED_OPS) if present[op]}
            return source
        if mode == "auto" and self._quantized:
            record["reason"] = f"{self._quantized} (transformer_fusion=True fuses first)"
            return source
        if mode == "auto" and not has_attention_pattern(source.proto):
            record["reason"] = "no attention pattern (MatMul -> Softmax -> MatMul)"
            return source
        try:
            fused, counts, said, cache_record = self._fused(source)
        except (BackendUnavailableError, ModelError) as exc:
            if mode is True:
                raise
            record["reason"] = str(exc)
            _note(info, f"transformer fusion: not applied: {exc}")
            return source
        record["cache"] = cache_record
        if not any(counts.get(op) for op in MATCH_OPS):
            found = ", ".join(f"{op} x{present[op]}" for op in ("Softmax", "MatMul", "LayerNormalization"))
            what = (
                f"model {source.name}: ONNX Runtime's transformer optimizer (model_type 'bert') found no "
                f"attention or SkipLayerNormalization pattern (the graph has {found}"
                + (f"; fused only {_summary(counts)}" if counts else "")
                + (f"; the optimizer said: {' | '.join(said[:3])}" if said else "")
                + ")"
            )
            if mode is True:
                raise ModelError(f"transformer_fusion=True: {what}; load with transformer_fusion='auto' or False")
            record["reason"] = what
            _note(info, f"transformer fusion: not applied: {what}; the original graph is kept")
            return source
        record.update(applied=True, fused=counts)
        _note(info, f"transformer fusion: {_summary(counts)} (onnxruntime.transformers optimizer, raw attention mask)")
        return fused

    def _fused(self, source: ModelSource) -> tuple[ModelSource, dict[str, int], list[str], dict[str, Any] | None]:
        """The optimizer's rewrite of ``source`` (memoized; through the cache when it is on)."""
        if source.sha256 not in self._done:
            self._done[source.sha256] = self._fuse_cached(source)
        return self._done[source.sha256]

    def _fuse_cached(self, source: ModelSource) -> tuple[ModelSource, dict[str, int], list[str], dict[str, Any] | None]:
        said: list[str] = []
        if len(source.to_bytes()) > _MAX_BYTES:
            raise ModelError(f"model {source.name}: over 1.8 GB, which the transformer optimizer cannot rewrite")
        if self.cache is None:
            fused = _fuse(source, said)
            return fused, fused_op_counts(source.proto, fused.proto), said, None
        import onnxruntime

        parts = {
            "recipe": 1,
            "kind": "transformer-fused model",
            "backend": "ort",
            "model": source.sha256,
            "optimizer": _RECIPE,
            "onnxruntime": onnxruntime.__version__,
            "onnx": onnx.__version__,
        }
        cache = self.cache
        try:
            fused, key, hit = cached_rewrite(
                cache, parts, source, lambda: _fuse(source, said), "transformer-fused model"
            )
        except CacheError as exc:
            log.warning("%s; fusing without the cache", exc)
            fused, key, hit = _fuse(source, said), None, False
        record = {"dir": str(cache.root), "key": key, "kind": parts["kind"], "hit": hit}
        return fused, fused_op_counts(source.proto, fused.proto), said, record


def _fuse(source: ModelSource, said: list[str]) -> ModelSource:
    """Run the optimizer on a copy of ``source`` (it rewrites the proto it is given in place)."""
    optimizer = _optimizer()
    options = optimizer.FusionOptions("bert")
    options.use_raw_attention_mask(True)
    proto = onnx.ModelProto()
    proto.CopyFrom(source.proto)
    try:
        with _quiet(optimizer, said):
            result = optimizer.optimize_model(
                proto, model_type="bert", num_heads=0, hidden_size=0, opt_level=0, optimization_options=options
            )
    except Exception as exc:  # the optimizer raises assorted errors on graphs it half-matches
        raise ModelError(
            f"model {source.name}: ONNX Runtime's transformer optimizer failed: {type(exc).__name__}: {exc}; "
            "load with transformer_fusion=False to run the graph as it is"
        ) from exc
    fused = result.model
    domains = {n.domain for g in graphs_of(fused.graph) for n in g.node} - {"", "ai.onnx"}
    declared = {o.domain for o in fused.opset_import}
    for domain in sorted(domains - declared):  # with opt_level=0 nothing declares the contrib ops' domain
        fused.opset_import.append(onnx.helper.make_opsetid(domain, 1))
    return source.derived(fused, check=False)


def _note(info: EngineInfo, text: str) -> None:
    if text not in info.notes:  # the auto provider walk may prepare the model for several providers
        info.notes.append(text)
