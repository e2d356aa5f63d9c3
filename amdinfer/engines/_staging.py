"""Pinned (page-locked) host staging for batches bound for a GPU, independent of the backend.

Example:
    >>> import numpy as np
    >>> staging = PinnedStaging(depth=2, pinned=False)
    >>> staging.next((2, 3), np.uint8).shape
    (2, 3)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import OptionError

__all__ = ["PinnedStaging"]


class PinnedStaging:
    """A ring of page-locked (pinned) host buffers that a producer fills in place, for host batches to a GPU.

    A copy from pageable memory runs at a fraction of the bus speed (the driver bounces it through a pinned
    buffer of its own, holding the calling thread); from pinned memory it is one DMA. A producer that writes
    its batch straight into :meth:`next` (``np.stack(images, out=staging.next(shape, dtype))``) pays nothing
    extra. ``depth`` buffers per shape rotate, so the batch being filled never aliases one still in flight
    (``depth`` >= batches in flight + 1; the ORT engine's ``run_many`` keeps ``prefetch + 1`` in flight).

    Pinned memory comes from PyTorch (``torch.empty(..., pin_memory=True)``) when it is installed and sees a
    GPU; otherwise the buffers are ordinary NumPy arrays (CPU engines, no torch), which changes nothing but
    the speed.

    Args:
        depth: buffers per ``(shape, dtype)``.
        pinned: ``None`` (pin when possible), ``True`` (pin or raise), ``False`` (never).

    Example:
        >>> staging = PinnedStaging(depth=2, pinned=False)
        >>> a, b, c = (staging.next((2, 3), np.uint8) for _ in range(3))
        >>> a is c, a is b, staging.pinned
        (True, False, False)
    """

    def __init__(self, depth: int = 4, *, pinned: bool | None = None) -> None:
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise OptionError(f"depth: got {depth!r}, expected an int >= 1")
        self.depth = depth
        self._torch = None
        if pinned is not False:
            try:
                import torch

                if torch.cuda.is_available():
                    self._torch = torch
            except Exception:  # torch missing or broken: plain buffers
                self._torch = None
            if pinned and self._torch is None:
                raise OptionError("pinned=True: pinned host memory needs PyTorch with a visible GPU")
        self._rings: dict[Any, tuple[list[Any], itertools.count[int]]] = {}
        self._free: dict[Any, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def pinned(self) -> bool:
        """Whether the buffers are page-locked."""
        return self._torch is not None

    def _alloc(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        if self._torch is None:
            return np.empty(shape, dtype)
        t = self._torch.empty(int(np.prod(shape)) * dtype.itemsize, dtype=self._torch.uint8, pin_memory=True)
        return t.numpy().view(dtype).reshape(shape)

    def next(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """The next buffer of ``shape`` and ``dtype`` in its ring (allocated on first use)."""
        key = (tuple(int(s) for s in shape), np.dtype(dtype))
        with self._lock:
            ring = self._rings.get(key)
            if ring is None:
                ring = self._rings[key] = ([self._alloc(*key) for _ in range(self.depth)], itertools.count())
            return ring[0][next(ring[1]) % self.depth]

    def lease(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """A buffer of ``shape`` and ``dtype`` that no one else holds until :meth:`release` gives it back (a free
        one when there is one, else a new one): for a producer with several batches in flight, which a ring
        of fixed depth could alias.

        Example:
            >>> staging = PinnedStaging(pinned=False)
            >>> a = staging.lease((2, 3), np.uint8)
            >>> staging.release(a)
            >>> staging.lease((2, 3), np.uint8) is a, staging.lease((2, 3), np.uint8) is a
            (True, False)
        """
        key = (tuple(int(s) for s in shape), np.dtype(dtype))
        with self._lock:
            free = self._free.get(key)
            if free:
                return free.pop()
        return self._alloc(*key)

    def release(self, buffer: np.ndarray) -> None:
        """Give back a buffer from :meth:`lease`; up to ``depth`` free ones per shape are kept for reuse."""
        key = (buffer.shape, buffer.dtype)
        with self._lock:
            free = self._free.setdefault(key, [])
            if len(free) < self.depth and not any(b is buffer for b in free):
                free.append(buffer)

    def clear(self) -> None:
        """Free the buffers."""
        with self._lock:
            self._rings.clear()
            self._free.clear()
