"""Listing and clearing a cache folder: :class:`CacheEntry` and the scans behind ``entries()`` and ``clear()``."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._lock import holding_if_free
from ._manifest import KEY_RE, MANIFEST, is_own_entry, read_manifest, untrusted_file

__all__ = ["RUNTIME_DIRS", "CacheEntry"]

log = logging.getLogger("amdinfer.cache")

#: Folders inside the cache root that runtimes manage themselves (no manifest; cleared by ``clear``).
#: Folders inside a cache that a runtime manages itself: the MIGraphX EP's compiled programs (built into
#: ``onnxruntime-migraphx``, ``migraphx_model_cache_dir``; AMD's plugin ``onnxruntime-ep-migraphx``, ``cache_dir``).
RUNTIME_DIRS = {"ort-migraphx-ep": "ort-migraphx-ep", "ort-migraphx-plugin-ep": "ort-migraphx-plugin-ep"}

_TRASH_RE = re.compile(r"^\.trash-[0-9a-f]{32}-[0-9a-f]{8}$")
_LOCK_RE = re.compile(r"^[0-9a-f]{32}\.lock$")
_BUILDING_RE = re.compile(r"^[0-9a-f]{32}-\d+-[0-9a-f]{8}")


@dataclass(frozen=True)
class CacheEntry:
    """One cache entry as listed by :meth:`CompiledModelCache.entries`.

    Attributes:
        key: the entry's key.
        path: the artefact file (``None`` when the manifest is unreadable).
        size_bytes: bytes on disk (artefact, manifest and leftovers).
        created: UNIX time the entry was written.
        parts: what the key was made of (backend, model hash, shapes, ...).
        meta: what the writer added (compile seconds, ...).
        problem: why the entry is unusable, or ``None`` when it looks sound (size only; reads check the hash).

    Example:
        >>> CacheEntry("0" * 32, None, 0, 0.0, {}, {}, "no manifest").backend
        '?'
    """

    key: str
    path: Path | None
    size_bytes: int
    created: float
    parts: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None

    @property
    def backend(self) -> str:
        """The backend that wrote it (``parts["backend"]``), ``"?"`` only when the manifest is unreadable."""
        return _labels(self.parts)[0]

    @property
    def precision(self) -> str:
        """The precision of what is cached (``parts["precision"]``), ``"?"`` only when the manifest is unreadable.

        Example:
            >>> CacheEntry("0" * 32, None, 0, 0.0, {"backend": "ort", "precision": "fp16"}).precision
            'fp16'
        """
        return _labels(self.parts)[1]

    @property
    def kind(self) -> str:
        """What is cached: ``"migraphx program"``, ``"ort optimized model"``, ``"fp16 model"``,
        ``"int8 quantized model"`` (``parts["kind"]`` when the writer names it), ``"?"`` when unknown.

        Example:
            >>> CacheEntry("0" * 32, None, 0, 0.0, {"backend": "migraphx", "precision": "fp32"}).kind
            'migraphx program'
        """
        return _labels(self.parts)[2]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy (for ``amdinfer cache list --json``)."""
        return {
            "key": self.key,
            "path": str(self.path) if self.path else None,
            "size_bytes": self.size_bytes,
            "created": self.created,
            "backend": self.backend,
            "precision": self.precision,
            "kind": self.kind,
            "parts": self.parts,
            "meta": self.meta,
            "problem": self.problem,
        }


#: What each backend's entries hold when the writer records no ``kind`` part (entries of older versions).
_KIND_OF_BACKEND = {"migraphx": "migraphx program", "ort": "ort optimized model"}
#: The ``what`` part of Int8Quantizer entries written before entries carried backend/precision/kind.
_OLD_INT8 = "int8-quantized model"


def _labels(parts: dict[str, Any]) -> tuple[str, str, str]:
    """``(backend, precision, kind)`` of an entry from its parts; ``"?"`` for what they do not tell."""
    if parts.get("what") == _OLD_INT8:
        return "ort", "int8", "int8 quantized model"
    backend = str(parts.get("backend", "?"))
    precision = str(parts.get("precision", "?"))
    kind = parts.get("kind")
    return backend, precision, str(kind) if isinstance(kind, str) else _KIND_OF_BACKEND.get(backend, "?")


def scan_entries(root: Path) -> list[CacheEntry]:
    """Every entry folder under ``root``, oldest first (unsound ones included, with ``problem`` set)."""
    out = []
    for entry in root.iterdir():
        if entry.is_symlink() or not entry.is_dir() or not KEY_RE.match(entry.name):
            continue
        size = 0
        for p in entry.iterdir():
            with contextlib.suppress(OSError):
                st = p.lstat()
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
        manifest, problem = read_manifest(entry / MANIFEST, entry.name)
        if manifest is None:
            out.append(CacheEntry(entry.name, None, size, entry.stat().st_mtime, problem=problem or "no manifest"))
            continue
        artefact = entry / manifest["artefact"]
        try:
            st = artefact.lstat()
            problem = untrusted_file(st, "artefact")
            if problem is None and st.st_size != manifest["size"]:
                problem = "artefact size differs from the manifest (truncated?)"
        except OSError:
            problem = "artefact missing"
        out.append(
            CacheEntry(
                entry.name,
                artefact,
                size,
                float(manifest.get("created", 0.0)),
                dict(manifest["parts"]),
                dict(manifest.get("meta") or {}),
                problem,
            )
        )
    return sorted(out, key=lambda e: e.created)


def clear_folder(root: Path, remove: Callable[[str], bool]) -> int:
    """Remove what amdinfer wrote under ``root`` (entries through ``remove``); returns the entries removed."""
    n = 0
    for p in root.iterdir():
        if p.is_symlink():
            continue
        if p.is_dir() and KEY_RE.match(p.name):
            if is_own_entry(p):
                n += remove(p.name)
            else:
                log.warning("amdinfer cache %s: %s is not an entry amdinfer wrote; left alone", root, p.name)
        elif p.is_dir() and _TRASH_RE.match(p.name):
            shutil.rmtree(p, ignore_errors=True)
        elif p.is_dir() and p.name in (".locks", ".building"):
            pattern = _LOCK_RE if p.name == ".locks" else _BUILDING_RE
            with contextlib.suppress(OSError):  # another clear may remove the folder meanwhile
                for f in list(p.iterdir()):
                    if pattern.match(f.name) and not f.is_symlink() and f.is_file():
                        # A build in progress holds its key's lock: its lock and scratch files stay.
                        with holding_if_free(root / ".locks" / f"{f.name[:32]}.lock") as free:
                            if free:
                                with contextlib.suppress(OSError):
                                    f.unlink()
            with contextlib.suppress(OSError):
                p.rmdir()  # only when empty
        elif p.is_dir() and p.name in RUNTIME_DIRS.values():
            shutil.rmtree(p, ignore_errors=True)
    return n
