"""The ORT engine's options: one frozen record, each option typed, defaulted and documented once, validated as built.

:class:`OrtOptions` extends :class:`~amdinfer.engines.EngineOptions` (precision, device, shapes, batch buckets,
quantizer) with every option of :class:`~amdinfer.engines.ort.OrtEngine`; :func:`amdinfer.load` builds it from the
user's keywords, the engine reads it, ``engine.info.options`` shows it.

Example:
    >>> opts = OrtOptions(threads=2, graph_optimization="basic", providers=["cpu"])
    >>> opts.threads, opts.level_name, opts.providers
    (2, 'ORT_ENABLE_BASIC', (('CPUExecutionProvider', {}),))
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..._support._quant_protocol import PrecisionQuantizer
from ..._support._validate import check_bool, check_int, check_optional_bool
from ...errors import OptionError
from .._options import EngineOptions, Flag, document_options, option_doc
from ._iobinding import OUTPUTS_ON
from ._providers import GPU_PROVIDERS, resolve_provider_name
from ._shape_sessions import check_shape_sessions, check_warm_shapes
from ._transformer import check_transformer_fusion

__all__ = ["GRAPH_OPTIMIZATION_LEVELS", "KNOBS", "OrtOptions", "ProviderSpec"]

#: ``graph_optimization=`` values and ONNX Runtime's ``GraphOptimizationLevel`` member names.
GRAPH_OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}

#: The typed provider knobs (see :func:`~amdinfer.engines.ort.provider_options`).
KNOBS: tuple[str, ...] = (
    "exhaustive_tune",
    "tunable_ops",
    "memory_limit",
    "model_cache_dir",
    "gpu_graphs",
    "prefer_nhwc",
)

ProviderSpec = str | tuple[str, Mapping[str, Any]]

_KNOB = "a provider knob, mapped to each provider's own option (see provider_options; None: the provider's default)"


def _normalize_spec(spec: Any) -> tuple[str, dict[str, str]]:
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[1], Mapping):
            raise OptionError(f"providers: got {spec!r}, expected a name or (name, {{option: value}})")
        return resolve_provider_name(spec[0]), {str(k): str(v) for k, v in spec[1].items()}
    return resolve_provider_name(spec), {}


@document_options
@dataclass(frozen=True)
class OrtOptions(EngineOptions):
    """Everything :class:`~amdinfer.engines.ort.OrtEngine` takes: the shared engine options and ONNX Runtime's own.

    Example:
        >>> OrtOptions(providers="cpu", threads=1).keywords()
        {'providers': (('CPUExecutionProvider', {}),), 'threads': 1}
        >>> OrtOptions(threads=-1)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: threads: got -1, expected an int >= 0 (0: ONNX Runtime's default)
    """

    providers: tuple[tuple[str, dict[str, str]], ...] | None = field(
        default=None,
        metadata=option_doc(
            "ONNX Runtime providers in order (migraphx, rocm, cuda, cpu, a plugin EP's short name, or full names)",
            "An entry may be ``(name, {option: value})`` to set raw provider options; kept as ``(full name, "
            "options)``. "
            "``None`` tries the MIGraphX EP, the ROCm EP, AMD plugin EPs, the CUDA EP and other plugin EPs in turn and "
            "ends on the CPU, recording in ``info.skipped`` why each was passed over. A named provider that cannot run "
            "(or takes no node) raises :class:`~amdinfer.BackendUnavailableError` with ONNX Runtime's cause and the "
            "fix.",
            flag=Flag(split=True, metavar="P1,P2"),
        ),
    )
    ep_library: tuple[str, ...] = field(
        default=(),
        metadata=option_doc(
            "paths of ONNX Runtime plugin EP libraries to register besides the installed onnxruntime-ep-* packages",
            "(one path or several; each must be a file; see :mod:`amdinfer.engines.ort._plugins`); ``device=`` then "
            "indexes the plugin EP's devices.",
        ),
    )
    threads: int | None = field(
        default=None,
        metadata=option_doc(
            "ONNX Runtime intra-op threads (default: the runtime's, one per core)",
            "(``intra_op_num_threads``; 0 or ``None``: ONNX Runtime's default).",
            flag=Flag(int, minimum=1, metavar="N"),
        ),
    )
    inter_op_threads: int | None = field(
        default=None,
        metadata=option_doc(
            "ONNX Runtime inter-op threads (default: the runtime's)",
            "(``inter_op_num_threads``).",
            flag=Flag(int, minimum=1, metavar="N"),
        ),
    )
    spin_wait: bool | None = field(
        default=None,
        metadata=option_doc(
            "whether ONNX Runtime's intra-op threads busy-wait for work between parallel sections",
            "(session config ``session.intra_op.allow_spinning``; ``None``: ONNX Runtime's default, on). ``False`` "
            "frees "
            "the cores as soon as an operator is done: use it when other threads of the process need the CPU, e.g. "
            ":meth:`Pipeline.map <amdinfer.Pipeline.map>`'s pre/postprocessing on a CPU engine (``docs/pipeline.md``).",
        ),
    )
    graph_optimization: str = field(
        default="all",
        metadata=option_doc(
            "ONNX Runtime graph optimization level: disable, basic, extended or all",
            "(``GraphOptimizationLevel``: :data:`GRAPH_OPTIMIZATION_LEVELS`).",
            flag=Flag(choices=tuple(GRAPH_OPTIMIZATION_LEVELS)),
        ),
    )
    optimized_model_path: Path | None = field(
        default=None,
        metadata=option_doc(
            "where ONNX Runtime writes the optimized model",
            "(``optimized_model_filepath``; checked to be a writable file path).",
        ),
    )
    allow_cpu_nodes: bool = field(
        default=True,
        metadata=option_doc(
            "whether a node the GPU provider cannot take may run on the CPU",
            "``False`` makes it an error at load (ONNX Runtime's ``session.disable_cpu_ep_fallback``) instead of a "
            "silent CPU kernel; ``amdinfer.profile.profile`` lists such nodes when they are allowed.",
        ),
    )
    cache_dir: str | os.PathLike | None = field(
        default=None,
        metadata=option_doc(
            "the compiled-model cache folder", "(see ``docs/cache.md``); giving it turns the cache on."
        ),
    )
    cache: bool | None = field(
        default=None,
        metadata=option_doc(
            "whether to cache the ORT-optimized model",
            "``True`` caches the ORT-optimized model (CPU, ROCm, CUDA EPs) and, for the MIGraphX EP, points "
            "``migraphx_model_cache_dir`` into the cache; ``None`` caches only when ``cache_dir=`` or "
            "``$AMDINFER_CACHE_DIR`` is set; ``False`` never. ``info.cache_hit`` tells.",
        ),
    )
    io_binding: bool | None = field(
        default=None,
        metadata=option_doc(
            "whether to run through IOBinding with device buffers reused per input shape",
            "(``None``: on for GPU providers). Device tensors (DLPack: PyTorch, CuPy, JAX, ``OrtValue``) are then "
            "taken "
            "without a host round trip; see ``docs/gpu.md``.",
        ),
    )
    outputs_on: str = field(
        default="auto",
        metadata=option_doc(
            "where outputs come back: auto, host or device",
            "``auto``: device arrays when any feed is a device tensor, else NumPy; ``device``: "
            ":class:`~amdinfer.DeviceArray`, a DLPack producer.",
        ),
    )
    tuning: bool = field(
        default=True,
        metadata=option_doc(
            "whether amdinfer's tuned provider defaults fill the knobs left at None",
            "(NHWC, exhaustive algorithm search, CUDA/HIP graphs, tunable ops; see "
            ":mod:`amdinfer.engines.ort._tuning`), "
            "recorded in ``info.settings['tuning']``; ``False`` keeps the provider's own defaults.",
        ),
    )
    tf32: bool | None = field(
        default=None,
        metadata=option_doc("CUDA EP use_tf32", "(``None``: provider default, on; ``False`` for strict fp32)."),
    )
    fp16_io: bool = field(
        default=False,
        metadata=option_doc(
            "with precision fp16, make the model's inputs and outputs float16 as well",
            "(fp16 tensors in and out, no casts); the default keeps fp32 IO.",
        ),
    )
    transformer_fusion: str | bool = field(
        default="auto",
        metadata=option_doc(
            "ONNX Runtime's fused attention/LayerNorm/GELU ops for Transformer encoders: auto, on or off",
            "The transformer optimizer runs before any precision rewrite: ``'auto'`` where the provider takes the "
            "fused "
            "graph and it matches, ``True`` required, ``False`` off; what fused is in ``info.notes`` and "
            "``info.settings['transformer_fusion']`` (see :mod:`amdinfer.engines.ort._transformer`).",
            flag=Flag(choices=("auto", "on", "off"), values={"on": True, "off": False}),
        ),
    )
    shape_sessions: int | str = field(
        default="auto",
        metadata=option_doc(
            "sessions kept per input shape",
            "(one per input shape, so that a provider which rebuilds its kernels' state on every shape change, the "
            "CUDA EP's convolutions, pays once per shape): ``'auto'`` (8 on the CUDA EP for a model with an input "
            "varying beyond the batch axis, else off), an int, or 0 (one session); the shapes served are in "
            "``info.settings['shape_sessions']``.",
        ),
    )
    warm_shapes: tuple[Any, ...] = field(
        default=(),
        metadata=option_doc(
            "input shapes built and run once at load, before the first request",
            "(:meth:`OrtEngine.warm <amdinfer.engines.ort.OrtEngine.warm>`): one shape per entry, or ``{input: "
            "shape}``; with ``shape_sessions`` each gets its own session, several built at once; recorded in "
            "``info.settings['warm']``.",
        ),
    )
    exhaustive_tune: bool | None = field(default=None, metadata=option_doc("exhaustive kernel search", _KNOB + "."))
    tunable_ops: bool | None = field(default=None, metadata=option_doc("ONNX Runtime's TunableOp", _KNOB + "."))
    memory_limit: int | None = field(
        default=None, metadata=option_doc("the provider's memory limit in bytes", _KNOB + ".")
    )
    model_cache_dir: str | os.PathLike | None = field(
        default=None, metadata=option_doc("the provider's own compiled-model folder", _KNOB + ".")
    )
    gpu_graphs: bool | None = field(default=None, metadata=option_doc("CUDA/HIP graph capture and replay", _KNOB + "."))
    prefer_nhwc: bool | None = field(default=None, metadata=option_doc("NHWC convolutions", _KNOB + "."))
    precision_quantizer: PrecisionQuantizer | None = field(
        default=None,
        metadata=option_doc(
            "what a bare precision fp16 means on providers without a native fp16 knob",
            "(:class:`~amdinfer._support._quant_protocol.PrecisionQuantizer`); :func:`amdinfer.load` passes "
            ":func:`amdinfer.quantize.precision_quantizer`. Without it (an ``OrtEngine`` built directly), "
            "``precision='fp16'`` there needs ``quantizer=``.",
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.graph_optimization not in GRAPH_OPTIMIZATION_LEVELS:
            raise OptionError(
                f"graph_optimization: got {self.graph_optimization!r}, expected one of "
                f"{list(GRAPH_OPTIMIZATION_LEVELS)}"
            )
        for name in ("threads", "inter_op_threads"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), minimum=0, what="an int >= 0 (0: ONNX Runtime's default)")
        check_optional_bool("spin_wait", self.spin_wait, none_means="ONNX Runtime's default")
        for name in ("allow_cpu_nodes", "tuning", "fp16_io"):
            check_bool(name, getattr(self, name))
        for name in ("cache", "io_binding", "tf32"):
            check_optional_bool(name, getattr(self, name))
        if self.outputs_on not in OUTPUTS_ON:
            raise OptionError(f"outputs_on: got {self.outputs_on!r}, expected one of {list(OUTPUTS_ON)}")
        if self.fp16_io and self.run_precision != "fp16":
            raise OptionError(f"fp16_io=True: got precision={self.run_precision!r}, expected precision='fp16'")
        if self.precision_quantizer is not None and not callable(self.precision_quantizer):
            raise OptionError(
                f"precision_quantizer: got {type(self.precision_quantizer).__name__}, expected a callable "
                "(precision, *, keep_io_types) -> Quantizer | None, e.g. amdinfer.quantize.precision_quantizer"
            )
        self._set("providers", _check_providers(self.providers))
        if self.optimized_model_path is not None:
            self._set("optimized_model_path", _check_optimized_model_path(self.optimized_model_path))
        self._set("ep_library", _check_ep_libraries(self.ep_library))
        self._set("transformer_fusion", check_transformer_fusion(self.transformer_fusion))
        self._set("shape_sessions", check_shape_sessions(self.shape_sessions))
        self._set("warm_shapes", check_warm_shapes(self.warm_shapes))

    @property
    def level_name(self) -> str:
        """ONNX Runtime's ``GraphOptimizationLevel`` member name."""
        return GRAPH_OPTIMIZATION_LEVELS[self.graph_optimization]

    @property
    def knobs(self) -> dict[str, Any]:
        """Typed provider knob -> value (``None``: not set), as :func:`~amdinfer.engines.ort.provider_options` takes."""
        return {k: getattr(self, k) for k in KNOBS}

    def binds_io(self, provider: str) -> bool:
        """Whether the engine runs through IOBinding on ``provider`` (``io_binding=None``: on GPU providers).

        Example:
            >>> OrtOptions().binds_io("CUDAExecutionProvider"), OrtOptions(io_binding=False).binds_io("x")
            (True, False)
        """
        return self.io_binding if self.io_binding is not None else provider in GPU_PROVIDERS

    def describe(self, *, changed_only: bool = False) -> dict[str, Any]:
        """As :meth:`EngineOptions.describe`, each provider shown by its name (with its raw options when it has some).

        Example:
            >>> OrtOptions(providers=["cpu", ("cuda", {"device_id": 1})]).describe(changed_only=True)
            {'providers': ['CPUExecutionProvider', ['CUDAExecutionProvider', {'device_id': '1'}]]}
        """
        out = super().describe(changed_only=changed_only)
        if self.providers is not None and "providers" in out:
            out["providers"] = [name if not raw else [name, dict(raw)] for name, raw in self.providers]
        return out

    def session_settings(self) -> dict[str, Any]:
        """The session options as recorded in ``engine.info.settings["session"]``."""
        return {
            "intra_op_num_threads": self.threads or 0,
            "inter_op_num_threads": self.inter_op_threads or 0,
            "intra_op_allow_spinning": self.spin_wait,  # None: ONNX Runtime's default (on)
            "graph_optimization_level": self.level_name,
            "optimized_model_filepath": str(self.optimized_model_path) if self.optimized_model_path else None,
            "disable_cpu_ep_fallback": not self.allow_cpu_nodes,
        }


def _check_providers(providers: Any) -> tuple[tuple[str, dict[str, str]], ...] | None:
    """``providers=``: names or ``(name, {option: value})``, resolved to full names; ``None``: auto."""
    if providers is None:
        return None
    if isinstance(providers, str):
        providers = [providers]
    candidates = tuple(_normalize_spec(p) for p in providers)
    if not candidates:
        raise OptionError("providers: got an empty list, expected at least one provider")
    return candidates


def _check_optimized_model_path(value: Any) -> Path:
    """``optimized_model_path`` checked before ONNX Runtime writes to it (its own errors are bare errnos)."""
    from ..._support._files import check_path, file_kind

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


def _check_ep_libraries(value: Any) -> tuple[str, ...]:
    """``ep_library=``: one path or a list of paths of ONNX Runtime plugin EP libraries, each an existing file.

    Example:
        >>> _check_ep_libraries("/no/such/libep.so")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: ep_library: '/no/such/libep.so' is not a file; expected the path of ...
    """
    if value is None:
        return ()
    paths: Sequence[Any] = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    out = []
    for item in paths:
        if not isinstance(item, (str, os.PathLike)):
            raise OptionError(f"ep_library: got {item!r}, expected a path (str or os.PathLike)")
        path = Path(item).expanduser()
        if not path.is_file():
            raise OptionError(
                f"ep_library: '{item}' is not a file; expected the path of an ONNX Runtime plugin EP library "
                "(e.g. onnxruntime_ep_openvino.get_library_path())"
            )
        out.append(str(path))
    return tuple(out)
