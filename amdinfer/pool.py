"""``EnginePool``: one engine per worker, for backends whose engines must not run on two threads at once.

A MIGraphX program is not thread-safe, so :class:`~amdinfer.engines.migraphx.MigraphxEngine` serializes
``run`` with a lock; to run several requests at once, build several engines and let the pool hand each
call a free one. Works with every backend (ONNX Runtime sessions are thread-safe, but a pool of sessions
with a few intra-op threads each can still beat one session on many cores).

With the compiled-model cache on, only the first engine compiles; the others load its program.

Example:
    >>> import functools, numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> factory = functools.partial(amdinfer.load, tiny_cnn(), backend="ort", providers=["cpu"], threads=1)
    >>> with amdinfer.EnginePool(factory, size=2) as pool:
    ...     outs = list(pool.map([np.zeros((1, 3, 32, 32), np.float32)] * 3))
    >>> [o["logits"].shape for o in outs]
    [(1, 10), (1, 10), (1, 10)]
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ._support._concurrency import ordered_results
from .engines.base import Engine, EngineInfo, Feeds, OutputSelection
from .errors import EngineClosedError, OptionError

__all__ = ["EnginePool"]

log = logging.getLogger("amdinfer.pool")


def _takes_index(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` has exactly one required positional parameter (the worker index)."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is inspect.Parameter.empty
    ]
    return len(required) == 1


class EnginePool:
    """A fixed set of engines; each call runs on a free one and waits when all are busy.

    Args:
        factory: builds one engine. Called as ``factory()``, or ``factory(i)`` with the worker index
            ``i`` (0 .. size-1) when it has exactly one required positional parameter — handy for one
            engine per GPU: ``EnginePool(lambda i: amdinfer.load(path, backend="migraphx", device=i), 2)``.
        size: number of engines (>= 1).

    Raises:
        OptionError: ``size`` is not a positive int, or ``factory`` returned something other than an Engine.

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> pool = amdinfer.EnginePool(lambda: amdinfer.load(tiny_cnn(), providers=["cpu"], threads=1), size=2)
        >>> pool.run(np.ones((2, 3, 32, 32), np.float32))["logits"].shape
        (2, 10)
        >>> pool.close()
    """

    def __init__(self, factory: Callable[..., Engine], size: int) -> None:
        if not callable(factory):
            raise OptionError(f"factory: got {type(factory).__name__}, expected a callable returning an Engine")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise OptionError(f"size: got {size!r}, expected an int >= 1")
        self._size = size
        self._engines: list[Engine] = []
        self._free: queue.Queue[Engine] = queue.Queue()
        self._state = threading.Condition()
        self._busy = 0
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        with_index = _takes_index(factory)
        try:
            for i in range(size):
                engine = factory(i) if with_index else factory()
                if not isinstance(engine, Engine):
                    raise OptionError(
                        f"factory: call {i} returned {type(engine).__name__}, expected an amdinfer Engine"
                    )
                self._engines.append(engine)
                self._free.put(engine)
        except BaseException:
            for engine in self._engines:
                with contextlib.suppress(Exception):
                    engine.close()
            raise

    # ------------------------------------------------------------------ introspection
    @property
    def size(self) -> int:
        """Number of engines."""
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def engines(self) -> list[Engine]:
        """The engines (for inspection; run through the pool to keep one call per engine)."""
        return list(self._engines)

    @property
    def info(self) -> EngineInfo:
        """The first engine's info (all engines are built alike)."""
        return self._engines[0].info

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._free.qsize()} of {self._size} free"
        kind = type(self._engines[0]).__name__ if self._engines else "?"
        return f"<EnginePool {self._size} x {kind}, {state}>"

    # ------------------------------------------------------------------ running
    @contextlib.contextmanager
    def acquire(self, timeout: float | None = None) -> Iterator[Engine]:
        """Borrow a free engine for a block of calls; it returns to the pool when the block ends.

        Raises:
            EngineClosedError: the pool is closed.
            TimeoutError: no engine became free within ``timeout`` seconds.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> with amdinfer.EnginePool(lambda: amdinfer.load(tiny_cnn(), providers=["cpu"]), 1) as pool:
            ...     with pool.acquire() as engine:
            ...         engine.run(np.ones((1, 3, 32, 32), np.float32))["logits"].shape
            (1, 10)
        """
        with self._state:
            if self._closed:
                raise EngineClosedError("EnginePool: the pool is closed")
            self._busy += 1
        try:
            try:
                engine = self._free.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(
                    f"EnginePool: no engine became free within {timeout} s (size {self._size})"
                ) from None
            try:
                if self._closed:
                    raise EngineClosedError("EnginePool: the pool is closed")
                yield engine
            finally:
                self._free.put(engine)
        finally:
            with self._state:
                self._busy -= 1
                self._state.notify_all()

    def run(
        self, feeds: Feeds, *, outputs: OutputSelection = None, timeout: float | None = None
    ) -> dict[str, np.ndarray]:
        """Run on a free engine (blocking while all are busy); same arguments and result as :meth:`Engine.run`.

        Raises:
            EngineClosedError: the pool is closed.
            TimeoutError: no engine became free within ``timeout`` seconds.
            InputError: the feeds do not fit the model (the engine stays in the pool).

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> with amdinfer.EnginePool(lambda: amdinfer.load(tiny_cnn(), providers=["cpu"]), 2) as pool:
            ...     pool.run({"input": np.ones((1, 3, 32, 32), np.float32)})["logits"].shape
            (1, 10)
        """
        with self.acquire(timeout) as engine:
            return engine.run(feeds, outputs=outputs)

    def _pool_executor(self) -> ThreadPoolExecutor:
        with self._state:
            if self._closed:
                raise EngineClosedError("EnginePool: the pool is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._size, thread_name_prefix="amdinfer-pool")
            return self._executor

    def submit(self, feeds: Feeds, *, outputs: OutputSelection = None) -> Future[dict[str, np.ndarray]]:
        """Run in the background on the pool's threads; returns a :class:`concurrent.futures.Future`.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> with amdinfer.EnginePool(lambda: amdinfer.load(tiny_cnn(), providers=["cpu"]), 2) as pool:
            ...     pool.submit(np.ones((1, 3, 32, 32), np.float32)).result()["logits"].shape
            (1, 10)
        """
        return self._pool_executor().submit(self.run, feeds, outputs=outputs)

    def map(self, batches: Iterable[Feeds], *, outputs: OutputSelection = None) -> Iterator[dict[str, np.ndarray]]:
        """Run every item of ``batches`` across the engines; results come back in input order.

        At most ``2 * size`` items are in flight, so a long (or endless) iterable is not read ahead. The
        first error is raised when its result is reached; items already submitted still finish.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> xs = [np.full((1, 3, 32, 32), v, np.float32) for v in range(4)]
            >>> with amdinfer.EnginePool(lambda: amdinfer.load(tiny_cnn(), providers=["cpu"]), 2) as pool:
            ...     len(list(pool.map(xs)))
            4
        """
        executor = self._pool_executor()
        yield from ordered_results(
            lambda feeds: executor.submit(self.run, feeds, outputs=outputs), batches, depth=2 * self._size
        )

    # ------------------------------------------------------------------ lifecycle
    def close(self, timeout: float | None = None) -> None:
        """Stop taking calls, wait for running ones (up to ``timeout`` s), then close every engine. Idempotent.

        Example:
            >>> import amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> pool = amdinfer.EnginePool(lambda: amdinfer.load(tiny_cnn(), providers=["cpu"]), 1)
            >>> pool.close(); pool.close(); pool.closed
            True
        """
        with self._state:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        with self._state:
            if not self._state.wait_for(lambda: self._busy == 0, timeout=timeout):
                log.warning(
                    "EnginePool.close: %d call(s) still running after %s s; closing engines anyway", self._busy, timeout
                )
        for engine in self._engines:
            try:
                engine.close()
            except Exception as exc:  # one failing close must not leak the others
                log.warning("EnginePool.close: %s.close() failed: %s", type(engine).__name__, exc)

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close(timeout=0)
