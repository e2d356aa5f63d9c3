"""The rows of ``summary()`` for each result type (:class:`~amdinfer.results._forms.ResultForms`), and their
flat columns (``to_csv()``, ``to_df()``).

Example:
    >>> from amdinfer.results import Detections
    >>> detection_rows(Detections([[0, 0, 2, 4]], [0.5], [1]), False, 3)
    [{'name': '1', 'class': 1, 'confidence': 0.5, 'box': {'x1': 0.0, 'y1': 0.0, 'x2': 2.0, 'y2': 4.0}}]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError
from ._forms import rounded

__all__ = [
    "BOX_COLUMNS",
    "CLASS_COLUMNS",
    "MATCH_COLUMNS",
    "QUAD_COLUMNS",
    "classification_rows",
    "detection_rows",
    "embedding_columns",
    "embedding_rows",
    "match_rows",
    "scale",
    "text_rows",
]

CLASS_COLUMNS = ["name", "class", "confidence"]
BOX_COLUMNS = [*CLASS_COLUMNS, "x1", "y1", "x2", "y2"]
QUAD_COLUMNS = ["text", "confidence"] + [f"{axis}{k}" for k in range(1, 5) for axis in "xy"]
MATCH_COLUMNS = ["query", "rank", "index", "text", "score"]


def scale(shape: tuple[int, int] | None, normalize: bool, what: str) -> tuple[float, float]:
    """What x and y are divided by: ``(width, height)`` of ``shape`` with ``normalize``, else ``(1, 1)``.

    Example:
        >>> scale((480, 640), True, "Detections"), scale(None, False, "Detections")
        ((640.0, 480.0), (1.0, 1.0))
    """
    if not normalize:
        return 1.0, 1.0
    if shape is None:
        raise InputError(
            f"{what}.summary: normalize=True: got image_shape None, expected the (height, width) the coordinates "
            "refer to (pass image_shape= or image= when you build the result)"
        )
    return float(shape[1]), float(shape[0])


def detection_rows(det: Any, normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """:class:`~amdinfer.results.Detections` rows: ``name``, ``class``, ``confidence``, ``box``."""
    w, h = scale(det.image_shape, normalize, "Detections")
    rows = []
    for i in range(len(det)):
        cls = int(det.classes[i])
        x1, y1, x2, y2 = (float(v) for v in det.boxes[i])
        box = {"x1": x1 / w, "y1": y1 / h, "x2": x2 / w, "y2": y2 / h}
        rows.append(
            {
                "name": det.labels[i] if det.labels is not None else str(cls),
                "class": cls,
                "confidence": rounded(det.scores[i], decimals),
                "box": {k: rounded(v, decimals) for k, v in box.items()},
            }
        )
    return rows


def classification_rows(c: Any, decimals: int) -> list[dict[str, Any]]:
    """:class:`~amdinfer.results.Classification` rows, best first: ``name``, ``class``, ``confidence``."""
    return [
        {
            "name": c.labels[i] if c.labels is not None else str(int(c.indices[i])),
            "class": int(c.indices[i]),
            "confidence": rounded(c.scores[i], decimals),
        }
        for i in range(len(c))
    ]


def text_rows(lines: Any, normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """:class:`~amdinfer.results.TextLines` rows: ``text``, ``confidence``, ``box`` (the four corners)."""
    w, h = scale(lines.image_shape, normalize, "TextLines")
    rows = []
    for i in range(len(lines)):
        box: dict[str, float | None] = {}
        for k, (x, y) in enumerate(lines.quads[i].astype(np.float64), start=1):
            box[f"x{k}"] = rounded(x / w, decimals)
            box[f"y{k}"] = rounded(y / h, decimals)
        text = lines.texts[i] if lines.texts is not None else None
        rows.append({"text": text, "confidence": rounded(lines.scores[i], decimals), "box": box})
    return rows


def embedding_columns(dim: int) -> list[str]:
    """The flat columns of embedding rows: ``text``, ``embedding_0`` ... ``embedding_<dim-1>``."""
    return ["text", *(f"embedding_{i}" for i in range(dim))]


def embedding_rows(vectors: np.ndarray, texts: Any, normalize: bool, decimals: int) -> list[dict[str, Any]]:
    """Embedding rows: ``text``, ``embedding`` (a list; unit length with ``normalize``)."""
    v = vectors.astype(np.float64)
    if normalize and len(v):
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        if (norms == 0).any():
            raise InputError(
                f"Embeddings.summary: normalize=True: rows {np.flatnonzero(norms[:, 0] == 0).tolist()} "
                "are zero, expected vectors with a length"
            )
        v = v / norms
    return [
        {"text": texts[i] if texts is not None else None, "embedding": [round(float(x), decimals) for x in v[i]]}
        for i in range(len(v))
    ]


def match_rows(m: Any, decimals: int) -> list[dict[str, Any]]:
    """:class:`~amdinfer.results.Matches` rows: ``query`` (its text, else its index), ``rank`` (1: best),
    ``index``, ``text`` and ``score`` of each match."""
    rows = []
    for q in range(len(m)):
        query = m.queries[q] if m.queries is not None else q
        for rank, match in enumerate(m[q], start=1):
            rows.append(
                {
                    "query": query,
                    "rank": rank,
                    "index": match.index,
                    "text": match.text,
                    "score": rounded(match.score, decimals),
                }
            )
    return rows
