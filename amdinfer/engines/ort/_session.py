"""Building ONNX Runtime sessions: session options, the compiled-model cache, IR lowering, error translation.

Example:
    >>> import onnxruntime as ort
    >>> from amdinfer.engines.base import EngineInfo
    >>> from amdinfer.model import ModelSource
    >>> from amdinfer.testing.models import tiny_cnn
    >>> builder = SessionBuilder(ort, OrtOptions(), precision="fp32", device=0, bounds={})
    >>> session, _ = builder.create(ModelSource.from_any(tiny_cnn()), ["CPUExecutionProvider"], [{}], EngineInfo("ort"))
    >>> [i.name for i in session.get_inputs()]
    ['input']
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx

from ..._support._validate import flag
from ...errors import BackendUnavailableError, CacheError, ModelError, OptionError, UnsupportedOperatorError
from ...model import ModelSource, graphs_of
from ...types import ShapeBounds, TensorSpec
from ..base import EngineInfo
from ._epcontext import loads_by_path
from ._errors import IR_RE
from ._options import OrtOptions
from ._plugins import add_plugin_providers, is_plugin_ep
from ._providers import CPU_EP, CUDA_EP, ROCM_EP, provider_record
from ._rewrite_cache import cached_rewrite
from ._tuning import drop_default_graphs, without_graphs

__all__ = ["SessionBuilder", "compute_precision", "note_fp16_on_cpu", "optimized_model_cache", "specs_from_session"]

log = logging.getLogger("amdinfer.ort")

_FLOATS = {onnx.TensorProto.FLOAT: "fp32", onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}


def compute_precision(model: onnx.ModelProto) -> str | None:
    """``"fp16"``/``"bf16"`` when ``model`` computes in that type although it is loaded as fp32 (converted
    before loading, as a fused fp16 pipeline is), else ``None``.

    The rule: most float weights (initializers and ``Constant`` tensors, counted in elements, subgraphs
    included) are float16 (bfloat16); a model without float weights counts when it casts to float16
    (bfloat16) and never to float32.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> compute_precision(tiny_cnn()) is None
        True
        >>> import numpy as np
        >>> from onnx import helper, numpy_helper
        >>> w = numpy_helper.from_array(np.ones((4, 4), np.float16), "w")
        >>> graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [], [], [w])
        >>> compute_precision(helper.make_model(graph))
        'fp16'
    """
    counts = dict.fromkeys(_FLOATS.values(), 0)
    casts: set[str] = set()
    for graph in graphs_of(model.graph):
        tensors = list(graph.initializer)
        for node in graph.node:
            tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
            if node.op_type == "Cast":
                to = next((a.i for a in node.attribute if a.name == "to"), None)
                if to in _FLOATS:
                    casts.add(_FLOATS[to])
        for t in tensors:
            if t.data_type in _FLOATS:
                size = 1
                for d in t.dims:
                    size *= d
                counts[_FLOATS[t.data_type]] += size
    best = max(counts, key=lambda k: counts[k])
    if counts[best]:
        return best if best != "fp32" and counts[best] * 2 > sum(counts.values()) else None
    low = casts & {"fp16", "bf16"}
    return low.pop() if len(low) == 1 and "fp32" not in casts else None


def optimized_model_cache(cache_dir: Any, cache: bool | None, optimized_model_path: Any) -> Any:
    """The compiled-model cache the ORT engine uses, or None (see the ``cache`` argument).

    Example:
        >>> optimized_model_cache(None, False, None) is None
        True
    """
    from ...cache import CACHE_ENV, CompiledModelCache

    if cache is False:
        if cache_dir is not None:
            raise OptionError("cache_dir: given together with cache=False; drop one of them")
        return None
    explicit = cache is True or cache_dir is not None
    if not explicit and not os.environ.get(CACHE_ENV):
        return None
    if optimized_model_path is not None:
        if explicit:
            raise OptionError(
                "optimized_model_path: the cache also chooses where the optimized model goes; pass one of them"
            )
        return None  # an explicit path wins over the environment's default cache
    return CompiledModelCache(cache_dir)


class SessionBuilder:
    """Creates the engine's ``InferenceSession`` for a provider list, through the cache when it is on.

    Args:
        ort: the ``onnxruntime`` module.
        options: the engine's :class:`OrtOptions`.
        precision: the engine's precision (part of the cache key).
        device: GPU index (part of the cache key).
        bounds: the ``shapes=`` bounds (part of the cache key).
    """

    def __init__(
        self, ort: Any, options: OrtOptions, *, precision: str, device: int, bounds: dict[str, ShapeBounds]
    ) -> None:
        self._ort = ort
        self._options = options
        self._precision = precision
        self._device = device
        self._bounds = bounds
        self.cache = optimized_model_cache(options.cache_dir, options.cache, options.optimized_model_path)
        #: ONNX Runtime's text for the last failed session creation (for error messages).
        self.last_error: str | None = None
        self._optimized: bytes | None = None  # the engine's optimized graph, for the sessions of other shapes
        self._optimized_entry: tuple[str, dict[str, Any]] | None = None  # its cache entry (key, parts), read lazily
        self._like_lock = threading.Lock()

    def session_options(self) -> Any:
        """``onnxruntime.SessionOptions`` from the engine's options."""
        o = self._options
        so = self._ort.SessionOptions()
        if o.threads:
            so.intra_op_num_threads = o.threads
        if o.inter_op_threads:
            so.inter_op_num_threads = o.inter_op_threads
        so.graph_optimization_level = getattr(self._ort.GraphOptimizationLevel, o.level_name)
        if o.optimized_model_path is not None:
            so.optimized_model_filepath = str(o.optimized_model_path)
        so.log_severity_level = 3  # errors only: fallbacks are reported through info, not stderr noise
        if o.spin_wait is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", flag(o.spin_wait))
        return so

    def create(
        self, source: ModelSource, names: list[str], opts: list[dict[str, str]], info: EngineInfo
    ) -> tuple[Any, ModelSource]:
        """A session over ``names`` with ``opts``; returns it and the model it loaded (IR lowered if needed)."""
        # Hand ONNX Runtime the bytes ModelSource read and checked, not the path (it never re-reads changed files),
        # unless the model is too large for one protobuf or keeps EPContext data in a file beside it.
        by_path = loads_by_path(source)
        model_arg: Any = str(source.path) if by_path else source.to_bytes()
        self.last_error = None
        for attempt in range(3):
            so = self._options_for(names)  # fresh each attempt: plugin EPs are added to it, once
            try:
                ep_cache = self._ep_cache(names, opts, info)
                if ep_cache is not None:
                    session = self._in_ep_cache(ep_cache, self.new_session, (model_arg, so, names, opts), info)
                    return session, source
                if self.cache is not None and not any(is_plugin_ep(n) for n in names):
                    return self._cached(source, model_arg, so, names, opts, info), source
                if self.cache is not None:
                    # A graph holding a plugin EP's compiled nodes cannot be saved as an optimized model.
                    info.notes.append("plugin EP: the optimized-model cache is not used")
                return self.new_session(model_arg, so, names, opts), source
            except Exception as exc:  # ORT raises its own pybind exception types
                text = str(exc)
                m = IR_RE.search(text)
                if m and attempt == 0:
                    source = source.with_ir_version(int(m.group(2)))
                    info.notes.append(
                        f"model IR version {m.group(1)} lowered to {m.group(2)} for onnxruntime {self._ort.__version__}"
                    )
                    model_arg = source.to_bytes()
                    continue
                if attempt < 2 and drop_default_graphs(text, names, opts, info.settings):
                    continue  # amdinfer's default graphs refused for this model: reason in info.settings["tuning"]
                self.last_error = text
                opt_path = self._options.optimized_model_path
                errno_match = re.search(r"SystemError\s*:\s*(\d+)", text)
                if opt_path is not None and errno_match:
                    # ORT reports a failed write of the optimized model as a bare errno.
                    code = int(errno_match.group(1))
                    raise OptionError(
                        f"optimized_model_path: onnxruntime could not write '{opt_path}' "
                        f"({os.strerror(code)}, errno {code}); expected a writable file path"
                    ) from None
                raise _creation_error(text, names, source) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def new_session(self, model: Any, so: Any, names: list[str], opts: list[dict[str, str]]) -> Any:
        """``InferenceSession`` over ``names``: plugin EPs through ``so.add_provider_for_devices`` (ONNX Runtime
        ignores them in ``providers=``), built-in EPs through ``providers=``."""
        if add_plugin_providers(self._ort, so, names, opts, self._device):
            return self._ort.InferenceSession(model, sess_options=so)
        return self._ort.InferenceSession(model, sess_options=so, providers=names, provider_options=opts)

    def _cached(
        self,
        source: ModelSource,
        model_arg: Any,
        so: Any,
        names: list[str],
        opts: list[dict[str, str]],
        info: EngineInfo,
    ) -> Any:
        """A session through the compiled-model cache (``docs/cache.md``); sets ``info.cache_hit``."""
        cache = self.cache
        new = self._ort.InferenceSession
        if len(source.to_bytes()) > 1_800_000_000:
            # ORT can only save such a model with external initializers, which this one-file cache does not hold.
            info.notes.append("model over 1.8 GB: the optimized-model cache is not used")
            return new(model_arg, sess_options=so, providers=names, provider_options=opts)
        level = self._options.graph_optimization
        parts = self._key_parts(source, names, opts)
        # ORT's offline mode: an optimized model is loaded with optimizations off. Done for the CPU EP (checked
        # by tests); GPU EPs keep the requested level, as re-running the passes on an optimized graph is safe.
        turn_down = names == [CPU_EP] and level != "disable"

        def build(tmp: Path) -> Any:
            so.optimized_model_filepath = str(tmp)
            return new(model_arg, sess_options=so, providers=names, provider_options=opts)

        def load(path: Path) -> Any:
            level_before = so.graph_optimization_level
            if turn_down:
                so.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            try:
                session = new(str(path), sess_options=so, providers=names, provider_options=opts)
            finally:
                so.graph_optimization_level = level_before
            if [i.name for i in session.get_inputs()] != [i.name for i in source.inputs]:
                raise ModelError(f"cached optimized model has inputs {[i.name for i in session.get_inputs()]}")
            return session

        key = cache.key(**parts)
        session, hit = cache.get_or_build(
            key, parts=parts, build=build, load=load, suffix=".onnx", meta={"model": source.name}
        )
        self._optimized_entry = (key, parts)
        info.cache_hit = hit
        info.settings["cache"] = {
            "dir": str(cache.root),
            "key": key,
            "kind": "ORT optimized model",
            "hit": hit,
            "graph_optimization_on_load": "disable" if hit and turn_down else level,
        }
        return session

    def like(self, source: ModelSource, names: list[str], opts: list[dict[str, str]], info: EngineInfo) -> Any:
        """Another session like the engine's, for another input shape (``shape_sessions``), started from the
        engine's optimized graph with ONNX Runtime's optimizations off (its offline mode: same process, providers
        and options), so that no shape optimizes the model again.

        The graph is the cache entry's or written by the first such session into a private folder; a provider
        compiling its own programs (MIGraphX, plugin EPs), a model over 1.8 GB or a failed load: :meth:`create`.

        Example:
            >>> import onnxruntime as ort
            >>> from amdinfer.testing.models import tiny_cnn
            >>> builder = SessionBuilder(ort, OrtOptions(cache=False), precision="fp32", device=0, bounds={})
            >>> src, info = ModelSource.from_any(tiny_cnn()), EngineInfo("ort")
            >>> first, second = (builder.like(src, ["CPUExecutionProvider"], [{}], info) for _ in range(2))
            >>> info.settings["shape_session_graph"]
            'optimized once, loaded with optimizations off'
        """
        records = [(n, provider_record(n)) for n in names]
        compiles = any(is_plugin_ep(n) or r is None or r.option_names("model_cache_dir") for n, r in records)
        if compiles or len(source.to_bytes()) > 1_800_000_000:
            return self.create(source, names, opts, info)[0]
        info.settings["shape_session_graph"] = _LIKE
        with self._like_lock:
            graph = self._optimized_graph()
            if graph is None:  # no cache entry: optimize once more, keeping the graph for the next shapes
                with tempfile.TemporaryDirectory(prefix="amdinfer-shapes-") as folder:
                    so = self._options_for(names)
                    so.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
                    try:
                        session = self.new_session(source.to_bytes(), so, names, opts)
                    except Exception:  # ORT's own exception types: create() retries and translates
                        return self.create(source, names, opts, info)[0]
                    with contextlib.suppress(OSError):
                        self._optimized = Path(so.optimized_model_filepath).read_bytes()
                return session
        so = self._options_for(names)
        so.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return self.new_session(graph, so, names, opts)
        except Exception as exc:  # ORT's own exception types
            with self._like_lock:
                self._optimized = None
                info.settings["shape_session_graph"] = "built from the model (the optimized graph did not load)"
                info.notes.append(f"shape sessions: the optimized graph did not load ({str(exc).strip()[:200]})")
            return self.create(source, names, opts, info)[0]

    def _optimized_graph(self) -> bytes | None:
        """The engine's optimized graph (read once from its cache entry), or ``None`` (not built yet)."""
        if self._optimized is None and self._optimized_entry is not None and self.cache is not None:
            key, parts = self._optimized_entry
            self._optimized_entry = None
            path = self.cache.get(key, parts=parts)
            if path is not None:
                with contextlib.suppress(OSError):
                    self._optimized = path.read_bytes()
        return self._optimized

    def _options_for(self, names: list[str]) -> Any:
        """:meth:`session_options`; with ``allow_cpu_nodes=False`` a node the GPU provider does not take is a
        session-creation error instead of a silent CPU kernel with copies around it."""
        so = self.session_options()
        if not self._options.allow_cpu_nodes and names[0] != CPU_EP:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        return so

    def _ep_cache(self, names: list[str], opts: list[dict[str, str]], info: EngineInfo) -> Path | None:
        """The folder of the first provider that keeps its own compiled programs (the MIGraphX EP, built-in or
        plugin: ORT cannot serialize a graph holding compiled EP nodes), pointed into amdinfer's cache under the
        option name that provider really reads (``migraphx_model_cache_dir`` built in, ``cache_dir`` for the
        plugin); ``None`` when the cache is off or no provider has such an option."""
        if self.cache is None:
            return None
        for name, ep_opts in zip(names, opts):
            record = provider_record(name)
            keys = record.option_names("model_cache_dir") if record is not None else ()
            if not keys:
                continue
            assert record is not None
            kind = "plugin-ep" if record.plugin else "ep"
            folder = Path(ep_opts.setdefault(keys[0], str(self.cache.runtime_dir(f"ort-{record.short}-{kind}"))))
            info.settings["cache"] = {"dir": str(self.cache.root), "kind": f"{keys[0]} (managed by {name})"}
            return folder
        return None

    @staticmethod
    def _in_ep_cache(folder: Path, build: Any, args: tuple[Any, ...], info: EngineInfo) -> Any:
        """Build the session and tell from the folder whether the EP compiled (it wrote programs) or read them.

        A hit is a folder that held programs before and got none new; an EP that wrote nothing into an empty
        folder did not take the option (a note says so: the compiled programs are not being kept).
        """

        def programs() -> set[str]:
            with contextlib.suppress(OSError):
                return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
            return set()

        before = programs()
        session = build(*args)
        after = programs()
        written = sorted(after - before)
        hit = bool(before) and not written
        info.cache_hit = hit
        info.settings["cache"].update({"ep_cache_dir": str(folder), "hit": hit, "programs_written": len(written)})
        if not before and not written:
            info.notes.append(
                f"{info.settings['cache']['kind']}: the EP wrote no compiled program into {folder}; later loads "
                "will compile again"
            )
        return session

    def _key_parts(self, source: ModelSource, names: list[str], opts: list[dict[str, str]]) -> dict[str, Any]:
        from ..._support._hardware import cpu_signature, visible_gpu_arch

        return {
            "recipe": 1,
            "backend": "ort",
            "runtime": self._ort.__version__,
            "model": source.sha256,
            "providers": names,
            "provider_options": opts,
            "graph_optimization": self._options.graph_optimization,
            "precision": self._precision,
            "shapes": {k: [b.min, b.max, b.opt] for k, b in sorted(self._bounds.items())},
            "host": cpu_signature(),  # CPU layout optimizations depend on the vector width
            "gpu": visible_gpu_arch(self._device) if ROCM_EP in names else ("cuda" if CUDA_EP in names else None),
            "disable_cpu_ep_fallback": not self._options.allow_cpu_nodes,
        }

    def rewrite(self, q: Any, source: ModelSource, info: EngineInfo) -> ModelSource:
        """``q``'s rewrite of ``source`` (the fp16 conversion, a quantizer's model), through the cache when it is
        on and the rewrite depends on nothing but the model and ``q.settings()`` (no calibration data, no
        mixed-precision search); records ``info.settings["rewrite_cache"]``.

        The fp16 conversion of ResNet-50 takes seconds; with the cache on, the next load reads the stored
        rewrite instead (key: the source's SHA-256, the quantizer's settings, onnxruntime and onnx versions).

        Example:
            >>> import onnxruntime as ort
            >>> from amdinfer.quantize import Fp16Quantizer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> builder = SessionBuilder(ort, OrtOptions(cache=False), precision="fp16", device=0, bounds={})
            >>> src = ModelSource(tiny_cnn(), name="cnn.onnx")
            >>> builder.rewrite(Fp16Quantizer(), src, EngineInfo("ort")).name
            'cnn.onnx'
        """
        cache = self.cache
        spec = q.describe()
        if cache is None or spec.calibration or spec.mixed or len(source.to_bytes()) > 1_800_000_000:
            return source.derived(q.quantize(source.proto), check=False)
        precision = str(q.precision)
        parts = {
            "recipe": 1,
            "kind": f"{precision} model",
            "backend": "ort",
            "precision": precision,
            "model": source.sha256,
            "quantizer": q.settings(),
            "onnxruntime": self._ort.__version__,
            "onnx": onnx.__version__,
        }
        try:
            rewritten, key, hit = cached_rewrite(
                cache,
                parts,
                source,
                lambda: source.derived(q.quantize(source.proto), check=False),
                f"{precision} model",
            )
        except CacheError as exc:
            log.warning("%s; converting without the cache", exc)
            return source.derived(q.quantize(source.proto), check=False)
        info.settings["rewrite_cache"] = {"dir": str(cache.root), "key": key, "kind": parts["kind"], "hit": hit}
        return rewritten

    def all_outputs(self, source: ModelSource, session: Any, settings: dict[str, Any]) -> tuple[Any, list[str]]:
        """A session (optimizations off, graphs off) whose outputs are every named tensor of ``source``."""
        proto = onnx.ModelProto()
        proto.CopyFrom(source.proto)
        graph_outputs = {o.name for o in proto.graph.output}
        for node in proto.graph.node:
            for out in node.output:
                if out and out not in graph_outputs:
                    proto.graph.output.append(onnx.ValueInfoProto(name=out))
                    graph_outputs.add(out)
        names = [o.name for o in proto.graph.output]
        so = self._ort.SessionOptions()
        so.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        providers = session.get_providers()
        opts = [without_graphs(settings["provider_options"].get(p, {})) for p in providers]
        return self.new_session(proto.SerializeToString(), so, providers, opts), names


