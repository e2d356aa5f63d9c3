"""What a served pipeline answers: the tensors of one result (:func:`result_tensors`) and of a request's items
(:func:`assemble`), as docs/serving.md lays them out.

Example:
    >>> from amdinfer.results import TextLines
    >>> lines = TextLines(np.zeros((2, 4, 2)), ["a", "bc"], [0.9, 0.8])
    >>> sorted(assemble([result_tensors(lines)], ragged=is_ragged(lines)))
    ['quads', 'quads_batch_index', 'scores', 'texts']
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from ._images import text_tensor

__all__ = ["assemble", "is_ragged", "result_tensors"]

Tensors = dict[str, np.ndarray]

#: the output that carries ``<name>_batch_index`` for ragged results (one row per box or text line)
_ROW_OUTPUTS = ("boxes", "quads")


def is_ragged(result: Any) -> bool:
    """Whether results of this kind have a different row count per item (``Detections``, ``TextLines``)."""
    from ..results import Detections, TextLines

    return isinstance(result, (Detections, TextLines))


def result_tensors(result: Any) -> Tensors:
    """The tensors of one pipeline result: an array, a dict of arrays, or a result object.

    ``Detections`` give ``boxes``, ``scores`` and ``classes``; ``Classification`` gives ``indices`` and
    ``scores``; both give ``labels`` (a ``BYTES`` tensor: UTF-8 class names) when they have class names.
    ``TextLines`` (:func:`amdinfer.ocr`) give ``quads`` (``float32 (k, 4, 2)``, corners in the page's pixels),
    ``scores`` (``float32 (k,)``) and ``texts`` (``BYTES (k,)``, UTF-8) in reading order.

    NaN and infinite numbers travel as they are (no row is dropped: ``*_batch_index`` stays aligned): binary
    data and gRPC keep their IEEE values, and JSON ``data`` writes them as ``null`` (orjson), which strict JSON
    parsers take, as ``to_json()`` of the results does.

    Example:
        >>> from amdinfer.results import Detections
        >>> sorted(result_tensors(Detections(np.zeros((1, 4)), [0.5], [2])))
        ['boxes', 'classes', 'scores']
        >>> result_tensors(Detections(np.zeros((1, 4)), [0.5], [2], labels=["cat"]))["labels"]
        array([b'cat'], dtype=object)
    """
    from ..results import Classification, Detections, TextLines

    if isinstance(result, TextLines):
        texts = result.texts if result.texts is not None else [""] * len(result)
        quads = np.asarray(result.quads, np.float32).reshape(-1, 4, 2)
        return {"quads": quads, "scores": np.asarray(result.scores, np.float32), "texts": text_tensor(texts)}
    if isinstance(result, (Detections, Classification)):
        out: Tensors = (
            {"boxes": result.boxes, "scores": result.scores, "classes": result.classes}
            if isinstance(result, Detections)
            else {"indices": np.asarray(result.indices), "scores": np.asarray(result.scores)}
        )
        if result.labels is not None:
            out["labels"] = text_tensor(result.labels)
        return out
    if isinstance(result, dict):
        return {str(k): np.asarray(v) for k, v in result.items()}
    if isinstance(result, np.ndarray) or np.isscalar(result):
        return {"output": np.asarray(result)}
    raise InputError(
        f"pipeline result: got {type(result).__name__}, expected an array, a dict of arrays, Detections, "
        "Classification or TextLines"
    )


def assemble(results: list[Tensors], ragged: bool) -> Tensors:
    """One request's answer from its items' tensors: stacked on a new axis 0 when every item's tensor has one
    shape (and the results are not ``ragged``), else concatenated on axis 0 with ``<name>_batch_index`` (the item of
    each row, ONNX ``NonMaxSuppression``'s layout): for ragged results once, on ``boxes``/``quads``.

    Example:
        >>> a, b = {"x": np.zeros((2, 3))}, {"x": np.ones((1, 3))}
        >>> {k: v.shape for k, v in assemble([a, b], ragged=False).items()}
        {'x': (3, 3), 'x_batch_index': (3,)}
    """
    merged: Tensors = {}
    for name in results[0]:
        parts = [np.asarray(r[name]) for r in results]
        if not ragged and all(p.shape == parts[0].shape for p in parts):
            merged[name] = np.stack(parts)
            continue
        merged[name] = np.concatenate(parts, axis=0)
        if not ragged or name in _ROW_OUTPUTS:
            counts = [len(p) for p in parts]
            merged[f"{name}_batch_index"] = np.repeat(np.arange(len(parts), dtype=np.int64), counts)
    return merged
