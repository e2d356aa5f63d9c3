"""ONNX Runtime engine: MIGraphX EP -> ROCm EP -> CUDA EP -> CPU, never falling back behind your back.

``onnxruntime`` is imported on first use. Provider options are mapped from amdinfer's typed
options to the names in ONNX Runtime's own sources (``migraphx_execution_provider_info.h``,
``rocm_execution_provider_info.cc``, ``cuda_execution_provider_info.cc``); :func:`provider_options`
does that mapping without importing ONNX Runtime, so it is testable anywhere.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"], threads=1)
    >>> engine.info.providers
    ['CPUExecutionProvider']
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import (
    AmdinferError,
    BackendUnavailableError,
    InputError,
    ModelError,
    OptionError,
    UnsupportedOperatorError,
)
from ..model import ModelLike, ModelSource
from ..types import normalize_precision
from ._ort_device import device_feed, host_feeds, make_runner
from ._ort_tuning import DataPathOptions, apply_tuning, drop_default_graphs, without_graphs
from .base import Engine, EngineInfo, Feeds, OutputSelection

__all__ = [
    "AMD_PROVIDERS",
    "GRAPH_OPTIMIZATION_LEVELS",
    "ORT_DISTRIBUTIONS",
    "PROVIDER_ORDER",
    "OrtEngine",
    "installed_ort_distributions",
    "probe_provider",
    "provider_options",
    "resolve_provider_name",
]

log = logging.getLogger("amdinfer.ort")

MIGRAPHX_EP = "MIGraphXExecutionProvider"
ROCM_EP = "ROCMExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"

#: The order ``backend="auto"`` tries providers in.
PROVIDER_ORDER: tuple[str, ...] = (MIGRAPHX_EP, ROCM_EP, CUDA_EP, CPU_EP)
AMD_PROVIDERS: tuple[str, ...] = (MIGRAPHX_EP, ROCM_EP)

_SHORT_NAMES = {"migraphx": MIGRAPHX_EP, "rocm": ROCM_EP, "cuda": CUDA_EP, "cpu": CPU_EP}

#: The distributions that each install a module named ``onnxruntime`` (two at once overwrite each other).
ORT_DISTRIBUTIONS: tuple[str, ...] = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-rocm",
    "onnxruntime-migraphx",
    "onnxruntime-directml",
    "onnxruntime-openvino",
    "onnxruntime-training",
    "onnxruntime-qnn",
)

_PROVIDER_LIBRARY = {
    MIGRAPHX_EP: "libonnxruntime_providers_migraphx.so",
    ROCM_EP: "libonnxruntime_providers_rocm.so",
    CUDA_EP: "libonnxruntime_providers_cuda.so",
}

_FIX = {
    MIGRAPHX_EP: "install ROCm with MIGraphX (libmigraphx_c.so.3 must be on the loader path, e.g. /opt/rocm/lib) "
    "and `pip install 'amdinfer-onnx[migraphx]'`; check with `amdinfer doctor`",
    ROCM_EP: "install ROCm (libamdhip64, MIOpen, rocBLAS on the loader path, e.g. /opt/rocm/lib) and "
    "`pip install 'amdinfer-onnx[rocm]'` (the ROCm EP exists up to onnxruntime 1.22); check with `amdinfer doctor`",
    CUDA_EP: "install the CUDA and cuDNN libraries onnxruntime-gpu was built for (or `import torch` first) and "
    "`pip install 'amdinfer-onnx[cuda]'`; check with `amdinfer doctor`",
    CPU_EP: "reinstall onnxruntime",
}

_DIST_FOR = {MIGRAPHX_EP: "onnxruntime-migraphx", ROCM_EP: "onnxruntime-rocm", CUDA_EP: "onnxruntime-gpu"}

#: ``graph_optimization=`` values and ONNX Runtime's ``GraphOptimizationLevel`` member names.
GRAPH_OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}

ProviderSpec = str | tuple[str, Mapping[str, Any]]


def _import_ort() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise BackendUnavailableError(
            "backend 'ort': onnxruntime is not installed; install one ONNX Runtime distribution: "
            "pip install 'amdinfer-onnx[cpu]' (or [migraphx], [rocm], [cuda])",
            backend="ort",
            cause=str(exc),
        ) from exc
    return onnxruntime


def installed_ort_distributions() -> dict[str, str]:
    """ONNX Runtime distributions installed, name -> version (more than one is a broken install).

    Example:
        >>> "onnxruntime" in installed_ort_distributions() or True
        True
    """
    found = {}
    for dist in ORT_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def resolve_provider_name(name: str) -> str:
    """Accept ``"migraphx"``/``"rocm"``/``"cuda"``/``"cpu"`` or full provider names.

    Example:
        >>> resolve_provider_name("rocm")
        'ROCMExecutionProvider'
    """
    if not isinstance(name, str):
        raise OptionError(f"providers: got {name!r}, expected a provider name string")
    return _SHORT_NAMES.get(name.lower(), name)


@cache
def probe_provider(provider: str) -> str | None:
    """Try to load a provider's shared library the way ONNX Runtime does; return the loader's error or None.

    ``onnxruntime-migraphx`` and ``onnxruntime-rocm`` list their provider as available even when its
    library cannot load (no ROCm); this finds out why, e.g.
    ``libmigraphx_c.so.3: cannot open shared object file: No such file or directory``.

    Example:
        >>> probe_provider("CPUExecutionProvider") is None
        True
    """
    library = _PROVIDER_LIBRARY.get(provider)
    if library is None:
        return None
    ort = _import_ort()
    capi = Path(ort.__file__).parent / "capi"
    path = capi / library
    if not path.exists():
        return f"{library} is not part of the installed onnxruntime build"
    try:
        ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(path))
    except OSError as exc:
        return str(exc)
    return None


def _flag(value: bool) -> str:
    return "1" if value else "0"


def provider_options(
    provider: str,
    *,
    device: int = 0,
    precision: str = "fp32",
    exhaustive_tune: bool | None = None,
    tunable_ops: bool | None = None,
    memory_limit: int | None = None,
    model_cache_dir: str | os.PathLike | None = None,
    gpu_graphs: bool | None = None,
    prefer_nhwc: bool | None = None,
    int8_calibration_table: str | None = None,
) -> dict[str, str]:
    """Map amdinfer's typed options to one provider's option dict (ONNX Runtime's own option names).

    ``None`` leaves the provider's default. Options a provider does not have are left out of its dict
    (and reported by :class:`OrtEngine` in ``info.notes``).

    Args:
        provider: full provider name.
        device: GPU index -> ``device_id``.
        precision: ``"fp16"`` -> ``migraphx_fp16_enable``; ``"bf16"`` -> ``migraphx_bf16_enable``;
            ``"int8"`` -> ``migraphx_int8_enable``.
        exhaustive_tune: ``migraphx_exhaustive_tune`` / ``miopen_conv_exhaustive_search`` /
            ``cudnn_conv_algo_search=EXHAUSTIVE`` (else ``HEURISTIC``).
        tunable_ops: ``tunable_op_enable`` + ``tunable_op_tuning_enable`` (ROCm, CUDA).
        memory_limit: bytes -> ``migraphx_mem_limit`` / ``gpu_mem_limit``.
        model_cache_dir: ``migraphx_model_cache_dir`` (compiled MIGraphX programs).
        gpu_graphs: ``enable_hip_graph`` (ROCm) / ``enable_cuda_graph`` (CUDA).
        prefer_nhwc: ``prefer_nhwc`` (CUDA).
        int8_calibration_table: ``migraphx_int8_calibration_table_name`` (+ native table flag off).

    Example:
        >>> provider_options("MIGraphXExecutionProvider", device=1, precision="fp16", exhaustive_tune=True)
        {'device_id': '1', 'migraphx_fp16_enable': '1', 'migraphx_exhaustive_tune': '1'}
        >>> provider_options("ROCMExecutionProvider", tunable_ops=True, gpu_graphs=True)
        {'device_id': '0', 'tunable_op_enable': '1', 'tunable_op_tuning_enable': '1', 'enable_hip_graph': '1'}
    """
    if provider == CPU_EP:
        return {}
    opts: dict[str, str] = {"device_id": str(int(device))}
    if provider == MIGRAPHX_EP:
        if precision == "fp16":
            opts["migraphx_fp16_enable"] = "1"
        elif precision == "bf16":
            opts["migraphx_bf16_enable"] = "1"
        elif precision == "int8":
            opts["migraphx_int8_enable"] = "1"
            if int8_calibration_table is not None:
                opts["migraphx_int8_calibration_table_name"] = str(int8_calibration_table)
                opts["migraphx_int8_use_native_calibration_table"] = "0"
        if exhaustive_tune is not None:
            opts["migraphx_exhaustive_tune"] = _flag(exhaustive_tune)
        if memory_limit is not None:
            opts["migraphx_mem_limit"] = str(int(memory_limit))
        if model_cache_dir is not None:
            opts["migraphx_model_cache_dir"] = str(model_cache_dir)
    elif provider == ROCM_EP:
        if exhaustive_tune is not None:
            opts["miopen_conv_exhaustive_search"] = _flag(exhaustive_tune)
        if tunable_ops is not None:
            opts["tunable_op_enable"] = _flag(tunable_ops)
            opts["tunable_op_tuning_enable"] = _flag(tunable_ops)
        if memory_limit is not None:
            opts["gpu_mem_limit"] = str(int(memory_limit))
        if gpu_graphs is not None:
            opts["enable_hip_graph"] = _flag(gpu_graphs)
    elif provider == CUDA_EP:
        if exhaustive_tune is not None:
            opts["cudnn_conv_algo_search"] = "EXHAUSTIVE" if exhaustive_tune else "HEURISTIC"
        if tunable_ops is not None:
            opts["tunable_op_enable"] = _flag(tunable_ops)
            opts["tunable_op_tuning_enable"] = _flag(tunable_ops)
        if memory_limit is not None:
            opts["gpu_mem_limit"] = str(int(memory_limit))
        if gpu_graphs is not None:
            opts["enable_cuda_graph"] = _flag(gpu_graphs)
        if prefer_nhwc is not None:
            opts["prefer_nhwc"] = _flag(prefer_nhwc)
    return opts


_IR_RE = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")


class OrtEngine(Engine):
    """An ONNX Runtime session behind the :class:`~amdinfer.Engine` contract.

    Args:
        model: path, bytes, ``onnx.ModelProto`` or ``ModelSource``.
        providers: providers to use, in order (full names or ``"migraphx"``, ``"rocm"``, ``"cuda"``,
            ``"cpu"``; an entry may be ``(name, {option: value})`` to set raw provider options). ``None``
            tries MIGraphX EP, ROCm EP, CUDA EP in turn and ends on CPU, recording in
            ``info.skipped`` why each was passed over. Named providers that cannot run raise
            :class:`~amdinfer.BackendUnavailableError` with ONNX Runtime's cause and the fix.
        device: GPU index (``device_id``).
        precision: ``"fp32"``; ``"fp16"``/``"bf16"``/``"int8"`` turn on the MIGraphX EP's flags; on other
            providers ``"fp16"`` converts the model with ONNX Runtime's float16 converter (fp32 I/O kept),
            and ``"int8"`` needs ``quantizer=``.
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
            or ``"device"`` (:class:`~amdinfer.engines._ort_device.DeviceArray`, a DLPack producer).
        tuning: amdinfer's tuned provider defaults for knobs left at ``None`` (NHWC, exhaustive algorithm
            search, CUDA/HIP graphs, tunable ops; see :mod:`amdinfer.engines._ort_tuning`), recorded in
            ``info.settings["tuning"]``; ``False`` keeps the provider's own defaults.
        tf32: CUDA EP ``use_tf32`` (``None``: provider default, on; ``False`` for strict fp32).
        fp16_io: with ``precision="fp16"``, make the model's inputs and outputs float16 as well (fp16
            tensors in and out, no casts); the default keeps fp32 IO.
        shapes, batch_buckets, quantizer: see :class:`~amdinfer.Engine`.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = OrtEngine(tiny_cnn(), providers=["cpu"])
        >>> engine.run(np.zeros((1, 3, 32, 32), np.float32))["logits"].shape
        (1, 10)
    """

    backend_name = "ort"
    supports_all_outputs = True

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
        shapes: Mapping[str, Any] | None = None,
        batch_buckets: Sequence[int] | None = None,
        quantizer: Any = None,
    ) -> None:
        self._variants: dict[tuple[str, str], ModelSource] = {}
        self._tmpdir: Any = None
        super().__init__(
            model, precision=precision, device=device, shapes=shapes, batch_buckets=batch_buckets, quantizer=quantizer
        )
        ort = _import_ort()
        self._ort = ort
        if graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
            raise OptionError(
                f"graph_optimization: got {graph_optimization!r}, expected one of {list(GRAPH_OPTIMIZATION_LEVELS)}"
            )
        for opt_name, value in (("threads", threads), ("inter_op_threads", inter_op_threads)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise OptionError(f"{opt_name}: got {value!r}, expected an int >= 0 (0: ONNX Runtime's default)")
        if spin_wait is not None and not isinstance(spin_wait, bool):
            raise OptionError(f"spin_wait: got {spin_wait!r}, expected True, False or None (ONNX Runtime's default)")
        self._spin_wait = spin_wait
        self._knobs = dict(
            exhaustive_tune=exhaustive_tune,
            tunable_ops=tunable_ops,
            memory_limit=memory_limit,
            model_cache_dir=model_cache_dir,
            gpu_graphs=gpu_graphs,
            prefer_nhwc=prefer_nhwc,
        )
        self._datapath = DataPathOptions.create(
            precision=self._precision,
            io_binding=io_binding,
            outputs_on=outputs_on,
            tuning=tuning,
            tf32=tf32,
            fp16_io=fp16_io,
        )
        self._runner: Any = None
        info = EngineInfo(backend="ort", runtime_version=ort.__version__)
        self._info_tmp = info
        if optimized_model_path is not None:
            optimized_model_path = _check_optimized_model_path(optimized_model_path)
        self._cache = _optimized_model_cache(cache_dir, use_cache, optimized_model_path)
        self._so_args = (threads, inter_op_threads, graph_optimization, optimized_model_path)
        self._allow_cpu_nodes = allow_cpu_nodes
        info.settings["session"] = {
            "intra_op_num_threads": threads or 0,
            "inter_op_num_threads": inter_op_threads or 0,
            "intra_op_allow_spinning": spin_wait,  # None: ONNX Runtime's default (on)
            "graph_optimization_level": GRAPH_OPTIMIZATION_LEVELS[graph_optimization],
            "optimized_model_filepath": str(optimized_model_path) if optimized_model_path else None,
            "disable_cpu_ep_fallback": not allow_cpu_nodes,
        }

        available = list(ort.get_available_providers())
        if providers is None:
            candidates = self._auto_candidates(available, info)
            explicit = False
        else:
            if isinstance(providers, str):
                providers = [providers]
            candidates = [self._normalize_spec(p) for p in providers]
            if not candidates:
                raise OptionError("providers: got an empty list, expected at least one provider")
            explicit = True
            for name, _ in candidates:
                if name not in available:
                    dists = installed_ort_distributions()
                    raise BackendUnavailableError(
                        f"provider {name!r} is not in this onnxruntime build (onnxruntime {ort.__version__}, "
                        f"installed: {dists or 'none'}; it offers {available}). "
                        f"Fix: {_FIX.get(name, 'check the name')}",
                        backend=name,
                    )

        source = self._prepare_model(candidates)
        self._source = source  # _new_session replaces it if it must lower the IR version
        t0 = time.perf_counter()
        self._session = self._create(source, candidates, explicit, info)
        info.compile_seconds = time.perf_counter() - t0
        used = list(self._session.get_providers())
        info.providers = used
        info.device = self._device_name(used)
        self._all_session: Any = None

        inputs = self._specs_from_session(self._session.get_inputs(), self._source.inputs)
        outputs = self._specs_from_session(self._session.get_outputs(), self._source.outputs)
        self._run_fn = self._session.run
        self._runner = make_runner(ort, self._session, used, self._device, inputs, outputs, self._datapath, info)
        del self._info_tmp
        self._finish_init(inputs, outputs, info)

    # ------------------------------------------------------------------ construction helpers
    @staticmethod
    def _normalize_spec(spec: ProviderSpec) -> tuple[str, dict[str, str]]:
        if isinstance(spec, tuple):
            if len(spec) != 2 or not isinstance(spec[1], Mapping):
                raise OptionError(f"providers: got {spec!r}, expected a name or (name, {{option: value}})")
            return resolve_provider_name(spec[0]), {str(k): str(v) for k, v in spec[1].items()}
        return resolve_provider_name(spec), {}

    def _auto_candidates(self, available: list[str], info: EngineInfo) -> list[tuple[str, dict[str, str]]]:
        out = []
        for name in PROVIDER_ORDER:
            if name in available:
                out.append((name, {}))
            elif name != CPU_EP:
                info.skipped[name] = (
                    f"not in this onnxruntime build ({', '.join(installed_ort_distributions()) or 'onnxruntime'} "
                    f"{self._ort.__version__}); needs {_DIST_FOR[name]}"
                )
        return out

    def _make_session_options(self, threads: int | None, inter: int | None, level: str, opt_path: Any) -> Any:
        so = self._ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        if inter:
            so.inter_op_num_threads = inter
        so.graph_optimization_level = getattr(self._ort.GraphOptimizationLevel, GRAPH_OPTIMIZATION_LEVELS[level])
        if opt_path is not None:
            so.optimized_model_filepath = str(opt_path)
        so.log_severity_level = 3  # errors only: fallbacks are reported through info, not stderr noise
        if self._spin_wait is not None:
            so.add_session_config_entry("session.intra_op.allow_spinning", _flag(self._spin_wait))
        return so

    def _apply_quantizer(self, quantizer: Any) -> None:
        # Deferred to session creation: the MIGraphX EP takes the quantizer's native flags
        # (migraphx_fp16_enable / int8 + calibration table); other providers get the rewritten model.
        self._precision = normalize_precision(getattr(quantizer, "precision", self._precision))

    def _prepare_model(self, candidates: list[tuple[str, dict[str, str]]]) -> ModelSource:
        """Check the precision can be honoured; the per-provider model is made by :meth:`_model_for`."""
        if self._precision == "int8" and self._quantizer is None:
            raise OptionError(
                "precision='int8': int8 needs calibration data; pass quantizer=Int8Quantizer(calibration=...) "
                "(uncalibrated int8 gives wrong answers)"
            )
        return self._source

    def _model_for(self, provider: str, source: ModelSource, info: EngineInfo) -> tuple[ModelSource, dict[str, str]]:
        """The model and extra provider options for ``provider`` at this engine's precision."""
        q = self._quantizer
        if provider == MIGRAPHX_EP:
            if q is not None and hasattr(q, "ort_migraphx_options"):
                opts, unhonoured = q.ort_migraphx_options(source.proto, self._workdir())
                for what in unhonoured:
                    info.notes.append(f"{MIGRAPHX_EP} cannot honour the quantizer's {what}")
                return source, dict(opts)
            if q is None and self._precision in ("fp16", "bf16") and not self._datapath.fp16_io:
                return source, {}  # the EP converts itself (migraphx_fp16_enable / migraphx_bf16_enable)
        if q is None and self._precision in ("fp32", "fp64"):
            return source, {}
        if q is None and self._precision != "fp16":
            raise OptionError(f"precision={self._precision!r}: only the MIGraphX EP offers it natively")
        fp16_io = self._datapath.fp16_io
        key = (source.sha256, "quantizer" if q is not None else ("fp16-io" if fp16_io else "fp16"))
        if key not in self._variants:
            if q is not None:
                proto = q.quantize(source.proto)
            else:
                proto = _convert_fp16(source.proto, keep_io_types=not fp16_io)
            self._variants[key] = ModelSource.from_any(proto, check=False)
        return self._variants[key], {}

    def _workdir(self) -> Path:
        if self._tmpdir is None:
            import tempfile

            self._tmpdir = tempfile.TemporaryDirectory(prefix="amdinfer-ort-")
        return Path(self._tmpdir.name)

    def _provider_list(
        self, candidates: list[tuple[str, dict[str, str]]], info: EngineInfo
    ) -> tuple[list[str], list[dict[str, str]]]:
        names, opts = [], []
        for name, raw in candidates:
            knobs, extra = apply_tuning(name, self._knobs, self._datapath, info.settings)
            mapped = provider_options(name, device=self._device, precision=self._precision, **knobs)
            mapped.update(extra)
            unsupported = [k for k, v in self._knobs.items() if v is not None and not _knob_applies(name, k)]
            if unsupported and name != CPU_EP:
                info.notes.append(f"{name}: has no equivalent for {unsupported}; not applied there")
            mapped.update(raw)
            names.append(name)
            opts.append(mapped)
        if CPU_EP not in names and self._allow_cpu_nodes:
            # ONNX Runtime always keeps the CPU EP for nodes a GPU EP lacks; make it explicit.
            names.append(CPU_EP)
            opts.append({})
        info.settings["provider_options"] = {n: o for n, o in zip(names, opts)}
        return names, opts

    def _create(
        self, source: ModelSource, candidates: list[tuple[str, dict[str, str]]], explicit: bool, info: EngineInfo
    ) -> Any:
        if explicit:
            info.requested_providers = [n for n, _ in candidates]
            for name, _ in candidates:
                cause = probe_provider(name)
                if cause is not None:  # fail before ONNX Runtime prints its own fallback warning
                    raise BackendUnavailableError(
                        f"provider {name!r} was requested but cannot load: {cause}. "
                        f"amdinfer does not fall back to another provider silently. Fix: {_FIX.get(name, '')}",
                        backend=name,
                        cause=cause,
                    )
            session = self._new_session(source, candidates, info)
            used = session.get_providers()
            lost = [n for n, _ in candidates if n not in used]
            if lost:
                name = lost[0]
                cause = probe_provider(name) or getattr(self, "_last_error", None) or "the session did not register it"
                raise BackendUnavailableError(
                    f"provider {name!r} was requested but cannot run: {cause}. ONNX Runtime would have run on "
                    f"{used} instead; amdinfer does not fall back silently. Fix: {_FIX.get(name, '')}",
                    backend=name,
                    cause=cause,
                )
            return session
        # auto: walk down the provider order; each GPU provider must really load.
        gpu = [c for c in candidates if c[0] != CPU_EP]
        for cand in gpu:
            name = cand[0]
            cause = probe_provider(name)
            if cause is not None:
                info.skipped[name] = f"cannot load: {cause}"
                log.info("provider %s passed over: %s", name, cause)
                continue
            try:
                session = self._new_session(source, [cand], info)
            except BackendUnavailableError as exc:
                info.skipped[name] = str(exc)
                continue
            if name in session.get_providers():
                info.requested_providers = [name, CPU_EP]
                return session
            info.skipped[name] = f"session did not register it: {getattr(self, '_last_error', None) or 'no device?'}"
        info.requested_providers = [CPU_EP]
        return self._new_session(source, [(CPU_EP, {})], info)

    def _new_session(self, source: ModelSource, candidates: list[tuple[str, dict[str, str]]], info: EngineInfo) -> Any:
        source, extra = self._model_for(candidates[0][0], source, info)
        self._source = source
        if extra:
            candidates = [(candidates[0][0], {**extra, **candidates[0][1]}), *candidates[1:]]
        names, opts = self._provider_list(candidates, info)
        session_options = self._make_session_options(*self._so_args)
        if not self._allow_cpu_nodes and names[0] != CPU_EP:
            # Any node the GPU provider does not take becomes a session-creation error instead of a
            # silent CPU kernel with copies around it.
            session_options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        # ModelSource read and checked the external data; hand ONNX Runtime those bytes, not the path (so it
        # never re-reads files that may have changed), unless the model is too large for one protobuf.
        by_path = source.path is not None and source._bytes is None and source.proto.ByteSize() >= 2**31 - 1
        model_arg: Any = str(source.path) if by_path else source.to_bytes()
        self._last_error = None
        for attempt in range(3):
            try:
                if self._cache is not None:
                    return self._cached_session(source, model_arg, session_options, names, opts, info)
                return self._ort.InferenceSession(
                    model_arg, sess_options=session_options, providers=names, provider_options=opts
                )
            except Exception as exc:  # ORT raises its own pybind exception types
                text = str(exc)
                m = _IR_RE.search(text)
                if m and attempt == 0:
                    lowered = source.with_ir_version(int(m.group(2)))
                    info.notes.append(
                        f"model IR version {m.group(1)} lowered to {m.group(2)} for onnxruntime {self._ort.__version__}"
                    )
                    source = lowered
                    self._source = lowered
                    model_arg = lowered.to_bytes()
                    continue
                if attempt < 2 and drop_default_graphs(text, names, opts, info.settings):
                    continue  # amdinfer's default graphs refused for this model: reason in info.settings["tuning"]
                self._last_error = text
                opt_path = self._so_args[3]
                errno_match = re.search(r"SystemError\s*:\s*(\d+)", text)
                if opt_path is not None and errno_match:
                    # ORT reports a failed write of the optimized model as a bare errno.
                    code = int(errno_match.group(1))
                    raise OptionError(
                        f"optimized_model_path: onnxruntime could not write '{opt_path}' "
                        f"({os.strerror(code)}, errno {code}); expected a writable file path"
                    ) from None
                if "fallback to CPU EP has been explicitly disabled" in text:
                    raise UnsupportedOperatorError(
                        f"{names[0]} cannot take every node of model {source.name} and allow_cpu_nodes=False: "
                        f"{text.strip()}. `amdinfer profile` (with CPU nodes allowed) lists the nodes "
                        "that leave the GPU"
                    ) from None
                if any(n != CPU_EP for n in names) and ("EP" in text or "Provider" in text or "provider" in text):
                    raise BackendUnavailableError(
                        f"{names[0]}: session creation failed: {text}", backend=names[0], cause=text
                    ) from None
                raise ModelError(f"model {source.name}: onnxruntime cannot load it: {text.strip()}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _cached_session(
        self,
        source: ModelSource,
        model_arg: Any,
        so: Any,
        names: list[str],
        opts: list[dict[str, str]],
        info: EngineInfo,
    ) -> Any:
        """A session through the compiled-model cache (``docs/cache.md``); sets ``info.cache_hit``."""
        from ..cache import cpu_signature, visible_gpu_arch

        cache = self._cache
        new = self._ort.InferenceSession
        if MIGRAPHX_EP in names:
            # ORT cannot serialize a graph holding compiled EP nodes; the EP stores its compiled programs itself.
            ep_opts = opts[names.index(MIGRAPHX_EP)]
            ep_opts.setdefault("migraphx_model_cache_dir", str(cache.runtime_dir("ort-migraphx-ep")))
            info.settings["cache"] = {"dir": str(cache.root), "kind": "migraphx_model_cache_dir (managed by the EP)"}
            info.notes.append(
                "the MIGraphX EP keeps its compiled programs in migraphx_model_cache_dir; hits are not reported"
            )
            return new(model_arg, sess_options=so, providers=names, provider_options=opts)
        if len(source.to_bytes()) > 1_800_000_000:
            # ORT can only save such a model with external initializers, which this one-file cache does not hold.
            info.notes.append("model over 1.8 GB: the optimized-model cache is not used")
            return new(model_arg, sess_options=so, providers=names, provider_options=opts)
        level = self._so_args[2]
        parts = {
            "recipe": 1,
            "backend": "ort",
            "runtime": self._ort.__version__,
            "model": source.sha256,
            "providers": names,
            "provider_options": opts,
            "graph_optimization": level,
            "precision": self._precision,
            "shapes": {k: [b.min, b.max, b.opt] for k, b in sorted(self._bounds.items())},
            "host": cpu_signature(),  # CPU layout optimizations depend on the vector width
            "gpu": visible_gpu_arch(self._device) if ROCM_EP in names else ("cuda" if CUDA_EP in names else None),
            "disable_cpu_ep_fallback": not self._allow_cpu_nodes,
        }
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
        info.cache_hit = hit
        info.settings["cache"] = {
            "dir": str(cache.root),
            "key": key,
            "kind": "ORT optimized model",
            "hit": hit,
            "graph_optimization_on_load": "disable" if hit and turn_down else level,
        }
        return session

    def _device_name(self, used: list[str]) -> str:
        first = used[0] if used else CPU_EP
        return {MIGRAPHX_EP: "migraphx", ROCM_EP: "rocm", CUDA_EP: "cuda"}.get(first, "cpu") + (
            f":{self._device}" if first != CPU_EP else ""
        )

    def _specs_from_session(self, args: Sequence[Any], graph_specs: Sequence[Any]) -> list[Any]:
        by_name = {s.name: s for s in graph_specs}
        out = []
        for a in args:
            spec = by_name.get(a.name)
            if spec is None:
                raise ModelError(f"onnxruntime reports tensor {a.name!r} that the graph does not declare")
            out.append(spec)
        return out

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
        computes; elsewhere the batches simply run in turn. Results come back in order.

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
        plain = names is not None and (names == ["*"] or any(n not in self._output_names for n in names))
        if self._runner is None or self._buckets or plain:
            return (self.run(batch, outputs=outputs) for batch in batches)
        return self._runner.run_many(batches, self._check_feeds, names, self._datapath.outputs_on, int(prefetch))

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
        if outputs is not None and (outputs == ["*"] or any(n not in self._output_names for n in outputs)):
            return self._run_intermediate(host_feeds(feeds, "outputs= with intermediate tensors"), outputs)
        if self._runner is not None:
            return self._runner.run(feeds, outputs, self._datapath.outputs_on)
        names = outputs if outputs is not None else self._output_names
        try:
            values = self._run_fn(names, feeds)
        except Exception as exc:
            raise _translate_run_error(exc) from None
        return dict(zip(names, values))

    def _run_intermediate(self, feeds: dict[str, Any], outputs: list[str]) -> dict[str, np.ndarray]:
        if self._all_session is None:
            self._all_session, self._all_names = self._build_all_outputs_session()
        names = self._all_names if outputs == ["*"] else outputs
        unknown = [n for n in names if n not in self._all_names]
        if unknown:
            raise InputError(f"outputs: got {unknown}, expected names of tensors in the graph")
        try:
            values = self._all_session.run(names, feeds)
        except Exception as exc:
            raise _translate_run_error(exc) from None
        return dict(zip(names, values))

    def _build_all_outputs_session(self) -> tuple[Any, list[str]]:
        proto = onnx.ModelProto()
        proto.CopyFrom(self._source.proto)
        graph_outputs = {o.name for o in proto.graph.output}
        names = [o.name for o in proto.graph.output]
        for node in proto.graph.node:
            for out in node.output:
                if out and out not in graph_outputs:
                    proto.graph.output.append(onnx.ValueInfoProto(name=out))
                    graph_outputs.add(out)
                    names.append(out)
        names = [o.name for o in proto.graph.output]
        so = self._ort.SessionOptions()
        so.graph_optimization_level = self._ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        providers = self._session.get_providers()
        opts = [without_graphs(self._info.settings["provider_options"].get(p, {})) for p in providers]
        return self._ort.InferenceSession(
            proto.SerializeToString(), sess_options=so, providers=providers, provider_options=opts
        ), names

    def _close(self) -> None:
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self._session = None
        self._all_session = None
        self._run_fn = None