#: ``info.settings["shape_session_graph"]`` when the sessions of other shapes start from the engine's optimized graph
_LIKE = "optimized once, loaded with optimizations off"

#: Said once per process on stderr (logger ``amdinfer.ort``, WARNING); every such engine also carries it in its notes.
_FP16_ON_CPU = (
    "precision fp16 on CPUExecutionProvider brings no speed-up: ONNX Runtime's CPU provider has fp16 kernels for "
    "few ops and runs the others in float32 between inserted Casts, so expect fp32 speed or slower, with fp16 "
    "rounding"
)
_fp16_on_cpu_said = False


def note_fp16_on_cpu(info: EngineInfo, *, cached: bool) -> None:
    """Add the fp16-on-CPU note to ``info.notes``; the ``amdinfer.ort`` logger says it once per process.

    Example:
        >>> info = EngineInfo("ort")
        >>> note_fp16_on_cpu(info, cached=False)
        >>> "no speed-up" in info.notes[0]
        True
    """
    global _fp16_on_cpu_said
    cost = (
        "the fp16 conversion is kept in the compiled-model cache, so later loads skip it; precision='fp32' is "
        "the faster choice on a CPU"
        if cached
        else "the model is converted to fp16 again at every load: load with precision='fp32' on a CPU, or turn "
        "the cache on (cache_dir=...) to convert it once"
    )
    info.notes.append(f"{_FP16_ON_CPU}; {cost}")
    if not _fp16_on_cpu_said:
        _fp16_on_cpu_said = True
        log.warning("%s; %s (said once per process; engine.info.notes keeps it)", _FP16_ON_CPU, cost)


