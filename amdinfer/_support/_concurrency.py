"""Results of background work in submission order, with a bounded number of items in flight."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TypeVar

__all__ = ["ordered_results"]

T = TypeVar("T")
R = TypeVar("R")


def ordered_results(submit: Callable[[T], Future[R]], items: Iterable[T], depth: int) -> Iterator[R]:
    """Submit each item and yield the results in input order, with at most ``depth`` futures pending.

    ``items`` is read only as results are taken, so a long (or endless) iterable is not read ahead. The
    first error is raised when its result is reached; work already submitted still finishes. Closing the
    generator early cancels the futures that have not started.

    Example:
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> with ThreadPoolExecutor(2) as pool:
        ...     list(ordered_results(lambda x: pool.submit(pow, x, 2), range(5), depth=3))
        [0, 1, 4, 9, 16]
    """
    pending: list[Future[R]] = []
    try:
        for item in items:
            pending.append(submit(item))
            if len(pending) >= depth:
                yield pending.pop(0).result()
        while pending:
            yield pending.pop(0).result()
    finally:
        for f in pending:
            f.cancel()
