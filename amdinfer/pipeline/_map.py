"""``map``: one signature for every pipeline, and :class:`PipelineMap`, the iterator it returns.

Every ``map`` (:meth:`Pipeline.map <amdinfer.Pipeline.map>` and the pipelines built on it: the OCR cascade,
:class:`~amdinfer.text.EmbedPipeline`; :meth:`FusedPipeline.map <amdinfer.pipeline.fuse.FusedPipeline.map>`;
:meth:`TextEmbedder.map <amdinfer.text.TextEmbedder.map>`) is::

    map(items, *, batch_size="auto", workers=None) -> PipelineMap

* ``items``: any iterable (read lazily, on the executor's engine thread; a str or bytes is refused).
* ``batch_size``: items per engine call; ``"auto"`` (or ``None``, the same): the size chosen for the device
  (:func:`~amdinfer.pipeline._auto.auto_batch_size`: 1 on the CPU, the engine's largest batch bucket or 64 on an
  accelerator, a fixed-batch model's ``B``; recorded in ``engine.info.settings["map_batch_size"]``), or for an
  embedding pipeline its ``batch_size``, whose windows of 8 x ``batch_size`` texts are grouped by length bucket.
* ``workers``: threads that place (preprocess) and finish (postprocess) items while the engine runs on a thread
  of its own; ``0`` runs everything in the caller's thread, batch by batch, with no thread at all; ``None``: the
  cores this process may use (a :class:`~amdinfer.pipeline.fuse.FusedPipeline`: its ``threads``).

All of them run on :class:`~amdinfer.pipeline._executor.Executor`.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import HwcToChw, Cast
    >>> from amdinfer.testing.models import tiny_cnn
    >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
    ...                          backend="ort", providers=["CPUExecutionProvider"])
    >>> results = pipe.map([np.zeros((32, 32, 3), np.uint8)] * 10, batch_size=4)
    >>> isinstance(results, PipelineMap), next(results).shape
    (True, (10,))
    >>> results.close()
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import OptionError
from ._steps import _positive_int

__all__ = ["PipelineMap", "map_options"]


def map_options(items: Any, batch_size: Any, workers: Any, *, what: str = "inputs") -> tuple[int | None, int | None]:
    """Check ``map``'s arguments at the call (not at the first ``next``): ``(batch_size, workers)``, the batch size
    ``None`` for ``"auto"`` (the pipeline resolves it).

    Example:
        >>> map_options([], None, 0), map_options([], "auto", None), map_options([], 8, 2)
        ((None, 0), (None, None), (8, 2))
        >>> map_options([], "big", None)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: batch_size: got 'big', expected an int >= 1, "auto" or None
        >>> map_options("pages/*.jpg", None, None)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: items: got str, expected an iterable of inputs
    """
    if isinstance(batch_size, str) and batch_size != "auto":
        raise OptionError(f'batch_size: got {batch_size!r}, expected an int >= 1, "auto" or None')
    size = None if batch_size is None or isinstance(batch_size, str) else _positive_int("batch_size", batch_size)
    threads = None if workers is None else _positive_int("workers", workers, minimum=0)
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise OptionError(f"items: got {type(items).__name__}, expected an iterable of {what}")
    return size, threads


class PipelineMap(Iterator[Any]):
    """The iterator every ``map`` returns: results in input order; ``close()`` stops its threads.

    A thin handle on the executor's stream (:meth:`Executor.map <amdinfer.pipeline._executor.Executor.map>`): the
    threads start at the first ``next`` and stop at the end, at the first error (raised after the results before
    it, naming the item's index), at ``close()``, at the end of a ``with`` block, or when the iterator is garbage
    collected (a ``for r in pipe.map(...): break`` drops it at once in CPython).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.preprocess import HwcToChw, Cast
        >>> from amdinfer.testing.models import tiny_cnn
        >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
        ...                          backend="ort", providers=["CPUExecutionProvider"])
        >>> results = pipe.map([np.zeros((32, 32, 3), np.uint8)] * 10)
        >>> next(results).shape
        (10,)
        >>> results.close()  # stops the threads before the end
        >>> list(results)
        []
    """

    def __init__(self, results: Iterator[Any]) -> None:
        self._results = results
        self._closed = False

    def __iter__(self) -> PipelineMap:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            return next(self._results)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the threads and drop what is in flight. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        close = getattr(self._results, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> PipelineMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
