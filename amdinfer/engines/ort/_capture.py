"""One CUDA/HIP graph capture at a time in the process: the gate every IOBinding runner goes through.

Example:
    >>> with CAPTURE_GATE.run():
    ...     CAPTURE_GATE.active >= 1
    True
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["CAPTURE_GATE", "CAPTURE_RUNS", "CaptureGate"]

#: Runs with a slot's ``gpu_graph_id`` that go through :meth:`CaptureGate.capture`: ONNX Runtime makes a
#: few plain runs to settle its allocations, then captures (CUDA EP: one or two runs before; margin kept).
CAPTURE_RUNS = 3


class CaptureGate:
    """A process-wide gate: a CUDA/HIP graph capture runs alone, every other device call alongside others.

    ONNX Runtime captures in ``cudaStreamCaptureModeGlobal``: while one stream captures, a CUDA call that
    may synchronise (``cudaStreamSynchronize``, ``cudaMalloc``, a blocking copy) from *any* thread of the
    process invalidates the capture and fails itself ("operation not permitted when stream is capturing").
    Two engines on two GPUs, or two threads on one engine, hit this on their first runs. So every device
    call of every :class:`IoBindingRunner` holds the gate shared (:meth:`run`), and the runs that may
    capture hold it alone (:meth:`capture`). Captures are rare (the first runs of each input shape);
    replays and copies then run concurrently as before. Waiting captures go first, so a stream of
    shared runs cannot starve them. Re-entrant per thread: a nested section runs inside the outer one.

    Example:
        >>> gate = CaptureGate()
        >>> with gate.run(), gate.run():  # shared sections nest and overlap
        ...     gate.active
        1
        >>> with gate.capture():
        ...     gate.capturing
        True
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0  # threads inside a shared section
        self._capturing = False
        self._waiting = 0  # captures waiting for the shared sections to drain
        self._local = threading.local()

    @property
    def active(self) -> int:
        """Threads inside a shared section now."""
        return self._active

    @property
    def capturing(self) -> bool:
        """Whether a capture section is running now."""
        return self._capturing

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """A shared section: any number run at once, never while a capture runs."""
        local = self._local
        if getattr(local, "depth", 0):
            local.depth += 1
            try:
                yield
            finally:
                local.depth -= 1
            return
        with self._cond:
            while self._capturing or self._waiting:
                self._cond.wait()
            self._active += 1
        local.depth = 1
        try:
            yield
        finally:
            local.depth = 0
            with self._cond:
                self._active -= 1
                if not self._active:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """An exclusive section: waits until no other section runs, and holds every other one off."""
        local = self._local
        if getattr(local, "depth", 0):
            local.depth += 1  # already inside a section of this gate: nesting cannot wait for itself
            try:
                yield
            finally:
                local.depth -= 1
            return
        with self._cond:
            self._waiting += 1
            try:
                while self._capturing or self._active:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._capturing = True
        local.depth = 1
        try:
            yield
        finally:
            local.depth = 0
            with self._cond:
                self._capturing = False
                self._cond.notify_all()


#: The gate every runner of this process uses (replaceable in tests through ``IoBindingRunner.gate``).
CAPTURE_GATE = CaptureGate()
