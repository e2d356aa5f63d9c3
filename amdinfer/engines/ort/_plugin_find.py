"""ONNX Runtime plugin EP packages found on this machine: package metadata and paths only, nothing loaded.

The discovery half of :mod:`amdinfer.engines.ort._plugins` (which registers what is found with ONNX Runtime),
kept apart so the provider records (``_providers``) can map plugin short names without importing the
registering half.

Example:
    >>> EpPlugin("onnxruntime-ep-migraphx", "0.0.0", None, (), "placeholder").amd
    True
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ..._support._hardware import cpu_description

__all__ = [
    "AMD_MARKERS",
    "LIBRARIES_ENV",
    "PLUGIN_PREFIX",
    "SELECT_ENV",
    "STATES",
    "EpPlugin",
    "find_plugins",
    "plugin_short_names",
]

#: Distributions with this prefix are plugin EP packages.
PLUGIN_PREFIX = "onnxruntime-ep-"
#: Extra plugin libraries (``os.pathsep``-separated paths), registered like installed packages.
LIBRARIES_ENV = "AMDINFER_EP_LIBRARIES"
#: Which installed plugin packages to register: comma-separated distribution names, or ``none``.
SELECT_ENV = "AMDINFER_EP_PLUGINS"
#: An EP or package whose name holds one of these (case-insensitive) is AMD's: ``backend="auto"`` tries it first.
AMD_MARKERS = ("migraphx", "rocm", "amd")
#: The states an :class:`EpPlugin` can be in.
STATES = ("found", "registered", "no device", "placeholder", "failed", "not selected")


@dataclass(frozen=True)
class EpPlugin:
    """One plugin EP library and what became of it.

    Attributes:
        source: the distribution (``"onnxruntime-ep-openvino"``), ``"ep_library="`` or ``$AMDINFER_EP_LIBRARIES``.
        version: the distribution's version (``None`` for a bare library path).
        library: the plugin library's path (``None`` when the package gives none).
        ep_names: the EPs it brings: as the package declares them, then as ONNX Runtime lists them.
        state: ``"found"`` (not registered yet), ``"registered"`` (it offers at least one device),
            ``"no device"`` (registered, but it offers no device on this machine), ``"placeholder"`` (a release
            without a library), ``"failed"`` or ``"not selected"`` (left out by ``$AMDINFER_EP_PLUGINS``).
        error: why it is not registered, in full.
        devices: one line per EP device ONNX Runtime offers for it.
        listed: for ``"no device"``: every EP device ONNX Runtime lists on this machine (what it does offer).

    Example:
        >>> EpPlugin("onnxruntime-ep-rocm", "0.0.0", None, (), "placeholder").amd
        True
        >>> p = EpPlugin("onnxruntime-ep-x", "1.0", "/x.so", ("XExecutionProvider",), "no device",
        ...              listed=("CPUExecutionProvider on CPU (AMD)",))
        >>> "XExecutionProvider offers no device on this machine" in p.line()
        True
    """

    source: str
    version: str | None
    library: str | None
    ep_names: tuple[str, ...]
    state: str
    error: str | None = None
    devices: tuple[str, ...] = field(default_factory=tuple)
    listed: tuple[str, ...] = field(default_factory=tuple)

    @property
    def amd(self) -> bool:
        """Whether this is one of AMD's plugins (by package or EP name, see :data:`AMD_MARKERS`)."""
        text = " ".join((self.source, *self.ep_names)).lower()
        return any(m in text for m in AMD_MARKERS)

    def line(self) -> str:
        """One line for ``amdinfer doctor``."""
        what = f"{self.source} {self.version}" if self.version else self.source
        if self.version is None and self.library:
            what = f"{self.source} {self.library}"  # a bare library (ep_library=, $AMDINFER_EP_LIBRARIES): its path
        if self.state == "registered":
            return f"{what}: registered; " + "; ".join(self.devices)
        if self.state == "no device":
            eps = ", ".join(self.ep_names) or "its EP"
            return (
                f"{what}: registered, but {eps} offers no device on this machine ({cpu_description()}); "
                f"ONNX Runtime lists only: {'; '.join(self.listed) or 'no device'}"
            )
        if self.state == "placeholder":
            return f"{what}: placeholder package without a plugin library (the EP has not been released yet)"
        if self.state == "not selected":
            return f"{what}: installed, not registered (${SELECT_ENV} leaves it out)"
        return f"{what}: {self.state}" + (f": {self.error}" if self.error else "")


