"""Calibration and evaluation data: feeds from arrays, dicts or images through preprocessors; progress; hashes."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .._support._calib_groups import shape_groups  # re-exported: it moved below the engines
from .._support._progress import _Bar
from ..engines._checks import dtype_expr
from ..errors import InputError, OptionError, StageError
from ._data_rows import TensorRows, _first, _fmt_dims, check_rows, tensor_rows  # re-exported

__all__ = [
    "Progress",
    "TensorRows",
    "check_calibration",
    "check_rows",
    "data_hash",
    "describe_nonfinite",
    "input_dims",
    "input_specs",
    "materialize",
    "shape_groups",
    "tensor_rows",
    "to_feeds",
]

log = logging.getLogger("amdinfer.quantize")

_NP_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.BOOL: np.bool_,
}


class Progress(_Bar):
    """A progress bar over samples (or ``unit``): :func:`amdinfer._support._progress.progress_bar` with the
    ``amdinfer.quantize`` logger for when tqdm is not installed.

    Args:
        desc: what is being counted.
        total: expected count, if known.
        enabled: ``True``/``False`` force the bar on/off; ``None`` draws it only when stderr is a terminal.
        unit: what one count is (tqdm shows ``<unit>/s``).

    Example:
        >>> with Progress("calibrating", total=2, enabled=False) as bar:
        ...     bar.update(); bar.update()
        >>> bar.count
        2
    """

    def __init__(
        self, desc: str, total: int | None = None, *, enabled: bool | None = None, unit: str = "sample"
    ) -> None:
        super().__init__(desc, total, unit, enabled, log)


def input_specs(proto: onnx.ModelProto) -> list[tuple[str, Any, int]]:
    """``(name, numpy dtype, rank)`` of each graph input that is not an initializer."""
    inits = {t.name for t in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = _NP_TYPES.get(tt.elem_type)
        rank = len(tt.shape.dim) if tt.HasField("shape") else -1
        out.append((vi.name, dtype, rank))
    return out


def input_dims(proto: onnx.ModelProto) -> dict[str, tuple[int | str | None, ...] | None]:
    """The declared shape of each graph input that is not an initializer: ints, symbolic names, ``None`` (unknown).

    ``None`` for the whole shape when the model declares none.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> input_dims(tiny_cnn())
        {'input': ('N', 3, 32, 32)}
    """
    inits = {t.name for t in proto.graph.initializer}
    out: dict[str, tuple[int | str | None, ...] | None] = {}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            out[vi.name] = None
            continue
        dims: list[int | str | None] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        out[vi.name] = tuple(dims)
    return out


def describe_nonfinite(arr: np.ndarray) -> str | None:
    """``None`` when every value of ``arr`` is finite (or it is not floating point), else what is not.

    One ``np.isfinite`` pass when the data is clean; the details are counted only on failure.

    Example:
        >>> describe_nonfinite(np.array([0.0, np.inf, 1.0], np.float32))
        '1 non-finite value (inf) of 3, first at index (1,)'
        >>> describe_nonfinite(np.ones(4)) is None
        True
    """
    if arr.dtype.kind != "f":
        return None
    finite = np.isfinite(arr)
    if finite.all():
        return None
    bad = ~finite
    n = int(bad.sum())
    nan = int(np.isnan(arr).sum())
    pos = int(np.isposinf(arr).sum())
    counts = [(c, k) for c, k in ((nan, "NaN"), (pos, "inf"), (n - nan - pos, "-inf")) if c]
    kinds = counts[0][1] if len(counts) == 1 else ", ".join(f"{c} {k}" for c, k in counts)
    text = f"{n} non-finite value{'s' if n != 1 else ''} ({kinds})"
    if arr.ndim == 0:
        return text
    first = tuple(int(v) for v in np.unravel_index(int(np.argmax(bad)), arr.shape))
    return f"{text} of {arr.size}, first at index {first}"


def _unwrap(x: Any) -> Any:
    """A stage result: an array, or a pipeline ``Sample`` (``.data``) or any object with ``.array``."""
    if isinstance(x, (np.ndarray, Mapping)):
        return x
    for attr in ("array", "data"):
        arr = getattr(x, attr, None)
        if isinstance(arr, np.ndarray):
            return arr
    return x


def _preprocessed(item: Any, stages: Sequence[Callable[[Any], Any]], what: str, i: int) -> Any:
    """Sample ``i`` through each stage in turn; a stage that fails or returns ``None`` is a StageError."""
    x = item
    for stage in stages:
        try:
            x = stage(x)
        except Exception as exc:
            name = getattr(stage, "__name__", type(stage).__name__)
            raise StageError(f"{what}: preprocessing stage {name} failed on sample {i}: {exc}") from exc
        if x is None:
            name = getattr(stage, "__name__", type(stage).__name__)
            raise StageError(f"{what}: preprocessing stage {name} returned None for sample {i}")
    return x


def materialize(
    data: Any,
    *,
    what: str,
    preprocess: Sequence[Callable[[Any], Any]] | None = None,
    max_samples: int | None = None,
    progress: bool | None = None,
) -> list[Any]:
    """Pull every sample out of ``data`` once (it may be a one-shot generator), applying ``preprocess``.

    ``data`` is a list (or any iterable) of samples, or a tensor layout, axis 0 = samples
    (:func:`tensor_rows`: an array, ``{input: array}`` or an ``.npz`` path). Each sample is a feed dict, an
    array (for a single-input model) or, with ``preprocess``, an image that the callables turn into one
    (each stage takes the previous result; the last may return an array, a pipeline
    :class:`~amdinfer.stages.Sample` (its ``.data``) or an object with ``.array``). A progress bar
    is shown over the preprocessing only (``progress``: ``None`` on a terminal's stderr, ``True``/``False``
    force it).

    Raises:
        OptionError: ``data`` is not iterable, or ``preprocess`` holds something not callable.
        InputError: ``data`` gave no sample, or raised while producing one (the message names the sample's
            index; the iterable's own exception is chained as ``__cause__``).
        StageError: a preprocessing stage failed; the message names the stage and the sample.

    Example:
        >>> def broken():
        ...     yield np.zeros(2)
        ...     raise OSError("disk gone")
        >>> materialize(broken(), what="calibration", progress=False)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: calibration sample 1: the iterable raised OSError while producing it: disk gone
    """
    rows = tensor_rows(data, what) if not preprocess else None
    if rows is not None:  # axis 0 = samples
        return rows if max_samples is None else _first(rows, max_samples)
    if data is None or isinstance(data, (str, bytes)):
        raise OptionError(
            f"{what}: got {data!r}, expected an iterable of feed dicts, arrays or images, an array or "
            "{input: array} with axis 0 = samples, or an .npz path"
        )
    if isinstance(data, Mapping):
        data = [data]  # one feed dict
    try:
        iterator: Iterator[Any] = iter(data)
    except TypeError:
        raise OptionError(
            f"{what}: got {type(data).__name__}, expected an iterable of feed dicts, arrays or images"
        ) from None
    except Exception as exc:  # a user's __iter__ that fails
        raise InputError(f"{what}: iter() on the {type(data).__name__} raised {type(exc).__name__}: {exc}") from exc
    stages = list(preprocess or [])
    for s in stages:
        if not callable(s):
            raise OptionError(f"preprocess: got {s!r}, expected callables taking an image and returning an array")
    total = len(data) if hasattr(data, "__len__") else None
    if max_samples is not None:
        total = min(total, max_samples) if total is not None else max_samples
    items: list[Any] = []
    desc = f"amdinfer: preprocessing {what}" if stages else f"amdinfer: reading {what}"
    with Progress(desc, total, enabled=progress if stages else False) as bar:
        i = 0
        while max_samples is None or i < max_samples:
            try:
                item = next(iterator)
            except StopIteration:
                break
            except Exception as exc:  # the user's generator failed: say which sample, keep their exception
                raise InputError(
                    f"{what} sample {i}: the iterable raised {type(exc).__name__} while producing it: {exc}"
                ) from exc
            items.append(_unwrap(_preprocessed(item, stages, what, i)))
            bar.update()
            i += 1
    if not items:
        raise InputError(f"{what}: the iterable gave no samples, expected at least one")
    return items


def to_feeds(
    items: Sequence[Any],
    proto: onnx.ModelProto,
    *,
    what: str,
    input_name: str | None = None,
    finite: bool = False,
) -> list[dict[str, np.ndarray]]:
    """Turn samples into feed dicts for ``proto``'s inputs, adding a batch axis where one is missing.

    Every sample is checked in one pass against the model's input spec: names, dtype (never cast), shape
    (fixed dims must match; a symbolic dim takes any size, the same in every input of one sample; no empty
    axis) and, with ``finite=True`` (calibration and evaluation data), that every floating-point value is
    finite. The messages name the sample's index and the input.

    Raises:
        InputError: a sample names unknown inputs, misses some, cannot be read as an array, has the wrong
            dtype or shape, or (``finite=True``) holds NaN or inf.
        OptionError: ``input_name`` is not an input of the model.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> to_feeds([np.zeros((2, 3, 32, 32), np.float32)], tiny_cnn(), what="calibration")[0]["input"].shape
        (2, 3, 32, 32)
        >>> to_feeds([np.zeros((2, 3, 16, 16), np.float32)], tiny_cnn(), what="calibration")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: calibration sample 0, input 'input': got shape (2, 3, 16, 16), expected ...
    """
    specs = input_specs(proto)
    dims_of = input_dims(proto)
    names = [s[0] for s in specs]
    by_name = {s[0]: s for s in specs}
    if input_name is not None and input_name not in by_name:
        raise OptionError(f"input_name: got {input_name!r}, expected one of {names}")
    out = []
    for i, item in enumerate(items):
        where = f"{what} sample {i}"
        feed = _sample_feed(item, where, names, input_name)
        checked = {}
        bound: dict[str, tuple[int, str]] = {}  # symbolic dim -> (size, the input that fixed it)
        for name, value in feed.items():
            arr = _checked_array(value, where, by_name[name], dims_of.get(name), bound)
            if finite:
                _check_finite(arr, where, name, what)
            checked[name] = np.ascontiguousarray(arr)
        out.append(checked)
    return out


def _sample_feed(item: Any, where: str, names: list[str], input_name: str | None) -> dict[str, Any]:
    """One sample as ``{input: value}``: a feed dict with exactly the model's inputs, or one bare array."""
    if isinstance(item, Mapping):
        feed = {str(k): _unwrap(v) for k, v in item.items()}
        missing = [n for n in names if n not in feed]
        extra = [k for k in feed if k not in names]
        if missing or extra:
            raise InputError(
                f"{where}: got inputs {sorted(feed)}, expected exactly {names}"
                + (f" (missing {missing})" if missing else "")
                + (f" (unknown {extra})" if extra else "")
            )
        return feed
    target = input_name
    if target is None:
        if len(names) != 1:
            raise InputError(
                f"{where}: got one {type(item).__name__}, but the model has inputs {names}; "
                "give feed dicts or input_name="
            )
        target = names[0]
    if len(names) != 1 and input_name is not None:
        raise InputError(f"{where}: the model has inputs {names}; one array feeds only {target!r}")
    return {target: item}


def _checked_array(
    value: Any,
    where: str,
    spec: tuple[str, Any, int],
    dims: tuple[int | str | None, ...] | None,
    bound: dict[str, tuple[int, str]],
) -> np.ndarray:
    """``value`` as an array of input ``spec``'s dtype and shape ``dims``, with a batch axis added if missing.

    ``bound`` holds the sizes the sample's earlier inputs gave to symbolic dims; new ones are added to it.
    """
    name, dtype, rank = spec
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists, objects whose __array__ fails
        raise InputError(f"{where}, input {name!r}: cannot be read as an array ({type(exc).__name__}: {exc})") from exc
    if rank > 0 and arr.ndim == rank - 1:
        arr = arr[None]  # one sample without its batch axis
    shown = f", expected {_fmt_dims(dims)}" if dims is not None else ""
    if rank >= 0 and arr.ndim != rank:
        raise InputError(f"{where}, input {name!r}: got shape {arr.shape}{shown} (rank {rank})")
    if dtype is not None and arr.dtype != dtype:
        raise InputError(
            f"{where}, input {name!r}: got dtype {arr.dtype}, expected {np.dtype(dtype)} "
            f"(cast it, e.g. x.astype({dtype_expr(dtype)}))"
        )
    if 0 in arr.shape:
        raise InputError(f"{where}, input {name!r}: got shape {arr.shape}{shown}: an empty axis, no values")
    for axis, (got, want) in enumerate(zip(arr.shape, dims or ())):
        if isinstance(want, int) and got != want:
            raise InputError(
                f"{where}, input {name!r}: got shape {arr.shape}{shown} (axis {axis} is {got}, expected {want})"
            )
        if isinstance(want, str):
            size, other = bound.setdefault(want, (got, name))
            if size != got:
                raise InputError(
                    f"{where}, input {name!r}: got shape {arr.shape}{shown}; axis {axis} ({want!r}) is "
                    f"{got}, but input {other!r} has {want!r} = {size}"
                )
    return arr


#: Why each kind of data must be finite, by ``to_feeds``'s ``what`` (the rest is held-out evaluation data).
_WHY_FINITE = {
    "calibration": "NaN or inf makes the int8 ranges meaningless",
    "--calibration": "NaN or inf makes the int8 ranges and the report meaningless",
}


def _check_finite(arr: np.ndarray, where: str, name: str, what: str) -> None:
    bad = describe_nonfinite(arr)
    if bad is not None:
        subject = what if what.endswith("data") else f"{what} data"
        why = _WHY_FINITE.get(what, "NaN or inf makes the quantized and float outputs incomparable")
        raise InputError(f"{where}, input {name!r}: {bad}; {subject} must be finite ({why}), clean or drop the sample")


def data_hash(feeds: Iterable[Mapping[str, np.ndarray]]) -> str:
    """Hex SHA-256 over every feed's names, dtypes, shapes and bytes (the calibration data's identity).

    Example:
        >>> a = [{"x": np.zeros((1, 2), np.float32)}]
        >>> data_hash(a) == data_hash([{"x": np.zeros((1, 2), np.float32)}])
        True
    """
    h = hashlib.sha256()
    for feed in feeds:
        for name in sorted(feed):
            arr = np.ascontiguousarray(feed[name])
            h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
            h.update(arr.tobytes())
    return h.hexdigest()


def check_calibration(calibration: Any, load_options: Mapping[str, Any], items: str = "images") -> bool:
    """Whether a recipe's ``calibration=`` asks for int8 calibration; refuse one it cannot use.

    The recipes (:func:`amdinfer.yolo`, :func:`amdinfer.classify`, :func:`amdinfer.ocr`,
    :func:`amdinfer.text.embed`) share it: ``calibration`` goes with ``precision="int8"`` and without
    ``quantizer=``, and is a list of ``items`` (one array is refused: is it one image or a stack?).

    Raises:
        OptionError: the message names ``calibration`` and what was received (also for ``precision="int8"``
            without calibration data or a quantizer: every backend refuses uncalibrated int8).

    Example:
        >>> check_calibration(None, {}), check_calibration(["page.png"], {"precision": "int8"})
        (False, True)
        >>> check_calibration(None, {"precision": "int8"})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: calibration: none given with precision='int8', expected a list of images ...
        >>> check_calibration(["page.png"], {})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: calibration: given with precision='fp32', expected precision='int8' (...)
    """
    if calibration is None:
        if load_options.get("precision") == "int8" and load_options.get("quantizer") is None:
            raise OptionError(
                f"calibration: none given with precision='int8', expected a list of {items} like the ones you will "
                f"run (a few hundred; uncalibrated int8 gives wrong answers on every backend): pass calibration="
                f"[...{items}], or quantizer=Int8Quantizer(calibration=...) for samples you prepared yourself"
            )
        return False
    if load_options.get("quantizer") is not None:
        raise OptionError("calibration: given together with quantizer=; pass one or the other")
    precision = load_options.get("precision", "fp32")
    if precision != "int8":
        raise OptionError(
            f"calibration: given with precision={precision!r}, expected precision='int8' (the {items} calibrate "
            "the int8 model)"
        )
    if isinstance(calibration, (str, bytes, np.ndarray, Mapping)) or not isinstance(calibration, Iterable):
        raise OptionError(
            f"calibration: got {type(calibration).__name__}, expected a list of {items}"
            + (" (arrays (H, W, 3) uint8 or paths)" if items == "images" else "")
        )
    return True
