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
import importlib.metadata
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionError
from ._fusion import FusionDefaults
from ._options import EngineOptions, unknown_option_error
from .base import Engine

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendEntry",
    "ConformanceKind",
    "Diagnosis",
    "auto_order",
    "backend_entries",
    "backend_names",
    "get_backend",
    "plugin_errors",
    "register_backend",
]

log = logging.getLogger("amdinfer.registry")

Factory = Callable[..., Any] | str
#: The entry-point group third-party backends register under (``[project.entry-points."amdinfer.backends"]``).
ENTRY_POINT_GROUP = "amdinfer.backends"


def _resolve(ref: Any) -> Any:
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


@dataclass(frozen=True)
class ConformanceKind:
    """One way to build a backend's engine for the conformance suites (``amdinfer.testing.conformance``).

    Attributes:
        name: the test id (``"ort-cpu"``).
        options: keyword arguments for :func:`amdinfer.load`.
        precision: the precision the tolerances are chosen for.
        excludes: ONNX node-test case name (or regex) -> why the kind is excused; a ``"module:attr"``
            string is imported when the suite needs it.
        node_tests: whether the ONNX backend node tests run on this kind (CPU kinds: thousands of cases).

    Example:
        >>> ConformanceKind("ort-cpu", {"backend": "ort", "providers": ["CPUExecutionProvider"]}).precision
        'fp32'
    """

    name: str
    options: dict[str, Any]
    precision: str = "fp32"
    excludes: Mapping[str, str] | str = field(default_factory=dict)
    node_tests: bool = False

    def resolved_excludes(self) -> dict[str, str]:
        """The excludes, imported if given as ``"module:attr"``."""
        return dict(_resolve(self.excludes))


@dataclass(frozen=True)
class Diagnosis:
    """What a backend's ``diagnose`` hook tells ``amdinfer doctor``.

    Attributes:
        state: one line: ``"ready"``, or why the backend cannot run.
        details: component -> state (e.g. ONNX Runtime provider -> ``"loads"``).
        problems: findings that explain why a GPU would not be used, each with its fix.
        plugins: runtime plugins the backend found (ONNX Runtime plugin EP packages) -> their state.

    Example:
        >>> Diagnosis("ready").problems
        []
    """

    state: str
    details: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    plugins: dict[str, str] = field(default_factory=dict)


@dataclass
class BackendEntry:
    """One registered backend and its hooks.

    Attributes:
        name: registry name.
        factory: the engine class (or a ``"module:attr"`` string resolved on first use).
        auto_priority: position in ``backend="auto"`` (lower first); ``None`` keeps it out of auto.
        description: one line for ``amdinfer doctor``.
        probe: ``() -> None | str``: ``None`` when the backend's runtime imports here, else why not
            (a ``"module:attr"`` string is resolved on first use).
        diagnose: ``() -> Diagnosis`` for ``amdinfer doctor`` (default: from ``probe``).
        conformance: the kinds the conformance suites build for this backend.
        more_conformance: ``() -> tuple[ConformanceKind, ...]`` (or a ``"module:attr"`` string): kinds known
            only on the machine, e.g. one per installed ONNX Runtime plugin EP; added to ``conformance`` once.
        fusion: how :meth:`Pipeline.fuse <amdinfer.Pipeline.fuse>`'s ``"auto"`` modes build the fused model for
            this backend (``None``: decided per provider, from the ONNX Runtime provider record).

    Example:
        >>> BackendEntry("x", "pkg.mod:Engine").auto_priority is None
        True
    """

    name: str
    factory: Factory
    auto_priority: int | None = None
    description: str = ""
    probe: Factory | None = None
    diagnose: Factory | None = None
    conformance: tuple[ConformanceKind, ...] = ()
    more_conformance: Factory | None = None
    fusion: FusionDefaults | None = None

    def resolve(self) -> Callable[..., Any]:
        """Import and return the factory."""
        self.factory = _resolve(self.factory)
        return self.factory  # type: ignore[return-value]

    def options_type(self) -> type[EngineOptions] | None:
        """The backend's option record type (imports the factory), or ``None`` for a factory that is not an
        :class:`~amdinfer.Engine` built from one (a function, or an engine with its own ``__init__``).

        Example:
            >>> get_backend("reference").options_type().__name__
            'ReferenceOptions'
        """
        factory = self.resolve()
        if isinstance(factory, type) and issubclass(factory, Engine) and factory.__init__ is Engine.__init__:
            return factory.options_type
        return None

    def option_names(self) -> tuple[str, ...] | None:
        """The keywords the backend takes (``None``: any; a factory taking ``**kwargs``).

        Example:
            >>> "keep_fp64" in get_backend("reference").option_names()
            True
        """
        record = self.options_type()
        if record is not None:
            return record.option_names()
        try:
            params = inspect.signature(self.resolve()).parameters.values()
        except (TypeError, ValueError):  # pragma: no cover - builtins
            return None
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return None
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return tuple(sorted(p.name for p in params if p.kind in kinds and p.name not in ("self", "model")))

    def build(self, model: Any, keywords: Mapping[str, Any]) -> Any:
        """The engine for ``model``: the option record built (and validated) once from ``keywords``, then the
        factory called with it; a factory without a record gets the keywords, checked against its signature.

        Raises:
            OptionError: a keyword the backend does not take (named, with the backend and what it takes), or a
                value out of range.

        Example:
            >>> from amdinfer.testing.models import tiny_cnn
            >>> get_backend("reference").build(tiny_cnn(), {"precision": "fp64"}).info.options.precision
            'fp64'
        """
        record = self.options_type()
        if record is not None:
            return self.resolve()(model, record.from_keywords(keywords, backend=self.name))
        names = self.option_names()
        unknown = [k for k in keywords if names is not None and k not in names]
        if unknown:
            raise unknown_option_error(self.name, unknown, names or ())
        return self.resolve()(model, **keywords)

    def run_diagnose(self) -> Diagnosis:
        """The backend's diagnosis; a hook that raises is reported, never propagated.

        Example:
            >>> get_backend("reference").run_diagnose().state
            'ready'
        """
        try:
            if self.diagnose is not None:
                return _resolve(self.diagnose)()
            why = _resolve(self.probe)() if self.probe is not None else None
        except Exception as exc:  # a plugin's bug must not take doctor down
            return Diagnosis(f"diagnose failed: {type(exc).__name__}: {exc}")
        return Diagnosis("ready" if why is None else why)


