"""Batching preprocessed items: :func:`stack`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import StageError
from ..stages import Sample

__all__ = ["stack"]


def stack(samples: Iterable[Any]) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Stack preprocessed items into one batch along a new axis 0, keeping each item's metadata.

    Args:
        samples: :class:`~amdinfer.stages.Sample` objects or arrays, all of one shape and dtype.

    Returns:
        ``(batch, metas)``.

    Raises:
        StageError: no items, or items of different shapes or dtypes (e.g. ``Letterbox(auto=True)`` or
            ``Resize(int)`` on images of different aspect ratios).

    Example:
        >>> batch, metas = stack([np.zeros((3, 4, 4)), np.ones((3, 4, 4))])
        >>> batch.shape, metas
        ((2, 3, 4, 4), [{}, {}])
    """
    wrapped = [Sample.wrap(s) for s in samples]
    if not wrapped:
        raise StageError("stack: got no items, expected at least one")
    arrays = []
    for i, s in enumerate(wrapped):
        if not isinstance(s.data, np.ndarray):
            raise StageError(f"stack: item {i} is {type(s.data).__name__}, expected a numpy array")
        arrays.append(s.data)
    first = arrays[0]
    for i, a in enumerate(arrays[1:], start=1):
        if a.shape != first.shape or a.dtype != first.dtype:
            raise StageError(
                f"stack: item {i} has shape {a.shape} {a.dtype}, item 0 has {first.shape} {first.dtype}; "
                "a batch needs one shape and dtype (use a fixed-size Letterbox/Resize, or batch_size=1)"
            )
    return np.stack(arrays), [s.meta for s in wrapped]
