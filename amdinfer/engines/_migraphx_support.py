"""Glue between amdinfer and AMD MIGraphX's Python module that does not need ``migraphx`` to run.

Everything here is plain Python on plain data, so it is unit-tested on machines without MIGraphX: the
operator check against ``migraphx.get_onnx_operators()``, the mapping of ``shapes=`` bounds to
``parse_onnx``'s ``map_input_dims`` / ``map_dyn_input_dims``, output-name recovery, argument conversion,
int8 calibration re-batching and ``compile`` keywords. Importing MIGraphX, its environment and HIP device
selection live in :mod:`amdinfer.engines._migraphx_runtime` (re-exported here).

The MIGraphX API used here was read from ``src/py/migraphx_py.cpp`` of ROCm/AMDMIGraphX
(HEAD f729a52, 2026-05-29).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError, OptionError, UnsupportedOperatorError
from ..types import ShapeBounds, TensorSpec
from ._migraphx_runtime import (
    HipRuntime,
    diagnose_import_failure,
    import_migraphx,
    looks_like_device_error,
    migraphx_environment,
)

__all__ = [
    "HipRuntime",
    "calibration_for",
    "check_operators",
    "compile_kwargs",
    "diagnose_import_failure",
    "dynamic_input_dims",
    "import_migraphx",
    "initial_signature",
    "looks_like_device_error",
    "migraphx_environment",
    "output_parameter_index",
    "recover_output_names",
    "static_input_dims",
    "to_numpy",
    "unsupported_operators",
]


# ---------------------------------------------------------------------- operators
#: Node domains whose operators MIGraphX's ONNX parser implements (it looks operators up by op_type only).
KNOWN_DOMAINS = ("", "ai.onnx", "com.microsoft")


def unsupported_operators(model_ops: Iterable[str], supported: Iterable[str]) -> list[str]:
    """Operators of a model (``ModelSource.operators()`` names) that MIGraphX's parser does not handle.

    MIGraphX looks a node up by ``op_type`` alone, ignoring its domain. Operators of ``ai.onnx`` and
    ``com.microsoft`` (whose contrib ops it implements, e.g. ``FastGelu``) count as supported when their
    type is in ``supported``; an operator of any other domain is reported even when a standard operator
    shares its name, because MIGraphX would silently parse it as the standard one.

    Example:
        >>> ops = {"Conv", "Det", "com.microsoft::FastGelu", "custom::Relu"}
        >>> unsupported_operators(ops, ["Conv", "FastGelu", "Relu"])
        ['Det', 'custom::Relu']
    """
    known = set(supported)
    out = []
    for op in model_ops:
        domain, _, op_type = op.rpartition("::")
        if domain not in KNOWN_DOMAINS or op_type not in known:
            out.append(op)
    return sorted(out)


def check_operators(model_ops: Iterable[str], supported: Iterable[str], *, model_name: str, version: str) -> None:
    """Raise :class:`UnsupportedOperatorError` naming every operator MIGraphX cannot parse.

    Example:
        >>> check_operators({"Det"}, ["Conv"], model_name="m.onnx", version="2.12")
        Traceback (most recent call last):
        ...
        amdinfer.errors.UnsupportedOperatorError: model m.onnx: MIGraphX 2.12 has no ONNX parser for ['Det'] ...
    """
    bad = unsupported_operators(model_ops, supported)
    if bad:
        foreign = [op for op in bad if "::" in op and op.split("::")[0] not in KNOWN_DOMAINS]
        extra = (
            f"; operators of custom domains ({foreign}) are not supported because MIGraphX ignores the domain"
            if foreign
            else ""
        )
        raise UnsupportedOperatorError(
            f"model {model_name}: MIGraphX {version} has no ONNX parser for {bad} (checked against "
            f"migraphx.get_onnx_operators() before parsing){extra}. Use backend='ort' (ONNX Runtime runs "
            "unsupported nodes on the CPU EP), or rewrite those nodes",
            operators=bad,
        )


_UNKNOWN_OP_RE = re.compile(r"Unknown operator:\s*([\w.]+)")


def unknown_operator_in(message: str) -> str | None:
    """The operator MIGraphX's parser named in an ``Unknown operator: X`` error, if any.

    Example:
        >>> unknown_operator_in("/src/onnx/onnx_parser.cpp:625: parse_graph: Unknown operator: Det")
        'Det'
    """
    m = _UNKNOWN_OP_RE.search(message)
    return m.group(1) if m else None


# ---------------------------------------------------------------------- shapes
Signature = tuple[tuple[str, tuple[int, ...]], ...]


def static_input_dims(shapes: Mapping[str, Sequence[int]]) -> dict[str, Any]:
    """``parse_onnx`` keyword arguments for concrete input shapes: ``{"map_input_dims": {name: [dims]}}``.

    Same form as :func:`dynamic_input_dims` returns, so one program description serves both.

    Example:
        >>> static_input_dims({"x": (2, 3, 8, 8)})
        {'map_input_dims': {'x': [2, 3, 8, 8]}}
    """
    return {"map_input_dims": {name: [int(d) for d in shape] for name, shape in shapes.items()}}


def dynamic_input_dims(
    inputs: Sequence[TensorSpec],
    bounds: Mapping[str, ShapeBounds],
    *,
    default_dim_value: int | None = None,
) -> dict[str, Any]:
    """Map ``shapes=`` bounds to ``parse_onnx`` keyword arguments, as plain data.

    Returns ``{"map_input_dims": {name: [dims]}}`` when every bound is static, otherwise
    ``{"map_dyn_input_dims": {name: [(min, max, optimals), ...]}}`` with one tuple per axis (the engine
    turns each into ``migraphx.shape.dynamic_dimension(min, max, set(optimals))``). MIGraphX refuses both
    maps at once, so static inputs go into the dynamic map as fixed dimensions. An input with dynamic
    dimensions and no bounds needs ``default_dim_value`` (which MIGraphX applies to unknown dims).

    Raises:
        OptionError: an input has dynamic dimensions, no bounds and no ``default_dim_value``.

    Example:
        >>> x = TensorSpec("x", np.dtype("float32"), ("N", 3))
        >>> dynamic_input_dims([x], {"x": ShapeBounds((1, 3), (8, 3), (4, 3))})
        {'map_dyn_input_dims': {'x': [(1, 8, (4,)), (3, 3, ())]}}
        >>> dynamic_input_dims([x], {"x": ShapeBounds((2, 3), (2, 3))})
        {'map_input_dims': {'x': [2, 3]}}
    """
    for spec in inputs:
        if spec.name not in bounds and spec.is_dynamic and default_dim_value is None:
            raise OptionError(
                f"shapes: input {spec.name!r} has dynamic dimensions {_fmt(spec.shape)} but no bounds; give "
                f"shapes={{{spec.name!r}: [min_shape, max_shape]}} or default_dim_value="
            )
    used = {name: b for name, b in bounds.items() if any(s.name == name for s in inputs)}
    if all(b.is_static for b in used.values()):
        return {"map_input_dims": {name: list(b.min) for name, b in used.items()}}
    dyn: dict[str, list[tuple[int, int, tuple[int, ...]]]] = {}
    for name, b in used.items():
        axes = []
        for i, (lo, hi) in enumerate(zip(b.min, b.max)):
            opts: tuple[int, ...] = (b.opt[i],) if b.opt is not None and lo != hi else ()
            axes.append((int(lo), int(hi), opts))
        dyn[name] = axes
    return {"map_dyn_input_dims": dyn}


def initial_signature(
    inputs: Sequence[TensorSpec],
    bounds: Mapping[str, ShapeBounds],
    buckets: Sequence[int] = (),
    default_dim_value: int | None = None,
) -> dict[str, tuple[int, ...]] | None:
    """The input shapes to compile for at load time, or ``None`` when they are unknown until the first run.

    Per input: the bounds' optimal shape (batch rounded up to a bucket when ``batch_buckets`` are set),
    else the model's static shape, else the model's shape with ``default_dim_value`` for unknown dims.

    Example:
        >>> x = TensorSpec("x", np.dtype("float32"), ("N", 3))
        >>> initial_signature([x], {"x": ShapeBounds((1, 3), (8, 3), (3, 3))}, buckets=(1, 2, 4, 8))
        {'x': (4, 3)}
        >>> initial_signature([x], {}) is None
        True
    """
    out: dict[str, tuple[int, ...]] = {}
    for spec in inputs:
        if spec.name in bounds:
            shape = tuple(bounds[spec.name].optimal)
            if buckets and shape:
                batch = next((b for b in sorted(buckets) if b >= shape[0]), max(buckets))
                shape = (batch, *shape[1:])
        elif not spec.is_dynamic:
            shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
        elif default_dim_value is not None:
            shape = tuple(d if isinstance(d, int) else int(default_dim_value) for d in spec.shape)
        else:
            return None
        out[spec.name] = shape
    return out


def signature_of(shapes: Mapping[str, Sequence[int]]) -> Signature:
    """A hashable signature of concrete input shapes, in the given order.

    Example:
        >>> signature_of({"x": (1, 3)})
        (('x', (1, 3)),)
    """
    return tuple((name, tuple(int(d) for d in shape)) for name, shape in shapes.items())


def _fmt(shape: Sequence[Any]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


# ---------------------------------------------------------------------- outputs
_OUTPUT_PARAM_RE = re.compile(r"#output_:?(\d+)$")


def output_parameter_index(name: str) -> int | None:
    """Position of an output buffer parameter of a program compiled with ``offload_copy=False``.

    MIGraphX names them ``<module>:#output_<i>`` for i < 10 and ``<module>:#output_:<5 digits>`` after
    (``param_name`` in ``src/param_utils.cpp``); other parameters give ``None``.

    Example:
        >>> output_parameter_index("main:#output_0"), output_parameter_index("main:#output_:00012")
        (0, 12)
        >>> output_parameter_index("images") is None
        True
    """
    m = _OUTPUT_PARAM_RE.search(name)
    return int(m.group(1)) if m else None


def recover_output_names(
    onnx_outputs: Sequence[TensorSpec],
    returned: Sequence[Sequence[int] | None],
) -> list[str]:
    """Name the list ``program.run`` returns: MIGraphX returns the ONNX graph outputs in graph order.

    The parser ends the main module with ``@return`` over ``graph.output`` in order
    (``onnx_parser::parse_graph``), so position ``i`` is ONNX output ``i``. This checks that the counts
    agree and that each returned shape (``None`` for a dynamic one) fits the ONNX output's rank and fixed
    dims, so a mismatch fails loudly instead of mislabelling tensors.

    Args:
        onnx_outputs: the model's outputs in graph order.
        returned: the shapes from ``program.get_output_shapes()`` (``lens()``), ``None`` where dynamic.

    Raises:
        ModelError: the program returns a different number of outputs, or shapes that cannot be them.

    Example:
        >>> y = TensorSpec("y", np.dtype("float32"), ("N", 10))
        >>> z = TensorSpec("z", np.dtype("int64"), ("N",))
        >>> recover_output_names([y, z], [(4, 10), (4,)])
        ['y', 'z']
    """
    if len(returned) != len(onnx_outputs):
        raise ModelError(
            f"migraphx program returns {len(returned)} outputs, expected the model's {len(onnx_outputs)} "
            f"({[s.name for s in onnx_outputs]})"
        )
    for i, (spec, shape) in enumerate(zip(onnx_outputs, returned)):
        if shape is None or not spec.shape:
            continue
        if len(shape) != len(spec.shape) or any(isinstance(d, int) and d != s for d, s in zip(spec.shape, shape)):
            raise ModelError(
                f"migraphx output {i} has shape {tuple(shape)}, expected ONNX output {spec.name!r} "
                f"{_fmt(spec.shape)}; cannot name the outputs safely"
            )
    return [s.name for s in onnx_outputs]


def to_numpy(arg: Any, dtype: np.dtype | None = None) -> np.ndarray:
    """Copy a ``migraphx.argument`` (any buffer-protocol object) into a new NumPy array.

    The copy matters: MIGraphX may reuse its output buffers on the next run. ``dtype`` casts when MIGraphX
    returns another float type than the model declares (e.g. after fp16 quantization).

    Example:
        >>> src = np.arange(6, dtype=np.float32).reshape(2, 3)
        >>> out = to_numpy(memoryview(src))
        >>> out.base is None and np.array_equal(out, src)
        True
    """
    arr = np.array(arg, copy=True, order="C")
    if dtype is not None and arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


def make_arguments(
    feeds: Mapping[str, np.ndarray], argument: Any, names: Iterable[str]
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """Wrap feeds as ``migraphx.argument`` for the program's parameters ``names``.

    ``migraphx.argument(buffer)`` keeps a raw pointer, not a reference, so the arrays are returned too:
    the caller must hold them until ``program.run`` returns. Arrays are made C-contiguous.

    Example:
        >>> feeds = {"x": np.ones(2, np.float32), "unused": np.ones(1)}
        >>> args, keep = make_arguments(feeds, lambda a: ("arg", a.shape), ["x"])
        >>> args, len(keep)
        ({'x': ('arg', (2,))}, 1)
    """
    wanted = set(names)
    keep: list[np.ndarray] = []
    args: dict[str, Any] = {}
    for name, arr in feeds.items():
        if name not in wanted:
            continue
        a = np.ascontiguousarray(arr)
        keep.append(a)
        args[name] = argument(a)
    return args, keep


# ---------------------------------------------------------------------- quantization and compile options
def calibration_for(
    calibration: Sequence[Mapping[str, np.ndarray]],
    shapes: Mapping[str, Sequence[int]] | None,
) -> list[dict[str, np.ndarray]]:
    """Re-batch int8 calibration samples to the shapes a static program was parsed with.

    ``migraphx.quantize_int8`` runs the calibration feeds through the program, so each must have the
    program's parameter shapes. Samples are concatenated along axis 0 and cut into batches of the
    program's batch size; the last batch is completed by repeating its rows (calibration looks at value
    ranges, which repetition does not change). ``shapes=None`` (a dynamic program) keeps samples as given.

    Raises:
        OptionError: samples lack an input or disagree with the program beyond axis 0.

    Example:
        >>> cal = [{"x": np.full((1, 2), i, np.float32)} for i in range(3)]
        >>> [b["x"][:, 0].tolist() for b in calibration_for(cal, {"x": (2, 2)})]
        [[0.0, 1.0], [2.0, 2.0]]
    """
    samples = [dict(s) for s in calibration]
    if shapes is None or not samples:
        return samples
    joined: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        parts = []
        for i, s in enumerate(samples):
            if name not in s:
                raise OptionError(f"quantizer calibration sample {i}: no input {name!r} (has {sorted(s)})")
            a = np.asarray(s[name])
            if a.ndim != len(shape) or tuple(a.shape[1:]) != tuple(shape[1:]):
                raise OptionError(
                    f"quantizer calibration sample {i}, input {name!r}: got shape {a.shape}, expected "
                    f"(N, {', '.join(str(d) for d in shape[1:])}) to match the compiled shape {tuple(shape)}"
                )
            parts.append(a)
        joined[name] = np.concatenate(parts, axis=0)
    rows = {a.shape[0] for a in joined.values()}
    if len(rows) != 1:
        raise OptionError(f"quantizer calibration: inputs have different total batch sizes {sorted(rows)}")
    total = rows.pop()
    batch = {int(s[0]) for s in shapes.values() if len(s)}
    n = batch.pop() if len(batch) == 1 else 1
    out = []
    for start in range(0, total, n):
        chunk = {}
        for name, a in joined.items():
            part = a[start : start + n]
            if part.shape[0] < n:
                part = np.concatenate([part, np.repeat(part[-1:], n - part.shape[0], axis=0)], axis=0)
            chunk[name] = np.ascontiguousarray(part)
        out.append(chunk)
    return out


def compile_kwargs(*, offload_copy: bool, fast_math: bool, exhaustive_tune: bool) -> dict[str, bool]:
    """Keyword arguments for ``program.compile``, leaving out MIGraphX's defaults.

    ``compile(t, offload_copy=True, fast_math=True, exhaustive_tune=False)`` is the current signature;
    older MIGraphX builds only take ``offload_copy``. Passing only what differs from the defaults keeps the
    default configuration working there, and makes a non-default option fail loudly instead of vanishing.

    Example:
        >>> compile_kwargs(offload_copy=True, fast_math=True, exhaustive_tune=False)
        {}
        >>> compile_kwargs(offload_copy=False, fast_math=False, exhaustive_tune=True)
        {'offload_copy': False, 'fast_math': False, 'exhaustive_tune': True}
    """
    out: dict[str, bool] = {}
    if not offload_copy:
        out["offload_copy"] = False
    if not fast_math:
        out["fast_math"] = False
    if exhaustive_tune:
        out["exhaustive_tune"] = True
    return out
