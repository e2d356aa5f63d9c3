"""One threaded :meth:`Executor.map <amdinfer.pipeline._executor.Executor.map>`: what the caller's thread and the
engine thread share.

* The **engine thread** reads the input a window at a time, starts each window's placement on the pool, and
  streams the placed batches to the engine (the executor's ``stream``, e.g. ``run_many``); each batch's outputs
  go back to the pool to be finished. It keeps up to ``depth`` windows read but not yet consumed by the caller
  (placement runs ahead of the engine by that much), waits for the caller beyond that, and reads more only when
  the stream itself asks for a batch while holding others (a ``run_many`` that reads ahead).
* The **caller's thread** takes the windows in order and yields each one's results when its calls are finished.

An error is attached where it belongs (an item's placement error to its window, an engine error to the oldest
batch without a result, an input error after the items read before it) and the caller raises it after the
results before it; the threads are then stopped. Leaving early (``close()``, garbage collection of the iterator)
stops them too. The one thing that cannot be interrupted is an input iterator blocked inside its own ``next()``:
the engine thread is a daemon and is logged if it outlives the stop by 5 s.

Example:
    >>> from amdinfer.pipeline._executor import Executor
    >>> ex = Executor(lambda i, x, slot: slot.put(np.array([x])), lambda b, m: {"y": b * 2},
    ...               lambda out, metas: [int(v[0]) for v in out["y"]])
    >>> list(ex.map(range(5), batch_size=2, workers=2))
    [0, 2, 4, 6, 8]
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..errors import StageError
from ..preprocess._cv_threads import single_threaded_opencv
from ._windows import STOPPED, ByShape, Call, Window

__all__ = ["Flow", "FlowSteps"]

log = logging.getLogger("amdinfer.pipeline")

M = TypeVar("M")
R = TypeVar("R")


class FlowSteps(Protocol[M]):
    """What a :class:`Flow` calls on its :class:`~amdinfer.pipeline._executor.Executor`."""

    name: str
    serial: bool

    def stream(self, batches: Iterator[tuple[np.ndarray, list[M]]]) -> Iterator[dict[str, Any]]: ...
    def window(self, start: int, items: list[Any], group: ByShape | None = None, allocate: Any = None) -> Window[M]: ...
    def read(
        self, it: Iterator[Any], start: int, size: int, group: ByShape | None, reading: Any = None
    ) -> Window[M] | None: ...
    def place_on(self, w: Window[M], pool: ThreadPoolExecutor | None, after: Window[M] | None = None) -> None: ...
    def plan(self, w: Window[M]) -> list[Call[M]]: ...
    def finish_call(self, call: Call[M], outputs: dict[str, Any]) -> None: ...
    def release(self, call: Call[M], outputs: dict[str, Any] | None = None) -> None: ...
    def results(self, w: Window[M]) -> Iterator[Any]: ...
    def locate(self, step: str, exc: BaseException, indices: list[int]) -> BaseException: ...
    def stop_window(self, w: Window[M], error: BaseException = ...) -> None: ...


class Flow(Generic[M, R]):
    """The state of one threaded map (see the module); :meth:`run` is the caller's side."""

    def __init__(
        self, ex: FlowSteps[M], it: Iterator[Any], size: int, group: ByShape | None, workers: int, depth: int
    ) -> None:
        self.ex, self.it, self.size, self.group, self.workers, self.depth = ex, it, size, group, workers, depth
        self.windows: queue.SimpleQueue[Window[M] | None] = queue.SimpleQueue()  # to the caller, in order
        self.ahead: deque[Window[M]] = deque()  # read and placing, not yet handed to the stream
        self.unresolved: deque[Call[M]] = deque()  # planned, no output yet (the first ``fed`` are in the stream)
        self.fed = 0
        self.cond = threading.Condition()
        self.unconsumed = 0  # windows read and not yet consumed by the caller
        self.stopping = self.exhausted = self.fed_all = False
        self.read_count = self.next_start = 0
        self.reading = threading.Event()
        self.pool: ThreadPoolExecutor | None = None
        self.thread: threading.Thread | None = None
        self.last: Window[M] | None = None  # the window placed last (``serial``: the next one starts after it)

    # ------------------------------------------------------------------ the caller's side
    def run(self) -> Iterator[R]:
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix=self.ex.name)
        self.thread = threading.Thread(target=self._drive, name=f"{self.ex.name}-engine", daemon=True)
        opencv = single_threaded_opencv(self.workers > 1)  # OpenCV's own pool would fight the placement threads
        opencv.__enter__()
        try:
            self.thread.start()
            while (w := self.windows.get()) is not None:
                yield from self.ex.results(w)
                with self.cond:
                    self.unconsumed -= 1
                    self.cond.notify_all()
        finally:
            self._shutdown()
            opencv.__exit__(None, None, None)

    def _shutdown(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        thread, t0 = self.thread, time.monotonic()
        while thread is not None and thread.is_alive():
            thread.join(0.05)
            if self.reading.is_set() and time.monotonic() - t0 > 5.0:
                log.warning("map: thread %s still running after close (blocked in the input)", thread.name)
                break
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        if thread is None or not thread.is_alive():
            for call in self.unresolved:  # the stream is done with them
                self.ex.release(call)

    # ------------------------------------------------------------------ the engine thread
    def _drive(self) -> None:
        feed = self._feed()
        outputs: Any = None
        error: BaseException | None = None
        try:
            outputs = iter(self.ex.stream(feed))
            for out in outputs:
                if not self.fed:
                    raise StageError("the engine stream yielded more results than it was given batches")
                call = self.unresolved.popleft()
                self.fed -= 1
                self._finish_later(call, out)
            if self.fed:
                raise StageError("the engine stream ended before the results of every batch")
            if not self.fed_all and not self.stopping:
                raise StageError("the engine stream ended before it read every batch")
        except BaseException as exc:  # the engine's, or a bug here: it must reach the caller
            error = exc
        finally:
            close = getattr(outputs, "close", None)
            if close is not None:
                close()  # an overriding run_many may hold threads or device buffers for batches read ahead
            try:
                feed.close()
            except ValueError:  # still running on a thread of the stream's own
                pass
            self._wind_down(error)

    def _finish_later(self, call: Call[M], outputs: dict[str, Any]) -> None:
        try:
            assert self.pool is not None
            self.pool.submit(self.ex.finish_call, call, outputs)
        except RuntimeError:  # the pool was shut down: the caller has left
            call.resolve([], STOPPED)

    def _feed(self) -> Generator[tuple[np.ndarray, list[M]], None, None]:
        """The batches, in order, for the stream; ends after a failed window, at the end of the input, or at stop."""
        while True:
            with self.cond:
                while not (self.stopping or self.exhausted or self.ahead or self.fed or self.unconsumed < self.depth):
                    self.cond.wait()  # every batch handed out has come back: wait for the caller to take results
                if self.stopping:
                    return
            self._read_ahead(force=not self.ahead)
            if not self.ahead:
                self.fed_all = True
                return
            w = self.ahead.popleft()
            calls = self.ex.plan(w)
            self.unresolved.extend(calls)
            self.next_start = w.start + w.count  # an error once these are back belongs to the next item
            for call in calls:
                self.fed += 1
                yield call.buffer, call.metas
            if w.error is not None:  # its error is raised after its results; nothing after it runs
                self.fed_all = True
                return

    def _read_ahead(self, force: bool) -> None:
        """Read windows and start their placement, up to ``depth`` ahead and unconsumed (``force``: one more, for a
        stream that asks for a batch while it holds others)."""
        while not self.exhausted and len(self.ahead) < self.depth:
            with self.cond:
                if (self.unconsumed >= self.depth and not force) or self.stopping:
                    return
                self.unconsumed += 1
            force = False
            w = self.ex.read(self.it, self.read_count, self.size, self.group, self.reading)
            if w is None:
                with self.cond:
                    self.unconsumed -= 1
                self.exhausted = True
                return
            self.read_count += w.count
            self.exhausted = w.error is not None  # the input failed: nothing more to read
            assert self.pool is not None
            self.ex.place_on(w, self.pool, self.last if self.ex.serial else None)
            self.last = w
            self.ahead.append(w)
            self.windows.put(w)

    def _wind_down(self, error: BaseException | None) -> None:
        """Put ``error`` where it belongs and stop everything after it; end the caller's windows."""
        located = None
        if error is not None:
            if self.unresolved:
                target = self.unresolved.popleft()
                target.resolve([], self.ex.locate("run", error, target.indices))
            else:
                located = self.ex.locate("run", error, [self.next_start])
        for call in self.unresolved:
            call.resolve([], STOPPED)
        while self.ahead:
            w = self.ahead.popleft()
            self.ex.stop_window(w, located or STOPPED)
            located = None
        if located is not None:  # nothing left to carry it: a window of its own
            w = self.ex.window(self.next_start, [])
            w.fail(located, 0)
            w.planned.set_result([])
            self.windows.put(w)
        self.windows.put(None)
