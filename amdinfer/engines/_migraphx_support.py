"""Glue between amdinfer and AMD MIGraphX's Python module that does not need ``migraphx`` to run.

Everything here is plain Python on plain data, so it is unit-tested on machines without MIGraphX:
import diagnosis (the PyPI placeholder, a missing ``PYTHONPATH``, missing ROCm libraries), the operator
check against ``migraphx.get_onnx_operators()``, the mapping of ``shapes=`` bounds to ``parse_onnx``'s
``map_input_dims`` / ``map_dyn_input_dims``, output-name recovery, int8 calibration re-batching, and
HIP device selection through ``libamdhip64`` (``hipSetDevice``).

The MIGraphX API used here was read from ``src/py/migraphx_py.cpp`` of ROCm/AMDMIGraphX
(HEAD f729a52, 2026-05-29).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, ModelError, OptionError, UnsupportedOperatorError
from ..types import ShapeBounds, TensorSpec

__all__ = [
    "HipRuntime",
    "calibration_for",
    "check_operators",
    "compile_kwargs",
    "diagnose_import_failure",
    "dynamic_input_dims",
    "import_migraphx",
    "initial_signature",
    "output_parameter_index",
    "recover_output_names",
    "static_input_dims",
    "to_numpy",
    "unsupported_operators",
]

#: Where ROCm installs the ``migraphx`` extension module (``/opt/rocm/lib/migraphx.cpython-3XX-....so``).
ROCM_LIB_DIRS = ("/opt/rocm/lib", "/opt/rocm/lib64")

INSTALL_HINT = (
    "install MIGraphX from ROCm (e.g. `sudo apt install migraphx` on Ubuntu with AMD's ROCm repository; "
    "it ships the Python module as /opt/rocm/lib/migraphx.cpython-3XX-x86_64-linux-gnu.so) and put it on "
    "the path: `export PYTHONPATH=/opt/rocm/lib:$PYTHONPATH` (and `LD_LIBRARY_PATH=/opt/rocm/lib` if its "
    "libraries are not found); check with `amdinfer doctor`. The PyPI package named `migraphx` (0.0.1) is "
    "an empty placeholder, not MIGraphX"
)


# ---------------------------------------------------------------------- importing
def diagnose_import_failure(
    error: str,
    *,
    dist_version: str | None,
    dist_has_module: bool,
    rocm_modules: Sequence[str],
    python_tag: str,
    imported_without_api: bool = False,
) -> str:
    """Explain why ``import migraphx`` did not give MIGraphX, and how to fix it.

    Args:
        error: the ``ImportError`` text (empty when the import succeeded but the module is not MIGraphX).
        dist_version: version of an installed distribution named ``migraphx`` (``None`` if none).
        dist_has_module: whether that distribution installed any module file.
        rocm_modules: ``migraphx*.so`` files found in ROCm's library folders.
        python_tag: this interpreter's tag, e.g. ``"cpython-311"``.
        imported_without_api: ``import migraphx`` succeeded but the module has no ``parse_onnx``.

    Example:
        >>> msg = diagnose_import_failure("No module named 'migraphx'", dist_version="0.0.1", dist_has_module=False,
        ...                               rocm_modules=[], python_tag="cpython-311")
        >>> "PyPI package 'migraphx' 0.0.1 is an empty placeholder" in msg, "pip uninstall migraphx" in msg
        (True, True)
    """
    head = "backend 'migraphx': "
    if dist_version is not None and (not dist_has_module or imported_without_api):
        why = (
            f"the installed PyPI package 'migraphx' {dist_version} is an empty placeholder (it installs no MIGraphX "
            "module); `pip uninstall migraphx`, then "
        )
        return head + why + INSTALL_HINT
    if imported_without_api:
        return (
            head
            + f"`import migraphx` found a module without MIGraphX's API ({error or 'no parse_onnx'}); "
            + INSTALL_HINT
        )
    missing_lib = re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file", error)
    if missing_lib:
        return (
            head + f"the migraphx module was found but its library {missing_lib.group(1)} cannot be loaded ({error}); "
            "add ROCm's library folder to the loader path: `export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH`, "
            "and check that the ROCm version matches the one MIGraphX was built for"
        )
    if rocm_modules:
        matching = [m for m in rocm_modules if python_tag in os.path.basename(m)]
        if matching:
            folder = os.path.dirname(matching[0])
            return (
                head + f"MIGraphX is installed ({matching[0]}) but not on Python's path; "
                f"`export PYTHONPATH={folder}:$PYTHONPATH`"
            )
        built = sorted(
            {m.group(0) for m in (re.search(r"cpython-\d+", os.path.basename(p)) for p in rocm_modules) if m}
        )
        return (
            head + f"ROCm's MIGraphX module exists only for {built or rocm_modules} ({', '.join(rocm_modules)}), "
            f"but this interpreter is {python_tag}; run a Python version it was built for (or build MIGraphX for "
            "this one)"
        )
    return head + f"`import migraphx` failed ({error}); " + INSTALL_HINT


def _dist_info() -> tuple[str | None, bool]:
    try:
        dist = importlib.metadata.distribution("migraphx")
    except importlib.metadata.PackageNotFoundError:
        return None, False
    files = [str(f) for f in (dist.files or [])]
    has_module = any(
        (f.startswith("migraphx") and (f.endswith((".py", ".so", ".pyd")))) and ".dist-info" not in f for f in files
    )
    return dist.version, has_module


def _rocm_modules() -> list[str]:
    roots = list(ROCM_LIB_DIRS)
    if os.environ.get("ROCM_PATH"):
        roots.insert(0, os.path.join(os.environ["ROCM_PATH"], "lib"))
    found: list[str] = []
    for root in roots:
        found.extend(sorted(glob.glob(os.path.join(root, "migraphx*.so"))))
    return list(dict.fromkeys(found))


def import_migraphx() -> Any:
    """Import AMD's ``migraphx`` module, or raise :class:`BackendUnavailableError` saying why and how to fix it.

    Example:
        >>> try:
        ...     import_migraphx()
        ... except BackendUnavailableError as exc:
        ...     exc.backend
        'migraphx'
    """
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    try:
        module = importlib.import_module("migraphx")
    except ImportError as exc:
        version, has_module = _dist_info()
        msg = diagnose_import_failure(
            str(exc), dist_version=version, dist_has_module=has_module, rocm_modules=_rocm_modules(), python_tag=tag
        )
        raise BackendUnavailableError(msg, backend="migraphx", cause=str(exc)) from exc
    if not hasattr(module, "parse_onnx") or not hasattr(module, "get_target"):
        version, has_module = _dist_info()
        where = getattr(module, "__file__", None) or "a namespace package"
        msg = diagnose_import_failure(
            f"module at {where} has no parse_onnx/get_target",
            dist_version=version,
            dist_has_module=has_module,
            rocm_modules=_rocm_modules(),
            python_tag=tag,
            imported_without_api=True,
        )
        raise BackendUnavailableError(msg, backend="migraphx", cause=f"no MIGraphX API in {where}")
    return module


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


def migraphx_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``MIGRAPHX_*`` environment variables set now (they change what MIGraphX compiles; part of cache keys).

    Example:
        >>> migraphx_environment({"MIGRAPHX_DISABLE_MLIR": "1", "HOME": "/root"})
        {'MIGRAPHX_DISABLE_MLIR': '1'}
    """
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith("MIGRAPHX_")}