_KNOB_PROVIDERS = {
    "exhaustive_tune": {MIGRAPHX_EP, ROCM_EP, CUDA_EP},
    "tunable_ops": {ROCM_EP, CUDA_EP},
    "memory_limit": {MIGRAPHX_EP, ROCM_EP, CUDA_EP},
    "model_cache_dir": {MIGRAPHX_EP},
    "gpu_graphs": {ROCM_EP, CUDA_EP},
    "prefer_nhwc": {CUDA_EP},
}


def _knob_applies(provider: str, knob: str) -> bool:
    return provider in _KNOB_PROVIDERS.get(knob, set())


def _optimized_model_cache(cache_dir: Any, use_cache: bool | None, optimized_model_path: Any) -> Any:
    """The compiled-model cache the ORT engine uses, or None (see the ``use_cache`` argument)."""
    from ..cache import CACHE_ENV, CompiledModelCache

    if use_cache is not None and not isinstance(use_cache, bool):
        raise OptionError(f"use_cache: got {use_cache!r}, expected True, False or None")
    if use_cache is False:
        if cache_dir is not None:
            raise OptionError("cache_dir: given together with use_cache=False; drop one of them")
        return None
    explicit = use_cache is True or cache_dir is not None
    if not explicit and not os.environ.get(CACHE_ENV):
        return None
    if optimized_model_path is not None:
        if explicit:
            raise OptionError(
                "optimized_model_path: the cache also chooses where the optimized model goes; pass one of them"
            )
        return None  # an explicit path wins over the environment's default cache
    return CompiledModelCache(cache_dir)


