"""The executor that keeps an engine busy: items placed into a batch buffer by a thread pool, the engine on its
own thread, results split in order.

Three steps, given by the owner (:class:`~amdinfer.pipeline.fuse.FusedPipeline`):

* ``place(index, item, slot) -> meta``: decode and transform item ``index`` and write it into its slot of the
  batch buffer, asking for it with ``slot(shape)``; runs on the pool (OpenCV and Pillow release the GIL).
* ``run(batch, metas) -> outputs``: one engine call on the whole buffer (the buffer itself: no ``np.stack``).
* ``finish(outputs, metas) -> results``: one result per item.

:meth:`Executor.map` keeps up to ``inflight`` batches going: while batch k runs on the engine thread, the pool
fills batch k+1 and the caller's thread splits batch k-1 into results. Buffers come from a
:class:`~amdinfer.engines._staging.PinnedStaging` (page-locked when the engine runs on a GPU) and return to it
when their batch has run, so memory is bounded by ``inflight`` batches. An item's error carries its index in
the stream (the place step names it); a batch with several failing items reports the first.

Example:
    >>> import numpy as np
    >>> def place(i, item, slot):
    ...     slot((2,))[:] = item
    ...     return i
    >>> ex = Executor(place, lambda batch, metas: {"y": batch.sum(1)}, lambda out, metas: list(out["y"]))
    >>> [int(v) for v in ex.map([(1, 2), (3, 4), (5, 6)], batch_size=2)]
    [3, 7, 11]
    >>> ex.close()
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any, Generic, TypeVar

import numpy as np

from ..engines._staging import PinnedStaging
from ..errors import InputError, OptionError

__all__ = ["Executor", "default_threads"]

M = TypeVar("M")
R = TypeVar("R")
Slot = Callable[[tuple[int, ...]], np.ndarray]
Outputs = dict[str, Any]


def default_threads() -> int:
    """The CPU cores this process may use (its affinity mask where the platform has one).

    Example:
        >>> default_threads() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


class _Abandoned(Exception):
    """Item 0 of the batch failed before it fixed the canvas; the batch reports item 0's error."""


class _Batch(Generic[M]):
    """One batch in flight: its buffer (allocated for the canvas of item 0, or up front when known), the
    per-item metadata and placement futures."""

    def __init__(self, start: int, count: int, allocate: Callable[[tuple[int, ...]], np.ndarray]) -> None:
        self.start, self.count, self._allocate = start, count, allocate
        self.buffer: np.ndarray | None = None
        self.metas: list[Any] = [None] * count
        self.placed = [False] * count
        self.futures: list[Future[Any]] = []
        self.decided = threading.Event()
        self._lock = threading.Lock()

    def slot(self, j: int, shape: tuple[int, ...]) -> np.ndarray:
        """Item ``j``'s slot for a canvas of ``shape``; item 0's canvas is the batch's."""
        if j and self.buffer is None:
            self.decided.wait()  # item 0 was dequeued first (FIFO pool): it is running or done
        with self._lock:
            if self.buffer is None:
                if j:
                    raise _Abandoned
                self.buffer = self._allocate((self.count, *shape))
                self.decided.set()
        if self.buffer.shape[1:] != tuple(shape):
            raise InputError(
                f"item {self.start + j}: got a canvas of {tuple(shape)}, item {self.start} has "
                f"{self.buffer.shape[1:]}; a batch needs one size (use a fixed-size Letterbox/Resize)"
            )
        self.placed[j] = True
        return self.buffer[j]


