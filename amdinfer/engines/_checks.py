"""The input checks behind the final :meth:`Engine.run <amdinfer.engines.base.Engine.run>`.

:class:`FeedChecks` is a mixin of :class:`~amdinfer.engines.base.Engine`: it checks the feeds (names,
dtypes, ranks, fixed and symbolic dims, shape bounds), turns lists and scalars into arrays only when no
value changes, checks sequence inputs (a list or tuple of arrays, each checked like a tensor) and optional
ones (``None`` or the value), the requested output names and what the backend returned. Backends override
:meth:`FeedChecks._accepts_device_tensor` and :meth:`FeedChecks._device_feed` to take device tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._support._files import check_allocation
from ..errors import InputError, ModelError, OptionError
from ..types import ShapeBounds, TensorSpec

__all__ = ["Feeds", "FeedChecks", "OutputSelection", "check_symbol", "dtype_expr", "tensors_only"]


Feeds = Mapping[str, Any] | np.ndarray | Any
#: ``None`` (the model's outputs), ``"all"`` (every named tensor, where the backend can) or a list of names.
OutputSelection = str | Sequence[str] | None

#: One precomputed check per input: name, dtype, rank, fixed ``(axis, dim)``, symbolic ``(axis, name)``,
#: the spec (for messages) and the ``shapes=`` bounds.
InputCheck = tuple[
    str, np.dtype, int, tuple[tuple[int, int], ...], tuple[tuple[int, str], ...], TensorSpec, ShapeBounds | None
]


def dtype_expr(dtype: Any) -> str:
    """How code names ``dtype`` under NumPy 2, for hints (``np.object`` and ``np.bfloat16`` do not exist).

    Example:
        >>> dtype_expr(np.float32), dtype_expr(object), dtype_expr(np.dtype("<U3"))
        ('np.float32', 'object', "np.dtype('<U3')")
        >>> import ml_dtypes
        >>> dtype_expr(ml_dtypes.bfloat16)
        'ml_dtypes.bfloat16'
    """
    dt = np.dtype(dtype)
    if dt.kind == "O":
        return "object"
    if dt.kind not in "SUVMm" and getattr(np, dt.name, None) is dt.type:
        return f"np.{dt.name}"
    if dt.type.__module__.split(".")[0] == "ml_dtypes":
        return f"ml_dtypes.{dt.type.__name__}"
    return f"np.dtype({dt.str!r})"


class FeedChecks:
    """The checks :meth:`Engine.run <amdinfer.engines.base.Engine.run>` makes (a mixin of ``Engine``).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = amdinfer.load(tiny_cnn(), backend="reference")
        >>> try:
        ...     engine.run(np.zeros((1, 3, 32, 32), np.float64))
        ... except amdinfer.InputError as exc:
        ...     print(str(exc).split(" (")[0])
        input 'input': got dtype float64, expected float32
        >>> engine.close()
    """

    backend_name: str
    supports_all_outputs: bool
    #: Whether inputs may have zero-size axes (``False``: refused, most kernels cannot run them; the reference
    #: engine, whose kernels are ONNX's own, takes them).
    accepts_zero_size: bool = False
    _input_names: tuple[str, ...]
    _output_names: list[str]
    _checks: list[InputCheck]
    _value_checks: list[tuple[TensorSpec, ShapeBounds | None]]
    _buckets: tuple[int, ...]

    def _select_outputs(self, outputs: OutputSelection) -> list[str] | None:
        if outputs is None:
            return None
        if isinstance(outputs, str):
            if outputs == "all":
                if not self.supports_all_outputs:
                    raise OptionError(
                        f'outputs="all": backend {self.backend_name!r} cannot return intermediate tensors; '
                        'use backend="reference" for per-layer outputs'
                    )
                return ["*"]
            outputs = [outputs]
        names = list(outputs)
        if not self.supports_all_outputs:
            unknown = [n for n in names if n not in self._output_names]
            if unknown:
                raise InputError(f"outputs: got {unknown}, expected names among {self._output_names}")
        return names

    def _check_result(self, result: Mapping[str, Any], names: list[str] | None) -> None:
        if names == ["*"]:
            return
        want = names if names is not None else self._output_names
        missing = [n for n in want if n not in result]
        if missing:
            raise RuntimeError(f"{type(self).__name__}._run returned no {missing}; got {list(result)}")

    def _check_feeds(self, feeds: Feeds) -> dict[str, Any]:
        if not isinstance(feeds, Mapping):
            if len(self._input_names) != 1:
                raise InputError(
                    f"feeds: got one {type(feeds).__name__}, expected a dict with inputs {list(self._input_names)}"
                )
            feeds = {self._input_names[0]: feeds}
        if len(feeds) != len(self._input_names) or any(n not in feeds for n in self._input_names):
            missing = [n for n in self._input_names if n not in feeds]
            extra = [n for n in feeds if n not in self._input_names]
            parts = []
            if missing:
                parts.append(f"missing {missing}")
            if extra:
                parts.append(f"unknown {extra}")
            raise InputError(f"feeds: {' and '.join(parts)}; expected exactly {list(self._input_names)}")
        out: dict[str, Any] = {}
        symbols: dict[str, tuple[int, str]] | None = None
        for name, dtype, rank, fixed, symbolic, spec, bounds in self._checks:
            arr = feeds[name]
            if type(arr) is not np.ndarray:
                arr = self._coerce(name, arr, dtype)
            if arr.dtype != dtype:
                raise InputError(
                    f"input {name!r}: got dtype {arr.dtype}, expected {dtype} "
                    f"(cast explicitly, e.g. x.astype({dtype_expr(dtype)}))"
                )
            shape = arr.shape
            if len(shape) != rank:
                raise InputError(f"input {name!r}: got shape {tuple(shape)} (rank {len(shape)}), expected {_fmt(spec)}")
            for i, d in fixed:
                if shape[i] != d:
                    raise InputError(
                        f"input {name!r}: got shape {tuple(shape)}, expected {_fmt(spec)} (axis {i} must be {d})"
                    )
            if 0 in shape and not self.accepts_zero_size:
                raise InputError(
                    f"input {name!r}: got shape {tuple(shape)} with a zero-size axis {list(shape).index(0)}, "
                    "expected every axis >= 1"
                )
            for i, sym in symbolic:
                if symbols is None:
                    symbols = {}
                check_symbol(symbols, name, i, sym, shape[i])
            if bounds is not None and not self._buckets:
                if not bounds.contains(shape):
                    axis = next(
                        (i for i, (d, lo, hi) in enumerate(zip(shape, bounds.min, bounds.max)) if not lo <= d <= hi),
                        None,
                    )
                    where = (
                        f": axis {axis} is {shape[axis]}, expected {bounds.min[axis]}..{bounds.max[axis]}"
                        if axis is not None
                        else ""
                    )
                    raise InputError(
                        f"input {name!r}: got shape {tuple(shape)}, expected between {bounds.min} and {bounds.max} "
                        f"(the bounds given in shapes=){where}"
                    )
            if type(arr) is np.ndarray and not arr.flags.c_contiguous:
                # A broadcast view costs nothing until it is copied: size the copy before making it.
                check_allocation(shape, arr.dtype, f"input {name!r} (a non-contiguous view, copied before the run)")
                arr = np.ascontiguousarray(arr)
            out[name] = arr
        if self._value_checks:
            return self._check_values(feeds, out, {} if symbols is None else symbols)
        return out

    def _check_values(
        self, feeds: Mapping[str, Any], out: dict[str, Any], symbols: dict[str, tuple[int, str]]
    ) -> dict[str, Any]:
        """Check the sequence and optional inputs (after the tensors); return every feed in input order."""
        for spec, bounds in self._value_checks:
            name, value = spec.name, feeds[spec.name]
            if value is None:
                if not spec.is_optional:
                    raise InputError(
                        f"input {name!r}: got None, expected {_expected(spec)} (only optional inputs may be None)"
                    )
                out[name] = None
            elif spec.is_sequence:
                if not isinstance(value, (list, tuple)):
                    raise InputError(f"input {name!r}: got a {type(value).__name__}, expected {_expected(spec)}")
                out[name] = [
                    self._check_element(f"input {name!r} item {i}", v, spec, None, None) for i, v in enumerate(value)
                ]
            else:
                out[name] = self._check_element(f"input {name!r}", value, spec, symbols, bounds)
        return {n: out[n] for n in self._input_names}

    def _check_element(
        self,
        what: str,
        value: Any,
        spec: TensorSpec,
        symbols: dict[str, tuple[int, str]] | None,
        bounds: ShapeBounds | None,
    ) -> np.ndarray:
        """One tensor of a sequence or optional input, checked as a tensor input is (``what`` names it).

        Symbolic dims bind across inputs only for an optional tensor (``symbols``): the tensors of one sequence
        may differ in them.
        """
        dtype = spec.dtype
        if type(value) is not np.ndarray:
            if isinstance(value, np.ma.MaskedArray):
                raise InputError(f"{what}: got a numpy masked array, expected a plain ndarray (fill it first)")
            if isinstance(value, (np.ndarray, list, tuple, int, float, np.generic)):
                value = _as_array(what, value, dtype)
            elif hasattr(value, "__array__"):
                try:
                    value = np.asarray(value)
                except Exception as exc:  # a device tensor: the tensors of a sequence or optional go in host memory
                    raise InputError(
                        f"{what}: got a {type(value).__name__} NumPy cannot read ({exc}); expected a numpy array of "
                        f"{dtype} in host memory"
                    ) from None
            else:
                raise InputError(f"{what}: got {type(value).__name__}, expected a numpy array of {dtype}")
        if value.dtype != dtype:
            raise InputError(
                f"{what}: got dtype {value.dtype}, expected {dtype} "
                f"(cast explicitly, e.g. x.astype({dtype_expr(dtype)}))"
            )
        shape = value.shape
        if spec.rank_known:
            if len(shape) != spec.rank:
                raise InputError(f"{what}: got shape {tuple(shape)} (rank {len(shape)}), expected {_fmt(spec)}")
            for i, d in enumerate(spec.shape):
                if isinstance(d, int) and shape[i] != d:
                    raise InputError(f"{what}: got shape {tuple(shape)}, expected {_fmt(spec)} (axis {i} must be {d})")
                if isinstance(d, str) and symbols is not None:
                    check_symbol(symbols, spec.name, i, d, shape[i])
        if 0 in shape and not self.accepts_zero_size:
            raise InputError(
                f"{what}: got shape {tuple(shape)} with a zero-size axis {list(shape).index(0)}, "
                "expected every axis >= 1"
            )
        if bounds is not None and not bounds.contains(shape):
            raise InputError(
                f"{what}: got shape {tuple(shape)}, expected between {bounds.min} and {bounds.max} "
                "(the bounds given in shapes=)"
            )
        if not value.flags.c_contiguous:
            check_allocation(shape, value.dtype, f"{what} (a non-contiguous view, copied before the run)")
            value = np.ascontiguousarray(value)
        return value

    def _coerce(self, name: str, value: Any, dtype: np.dtype) -> Any:
        """Turn a non-ndarray feed into something ``_run`` takes; device tensors are backends' business."""
        if isinstance(value, np.ma.MaskedArray):
            raise InputError(
                f"input {name!r}: got a numpy masked array, expected a plain ndarray; the model would see the "
                "masked-out raw values, so fill them first (x.filled(value))"
            )
        if isinstance(value, np.ndarray):  # ndarray subclass
            return np.asarray(value)
        if hasattr(value, "__dlpack__") and self._accepts_device_tensor(value):
            return self._device_feed(name, value)
        if isinstance(value, (list, tuple, int, float, np.generic)):
            return _as_array(f"input {name!r}", value, dtype)
        if hasattr(value, "__array__"):
            return np.asarray(value)
        raise InputError(f"input {name!r}: got {type(value).__name__}, expected a numpy array")

    def _accepts_device_tensor(self, value: Any) -> bool:
        """Whether ``_run`` takes this DLPack tensor as is (GPU backends override)."""
        return False

    def _device_feed(self, name: str, value: Any) -> Any:
        """An accepted DLPack feed as ``_run`` takes it; it must expose ``.shape`` and a NumPy ``.dtype``
        for the checks (e.g. a torch tensor's ``torch.float32`` is not one), so GPU backends wrap it."""
        return value


