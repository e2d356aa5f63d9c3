"""The per-stage times of a :class:`~amdinfer.pipeline.fuse.FusedPipeline` run, kept in each item's metadata
(under :data:`~amdinfer.pipeline._steps.SPEED`, as the stage-by-stage pipeline keeps them) and set on its result
as ``speed``: preprocess (the host stages and the placement into the batch buffer, per item), inference (the fused
graph's run, shared out evenly among the batch's items) and postprocess (the split into results, shared out).

Example:
    >>> import time
    >>> metas = [{}, {}]
    >>> ms = share(metas, time.perf_counter(), "inference")
    >>> [sorted(m[SPEED]) for m in metas], metas[0][SPEED]["inference"] == ms >= 0
    ([['inference'], ['inference']], True)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .._steps import SPEED

__all__ = ["SPEED", "share", "timed_stream"]

Metas = Sequence[dict[str, Any]]


def share(metas: Metas, start: float, stage: str) -> float:
    """Give each item an even share of the ms since ``start`` as its ``stage``; returns the share."""
    ms = (time.perf_counter() - start) * 1e3 / max(len(metas), 1)
    for meta in metas:
        meta.setdefault(SPEED, {})[stage] = ms
    return ms


def timed_stream(
    run_many: Callable[[Iterator[Any]], Iterator[Any]],
    feed: Callable[[np.ndarray, Metas], Any],
    batches: Iterator[tuple[np.ndarray, list[dict[str, Any]]]],
) -> Iterator[Any]:
    """``run_many`` over the feeds of ``batches``, each batch's engine time shared out as its ``inference``: from
    its feed, or the batch before's outputs when later (the engine was busy until then), to its outputs.

    Example:
        >>> metas = [{}]
        >>> out = list(timed_stream(lambda feeds: ({"y": f} for f in feeds), lambda b, m: b, iter([(1, metas)])))
        >>> out, sorted(metas[0][SPEED])
        ([{'y': 1}], ['inference'])
    """
    pending: deque[tuple[Metas, float]] = deque()

    def feeds() -> Iterator[Any]:
        for batch, metas in batches:
            pending.append((metas, time.perf_counter()))
            yield feed(batch, metas)

    results, done = run_many(feeds()), time.perf_counter()
    try:
        for outputs in results:
            metas, fed = pending.popleft()
            share(metas, max(fed, done), "inference")
            done = time.perf_counter()
            yield outputs
    finally:
        getattr(results, "close", lambda: None)()
