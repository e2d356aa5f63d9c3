"""One ONNX Runtime session per input shape (``OrtEngine(shape_sessions=N)``).

ONNX Runtime's CUDA EP keeps one state per ``Conv`` node (its cuDNN descriptors and plan) and rebuilds it
whenever the node's input shape differs from its previous call: measured on an H200 (docs/performance.md, OCR),
a PP-OCR recogniser called with widths alternating 320/480 paid 2.1-2.7 s on every call against 4-6 ms at one
width. A session that only ever sees one shape keeps its state, so an engine fed a few distinct shapes (pages
padded to a few canvas sizes, text-line batches to a few widths) runs each on its own session: the first shape
on the engine's session, each new one on a session of its own (created on first use, same model, providers and
options), up to ``limit`` sessions in all; shapes beyond that share the engine's session.

``shape_sessions="auto"`` (the default) is 8 on the CUDA EP for models with an input that varies beyond the
batch axis (where it was measured), else 0 (off): a model whose only dynamic axis is the batch, as served with
``batch_buckets``, keeps one session.

Example:
    >>> resolve_shape_sessions("auto", "CUDAExecutionProvider", ("x[2]",)), resolve_shape_sessions(3, "cpu", ())
    (8, 3)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import OptionError
from ._providers import CUDA_EP

__all__ = ["AUTO_SHAPE_SESSIONS", "ShapeSessions", "check_shape_sessions", "resolve_shape_sessions"]

#: sessions per engine that ``shape_sessions="auto"`` keeps where it applies
AUTO_SHAPE_SESSIONS = 8


def check_shape_sessions(value: Any) -> int | str:
    """``shape_sessions=``: ``"auto"`` or an int >= 0 (0 and 1: one session, the engine's own).

    Example:
        >>> check_shape_sessions(-1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: shape_sessions: got -1, expected 'auto' or an int >= 0 (sessions per ...
    """
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionError(
            f"shape_sessions: got {value!r}, expected 'auto' or an int >= 0 (sessions per engine, one per input shape)"
        )
    return value


def resolve_shape_sessions(value: int | str, provider: str, varying: tuple[str, ...]) -> int:
    """The number of sessions ``value`` means for an engine on ``provider`` with ``varying`` inputs."""
    if value == "auto":
        return AUTO_SHAPE_SESSIONS if provider == CUDA_EP and varying else 0
    return int(value)


def _shape(value: Any) -> tuple[int, ...]:
    shape = value.shape
    return tuple(int(d) for d in (shape() if callable(shape) else shape))  # OrtValue.shape is a method


class ShapeSessions:
    """The sessions of one engine by input shape: ``pick(feeds)`` gives the ``(session, runner)`` to run them on.

    Args:
        limit: sessions in all, the engine's own included (<= 1: every shape on the engine's own).
        main: the engine's ``(session, runner)``; it serves the first shape seen and every shape over ``limit``.
        make: creates another ``(session, runner)`` like ``main`` (called under a lock, once per new shape).
        record: where the shapes with a session of their own are listed (``info.settings["shape_sessions"]``).

    Example:
        >>> import numpy as np
        >>> made = []
        >>> s = ShapeSessions(2, ("main", None), lambda: made.append(1) or ("extra", None), {})
        >>> [s.pick({"x": np.zeros(n)})[0] for n in (3, 4, 3, 5)]
        ['main', 'extra', 'main', 'main']
        >>> s.record
        {'limit': 2, 'shapes': [{'x': [3]}, {'x': [4]}], 'overflow_calls': 1}
    """

    def __init__(
        self, limit: int, main: tuple[Any, Any], make: Callable[[], tuple[Any, Any]], record: dict[str, Any]
    ) -> None:
        self.limit = int(limit)
        self._main = main
        self._make = make
        self._first: tuple[Any, ...] | None = None
        self._extra: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        self.record = record
        record.update(limit=self.limit, shapes=[], overflow_calls=0)

    @property
    def active(self) -> bool:
        """Whether more than one session can exist."""
        return self.limit > 1

    def pick(self, feeds: Mapping[str, Any]) -> tuple[Any, Any]:
        """The ``(session, runner)`` for these feeds' shapes."""
        if not self.active:
            return self._main
        key = tuple((name, _shape(v)) for name, v in sorted(feeds.items()))
        if key == self._first:
            return self._main
        found = self._extra.get(key)
        if found is not None:
            return found
        with self._lock:
            if self._first is None:
                self._first = key
                self.record["shapes"].append({n: list(s) for n, s in key})
                return self._main
            found = self._extra.get(key)
            if found is None:
                if len(self._extra) + 1 >= self.limit:
                    self.record["overflow_calls"] += 1
                    return self._main
                found = self._extra[key] = self._make()
                self.record["shapes"].append({n: list(s) for n, s in key})
        return found

    def close(self) -> None:
        """Close the extra sessions' runners and drop the sessions (the engine closes its own)."""
        with self._lock:
            for _, runner in self._extra.values():
                if runner is not None:
                    runner.close()
            self._extra.clear()
