"""Native AMD MIGraphX engine: parse -> (quantize) -> compile -> run, with compiled programs cached on disk.

``migraphx`` (AMD's Python module from ROCm, not the empty PyPI placeholder of the same name) is imported
when an engine is built. Programs are compiled for the GPU target (``target="gpu"``), or for MIGraphX's
reference CPU target (``target="ref"``: same path, slow, useful without a GPU).

Shapes: by default (``dynamic_shapes="per_shape"``) each distinct set of input shapes gets its own static
program (``parse_onnx(map_input_dims=...)``), compiled on first use and cached in memory and on disk; with
``batch_buckets=`` inputs are padded to a bucket so there is at most one program per bucket.
``dynamic_shapes="program"`` builds one MIGraphX dynamic-shape program from the ``shapes=`` bounds instead
(``map_dyn_input_dims`` with ``migraphx.shape.dynamic_dimension(min, max, {optimal})``).

A MIGraphX program must not run on two threads at once: :meth:`MigraphxEngine.run` holds a lock, so an
engine is safe to share but serializes; use :class:`amdinfer.EnginePool` for one engine per worker.

Example:
    >>> import amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> try:
    ...     engine = amdinfer.load(tiny_cnn(), backend="migraphx", target="ref")
    ... except amdinfer.BackendUnavailableError as exc:  # no MIGraphX on this machine
    ...     print(exc.backend)
    ... else:
    ...     print(engine.info.backend)
    migraphx
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._support._hardware import cpu_signature, visible_gpu_arch
from .._support._validate import check_bool, check_int
from ..cache import CompiledModelCache
from ..errors import AmdinferError, BackendUnavailableError, OptionError
from ..model import ModelSource
from ..types import TensorSpec
from ._migraphx_build import Program, ProgramBuilder, plan_digest, plan_summary
from ._migraphx_quant import MigraphxQuantPlan, migraphx_plan
from ._migraphx_support import (
    HipRuntime,
    Signature,
    check_operators,
    compile_kwargs,
    dynamic_input_dims,
    import_migraphx,
    initial_signature,
    make_arguments,
    migraphx_environment,
    signature_of,
    static_input_dims,
    to_numpy,
)
from ._options import EngineOptions, Flag, document_options, option_doc
from .base import Engine, EngineInfo

__all__ = ["DYNAMIC_SHAPE_MODES", "TARGETS", "MigraphxEngine", "MigraphxOptions", "probe"]

log = logging.getLogger("amdinfer.migraphx")

#: MIGraphX targets: ``gpu`` (ROCm), ``ref`` (reference CPU implementation), ``cpu`` (DNNL; only in builds with it).
TARGETS: tuple[str, ...] = ("gpu", "ref", "cpu")
DYNAMIC_SHAPE_MODES: tuple[str, ...] = ("per_shape", "program")

#: Bump when what amdinfer stores under a key changes.
_CACHE_RECIPE = 1
#: More distinct shapes than this without batch_buckets earns a warning (each one is a compile).
_MANY_PROGRAMS = 8


def probe() -> str | None:
    """``None`` when AMD's ``migraphx`` imports here, else why not and how to fix it.

    Example:
        >>> probe() is None or "migraphx" in probe()
        True
    """
    try:
        import_migraphx()
    except BackendUnavailableError as exc:
        return str(exc)
    return None


@document_options
@dataclass(frozen=True)
class MigraphxOptions(EngineOptions):
    """Everything :class:`MigraphxEngine` takes: the shared engine options and MIGraphX's own, validated as built.

    ``precision``: ``"fp32"``; ``"fp16"`` -> ``migraphx.quantize_fp16``; ``"bf16"`` -> ``migraphx.quantize_bf16``;
    ``"int8"`` needs ``quantizer=`` with calibration data (``migraphx.quantize_int8``); a quantizer's description is
    mapped to ``quantize_fp16`` / ``quantize_int8`` (:func:`~amdinfer.engines._migraphx_quant.migraphx_plan`), and
    int8 with ``dynamic_shapes="program"`` is refused before MIGraphX is called. ``device``: the GPU index for
    ``target="gpu"``, made current with ``hipSetDevice`` around compile, load and run (``docs/migraphx.md``).

    Example:
        >>> MigraphxOptions(target="ref").target
        'ref'
        >>> MigraphxOptions(target="tpu")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: target: got 'tpu', expected one of ['gpu', 'ref', 'cpu']
    """

    target: str = field(
        default="gpu",
        metadata=option_doc(
            "the MIGraphX target: gpu, ref or cpu",
            "``ref`` is MIGraphX's reference CPU target (identical path, slow); ``cpu`` exists in MIGraphX builds with "
            "the DNNL CPU target only.",
            flag=Flag(choices=TARGETS),
        ),
    )
    dynamic_shapes: str = field(
        default="per_shape",
        metadata=option_doc(
            "how MIGraphX serves input shapes: per_shape or program",
            "``per_shape``: a static program per distinct input shape, compiled on first use; ``program``: one "
            "MIGraphX "
            "dynamic-shape program from ``shapes=``.",
        ),
    )
    cache_dir: str | Path | None = field(
        default=None,
        metadata=option_doc(
            "the folder of the compiled-model cache", "(default ``$AMDINFER_CACHE_DIR`` or the user cache folder)."
        ),
    )
    cache: bool = field(
        default=True, metadata=option_doc("whether to store compiled programs (.mxr) and load them on the next start")
    )
    fast_math: bool = field(default=True, metadata=option_doc("compile(fast_math=): faster approximate math functions"))
    exhaustive_tune: bool = field(
        default=False, metadata=option_doc("compile(exhaustive_tune=): search kernel configurations (slow compile)")
    )
    offload_copy: bool = field(
        default=True,
        metadata=option_doc(
            "compile(offload_copy=): MIGraphX copies inputs and outputs between host and GPU itself",
            "``False`` makes the engine copy with ``to_gpu``/``from_gpu`` around each run.",
        ),
    )
    default_dim_value: int | None = field(
        default=None, metadata=option_doc("the size MIGraphX gives to unknown input dims that no bound or shape covers")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.target not in TARGETS:
            raise OptionError(f"target: got {self.target!r}, expected one of {list(TARGETS)}")
        if self.dynamic_shapes not in DYNAMIC_SHAPE_MODES:
            raise OptionError(
                f"dynamic_shapes: got {self.dynamic_shapes!r}, expected one of {list(DYNAMIC_SHAPE_MODES)}"
            )
        for name in ("cache", "fast_math", "exhaustive_tune", "offload_copy"):
            check_bool(name, getattr(self, name))
        if self.cache_dir is not None and not self.cache:
            raise OptionError("cache_dir: given together with cache=False; drop one of them")
        if self.default_dim_value is not None:
            check_int("default_dim_value", self.default_dim_value, minimum=1)
        if not self.offload_copy and self.target != "gpu":
            raise OptionError(f"offload_copy=False: only meaningful for target='gpu', got target={self.target!r}")


class MigraphxEngine(Engine):
    """An AMD MIGraphX program behind the :class:`~amdinfer.Engine` contract.

    Args:
        model: path, bytes, ``onnx.ModelProto`` or ``ModelSource``.
        options: a :class:`MigraphxOptions` record (``None``: built from ``keywords``).
        **keywords: :class:`MigraphxOptions` fields (every option is documented there), when no record is given.

    Raises:
        BackendUnavailableError: ``migraphx`` is missing or is the PyPI placeholder, the target cannot load,
            or no GPU is usable.
        UnsupportedOperatorError: the model uses operators MIGraphX has no parser for (named).
        OptionError: an option is out of range or contradicts another.
        ModelError: MIGraphX cannot parse or compile the model.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> try:
        ...     engine = MigraphxEngine(tiny_cnn(), target="ref", shapes={"input": (1, 3, 32, 32)})
        ... except BackendUnavailableError:
        ...     engine = None  # no MIGraphX here
        >>> engine is None or engine.run(np.zeros((1, 3, 32, 32), np.float32))["logits"].shape == (1, 10)
        True
    """

    backend_name = "migraphx"
    options_type = MigraphxOptions
    native_quantization = True
    _options: MigraphxOptions

    # ------------------------------------------------------------------ construction
    def _load(self, source: ModelSource) -> tuple[list[TensorSpec], list[TensorSpec], EngineInfo]:
        o = self._options
        notes = self._check_precision()
        mgx = import_migraphx()
        self._mgx = mgx
        version = str(getattr(mgx, "__version__", "unknown"))
        if self._precision == "bf16" and self._plan is None and not hasattr(mgx, "quantize_bf16"):
            raise OptionError(
                f"precision='bf16': this MIGraphX ({version}) has no quantize_bf16; upgrade ROCm or use 'fp16'"
            )
        self._offload_copy = o.offload_copy
        self._run_lock = threading.Lock()
        self._programs: dict[Signature, Program] = {}
        self._dyn_program: Program | None = None
        self._cast_noted = False
        info = EngineInfo(
            backend="migraphx",
            device=f"rocm:{self._device}" if o.target == "gpu" else "cpu",
            target=o.target,
            runtime_version=version,
        )
        info.notes.extend(notes)
        target = self._get_target(mgx, o.target)
        self._hip: HipRuntime | None = self._open_device(self._device, info) if o.target == "gpu" else None
        parse_path = source.path if source.path is not None and source._bytes is None else None
        parsed = self._prepare_source(source, info)
        self._check_operators(mgx, parsed, source.name, version, info)
        cache = CompiledModelCache(o.cache_dir) if o.cache else None
        arch = (
            visible_gpu_arch(self._device) if o.target == "gpu" else ("ref" if o.target == "ref" else cpu_signature())
        )
        compile_opts = {"offload_copy": o.offload_copy, "fast_math": o.fast_math, "exhaustive_tune": o.exhaustive_tune}
        info.settings.update(
            {
                "target": o.target,
                "device": self._device if o.target == "gpu" else None,
                "gpu_arch": arch if o.target == "gpu" else None,
                "dynamic_shapes": o.dynamic_shapes,
                "compile": compile_opts,
                "quantization": plan_summary(self._plan, self._precision),
                "cache_dir": str(cache.root) if cache else None,
                "programs": [],
            }
        )
        self._builder = ProgramBuilder(
            mgx,
            target,
            target_name=o.target,
            source=source,
            parsed=parsed,
            parse_path=parse_path,
            precision=self._precision,
            plan=self._plan,
            compile_kwargs=compile_kwargs(**compile_opts),
            default_dim_value=o.default_dim_value,
            cache=cache,
            key_base=self._cache_key_parts(parsed.sha256, version, arch, compile_opts),
            on_device=self._on_device,
            info=info,
        )
        self._first_programs(source.inputs, info)
        return list(source.inputs), list(source.outputs), info

    @staticmethod
    def _check_operators(mgx: Any, parsed: Any, model_name: str, version: str, info: EngineInfo) -> None:
        """Refuse operators this MIGraphX's ONNX parser lacks before it is called (a note when it cannot say)."""
        get_ops = getattr(mgx, "get_onnx_operators", None)
        if get_ops is not None:
            check_operators(parsed.operators(), list(get_ops()), model_name=model_name, version=version)
        else:
            info.notes.append(
                f"MIGraphX {version} has no get_onnx_operators(); unsupported operators surface when parsing"
            )

    def _cache_key_parts(
        self, model_sha256: str, version: str, arch: str, compile_opts: dict[str, bool]
    ) -> dict[str, Any]:
        """What a compiled program's cache key is made of (the builder adds the shapes)."""
        o = self._options
        return {
            "recipe": _CACHE_RECIPE,
            "backend": "migraphx",
            "runtime": version,
            "target": o.target,
            "arch": arch,
            "model": model_sha256,
            "precision": self._precision,
            "quantization": plan_digest(self._plan),
            "compile": compile_opts,
            "default_dim_value": o.default_dim_value,
            "dynamic_shapes": o.dynamic_shapes,
            "env": migraphx_environment(),
        }

    def _check_precision(self) -> list[str]:
        """Map the quantizer (or precision) to MIGraphX's knobs; refuse what MIGraphX cannot do safely."""
        self._plan: MigraphxQuantPlan | None = None
        notes: list[str] = []
        if self._precision == "fp64":
            raise OptionError("precision='fp64': MIGraphX computes in fp32 at most; use backend='reference' for fp64")
        if self._quantizer is not None:
            self._plan = plan = migraphx_plan(self._quantizer, self._source.proto)
            if plan.kind == "int8" and not plan.calibration:
                raise OptionError("quantizer: it asks for int8 but gives no calibration data")
            notes += [f"quantizer setting MIGraphX cannot express (not applied): {u}" for u in plan.unhonoured]
        elif self._precision == "int8":
            raise OptionError(
                "precision='int8': MIGraphX int8 needs calibration data; pass quantizer=Int8Quantizer(calibration=...) "
                "(uncalibrated int8 gives wrong answers)"
            )
        if self._precision == "int8" and self._options.dynamic_shapes == "program":
            # Checked before MIGraphX is called: MIGraphX 2.16's quantize_int8 raises "lens() called on a dynamic
            # shape" in its quantize_8bits pass, and builds with assertions on abort the whole process there.
            raise OptionError(
                "precision='int8' with dynamic_shapes='program': migraphx.quantize_int8 cannot quantize a "
                "dynamic-shape program (MIGraphX 2.16 raises, builds with assertions abort the process), so amdinfer "
                "does not call it; use dynamic_shapes='per_shape' (static programs, bounded by batch_buckets=)"
            )
        return notes

    @staticmethod
    def _get_target(mgx: Any, target: str) -> Any:
        try:
            return mgx.get_target(target)
        except Exception as exc:
            raise BackendUnavailableError(
                f"backend 'migraphx': target {target!r} cannot load ({exc}); "
                + (
                    "the gpu target needs ROCm's libmigraphx_gpu and a working HIP install"
                    if target == "gpu"
                    else "the cpu target exists only in MIGraphX builds with DNNL; "
                    "use target='ref' for the reference CPU target"
                ),
                backend="migraphx",
                cause=str(exc),
            ) from None

    def _first_programs(self, inputs: list[TensorSpec], info: EngineInfo) -> None:
        o = self._options
        if o.dynamic_shapes == "program":
            dims = dynamic_input_dims(inputs, self._bounds, default_dim_value=o.default_dim_value)
            self._dyn_program = self._builder.build(dims, None)
            return
        first = initial_signature(inputs, self._bounds, self._buckets, o.default_dim_value)
        if first is not None:
            self._programs[signature_of(first)] = self._builder.build(static_input_dims(first), first)
        else:
            info.notes.append(
                "inputs have dynamic dimensions and no shapes= bounds: a program is compiled for each new input "
                "shape on first use (give shapes= and batch_buckets= to bound the number of compiles)"
            )

    def _open_device(self, device: int, info: EngineInfo) -> HipRuntime | None:
        hip = HipRuntime.find()
        if hip is None:
            if device != 0:
                raise BackendUnavailableError(
                    f"backend 'migraphx': device={device} needs hipSetDevice from libamdhip64, which could not be "
                    "loaded; put /opt/rocm/lib on LD_LIBRARY_PATH (or select the GPU with HIP_VISIBLE_DEVICES "
                    "before starting Python and use device=0)",
                    backend="migraphx",
                )
            info.notes.append("libamdhip64 not reachable through ctypes: MIGraphX uses HIP's current device")
            return None
        count = hip.device_count()
        if count == 0:
            raise BackendUnavailableError(
                "backend 'migraphx': HIP sees no GPU (check `rocminfo`, /dev/kfd permissions and HIP_VISIBLE_DEVICES); "
                "use target='ref' to run MIGraphX on the CPU",
                backend="migraphx",
            )
        if device >= count:
            raise OptionError(f"device: got {device}, expected an index below {count} (the GPUs HIP sees)")
        info.settings["hip_runtime"] = hip.path
        return hip

    @staticmethod
    def _prepare_source(src: ModelSource, info: EngineInfo) -> ModelSource:
        if src.proto.functions:
            # MIGraphX's parser has no model-local functions; onnx inlines them exactly.
            from onnx import inliner

            inlined = inliner.inline_local_functions(src.proto)
            info.notes.append(f"inlined {len(src.proto.functions)} model-local function(s) for MIGraphX's parser")
            return src.derived(inlined, check=False)
        return src

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        if self._hip is None:
            yield
        else:
            with self._hip.using(self._device):
                yield

    # ------------------------------------------------------------------ running
    @property
    def programs(self) -> int:
        """How many compiled programs the engine holds (one per input-shape signature, or one dynamic)."""
        return len(self._programs) + (self._dyn_program is not None)

    def _program_for(self, feeds: Mapping[str, np.ndarray]) -> Program:
        if self._dyn_program is not None:
            return self._dyn_program
        shapes = {name: tuple(feeds[name].shape) for name in self._input_names}
        sig = signature_of(shapes)
        program = self._programs.get(sig)
        if program is None:
            if len(self._programs) == _MANY_PROGRAMS and not self._buckets:
                log.warning(
                    "migraphx: compiling a program for a %d-th distinct input shape %s; pass batch_buckets= "
                    "(and shapes=) to bound the number of compiles",
                    _MANY_PROGRAMS + 1,
                    shapes,
                )
            program = self._builder.build(static_input_dims(shapes), shapes)
            self._programs[sig] = program
        return program

    def _run(self, feeds: dict[str, Any], outputs: list[str] | None) -> dict[str, np.ndarray]:
        mgx = self._mgx
        with self._run_lock:
            program = self._program_for(feeds)
            with self._on_device():
                args, keep = make_arguments(feeds, mgx.argument, program.params)
                if not self._offload_copy:
                    args = {k: mgx.to_gpu(v) for k, v in args.items()}
                    for name, shape in program.output_params + program.scratch_params:
                        args[name] = mgx.allocate_gpu(shape)
                try:
                    results = program.prog.run(args)
                except Exception as exc:
                    raise AmdinferError(
                        f"migraphx failed while running {self._source.name}: {str(exc).strip()}"
                    ) from None
                arrays = []
                for value, spec in zip(results, self._outputs):
                    host = value if self._offload_copy else mgx.from_gpu(value)
                    arr = to_numpy(host)
                    if arr.dtype != spec.dtype:
                        if not self._cast_noted:
                            self._info.notes.append(
                                f"MIGraphX returned {arr.dtype} for output {spec.name!r}; "
                                f"cast to the model's {spec.dtype}"
                            )
                            self._cast_noted = True
                        arr = arr.astype(spec.dtype)
                    arrays.append(arr)
                del keep
        named = dict(zip(program.output_names, arrays))
        wanted = outputs if outputs is not None else self._output_names
        return {name: named[name] for name in wanted}

    def _close(self) -> None:
        self._programs = {}
        self._dyn_program = None
