"""An asyncio dynamic batcher: requests queue up, one engine call per batch, one worker per device."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import OptionError
from ._bounds import check

__all__ = ["BatchWorker", "DynamicBatcher", "run_isolated"]

Tensors = dict[str, np.ndarray]
logger = logging.getLogger("amdinfer.serve")


class BatchWorker(Protocol):
    """What the batcher drives: one per device (see :class:`~amdinfer.serve.EngineWorker`).

    ``run`` gets the feeds of several requests and returns one output dict per request; it runs on the
    worker's own thread, never on the event loop. It raises rather than answer with rows it cannot
    attribute to a request; the batcher then runs the requests of that batch one by one (:func:`run_isolated`).

    Example:
        >>> from amdinfer.serve import EngineWorker, PipelineWorker
        >>> all(callable(getattr(w, m)) for w in (EngineWorker, PipelineWorker) for m in ("key", "rows", "run"))
        True
    """

    name: str

    def key(self, feeds: Tensors) -> Hashable:
        """Requests with equal keys may share an engine call."""
        ...

    def rows(self, feeds: Tensors) -> int:
        """How many items (batch rows) a request carries."""
        ...

    def run(self, requests: Sequence[Tensors]) -> list[Tensors]:
        """Run the requests with one engine call; one output dict per request, in order."""
        ...


def run_isolated(worker: BatchWorker, requests: Sequence[Tensors]) -> list[Tensors | Exception]:
    """Run ``requests`` as one call; if that fails, run each alone: every request gets its own outcome.

    A batch can fail because of one of its requests (data the checks before batching could not judge, a
    stage that refuses an image) or because the worker answered with the wrong number of results or rows.
    Either way no request gets another's error or rows: each is retried on its own and gets its own
    answer or its own exception.

    Example:
        >>> class Picky:
        ...     name = "cpu"
        ...     def run(self, requests):
        ...         if any(r["x"].min() < 0 for r in requests):
        ...             raise ValueError("negative")
        ...         return [{"y": r["x"] + 1} for r in requests]
        >>> outs = run_isolated(Picky(), [{"x": np.array([1])}, {"x": np.array([-1])}])
        >>> outs[0]["y"].tolist(), type(outs[1]).__name__
        ([2], 'ValueError')
    """
    try:
        outs = worker.run(requests)
        if not isinstance(outs, list) or len(outs) != len(requests):
            got = len(outs) if isinstance(outs, list) else type(outs).__name__
            raise RuntimeError(f"worker {worker.name!r}: got {got} results for {len(requests)} requests")
        return list(outs)
    except Exception as exc:
        if len(requests) == 1:
            return [exc]
        logger.info("a batch of %d requests failed (%s); running them one by one", len(requests), exc)
    results: list[Tensors | Exception] = []
    for feeds in requests:
        results.extend(run_isolated(worker, [feeds]))
    return results


@dataclass(eq=False)
class _Pending:
    feeds: Tensors
    rows: int
    key: Hashable
    future: asyncio.Future[Tensors]
    request_id: str | None = None
    queued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    """Groups concurrent requests into batches and runs each batch with one call on a free worker.

    A batch starts with the oldest waiting request and takes the later ones that share its
    :meth:`BatchWorker.key` (same non-batch shapes and dtypes) until ``max_batch_size`` rows, or until
    ``max_delay_ms`` has passed since the oldest arrived, whichever comes first; a request alone larger than
    ``max_batch_size`` runs alone. Requests are checked one by one before they queue (the server does it;
    see :func:`~amdinfer.serve.check_request`) and their rows are counted per request; a batch that fails is
    run again request by request (:func:`run_isolated`), so a request never gets another's data or error.
    Each worker (one per device) has its own thread and takes the next batch
    when it is free, so requests spread over the devices. ``max_batch_size=1`` turns batching off.

    Args:
        workers: one :class:`BatchWorker` per device.
        max_batch_size: rows per engine call at most.
        max_delay_ms: how long the oldest request may wait for others (0: take what is queued now).
        observer: optional callbacks ``batch(worker_name, rows, seconds)``, ``queued(seconds)`` and
            ``depth(requests_waiting)`` (metrics).
        canary: an optional :class:`~amdinfer.serve.Canary`; each answered request's own inputs and outputs
            are offered to it (it samples, copies and queues without blocking), and it starts and stops with
            the batcher.

    Example:
        >>> import asyncio, numpy as np
        >>> class Doubler:
        ...     name = "cpu"
        ...     def key(self, feeds): return feeds["x"].shape[1:]
        ...     def rows(self, feeds): return len(feeds["x"])
        ...     def run(self, requests):
        ...         return [{"y": r["x"] * 2} for r in requests]
        >>> async def main():
        ...     async with DynamicBatcher([Doubler()], max_batch_size=8, max_delay_ms=1) as batcher:
        ...         outs = await asyncio.gather(*(batcher.submit({"x": np.full((1, 2), i)}) for i in range(3)))
        ...     return [o["y"].tolist() for o in outs], batcher.batches
        >>> asyncio.run(main())
        ([[[0, 0]], [[2, 2]], [[4, 4]]], 1)
    """

    def __init__(
        self,
        workers: Sequence[BatchWorker],
        *,
        max_batch_size: int = 32,
        max_delay_ms: float = 2.0,
        observer: Any = None,
        canary: Any = None,
    ) -> None:
        if not workers:
            raise OptionError("workers: got none, expected at least one worker")
        self._workers = list(workers)
        self.max_batch_size: int = check("max_batch_size", max_batch_size)
        self.max_delay = check("max_delay_ms", max_delay_ms) / 1000.0
        self._observer = observer
        #: the numerical canary, if any
        self.canary = canary
        self._pending: collections.deque[_Pending] = collections.deque()
        self._cond: asyncio.Condition | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._executors: list[ThreadPoolExecutor] = []
        self._closing = False
        #: engine calls made so far
        self.batches = 0
        #: what the start line says of the batching when the server chose it (``None``: the caller's values),
        #: e.g. ``"batches of up to 64 rows within 2 ms, buckets 8,16,32,64 (auto: CUDA EP, ...)"``
        self.chosen: str | None = None

    @property
    def workers(self) -> list[BatchWorker]:
        """The workers, one per device."""
        return list(self._workers)

    @property
    def queued(self) -> int:
        """Requests waiting for a worker now."""
        return len(self._pending)

    async def start(self) -> None:
        """Start one dispatcher per worker on the running event loop."""
        if self._tasks:
            return
        self._cond = asyncio.Condition()
        self._closing = False
        if self.canary is not None:
            self.canary.start()
        for i, worker in enumerate(self._workers):
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"amdinfer-{worker.name}")
            self._executors.append(pool)
            self._tasks.append(asyncio.create_task(self._dispatch(worker, pool), name=f"amdinfer-batcher-{i}"))

    async def stop(self) -> None:
        """Finish every queued request, then stop the dispatchers and their threads."""
        if not self._tasks or self._cond is None:
            return
        async with self._cond:
            self._closing = True
            self._cond.notify_all()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for pool in self._executors:
            pool.shutdown(wait=True)
        self._executors.clear()
        if self.canary is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.canary.stop)

    async def __aenter__(self) -> DynamicBatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def submit(self, feeds: Tensors, *, request_id: str | None = None) -> Tensors:
        """Queue one request (already validated) and wait for its outputs.

        Args:
            feeds: the request's inputs.
            request_id: its id, named in the canary's log lines (``None``: the canary makes one up if it logs).

        Raises:
            RuntimeError: the batcher is not running or is stopping.
            Exception: whatever the worker raised for this request run alone, or ``worker.rows``'s error.
        """
        if self._cond is None or not self._tasks or self._closing:
            raise RuntimeError("the batcher is not running (start() it, or it is shutting down)")
        worker = self._workers[0]
        rows = worker.rows(feeds)
        if not isinstance(rows, int) or rows < 1:
            raise RuntimeError(f"worker {worker.name!r}: counted {rows!r} rows in a request, expected an int >= 1")
        item = _Pending(feeds, rows, worker.key(feeds), asyncio.get_running_loop().create_future(), request_id)
        async with self._cond:
            self._pending.append(item)
            self._cond.notify_all()
        if self._observer is not None:
            self._observer.depth(len(self._pending))
        return await item.future

    def _ready(self) -> tuple[bool, float]:
        """Whether a batch can leave now, and how long until the oldest request's deadline."""
        first = self._pending[0]
        rows = 0
        for item in self._pending:
            if item.key == first.key:
                rows += item.rows
                if rows >= self.max_batch_size:
                    return True, 0.0
        left = first.queued + self.max_delay - time.perf_counter()
        return left <= 0 or self._closing, left

    def _take(self) -> list[_Pending]:
        first = self._pending.popleft()
        batch, rows = [first], first.rows
        if rows < self.max_batch_size:
            keep: collections.deque[_Pending] = collections.deque()
            while self._pending:
                item = self._pending.popleft()
                if item.key == first.key and rows + item.rows <= self.max_batch_size:
                    batch.append(item)
                    rows += item.rows
                else:
                    keep.append(item)
            self._pending = keep
        return batch

    async def _dispatch(self, worker: BatchWorker, pool: ThreadPoolExecutor) -> None:
        assert self._cond is not None
        loop = asyncio.get_running_loop()
        while True:
            async with self._cond:
                while True:
                    if not self._pending:
                        if self._closing:
                            return
                        await self._cond.wait()
                        continue
                    ready, left = self._ready()
                    if ready:
                        break
                    try:
                        await asyncio.wait_for(self._cond.wait(), timeout=left)
                    except asyncio.TimeoutError:
                        pass
                batch = self._take()
            if self._observer is not None:
                self._observer.depth(len(self._pending))
            now = time.perf_counter()
            live = [item for item in batch if not item.future.done()]  # a cancelled client's request is dropped
            if not live:
                continue
            if self._observer is not None:
                for item in live:
                    self._observer.queued(now - item.queued)
            try:
                outs = await loop.run_in_executor(pool, run_isolated, worker, [item.feeds for item in live])
            except Exception as exc:  # the executor itself failed (shut down): nothing ran
                outs = [exc] * len(live)
            finally:
                self.batches += 1
            if self._observer is not None:
                self._observer.batch(worker.name, sum(i.rows for i in live), time.perf_counter() - now)
            for item, out in zip(live, outs):
                if item.future.done():
                    continue
                if isinstance(out, Exception):
                    item.future.set_exception(out)
                else:
                    if self.canary is not None:
                        # before the answer leaves: a client may reuse its shared-memory input once answered
                        self.canary.offer(item.feeds, out, item.request_id)
                    item.future.set_result(out)
