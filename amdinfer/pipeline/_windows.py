"""The units the executor (:mod:`amdinfer.pipeline._executor`) moves: windows of items, their slots, and the
engine calls a window is planned into.

* A :class:`Window` is a run of consecutive items of the stream, placed (decoded, transformed) each into its
  :class:`Slot`. Without grouping, the window is one engine call and its items write into one shared batch
  buffer (item 0 fixes the canvas, or the owner's ``canvas`` does); with :class:`ByShape` each item gets an array
  of its own and the window is planned into one call per shape (and tag), of at most ``ByShape.size`` items.
* A :class:`Call` is one engine call: its buffer (padded to the rows the owner's ``rows`` asks for, by
  repeating the last real row: :func:`~amdinfer.engines._buckets.pad_rows`), the metadata of its real items,
  and the future its results arrive on.

An item's failure cuts its window short: the items before it still run, its error is raised after their results.
A canvas that does not match the batch's (:class:`Mismatch`) fails the whole window instead: that batch cannot be
formed.

Example:
    >>> import numpy as np
    >>> w = Window(0, [np.ones((2,)), np.zeros((3,))], ByShape(size=4))
    >>> for j, item in enumerate(w.items):
    ...     w.slot(j).put(item)
    >>> [c.positions for c in plan(w, staging=None, rows=None, locate=None)]
    [[0], [1]]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ..engines._buckets import pad_rows
from ..errors import InputError

__all__ = ["ByShape", "Call", "Mismatch", "STOPPED", "Slot", "Window", "plan"]

M = TypeVar("M")
#: ``(step, error, stream indices) -> error to raise``; step is "input", "stack" or "run"
Locate = Callable[[str, BaseException, list[int]], BaseException]
Allocate = Callable[[tuple[int, ...], np.dtype], np.ndarray]


class Mismatch(InputError):
    """An item's canvas differs from its batch's (the batch cannot be stacked)."""


class Stopped(Exception):
    """The stream stopped before this window ran (an earlier error, or the caller left)."""


#: the result of windows and calls that never ran
STOPPED = Stopped("the stream stopped before this batch ran")


class _Abandoned(Exception):
    """Item 0 of the batch failed before it fixed the canvas; the batch reports item 0's error."""


@dataclass(frozen=True)
class ByShape:
    """Plan a window into one engine call per shape and dtype of its placed items (groups in order of their first
    item), each of at most ``size`` items.

    Attributes:
        size: most items per engine call (``None``: a whole group).
        pad_to: rows each call is raised to (before the owner's ``rows``): one batch size for the engine.
        tags: one key per item of the window (only for a single window, ``Executor.run_batch``): items of different
            tags never share a call (a batch of text lines sorted by aspect ratio).
    """

    size: int | None = None
    pad_to: int = 0
    tags: Sequence[Hashable] | None = None


class Call(Generic[M]):
    """One engine call: ``buffer`` (rows >= items), the items' ``metas``, and ``future`` -> ``(results, error)``."""

    __slots__ = ("buffer", "future", "lease", "metas", "positions", "window")

    def __init__(self, window: Window[M], positions: list[int], buffer: np.ndarray, lease: np.ndarray | None) -> None:
        self.window = window
        self.positions = positions  # the items' places in the window
        self.buffer = buffer
        self.lease = lease  # what goes back to the staging after the run (None: not from it)
        self.metas: list[M] = [window.metas[p] for p in positions]
        self.future: Future[tuple[list[Any], BaseException | None]] = Future()

    @property
    def indices(self) -> list[int]:
        """The items' indices in the stream."""
        return [self.window.start + p for p in self.positions]

    def resolve(self, results: list[Any], error: BaseException | None = None) -> None:
        if not self.future.done():
            self.future.set_result((results, error))


