"""The engine conformance suite's building blocks: which engines exist here and how to build them.

``tests/test_engine_contract.py`` runs one contract suite over every engine kind listed in
:data:`ENGINE_KINDS`; a kind whose backend cannot run here is skipped with the reason the backend
gave. A third-party backend plugs in with :func:`register_engine_kind`.

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
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from .._load import load
from ..engines.base import Engine
from ..errors import BackendUnavailableError

__all__ = ["ENGINE_KINDS", "EngineKind", "availability", "make_engine", "register_engine_kind", "selected_kinds"]


@dataclass(frozen=True)
class EngineKind:
    """How to build one kind of engine for the conformance suite.

    Attributes:
        name: the test id (``"ort-cpu"``).
        options: keyword arguments for :func:`amdinfer.load`.
        precision: the precision the tolerances are chosen for.
        excludes: case name -> reason the kind is excused from it.

    Example:
        >>> EngineKind("ort-cpu", {"backend": "ort", "providers": ["CPUExecutionProvider"]}).precision
        'fp32'
    """

    name: str
    options: dict[str, Any]
    precision: str = "fp32"
    excludes: dict[str, str] = field(default_factory=dict)


ENGINE_KINDS: dict[str, EngineKind] = {}


def register_engine_kind(kind: EngineKind) -> None:
    """Add an engine kind to the suite.

    Example:
        >>> register_engine_kind(EngineKind("ort-cpu-1t", {"backend": "ort", "providers": ["cpu"], "threads": 1}))
        >>> "ort-cpu-1t" in ENGINE_KINDS
        True
    """
    ENGINE_KINDS[kind.name] = kind


for _kind in (
    EngineKind("ort-cpu", {"backend": "ort", "providers": ["CPUExecutionProvider"]}),
    EngineKind("reference", {"backend": "reference"}),
    EngineKind("reference-fp64", {"backend": "reference", "precision": "fp64"}, precision="fp64"),
    EngineKind("ort-migraphx", {"backend": "ort", "providers": ["MIGraphXExecutionProvider"]}),
    EngineKind("ort-rocm", {"backend": "ort", "providers": ["ROCMExecutionProvider"]}),
    # TF32 off: the CUDA EP's default TF32 matmuls are ~1e-3 relative, beyond the fp32 elementwise check.
    EngineKind("ort-cuda", {"backend": "ort", "providers": ["CUDAExecutionProvider"], "tf32": False}),
    EngineKind(
        "ort-cuda-fp16",
        {"backend": "ort", "providers": ["CUDAExecutionProvider"], "precision": "fp16"},
        precision="fp16",
    ),
    EngineKind("migraphx-ref", {"backend": "migraphx", "target": "ref"}),
    EngineKind("migraphx-gpu", {"backend": "migraphx", "target": "gpu"}),
):
    register_engine_kind(_kind)


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
