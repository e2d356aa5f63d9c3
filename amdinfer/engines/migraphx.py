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
import hashlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import CompiledModelCache, cpu_signature, visible_gpu_arch
from ..errors import AmdinferError, BackendUnavailableError, ModelError, OptionError, UnsupportedOperatorError
from ..model import ModelLike, ModelSource
from ._migraphx_support import (
    HipRuntime,
    Signature,
    calibration_for,
    check_operators,
    compile_kwargs,
    dynamic_input_dims,
    import_migraphx,
    initial_signature,
    looks_like_device_error,
    make_arguments,
    migraphx_environment,
    output_parameter_index,
    recover_output_names,
    signature_of,
    static_input_dims,
    to_numpy,
    unknown_operator_in,
)
from .base import Engine, EngineInfo

__all__ = ["DYNAMIC_SHAPE_MODES", "TARGETS", "MigraphxEngine", "probe"]

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


@dataclass
class _Program:
    """One compiled MIGraphX program and what is needed to call it."""

    prog: Any
    params: list[str]
    output_names: list[str]
    output_params: list[tuple[str, Any]]
    scratch_params: list[tuple[str, Any]]
    shapes: dict[str, tuple[int, ...]] | None
    cache_hit: bool
    seconds: float


def _shape_lens(shape: Any) -> tuple[int, ...] | None:
    """``lens()`` of a migraphx.shape, or None for a dynamic one."""
    try:
        if hasattr(shape, "dynamic") and shape.dynamic():
            return None
        return tuple(int(d) for d in shape.lens())
    except Exception:
        return None


