"""Every result type amdinfer returns: :class:`Detections` (indexing gives :class:`Detection` records),
:class:`Classification`, :class:`TextLines` (OCR), :class:`Embeddings`, :class:`Matches` and
:class:`SegmentationMap` (semantic segmentation: a class per pixel).

Each is a :class:`TensorResult`: ``to_tensors()`` gives its named NumPy tensors (what ``amdinfer serve`` answers
and Ray Data columns hold), ``from_tensors()`` rebuilds it, and ``from_batch()`` reads a served request's answer
(the layout of :func:`batch_tensors`; :func:`split_batch` is its inverse).

Both are small typed containers with a readable ``repr``, ``to_dict()``/``to_json()``, and, when they keep the
image they answer (``image``: what :func:`amdinfer.yolo` and :func:`amdinfer.classify` decoded or received),
``plot()``, ``save(path)`` and a picture in Jupyter; without one, Jupyter shows an HTML table.

Odd values: a row with a NaN or infinite box coordinate or score is left out of ``draw()``/``plot()``/``save()``
(one ``amdinfer.results`` warning counts the rows left out), and ``to_dict()``/``to_json()`` give ``None``/``null``
for such a number: the JSON is strict, never ``NaN`` or ``Infinity``.

Example:
    >>> import numpy as np
    >>> from amdinfer.results import Detections
    >>> det = Detections([[10, 20, 50, 80]], [0.9], [0], labels=["cat"], image_shape=(100, 120))
    >>> det.boxes.dtype, len(det), det.labels
    (dtype('float32'), 1, ['cat'])
"""

from __future__ import annotations

from ._classify import Classification
from ._draw import PALETTE
from ._embed import Embedding, Embeddings, Match, Matches
from ._keypoints import SKELETON, Keypoints
from ._masks import Masks
from ._segmap import SegmentationMap
from ._tensors import TensorResult, batch_tensors, split_batch
from ._text import TextLine, TextLines
from ._vision import Detection, Detections

__all__ = [
    "PALETTE",
    "Classification",
    "Detection",
    "Detections",
    "Embedding",
    "Embeddings",
    "Keypoints",
    "Match",
    "Masks",
    "Matches",
    "SKELETON",
    "SegmentationMap",
    "TensorResult",
    "TextLine",
    "TextLines",
    "batch_tensors",
    "split_batch",
]
