"""What ``serve --recipe segment`` answers: the class maps of one request's images as tensors (:func:`map_tensors`)
and the client's way back to them (:func:`maps_from_answer`); docs/serving.md, "Semantic segmentation".

Per request of ``N`` images (each map in its image's own pixels):

- ``classes``: ``UINT8 (N, H, W)`` class per pixel (``INT32`` over 256 classes), ``H``/``W`` the largest image's;
  image ``i`` is ``classes[i, :h_i, :w_i]``, the rest is padding (0, not a class);
- ``image_shapes``: ``INT64 (N, 2)``, each image's ``(h, w)``;
- ``counts``: ``INT64 (N, C)``, pixels per class (present classes: ``counts > 0``);
- ``rle``: ``BYTES (N,)``, each map as JSON: ``image_shape``, ``labels``, ``counts`` and ``rle``, COCO run-length
  encoding of each present class's mask (:meth:`~amdinfer.results.SegmentationMap.to_dict`);
- ``labels``: ``BYTES (N, C)`` class names, when the model has them.

Every tensor has one row per image, so a request's answer needs no ``*_batch_index`` and images of different
sizes share a request.

Example:
    >>> from amdinfer.results import SegmentationMap
    >>> maps = [SegmentationMap([[0, 1, 1]], labels=["a", "b"]), SegmentationMap([[1], [0]], labels=["a", "b"])]
    >>> answer = map_tensors(maps)
    >>> answer["classes"].shape, answer["image_shapes"].tolist()
    ((2, 2, 3), [[1, 3], [2, 1]])
    >>> [m.classes.tolist() for m in maps_from_answer(answer)]
    [[[0, 1, 1]], [[1], [0]]]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..results import SegmentationMap

__all__ = ["map_tensors", "maps_from_answer"]

Tensors = dict[str, np.ndarray]


def map_tensors(maps: Sequence[SegmentationMap]) -> Tensors:
    """One request's class maps as its answer's tensors (the module's layout).

    Raises:
        InputError: no maps, or maps of different class counts.

    Example:
        >>> answer = map_tensors([SegmentationMap([[2, 0]], num_classes=3)])
        >>> answer["classes"].dtype, answer["counts"].tolist(), sorted(answer)
        (dtype('uint8'), [[1, 0, 1]], ['classes', 'counts', 'image_shapes', 'rle'])
    """
    if not maps:
        raise InputError("map_tensors: got no maps, expected one per image")
    classes = {m.num_classes for m in maps}
    if len(classes) != 1:
        raise InputError(f"map_tensors: got maps of {sorted(classes)} classes, expected one class count")
    shapes = np.array([m.image_shape for m in maps], np.int64)
    dtype = np.result_type(*(m.classes.dtype for m in maps))
    out = np.zeros((len(maps), int(shapes[:, 0].max()), int(shapes[:, 1].max())), dtype)
    for i, m in enumerate(maps):
        out[i, : m.image_shape[0], : m.image_shape[1]] = m.classes
    rle = np.empty(len(maps), dtype=object)
    rle[:] = [json.dumps(m.to_dict(), separators=(",", ":")).encode() for m in maps]
    tensors: Tensors = {
        "classes": out,
        "image_shapes": shapes,
        "counts": np.stack([m.counts for m in maps]),
        "rle": rle,
    }
    if maps[0].labels is not None:
        labels = np.empty((len(maps), maps[0].num_classes), dtype=object)
        labels[:] = [[s.encode() for s in (m.labels or [])] for m in maps]
        tensors["labels"] = labels
    return tensors


def maps_from_answer(tensors: Mapping[str, Any], *, from_rle: bool = False) -> list[SegmentationMap]:
    """The class maps of one answer (:func:`map_tensors`' tensors, as a client such as ``tritonclient`` reads
    them with ``as_numpy``): each image's ``classes`` cut to its ``image_shapes``; ``from_rle``: rebuilt from the
    ``rle`` JSON instead (what a client without the tensors' layout does).

    Raises:
        InputError: a tensor missing, or tensors that disagree on the image count.

    Example:
        >>> answer = map_tensors([SegmentationMap([[0, 1], [1, 1]])])
        >>> maps_from_answer(answer, from_rle=True)[0].classes.tolist()
        [[0, 1], [1, 1]]
    """
    arrays = {str(k): np.asarray(v) for k, v in tensors.items()}
    need = ["rle"] if from_rle else ["classes", "image_shapes"]
    missing = [k for k in need if k not in arrays]
    if missing:
        raise InputError(f"maps_from_answer: got tensors {sorted(arrays)}, expected {need} (serve --recipe segment)")
    if from_rle:
        out = []
        for item in arrays["rle"].reshape(-1).tolist():
            data = json.loads(item.decode() if isinstance(item, bytes) else item)
            out.append(SegmentationMap.from_dict(data))
        return out
    classes, shapes = arrays["classes"], arrays["image_shapes"].reshape(-1, 2)
    if classes.ndim != 3 or len(classes) != len(shapes):
        raise InputError(
            f"maps_from_answer: classes {classes.shape} and image_shapes {shapes.shape}: expected (N, H, W) and (N, 2)"
        )
    labels = arrays.get("labels")
    counts = arrays.get("counts")
    out = []
    for i, (h, w) in enumerate(shapes.tolist()):
        names = None if labels is None else [v.decode() if isinstance(v, bytes) else str(v) for v in labels[i]]
        n = None if counts is None or names is not None else int(counts.shape[1])
        out.append(SegmentationMap(classes[i, :h, :w], labels=names, num_classes=n))
    return out
