"""The engine conformance suites' building blocks: which engine kinds exist and how to build them.

Each backend registers its conformance kinds with :func:`~amdinfer.register_backend` (``conformance=``,
third-party backends through the ``amdinfer.backends`` entry-point group); this module collects them
from the registry. ``tests/engines/test_engine_contract.py`` runs one contract suite over every kind,
``tests/engines/test_onnx_conformance.py`` runs ONNX's node tests over the kinds with ``node_tests=True``, with
each kind's ``excludes``. A kind whose backend cannot run here is skipped with the reason the backend gave.

Select kinds with the environment variable ``AMDINFER_TEST_ENGINES`` (comma separated), e.g.
``AMDINFER_TEST_ENGINES=ort-cuda`` on a GPU machine.

Example:
    >>> from amdinfer.testing.conformance import ENGINE_KINDS
    >>> "ort-cpu" in ENGINE_KINDS
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from .._load import load
from ..engines.base import Engine
from ..engines.registry import ConformanceKind, backend_entries
from ..errors import BackendUnavailableError, OptionError

__all__ = [
    "ENGINE_KINDS",
    "EngineKind",
    "availability",
    "make_engine",
    "node_test_excludes",
    "register_engine_kind",
    "selected_kinds",
]

#: One way to build an engine for the suites (the registry's :class:`~amdinfer.engines.registry.ConformanceKind`).
EngineKind = ConformanceKind

ENGINE_KINDS: dict[str, EngineKind] = {}


def register_engine_kind(kind: EngineKind) -> None:
    """Add an engine kind to the suites (backends usually register theirs with ``register_backend``).

    Raises:
        OptionError: a kind of that name exists.

    Example:
        >>> register_engine_kind(EngineKind("ort-cpu-1t", {"backend": "ort", "providers": ["cpu"], "threads": 1}))
        >>> "ort-cpu-1t" in ENGINE_KINDS
        True
        >>> register_engine_kind(EngineKind("ort-cpu", {"backend": "ort"}))
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: engine kind 'ort-cpu' is already registered (backend 'ort')
    """
    if kind.name in ENGINE_KINDS:
        backend = ENGINE_KINDS[kind.name].options.get("backend")
        raise OptionError(f"engine kind {kind.name!r} is already registered (backend {backend!r})")
    ENGINE_KINDS[kind.name] = kind


for _entry in backend_entries():
    for _kind in _entry.conformance:
        register_engine_kind(_kind)


def node_test_excludes() -> dict[str, dict[str, str]]:
    """Kinds the ONNX node tests run on -> their excludes (case name or regex -> reason).

    Example:
        >>> sorted(node_test_excludes())[:2]
        ['ort-cpu', 'reference']
    """
    return {name: kind.resolved_excludes() for name, kind in ENGINE_KINDS.items() if kind.node_tests}


def selected_kinds() -> list[str]:
    """Kinds named in ``AMDINFER_TEST_ENGINES``, or all registered kinds.

    Example:
        >>> isinstance(selected_kinds(), list)
        True
    """
    wanted = os.environ.get("AMDINFER_TEST_ENGINES")
    if not wanted:
        return list(ENGINE_KINDS)
    return [k.strip() for k in wanted.split(",") if k.strip() in ENGINE_KINDS]


@cache
def availability(name: str) -> str | None:
    """``None`` when the kind builds here, else the reason it cannot (the backend's own message).

    Example:
        >>> availability("ort-cpu") is None
        True
    """
    from .models import tiny_cnn

    try:
        engine = make_engine(name, tiny_cnn())
    except (BackendUnavailableError, ImportError) as exc:
        return f"{name}: {exc}"
    try:
        engine.run(np.zeros((1, 3, 32, 32), np.float32))
    finally:
        engine.close()
    return None


def make_engine(name: str, model: Any, **overrides: Any) -> Engine:
    """Build an engine of the given kind for ``model``.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> make_engine("ort-cpu", tiny_cnn()).info.backend
        'ort'
    """
    kind = ENGINE_KINDS[name]
    options = {**kind.options, **overrides}
    return load(model, **options)


EngineFactory = Callable[..., Engine]
