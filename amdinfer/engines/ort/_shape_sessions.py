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

Shapes known in advance are warmed (:meth:`OrtEngine.warm <amdinfer.engines.ort.OrtEngine.warm>`, ``warm_shapes=``):
their sessions are made at load, several at once, each one run once, so that the first request of each shape finds
its session built and its kernels chosen. A warmed shape always has a session of its own; ``limit`` bounds the
sessions made on first use besides them. :func:`warm_feeds` turns the listed shapes into zero feeds, checked.

Example:
    >>> resolve_shape_sessions("auto", "CUDAExecutionProvider", ("x[2]",)), resolve_shape_sessions(3, "cpu", ())
    (8, 3)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import InputError, OptionError
from ...types import TensorSpec
from ._providers import CUDA_EP

__all__ = [
    "AUTO_SHAPE_SESSIONS",
    "ShapeSessions",
    "check_shape_sessions",
    "check_warm_shapes",
    "resolve_shape_sessions",
    "shape_key",
    "warm_feeds",
]

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


def _dims(where: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise OptionError(f"{where}: got {value!r}, expected a shape (a sequence of ints >= 0)")
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in value):
        raise OptionError(f"{where}: got {tuple(value)!r}, expected a shape (a sequence of ints >= 0)")
    return tuple(int(d) for d in value)


def check_warm_shapes(shapes: Any) -> tuple[tuple[int, ...] | tuple[tuple[str, tuple[int, ...]], ...], ...]:
    """``warm_shapes=`` / :meth:`OrtEngine.warm`'s list: each entry one input shape (a single-input model) or
    ``{input name: shape}``; kept as tuples (a mapping as its sorted ``(name, shape)`` pairs).

    Example:
        >>> check_warm_shapes([(1, 3, 8, 8), {"x": [1, 3, 8, 16]}])
        ((1, 3, 8, 8), (('x', (1, 3, 8, 16)),))
        >>> check_warm_shapes([(1, "a")])
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: warm_shapes[0]: got (1, 'a'), expected a shape (a sequence of ints >= 0)
    """
    if shapes is None:
        return ()
    if isinstance(shapes, (str, bytes, Mapping)) or not isinstance(shapes, Iterable):
        raise OptionError(f"warm_shapes: got {shapes!r}, expected a list of shapes or of {{input name: shape}}")
    out: list[Any] = []
    for k, entry in enumerate(shapes):
        if isinstance(entry, tuple) and entry and all(isinstance(p, tuple) and len(p) == 2 for p in entry):
            entry = dict(entry)  # already kept as pairs
        if isinstance(entry, Mapping):
            if not entry or any(not isinstance(n, str) for n in entry):
                raise OptionError(f"warm_shapes[{k}]: got {entry!r}, expected {{input name: shape}}")
            out.append(tuple((n, _dims(f"warm_shapes[{k}][{n!r}]", entry[n])) for n in sorted(entry)))
        else:
            out.append(_dims(f"warm_shapes[{k}]", entry))
    return tuple(out)


def warm_feeds(shapes: Any, inputs: Sequence[TensorSpec]) -> list[dict[str, np.ndarray]]:
    """Zero feeds, one ``{input name: array}`` per listed shape (:func:`check_warm_shapes`), each input in its
    dtype; a bare shape needs a single-input model. Ranks and fixed sizes are the engine's to check.

    Raises:
        OptionError: a malformed list. InputError: an entry names no input of the model, misses one, or is a
            bare shape for a model of several inputs (named by its index and shape).

    Example:
        >>> spec = TensorSpec("x", "float32", ("N", 3, "H", "W"))
        >>> [f["x"].shape for f in warm_feeds([(1, 3, 8, 8), {"x": (2, 3, 8, 16)}], [spec])]
        [(1, 3, 8, 8), (2, 3, 8, 16)]
    """
    tensors = [s for s in inputs if s.is_tensor]
    names = [s.name for s in tensors]
    out = []
    for k, entry in enumerate(check_warm_shapes(shapes)):
        given: dict[str, Any]
        if entry and isinstance(entry[0], tuple):
            given = dict(entry)
        elif len(tensors) == 1:
            given = {names[0]: entry}
        else:
            raise InputError(
                f"warm_shapes[{k}]: got the bare shape {entry}, expected {{input name: shape}} for a model with "
                f"inputs {names}"
            )
        unknown, missing = sorted(set(given) - set(names)), [n for n in names if n not in given]
        if unknown or missing:
            raise InputError(
                f"warm_shapes[{k}]: got inputs {sorted(given)}, expected every tensor input {names}"
                + (f" (unknown: {unknown})" if unknown else "")
            )
        out.append({s.name: np.zeros(given[s.name], np.dtype(s.dtype)) for s in tensors})
    return out