_REGISTRY: dict[str, BackendEntry] = {}
_PLUGINS: dict[str, str] = {}  # entry point -> error while loading it
_plugins_loaded = False


def register_backend(
    name: str,
    factory: Factory,
    *,
    auto_priority: int | None = None,
    description: str = "",
    probe: Factory | None = None,
    diagnose: Factory | None = None,
    conformance: tuple[ConformanceKind, ...] = (),
    more_conformance: Factory | None = None,
    fusion: FusionDefaults | None = None,
) -> BackendEntry:
    """Register an engine factory under ``name``.

    Args:
        name: the name users pass as ``backend=``.
        factory: an :class:`~amdinfer.Engine` subclass, any callable returning an engine, or a
            ``"module:attr"`` string imported on first use.
        auto_priority: where the backend stands in ``backend="auto"`` (lower is tried first).
        description: one line shown by ``amdinfer doctor``.
        probe, diagnose, conformance, more_conformance, fusion: the hooks of :class:`BackendEntry`.

    Returns:
        The new entry.

    Raises:
        OptionError: ``name`` is already registered.

    Example:
        >>> register_backend("ort", "amdinfer.engines.ort:OrtEngine")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: backend 'ort' is already registered (amdinfer.engines.ort...:OrtEngine)
    """
    if name in _REGISTRY:
        prev = _REGISTRY[name].factory
        shown = prev if isinstance(prev, str) else f"{prev.__module__}:{prev.__qualname__}"
        raise OptionError(f"backend {name!r} is already registered ({shown})")
    entry = BackendEntry(
        name, factory, auto_priority, description, probe, diagnose, tuple(conformance), more_conformance, fusion
    )
    _REGISTRY[name] = entry
    return entry


