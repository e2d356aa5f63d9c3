"""The one executor every batching path runs on: items placed into batch buffers by a thread pool, the engine on
its own thread, results finished in order.

:class:`~amdinfer.Pipeline` (``__call__``, ``run_batch``, ``map``), the text and embedding pipelines,
:class:`~amdinfer.pipeline.SubPipeline` (cascades) and :class:`~amdinfer.pipeline.fuse.FusedPipeline` are each three
steps given to an :class:`Executor`:

* ``place(index, item, slot) -> meta``: decode and transform item ``index`` and write it into its slot of the
  batch buffer (``slot(shape[, dtype])`` gives the array to write, ``slot.put(array)`` hands over an array
  that holds it; see :class:`~amdinfer.pipeline._windows.Slot`); runs on the pool (OpenCV and Pillow release
  the GIL).
* ``run(batch, metas) -> outputs``: one engine call on the whole buffer (the buffer itself: no ``np.stack``). The
  buffer has ``rows(len(metas))`` rows: the owner's ``rows`` pads a batch to the engine's bucket or fixed batch
  (the extra rows copies of the last item, :mod:`amdinfer.engines._buckets`).
* ``finish(outputs, metas) -> results``: one result per item (an iterable: the results before a failing item
  still come out).

Batches are consecutive items of one canvas, or, with :class:`~amdinfer.pipeline._windows.ByShape`, a window of
items grouped by shape (pages of different sizes, texts of different length buckets). :meth:`Executor.map` keeps
a bounded number of windows in flight: the engine thread reads the input and streams placed batches to the
engine (``stream``, e.g. ``run_many``) while the pool places the next windows and finishes the last ones;
results come back in order. ``workers=0`` (and :meth:`Executor.run_batch` of one item) runs everything in the
caller's thread, with no thread at all. An error is raised after the results of the items before it, carrying its
item's index: a placement error cuts its window short, an engine error names the batch's items (``locate``).

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
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Generic, TypeVar

import numpy as np

from ..engines._staging import PinnedStaging
from ..errors import OptionError, StageError
from ..preprocess._cv_threads import single_threaded_opencv
from ._flow import Flow
from ._windows import STOPPED, ByShape, Call, Locate, Slot, Stopped, Window, plan

__all__ = ["ByShape", "Executor", "Slot", "default_threads"]

M = TypeVar("M")
R = TypeVar("R")
Outputs = dict[str, Any]
Stream = Callable[[Iterator[tuple[np.ndarray, list[M]]]], Iterator[Outputs]]
_MISSING = object()


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


def _count(name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise OptionError(f"{name}: got {value!r}, expected an int >= {minimum}")
    return int(value)


class Executor(Generic[M, R]):
    """Runs items through ``place`` (a thread pool, into a batch buffer), ``run`` (the engine) and ``finish``.

    Args:
        place: ``(index, item, slot) -> meta``; must ask for its slot (call it, or ``slot.put(array)``).
        run: ``(batch, metas) -> outputs``.
        finish: ``(outputs, metas) -> results``, one per item.
        canvas: the shape every item's slot has, when known up front (the buffer is then allocated at once;
            otherwise item 0 of each batch fixes it and the others must match).
        threads: pool size of :meth:`run_batch` and the default ``workers`` of :meth:`map`; ``None``: the cores this
            process may use (a batch of n uses at most n).
        staging: where buffers come from (default: plain NumPy buffers, reused).
        dtype: the buffer's dtype when ``slot`` is called without one.
        inflight: windows :meth:`map` keeps going at once (>= 2 overlaps placement with the engine; more when
            ``workers`` need them to stay busy).
        stream: ``(iterator of (batch, metas)) -> iterator of outputs`` for :meth:`map`, e.g. the engine's
            ``run_many``, which on a GPU copies batch k+1 to the device while batch k computes; it reads the
            batches on the engine thread. Default: ``run`` on each batch in turn.
        locate: ``(step, error, indices) -> error``: the error to raise when reading the input fails (step
            ``"input"``, the index of the item that could not be read), a batch cannot be stacked (``"stack"``) or
            the engine fails (``"run"``, the batch's items); default: the error as it is.
        rows: ``n -> rows`` a batch of n items is allocated with (>= n; padded by repeating the last item).
        serial: :meth:`map` places one window after another (the items of a window in parallel) rather than
            all the windows in flight at once: for an engine on the CPU, whose cores a second placement would only
            take from it (``False``: an accelerator, where placement is the host's only work).
        name: the threads' name prefix.

    Example: see the module.
    """

    def __init__(
        self,
        place: Callable[[int, Any, Slot], M],
        run: Callable[[np.ndarray, Sequence[M]], Outputs],
        finish: Callable[[Outputs, Sequence[M]], Iterable[R]],
        *,
        canvas: tuple[int, ...] | None = None,
        threads: int | None = None,
        staging: PinnedStaging | None = None,
        dtype: Any = np.uint8,
        inflight: int = 3,
        stream: Stream[M] | None = None,
        locate: Locate | None = None,
        rows: Callable[[int], int] | None = None,
        serial: bool = False,
        name: str = "amdinfer-place",
    ) -> None:
        for key, value in (("threads", threads), ("inflight", inflight)):
            if value is not None:
                _count(key, value, 1)
        self._place, self._run, self._finish = place, run, finish
        self.stream: Stream[M] = stream or self._run_each
        self.canvas = None if canvas is None else tuple(int(c) for c in canvas)
        self.threads = threads or default_threads()
        self._staging = staging or PinnedStaging(depth=inflight + 1, pinned=False)
        self._dtype = np.dtype(dtype)
        self._inflight = inflight
        self._locate = locate
        self._rows = rows
        self.serial = serial
        self.name = name
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ threads
    def _shared_pool(self) -> ThreadPoolExecutor:
        """The pool :meth:`run_batch` places on (kept until :meth:`close`)."""
        with self._lock:
            if self._pool is None or self._pool_size != self.threads:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)  # its queued work still runs
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
                self._pool_size = self.threads
            return self._pool

    def close(self) -> None:
        """Stop the threads of :meth:`run_batch` (a later call starts them again; :meth:`map` has its own)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # ------------------------------------------------------------------ windows
    def window(self, start: int, items: list[Any], group: ByShape | None = None, allocate: Any = None) -> Window[M]:
        """A window of ``items`` (stream indices from ``start``), not placed yet; its buffers from the staging, or
        from ``allocate(shape, dtype)`` (a buffer the caller keeps: exactly the items' rows)."""
        ours = allocate is None
        return Window(
            start,
            items,
            group,
            allocate=self._staging.lease if ours else allocate,
            owned=ours,
            canvas=self.canvas,
            dtype=self._dtype,
            rows=self._rows if ours else None,
            adopt=ours and not self._staging.pinned,
        )

    def place_on(self, w: Window[M], pool: ThreadPoolExecutor | None, after: Window[M] | None = None) -> None:
        """Start placing ``w``'s items on ``pool`` (once ``after``'s placement has ended, when given); without a
        pool, place them here, stopping at the first failure."""
        if pool is None:
            for j in range(w.count):
                done: Future[Any] = Future()
                try:
                    w.place(j, self._place)
                    done.set_result(None)
                except BaseException as exc:  # reported in order by plan(), as from the pool
                    done.set_exception(exc)
                w.futures.append(done)
                if done.exception() is not None:
                    break
            w.track()
            return

        def submit() -> None:
            try:
                for j in range(0 if w.stopped else w.count):
                    w.futures.append(pool.submit(w.place, j, self._place))
            except RuntimeError:  # the pool was shut down: the caller has left
                w.fail(STOPPED, 0)
            w.track()

        if after is None:
            submit()
        else:
            after.then(submit)

    def plan(self, w: Window[M]) -> list[Call[M]]:
        """Wait for ``w``'s placement and plan its engine calls."""
        w.placed_all.wait()
        wait(w.futures)
        calls = plan(w, staging=self._staging, rows=self._rows, locate=self._locate)
        if not w.planned.done():
            w.planned.set_result(calls)
        return calls

    def locate(self, step: str, exc: BaseException, indices: list[int]) -> BaseException:
        if isinstance(exc, Stopped):
            return exc
        return self._locate(step, exc, indices) if self._locate else exc

    def run_call(self, call: Call[M]) -> Outputs | None:
        """``run`` on one call here; a failure resolves the call with its located error (and gives None)."""
        try:
            return self._run(call.buffer, call.metas)
        except BaseException as exc:
            self.release(call)
            call.resolve([], self.locate("run", exc, call.indices))
            return None

    def finish_call(self, call: Call[M], outputs: Outputs) -> None:
        """``finish`` one call's outputs into its future: the results, and the error that stopped them, if any."""
        got: list[Any] = []
        error: BaseException | None = None
        try:
            for result in self._finish(outputs, call.metas):
                got.append(result)
            if len(got) != len(call.metas):
                error = StageError(f"finish: got {len(got)} results for {len(call.metas)} items, expected one each")
        except BaseException as exc:
            error = exc
        finally:
            self.release(call, outputs)
        call.resolve(got, error)

    def release(self, call: Call[M], outputs: Outputs | None = None) -> None:
        """Return the call's buffer for reuse, unless an output may be a view of it (an Identity graph)."""
        lease, call.lease = call.lease, None
        if lease is None:
            return
        if outputs and any(isinstance(v, np.ndarray) and np.may_share_memory(v, lease) for v in outputs.values()):
            return
        self._staging.release(lease)

    def results(self, w: Window[M]) -> Iterator[Any]:
        """``w``'s results in order, up to its first failure, then that failure raised."""
        calls = w.planned.result()
        results: list[Any] = [_MISSING] * w.count
        error: BaseException | None = None
        for call in calls:
            got, exc = call.future.result()
            for p, r in zip(call.positions, got):
                results[p] = r
            if exc is not None:
                error = exc
                break
        error = error if error is not None else w.error
        for r in results:
            if r is _MISSING:
                break
            yield r
        if isinstance(error, Stopped):
            raise StageError(f"items from {w.start}: {error}")
        if error is not None:
            raise error

    def _run_each(self, batches: Iterator[tuple[np.ndarray, list[M]]]) -> Iterator[Outputs]:
        """The default ``stream``: ``run`` on each placed batch in turn (on the engine thread)."""
        for buffer, metas in batches:
            yield self._run(buffer, metas)

    # ------------------------------------------------------------------ the public steps
    def place_batch(
        self, items: Sequence[Any], allocate: Callable[[tuple[int, ...], Any], np.ndarray]
    ) -> tuple[np.ndarray, list[M]]:
        """Place ``items`` (in parallel) into a buffer from ``allocate(shape, dtype)`` that the caller keeps."""
        w = self.window(0, list(items), allocate=allocate)
        with single_threaded_opencv(w.count > 1 and self.threads > 1):  # OpenCV's pool would fight the pool's
            self.place_on(w, self._shared_pool() if w.count > 1 else None)
            self.plan(w)
        if w.error is not None:
            raise w.error
        assert w.buffer is not None
        return w.buffer, w.metas

    def run_batch(self, items: Sequence[Any], *, group: ByShape | None = None, workers: int | None = None) -> list[R]:
        """Place ``items`` (on ``workers`` threads; ``0``: here; default: :attr:`threads`), run them as one batch
        (with ``group``: one call per shape), return one result per item. The first failing item's error is raised
        (nothing runs then)."""
        items = list(items)
        if not items:
            return []
        workers = self.threads if workers is None else _count("workers", workers, 0)
        w = self.window(0, items, group)
        with single_threaded_opencv(bool(workers) and w.count > 1 and self.threads > 1):  # (as in place_batch)
            self.place_on(w, self._shared_pool() if workers and w.count > 1 else None)
            calls = self.plan(w)
        if w.error is not None:
            for call in calls:
                self.release(call)
            raise w.error
        self._run_here(calls)
        return list(self.results(w))

    def _run_here(self, calls: list[Call[M]]) -> None:
        """Run and finish ``calls`` in this thread, in order, up to the first that fails."""
        for k, call in enumerate(calls):
            outputs = self.run_call(call)
            if outputs is not None:
                self.finish_call(call, outputs)
            if call.future.result()[1] is not None:
                for later in calls[k + 1 :]:
                    self.release(later)
                return

    def map(
        self, items: Iterable[Any], batch_size: int, *, group: ByShape | None = None, workers: int | None = None
    ) -> Iterator[R]:
        """Run a stream ``batch_size`` items at a time (one engine call each; with ``group``, a window grouped into
        calls); results in order.

        With ``workers`` >= 1 (default: :attr:`threads`), the placement and finishing run on a pool of that many
        threads and the engine on a thread of its own (see :class:`~amdinfer.pipeline._flow.Flow`), started at the
        first ``next`` and stopped when the stream ends, fails or is closed. ``workers=0``: everything here, window
        after window, with ``run``."""
        size = _count("batch_size", batch_size, 1)
        workers = self.threads if workers is None else _count("workers", workers, 0)
        if workers == 0:
            return self._map_here(iter(items), size, group)
        depth = max(self._inflight, -(-2 * workers // size))
        return Flow(self, iter(items), size, group, workers, depth).run()

    def _map_here(self, it: Iterator[Any], size: int, group: ByShape | None) -> Iterator[R]:
        start = 0
        while True:
            w = self.read(it, start, size, group)
            if w is None:
                return
            start += w.count
            self.place_on(w, None)
            self._run_here(self.plan(w))
            yield from self.results(w)  # raises the window's first error after the results before it

    def read(
        self, it: Iterator[Any], start: int, size: int, group: ByShape | None, reading: Any = None
    ) -> Window[M] | None:
        """The next window of up to ``size`` items from ``it`` (``None`` at its end); an error of the input is the
        window's, after the items read before it."""
        chunk: list[Any] = []
        error: BaseException | None = None
        try:
            while len(chunk) < size:
                if reading is not None:
                    reading.set()
                chunk.append(next(it))
        except StopIteration:
            pass
        except Exception as exc:
            error = self.locate("input", exc, [start + len(chunk)])
        finally:
            if reading is not None:
                reading.clear()
        if not chunk and error is None:
            return None
        w = self.window(start, chunk, group)
        if error is not None:
            w.fail(error, len(chunk))
        return w

    def stop_window(self, w: Window[M], error: BaseException = STOPPED) -> None:
        """A window that will not run: cancel what has not started, wait for the rest, give its buffers back."""
        w.stopped = True
        for f in reversed(w.futures):
            f.cancel()
        w.placed_all.wait()
        wait(w.futures)
        if not w.planned.done():
            w.fail(error, 0)
            self.plan(w)
        for call in w.calls:
            self.release(call)
            call.resolve([], STOPPED)