class Slot:
    """What ``place`` gets for its item: call it with ``(shape[, dtype])`` for the array to write the item into
    (its row of the batch buffer), or :meth:`put` an array that holds the item already."""

    __slots__ = ("_j", "_w")

    def __init__(self, window: Window[Any], j: int) -> None:
        self._w, self._j = window, j

    def __call__(self, shape: Sequence[int], dtype: Any = None) -> np.ndarray:
        return self._w.slot_array(self._j, tuple(int(s) for s in shape), np.dtype(dtype or self._w.dtype))

    def put(self, data: np.ndarray) -> None:
        """The item is ``data``: copied into its slot, or, where no copy is needed (the only item of a call, or an
        item that is stacked with others later), kept as it is."""
        self._w.put(self._j, data)


class Window(Generic[M]):
    """Consecutive items ``start ..`` of a stream and their placement (see the module)."""

    def __init__(
        self,
        start: int,
        items: list[Any],
        group: ByShape | None = None,
        *,
        allocate: Allocate | None = None,
        owned: bool = True,
        canvas: tuple[int, ...] | None = None,
        dtype: Any = np.uint8,
        rows: Callable[[int], int] | None = None,
        adopt: bool = False,
    ) -> None:
        self.start, self.items, self.count, self.group = start, items, len(items), group
        self.dtype = np.dtype(dtype)
        self._allocate = allocate or (lambda shape, dt: np.empty(shape, dt))
        self._rows = rows or (lambda n: n)
        self._adopt = adopt and group is None and self.count == 1 and canvas is None and self._rows(1) == 1
        self.buffer: np.ndarray | None = None  # the shared batch buffer (no grouping)
        self._owned = owned  # buffers from ``allocate`` go back to the staging after their run
        self.leased = False  # the buffer is one of those
        self.arrays: list[Any] = [None] * self.count  # with grouping: each item's own array
        self.metas: list[Any] = [None] * self.count
        self.placed = [False] * self.count
        self.futures: list[Future[Any]] = []
        self.decided = threading.Event()
        self.placed_all = threading.Event()  # every item's placement has ended (or will never start)
        self.stopped = False  # placement not started yet will not start
        self._then: list[Callable[[], None]] = []
        self._left = 0
        self._lock = threading.Lock()
        self.error: BaseException | None = None  # raised after the results of the first ``cut`` items
        self.cut = self.count
        self.calls: list[Call[M]] = []
        self.planned: Future[list[Call[M]]] = Future()
        if canvas is not None and group is None:
            self._lease((self.count, *canvas), self.dtype)

    def slot(self, j: int) -> Slot:
        return Slot(self, j)

    def _lease(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.buffer = self._allocate((self._rows(shape[0]), *shape[1:]), dtype)
        self.leased = self._owned
        self.decided.set()

    def slot_array(self, j: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        if self.group is not None:
            out = self.arrays[j] = np.empty(shape, dtype)
            self.placed[j] = True
            return out
        if j and self.buffer is None:
            self.decided.wait()  # item 0 was dequeued first (FIFO pool): it is running or done
        with self._lock:
            if self.buffer is None:
                if j:
                    raise _Abandoned
                self._lease((self.count, *shape), dtype)
        assert self.buffer is not None
        if self.buffer.shape[1:] != shape or self.buffer.dtype != dtype:
            have = f"{self.buffer.shape[1:]}" + (f" {self.buffer.dtype}" if self.buffer.dtype != dtype else "")
            got = f"{shape}" + (f" {dtype}" if self.buffer.dtype != dtype else "")
            raise Mismatch(
                f"item {self.start + j}: got a canvas of {got}, item {self.start} has {have}; a batch needs one "
                "size (use a fixed-size Letterbox/Resize)"
            )
        self.placed[j] = True
        return self.buffer[j]

    def put(self, j: int, data: np.ndarray) -> None:
        if self.group is not None:
            self.arrays[j] = data
            self.placed[j] = True
        elif self._adopt and data.flags.c_contiguous:  # the only item: the batch is the item itself, no copy
            self.buffer = data[None]
            self.placed[j] = True
            self.decided.set()
        else:
            np.copyto(self.slot_array(j, data.shape, data.dtype), data)

    def place(self, j: int, place: Callable[[int, Any, Slot], M]) -> None:
        """Run ``place`` on item ``j`` (on a pool thread or inline)."""
        try:
            self.metas[j] = place(self.start + j, self.items[j], Slot(self, j))
            if not self.placed[j]:
                raise RuntimeError(f"item {self.start + j}: the place step did not ask for its slot")
        finally:
            if j == 0:
                self.decided.set()

    def track(self) -> None:
        """Set :attr:`placed_all` once every placement future is done, then run what waits for it (:meth:`then`)."""
        futures = list(self.futures)
        with self._lock:
            self._left = len(futures)
        if not futures:
            self._ended()
        for f in futures:
            f.add_done_callback(self._one_ended)

    def _one_ended(self, _: Future[Any]) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._ended()

    def _ended(self) -> None:
        with self._lock:
            self.placed_all.set()
            then, self._then = self._then, []
        for fn in then:
            fn()

    def then(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once this window's placement has ended (now, if it has)."""
        with self._lock:
            if not self.placed_all.is_set():
                self._then.append(fn)
                return
        fn()

    def first_failure(self) -> tuple[int, BaseException | None]:
        """``(position, error)`` of the first item whose placement failed (``(count, None)``: none)."""
        for j, f in enumerate(self.futures):
            exc = f.exception() if f.done() and not f.cancelled() else None
            if exc is not None and not isinstance(exc, _Abandoned):
                return j, exc
        return len(self.futures), None

    def fail(self, error: BaseException, cut: int) -> None:
        """Keep the first ``cut`` items (at most the current cut) and raise ``error`` after them."""
        if cut <= self.cut:
            self.cut, self.error = cut, error


def plan(
    w: Window[M],
    *,
    staging: Any,
    rows: Callable[[int], int] | None,
    locate: Locate | None,
) -> list[Call[M]]:
    """Plan the placed window ``w`` into its engine calls (``w.calls``), cut short at its first failure.

    Without grouping, the window's first ``cut`` items are one call on (a prefix of) the shared buffer; a
    :class:`Mismatch` fails the window (the ``"stack"`` step of ``locate``). With :class:`ByShape`, each group's
    items are stacked into a buffer from ``staging`` (a lone item that needs no padding is its own batch)."""
    j, exc = w.first_failure()
    if exc is not None:
        if isinstance(exc, Mismatch):
            indices = list(range(w.start, w.start + w.count))
            w.fail(locate("stack", exc, indices) if locate else exc, 0)
        else:
            w.fail(exc, j)
    n = w.cut
    rows = rows or (lambda k: k)
    calls: list[Call[M]] = []
    if w.group is None:
        if n and w.buffer is not None:
            total = rows(n)
            buffer = pad_rows(w.buffer if total == w.buffer.shape[0] else w.buffer[:total], n)
            calls.append(Call(w, list(range(n)), buffer, w.buffer if w.leased else None))
        elif w.buffer is not None and w.leased and staging is not None:
            staging.release(w.buffer)
        w.calls = calls
        return calls
    groups: dict[Any, list[int]] = {}
    tags = w.group.tags
    for p in range(n):
        a = w.arrays[p]
        assert a is not None
        groups.setdefault((tags[p] if tags is not None else None, a.shape, a.dtype.str), []).append(p)
    size = w.group.size
    for positions in groups.values():
        step = size or len(positions)
        for k in range(0, len(positions), step):
            calls.append(_stacked(w, positions[k : k + step], staging, rows))
    w.calls = calls
    return calls


def _stacked(w: Window[M], positions: list[int], staging: Any, rows: Callable[[int], int]) -> Call[M]:
    """One call of a grouped window: its items stacked into a buffer of the rows the owner asks for."""
    arrays = [w.arrays[p] for p in positions]
    first = arrays[0]
    assert first is not None
    assert w.group is not None
    n = len(positions)
    total = rows(max(n, w.group.pad_to))
    pinned = staging is not None and staging.pinned
    if total == 1 and not pinned and first.flags.c_contiguous:
        return Call(w, positions, first[None], None)
    shape = (total, *first.shape)
    lease = staging.lease(shape, first.dtype) if staging is not None else np.empty(shape, first.dtype)
    np.stack(arrays, out=lease[:n])
    return Call(w, positions, pad_rows(lease, n), lease if staging is not None else None)