def tensors_only(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], who: str) -> None:
    """Raise :class:`~amdinfer.ModelError` naming the first sequence or optional input or output: ``who`` (the
    server's tensor protocols, random feeds, a tensor comparison) takes tensors only.

    Example:
        >>> seq = TensorSpec("s", np.dtype("float32"), ("K", 2), container=("sequence",))
        >>> tensors_only([seq], [], "the server")
        Traceback (most recent call last):
        ...
        amdinfer.errors.ModelError: input 's' is a sequence(tensor(float32)), but the server takes tensors only
    """
    for kind, specs in (("input", inputs), ("output", outputs)):
        for spec in specs:
            if not spec.is_tensor:
                raise ModelError(f"{kind} {spec.name!r} is a {spec.type_name}, but {who} takes tensors only")


def check_symbol(symbols: dict[str, tuple[int, str]], name: str, axis: int, symbol: str, size: int) -> None:
    """Record that input ``name`` has ``size`` on ``axis``, named ``symbol``; refuse a size that another input
    gave the same symbol (``symbols``: symbol -> (size, input) so far, across the inputs of one call).

    Example:
        >>> seen = {}
        >>> check_symbol(seen, "a", 0, "N", 2)
        >>> check_symbol(seen, "b", 0, "N", 1)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'b': axis 0 ('N') is 1, but input 'a' has 'N' = 2
    """
    seen = symbols.setdefault(symbol, (size, name))
    if seen[0] != size:
        raise InputError(
            f"input {name!r}: axis {axis} ({symbol!r}) is {size}, but input {seen[1]!r} has {symbol!r} = {seen[0]}"
        )