class Executor(Generic[M, R]):
    """Runs items through ``place`` (a thread pool, into a batch buffer), ``run`` (the engine) and ``finish``.

    Args:
        place: ``(index, item, slot) -> meta``; must call ``slot(shape)`` once and fill what it returns.
        run: ``(batch, metas) -> outputs``.
        finish: ``(outputs, metas) -> results``, one per item.
        canvas: the shape every item's slot has, when known up front (the buffer is then allocated at once;
            otherwise item 0 of each batch fixes it and the others must match).
        threads: pool size; ``None``: the cores this process may use (a batch of n uses at most n).
        staging: where buffers come from (default: plain NumPy buffers, reused).
        dtype: the buffer's dtype.
        inflight: batches :meth:`map` keeps going at once (>= 2 overlaps placement with the engine).
        stream: ``(iterator of (batch, metas)) -> iterator of outputs`` for :meth:`map`, e.g. the engine's
            ``run_many``, which on a GPU copies batch k+1 to the device while batch k computes; it reads the
            batches on the engine thread, at most ``inflight - 1`` ahead of the result it yields. Default:
            ``run`` on each batch in turn.

    Example: see the module.
    """

    def __init__(
        self,
        place: Callable[[int, Any, Slot], M],
        run: Callable[[np.ndarray, Sequence[M]], Outputs],
        finish: Callable[[Outputs, Sequence[M]], list[R]],
        *,
        canvas: tuple[int, ...] | None = None,
        threads: int | None = None,
        staging: PinnedStaging | None = None,
        dtype: Any = np.uint8,
        inflight: int = 3,
        stream: Callable[[Iterator[tuple[np.ndarray, list[M]]]], Iterator[Outputs]] | None = None,
    ) -> None:
        for name, value in (("threads", threads), ("inflight", inflight)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise OptionError(f"{name}: got {value!r}, expected an int >= 1")
        self._place, self._run, self._finish = place, run, finish
        self._stream = stream or self._run_each
        self.canvas = None if canvas is None else tuple(int(c) for c in canvas)
        self.threads = threads or default_threads()
        self._staging = staging or PinnedStaging(depth=inflight + 1, pinned=False)
        self._dtype = np.dtype(dtype)
        self._inflight = inflight
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._engine: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ threads
    def _pools(self) -> tuple[ThreadPoolExecutor, ThreadPoolExecutor]:
        with self._lock:
            if self._pool is None or self._pool_size != self.threads:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)  # its queued work still runs
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="amdinfer-place")
                self._pool_size = self.threads
            if self._engine is None:
                self._engine = ThreadPoolExecutor(1, thread_name_prefix="amdinfer-engine")
            return self._pool, self._engine

    def close(self) -> None:
        """Stop the threads (a later call starts them again)."""
        with self._lock:
            pools, self._pool, self._engine = (self._pool, self._engine), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)

    # ------------------------------------------------------------------ one batch
    def _place_one(self, batch: _Batch[M], j: int, item: Any) -> None:
        try:
            batch.metas[j] = self._place(batch.start + j, item, lambda shape: batch.slot(j, shape))
            if not batch.placed[j]:
                raise RuntimeError(f"item {batch.start + j}: the place step did not ask for its slot")
        finally:
            if j == 0:
                batch.decided.set()

    def _start(
        self,
        items: Sequence[Any],
        start: int,
        allocate: Callable[[tuple[int, ...]], np.ndarray] | None = None,
        *,
        inline: bool = True,
    ) -> _Batch[M]:
        """Start placing ``items`` (stream indices from ``start``) on the pool; with ``inline``, a single item
        is placed right here."""
        batch: _Batch[M] = _Batch(start, len(items), allocate or (lambda s: self._staging.lease(s, self._dtype)))
        if self.canvas is not None:
            batch.buffer = batch._allocate((len(items), *self.canvas))
            batch.decided.set()
        if len(items) == 1 and inline:  # no hand-off for a lone item when nothing else runs meanwhile
            done: Future[Any] = Future()
            try:
                self._place_one(batch, 0, items[0])
                done.set_result(None)
            except BaseException as exc:  # reported by _collect, as from the pool
                done.set_exception(exc)
            batch.futures.append(done)
            return batch
        pool, _ = self._pools()
        batch.futures = [pool.submit(self._place_one, batch, j, item) for j, item in enumerate(items)]
        return batch

    @staticmethod
    def _collect(batch: _Batch[M]) -> tuple[np.ndarray, list[M]]:
        """Wait for every placement of ``batch``; raise the error of its first failing item."""
        wait(batch.futures)
        for f in batch.futures:
            exc = f.exception()
            if exc is not None and not isinstance(exc, _Abandoned):
                raise exc
        assert batch.buffer is not None
        return batch.buffer, batch.metas

    def _run_batch(self, batch: _Batch[M]) -> tuple[Outputs, list[M]]:
        buffer, metas = self._collect(batch)
        return self._run(buffer, metas), metas

    def _release(self, batch: _Batch[M], outputs: Outputs | None = None) -> None:
        """Return the buffer for reuse, unless an output may be a view of it (an Identity graph)."""
        buffer, batch.buffer = batch.buffer, None
        if buffer is None:
            return
        if outputs and any(isinstance(v, np.ndarray) and np.may_share_memory(v, buffer) for v in outputs.values()):
            return
        self._staging.release(buffer)

    # ------------------------------------------------------------------ the public steps
    def place_batch(
        self, items: Sequence[Any], allocate: Callable[[tuple[int, ...]], np.ndarray]
    ) -> tuple[np.ndarray, list[M]]:
        """Place ``items`` (in parallel) into a buffer from ``allocate(shape)`` that the caller keeps."""
        return self._collect(self._start(items, 0, allocate))

    def run_batch(self, items: Sequence[Any]) -> list[R]:
        """Place ``items`` in parallel, run them as one batch, return one result per item."""
        if not items:
            return []
        batch = self._start(items, 0)
        outputs = None
        try:
            outputs, metas = self._run_batch(batch)
            return self._finish(outputs, metas)
        finally:
            self._release(batch, outputs)

    def _run_each(self, batches: Iterator[tuple[np.ndarray, list[M]]]) -> Iterator[Outputs]:
        """The default ``stream``: ``run`` on each placed batch in turn (on the engine thread)."""
        for buffer, metas in batches:
            yield self._run(buffer, metas)

    def map(self, items: Iterable[Any], batch_size: int) -> Iterator[R]:
        """Run a stream ``batch_size`` items at a time, up to ``inflight`` batches at once; results in order.

        Placed batches go to ``stream`` (on the engine thread) in order through a queue; its outputs come back
        through another. A batch whose placement failed ends the stream there: the results before it are
        yielded, then its item's error is raised."""
        it = iter(items)
        todo: queue.Queue[_Batch[M] | None] = queue.Queue()
        done: queue.Queue[tuple[str, Any]] = queue.Queue()
        failed: list[BaseException] = []

        def batches() -> Iterator[tuple[np.ndarray, list[M]]]:
            while (batch := todo.get()) is not None:
                try:
                    yield self._collect(batch)
                except BaseException as exc:  # an item's error: stop feeding, report it after the results
                    failed.append(exc)
                    return

        def drive() -> None:
            try:
                for outputs in self._stream(batches()):
                    done.put(("out", outputs))
            except BaseException as exc:
                done.put(("error", exc))
            done.put(("end", None))

        inflight: deque[_Batch[M]] = deque()
        runner = self._pools()[1].submit(drive)
        start, exhausted = 0, False
        try:
            while True:
                while not exhausted and len(inflight) < self._inflight:
                    chunk = list(islice(it, batch_size))
                    if not chunk:
                        exhausted = True
                        todo.put(None)
                        break
                    batch = self._start(chunk, start, inline=False)
                    start += len(chunk)
                    inflight.append(batch)
                    todo.put(batch)
                kind, value = done.get()
                if kind == "error":
                    raise value
                if kind == "end":
                    if failed:
                        raise failed[0]
                    return
                batch = inflight.popleft()
                metas = batch.metas
                self._release(batch, value)
                yield from self._finish(value, metas)
        finally:
            for b in inflight:  # placement not started yet is dropped; the stream stops at that batch
                for f in reversed(b.futures):
                    f.cancel()
            todo.put(None)
            wait([runner])  # the stream is done with every buffer before any goes back to the staging
            self._abandon(inflight)

    def _abandon(self, batches: Iterable[_Batch[M]]) -> None:
        """Cancel what has not started (an error, or the caller stopped early); wait for what has."""
        batches = list(batches)
        for b in batches:
            for f in reversed(b.futures):
                f.cancel()
        for b in batches:
            wait(b.futures)
            self._release(b)
