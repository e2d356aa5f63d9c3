"""The backend registry: name -> engine factory, imported lazily.

Backends register a ``"module:Class"`` string so that ``import amdinfer`` never imports a runtime.
Names are unique; a failed lookup lists what exists.

Example:
    >>> from amdinfer.engines.registry import backend_names
    >>> "ort" in backend_names() and "reference" in backend_names()
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

__all__ = ["BackendEntry", "auto_order", "backend_names", "get_backend", "register_backend"]

Factory = Callable[..., Any] | str


@dataclass
class BackendEntry:
    """One registered backend.

    Attributes:
        name: registry name.
        factory: the engine class (or a ``"module:attr"`` string resolved on first use).
        auto_priority: position in ``backend="auto"`` (lower first); ``None`` keeps it out of auto.
        description: one line for ``amdinfer doctor``.

    Example:
        >>> BackendEntry("x", "pkg.mod:Engine").auto_priority is None
        True
    """

    name: str
    factory: Factory
    auto_priority: int | None = None
    description: str = ""

    def resolve(self) -> Callable[..., Any]:
        """Import and return the factory."""
        if isinstance(self.factory, str):
            module, _, attr = self.factory.partition(":")
            self.factory = getattr(importlib.import_module(module), attr)
        return self.factory


_REGISTRY: dict[str, BackendEntry] = {}


def register_backend(name: str, factory: Factory, *, auto_priority: int | None = None, description: str = "") -> None:
    """Register an engine factory under ``name``.

    Args:
        name: the name users pass as ``backend=``.
        factory: an :class:`~amdinfer.Engine` subclass, any callable returning an engine, or a
            ``"module:attr"`` string imported on first use.
        auto_priority: where the backend stands in ``backend="auto"`` (lower is tried first).
        description: one line shown by ``amdinfer doctor``.

    Raises:
        OptionError: ``name`` is already registered.

    Example:
        >>> register_backend("ort", "amdinfer.engines.ort:OrtEngine")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: backend 'ort' is already registered (amdinfer.engines.ort:OrtEngine)
    """
    if name in _REGISTRY:
        prev = _REGISTRY[name].factory
        shown = prev if isinstance(prev, str) else f"{prev.__module__}:{prev.__qualname__}"
        raise OptionError(f"backend {name!r} is already registered ({shown})")
    _REGISTRY[name] = BackendEntry(name, factory, auto_priority, description)


def backend_names() -> list[str]:
    """Registered backend names.

    Example:
        >>> sorted(backend_names())[:2]
        ['migraphx', 'ort']
    """
    return list(_REGISTRY)


def get_backend(name: str) -> BackendEntry:
    """Look up a backend.

    Raises:
        OptionError: unknown name; the message lists the registered ones.

    Example:
        >>> get_backend("ort").name
        'ort'
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OptionError(f"backend: got {name!r}, expected one of {sorted(_REGISTRY)} or an Engine instance") from None


def auto_order() -> list[BackendEntry]:
    """Backends tried by ``backend="auto"``, best first.

    Example:
        >>> [e.name for e in auto_order()]
        ['migraphx', 'ort']
    """
    return sorted((e for e in _REGISTRY.values() if e.auto_priority is not None), key=lambda e: e.auto_priority)


register_backend(
    "migraphx",
    "amdinfer.engines.migraphx:MigraphxEngine",
    auto_priority=10,
    description="AMD MIGraphX through its own Python module (parse -> compile -> run)",
)
register_backend(
    "ort",
    "amdinfer.engines.ort:OrtEngine",
    auto_priority=20,
    description="ONNX Runtime: MIGraphX EP -> ROCm EP -> CUDA EP -> CPU",
)
register_backend(
    "reference",
    "amdinfer.engines.reference:ReferenceEngine",
    description="NumPy reference on onnx.reference with fast kernels (the oracle)",
)
