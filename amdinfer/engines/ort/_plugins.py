"""ONNX Runtime plugin execution providers: found, registered once per process, placed in sessions.

From onnxruntime 1.23 on, execution providers also ship as plugin libraries loaded through the EP ABI
(``onnxruntime.register_execution_provider_library``); the ROCm EP left ONNX Runtime's own builds after 1.22
and AMD's EPs are announced as ``onnxruntime-ep-migraphx``, ``onnxruntime-ep-rocm``, ``onnxruntime-ep-amdgpu``.
The packaging convention this module relies on (``onnxruntime-ep-openvino`` follows it):

* a distribution named ``onnxruntime-ep-<name>`` whose top-level module has ``get_library_path()`` (the
  plugin library) and ``get_ep_names()`` (or ``get_ep_name()``);
* or a library path given explicitly: ``OrtEngine(ep_library=...)`` or ``$AMDINFER_EP_LIBRARIES``
  (``os.pathsep``-separated).

Each library is registered once per process (thread-safe; a second call is a no-op). Which EP names and
devices it really brings is read back from ``onnxruntime.get_ep_devices()``. A package that cannot be
imported, a library that does not load, and a placeholder release (version ``0.0.0``, no library) are
kept as :class:`EpPlugin` records with their state and error, listed by ``amdinfer doctor``, logged, and
raised with the cause when the EP is asked for: never skipped silently. ``$AMDINFER_EP_PLUGINS`` (comma
separated distribution names, or ``none``) limits which installed packages are registered.

Sessions get a plugin EP through ``SessionOptions.add_provider_for_devices`` (a plugin EP name in
``providers=`` is ignored by ONNX Runtime, which then runs on the CPU EP with a warning).

Example:
    >>> import onnxruntime as ort
    >>> plugins = register_plugins(ort)
    >>> all(p.state in STATES for p in plugins)
    True
    >>> auto_provider_order(["CPUExecutionProvider"])[-1]
    'CPUExecutionProvider'
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..._support._hardware import cpu_description
from ...errors import BackendUnavailableError, OptionError
from ..registry import ConformanceKind
from ._plugin_find import (
    AMD_MARKERS,
    LIBRARIES_ENV,
    PLUGIN_PREFIX,
    SELECT_ENV,
    STATES,
    EpPlugin,
    _short,
    find_plugins,
    plugin_short_names,
)
from ._providers import (
    _DERIVED,
    AMD_ORDER,
    CPU_EP,
    CUDA_EP,
    PLUGIN_DISTRIBUTIONS,
    PLUGIN_PROVIDERS,
    PROVIDER_ORDER,
    PROVIDERS,
    ExecutionProvider,
    provider_record,
)

__all__ = [
    "AMD_MARKERS",
    "LIBRARIES_ENV",
    "PLUGIN_PREFIX",
    "SELECT_ENV",
    "STATES",
    "EpPlugin",
    "add_plugin_providers",
    "auto_provider_order",
    "check_took_nodes",
    "describe_device",
    "ep_devices",
    "find_plugins",
    "is_plugin_ep",
    "node_counts",
    "plugin_failure",
    "plugin_kind",
    "plugin_missing",
    "unusable_plugins",
    "plugin_kinds",
    "plugin_of",
    "plugin_version",
    "plugin_settings",
    "plugin_short_names",
    "precision_note",
    "register_plugins",
    "registered_plugins",
]

log = logging.getLogger("amdinfer.ort")

_LOCK = threading.Lock()
_PLUGINS: dict[str, EpPlugin] = {}  # library path (resolved) or source -> its record
_BY_EP: dict[str, EpPlugin] = {}  # EP name -> the plugin that brought it


def register_plugins(ort: Any, libraries: Iterable[str | os.PathLike] = ()) -> tuple[EpPlugin, ...]:
    """Register every plugin found (and ``libraries``) with ONNX Runtime, once per process; return them all.

    Thread-safe and idempotent: a library registered before (by amdinfer, or by the caller under the same
    name) is not registered again. Failures are recorded, logged and returned, never raised.

    Example:
        >>> import onnxruntime as ort
        >>> register_plugins(ort) == register_plugins(ort)
        True
    """
    extra = [EpPlugin("ep_library=", None, str(p), (), "found") for p in libraries]
    with _LOCK:
        for plugin in (*find_plugins(), *extra):
            key = str(Path(plugin.library).resolve()) if plugin.library else plugin.source
            if key in _PLUGINS:
                continue
            if plugin.state == "found":
                plugin = _register(ort, plugin)
            elif plugin.state == "failed":
                log.warning("plugin EP %s cannot be used: %s", plugin.source, plugin.error)
            _PLUGINS[key] = plugin
        return tuple(_PLUGINS.values())


def _register(ort: Any, plugin: EpPlugin) -> EpPlugin:
    assert plugin.library is not None
    before = {d.ep_name for d in ort.get_ep_devices()}
    # The registration name: the EP's own when the package declares one EP (ONNX Runtime's example EPs, and some
    # others, name their EP after it), else one naming amdinfer and the library.
    registration = plugin.ep_names[0] if len(plugin.ep_names) == 1 else f"amdinfer:{Path(plugin.library).name}"
    try:
        ort.register_execution_provider_library(registration, plugin.library)
    except Exception as exc:  # ONNX Runtime's pybind error types
        if "already registered" not in str(exc):
            log.warning("plugin EP library %s (%s) failed to load: %s", plugin.library, plugin.source, exc)
            return replace(plugin, state="failed", error=f"{plugin.library}: {exc}")
    listed = ort.get_ep_devices()
    devices = [d for d in listed if d.ep_name not in before or d.ep_name in plugin.ep_names]
    names = tuple(dict.fromkeys([*(d.ep_name for d in devices), *plugin.ep_names]))
    if not devices:
        # The library loaded and its factories registered, but none of them took a device of this machine
        # (OpenVINO's CPU device on a non-Intel CPU, a GPU EP without its GPU): say so, never "not in this build".
        plugin = replace(
            plugin,
            state="no device",
            ep_names=names,
            listed=tuple(f"{d.ep_name} on {describe_device(d)}" for d in listed),
        )
        log.info("plugin EP %s registered but offers no device here", plugin.source)
        return plugin
    plugin = replace(
        plugin,
        state="registered",
        ep_names=names,
        devices=tuple(f"{d.ep_name} on {describe_device(d)}" for d in devices),
    )
    for name in names:
        _BY_EP.setdefault(name, plugin)
        known = PLUGIN_PROVIDERS.get(name)
        if known is not None:
            _DERIVED[name] = known  # amdinfer's record of the plugin wins over a built-in EP of the same name
        elif name not in PROVIDERS and name not in _DERIVED:
            _DERIVED[name] = ExecutionProvider(
                name=name,
                short=_short(name),
                label=_short(name),
                library=None,
                distribution=plugin.source,
                fix=f"check the plugin package {plugin.source} (`amdinfer doctor` lists it)",
                plugin=True,
            )
    return plugin


def describe_device(device: Any) -> str:
    """One line for an ``OrtEpDevice``: hardware type, vendor, the EP's own device name if it gives one."""
    hw = device.device
    kind = str(hw.type).rpartition(".")[2]
    own = dict(device.ep_metadata).get("ov_device")
    return f"{kind} ({hw.vendor}" + (f", {own}" if own else "") + ")"


