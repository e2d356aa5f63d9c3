"""The steps a :class:`~amdinfer.Pipeline` gives the one executor (:mod:`amdinfer.pipeline._executor`): place
(preprocess an item into its slot), run (the engine, in chunks of a fixed model batch), finish (split the outputs
per item, postprocess), and where an error belongs.

:class:`PipelineSteps` holds them (each names the item and stage that failed) and the pipeline's
:class:`~amdinfer.pipeline._executor.Executor`; ``Pipeline`` builds on it, and ``__call__``, ``run_batch``,
``map`` and :class:`~amdinfer.pipeline.SubPipeline` all run through that executor.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import HwcToChw, Cast
    >>> from amdinfer.testing.models import tiny_cnn
    >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
    ...                          backend="ort", providers=["CPUExecutionProvider"])
    >>> isinstance(pipe, PipelineSteps)
    True
    >>> [r.shape for r in pipe._executor.run_batch([np.zeros((32, 32, 3), np.uint8)] * 2, workers=0)]
    [(10,), (10,)]
    >>> pipe.close()
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..engines._buckets import bucket_rows
from ..engines._staging import PinnedStaging
from ..engines.base import Engine
from ..errors import InputError, OptionError, StageError, StageInputError
from ..results._forms import set_speed
from ..stages import Postprocessor, Preprocessor, Sample, _stage_error
from ..types import TensorSpec
from ._auto import auto_batch_size, device_free_memory, hint_fixed, on_accelerator, record, split_size
from ._executor import ByShape, Executor, Slot
from ._source_images import attach, preprocess

__all__ = ["PipelineSteps"]


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise OptionError(f"{name}: got {value!r}, expected an int >= {minimum}")
    return int(value)


class Item(NamedTuple):
    """What the place step keeps of an item: its index (``idx``, as the errors name it) and its metadata."""

    idx: int
    meta: dict[str, Any]


#: an item's metadata key for its stage times in ms (the result's ``speed``); an engine call's time is shared out
SPEED = "_speed"


def _share(metas: Sequence[Item], start: float) -> None:
    """Give each of an engine call's items an even share of the time since ``start`` as its ``inference``."""
    ms = (time.perf_counter() - start) * 1e3 / max(len(metas), 1)
    for item in metas:
        item.meta.setdefault(SPEED, {})["inference"] = ms


def batch_error(indices: Sequence[int], stage: str, exc: BaseException) -> BaseException:
    """The error of one batch's step, naming its items: ``item 3``, ``items 3..5 (one batch)``, or, for items that
    are not neighbours in the input (a shape group), ``items 1, 3 (one batch)``."""
    if isinstance(exc, StageError) and getattr(exc, "index", None) is not None:
        return exc  # already located
    first = indices[0]
    if list(indices) == list(range(first, first + len(indices))):
        return _stage_error(first, stage, exc, count=len(indices))
    kind = StageInputError if isinstance(exc, InputError) else StageError
    err = kind(f"items {', '.join(map(str, indices))} (one batch): {stage}: {type(exc).__name__}: {exc}")
    err.index = first  # type: ignore[attr-defined]
    err.stage = stage  # type: ignore[attr-defined]
    err.__cause__ = exc
    return err


