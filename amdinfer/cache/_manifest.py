"""An entry's manifest: its format, how it is read and checked, and how files in an entry are trusted.

A manifest records the key, the parts it was made of, the artefact's name, size and SHA-256. Every field's
type is checked on read; the artefact must be a regular file only this user (or root) could have written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._support._files import file_kind, read_regular
from ..errors import CacheError

FORMAT = 1
MANIFEST = "manifest.json"
KEY_RE = re.compile(r"^[0-9a-f]{32}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
# What amdinfer writes inside an entry folder: the manifest, content-named artefacts, temporary files.
ENTRY_FILE_RE = re.compile(r"^(manifest\.json|[0-9a-f]{16}(\.[A-Za-z0-9]{1,16})?|\.tmp-.+)$")
MAX_MANIFEST_BYTES = 1 << 20


def jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):  # numpy arrays / dtypes
        return value.tolist()
    return str(value)


def canonical(parts: Mapping[str, Any]) -> str:
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), default=jsonable)


def normalize(parts: Mapping[str, Any]) -> Any:
    """The parts as they read back from JSON (tuples become lists), for comparisons."""
    return json.loads(canonical(parts))


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        if hasattr(hashlib, "file_digest"):
            return hashlib.file_digest(f, "sha256").hexdigest()
        h = hashlib.sha256()  # pragma: no cover - Python 3.10
        for block in iter(lambda: f.read(1 << 20), b""):  # pragma: no cover
            h.update(block)
        return h.hexdigest()  # pragma: no cover


def untrusted_file(st: os.stat_result, what: str) -> str | None:
    """Why a cache file must not be trusted, or ``None``: regular files (no symlinks) that only this user
    (or root) could have written."""
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else file_kind(st.st_mode)
        return f"{what} is {kind}, expected a regular file"
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is not None and st.st_uid not in (uid, 0):
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {uid}); another user could have written it"
    if st.st_mode & stat.S_IWOTH:
        return f"{what} is writable by every user (mode {stat.S_IMODE(st.st_mode):o}); anyone could have written it"
    return None


def is_own_entry(folder: Path) -> bool:
    """Whether ``folder`` (named like a key) holds only what amdinfer writes into an entry."""
    try:
        names = [p for p in folder.iterdir()]
    except OSError:
        return False
    if not names:
        return False
    for p in names:
        if not ENTRY_FILE_RE.match(p.name) or p.is_symlink() or not p.is_file():
            return False
    return any(p.name == MANIFEST for p in names) or all(p.name.startswith(".tmp-") for p in names)


def read_manifest(manifest_path: Path, key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, problem); (None, None) when there is no entry. Every field's type is checked."""
    try:
        st = manifest_path.lstat()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"manifest unreadable ({exc.strerror})"
    problem = untrusted_file(st, "manifest")
    if problem is not None:
        return None, problem
    try:
        raw = read_regular(manifest_path, "manifest", error=CacheError, max_bytes=MAX_MANIFEST_BYTES)
    except CacheError as exc:
        return None, str(exc)
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None, "manifest is not valid JSON (truncated or garbage)"
    if not isinstance(manifest, dict):
        return None, f"manifest holds a {type(manifest).__name__}, expected an object"
    problem = _manifest_problem(manifest, key)
    return (None, problem) if problem is not None else (manifest, None)


def _manifest_problem(manifest: dict[str, Any], key: str) -> str | None:
    """Why a parsed manifest is unusable (a missing field, a field of the wrong type), or ``None``."""
    missing = [k for k in ("format", "key", "artefact", "size", "sha256", "parts") if k not in manifest]
    if missing:
        return f"manifest lacks {missing}"
    if manifest["format"] != FORMAT or isinstance(manifest["format"], bool):
        return f"manifest format {manifest['format']!r}, expected {FORMAT}"
    if manifest["key"] != key:
        return f"manifest is for key {manifest['key']!r}, not {key!r}"
    name = manifest["artefact"]
    if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
        return f"manifest names artefact {name!r}, expected a plain file name"
    sha = manifest["sha256"]
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        return f"manifest sha256 is {sha!r}, expected 64 lowercase hex digits"
    if not name.startswith(sha[:16]) or not ENTRY_FILE_RE.match(name) or name == MANIFEST:
        return f"manifest names artefact {name!r}, expected the content-derived name {sha[:16]}<suffix>"
    size = manifest["size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"manifest size is {size!r}, expected an int >= 0"
    if not isinstance(manifest["parts"], dict):
        return f"manifest parts is a {type(manifest['parts']).__name__}, expected an object"
    created = manifest.get("created", 0.0)
    if not isinstance(created, (int, float)) or isinstance(created, bool) or created != created:
        return f"manifest created is {created!r}, expected a UNIX time (number)"
    if not isinstance(manifest.get("meta", {}), dict):
        return f"manifest meta is a {type(manifest['meta']).__name__}, expected an object"
    return None


def artefact_problem(artefact: Path, manifest: Mapping[str, Any]) -> str | None:
    """Why the artefact a sound manifest names cannot be used (missing, untrusted, truncated, corrupt), or ``None``."""
    try:
        st = artefact.lstat()
    except FileNotFoundError:
        return f"artefact {artefact.name} is missing"
    except OSError as exc:
        return f"artefact {artefact.name} cannot be read ({exc.strerror})"
    bad = untrusted_file(st, f"artefact {artefact.name}")
    if bad is not None:
        return bad
    size = st.st_size
    if size != manifest["size"]:
        return f"artefact {artefact.name} has {size} bytes, the manifest says {manifest['size']} (truncated?)"
    try:
        digest = sha256_file(artefact)
    except OSError as exc:
        return f"artefact {artefact.name} cannot be read ({exc.strerror})"
    if digest != manifest["sha256"]:
        return (
            f"artefact {artefact.name} has SHA-256 {digest[:12]}…, "
            f"the manifest says {manifest['sha256'][:12]}… (corrupt)"
        )
    return None


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to a temporary file next to ``path`` and move it into place."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True, default=jsonable)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
