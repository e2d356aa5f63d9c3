"""A served model's request gate (what an unload drains) and its platform string (its metadata)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["RequestGate", "platform"]


class RequestGate:
    """Counts a model's requests while they run; :meth:`drain` closes the gate and waits until none runs.

    Example:
        >>> async def main():
        ...     gate = RequestGate("tiny")
        ...     async with gate.enter():
        ...         running = gate.running
        ...     await gate.drain()
        ...     return running, gate.running, gate.closing
        >>> asyncio.run(main())
        (1, 0, True)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.running = 0
        #: set by :meth:`drain`: new requests are refused
        self.closing = False
        self._idle: asyncio.Event | None = None

    @contextlib.asynccontextmanager
    async def enter(self) -> AsyncIterator[None]:
        """Count one request (``ModelNotReady`` once the gate is closing)."""
        if self.closing:
            from kserve.errors import ModelNotReady

            raise ModelNotReady(self.name, "it is being unloaded")
        if self._idle is None:
            self._idle = asyncio.Event()
        self.running += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.running -= 1
            if self.running == 0:
                self._idle.set()

    async def drain(self) -> None:
        """Refuse new requests and wait for those running."""
        self.closing = True
        if self.running and self._idle is not None:
            await self._idle.wait()


def platform(worker: Any) -> str:
    """What runs a served model, for its metadata: ``amdinfer BACKEND (PROVIDERS) PRECISION``.

    Example:
        >>> import amdinfer
        >>> from amdinfer.serve import EngineWorker
        >>> from amdinfer.testing.models import tiny_cnn
        >>> platform(EngineWorker(amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"])))
        'amdinfer ort (CPUExecutionProvider) fp32'
    """
    engine, kind = getattr(worker, "engine", None), "amdinfer"
    if engine is None:
        engine, kind = getattr(getattr(worker, "pipeline", None), "engine", None), "amdinfer pipeline"
    info = getattr(engine, "info", None)
    if info is None:
        return kind
    providers = f" ({', '.join(info.providers)})" if info.providers else ""
    return f"{kind} {info.backend}{providers} {info.precision}"
