"""What a served pipeline answers: the tensors of one result (:func:`result_tensors`) and which of them carries
the batch index (:func:`row_tensor`); a request's items are put together by
:func:`amdinfer.results.batch_tensors`, as docs/serving.md lays them out.

Each result class knows its own tensors (:class:`amdinfer.results.TensorResult`); this module knows only that
a pipeline may also answer a plain array or a dict of arrays.

Example:
    >>> from amdinfer.results import TextLines, batch_tensors
    >>> lines = TextLines(np.zeros((2, 4, 2)), ["a", "bc"], [0.9, 0.8])
    >>> sorted(batch_tensors([result_tensors(lines)], row_tensor(lines)))
    ['quads', 'quads_batch_index', 'scores', 'texts']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from ..results import TensorResult

__all__ = ["result_tensors", "row_tensor"]

Tensors = dict[str, np.ndarray]


def row_tensor(result: Any) -> str | None:
    """The tensor that gets ``<name>_batch_index`` in a batch of such results (``"boxes"`` for ``Detections``,
    ``"quads"`` for ``TextLines``: a different row count per item), or ``None`` (items stack when their shapes
    agree: arrays, dicts, ``Classification``).

    Example:
        >>> from amdinfer.results import Detections
        >>> row_tensor(Detections(np.zeros((0, 4)), [], [])), row_tensor(np.ones(3))
        ('boxes', None)
    """
    return result.row_tensor if isinstance(result, TensorResult) else None


def result_tensors(result: Any) -> Tensors:
    """The tensors of one pipeline result: a :class:`~amdinfer.results.TensorResult`'s ``to_tensors()``
    (``Detections``: ``boxes``, ``scores``, ``classes``, ``labels``; ``Classification``: ``indices``,
    ``scores``, ``labels``; ``TextLines``: ``quads``, ``scores``, ``texts``; names as ``BYTES``), a dict of
    arrays as it is, or an array (or number) as ``output``.

    NaN and infinite numbers travel as they are (no row is dropped: ``*_batch_index`` stays aligned): binary
    data and gRPC keep their IEEE values, and JSON ``data`` writes them as ``null`` (orjson), which strict JSON
    parsers take, as ``to_json()`` of the results does.

    Raises:
        InputError: a result of another type, named.

    Example:
        >>> from amdinfer.results import Detections
        >>> sorted(result_tensors(Detections(np.zeros((1, 4)), [0.5], [2])))
        ['boxes', 'classes', 'scores']
        >>> result_tensors(Detections(np.zeros((1, 4)), [0.5], [2], labels=["cat"]))["labels"]
        array([b'cat'], dtype=object)
    """
    if isinstance(result, TensorResult):
        return result.to_tensors()
    if isinstance(result, dict):
        return {str(k): np.asarray(v) for k, v in result.items()}
    if isinstance(result, np.ndarray) or np.isscalar(result):
        return {"output": np.asarray(result)}
    raise InputError(
        f"pipeline result: got {type(result).__name__}, expected an array, a dict "
        "of arrays or an amdinfer.results.TensorResult (a result with to_tensors(): Detections, TextLines, ...)"
    )
