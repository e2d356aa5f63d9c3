"""Batch buckets: the rows a batch is padded to, and the padding itself (the last row repeated).

One home for what :meth:`Engine.run <amdinfer.Engine.run>` does with ``batch_buckets=``, what the pipeline
executor does when it allocates a batch for such an engine (or for a model with a fixed batch size), and what the
server's request assembler does: a batch of ``n`` rows becomes the smallest bucket that holds it, the extra rows
copies of the last real one (values in range, unlike zeros), and the answers of those rows are dropped.

Example:
    >>> import numpy as np
    >>> bucket_rows((1, 4, 8), 3), bucket_rows((1, 4, 8), 9), bucket_rows((), 3)
    (4, 9, 3)
    >>> buffer = np.arange(8).reshape(4, 2)
    >>> pad_rows(buffer, 2).tolist()
    [[0, 1], [2, 3], [2, 3], [2, 3]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bucket_rows", "pad_rows", "padded"]


def bucket_rows(buckets: Sequence[int], n: int, *, fixed: int | None = None) -> int:
    """The rows a batch of ``n`` is run as: the smallest of ``buckets`` (sorted) that holds ``n``, or with a fixed
    model batch ``fixed``, the next multiple of it (chunks of ``fixed``); ``n`` itself otherwise (no buckets, or
    more rows than the largest bucket: the engine then runs chunks of the largest, padding the last one).

    Example:
        >>> bucket_rows((2, 16), 1), bucket_rows((), 5, fixed=2), bucket_rows((), 4, fixed=2)
        (2, 6, 4)
    """
    if buckets:
        return next((int(b) for b in buckets if b >= n), n)
    if fixed:
        return -(-n // fixed) * fixed
    return n


def pad_rows(buffer: np.ndarray, filled: int) -> np.ndarray:
    """Write copies of row ``filled - 1`` into rows ``filled:`` of ``buffer``, in place; returns ``buffer``.

    Example:
        >>> pad_rows(np.array([[1], [0], [0]]), 1).ravel().tolist()
        [1, 1, 1]
    """
    if filled < buffer.shape[0]:
        buffer[filled:] = buffer[filled - 1]
    return buffer


def padded(array: Any, n: int) -> np.ndarray:
    """A new array of ``n`` rows: ``array``'s rows, then copies of its last one (:func:`pad_rows` on a copy).

    Example:
        >>> padded(np.array([[1, 2]]), 3).tolist()
        [[1, 2], [1, 2], [1, 2]]
    """
    array = np.asarray(array)
    out = np.empty((n, *array.shape[1:]), array.dtype)
    out[: array.shape[0]] = array
    return pad_rows(out, array.shape[0])