def _load_plugins() -> None:
    """Register the backends of installed packages (entry-point group ``amdinfer.backends``), once.

    Each entry point names a :class:`BackendEntry` or a callable returning one. A plugin that fails to
    load is logged and listed by :func:`plugin_errors` (and ``amdinfer doctor``); it never breaks amdinfer.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            entry = obj if isinstance(obj, BackendEntry) else obj()
            if not isinstance(entry, BackendEntry):
                raise TypeError(f"got {type(entry).__name__}, expected an amdinfer BackendEntry")
            if entry.name in _REGISTRY:
                raise OptionError(f"backend {entry.name!r} is already registered")
            _REGISTRY[entry.name] = entry
        except Exception as exc:
            _PLUGINS[f"{ep.name} = {ep.value}"] = f"{type(exc).__name__}: {exc}"
            log.warning("amdinfer backend plugin %s = %s could not be loaded: %s", ep.name, ep.value, exc)
    _add_more_conformance()


def _add_more_conformance() -> None:
    """Each backend's machine-dependent conformance kinds (``more_conformance``), added once; a hook that fails
    is logged and listed by :func:`plugin_errors`."""
    for entry in list(_REGISTRY.values()):
        if entry.more_conformance is None:
            continue
        try:
            more = _resolve(entry.more_conformance)()
        except Exception as exc:
            _PLUGINS[f"{entry.name} more_conformance"] = f"{type(exc).__name__}: {exc}"
            log.warning("backend %s: its extra conformance kinds could not be listed: %s", entry.name, exc)
            continue
        kinds = {k.name: k for k in entry.conformance}
        for kind in more:
            kinds.setdefault(kind.name, kind)
        entry.conformance = tuple(kinds.values())


def plugin_errors() -> dict[str, str]:
    """Entry points of group ``amdinfer.backends`` that could not be loaded, and why.

    Example:
        >>> isinstance(plugin_errors(), dict)
        True
    """
    _load_plugins()
    return dict(_PLUGINS)


def backend_names() -> list[str]:
    """Registered backend names (plugins included).

    Example:
        >>> sorted(backend_names())[:2]
        ['migraphx', 'ort']
    """
    _load_plugins()
    return list(_REGISTRY)


def backend_entries() -> list[BackendEntry]:
    """Every registered backend, plugins included, in registration order.

    Example:
        >>> [e.name for e in backend_entries()][:3]
        ['migraphx', 'ort', 'reference']
    """
    _load_plugins()
    return list(_REGISTRY.values())


def get_backend(name: str) -> BackendEntry:
    """Look up a backend.

    Raises:
        OptionError: unknown name; the message lists the registered ones.

    Example:
        >>> get_backend("ort").name
        'ort'
    """
    _load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise OptionError(f"backend: got {name!r}, expected one of {sorted(_REGISTRY)} or an Engine instance") from None


def auto_order() -> list[BackendEntry]:
    """Backends tried by ``backend="auto"``, best first.

    Example:
        >>> [e.name for e in auto_order()][:2]
        ['migraphx', 'ort']
    """
    _load_plugins()
    ranked = [e for e in _REGISTRY.values() if e.auto_priority is not None]
    return sorted(ranked, key=lambda e: e.auto_priority if e.auto_priority is not None else 0)


_EXCLUDES = "amdinfer.testing._node_excludes"
register_backend(
    "migraphx",
    "amdinfer.engines.migraphx:MigraphxEngine",
    auto_priority=10,
    description="AMD MIGraphX through its own Python module (parse -> compile -> run)",
    probe="amdinfer.engines.migraphx:probe",
    fusion=FusionDefaults(
        nms="host",
        reason="MIGraphX: it pads the outputs of NonMaxSuppression and NonZero to a static size with zero rows (seen "
        "on MIGraphX 2.16's ref target), so in-graph NMS returns padding as detections",
    ),
    conformance=(
        ConformanceKind("migraphx-ref", {"backend": "migraphx", "target": "ref"}),
        ConformanceKind("migraphx-gpu", {"backend": "migraphx", "target": "gpu"}),
    ),
)
register_backend(
    "ort",
    "amdinfer.engines.ort:OrtEngine",
    auto_priority=20,
    description="ONNX Runtime: MIGraphX EP -> ROCm EP -> CUDA EP -> CPU",
    diagnose="amdinfer.engines.ort._diagnose:diagnose",
    more_conformance="amdinfer.engines.ort._plugins:plugin_kinds",
    conformance=(
        ConformanceKind(
            "ort-cpu",
            {"backend": "ort", "providers": ["CPUExecutionProvider"], "threads": 1},
            excludes=f"{_EXCLUDES}:ORT_CPU",
            node_tests=True,
        ),
        ConformanceKind("ort-migraphx", {"backend": "ort", "providers": ["MIGraphXExecutionProvider"]}),
        ConformanceKind("ort-rocm", {"backend": "ort", "providers": ["ROCMExecutionProvider"]}),
        # TF32 off: the CUDA EP's default TF32 matmuls are ~1e-3 relative, beyond the fp32 elementwise check.
        ConformanceKind("ort-cuda", {"backend": "ort", "providers": ["CUDAExecutionProvider"], "tf32": False}),
        ConformanceKind(
            "ort-cuda-fp16",
            {"backend": "ort", "providers": ["CUDAExecutionProvider"], "precision": "fp16"},
            precision="fp16",
        ),
    ),
)
register_backend(
    "reference",
    "amdinfer.engines.reference:ReferenceEngine",
    description="NumPy reference on onnx.reference with fast kernels (the oracle)",
    fusion=FusionDefaults(nms="per-class", reason="the NumPy kernels run any NMS form; per-class is the plainest"),
    conformance=(
        ConformanceKind("reference", {"backend": "reference"}, excludes=f"{_EXCLUDES}:REFERENCE", node_tests=True),
        ConformanceKind("reference-fp64", {"backend": "reference", "precision": "fp64"}, precision="fp64"),
    ),
)
