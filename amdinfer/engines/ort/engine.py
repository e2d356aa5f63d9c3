"""The ONNX Runtime engine: MIGraphX EP -> ROCm EP -> CUDA EP -> CPU, never falling back behind your back.

``onnxruntime`` is imported on first use. What amdinfer knows about each execution provider is in
:mod:`._providers` (one record per provider); sessions are built in :mod:`._session`, run through
IOBinding in :mod:`._iobinding`, and quantizers are mapped in :mod:`._quant`.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"], threads=1)
    >>> engine.info.providers
    ['CPUExecutionProvider']
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from ..._certificate._io import show_certificate
from ..._support._quant_protocol import PrecisionQuantizer
from ...errors import BackendUnavailableError, InputError, OptionError
from ...model import ModelLike, ModelSource
from ...types import TensorSpec
from .._dlpack import device_feed, host_feeds
from ..base import Engine, EngineInfo, Feeds, OutputSelection
from ._candidates import Candidates, auto_candidates, check_available
from ._errors import translate_run_error
from ._options import OrtOptions, ProviderSpec
from ._plugins import check_took_nodes, is_plugin_ep, plugin_settings, plugin_version, precision_note, register_plugins
from ._profiles import batch_knobs, profile_options
from ._providers import (
    CPU_EP,
    MIGRAPHX_EP,
    PROVIDERS,
    check_declared,
    fix_for,
    import_ort,
    knob_applies,
    probe_provider,
    provider_options,
    provider_record,
)
from ._quant import migraphx_ep_options
from ._runner import make_runner
from ._session import SessionBuilder, compute_precision, note_fp16_on_cpu, specs_from_session
from ._shape_sessions import ShapeSessions, resolve_shape_sessions
from ._transformer import TransformerFusion
from ._tuning import apply_tuning, control_flow_nodes, varying_inputs

__all__ = ["OrtEngine"]

log = logging.getLogger("amdinfer.ort")


class OrtEngine(Engine):
    """An ONNX Runtime session behind the :class:`~amdinfer.Engine` contract.

    Args:
        model: path, bytes, ``onnx.ModelProto`` or ``ModelSource``.
        providers: providers to use, in order (full names or ``"migraphx"``, ``"rocm"``, ``"cuda"``,
            ``"cpu"``, ``"openvino"`` or another plugin EP's short name; an entry may be ``(name, {option:
            value})`` to set raw provider options). ``None`` tries MIGraphX EP, ROCm EP, AMD plugin EPs,
            CUDA EP, other plugin EPs in turn and ends on CPU, recording in ``info.skipped`` why each was
            passed over. Named providers that cannot run (or take no node) raise
            :class:`~amdinfer.BackendUnavailableError` with ONNX Runtime's cause and the fix.
        ep_library: path(s) of ONNX Runtime plugin EP libraries to register besides the installed
            ``onnxruntime-ep-*`` packages (see :mod:`amdinfer.engines.ort._plugins`); ``device=`` then
            indexes the plugin EP's devices.
        device: GPU index (``device_id``).
        precision: ``"fp32"``; ``"fp16"``/``"bf16"``/``"int8"`` turn on the MIGraphX EP's flags; on other
            providers ``"fp16"`` runs the model ``precision_quantizer("fp16")`` rewrites (through
            :func:`amdinfer.load`: :class:`~amdinfer.quantize.Fp16Quantizer`, fp32 I/O kept, the same graph as
            ``quantizer=Fp16Quantizer()``), and ``"int8"`` needs ``quantizer=``.
        threads: intra-op threads (``None``: ONNX Runtime's default, one per core).
        inter_op_threads: inter-op threads.
        spin_wait: whether ONNX Runtime's intra-op threads busy-wait for work between parallel sections
            (session config ``session.intra_op.allow_spinning``; ``None``: ONNX Runtime's default, on).
            ``False`` frees the cores as soon as an operator is done: use it when other threads of the
            process need the CPU, e.g. :meth:`Pipeline.map <amdinfer.Pipeline.map>`'s pre/postprocessing
            on a CPU engine (``docs/pipeline.md``).
        graph_optimization: ``"disable"``, ``"basic"``, ``"extended"`` or ``"all"`` (default).
        optimized_model_path: where ONNX Runtime writes the optimized model (``optimized_model_filepath``).
        exhaustive_tune, tunable_ops, memory_limit, model_cache_dir, gpu_graphs, prefer_nhwc: provider
            knobs, see :func:`provider_options`.
        allow_cpu_nodes: ``False`` makes a node that the GPU provider cannot take an error at load
            (ONNX Runtime's ``session.disable_cpu_ep_fallback``) instead of a silent CPU kernel.
            ``amdinfer.profile.profile`` lists such nodes when they are allowed.
        cache_dir: compiled-model cache folder (see ``docs/cache.md``); giving it turns the cache on.
        use_cache: ``True`` caches the ORT-optimized model (CPU, ROCm, CUDA EPs) and, for the MIGraphX EP,
            points ``migraphx_model_cache_dir`` into the cache; ``None`` (default) caches only when
            ``cache_dir=`` or ``$AMDINFER_CACHE_DIR`` is set; ``False`` never. ``info.cache_hit`` tells.
        io_binding: run through IOBinding with device buffers reused per input shape (``None``: on for
            GPU providers). Device tensors (DLPack: PyTorch, CuPy, JAX, ``OrtValue``) are then taken
            without a host round trip; see ``docs/gpu.md``.
        outputs_on: ``"auto"`` (device arrays when any feed is a device tensor, else NumPy), ``"host"``
            or ``"device"`` (:class:`~amdinfer.DeviceArray`, a DLPack producer).
        tuning: amdinfer's tuned provider defaults for knobs left at ``None`` (NHWC, exhaustive algorithm
            search, CUDA/HIP graphs, tunable ops; see :mod:`amdinfer.engines.ort._tuning`), recorded in
            ``info.settings["tuning"]``; ``False`` keeps the provider's own defaults.
        tf32: CUDA EP ``use_tf32`` (``None``: provider default, on; ``False`` for strict fp32).
        fp16_io: with ``precision="fp16"``, make the model's inputs and outputs float16 as well (fp16
            tensors in and out, no casts); the default keeps fp32 IO.
        transformer_fusion: ONNX Runtime's transformer optimizer (attention, LayerNorm, GELU fusions into its
            contrib ops) before any precision rewrite: ``"auto"`` (default) where the provider takes the fused
            graph and it matches, ``True`` required, ``False`` off; what fused is in ``info.notes`` and
            ``info.settings["transformer_fusion"]`` (see :mod:`amdinfer.engines.ort._transformer`).
        shape_sessions: sessions kept per input shape, so that a provider which rebuilds its kernels' state on
            every shape change (the CUDA EP's convolutions) pays once per shape: ``"auto"`` (8 on the CUDA EP for
            a model with an input varying beyond the batch axis, else off), an int, or 0 (one session); the
            shapes served are in ``info.settings["shape_sessions"]`` (see :mod:`._shape_sessions`).
        shapes, batch_buckets, quantizer: see :class:`~amdinfer.Engine`.
        precision_quantizer: what a bare ``precision="fp16"`` means on providers without a native fp16 knob
            (:class:`~amdinfer._support._quant_protocol.PrecisionQuantizer`); :func:`amdinfer.load` passes
            :func:`amdinfer.quantize.precision_quantizer`. Without it (an ``OrtEngine`` built directly),
            ``precision="fp16"`` there needs ``quantizer=``.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = OrtEngine(tiny_cnn(), providers=["cpu"])
        >>> engine.run(np.zeros((1, 3, 32, 32), np.float32))["logits"].shape
        (1, 10)
    """

    backend_name = "ort"
    supports_all_outputs = True
    supports_containers = True
    native_quantization = True
    _options: OrtOptions

    def __init__(
        self,
        model: ModelLike,
        *,
        providers: Sequence[ProviderSpec] | None = None,
        device: int = 0,
        precision: str = "fp32",
        threads: int | None = None,
        inter_op_threads: int | None = None,
        spin_wait: bool | None = None,
        graph_optimization: str = "all",
        optimized_model_path: str | os.PathLike | None = None,
        exhaustive_tune: bool | None = None,
        tunable_ops: bool | None = None,
        memory_limit: int | None = None,
        model_cache_dir: str | os.PathLike | None = None,
        gpu_graphs: bool | None = None,
        prefer_nhwc: bool | None = None,
        allow_cpu_nodes: bool = True,
        cache_dir: str | os.PathLike | None = None,
        use_cache: bool | None = None,
        io_binding: bool | None = None,
        outputs_on: str = "auto",
        tuning: bool = True,
        tf32: bool | None = None,
        fp16_io: bool = False,
        ep_library: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
        transformer_fusion: str | bool = "auto",
        shape_sessions: int | str = "auto",
        shapes: Mapping[str, Any] | None = None,
        batch_buckets: Sequence[int] | None = None,
        quantizer: Any = None,
        precision_quantizer: PrecisionQuantizer | None = None,
    ) -> None:
        if precision_quantizer is not None and not callable(precision_quantizer):
            raise OptionError(
                f"precision_quantizer: got {type(precision_quantizer).__name__}, expected a callable "
                "(precision, *, keep_io_types) -> Quantizer | None, e.g. amdinfer.quantize.precision_quantizer"
            )
        self._precision_quantizer = precision_quantizer
        options = OrtOptions.create(
            precision=getattr(quantizer, "precision", None) or precision,
            providers=providers,
            threads=threads,
            inter_op_threads=inter_op_threads,
            spin_wait=spin_wait,
            graph_optimization=graph_optimization,
            optimized_model_path=optimized_model_path,
            allow_cpu_nodes=allow_cpu_nodes,
            cache_dir=cache_dir,
            use_cache=use_cache,
            io_binding=io_binding,
            outputs_on=outputs_on,
            tuning=tuning,
            tf32=tf32,
            fp16_io=fp16_io,
            ep_library=ep_library,
            transformer_fusion=transformer_fusion,
            shape_sessions=shape_sessions,
            exhaustive_tune=exhaustive_tune,
            tunable_ops=tunable_ops,
            memory_limit=memory_limit,
            model_cache_dir=model_cache_dir,
            gpu_graphs=gpu_graphs,
            prefer_nhwc=prefer_nhwc,
        )
        super().__init__(
            model,
            precision=precision,
            device=device,
            shapes=shapes,
            batch_buckets=batch_buckets,
            quantizer=quantizer,
            options=options,
        )

    # ------------------------------------------------------------------ construction
    def _load(self, source: ModelSource) -> tuple[list[TensorSpec], list[TensorSpec], EngineInfo]:
        self._ort = ort = import_ort()
        self._variants: dict[tuple[str, str], ModelSource] = {}
        self._tmpdir: Any = None
        self._runner: Any = None
        self._all_session: Any = None
        self._all_names: list[str] = []
        if self._precision == "int8" and self._quantizer is None:
            raise OptionError(
                "precision='int8': int8 needs calibration data; pass quantizer=Int8Quantizer(calibration=...) "
                "(uncalibrated int8 gives wrong answers)"
            )
        info = EngineInfo(backend="ort", runtime_version=ort.__version__)
        info.settings["session"] = self._options.session_settings()
        self._builder = SessionBuilder(
            ort, self._options, precision=self._precision, device=self._device, bounds=self._bounds
        )
        fusion, cache = self._options.transformer_fusion, self._builder.cache
        self._fusion = TransformerFusion(fusion, cache=cache, quantizer=self._quantizer)
        register_plugins(ort, self._options.ep_libraries)  # once per process; failures are diagnoses
        available = list(ort.get_available_providers())
        t0 = time.perf_counter()
        if self._options.providers is None:
            self._session = self._create_auto(source, auto_candidates(ort, available, info), info)
        else:
            candidates = list(self._options.providers)
            check_available(ort, candidates, available)
            self._session = self._create_explicit(source, candidates, info)
        info.compile_seconds = time.perf_counter() - t0
        used = list(self._session.get_providers())
        info.providers = used
        first = provider_record(used[0] if used else CPU_EP) or PROVIDERS[CPU_EP]
        info.device = first.label + (f":{self._device}" if first.gpu or first.plugin else "")
        info.settings.update(plugin_settings(self._session, self._device))
        if self._precision == "fp16" and used[:1] == [CPU_EP]:
            note_fp16_on_cpu(info, cached="rewrite_cache" in info.settings)
        if self._quantizer is None and self._precision == "fp32":
            runs = compute_precision(self._source.proto)  # a model converted before loading (a fused fp16 graph)
            if runs is not None:
                self._precision = info.settings["model_precision"] = runs
                info.notes.append(f"model already converted to {runs}: its float weights are {runs}")
        inputs = specs_from_session(self._session.get_inputs(), self._source.inputs)
        outputs = specs_from_session(self._session.get_outputs(), self._source.outputs)
        self._runner = make_runner(
            ort, self._session, used, self._device, inputs, outputs, self._options.datapath, info
        )
        limit = resolve_shape_sessions(self._options.shape_sessions, used[0], varying_inputs(self._source.proto))
        sequence = next((s for s in inputs if not s.is_tensor), None)
        if limit > 1 and sequence is not None:  # sessions are keyed on tensor shapes
            if self._options.shape_sessions != "auto":
                raise OptionError(f"shape_sessions: input {sequence.name!r} is a {sequence.type_name}; use 0")
            limit = 0
        record = info.settings.setdefault("shape_sessions", {})
        self._shapes = ShapeSessions(limit, (self._session, self._runner), self._session_like, record)
        return inputs, outputs, info

    def _session_like(self) -> tuple[Any, Any]:
        """Another session and runner like the engine's own (``shape_sessions``): same model, providers, options."""
        info = EngineInfo(backend="ort")
        settings = self._info.settings["provider_options"]
        info.settings["provider_options"] = settings
        names, opts = list(settings), [dict(o) for o in settings.values()]
        session, _ = self._builder.create(self._source, names, opts, info)
        datapath = self._options.datapath
        used = list(session.get_providers())
        return session, make_runner(self._ort, session, used, self._device, self.inputs, self.outputs, datapath, info)

    def _model_for(self, provider: str, source: ModelSource, info: EngineInfo) -> tuple[ModelSource, dict[str, str]]:
        """The model and extra provider options for ``provider`` at this engine's precision.

        The MIGraphX EP takes a quantizer's description as its own flags (``migraphx_fp16_enable`` /
        int8 + calibration table) and converts plain ``precision="fp16"``/``"bf16"`` itself; every other
        provider runs the model the quantizer (``Fp16Quantizer()`` for ``precision="fp16"``) rewrote.
        """
        source = self._fusion.apply(provider, source, info)  # fused first, then any precision rewrite
        q = self._quantizer
        fp16_io = self._options.datapath.fp16_io
        if provider == MIGRAPHX_EP:
            if q is not None:
                opts, unhonoured = migraphx_ep_options(q, source.proto, self._workdir())
                for what in unhonoured:
                    info.notes.append(f"{MIGRAPHX_EP} cannot honour the quantizer's {what}")
                return source, opts
            if self._precision in ("fp16", "bf16") and not fp16_io:
                return source, {}  # provider_options adds migraphx_fp16_enable / migraphx_bf16_enable
        if q is None:
            if self._precision in ("fp32", "fp64"):
                return source, {}
            if self._precision != "fp16":
                raise OptionError(f"precision={self._precision!r}: only the MIGraphX EP offers it natively")
            q = self._precision_quantizer("fp16", keep_io_types=not fp16_io) if self._precision_quantizer else None
            if q is None:
                raise OptionError(
                    f"precision='fp16' on {provider}: ONNX Runtime runs an fp16 rewrite of the model there, and this "
                    "engine was given no precision_quantizer; load it with amdinfer.load(model, precision='fp16') "
                    "or pass quantizer=amdinfer.quantize.Fp16Quantizer()"
                )
        key = (source.sha256, q.settings_hash() if hasattr(q, "settings_hash") else repr(q.settings()))
        if key not in self._variants:
            self._variants[key] = self._builder.rewrite(q, source, info)
            show_certificate(info, self._variants[key].proto)  # the quantizer's (or the cache entry's) certificate
            # what quantizing found (e.g. the int8 accuracy check's figures): known only after it ran
            info.notes.extend(n for n in q.describe().notes if n not in info.notes)
        return self._variants[key], {}

    def _workdir(self) -> Path:
        if self._tmpdir is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="amdinfer-ort-")
        return Path(self._tmpdir.name)

    def _provider_list(
        self, candidates: Candidates, info: EngineInfo, source: ModelSource
    ) -> tuple[list[str], list[dict[str, str]]]:
        names, opts = [], []
        knobs_given = self._options.knobs
        # graph capture cannot serve control flow; inputs varying beyond the batch axis get none by default
        flow, varying = control_flow_nodes(source.proto), varying_inputs(source.proto)
        for name, raw in candidates:
            dp, kw = self._options.datapath, dict[str, Any](control_flow=flow, varying=varying, notes=info.notes)
            knobs, extra = apply_tuning(name, knobs_given, dp, info.settings, **kw)
            precision = self._precision if name == MIGRAPHX_EP and self._quantizer is None else "fp32"
            if precision == "fp16" and self._options.datapath.fp16_io:
                precision = "fp32"  # the model itself is converted (fp16 IO)
            mapped = provider_options(
                name, device=self._device, precision=precision, **knobs, **batch_knobs(self._buckets, self._bounds)
            )
            mapped.update({**extra, **profile_options(name, self._bounds)})
            unsupported = [k for k, v in knobs_given.items() if v is not None and not knob_applies(name, k)]
            if unsupported and name != CPU_EP:
                info.notes.append(f"{name}: has no equivalent for {unsupported}; not applied there")
            mapped.update(raw)
            if is_plugin_ep(name):
                check_declared(name, mapped, plugin_version(name))  # never a key the plugin would drop silently
            precision_note(name, raw, info.notes)
            names.append(name)
            opts.append(mapped)
        if CPU_EP not in names and self._options.allow_cpu_nodes:
            # ONNX Runtime always keeps the CPU EP for nodes a GPU EP lacks; make it explicit.
            names.append(CPU_EP)
            opts.append({})
        info.settings["provider_options"] = {n: o for n, o in zip(names, opts)}
        return names, opts

    def _new_session(self, source: ModelSource, candidates: Candidates, info: EngineInfo) -> Any:
        source, extra = self._model_for(candidates[0][0], source, info)
        if extra:
            candidates = [(candidates[0][0], {**extra, **candidates[0][1]}), *candidates[1:]]
        names, opts = self._provider_list(candidates, info, source)
        self._source = source
        session, self._source = self._builder.create(source, names, opts, info)
        return session

    def _create_explicit(self, source: ModelSource, candidates: Candidates, info: EngineInfo) -> Any:
        info.requested_providers = [n for n, _ in candidates]
        for name, _ in candidates:
            cause = None if is_plugin_ep(name) else probe_provider(name)
            if cause is not None:  # fail before ONNX Runtime prints its own fallback warning
                raise BackendUnavailableError(
                    f"provider {name!r} was requested but cannot load: {cause}. "
                    f"amdinfer does not fall back to another provider silently. Fix: {fix_for(name)}",
                    backend=name,
                    cause=cause,
                )
        session = self._new_session(source, candidates, info)
        used = session.get_providers()
        lost = [n for n, _ in candidates if n not in used]
        if lost:
            name = lost[0]
            cause = probe_provider(name) or self._builder.last_error or "the session did not register it"
            raise BackendUnavailableError(
                f"provider {name!r} was requested but cannot run: {cause}. ONNX Runtime would have run on "
                f"{used} instead; amdinfer does not fall back silently. Fix: {fix_for(name)}",
                backend=name,
                cause=cause,
            )
        check_took_nodes(session, [n for n, _ in candidates])
        return session

    def _create_auto(self, source: ModelSource, candidates: Candidates, info: EngineInfo) -> Any:
        """Walk down the provider order; each GPU provider must really load."""
        for cand in [c for c in candidates if c[0] != CPU_EP]:
            name = cand[0]
            cause = None if is_plugin_ep(name) else probe_provider(name)
            if cause is not None:
                info.skipped[name] = f"cannot load: {cause}"
                log.info("provider %s passed over: %s", name, cause)
                continue
            try:
                session = self._new_session(source, [cand], info)
                check_took_nodes(session, [name])
            except BackendUnavailableError as exc:
                info.skipped[name] = str(exc)
                continue
            if name in session.get_providers():
                info.requested_providers = [name, CPU_EP]
                return session
            info.skipped[name] = f"session did not register it: {self._builder.last_error or 'no device?'}"
        info.requested_providers = [CPU_EP]
        return self._new_session(source, [(CPU_EP, {})], info)

    # ------------------------------------------------------------------ running
    @property
    def session(self) -> Any:
        """The underlying ``onnxruntime.InferenceSession`` (for what amdinfer does not wrap)."""
        return self._session

    def run_many(
        self, batches: Iterable[Feeds], *, outputs: OutputSelection = None, prefetch: int = 2
    ) -> Iterator[dict[str, Any]]:
        """Run a stream of batches, overlapping host-to-device copies and device-to-host copies with compute.

        Each batch is checked like :meth:`run`. On a GPU (IO bound) a loader thread copies batch k+1
        into device buffers and the caller's thread copies batch k-1's outputs back while batch k
        computes; elsewhere, and with more than one session per shape (``shape_sessions``), the batches run
        in turn, each on its shape's session. Results come back in order.

        Args:
            batches: feeds per batch (dicts, or one array each for a single-input model).
            outputs: as for :meth:`run` (intermediate tensors run batch by batch, without overlap).
            prefetch: batches loaded ahead of the one computing (>= 1).

        Yields:
            One ``{output name: array}`` per batch.

        Example:
            >>> import numpy as np
            >>> from amdinfer.testing.models import tiny_cnn
            >>> engine = OrtEngine(tiny_cnn(), providers=["cpu"], io_binding=True)
            >>> batches = (np.zeros((4, 3, 32, 32), np.float32) for _ in range(3))
            >>> [out["logits"].shape for out in engine.run_many(batches)]
            [(4, 10), (4, 10), (4, 10)]
        """
        names = self._check_run_many(outputs, prefetch)
        if self._runner is None or self._buckets or self._intermediate(names) or self._shapes.active:
            # a session per shape (shape_sessions): each batch goes to its shape's session, in turn
            return (self.run(batch, outputs=outputs) for batch in batches)
        return self._runner.run_many(
            batches, self._check_feeds, names, self._options.datapath.outputs_on, int(prefetch)
        )

    def _intermediate(self, outputs: list[str] | None) -> TypeGuard[list[str]]:
        """Whether ``outputs`` asks for intermediate tensors (served by a separate session, not IO binding)."""
        return outputs is not None and (outputs == ["*"] or any(n not in self._output_names for n in outputs))

    def _prepared_call(self, feeds: dict[str, Any], outputs: list[str] | None) -> Any:
        runner = self._shapes.pick(feeds)[1] if self._runner is not None else None
        if runner is None or self._buckets or self._intermediate(outputs):
            return super()._prepared_call(feeds, outputs)
        return runner.prepare(feeds, outputs, self._options.datapath.outputs_on)

    def _accepts_device_tensor(self, value: Any) -> bool:
        return True  # _device_feed decides: host DLPack -> NumPy view, device tensor -> bound (or an error)

    def _device_feed(self, name: str, value: Any) -> Any:
        feed = device_feed(name, value)
        if type(feed) is not np.ndarray and self._runner is None:
            raise InputError(
                f"input {name!r}: got a tensor on {feed.device}, but this engine runs on {self._info.device} "
                "without IO binding; copy it to the host first, or load with io_binding=True on a GPU provider"
            )
        return feed

    def _run(self, feeds: dict[str, Any], outputs: list[str] | None) -> dict[str, np.ndarray]:
        if self._intermediate(outputs):
            return self._run_intermediate(host_feeds(feeds, "outputs= with intermediate tensors"), outputs)
        session, runner = self._shapes.pick(feeds)
        if runner is not None:
            return runner.run(feeds, outputs, self._options.datapath.outputs_on)
        names = outputs if outputs is not None else self._output_names
        try:
            values = session.run(names, feeds)
        except Exception as exc:
            raise translate_run_error(exc) from None
        return dict(zip(names, values))

    def _run_intermediate(self, feeds: dict[str, Any], outputs: list[str]) -> dict[str, np.ndarray]:
        if self._all_session is None:
            self._all_session, self._all_names = self._builder.all_outputs(
                self._source, self._session, self._info.settings
            )
        names = self._all_names if outputs == ["*"] else outputs
        unknown = [n for n in names if n not in self._all_names]
        if unknown:
            raise InputError(f"outputs: got {unknown}, expected names of tensors in the graph")
        try:
            values = self._all_session.run(names, feeds)
        except Exception as exc:
            raise translate_run_error(exc) from None
        return dict(zip(names, values))

    def _close(self) -> None:
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if getattr(self, "_shapes", None) is not None:
            self._shapes.close()
        self._session = None
        self._all_session = None