def _short(ep_name: str) -> str:
    return ep_name.replace("ExecutionProvider", "").lower() or ep_name.lower()


def _selected() -> set[str] | None:
    wanted = os.environ.get(SELECT_ENV)
    if wanted is None:
        return None
    return {w.strip().lower() for w in wanted.split(",") if w.strip() and w.strip().lower() != "none"}


def _from_distribution(dist: importlib.metadata.Distribution, name: str) -> EpPlugin:
    version = dist.version
    top = (dist.read_text("top_level.txt") or "").split()
    module_name = top[0] if top else name.replace("-", "_")
    placeholder = version == "0.0.0"
    try:
        module = importlib.import_module(module_name)
        get_path = getattr(module, "get_library_path", None)
        if get_path is None:
            if placeholder:
                return EpPlugin(name, version, None, (), "placeholder")
            raise AttributeError(f"module {module_name} has no get_library_path()")
        names = getattr(module, "get_ep_names", None)
        single = getattr(module, "get_ep_name", None)
        ep_names = tuple(names() if names else [single()] if single else [])
        library = str(get_path())
    except ImportError as exc:
        if placeholder:
            return EpPlugin(name, version, None, (), "placeholder")
        return EpPlugin(name, version, None, (), "failed", f"cannot import {module_name}: {exc}")
    except Exception as exc:  # the package's own code: any error is its diagnosis
        return EpPlugin(name, version, None, (), "failed", f"{module_name}: {type(exc).__name__}: {exc}")
    if not Path(library).is_file():
        return EpPlugin(name, version, library, ep_names, "failed", f"plugin library {library} does not exist")
    return EpPlugin(name, version, library, ep_names, "found")


def find_plugins() -> tuple[EpPlugin, ...]:
    """Installed ``onnxruntime-ep-*`` packages and ``$AMDINFER_EP_LIBRARIES`` entries (nothing is loaded).

    Reading every installed package's metadata takes a quarter of a second, so the answer is kept per process for
    the same ``$AMDINFER_EP_PLUGINS``, ``$AMDINFER_EP_LIBRARIES`` and ``sys.path`` (a change of any looks again).

    Example:
        >>> all(p.source.startswith(PLUGIN_PREFIX) or p.source == "$" + LIBRARIES_ENV for p in find_plugins())
        True
    """
    return _find_plugins(os.environ.get(SELECT_ENV), os.environ.get(LIBRARIES_ENV), tuple(sys.path))


@cache
def _find_plugins(*cache_key: Any) -> tuple[EpPlugin, ...]:
    """:func:`find_plugins` for one ``cache_key``: what the search reads (the two variables and ``sys.path``)."""
    selected = _selected()
    out: list[EpPlugin] = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
        if not name.startswith(PLUGIN_PREFIX) or name in seen:
            continue
        seen.add(name)
        if selected is not None and name not in selected:
            out.append(EpPlugin(name, dist.version, None, (), "not selected"))
            continue
        out.append(_from_distribution(dist, name))
    for path in filter(None, os.environ.get(LIBRARIES_ENV, "").split(os.pathsep)):
        found = Path(path).expanduser().is_file()
        why = None if found else f"{path} does not exist (from ${LIBRARIES_ENV})"
        out.append(EpPlugin(f"${LIBRARIES_ENV}", None, path, (), "found" if found else "failed", why))
    return tuple(sorted(out, key=lambda p: (not p.amd, p.source)))


@cache
def plugin_short_names() -> dict[str, str]:
    """Short name -> EP name for the EPs that installed plugin packages declare (read once per process).

    Example:
        >>> isinstance(plugin_short_names(), dict)
        True
    """
    return {_short(n): n for p in find_plugins() for n in p.ep_names}
