"""Calibration and evaluation data: feeds from arrays, dicts or images through preprocessors; progress; hashes."""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import InputError, OptionError, StageError

__all__ = ["Progress", "data_hash", "input_specs", "materialize", "to_feeds"]

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


class Progress:
    """A progress bar: tqdm when installed, else a line on the ``amdinfer.quantize`` logger every ~10%.

    Args:
        desc: what is being counted.
        total: expected count, if known.
        enabled: ``False`` shows nothing.

    Example:
        >>> with Progress("calibrating", total=2, enabled=False) as bar:
        ...     bar.update(); bar.update()
        >>> bar.count
        2
    """

    def __init__(self, desc: str, total: int | None = None, *, enabled: bool = True) -> None:
        self.desc = desc
        self.total = total
        self.enabled = enabled
        self.count = 0
        self._bar: Any = None
        self._next_log = 0.1
        self._t0 = time.perf_counter()

    def __enter__(self) -> Progress:
        if self.enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                log.info("%s: started (%s samples)", self.desc, self.total if self.total is not None else "?")
            else:
                self._bar = tqdm(total=self.total, desc=self.desc, unit="sample", file=sys.stderr, leave=False)
        return self

    def update(self, n: int = 1) -> None:
        """Count ``n`` more."""
        self.count += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled and self.total:
            frac = self.count / self.total
            if frac >= self._next_log or self.count == self.total:
                log.info("%s: %d/%d (%.0f%%)", self.desc, self.count, self.total, 100 * frac)
                while self._next_log <= frac:
                    self._next_log += 0.1

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            log.info("%s: %d samples in %.1f s", self.desc, self.count, time.perf_counter() - self._t0)


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


def _unwrap(x: Any) -> Any:
    """A stage result: an array, or a pipeline ``Sample`` (``.data``) or any object with ``.array``."""
    if isinstance(x, (np.ndarray, Mapping)):
        return x
    for attr in ("array", "data"):
        arr = getattr(x, attr, None)
        if isinstance(arr, np.ndarray):
            return arr
    return x


def materialize(
    data: Any,
    *,
    what: str,
    preprocess: Sequence[Callable[[Any], Any]] | None = None,
    max_samples: int | None = None,
    progress: bool = True,
) -> list[Any]:
    """Pull every sample out of ``data`` once (it may be a one-shot generator), applying ``preprocess``.

    Each sample is a feed dict, an array (for a single-input model) or, with ``preprocess``, an image that
    the callables turn into one (each stage takes the previous result; the last may return an array, a
    pipeline :class:`~amdinfer.stages.Sample` (its ``.data``) or an object with ``.array``).

    Raises:
        OptionError: ``data`` is not iterable, or ``preprocess`` holds something not callable.
        InputError: ``data`` gave no sample.
        StageError: a preprocessing stage failed; the message names the stage and the sample.
    """
    if data is None or isinstance(data, (str, bytes)):
        raise OptionError(f"{what}: got {data!r}, expected an iterable of feed dicts, arrays or images")
    if isinstance(data, (np.ndarray, Mapping)):
        data = [data]  # one batch
    try:
        iterator: Iterator[Any] = iter(data)
    except TypeError:
        raise OptionError(
            f"{what}: got {type(data).__name__}, expected an iterable of feed dicts, arrays or images"
        ) from None
    stages = list(preprocess or [])
    for s in stages:
        if not callable(s):
            raise OptionError(f"preprocess: got {s!r}, expected callables taking an image and returning an array")
    total = len(data) if hasattr(data, "__len__") else None
    if max_samples is not None:
        total = min(total, max_samples) if total is not None else max_samples
    items: list[Any] = []
    desc = f"amdinfer: preprocessing {what}" if stages else f"amdinfer: reading {what}"
    with Progress(desc, total, enabled=progress and bool(stages)) as bar:
        for i, item in enumerate(iterator):
            if max_samples is not None and i >= max_samples:
                break
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
            items.append(_unwrap(x))
            bar.update()
    if not items:
        raise InputError(f"{what}: the iterable gave no samples, expected at least one")
    return items


def to_feeds(
    items: Sequence[Any], proto: onnx.ModelProto, *, what: str, input_name: str | None = None
) -> list[dict[str, np.ndarray]]:
    """Turn samples into feed dicts for ``proto``'s inputs, adding a batch axis where one is missing.

    Raises:
        InputError: a sample names unknown inputs, misses some, or has the wrong dtype or rank.
    """
    specs = input_specs(proto)
    names = [s[0] for s in specs]
    by_name = {s[0]: s for s in specs}
    if input_name is not None and input_name not in by_name:
        raise OptionError(f"input_name: got {input_name!r}, expected one of {names}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            feed = {str(k): _unwrap(v) for k, v in item.items()}
            missing = [n for n in names if n not in feed]
            extra = [k for k in feed if k not in by_name]
            if missing or extra:
                raise InputError(
                    f"{what}[{i}]: got inputs {sorted(feed)}, expected exactly {names}"
                    + (f" (missing {missing})" if missing else "")
                    + (f" (unknown {extra})" if extra else "")
                )
        else:
            target = input_name
            if target is None:
                if len(names) != 1:
                    raise InputError(
                        f"{what}[{i}]: got one {type(item).__name__}, but the model has inputs {names}; "
                        "give feed dicts or input_name="
                    )
                target = names[0]
            feed = {target: item}
            if len(names) != 1 and input_name is not None:
                raise InputError(f"{what}[{i}]: the model has inputs {names}; one array feeds only {target!r}")
        checked = {}
        for name, value in feed.items():
            arr = np.asarray(value)
            _, dtype, rank = by_name[name]
            if rank > 0 and arr.ndim == rank - 1:
                arr = arr[None]  # one sample without its batch axis
            if rank > 0 and arr.ndim != rank:
                raise InputError(f"{what}[{i}]: input {name!r} got shape {arr.shape}, expected rank {rank}")
            if dtype is not None and arr.dtype != dtype:
                raise InputError(
                    f"{what}[{i}]: input {name!r} got dtype {arr.dtype}, expected {np.dtype(dtype)} "
                    f"(cast it, e.g. x.astype(np.{np.dtype(dtype)}))"
                )
            checked[name] = np.ascontiguousarray(arr)
        out.append(checked)
    return out


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