def _shape(value: Any) -> tuple[int, ...]:
    shape = value.shape
    return tuple(int(d) for d in (shape() if callable(shape) else shape))  # OrtValue.shape is a method


def shape_key(feeds: Mapping[str, Any]) -> tuple[Any, ...]:
    """The key of these feeds' shapes: ``((name, shape), ...)`` by name.

    Example:
        >>> shape_key({"x": np.zeros((1, 2))})
        (('x', (1, 2)),)
    """
    return tuple((name, _shape(v)) for name, v in sorted(feeds.items()))


class ShapeSessions:
    """The sessions of one engine by input shape: ``pick(feeds)`` gives the ``(session, runner)`` to run them on.

    Args:
        limit: sessions in all, the engine's own included (<= 1: every shape on the engine's own), besides the
            sessions of warmed shapes (:meth:`reserve`).
        main: the engine's ``(session, runner)``; it serves the first shape seen and every shape over ``limit``.
        make: creates another ``(session, runner)`` like ``main`` (once per new shape; for warmed shapes
            several at once, from different threads).
        record: where the shapes with a session of their own are listed (``info.settings["shape_sessions"]``).

    Example:
        >>> import numpy as np
        >>> made = []
        >>> s = ShapeSessions(2, ("main", None), lambda: made.append(1) or ("extra", None), {})
        >>> [s.pick({"x": np.zeros(n)})[0] for n in (3, 4, 3, 5)]
        ['main', 'extra', 'main', 'main']
        >>> s.record
        {'limit': 2, 'shapes': [{'x': [3]}, {'x': [4]}], 'overflow_calls': 1, 'warmed': 0}
    """

    def __init__(
        self, limit: int, main: tuple[Any, Any], make: Callable[[], tuple[Any, Any]], record: dict[str, Any]
    ) -> None:
        self.limit = int(limit)
        self._main = main
        self._make = make
        self._first: tuple[Any, ...] | None = None
        self._extra: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._warmed = 0  # sessions of warmed shapes in _extra (not counted against the limit)
        self._lock = threading.Lock()
        self.record = record
        record.update(limit=self.limit, shapes=[], overflow_calls=0, warmed=0)

    @property
    def active(self) -> bool:
        """Whether more than one session can exist."""
        return self.limit > 1

    def pick(self, feeds: Mapping[str, Any]) -> tuple[Any, Any]:
        """The ``(session, runner)`` for these feeds' shapes."""
        if not self.active:
            return self._main
        key = shape_key(feeds)
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
                if len(self._extra) - self._warmed + 1 >= self.limit:
                    self.record["overflow_calls"] += 1
                    return self._main
                found = self._extra[key] = self._make()
                self.record["shapes"].append({n: list(s) for n, s in key})
        return found

    def reserve(self, keys: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Warmed shapes: the first goes to the engine's session if it has none yet; returns the keys that need
        a session of their own (:meth:`build` each, from any thread), each once. Inactive: none.

        Example:
            >>> s = ShapeSessions(0, ("main", None), lambda: ("extra", None), {})
            >>> s.reserve([(("x", (1,)),)])
            []
        """
        if not self.active:
            return []
        out: list[tuple[Any, ...]] = []
        with self._lock:
            for key in keys:
                if self._first is None:
                    self._first = key
                    self.record["shapes"].append({n: list(s) for n, s in key})
                elif key != self._first and key not in self._extra and key not in out:
                    out.append(key)
        return out

    def build(self, key: tuple[Any, ...]) -> None:
        """Make the session of a reserved (warmed) shape; the lock is held only to file it."""
        made = self._make()
        with self._lock:
            if key in self._extra:  # built meanwhile on first use: keep that one
                runner = made[1]
                if runner is not None:
                    runner.close()
                return
            self._extra[key] = made
            self._warmed += 1
            self.record["warmed"] = self._warmed
            self.record["shapes"].append({n: list(s) for n, s in key})

    def close(self) -> None:
        """Close the extra sessions' runners and drop the sessions (the engine closes its own)."""
        with self._lock:
            for _, runner in self._extra.values():
                if runner is not None:
                    runner.close()
            self._extra.clear()