def is_plugin_ep(name: str) -> bool:
    """Whether ``name`` is an EP that a plugin registered in this process brings."""
    return name in _BY_EP


def plugin_of(name: str) -> EpPlugin | None:
    """The registered plugin that brings EP ``name``."""
    return _BY_EP.get(name)


def plugin_version(name: str) -> str | None:
    """The version of the registered plugin package that brings EP ``name`` (``None``: a bare library, or none)."""
    plugin = _BY_EP.get(name)
    return plugin.version if plugin is not None else None


def plugin_failure(name: str) -> str | None:
    """Why EP ``name`` (full or short name) cannot be used as a plugin here, with the fix; ``None`` when no plugin
    package or library that would bring it is in a failed state (it runs, or amdinfer knows no plugin of it).

    One message per state of the plugin: installed but it failed to load, registered but no device on this machine
    (naming the devices ONNX Runtime does list), a placeholder release, left out by ``$AMDINFER_EP_PLUGINS``.
    The "not installed" state is :func:`plugin_missing`.

    Example:
        >>> plugin_failure("NoSuchExecutionProvider") is None
        True
    """
    record = provider_record(name)
    for p in _PLUGINS.values():
        by_package = PLUGIN_DISTRIBUTIONS.get(p.source)
        declared = name in p.ep_names or (by_package is not None and by_package.name == name)
        declared = declared or (record is not None and record.distribution == p.source)
        if declared and p.state != "registered":
            return _problem(name, p, by_package or record)
    return None


