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
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from ..._certificate._io import show_certificate
from ...errors import BackendUnavailableError, EngineClosedError, InputError, OptionError
from ...model import ModelSource
from ...types import TensorSpec
from .._dlpack import device_feed, host_feeds
from ..base import Engine, EngineInfo, Feeds, OutputSelection
from ._candidates import Candidates, auto_candidates, check_available
from ._errors import translate_run_error
from ._options import OrtOptions
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
from ._shape_sessions import ShapeSessions, resolve_shape_sessions, shape_key, warm_feeds
from ._transformer import TransformerFusion
from ._tuning import apply_tuning, control_flow_nodes, varying_inputs

__all__ = ["OrtEngine"]

log = logging.getLogger("amdinfer.ort")


def _shown(feeds: dict[str, Any]) -> Any:
    """A warmed shape as recorded: the input's shape for a single-input model, else ``{name: shape}``."""
    if len(feeds) == 1:
        return list(next(iter(feeds.values())).shape)
    return {name: list(a.shape) for name, a in feeds.items()}


class OrtEngine(Engine):
    """An ONNX Runtime session behind the :class:`~amdinfer.Engine` contract.

    Built from an :class:`~amdinfer.engines.ort.OrtOptions` record (what :func:`amdinfer.load` passes) or from
    that record's fields as keywords (``OrtEngine(model, providers=["cpu"], threads=1)``); every option is
    documented once, on the record. ``precision="fp16"`` turns on the MIGraphX EP's flag; on other providers it runs
    the model ``precision_quantizer("fp16")`` rewrites (through :func:`amdinfer.load`:
    :class:`~amdinfer.quantize.Fp16Quantizer`, fp32 I/O kept, the same graph as ``quantizer=Fp16Quantizer()``);
    ``"int8"`` needs ``quantizer=``. A provider named in ``providers=`` that cannot run (or takes no node) raises
    :class:`~amdinfer.BackendUnavailableError` with ONNX Runtime's cause and the fix: never a silent fallback.

    Args:
        model: path, bytes, ``onnx.ModelProto`` or ``ModelSource``.
        options: the record (``None``: built from ``keywords``).
        **keywords: :class:`~amdinfer.engines.ort.OrtOptions` fields, when no record is given.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = OrtEngine(tiny_cnn(), providers=["cpu"])
        >>> engine.run(np.zeros((1, 3, 32, 32), np.float32))["logits"].shape
        (1, 10)
        >>> engine.info.options.providers
        (('CPUExecutionProvider', {}),)
    """

    backend_name = "ort"
    options_type = OrtOptions
    supports_all_outputs = True
    supports_containers = True
    native_quantization = True
    _options: OrtOptions

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
        register_plugins(ort, self._options.ep_library)  # once per process; failures are diagnoses
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
        self._runner = make_runner(ort, self._session, used, self._device, inputs, outputs, self._options, info)
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
        """Another session and runner like the engine's own (``shape_sessions``): same model, providers, options,
        started from the engine's optimized graph (:meth:`SessionBuilder.like`)."""
        info = EngineInfo(backend="ort")
        settings = self._info.settings["provider_options"]
        info.settings["provider_options"] = settings
        names, opts = list(settings), [dict(o) for o in settings.values()]
        session = self._builder.like(self._source, names, opts, info)
        record = self._info.settings["shape_sessions"]
        record["graph"] = info.settings.get("shape_session_graph", "built from the model")
        self._info.notes.extend(n for n in info.notes if n.startswith("shape sessions:") and n not in self._info.notes)
        used = list(session.get_providers())
        return session, make_runner(
            self._ort, session, used, self._device, self.inputs, self.outputs, self._options, info
        )

    def _model_for(self, provider: str, source: ModelSource, info: EngineInfo) -> tuple[ModelSource, dict[str, str]]:
        """The model and extra provider options for ``provider`` at this engine's precision.

        The MIGraphX EP takes a quantizer's description as its own flags (``migraphx_fp16_enable`` /
        int8 + calibration table) and converts plain ``precision="fp16"``/``"bf16"`` itself; every other
        provider runs the model the quantizer (``Fp16Quantizer()`` for ``precision="fp16"``) rewrote.
        """
        source = self._fusion.apply(provider, source, info)  # fused first, then any precision rewrite
        q = self._quantizer
        fp16_io = self._options.fp16_io
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
            make = self._options.precision_quantizer
            q = make("fp16", keep_io_types=not fp16_io) if make is not None else None
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
            kw = dict[str, Any](control_flow=flow, varying=varying, notes=info.notes)
            knobs, extra = apply_tuning(name, knobs_given, self._options, info.settings, **kw)
            precision = self._precision if name == MIGRAPHX_EP and self._quantizer is None else "fp32"
            if precision == "fp16" and self._options.fp16_io:
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

    def _finish_init(self, inputs: list[TensorSpec], outputs: list[TensorSpec], info: EngineInfo) -> None:
        super()._finish_init(inputs, outputs, info)
        if self._options.warm_shapes:
            try:
                self.warm(self._options.warm_shapes)  # its shapes are the prepared ones (on_new_shape)
            except BaseException:
                self.close()
                raise
            info.load_seconds = time.perf_counter() - self._t_start

    def warm(self, shapes: Iterable[Any], *, workers: int | None = None) -> dict[str, Any]:
        """Build and run once each input shape the engine will be fed, before the first request of it.

        With a session per shape (``shape_sessions``: the CUDA EP and a model whose inputs vary beyond the
        batch axis) every listed shape gets its session now, several built at once (``workers`` threads; each
        from the engine's optimized graph, no second optimization), then each runs once on zeros, so that the
        provider chooses its kernels (cuDNN's algorithm search) here and not on the first page. Warmed shapes do
        not count against ``shape_sessions``' limit. With one session (the CPU) each shape just runs once, in turn;
        with ``batch_buckets`` each runs padded to its bucket, in turn (sessions made as on first use).
        Answers are unchanged. Also ``amdinfer.load(..., warm_shapes=[...])``. Recorded in
        ``info.settings["warm"]``: ``{"shapes": [...], "seconds": s, "sessions": n, "workers": w}``
        (a second call adds its shapes and seconds).

        Args:
            shapes: one shape per entry (a single-input model) or ``{input name: shape}``.
            workers: threads building and running the shapes (``None``: up to 8, one per shape).

        Returns:
            The record.

        Raises:
            OptionError: a malformed list or ``workers``. InputError: a shape the model cannot take (wrong rank,
                a fixed size, a ``shapes=`` bound, an unknown input), named by its index in the list.

        Example:
            >>> from amdinfer.testing.models import transformer_encoder
            >>> engine = OrtEngine(transformer_encoder(), providers=["cpu"], shape_sessions=4)
            >>> record = engine.warm([(1, 8, 64), (1, 16, 64)])
            >>> record["shapes"], record["sessions"], engine.info.settings["shape_sessions"]["warmed"]
            ([[1, 8, 64], [1, 16, 64]], 1, 1)
        """
        if self._closed:
            raise EngineClosedError(f"{type(self).__name__} for model {self._source.name}: engine is closed")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise OptionError(f"workers: got {workers!r}, expected None or an int >= 1")
        t0 = time.perf_counter()
        feeds = warm_feeds(shapes, self.inputs)
        checked = []
        for k, f in enumerate(feeds):
            try:
                checked.append(self._check_feeds(f))
            except InputError as exc:
                shown = {n: list(v.shape) for n, v in f.items()}
                raise InputError(f"warm_shapes[{k}]: {shown}: {exc}") from None
        keys = [shape_key(f) for f in checked]
        unique = [f for k, f in enumerate(checked) if keys[k] not in keys[:k]]
        # with batch_buckets the runs are padded first: their sessions come on first use, one run after another
        new = self._shapes.reserve(keys) if not self._buckets else []
        n = workers or max(1, min(8, len(unique)))
        if n > 1 and self._shapes.active and not self._buckets:  # a session per shape: build and run them at once
            with ThreadPoolExecutor(n, thread_name_prefix="amdinfer-warm") as pool:
                list(pool.map(self._shapes.build, new))
                list(pool.map(self._warm_run, unique))
        else:
            for key in new:
                self._shapes.build(key)
            for f in unique:
                self._warm_run(f)
        record = self._info.settings.setdefault("warm", {"shapes": [], "seconds": 0.0, "sessions": 0})
        record["shapes"] += [_shown(f) for f in unique]
        record["seconds"] = round(record["seconds"] + time.perf_counter() - t0, 4)
        record["sessions"] += len(new)
        record["workers"] = n
        return record

    def _warm_run(self, feeds: dict[str, Any]) -> None:
        """Run checked zero feeds once (not counted as a run of the caller's); its shape is prepared."""
        with self._new_shapes.warm():
            if self._buckets:
                self._run_bucketed(feeds, None)
            else:
                self._run_shaped(feeds, None)

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
        plain = self._buckets or self._intermediate(names) or self._shapes.active or self._new_shapes.policy == "pad"
        if self._runner is None or plain:
            # a session per shape (shape_sessions): each batch goes to its shape's session, in turn
            return (self.run(batch, outputs=outputs) for batch in batches)
        return self._runner.run_many(batches, self._checked_routed, names, self._options.outputs_on, int(prefetch))

    def _checked_routed(self, feeds: Feeds) -> dict[str, Any]:
        """:meth:`_check_feeds`, then the ``on_new_shape`` policy (compile: recorded; error: refused)."""
        checked = self._check_feeds(feeds)
        self._new_shapes.route(checked)
        return checked

    def _intermediate(self, outputs: list[str] | None) -> TypeGuard[list[str]]:
        """Whether ``outputs`` asks for intermediate tensors (served by a separate session, not IO binding)."""
        return outputs is not None and (outputs == ["*"] or any(n not in self._output_names for n in outputs))

    def _prepared_call(self, feeds: dict[str, Any], outputs: list[str] | None) -> Any:
        runner = self._shapes.pick(feeds)[1] if self._runner is not None else None
        if runner is None or self._buckets or self._intermediate(outputs):
            return super()._prepared_call(feeds, outputs)
        return runner.prepare(feeds, outputs, self._options.outputs_on)

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
            return runner.run(feeds, outputs, self._options.outputs_on)
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