def _check_optimized_model_path(value: Any) -> Path:
    """``optimized_model_path`` checked before ONNX Runtime writes to it (its own errors are bare errnos)."""
    from .._files import check_path, file_kind

    path = check_path(value, "optimized_model_path").expanduser()
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OptionError(f"optimized_model_path: '{path}' cannot be used ({exc.strerror or exc})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OptionError(
            f"optimized_model_path: '{path}' is {file_kind(st.st_mode)}; expected a file path (it is overwritten)"
        )
    folder = path.parent
    if not folder.is_dir():
        raise OptionError(f"optimized_model_path: folder '{folder}' of '{path}' does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise OptionError(f"optimized_model_path: folder '{folder}' is not writable")
    return path


def _translate_run_error(exc: Exception) -> Exception:
    text = str(exc).strip()
    if type(exc).__name__ == "InvalidArgument":
        return InputError(f"onnxruntime rejected the feeds: {text}")
    return AmdinferError(f"onnxruntime failed while running: {text}")


def _convert_fp16(proto: onnx.ModelProto, keep_io_types: bool = True) -> onnx.ModelProto:
    try:
        from onnxruntime.transformers.float16 import convert_float_to_float16
    except ImportError as exc:  # pragma: no cover - part of every onnxruntime wheel
        raise BackendUnavailableError("fp16 conversion needs onnxruntime.transformers", backend="ort") from exc
    return convert_float_to_float16(proto, keep_io_types=keep_io_types, disable_shape_infer=False)