def _creation_error(text: str, names: list[str], source: ModelSource) -> Exception:
    if "fallback to CPU EP has been explicitly disabled" in text:
        return UnsupportedOperatorError(
            f"{names[0]} cannot take every node of model {source.name} and allow_cpu_nodes=False: "
            f"{text.strip()}. `amdinfer profile` (with CPU nodes allowed) lists the nodes that leave the GPU"
        )
    if any(n != CPU_EP for n in names) and ("EP" in text or "Provider" in text or "provider" in text):
        return BackendUnavailableError(f"{names[0]}: session creation failed: {text}", backend=names[0], cause=text)
    return ModelError(f"model {source.name}: onnxruntime cannot load it: {text.strip()}")


def specs_from_session(args: Sequence[Any], graph_specs: Sequence[TensorSpec]) -> list[TensorSpec]:
    """The graph's specs of the tensors a session reports (``session.get_inputs()``), in the session's order.

    Example:
        >>> from types import SimpleNamespace
        >>> specs = [TensorSpec("x", "float32", (1,))]
        >>> specs_from_session([SimpleNamespace(name="x")], specs)[0].name
        'x'
    """
    by_name = {s.name: s for s in graph_specs}
    out = []
    for a in args:
        spec = by_name.get(a.name)
        if spec is None:
            raise ModelError(f"onnxruntime reports tensor {a.name!r} that the graph does not declare")
        out.append(spec)
    return out