_DEVICE_ERROR_WORDS = ("hip", "no device", "not loaded or not supported", "cannot open shared object", "gpu")


def looks_like_device_error(message: str) -> bool:
    """Whether a MIGraphX error is about the device or runtime libraries rather than the model.

    Example:
        >>> looks_like_device_error("Failed to get device properties: hipErrorNoDevice")
        True
        >>> looks_like_device_error("PARSE_CONV: padding mode not supported")
        False
    """
    text = message.lower()
    return any(word in text for word in _DEVICE_ERROR_WORDS)


# ---------------------------------------------------------------------- HIP device selection
@dataclass
class HipRuntime:
    """The few HIP runtime calls amdinfer needs, through ``ctypes`` on the ``libamdhip64`` MIGraphX loaded.

    MIGraphX's GPU target compiles for, and a loaded program binds to, the calling thread's *current* HIP
    device (``target::get_context()`` uses ``hipGetDevice``); its Python module offers no way to choose one.
    Setting ``HIP_VISIBLE_DEVICES`` works only before HIP initializes, i.e. before anything in the process
    touched the GPU. ``hipSetDevice`` is per thread and can be called at any time, so the engine makes its
    device current around compiling, loading and running, and restores the caller's device afterwards.

    Example:
        >>> hip = HipRuntime.find()  # None on a machine without ROCm
        >>> hip is None or hip.device_count() >= 0
        True
    """

    lib: Any
    path: str

    @classmethod
    def find(cls, loaded_maps: str | None = None) -> HipRuntime | None:
        """The HIP runtime already loaded in this process (by MIGraphX), else one on the loader path; or None."""
        candidates: list[str] = []
        if loaded_maps is None:
            with contextlib.suppress(OSError):
                with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                    loaded_maps = f.read()
        for line in (loaded_maps or "").splitlines():
            part = line.split()[-1] if line.split() else ""
            if "libamdhip64.so" in os.path.basename(part) and part not in candidates:
                candidates.append(part)
        candidates += ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"]
        candidates += [os.path.join(d, "libamdhip64.so") for d in ROCM_LIB_DIRS]
        for name in candidates:
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            for fn in ("hipGetDeviceCount", "hipGetDevice", "hipSetDevice"):
                getattr(lib, fn).restype = ctypes.c_int
            return cls(lib, name)
        return None

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            raise BackendUnavailableError(
                f"backend 'migraphx': {call} failed with HIP error {status} (no usable AMD GPU, or the driver and "
                "ROCm versions disagree; check with `rocminfo` and `amdinfer doctor`)",
                backend="migraphx",
                cause=f"{call} -> {status}",
            )

    def device_count(self) -> int:
        """Number of GPUs HIP sees (after ``HIP_VISIBLE_DEVICES``)."""
        n = ctypes.c_int(0)
        self._check(self.lib.hipGetDeviceCount(ctypes.byref(n)), "hipGetDeviceCount")
        return int(n.value)

    def get_device(self) -> int:
        """The calling thread's current device."""
        d = ctypes.c_int(0)
        self._check(self.lib.hipGetDevice(ctypes.byref(d)), "hipGetDevice")
        return int(d.value)

    def set_device(self, device: int) -> None:
        """Make ``device`` current for the calling thread."""
        self._check(self.lib.hipSetDevice(ctypes.c_int(device)), f"hipSetDevice({device})")

    @contextlib.contextmanager
    def using(self, device: int) -> Iterator[None]:
        """Make ``device`` current for the block, then restore the thread's previous device."""
        previous = self.get_device()
        if previous != device:
            self.set_device(device)
        try:
            yield
        finally:
            if previous != device:
                self.set_device(previous)