def _problem(name: str, p: EpPlugin, record: ExecutionProvider | None) -> str:
    what = f"{p.source} {p.version}" if p.version else p.source
    fix = record.fix if record is not None and record.plugin else f"check the plugin package {p.source}"
    if p.state == "no device":
        serves = f" It serves {record.serves}." if record is not None and record.serves else ""
        return (
            f"provider {name!r}: its plugin {what} is installed and registered, but offers no device on this machine "
            f"({cpu_description()}); ONNX Runtime lists only {list(p.listed)}.{serves} Fix: run it on hardware the "
            "plugin supports, or choose a provider that runs here (`amdinfer doctor` lists them)"
        )
    if p.state == "placeholder":
        return (
            f"provider {name!r}: {what} is a placeholder release without a plugin library (the EP has not been "
            f"published on the package index yet). Fix: {fix}"
        )
    if p.state == "not selected":
        return (
            f"provider {name!r}: {what} is installed but ${SELECT_ENV} leaves it out. Fix: add {p.source} to "
            f"${SELECT_ENV}, or unset it"
        )
    if p.state == "failed":
        needs = f"; it needs onnxruntime >= {record.ort_min}" if record is not None and record.ort_min else ""
        return (
            f"provider {name!r}: its plugin {what} is installed but cannot be loaded: {p.error}{needs}. "
            f"Fix: reinstall {p.source} in a version built for the installed onnxruntime; {fix}"
        )
    return f"provider {name!r}: its plugin {what} is {p.state}. Fix: {fix}"


def registered_plugins() -> tuple[EpPlugin, ...]:
    """Every plugin this process has tried to register (any state), without registering anything.

    Example:
        >>> all(p.state in STATES for p in registered_plugins())
        True
    """
    with _LOCK:
        return tuple(_PLUGINS.values())


def unusable_plugins() -> list[tuple[str, str]]:
    """``(EP name, why)`` for each EP of a plugin found in this process that cannot be used here (for
    ``backend="auto"``'s ``info.skipped``).

    Example:
        >>> all(isinstance(name, str) and why.startswith("provider ") for name, why in unusable_plugins())
        True
    """
    out = []
    for p in _PLUGINS.values():
        if p.state in ("registered", "found"):
            continue
        record = PLUGIN_DISTRIBUTIONS.get(p.source)
        for name in p.ep_names or ((record.name,) if record is not None else ()):
            out.append((name, _problem(name, p, record)))
    return out


def plugin_missing(name: str) -> str | None:
    """The message for a plugin EP amdinfer knows (``providers=["openvino"]``) whose package is not installed.

    Example:
        >>> "onnxruntime-ep-amdgpu is not installed" in plugin_missing("AMDGPUExecutionProvider")
        True
        >>> plugin_missing("CUDAExecutionProvider") is None
        True
    """
    record = PLUGIN_PROVIDERS.get(name) if name not in PROVIDERS else None
    if record is None or any(p.source == record.distribution for p in _PLUGINS.values()):
        return None
    return (
        f"provider {name!r} is a plugin EP and its package {record.distribution} is not installed (nor named by "
        f"${LIBRARIES_ENV} or ep_library=). Fix: {record.fix}"
    )


def ep_devices(ort: Any, name: str) -> list[Any]:
    """ONNX Runtime's devices for EP ``name``, in its order (``device=`` indexes this list)."""
    return [d for d in ort.get_ep_devices() if d.ep_name == name]


def auto_provider_order(available: Sequence[str]) -> list[str]:
    """``backend="auto"``'s provider order with the registered plugin EPs placed in it.

    AMD's EPs first in :data:`AMD_ORDER` (MIGraphX, built-in or plugin; AMD's umbrella plugin; ROCm), then other
    AMD plugin EPs, the CUDA EP, the other plugin EPs, the CPU EP last; only EPs in ``available`` (and built-in
    EPs missing there, which the engine reports as skipped).

    Example:
        >>> auto_provider_order(["CUDAExecutionProvider", "CPUExecutionProvider"])[-2:]
        ['CUDAExecutionProvider', 'CPUExecutionProvider']
    """
    plugins = [n for n in available if n in _BY_EP and n not in PROVIDER_ORDER]
    amd_named = [n for n in AMD_ORDER if n in PROVIDER_ORDER or n in plugins]
    amd = [n for n in plugins if n not in amd_named and (_BY_EP[n].amd or any(m in n.lower() for m in AMD_MARKERS))]
    rest = [n for n in plugins if n not in amd_named and n not in amd]
    return [*amd_named, *amd, CUDA_EP, *rest, CPU_EP]


def add_plugin_providers(ort: Any, so: Any, names: list[str], opts: list[dict[str, str]], device: int) -> bool:
    """Put ``names``' plugin EPs into ``so`` (``add_provider_for_devices``); False when there are none.

    Raises:
        OptionError: plugin EPs mixed with built-in EPs other than CPU, or ``device`` out of range.
    """
    if not any(is_plugin_ep(n) for n in names):
        return False
    builtin = [n for n in names if not is_plugin_ep(n) and n != CPU_EP]
    if builtin:
        raise OptionError(
            f"providers: got plugin EPs {[n for n in names if is_plugin_ep(n)]} together with built-in {builtin}; "
            "ONNX Runtime takes plugin EPs through SessionOptions.add_provider_for_devices, which cannot be "
            "combined with a providers= list: pass the plugin EPs alone (the CPU EP takes what they leave)"
        )
    for name, options in zip(names, opts):
        if not is_plugin_ep(name):
            continue
        devices = ep_devices(ort, name)
        if not 0 <= device < len(devices):
            listed = [describe_device(d) for d in devices]
            raise OptionError(f"device: got {device}, expected an index into {name}'s devices {listed}")
        so.add_provider_for_devices([devices[device]], dict(options))
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return True


