"""Engines: the :class:`Engine` contract, the backend registry, and the backends (imported lazily).

Example:
    >>> from amdinfer.engines import backend_names
    >>> "ort" in backend_names()
    True
"""

from .base import Engine, EngineInfo
from .registry import backend_names, get_backend, register_backend

__all__ = ["Engine", "EngineInfo", "backend_names", "get_backend", "register_backend"]
