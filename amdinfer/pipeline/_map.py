"""The streaming executor behind :meth:`Pipeline.map <amdinfer.Pipeline.map>`: threads, bounded queues, in order.

It sees a pipeline only through :class:`MapSteps` (the steps it calls), never the ``Pipeline`` itself.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import HwcToChw, Cast
    >>> from amdinfer.testing.models import tiny_cnn
    >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
    ...                          backend="ort", providers=["CPUExecutionProvider"])
    >>> type(pipe.map([np.zeros((32, 32, 3), np.uint8)])).__name__
    'PipelineMap'
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engines.base import Engine
from ..errors import StageError
from ..preprocess import stack
from ..stages import Sample, _stage_error

__all__ = ["MapSteps", "PipelineMap"]

log = logging.getLogger("amdinfer.pipeline")

_POLL_S = 0.05
_DONE = object()
_STOPPED = object()


@dataclass(frozen=True)
class MapSteps:
    """The steps of a pipeline, as the executor calls them (each names the item and stage that failed).

    Attributes:
        engine: the engine (its ``run_many`` streams the batches).
        input_name: the engine input the batch goes to.
        preprocess_one: ``(index, item) -> Sample``.
        postprocess_one: ``(index, Sample) -> result``.
        infer_samples: ``(first index, samples) -> samples with outputs`` (the sequential path).
        chunks: ``batch -> [(chunk, size)]`` (batch buckets / engine limits).
        cut: ``(outputs, chunk, size) -> outputs`` without padding rows.
        split: ``(parts, n) -> one output per item``.
    """

    engine: Engine
    input_name: str
    preprocess_one: Callable[[int, Any], Sample]
    postprocess_one: Callable[[int, Sample], Any]
    infer_samples: Callable[[int, list[Sample]], list[Sample]]
    chunks: Callable[[np.ndarray], list[tuple[np.ndarray, int]]]
    cut: Callable[[dict[str, Any], np.ndarray, int], dict[str, Any]]
    split: Callable[[list[dict[str, Any]], int], list[Any]]


class _Call:
    """One engine call of :meth:`Pipeline.map`: a whole batch, or one chunk of it for a fixed-batch model."""

    __slots__ = ("count", "feed", "first", "indices", "last", "metas", "size")

    def __init__(
        self, first: int, count: int, indices: list[int], metas: list[Any], feed: np.ndarray, size: int, last: bool
    ) -> None:
        self.first = first  # index of the batch's first item
        self.count = count  # items in the whole batch
        self.indices = indices
        self.metas = metas
        self.feed = feed
        self.size = size  # real items in this call (the rest is padding)
        self.last = last  # the batch's last chunk


class _MapState:
    """What the map threads share; they never hold the :class:`PipelineMap` itself, so it can be collected."""

    def __init__(self, steps: MapSteps, items: Iterable[Any], batch_size: int, workers: int) -> None:
        self.steps = steps
        self.iterator = iter(items)
        self.batch_size = batch_size
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="amdinfer-map-worker")
        depth = 2 * max(workers, batch_size)
        self.q_pre: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.q_post: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.threads = [
            threading.Thread(target=self._feed, name="amdinfer-map-feed", daemon=True),
            threading.Thread(target=self._run_engine, name="amdinfer-map-engine", daemon=True),
        ]

    # queue helpers that give up once stop is set
    def put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self, q: queue.Queue[Any]) -> Any:
        while True:
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    return _STOPPED

    def wait(self, fut: Future[Any]) -> bool:
        while not fut.done():
            if self.stop.is_set():
                return False
            wait_futures([fut], timeout=_POLL_S)
        return True

    def submit(self, fn: Any, *args: Any) -> Future[Any] | None:
        try:
            return self.pool.submit(fn, *args)
        except RuntimeError:  # the pool was shut down by close()
            return None

    @staticmethod
    def failed(exc: BaseException) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_exception(exc)
        return fut

    # thread bodies
    def _feed(self) -> None:
        index = 0
        try:
            while not self.stop.is_set():
                try:
                    item = next(self.iterator)
                except StopIteration:
                    break
                except Exception as exc:
                    self.put(self.q_pre, (index, self.failed(_stage_error(index, "input iterable", exc))))
                    return
                fut = self.submit(self.steps.preprocess_one, index, item)
                if fut is None or not self.put(self.q_pre, (index, fut)):
                    return
                index += 1
        finally:
            self.put(self.q_pre, _DONE)

    def _run_engine(self) -> None:
        """Batch preprocessed items and run them through ``engine.run_many``, then hand each item's output
        to a postprocessing worker.

        ``run_many`` may read batches ahead of the result it yields (on a GPU the ORT engine copies batch k+1
        while batch k computes), so the batches generator never raises: a failure while batching (an item's
        preprocessing, stacking) ends the stream and is reported after the results of the batches before it.
        ``inflight`` lists the engine calls handed over whose results have not come back, oldest first: an
        error out of ``run_many`` belongs to its first entry.
        """
        inflight: collections.deque[_Call] = collections.deque()
        failure: list[tuple[int, Future[Any]]] = []
        feeds = self._batches(inflight, failure)
        results: Any = None
        engine = self.steps.engine
        stage = f"engine {type(engine).__name__}"
        upcoming = 0  # the first item whose result has not been handed on

        def fail(exc: BaseException) -> None:
            # An error before run_many read any batch belongs to the next item.
            first, count = (inflight[0].first, inflight[0].count) if inflight else (upcoming, 1)
            self.put(self.q_post, (first, self.failed(_stage_error(first, stage, exc, count=count))))

        try:
            parts: list[dict[str, Any]] = []
            try:
                results = iter(engine.run_many(feeds, prefetch=2))
            except Exception as exc:
                fail(exc)
                return
            while True:
                try:
                    out = next(results)
                except StopIteration:
                    break
                except Exception as exc:
                    fail(exc)
                    return
                if not inflight:
                    raise StageError(f"{type(engine).__name__}.run_many yielded more results than it was given batches")
                call = inflight.popleft()
                if self.stop.is_set():
                    return
                try:
                    parts.append(self.steps.cut(out, call.feed, call.size))
                    if not call.last:
                        continue
                    outputs = self.steps.split(parts, call.count)
                except Exception as exc:
                    err = _stage_error(call.first, f"engine {type(engine).__name__}", exc, count=call.count)
                    self.put(self.q_post, (call.first, self.failed(err)))
                    return
                parts = []
                for k, (index, meta) in enumerate(zip(call.indices, call.metas)):
                    fut = self.submit(self.steps.postprocess_one, index, Sample(outputs[k], meta))
                    if fut is None or not self.put(self.q_post, (index, fut)):
                        return
                upcoming = call.first + call.count
            if self.stop.is_set():
                return
            if inflight:
                fail(StageError(f"{type(engine).__name__}.run_many ended before the results of every batch"))
                return
            self.put(self.q_post, failure[0] if failure else _DONE)
        except BaseException as exc:  # a bug here must reach the consumer, not vanish with the thread
            self.put(self.q_post, (-1, self.failed(exc)))
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()  # an overriding run_many may hold threads or device buffers for batches read ahead
            feeds.close()  # type: ignore[attr-defined]

    def _batches(self, inflight: collections.deque[_Call], failure: list[tuple[int, Future[Any]]]) -> Iterator[Any]:
        """The engine feeds, in order: preprocessed items stacked ``batch_size`` at a time (in chunks of a
        fixed model batch); each one is recorded in ``inflight``. Ends, never raises, at the first failure,
        which it leaves in ``failure``."""
        steps = self.steps
        batch: list[tuple[int, Sample]] = []
        done = False
        while not done:
            got = self.get(self.q_pre)
            if got is _STOPPED:
                return
            if got is _DONE:
                done = True
            else:
                index, fut = got
                if not self.wait(fut) or self.stop.is_set():
                    return
                if fut.exception() is not None:
                    failure.append((index, fut))
                    done = True  # the items before it still run
                else:
                    batch.append((index, fut.result()))
                    if len(batch) < self.batch_size:
                        continue
            if not batch:
                continue
            first, count = batch[0][0], len(batch)
            try:
                stacked, metas = stack([s for _, s in batch])
                chunks = steps.chunks(stacked)
            except Exception as exc:
                failure[:] = [(first, self.failed(_stage_error(first, "stack", exc, count=count)))]
                return
            indices = [i for i, _ in batch]
            batch = []
            for k, (feed, size) in enumerate(chunks):
                call = _Call(first, count, indices, metas, feed, size, last=k == len(chunks) - 1)
                inflight.append(call)
                yield {steps.input_name: feed}

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def shutdown(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for t in self.threads:
            if t.is_alive():
                # The feed thread can only be stuck inside the caller's iterator; the engine thread finishes
                # its current engine call.
                t.join(timeout=None if t.name.endswith("engine") else 5.0)
                if t.is_alive():
                    log.warning("Pipeline.map: thread %s still running after close (blocked in the input)", t.name)
        self.pool.shutdown(wait=True)


class PipelineMap(Iterator[Any]):
    """The iterator :meth:`Pipeline.map` returns: results in input order; ``close()`` stops its threads.

    Example:
        >>> import amdinfer
        >>> from amdinfer.preprocess import HwcToChw, Cast
        >>> from amdinfer.testing.models import tiny_cnn
        >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
        ...                          backend="ort", providers=["CPUExecutionProvider"])
        >>> results = pipe.map([np.zeros((32, 32, 3), np.uint8)] * 10)
        >>> next(results).shape
        (10,)
        >>> results.close()  # stops the threads before the end
    """

    def __init__(self, steps: MapSteps, items: Iterable[Any], batch_size: int, workers: int) -> None:
        self._closed = False
        self._started = False
        self._sync: Iterator[Any] | None = None
        self._state: _MapState | None = None
        if workers == 0:
            self._sync = self._sequential(steps, iter(items), batch_size)
        else:
            self._state = _MapState(steps, items, batch_size, workers)

    @staticmethod
    def _sequential(steps: MapSteps, iterator: Iterator[Any], batch_size: int) -> Iterator[Any]:
        index = 0
        while True:
            samples = []  # type: ignore[var-annotated]
            first = index
            error: StageError | None = None
            while len(samples) < batch_size:
                try:
                    item = next(iterator)
                except StopIteration:
                    break
                except Exception as exc:
                    error = _stage_error(index, "input iterable", exc)
                    break
                try:
                    samples.append(steps.preprocess_one(index, item))
                except StageError as exc:
                    error = exc
                    break
                index += 1
            if samples:
                # The items before a failure still come out, as with threads.
                for k, sample in enumerate(steps.infer_samples(first, samples)):
                    yield steps.postprocess_one(first + k, sample)
            if error is not None:
                raise error
            if not samples:
                return

    def __iter__(self) -> PipelineMap:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._sync is not None:
            try:
                return next(self._sync)
            except BaseException:
                self.close()
                raise
        state = self._state
        assert state is not None
        if not self._started:
            self._started = True
            state.start()
        while True:
            try:
                got = state.q_post.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not state.threads[1].is_alive() and state.q_post.empty():
                    self.close()
                    raise StageError("Pipeline.map: the engine thread ended without a result") from None
        if got is _DONE:
            self.close()
            raise StopIteration
        _, fut = got
        try:
            return fut.result()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the threads and drop what is in flight. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._sync is not None:
            self._sync.close()  # type: ignore[attr-defined]
        if self._state is not None:
            if self._started:
                self._state.shutdown()
            else:
                self._state.pool.shutdown(wait=True)

    def __enter__(self) -> PipelineMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
