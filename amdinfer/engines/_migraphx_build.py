"""MIGraphX's parse -> quantize -> compile -> cache chain, one program per input-shape signature.

:class:`ProgramBuilder` holds what every program of an engine shares (the MIGraphX module, target,
model, quantization plan, compile options, cache key) and builds one :class:`Program` per call;
:class:`~amdinfer.engines.migraphx.MigraphxEngine` decides when to call it.

Example:
    >>> Program.__dataclass_fields__.keys() >= {"prog", "params", "output_names"}
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AmdinferError, BackendUnavailableError, ModelError, OptionError, UnsupportedOperatorError
from ..model import ModelSource
from ._migraphx_support import (
    calibration_for,
    looks_like_device_error,
    output_parameter_index,
    recover_output_names,
    unknown_operator_in,
)
from .base import EngineInfo

__all__ = ["Program", "ProgramBuilder", "plan_digest", "plan_summary"]

log = logging.getLogger("amdinfer.migraphx")


@dataclass
class Program:
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


def plan_digest(plan: Any) -> Any:
    """The quantization plan's part of the cache key (calibration data hashed).

    Example:
        >>> plan_digest(None) is None
        True
    """
    if plan is None:
        return None
    h = hashlib.sha256()
    for sample in plan.calibration or []:
        for name in sorted(sample):
            a = np.ascontiguousarray(sample[name])
            h.update(f"{name}:{a.dtype}:{a.shape}".encode())
            h.update(a.tobytes())
    names = plan.ins_names
    return {"kind": plan.kind, "ins_names": sorted(names) if names else None, "calibration": h.hexdigest()[:32]}


def plan_summary(plan: Any, precision: str) -> str:
    """What MIGraphX is asked to do, for ``info.settings["quantization"]``.

    Example:
        >>> plan_summary(None, "fp16")
        "migraphx.quantize_fp16(ins_names=['all'])"
    """
    if plan is not None:
        call = {"fp16": "quantize_fp16", "bf16": "quantize_bf16", "int8": "quantize_int8"}[plan.kind]
        n_cal = len(plan.calibration or [])
        return f"migraphx.{call}(ins_names={plan.ins_names or 'default'})" + (
            f", {n_cal} calibration batches" if n_cal else ""
        )
    if precision == "fp16":
        return "migraphx.quantize_fp16(ins_names=['all'])"
    if precision == "bf16":
        return "migraphx.quantize_bf16(ins_names=['all'])"
    return "none (fp32)"


class ProgramBuilder:
    """Builds the programs of one engine.

    Args:
        mgx: the ``migraphx`` module.
        target: the MIGraphX target object; ``target_name`` its name.
        source: the model (``parsed``: the copy MIGraphX's parser reads, functions inlined;
            ``parse_path``: a file to parse from instead of bytes).
        precision: the engine's precision; ``plan``: the quantizer's :class:`MigraphxQuantPlan`.
        compile_kwargs: ``program.compile`` options.
        default_dim_value: for unknown input dims.
        cache: the compiled-model cache (``None``: off); ``key_base``: the engine's key parts.
        on_device: a context manager making the engine's GPU current.
        info: the engine's info (programs are recorded there).
    """

    def __init__(
        self,
        mgx: Any,
        target: Any,
        *,
        target_name: str,
        source: ModelSource,
        parsed: ModelSource,
        parse_path: Any,
        precision: str,
        plan: Any,
        compile_kwargs: dict[str, Any],
        default_dim_value: int | None,
        cache: Any,
        key_base: dict[str, Any],
        on_device: Any,
        info: EngineInfo,
    ) -> None:
        self._mgx = mgx
        self._target = target
        self._target_name = target_name
        self._source = source
        self._parsed = parsed
        self._parse_path = parse_path
        self._precision = precision
        self._plan = plan
        self._compile_kwargs = compile_kwargs
        self._default_dim_value = default_dim_value
        self._cache = cache
        self._key_base = key_base
        self._on_device = on_device if on_device is not None else contextlib.nullcontext
        self._info = info

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
        src = self._parsed
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
        plan = self._plan
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
            if shapes is None:
                hint = "; the program has dynamic input dimensions: use dynamic_shapes='per_shape'"
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

    def build(self, dims: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]] | None) -> Program:
        """Parse, quantize and compile a program for ``dims`` (or load it from the cache); record it in info."""
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

    def _describe(self, prog: Any, shapes: Mapping[str, tuple[int, ...]] | None) -> Program:
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
        return Program(
            prog=prog,
            params=params,
            output_names=names,
            output_params=[(n, s) for _, n, s in sorted(outs, key=lambda t: t[0])],
            scratch_params=scratch,
            shapes=dict(shapes) if shapes is not None else None,
            cache_hit=False,
            seconds=0.0,
        )

    def _record(self, program: Program, dims: Mapping[str, Any]) -> None:
        info = self._info
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