def _as_array(what: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """A list, tuple or scalar as an array, converted to ``dtype`` only when no value changes (``what`` names it)."""
    if isinstance(value, np.ndarray):  # an ndarray subclass (masked arrays are refused before)
        return np.asarray(value)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InputError(
            f"{what}: got a {type(value).__name__} NumPy cannot turn into one array ({exc}); "
            f"expected a numpy array of {dtype}"
        ) from None
    if arr.dtype != dtype and arr.dtype.kind in "biuf" and dtype.kind in "biuf":
        if arr.dtype.kind == "b" and dtype.kind != "b":
            return arr  # the dtype check names the mismatch
        with np.errstate(all="ignore"):
            converted = arr.astype(dtype)
            back = converted.astype(arr.dtype)
        if not np.array_equal(back, arr, equal_nan=arr.dtype.kind == "f"):
            same = back == arr
            if arr.dtype.kind == "f":
                same |= np.isnan(back) & np.isnan(arr)
            bad = np.flatnonzero(~same.ravel())
            example = arr.ravel()[bad[0]].item() if bad.size else "a value"
            raise InputError(
                f"{what}: got a {type(value).__name__} of {arr.dtype} values that {dtype} cannot hold "
                f"exactly (e.g. {example!r}); lists are converted only when nothing is lost, so pass "
                f"np.asarray(value, dtype={dtype_expr(dtype)}) to accept the rounding"
            )
        arr = converted
    return arr


def _expected(spec: TensorSpec) -> str:
    """What a sequence or optional input takes, for messages."""
    arrays = f"{spec.dtype} arrays of shape {_fmt(spec)}"
    if spec.is_sequence:
        what = f"a list of {arrays}"
        return f"{what} or None (an {spec.type_name})" if spec.is_optional else f"{what} (a {spec.type_name})"
    return f"None or a {spec.dtype} array of shape {_fmt(spec)} (an {spec.type_name})"


def _fmt(spec: TensorSpec) -> str:
    if not spec.rank_known:
        return "(any rank)"
    return "(" + ", ".join("?" if d is None else str(d) for d in spec.shape) + ")"