class MigraphxEngine(Engine):
    """An AMD MIGraphX program behind the :class:`~amdinfer.Engine` contract.

    Args:
        model: path, bytes, ``onnx.ModelProto`` or ``ModelSource``.
        target: ``"gpu"`` (default), ``"ref"`` (MIGraphX's reference CPU target; identical path, slow) or
            ``"cpu"`` (MIGraphX builds with the DNNL CPU target only).
        device: GPU index for ``target="gpu"``; made current with ``hipSetDevice`` around compile, load
            and run (no environment variables needed; see ``docs/migraphx.md``).
        precision: ``"fp32"``; ``"fp16"`` -> ``migraphx.quantize_fp16``; ``"bf16"`` ->
            ``migraphx.quantize_bf16``; ``"int8"`` needs ``quantizer=`` with calibration data
            (``migraphx.quantize_int8``).
        shapes: per-input bounds ``{name: [min_shape, max_shape(, opt_shape)]}`` or one static shape.
        batch_buckets: batch sizes to pad to (one compiled program per bucket at most).
        dynamic_shapes: ``"per_shape"`` (a static program per distinct input shape, compiled on first use)
            or ``"program"`` (one MIGraphX dynamic-shape program from ``shapes=``).
        cache_dir: folder of the compiled-model cache (default ``$AMDINFER_CACHE_DIR`` or the user cache dir).
        use_cache: store compiled programs (``.mxr``) and load them on the next start.
        fast_math: ``compile(fast_math=)``: faster approximate math functions.
        exhaustive_tune: ``compile(exhaustive_tune=)``: search kernel configurations (slow compile).
        offload_copy: ``compile(offload_copy=)``: MIGraphX copies inputs/outputs between host and GPU
            itself; ``False`` makes the engine copy with ``to_gpu``/``from_gpu`` around each run.
        default_dim_value: size MIGraphX gives to unknown input dims that no bound or shape covers.
        quantizer: an amdinfer quantizer; its ``migraphx_plan()`` decides ``quantize_fp16``/``quantize_int8``.

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

    def __init__(
        self,
        model: ModelLike,
        *,
        target: str = "gpu",
        device: int = 0,
        precision: str = "fp32",
        shapes: Mapping[str, Any] | None = None,
        batch_buckets: Sequence[int] | None = None,
        dynamic_shapes: str = "per_shape",
        cache_dir: str | Path | None = None,
        use_cache: bool = True,
        fast_math: bool = True,
        exhaustive_tune: bool = False,
        offload_copy: bool = True,
        default_dim_value: int | None = None,
        quantizer: Any = None,
    ) -> None:
        self._quant_plan: Any = None
        self._rewritten = False  # a quantizer without migraphx_plan() rewrote the model itself
        self._pre_notes: list[str] = []
        super().__init__(
            model, precision=precision, device=device, shapes=shapes, batch_buckets=batch_buckets, quantizer=quantizer
        )
        self._check_options(
            target, dynamic_shapes, cache_dir, use_cache, fast_math, exhaustive_tune, offload_copy, default_dim_value
        )
        mgx = import_migraphx()
        self._mgx = mgx
        version = str(getattr(mgx, "__version__", "unknown"))
        if (
            self._precision == "bf16"
            and self._quant_plan is None
            and not self._rewritten
            and not hasattr(mgx, "quantize_bf16")
        ):
            raise OptionError(
                f"precision='bf16': this MIGraphX ({version}) has no quantize_bf16; upgrade ROCm or use 'fp16'"
            )

        self._target_name = target
        self._dynamic_mode = dynamic_shapes
        self._offload_copy = offload_copy
        self._compile_kwargs = compile_kwargs(
            offload_copy=offload_copy, fast_math=fast_math, exhaustive_tune=exhaustive_tune
        )
        self._default_dim_value = default_dim_value
        self._run_lock = threading.Lock()
        self._programs: dict[Signature, _Program] = {}
        self._dyn_program: _Program | None = None
        self._cast_noted = False

        info = EngineInfo(
            backend="migraphx",
            device=f"rocm:{self._device}" if target == "gpu" else "cpu",
            target=target,
            runtime_version=version,
        )
        info.notes.extend(self._pre_notes)
        self._info_build = info

        try:
            self._target = mgx.get_target(target)
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

        self._hip: HipRuntime | None = None
        if target == "gpu":
            self._hip = self._open_device(self._device, info)

        self._mgx_source = self._prepare_source(info)
        get_ops = getattr(mgx, "get_onnx_operators", None)
        if get_ops is not None:
            check_operators(
                self._mgx_source.operators(), list(get_ops()), model_name=self._source.name, version=version
            )
        else:
            info.notes.append(
                f"MIGraphX {version} has no get_onnx_operators(); unsupported operators surface when parsing"
            )

        self._cache = CompiledModelCache(cache_dir) if use_cache else None
        arch = visible_gpu_arch(self._device) if target == "gpu" else ("ref" if target == "ref" else cpu_signature())
        self._key_base = {
            "recipe": _CACHE_RECIPE,
            "backend": "migraphx",
            "runtime": version,
            "target": target,
            "arch": arch,
            "model": self._mgx_source.sha256,
            "precision": self._precision,
            "quantization": self._plan_digest(),
            "compile": {"offload_copy": offload_copy, "fast_math": fast_math, "exhaustive_tune": exhaustive_tune},
            "default_dim_value": default_dim_value,
            "dynamic_shapes": dynamic_shapes,
            "env": migraphx_environment(),
        }
        info.settings.update(
            {
                "target": target,
                "device": self._device if target == "gpu" else None,
                "gpu_arch": arch if target == "gpu" else None,
                "dynamic_shapes": dynamic_shapes,
                "compile": {"offload_copy": offload_copy, "fast_math": fast_math, "exhaustive_tune": exhaustive_tune},
                "quantization": self._plan_summary(),
                "cache_dir": str(self._cache.root) if self._cache else None,
                "programs": [],
            }
        )

        inputs = self._source.inputs
        if dynamic_shapes == "program":
            dims = dynamic_input_dims(inputs, self._bounds, default_dim_value=default_dim_value)
            self._dyn_program = self._build(dims, None)
        else:
            first = initial_signature(inputs, self._bounds, self._buckets, default_dim_value)
            if first is not None:
                self._programs[signature_of(first)] = self._build(static_input_dims(first), first)
            else:
                info.notes.append(
                    "inputs have dynamic dimensions and no shapes= bounds: a program is compiled for each new input "
                    "shape on first use (give shapes= and batch_buckets= to bound the number of compiles)"
                )
        del self._info_build
        self._finish_init(inputs, self._source.outputs, info)

    # ------------------------------------------------------------------ construction helpers
    def _check_options(
        self,
        target: str,
        dynamic_shapes: str,
        cache_dir: Any,
        use_cache: bool,
        fast_math: bool,
        exhaustive_tune: bool,
        offload_copy: bool,
        default_dim_value: int | None,
    ) -> None:
        if target not in TARGETS:
            raise OptionError(f"target: got {target!r}, expected one of {list(TARGETS)}")
        if dynamic_shapes not in DYNAMIC_SHAPE_MODES:
            raise OptionError(f"dynamic_shapes: got {dynamic_shapes!r}, expected one of {list(DYNAMIC_SHAPE_MODES)}")
        for name, value in (
            ("use_cache", use_cache),
            ("fast_math", fast_math),
            ("exhaustive_tune", exhaustive_tune),
            ("offload_copy", offload_copy),
        ):
            if not isinstance(value, bool):
                raise OptionError(f"{name}: got {value!r}, expected True or False")
        if cache_dir is not None and not use_cache:
            raise OptionError("cache_dir: given together with use_cache=False; drop one of them")
        if default_dim_value is not None and (
            not isinstance(default_dim_value, int) or isinstance(default_dim_value, bool) or default_dim_value < 1
        ):
            raise OptionError(f"default_dim_value: got {default_dim_value!r}, expected an int >= 1")
        if self._precision == "fp64":
            raise OptionError("precision='fp64': MIGraphX computes in fp32 at most; use backend='reference' for fp64")
        if self._precision == "int8" and self._quant_plan is None and not self._rewritten:
            raise OptionError(
                "precision='int8': MIGraphX int8 needs calibration data; pass quantizer=Int8Quantizer(calibration=...) "
                "(uncalibrated int8 gives wrong answers)"
            )
        if not offload_copy and target != "gpu":
            raise OptionError(f"offload_copy=False: only meaningful for target='gpu', got target={target!r}")

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

    def _prepare_source(self, info: EngineInfo) -> ModelSource:
        src = self._source
        # A file with external data is parsed from its path (MIGraphX reads the data next to it); decided
        # before anything serializes the model, which would fill in its bytes.
        self._parse_path = src.path if src.path is not None and src._bytes is None else None
        if src.proto.functions:
            # MIGraphX's parser has no model-local functions; onnx inlines them exactly.
            from onnx import inliner

            inlined = inliner.inline_local_functions(src.proto)
            info.notes.append(f"inlined {len(src.proto.functions)} model-local function(s) for MIGraphX's parser")
            return ModelSource.from_any(inlined, check=False)
        return src

    def _apply_quantizer(self, quantizer: Any) -> None:
        plan_fn = getattr(quantizer, "migraphx_plan", None)
        if plan_fn is None:
            super()._apply_quantizer(quantizer)
            self._rewritten = True
            self._pre_notes.append(
                f"quantizer {type(quantizer).__name__} has no migraphx_plan(): the model it rewrote is parsed as is"
            )
            return
        wanted = getattr(quantizer, "precision", None)
        if self._precision not in ("fp32", wanted):
            raise OptionError(f"precision={self._precision!r} contradicts quantizer precision {wanted!r}; pass one")
        plan = plan_fn([s.name for s in self._source.inputs])
        kind = getattr(plan, "kind", None)
        if kind not in ("fp16", "bf16", "int8"):
            raise OptionError(f"quantizer: its migraphx_plan() has kind {kind!r}, expected 'fp16', 'bf16' or 'int8'")
        if kind == "int8" and not getattr(plan, "calibration", None):
            raise OptionError("quantizer: its int8 migraphx_plan() carries no calibration data")
        self._quant_plan = plan
        self._precision = kind
        for item in getattr(plan, "unhonoured", None) or []:
            self._pre_notes.append(f"quantizer setting MIGraphX cannot express (not applied): {item}")

    def _plan_digest(self) -> Any:
        plan = self._quant_plan
        if plan is None:
            return None
        h = hashlib.sha256()
        for sample in getattr(plan, "calibration", None) or []:
            for name in sorted(sample):
                a = np.ascontiguousarray(sample[name])
                h.update(f"{name}:{a.dtype}:{a.shape}".encode())
                h.update(a.tobytes())
        names = getattr(plan, "ins_names", None)
        return {"kind": plan.kind, "ins_names": sorted(names) if names else None, "calibration": h.hexdigest()[:32]}

    def _plan_summary(self) -> str:
        plan = self._quant_plan
        if plan is not None:
            names = getattr(plan, "ins_names", None)
            call = {"fp16": "quantize_fp16", "bf16": "quantize_bf16", "int8": "quantize_int8"}[plan.kind]
            n_cal = len(getattr(plan, "calibration", None) or [])
            return f"migraphx.{call}(ins_names={names or 'default'})" + (
                f", {n_cal} calibration batches" if n_cal else ""
            )
        if self._precision == "fp16":
            return "migraphx.quantize_fp16(ins_names=['all'])"
        if self._precision == "bf16":
            return "migraphx.quantize_bf16(ins_names=['all'])"
        return "none (fp32)"

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        if self._hip is None:
            yield
        else:
            with self._hip.using(self._device):
                yield

    # ------------------------------------------------------------------ parse, quantize, compile
    def _parse(self, dims: Mapping[str, Any]) -> Any:
        mgx = self._mgx
        kwargs: dict[str, Any] = {}
        if dims.get("map_input_dims"):
            kwargs["map_input_dims"] = {k: list(v) for k, v in dims["map_input_dims"].items()}
        if dims.get("map_dyn_input_dims"):
            dd = mgx.shape.dynamic_dimension
            kwargs["map_dyn_input_dims"] = {
                name: [dd(lo, hi, set(opts)) if opts else dd(lo, hi) for lo, hi, opts in axes]
                for name, axes in dims["map_dyn_input_dims"].items()
            }
        if self._default_dim_value is not None:
            kwargs["default_dim_value"] = int(self._default_dim_value)
        src = self._mgx_source
        try:
            if self._parse_path is not None and src is self._source:
                return mgx.parse_onnx(str(self._parse_path), **kwargs)
            return mgx.parse_onnx_buffer(src.to_bytes(), **kwargs)
        except TypeError as exc:
            raise BackendUnavailableError(
                f"backend 'migraphx': this MIGraphX ({mgx.__version__}) does not take parse_onnx options "
                f"{sorted(kwargs)} ({exc}); upgrade ROCm, or use dynamic_shapes='per_shape'",
                backend="migraphx",
                cause=str(exc),
            ) from None
        except Exception as exc:
            text = str(exc).strip()
            op = unknown_operator_in(text)
            if op is not None:
                raise UnsupportedOperatorError(
                    f"model {self._source.name}: MIGraphX has no ONNX parser for {op!r} ({text})", operators=[op]
                ) from None
            hint = ""
            if kwargs.get("map_dyn_input_dims"):
                # e.g. MIGraphX 2.16's dynamic shapes stop at a YOLOv8 head (Reshape [0, C, -1] + Concat), which
                # it parses fine for static shapes.
                hint = (
                    " (while parsing with dynamic input dimensions; MIGraphX's dynamic-shape support does not cover "
                    "every model: dynamic_shapes='per_shape' parses a static program per input shape instead, "
                    "bounded by batch_buckets=)"
                )
            raise ModelError(f"model {self._source.name}: MIGraphX cannot parse it: {text}{hint}") from None

    def _quantize(self, prog: Any, shapes: Mapping[str, tuple[int, ...]] | None) -> None:
        mgx = self._mgx
        plan = self._quant_plan
        if plan is None and self._rewritten:
            return  # the quantizer already rewrote the model (e.g. QDQ int8, fp16 conversion)
        kind = plan.kind if plan is not None else self._precision
        names = getattr(plan, "ins_names", None) if plan is not None else None
        try:
            if kind == "fp16":
                mgx.quantize_fp16(prog, ins_names=list(names)) if names else mgx.quantize_fp16(prog)
            elif kind == "bf16":
                mgx.quantize_bf16(prog, ins_names=list(names)) if names else mgx.quantize_bf16(prog)
            elif kind == "int8":
                batches = calibration_for(plan.calibration, shapes)
                args = [{k: mgx.argument(v) for k, v in b.items()} for b in batches]  # `batches` keeps the memory alive
                if names:
                    try:
                        mgx.quantize_int8(prog, self._target, calibration=args, ins_names=set(names))
                    except TypeError:  # builds whose binding takes a list
                        mgx.quantize_int8(prog, self._target, calibration=args, ins_names=list(names))
                else:
                    mgx.quantize_int8(prog, self._target, calibration=args)
                del batches
        except AmdinferError:
            raise
        except Exception as exc:
            hint = ""
            if shapes is None and self._dynamic_mode == "program":
                # MIGraphX 2.16 (f729a52, ref target): quantize_int8 on a dynamic program fails in its
                # quantize_8bits pass with "lens() called on a dynamic shape"; static programs quantize.
                hint = (
                    "; the program has dynamic input dimensions (dynamic_shapes='program'), which this MIGraphX "
                    "could not quantize: use dynamic_shapes='per_shape' (static programs, bounded by batch_buckets=)"
                )
            raise OptionError(
                f"precision={kind!r}: migraphx.quantize_{kind} refused the program: {str(exc).strip()}{hint}"
            ) from None

    def _compile(self, prog: Any) -> None:
        try:
            prog.compile(self._target, **self._compile_kwargs)
        except TypeError as exc:
            raise BackendUnavailableError(
                f"backend 'migraphx': this MIGraphX ({self._mgx.__version__}) does not take compile options "
                f"{sorted(self._compile_kwargs)} ({exc}); upgrade ROCm or leave them at their defaults",
                backend="migraphx",
                cause=str(exc),
            ) from None
        except Exception as exc:
            text = str(exc).strip()
            if looks_like_device_error(text):
                raise BackendUnavailableError(
                    f"backend 'migraphx': compiling for target {self._target_name!r} failed: {text}",
                    backend="migraphx",
                    cause=text,
                ) from None
            raise ModelError(f"model {self._source.name}: MIGraphX cannot compile it: {text}") from None

    def _build(self, dims: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]] | None) -> _Program:
        mgx = self._mgx
        timing: dict[str, float] = {}

        def build(tmp: Path | None) -> Any:
            t0 = time.perf_counter()
            prog = self._parse(dims)
            self._quantize(prog, shapes)
            self._compile(prog)
            timing["compile_seconds"] = time.perf_counter() - t0
            if tmp is not None:
                try:
                    mgx.save(prog, str(tmp), format="msgpack")
                except Exception as exc:  # a full disk must not fail the load
                    log.warning("migraphx.save to the cache failed (%s); the program is used but not cached", exc)
            return prog

        def load(path: Path) -> Any:
            prog = mgx.load(str(path), format="msgpack")
            if hasattr(prog, "is_compiled") and not prog.is_compiled():
                raise ModelError("the stored program is not compiled")
            self._describe(prog, shapes)  # raises when it does not fit this model
            return prog

        parts = {**self._key_base, "inputs": dims}
        t0 = time.perf_counter()
        with self._on_device():
            if self._cache is not None:
                key = self._cache.key(**parts)
                prog, hit = self._cache.get_or_build(
                    key,
                    parts=parts,
                    build=build,
                    load=load,
                    suffix=".mxr",
                    meta=lambda: {
                        "compile_seconds": round(timing.get("compile_seconds", 0.0), 3),
                        "model": self._source.name,
                    },
                )
            else:
                prog, hit = build(None), False
        seconds = time.perf_counter() - t0
        program = self._describe(prog, shapes)
        program.cache_hit, program.seconds = hit, seconds
        self._record(program, dims)
        return program

    def _describe(self, prog: Any, shapes: Mapping[str, tuple[int, ...]] | None) -> _Program:
        param_shapes = dict(prog.get_parameter_shapes())
        input_names = {s.name for s in self._source.inputs}
        params, outs, scratch = [], [], []
        for name, shape in param_shapes.items():
            index = output_parameter_index(name)
            if name in input_names:
                params.append(name)
            elif index is not None:
                outs.append((index, name, shape))
            else:
                scratch.append((name, shape))
        returned = [_shape_lens(s) for s in prog.get_output_shapes()]
        names = recover_output_names(self._source.outputs, returned)
        return _Program(
            prog=prog,
            params=params,
            output_names=names,
            output_params=[(n, s) for _, n, s in sorted(outs, key=lambda t: t[0])],
            scratch_params=scratch,
            shapes=dict(shapes) if shapes is not None else None,
            cache_hit=False,
            seconds=0.0,
        )

    def _record(self, program: _Program, dims: Mapping[str, Any]) -> None:
        info = getattr(self, "_info_build", None) or self._info
        entries = info.settings.setdefault("programs", [])
        entries.append({"inputs": dict(dims), "cache_hit": program.cache_hit, "seconds": round(program.seconds, 4)})
        info.compile_seconds += program.seconds
        info.cache_hit = all(e["cache_hit"] for e in entries)
        log.info(
            "migraphx: %s program for %s in %.2f s",
            "loaded cached" if program.cache_hit else "compiled",
            dims,
            program.seconds,
        )

    # ------------------------------------------------------------------ running
    @property
    def programs(self) -> int:
        """How many compiled programs the engine holds (one per input-shape signature, or one dynamic)."""
        return len(self._programs) + (self._dyn_program is not None)

    def _program_for(self, feeds: Mapping[str, np.ndarray]) -> _Program:
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
            program = self._build(static_input_dims(shapes), shapes)
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