def node_counts(session: Any) -> dict[str, int]:
    """EP name -> number of nodes it took (for sessions built with plugin EPs; empty when not recorded)."""
    counts: dict[str, int] = {}
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception:  # not recorded for this session
        return counts
    for sub in subgraphs:
        counts[sub.ep_name] = counts.get(sub.ep_name, 0) + len(sub.get_nodes())
    return counts


def plugin_settings(session: Any, device: int) -> dict[str, Any]:
    """``{"plugin_ep": {...}}`` for ``engine.info.settings`` when the session's first EP is a plugin EP, else ``{}``."""
    used = session.get_providers()
    plugin = plugin_of(used[0]) if used else None
    if plugin is None:
        return {}
    return {
        "plugin_ep": {
            "ep": used[0],
            "package": plugin.source,
            "version": plugin.version,
            "library": plugin.library,
            "device": device,
            "nodes": node_counts(session),
        }
    }


def check_took_nodes(session: Any, names: Sequence[str]) -> None:
    """Raise when a requested plugin EP took no node of the model (ONNX Runtime would run it all on CPU).

    Raises:
        BackendUnavailableError: naming the EP and where the nodes went.
    """
    counts = node_counts(session)
    for name in names:
        if is_plugin_ep(name) and not counts.get(name):
            raise BackendUnavailableError(
                f"provider {name!r} was requested but took no node of the model (nodes per provider: {counts}); "
                "amdinfer does not fall back silently. `amdinfer profile` shows where each node runs",
                backend=name,
                cause="no node assigned",
            )


def precision_note(name: str, raw: dict[str, str], notes: list[str]) -> None:
    """Say in ``notes`` when a plugin EP may compute below float32: its record says it lowers precision and the
    caller's raw options replace amdinfer's setting, or amdinfer has no record of the EP's defaults.

    Example:
        >>> notes: list[str] = []
        >>> precision_note("OpenVINOExecutionProvider", {"load_config": "{}"}, notes)
        >>> "load_config" in notes[0]
        True
    """
    record = provider_record(name)
    if record is None or not record.plugin:
        return
    keep = record.precision.get("fp32", {})
    replaced = sorted(k for k in keep if k in raw and raw[k] != keep[k])
    if record.lowers and replaced:
        notes.append(
            f"{name}: your provider option(s) {replaced} replace amdinfer's float32 setting ({record.lowers}); "
            "results may be below float32 precision: `amdinfer verify` against the reference tells"
        )
    elif record.lowers is None and name not in PLUGIN_PROVIDERS:
        notes.append(
            f"{name}: plugin EP from {record.distribution}; amdinfer has no record of its precision defaults "
            "(it may compute float32 models in a lower precision): `amdinfer verify` against the reference tells"
        )


def plugin_kinds() -> tuple[ConformanceKind, ...]:
    """The conformance kinds of the EPs that installed plugin packages declare (nothing is loaded); the ``ort``
    backend's ``more_conformance`` hook.

    Example:
        >>> all(k.name.startswith("ort-") for k in plugin_kinds())
        True
    """
    kinds = []
    for plugin in find_plugins():
        for ep_name in plugin.ep_names if plugin.state == "found" else ():
            kind = plugin_kind(ep_name)
            if kind is not None:
                kinds.append(kind)
    return tuple(kinds)


def plugin_kind(ep_name: str) -> ConformanceKind | None:
    """The conformance kind of a plugin EP: ``ort-<short name>``, one thread, float32, the engine contract suite
    (``None`` for ONNX Runtime's meta EPs such as ``OpenVINOExecutionProvider.AUTO``). The ONNX node tests run
    on a plugin kind that has an exclude list, ``tests/engines/_node_excludes_<kind>.py`` (made by
    ``tests/engines/make_plugin_excludes.py``; docs/engines.md has the OpenVINO tally).

    Example:
        >>> plugin_kind("OpenVINOExecutionProvider").name, plugin_kind("OpenVINOExecutionProvider.AUTO")
        ('ort-openvino', None)
    """
    if "." in ep_name:
        return None
    record = provider_record(ep_name)
    short = record.short if record is not None else _short(ep_name)
    return ConformanceKind(f"ort-{short}", {"backend": "ort", "providers": [ep_name], "threads": 1})