class PipelineSteps:
    """The steps of a pipeline (its stages, engine and single input set by the subclass), each naming what failed.

    Subclasses change what one engine call is fed (:meth:`_engine_feed`, :meth:`_engine_outputs`), how many items
    one call takes (:meth:`_call_size`) and how ``map`` batches (:attr:`_map_window`, :attr:`_map_by_shape`).

    Example:
        >>> import amdinfer
        >>> issubclass(amdinfer.Pipeline, PipelineSteps)
        True
    """

    _preprocess: tuple[Preprocessor, ...]
    _postprocess: tuple[Postprocessor, ...]
    _engine: Engine
    _input: TensorSpec
    _keep_image: bool
    #: ``map`` reads windows of ``batch_size * _map_window`` items
    _map_window = 1
    #: ``map`` groups a window by shape (else a batch is consecutive items of one shape)
    _map_by_shape = False

    @property
    def _executor(self) -> Executor[Item, Any]:
        """The executor this pipeline's batching paths run on (made on first use)."""
        ex: Executor[Item, Any] | None = self.__dict__.get("_executor_")
        if ex is None:
            gpu = self._on_accelerator()
            ex = Executor(
                self._place,
                self._run,
                self._finish,
                staging=PinnedStaging(depth=4, pinned=None if gpu else False),
                stream=self._stream,
                locate=self._locate,
                rows=self._rows,
                serial=not gpu,
                name="amdinfer-map",
            )
            self.__dict__["_executor_"] = ex
        return ex

    def _call_size(self) -> int | None:
        """The most items one engine call takes (``None``: a whole shape group)."""
        return None

    def _on_accelerator(self) -> bool:
        """Whether the engine runs on an accelerator (``info.device`` other than ``"cpu"``)."""
        return on_accelerator(getattr(self._engine.info, "device", "cpu"))

    def _item_bytes(self) -> int | None:
        """One item's input bytes, when the model's input has fixed dims after the batch axis."""
        dims = [d for d in self._input.shape[1:] if isinstance(d, int)]
        if len(dims) != len(self._input.shape) - 1:
            return None
        return math.prod(dims) * np.dtype(self._input.dtype).itemsize

    def _auto_batch(self) -> tuple[int, str]:
        """:func:`~amdinfer.pipeline._auto.auto_batch_size` for this pipeline's engine: ``(size, why)``."""
        info = self._engine.info
        free = device_free_memory(info.device) if self._on_accelerator() else None
        fixed = self._fixed_batch()
        return auto_batch_size(info.device, info.providers, self._engine.batch_buckets, fixed, free, self._item_bytes())

    def _default_batch_size(self) -> int:
        """``map``'s ``batch_size`` for ``"auto"`` (and ``None``): the size chosen for the device, recorded in
        ``engine.info.settings["map_batch_size"]``."""
        size, why = self._auto_batch()
        record(self._engine.info, size, why)
        hint_fixed(self._engine.info, self._fixed_batch())
        return size

    def _items_may_differ(self) -> bool:
        """Whether the model takes items of different shapes (dims after the batch axis left open): an automatic
        ``map`` batch then groups its window by shape instead of failing on two shapes in one batch."""
        return not all(isinstance(d, int) for d in self._input.shape[1:])

    def _map_group(self, batch_size: int) -> ByShape | None:
        return ByShape(size=batch_size) if self._map_by_shape else None

    # ------------------------------------------------------------------ place
    def _preprocess_one(self, index: int, item: Any) -> Sample:
        sample = preprocess(index, Sample.wrap(item), self._preprocess, keep_image=self._keep_image)
        if not isinstance(sample.data, np.ndarray):
            exc = TypeError(f"got {type(sample.data).__name__}, expected a numpy array for the engine")  # type: ignore[misc]
            raise _stage_error(index, "preprocess (result)", exc)  # type: ignore[misc]
        return sample

    def _place(self, index: int, item: Any, slot: Slot) -> Item:
        start = time.perf_counter()
        sample = self._preprocess_one(index, item)
        slot.put(sample.data)
        return Item(index, {**sample.meta, SPEED: {"preprocess": (time.perf_counter() - start) * 1e3}})

    # ------------------------------------------------------------------ run
    def _fixed_batch(self) -> int | None:
        """The model's fixed batch size, when it has one and no ``batch_buckets`` pad for it."""
        fixed = self._input.shape[0] if self._input.shape else None
        return fixed if isinstance(fixed, int) and not self._engine.batch_buckets else None

    def _rows(self, n: int) -> int:
        """The rows a batch of ``n`` items is allocated with: the engine's bucket, or chunks of a fixed batch."""
        return bucket_rows(self._engine.batch_buckets, n, fixed=self._fixed_batch())

    def _chunks(self, batch: np.ndarray, n: int) -> list[tuple[np.ndarray, int]]:
        """The engine calls of one batch: ``(rows, real items)``, views of the batch in chunks of a fixed batch."""
        fixed = self._fixed_batch()
        if fixed is None or batch.shape[0] == fixed:
            return [(batch, n)]
        return [(batch[k : k + fixed], max(0, min(fixed, n - k))) for k in range(0, batch.shape[0], fixed)]

    def _engine_feed(self, chunk: np.ndarray, real: int) -> dict[str, Any]:
        """What one engine call is fed for ``chunk`` (its first ``real`` rows are items, the rest padding)."""
        return {self._input.name: chunk}

    def _engine_outputs(self) -> list[str] | None:
        """The outputs one engine call asks for (``None``: all)."""
        return None

    def _run(self, batch: np.ndarray, metas: Sequence[Item]) -> dict[str, Any]:
        """The executor's run step: one engine call per chunk, outputs joined and cut to the real items."""
        parts = []
        start = time.perf_counter()
        for chunk, real in self._chunks(batch, len(metas)):
            out = self._engine.run(self._engine_feed(chunk, real), outputs=self._engine_outputs())
            parts.append((out, chunk.shape[0]))
        joined = self._join(parts, len(metas))
        _share(metas, start)
        return joined

    def _stream(self, batches: Iterator[tuple[np.ndarray, list[Item]]]) -> Iterator[dict[str, Any]]:
        """The executor's stream (``map``): the batches' chunks through ``engine.run_many``, which on a GPU copies
        chunk k+1 to the device while chunk k computes; one joined output per batch."""
        name = type(self._engine).__name__
        # per chunk fed: (rows, last of its batch, the batch's items, when its batch was fed)
        pending: deque[tuple[int, bool, Sequence[Item], float]] = deque()

        def feeds() -> Iterator[dict[str, Any]]:
            for batch, metas in batches:
                chunks = self._chunks(batch, len(metas))
                fed = time.perf_counter()
                for k, (chunk, real) in enumerate(chunks):
                    pending.append((chunk.shape[0], k == len(chunks) - 1, metas, fed))
                    yield self._engine_feed(chunk, real)

        results = self._engine.run_many(feeds(), outputs=self._engine_outputs(), prefetch=2)
        parts: list[tuple[dict[str, Any], int]] = []
        done = time.perf_counter()  # the engine's time on a batch: from its feed, or the batch before, to its outputs
        try:
            for out in results:
                if not pending:
                    raise StageError(f"{name}.run_many yielded more results than it was given batches")
                rows, last, metas, fed = pending.popleft()
                parts.append((out, rows))
                if last:
                    joined, parts = self._join(parts, len(metas)), []
                    _share(metas, max(fed, done))
                    done = time.perf_counter()
                    yield joined
            if pending:
                raise StageError(f"{name}.run_many ended before the results of every batch")
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()

    @staticmethod
    def _join(parts: list[tuple[dict[str, Any], int]], n: int) -> dict[str, Any]:
        """Join a batch's chunk outputs (each checked for its chunk's rows on axis 0) and cut the padding rows."""
        for out, rows in parts:
            for name, value in out.items():
                if getattr(value, "ndim", 0) < 1 or value.shape[0] != rows:
                    raise StageError(
                        f"output {name!r}: got shape {getattr(value, 'shape', None)}, expected a batch axis of "
                        f"{rows} (a Pipeline splits outputs per item along axis 0)"
                    )
        first = parts[0][0]
        if len(parts) == 1:
            return first if parts[0][1] == n else {k: v[:n] for k, v in first.items()}
        return {k: np.concatenate([p[k] for p, _ in parts])[:n] for k in first}

    # ------------------------------------------------------------------ finish
    def _postprocess_one(self, index: int, sample: Sample) -> Any:
        start, speed = time.perf_counter(), sample.meta.get(SPEED) or {}
        for k, stage in enumerate(self._postprocess):
            try:
                sample = stage(sample)
            except Exception as exc:
                raise _stage_error(index, f"postprocess[{k}] {type(stage).__name__}", exc) from exc
        result = attach(sample.data, sample.meta)
        return set_speed(result, {**speed, "postprocess": (time.perf_counter() - start) * 1e3})

    def _finish(self, outputs: dict[str, Any], metas: Sequence[Item]) -> Iterator[Any]:
        """The executor's finish step: each item's outputs (the single output, or a ``{name: array}`` dict) through
        the postprocessing stages."""
        names = list(outputs)
        for k, (index, meta) in enumerate(metas):
            data = outputs[names[0]][k] if len(names) == 1 else {name: outputs[name][k] for name in names}
            yield self._postprocess_one(index, Sample(data, meta))

    def _locate(self, step: str, exc: BaseException, indices: list[int]) -> BaseException:
        """The executor's errors, named as the pipeline names them: the item the input failed at, or the batch."""
        if step == "input":
            return _stage_error(indices[0], "input iterable", exc)
        if step == "stack":
            cause = StageError(str(exc))
            cause.__cause__ = exc
            return batch_error(indices, "stack", cause)
        return batch_error(indices, f"engine {type(self._engine).__name__}", exc)

    def _run_items(self, items: Iterable[Any], group: ByShape) -> list[Any]:
        """``items`` through the executor here in the caller's thread, one engine call per ``group``."""
        return self._executor.run_batch(list(items), group=group, workers=0)

    def _sub_batch(self, n: int, group: ByShape) -> int | None:
        """The sub-batch one call on ``n`` items runs in (:func:`~amdinfer.pipeline._auto.split_size`), or ``None``:
        one batch in the caller's thread (on the CPU, whose cores the engine uses; for tagged groups)."""
        if not self._on_accelerator() or group.tags is not None:
            return None
        hint_fixed(self._engine.info, self._fixed_batch())
        size, _ = self._auto_batch()
        sub = split_size(n, size, self._engine.batch_buckets, self._fixed_batch())
        if sub is not None and group.size:  # whole calls of the group's size per sub-batch
            sub = -(-sub // group.size) * group.size
        return sub if sub is not None and n >= 2 * sub else None

    def _run_call(self, items: Iterable[Any], group: ByShape) -> list[Any]:
        """One call on a list (``run_batch``): on an accelerator, sub-batches streamed through the executor's
        ``map`` (placing sub-batch k+1 while the engine runs sub-batch k; each grouped by shape), or for a list
        of less than two automatic batches one call with its items placed on the executor's threads; on the CPU
        :meth:`_run_items`. The same answers, in order, and the first failing item's error."""
        items = list(items)
        sub = self._sub_batch(len(items), group)
        if sub is None and self._on_accelerator() and group.tags is None:  # one call, its items placed in parallel
            return self._executor.run_batch(items, group=group)
        if sub is None:
            return self._run_items(items, group)
        split = ByShape(size=min(group.size or sub, sub), pad_to=group.pad_to)
        results = self._executor.map(items, sub, group=split)
        try:
            return list(results)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()
