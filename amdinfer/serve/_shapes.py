"""What shapes a served model is fed: a WARNING for each compile outside warm-up, and the shape log.

A served engine is warmed at the shapes it will see (:meth:`EngineWorker.warmup
<amdinfer.serve._workers.EngineWorker.warmup>`); those are its prepared shapes (``on_new_shape``,
:mod:`amdinfer.engines._new_shapes`). A request whose shape is not prepared compiles inside ``run`` on a backend
that compiles per shape (MIGraphX, the MIGraphX or TensorRT EP): tens of seconds for that request and every one
queued behind it. The server logs each such shape once, as a WARNING naming the model, the input and the shape.

Every request's shapes and every engine call's (the rows of the batch it joined, before padding) are counted per
model and input; ``amdinfer serve --shape-log FILE`` writes the counts as JSON (at most every
:data:`DUMP_SECONDS`, and when the server stops), the histogram ``amdinfer compile MODEL --shapes-from FILE``
plans buckets from::

    {"format": "amdinfer.shape_log/1", "models": {"resnet": {"inputs": {"x": {
        "requests": {"1x3x224x224": 90, "4x3x224x224": 10}, "calls": {"1x3x224x224": 40, "5x3x224x224": 12}}},
        "compiled_outside_warmup": [{"x": [5, 3, 224, 224]}]}}}

Example:
    >>> import numpy as np
    >>> log = ShapeLog()
    >>> log.record("m", [{"x": np.zeros((1, 4))}, {"x": np.zeros((2, 4))}])
    >>> log.to_json()["models"]["m"]["inputs"]["x"]
    {'requests': {'1x4': 1, '2x4': 1}, 'calls': {'3x4': 1}}
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import OptionError

__all__ = [
    "DUMP_SECONDS",
    "FORMAT",
    "ShapeLog",
    "configure_shape_log",
    "shape_log",
    "shape_text",
    "warming",
    "watch_model",
]

log = logging.getLogger("amdinfer.serve")

#: the ``format`` field of a shape log
FORMAT = "amdinfer.shape_log/1"
#: the shape log is written at most this often while serving (and once more when the server stops)
DUMP_SECONDS = 5.0


def shape_text(shape: Sequence[int]) -> str:
    """``(1, 3, 8)`` -> ``"1x3x8"`` (a shape log's key).

    Example:
        >>> shape_text((1, 3, 8)), shape_text(())
        ('1x3x8', '')
    """
    return "x".join(str(int(d)) for d in shape)


class ShapeLog:
    """Counts of request and engine-call shapes per model and input, and the shapes compiled outside warm-up.

    Args:
        path: where :meth:`dump` writes (``None``: kept in memory only).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.Lock()
        self._requests: dict[str, dict[str, Counter[str]]] = {}
        self._calls: dict[str, dict[str, Counter[str]]] = {}
        self._compiled: dict[str, list[dict[str, list[int]]]] = {}
        self._last = 0.0
        self._dirty = False

    def record(self, model: str, requests: Sequence[Mapping[str, Any]]) -> None:
        """Count the requests of one engine call (each request's shapes, and the call's: rows summed)."""
        if not requests:
            return
        with self._lock:
            req = self._requests.setdefault(model, {})
            calls = self._calls.setdefault(model, {})
            for name in requests[0]:
                shapes = [tuple(getattr(r[name], "shape", ())) for r in requests]
                counter = req.setdefault(name, Counter())
                for s in shapes:
                    counter[shape_text(s)] += 1
                call = (sum(s[0] for s in shapes), *shapes[0][1:]) if shapes[0] else ()
                calls.setdefault(name, Counter())[shape_text(call)] += 1
            self._dirty = True
        self.maybe_dump()

    def compiled(self, model: str, shapes: Mapping[str, Sequence[int]]) -> None:
        """Note a shape compiled outside warm-up (and log it as a WARNING, per input)."""
        with self._lock:
            self._compiled.setdefault(model, []).append({n: list(s) for n, s in shapes.items()})
            self._dirty = True
        for name, shape in shapes.items():
            log.warning(
                "model %r: input %r: shape %s was not prepared at warm-up and compiles now, on the request path "
                "(on_new_shape='compile'; backends that compile per shape stall this request); prepare it: "
                "batch buckets, warm shapes, or amdinfer compile --shapes-from a --shape-log",
                model,
                name,
                tuple(shape),
            )

    def to_json(self) -> dict[str, Any]:
        """The log as JSON (the format above)."""
        with self._lock:
            models: dict[str, Any] = {}
            for model in sorted(set(self._requests) | set(self._compiled)):
                inputs = {
                    name: {"requests": dict(sorted(c.items())), "calls": dict(sorted(self._calls[model][name].items()))}
                    for name, c in sorted(self._requests.get(model, {}).items())
                }
                entry: dict[str, Any] = {"inputs": inputs}
                if model in self._compiled:
                    entry["compiled_outside_warmup"] = list(self._compiled[model])
                models[model] = entry
            return {"format": FORMAT, "models": models}

    def maybe_dump(self) -> None:
        """:meth:`dump` when there is news and :data:`DUMP_SECONDS` have passed since the last one."""
        if self.path is not None and self._dirty and time.monotonic() - self._last >= DUMP_SECONDS:
            self.dump()

    def dump(self) -> Path | None:
        """Write the log to :attr:`path` (atomically: a temporary file renamed); returns the path."""
        if self.path is None:
            return None
        data = self.to_json()
        with self._lock:
            self._last, self._dirty = time.monotonic(), False
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, self.path)
        return self.path


_LOG = ShapeLog()


def shape_log() -> ShapeLog:
    """This process's shape log (kept in memory unless :func:`configure_shape_log` gave it a file)."""
    return _LOG


def configure_shape_log(path: str | os.PathLike[str] | None, *, per_process: bool = False) -> ShapeLog:
    """Give this process's shape log a file (``--shape-log FILE``); written again when the process exits.

    ``per_process``: one of several server processes on the same ports: each writes ``FILE`` with its process id
    before the suffix (``shapes.1234.json``), so none overwrites another's.

    Raises:
        OptionError: the folder of ``path`` does not exist.
    """
    global _LOG
    if path is not None:
        p = Path(path)
        if not p.parent.is_dir():
            raise OptionError(f"--shape-log: got {str(path)!r}, but its folder {str(p.parent)!r} does not exist")
        if per_process:
            p = p.with_name(f"{p.stem}.{os.getpid()}{p.suffix}")
        _LOG = ShapeLog(p)
        atexit.register(_LOG.dump)
    return _LOG


def watch_model(name: str, workers: Sequence[Any]) -> None:
    """Count ``workers``' request shapes under ``name``, and warn of their engines' compiles outside warm-up."""
    for worker in workers:
        if hasattr(worker, "shape_log"):
            worker.shape_log = lambda requests, _name=name: shape_log().record(_name, requests)
        engine = getattr(worker, "engine", None) or getattr(getattr(worker, "pipeline", None), "engine", None)
        shapes = getattr(engine, "_new_shapes", None)
        if shapes is not None:
            shapes.listeners.append(lambda kind, key, _name=name: shape_log().compiled(_name, key))


@contextlib.contextmanager
def warming(engine: Any) -> Iterator[None]:
    """The engine's warm-up block (its shapes are prepared, no warning), when it has one."""
    shapes = getattr(engine, "_new_shapes", None)
    with shapes.warm() if shapes is not None else contextlib.nullcontext():
        yield
