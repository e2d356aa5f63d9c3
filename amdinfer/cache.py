"""The compiled-model cache: MIGraphX programs (``.mxr``) and ONNX Runtime optimized models, keyed and verified.

An entry is a folder ``<root>/<key>/`` with the artefact and a small ``manifest.json`` that records the key,
the parts the key was made of (model hash, shapes, precision, options, backend and runtime version, GPU
architecture...), the artefact's size and SHA-256. Reads check all of it: a missing, truncated, corrupt or
mismatched entry is logged (logger ``amdinfer.cache``), removed and rebuilt by the caller; it is never
trusted. Writes go to a temporary file in the entry's folder and are moved into place with
:func:`os.replace`, manifest last, so a reader sees either the old entry, the new one or none. Builders of
the same key in several processes take a file lock, so one compiles and the others load its result.

The cache folder is, in order: the ``path=`` / ``cache_dir=`` you pass, ``$AMDINFER_CACHE_DIR``, the
platform's user cache dir (``platformdirs`` when installed, else ``$XDG_CACHE_HOME/amdinfer`` or
``~/.cache/amdinfer``).

Example:
    >>> import tempfile
    >>> from amdinfer.cache import CompiledModelCache
    >>> cache = CompiledModelCache(tempfile.mkdtemp())
    >>> key = cache.key(model="ab12", backend="demo", precision="fp32")
    >>> path = cache.put(key, lambda tmp: tmp.write_bytes(b"artefact"), parts={"backend": "demo"}, suffix=".bin")
    >>> cache.get(key).read_bytes()
    b'artefact'
    >>> [e.key == key for e in cache.entries()]
    [True]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

from ._files import check_path, file_kind, read_regular
from .errors import CacheError

__all__ = [
    "CACHE_ENV",
    "CacheEntry",
    "CompiledModelCache",
    "amd_gpu_archs",
    "clear",
    "cpu_signature",
    "default_cache_dir",
    "list_entries",
    "resolve_cache_dir",
]

log = logging.getLogger("amdinfer.cache")

#: Environment variable that overrides the default cache folder.
CACHE_ENV = "AMDINFER_CACHE_DIR"

_FORMAT = 1
_MANIFEST = "manifest.json"
_KEY_RE = re.compile(r"^[0-9a-f]{32}$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
# What amdinfer writes inside an entry folder: the manifest, content-named artefacts, temporary files.
_ENTRY_FILE_RE = re.compile(r"^(manifest\.json|[0-9a-f]{16}(\.[A-Za-z0-9]{1,16})?|\.tmp-.+)$")
_TRASH_RE = re.compile(r"^\.trash-[0-9a-f]{32}-[0-9a-f]{8}$")
_LOCK_RE = re.compile(r"^[0-9a-f]{32}\.lock$")
_BUILDING_RE = re.compile(r"^[0-9a-f]{32}-\d+-[0-9a-f]{8}")
_TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
_MAX_MANIFEST_BYTES = 1 << 20
#: Artefacts a newer manifest no longer names are kept this long for readers of the old manifest.
_STALE_GRACE_S = 60.0

T = TypeVar("T")
PathLike = Union[str, "os.PathLike[str]"]


def default_cache_dir() -> Path:
    """The cache folder used when none is given: ``$AMDINFER_CACHE_DIR`` or the user cache dir.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"AMDINFER_CACHE_DIR": "/tmp/amdinfer-doc-cache"}):
        ...     str(default_cache_dir())
        '/tmp/amdinfer-doc-cache'
    """
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs
    except ImportError:
        platformdirs = None  # type: ignore[assignment]
    if platformdirs is not None:
        return Path(platformdirs.user_cache_dir("amdinfer", appauthor=False))
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "amdinfer"


def resolve_cache_dir(cache_dir: PathLike | None = None) -> Path:
    """``cache_dir`` if given, else :func:`default_cache_dir`.

    Raises:
        OptionError: ``cache_dir`` is not a path (``5``, a path with a NUL byte).

    Example:
        >>> str(resolve_cache_dir("/tmp/x"))
        '/tmp/x'
    """
    if cache_dir is None:
        return default_cache_dir()
    return check_path(cache_dir, "cache_dir").expanduser()


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):  # numpy arrays / dtypes
        return value.tolist()
    return str(value)


def _canonical(parts: Mapping[str, Any]) -> str:
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), default=_jsonable)


def _normalize(parts: Mapping[str, Any]) -> Any:
    """The parts as they read back from JSON (tuples become lists), for comparisons."""
    return json.loads(_canonical(parts))


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        if hasattr(hashlib, "file_digest"):
            return hashlib.file_digest(f, "sha256").hexdigest()
        h = hashlib.sha256()  # pragma: no cover - Python 3.10
        for block in iter(lambda: f.read(1 << 20), b""):  # pragma: no cover
            h.update(block)
        return h.hexdigest()  # pragma: no cover


def _untrusted_file(st: os.stat_result, what: str) -> str | None:
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


def _is_own_entry(folder: Path) -> bool:
    """Whether ``folder`` (named like a key) holds only what amdinfer writes into an entry."""
    try:
        names = [p for p in folder.iterdir()]
    except OSError:
        return False
    if not names:
        return False
    for p in names:
        if not _ENTRY_FILE_RE.match(p.name) or p.is_symlink() or not p.is_file():
            return False
    return any(p.name == _MANIFEST for p in names) or all(p.name.startswith(".tmp-") for p in names)


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
        """The backend that wrote it (``parts["backend"]``), ``"?"`` when unknown."""
        return str(self.parts.get("backend", "?"))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy (for ``amdinfer cache list --json``)."""
        return {
            "key": self.key,
            "path": str(self.path) if self.path else None,
            "size_bytes": self.size_bytes,
            "created": self.created,
            "backend": self.backend,
            "parts": self.parts,
            "meta": self.meta,
            "problem": self.problem,
        }


class CompiledModelCache:
    """A folder of compiled artefacts, each verified by a manifest before it is used.

    Args:
        path: the cache folder (created on first write); ``None`` for :func:`default_cache_dir`.

    Example:
        >>> import tempfile
        >>> cache = CompiledModelCache(tempfile.mkdtemp())
        >>> k = cache.key(model="m", backend="demo")
        >>> obj, hit = cache.get_or_build(k, parts={"model": "m"}, build=lambda tmp: tmp.write_text("x") and "built",
        ...                               load=lambda p: "loaded")
        >>> obj, hit
        ('built', False)
        >>> cache.get_or_build(k, parts={"model": "m"}, build=lambda tmp: "never", load=lambda p: "loaded")
        ('loaded', True)
    """

    def __init__(self, path: PathLike | None = None) -> None:
        self.root = resolve_cache_dir(path)

    def __repr__(self) -> str:
        return f"CompiledModelCache({str(self.root)!r})"

    # ------------------------------------------------------------------ keys
    @staticmethod
    def key(**parts: Any) -> str:
        """A stable key (32 hex digits) from keyword parts; order does not matter, tuples equal lists.

        Example:
            >>> CompiledModelCache.key(a=1, b=(1, 2)) == CompiledModelCache.key(b=[1, 2], a=1)
            True
        """
        return hashlib.sha256(_canonical(parts).encode()).hexdigest()[:32]

    def _entry_dir(self, key: str) -> Path:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise CacheError(f"cache key: got {key!r}, expected 32 lowercase hex digits from CompiledModelCache.key()")
        return self.root / key

    # ------------------------------------------------------------------ reading
    def _read_manifest(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """(manifest, problem); (None, None) when there is no entry. Every field's type is checked."""
        manifest_path = self._entry_dir(key) / _MANIFEST
        try:
            st = manifest_path.lstat()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"manifest unreadable ({exc.strerror})"
        problem = _untrusted_file(st, "manifest")
        if problem is not None:
            return None, problem
        try:
            raw = read_regular(manifest_path, "manifest", error=CacheError, max_bytes=_MAX_MANIFEST_BYTES)
        except CacheError as exc:
            return None, str(exc)
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            return None, "manifest is not valid JSON (truncated or garbage)"
        if not isinstance(manifest, dict):
            return None, f"manifest holds a {type(manifest).__name__}, expected an object"
        missing = [k for k in ("format", "key", "artefact", "size", "sha256", "parts") if k not in manifest]
        if missing:
            return None, f"manifest lacks {missing}"
        if manifest["format"] != _FORMAT or isinstance(manifest["format"], bool):
            return None, f"manifest format {manifest['format']!r}, expected {_FORMAT}"
        if manifest["key"] != key:
            return None, f"manifest is for key {manifest['key']!r}, not {key!r}"
        name = manifest["artefact"]
        if not isinstance(name, str) or "/" in name or "\\" in name or name in ("", ".", ".."):
            return None, f"manifest names artefact {name!r}, expected a plain file name"
        sha = manifest["sha256"]
        if not isinstance(sha, str) or not _SHA_RE.match(sha):
            return None, f"manifest sha256 is {sha!r}, expected 64 lowercase hex digits"
        if not name.startswith(sha[:16]) or not _ENTRY_FILE_RE.match(name) or name == _MANIFEST:
            return None, f"manifest names artefact {name!r}, expected the content-derived name {sha[:16]}<suffix>"
        size = manifest["size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            return None, f"manifest size is {size!r}, expected an int >= 0"
        if not isinstance(manifest["parts"], dict):
            return None, f"manifest parts is a {type(manifest['parts']).__name__}, expected an object"
        created = manifest.get("created", 0.0)
        if not isinstance(created, (int, float)) or isinstance(created, bool) or created != created:
            return None, f"manifest created is {created!r}, expected a UNIX time (number)"
        if not isinstance(manifest.get("meta", {}), dict):
            return None, f"manifest meta is a {type(manifest['meta']).__name__}, expected an object"
        return manifest, None

    def get(
        self,
        key: str,
        validate: Callable[[Path], bool] | None = None,
        *,
        parts: Mapping[str, Any] | None = None,
    ) -> Path | None:
        """The artefact for ``key`` if the entry is sound, else ``None`` (a bad entry is logged and removed).

        Args:
            key: from :meth:`key`.
            validate: an extra check on the artefact (return ``False`` or raise to reject it).
            parts: when given, the manifest's parts must equal them (guards against a key collision or a
                changed key recipe).

        Example:
            >>> import tempfile
            >>> cache = CompiledModelCache(tempfile.mkdtemp())
            >>> cache.get(cache.key(x=1)) is None
            True
        """
        self._entry_dir(key)  # a malformed key is the caller's error (CacheError), not a damaged entry
        try:
            return self._get(key, validate, parts)
        except CacheError:
            raise
        except OSError as exc:  # e.g. a folder this user cannot read: never fatal, the caller builds
            log.warning(
                "amdinfer cache %s: entry %s cannot be read (%s); running uncached", self.root, key, exc.strerror or exc
            )
            return None

    def _get(self, key: str, validate: Callable[[Path], bool] | None, parts: Mapping[str, Any] | None) -> Path | None:
        entry = self._entry_dir(key)
        manifest, problem = self._read_manifest(key)
        if manifest is None:
            if problem is not None:
                self._invalidate(key, problem)
            return None
        if parts is not None and manifest["parts"] != _normalize(parts):
            self._invalidate(key, "its key parts differ from the ones asked for (key mismatch)")
            return None
        artefact = entry / manifest["artefact"]
        try:
            st = artefact.lstat()
        except FileNotFoundError:
            self._invalidate(key, f"artefact {artefact.name} is missing")
            return None
        except OSError as exc:
            self._invalidate(key, f"artefact {artefact.name} cannot be read ({exc.strerror})")
            return None
        bad = _untrusted_file(st, f"artefact {artefact.name}")
        if bad is not None:
            self._invalidate(key, bad)
            return None
        size = st.st_size
        if size != manifest["size"]:
            self._invalidate(
                key, f"artefact {artefact.name} has {size} bytes, the manifest says {manifest['size']} (truncated?)"
            )
            return None
        try:
            digest = _sha256_file(artefact)
        except OSError as exc:
            self._invalidate(key, f"artefact {artefact.name} cannot be read ({exc.strerror})")
            return None
        if digest != manifest["sha256"]:
            self._invalidate(
                key,
                f"artefact {artefact.name} has SHA-256 {digest[:12]}…, "
                f"the manifest says {manifest['sha256'][:12]}… (corrupt)",
            )
            return None
        if validate is not None:
            try:
                ok = validate(artefact)
            except Exception as exc:
                ok = False
                problem = f"{type(exc).__name__}: {exc}"
            if not ok:
                self._invalidate(key, f"artefact {artefact.name} failed validation ({problem or 'rejected'})")
                return None
        return artefact

    def manifest(self, key: str) -> dict[str, Any] | None:
        """The entry's manifest (unverified), or ``None``.

        Example:
            >>> import tempfile
            >>> CompiledModelCache(tempfile.mkdtemp()).manifest("0" * 32) is None
            True
        """
        return self._read_manifest(key)[0]

    # ------------------------------------------------------------------ writing
    def put(
        self,
        key: str,
        produce: Callable[[Path], Any] | PathLike,
        meta: Mapping[str, Any] | None = None,
        *,
        parts: Mapping[str, Any] | None = None,
        suffix: str = "",
    ) -> Path:
        """Store an artefact atomically and return its path in the cache.

        Args:
            key: from :meth:`key`.
            produce: a function that writes the artefact to the temporary path it is given, or the path of
                an existing file to move in (copied when it lies on another file system).
            meta: extra JSON-friendly facts for the manifest (compile seconds, ...).
            parts: what the key was made of, recorded for :meth:`get` and ``amdinfer cache list``.
            suffix: the artefact's extension (``".mxr"``, ``".onnx"``).

        Raises:
            CacheError: the folder cannot be written (read-only, disk full, ...), or ``produce`` wrote nothing.

        Example:
            >>> import tempfile
            >>> cache = CompiledModelCache(tempfile.mkdtemp())
            >>> p = cache.put(cache.key(x=1), lambda tmp: tmp.write_bytes(b"abc"), suffix=".bin")
            >>> p.suffix, p.read_bytes()
            ('.bin', b'abc')
        """
        entry = self._entry_dir(key)
        try:
            self._make_root()
            entry.mkdir(exist_ok=True)
            self._tag_root()
        except OSError as exc:
            raise CacheError(f"cache folder {self.root}: cannot create entry ({exc.strerror or exc})") from exc
        tmp = entry / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"
        try:
            if callable(produce):
                produce(tmp)
            else:
                src = Path(produce)
                try:
                    os.replace(src, tmp)
                except OSError:
                    shutil.copyfile(src, tmp)
            if not tmp.is_file():
                raise CacheError(f"cache entry {key}: the producer wrote no file at {tmp}")
            # Only this user may change an entry in place (readers refuse files owned by someone else).
            os.chmod(tmp, 0o644)
            size = tmp.stat().st_size
            digest = _sha256_file(tmp)
            final = entry / f"{digest[:16]}{suffix}"
            os.replace(tmp, final)
            manifest = {
                "format": _FORMAT,
                "key": key,
                "artefact": final.name,
                "size": size,
                "sha256": digest,
                "created": time.time(),
                "parts": _normalize(parts or {}),
                "meta": _normalize(meta or {}),
                "writer": {"pid": os.getpid(), "host": platform.node(), "python": sys.version.split()[0]},
            }
            self._write_json_atomic(entry / _MANIFEST, manifest)
        except CacheError:
            raise
        except OSError as exc:
            raise CacheError(f"cache entry {key} in {self.root}: write failed ({exc.strerror or exc})") from exc
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._drop_stale(entry, keep=final.name)
        return final

    @staticmethod
    def _write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
        tmp = path.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True, default=_jsonable)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()

    @staticmethod
    def _drop_stale(entry: Path, keep: str) -> None:
        now = time.time()
        for p in entry.iterdir():
            if p.name in (keep, _MANIFEST):
                continue
            # Another writer's temporary file may sit here for as long as its producer runs.
            grace = 3600.0 if p.name.startswith(".tmp-") else _STALE_GRACE_S
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > grace:
                    p.unlink()

    def _make_root(self) -> None:
        """Create the cache folder private to this user (``0700``) when it does not exist yet."""
        if not self.root.is_dir():
            self.root.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                self.root.mkdir(mode=0o700)
        self._tag_root()

    def _tag_root(self) -> None:
        tag = self.root / "CACHEDIR.TAG"
        if not tag.exists():
            with contextlib.suppress(OSError):
                tag.write_text(
                    "Signature: 8a477f597d28d172789f06886806bc55\n"
                    "# This folder holds amdinfer's compiled-model cache; `amdinfer cache clear` empties it.\n"
                )

    def _invalidate(self, key: str, reason: str) -> None:
        log.warning(
            "amdinfer cache %s: entry %s is unusable: %s; removing it (it will be rebuilt)", self.root, key, reason
        )
        self.remove(key)

    def remove(self, key: str) -> bool:
        """Remove one entry; ``True`` when something was removed.

        Example:
            >>> import tempfile
            >>> CompiledModelCache(tempfile.mkdtemp()).remove("0" * 32)
            False
        """
        entry = self._entry_dir(key)
        try:
            if not os.path.lexists(entry):
                return False
        except OSError:  # pragma: no cover - lexists does not raise on Linux
            return False
        # Rename first so readers never see a half-deleted entry.
        trash = self.root / f".trash-{key}-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(entry, trash)
        except OSError:
            trash = entry
        shutil.rmtree(trash, ignore_errors=True)
        return True

    # ------------------------------------------------------------------ building with a lock
    @contextlib.contextmanager
    def lock(self, key: str, timeout: float = 3600.0) -> Iterator[bool]:
        """Hold an inter-process lock for ``key`` while building; yields whether the lock was obtained.

        Without ``fcntl`` (non-POSIX) or after ``timeout`` seconds, the build goes ahead unlocked (logged);
        atomic writes keep the entry sound either way.

        Example:
            >>> import tempfile
            >>> cache = CompiledModelCache(tempfile.mkdtemp())
            >>> with cache.lock(cache.key(x=1)) as locked:
            ...     locked
            True
        """
        self._entry_dir(key)  # validates the key
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield False
            return
        locks = self.root / ".locks"
        try:
            self._make_root()
            locks.mkdir(exist_ok=True)
            fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            log.warning("amdinfer cache %s: cannot create a lock file (%s); building unlocked", self.root, exc)
            yield False
            return
        got = False
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    got = True
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        log.warning(
                            "amdinfer cache %s: lock for %s held for over %.0f s; building unlocked",
                            self.root,
                            key,
                            timeout,
                        )
                        break
                    time.sleep(0.05)
            yield got
        finally:
            if got:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def get_or_build(
        self,
        key: str,
        *,
        parts: Mapping[str, Any],
        build: Callable[[Path], T],
        load: Callable[[Path], T],
        suffix: str = "",
        meta: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> tuple[T, bool]:
        """Load the entry for ``key``, or build it and store what the builder wrote.

        ``build(tmp_path)`` returns the object and writes its artefact to ``tmp_path``; ``load(path)``
        rebuilds the object from a stored artefact. A stored artefact that ``load`` rejects (raises) is
        logged, removed and rebuilt. Failing to store (read-only folder, disk full) is logged and the built
        object is still returned. Concurrent builders of one key wait for the first (file lock).

        Returns:
            ``(object, cache_hit)``.

        Example:
            >>> import tempfile
            >>> cache = CompiledModelCache(tempfile.mkdtemp())
            >>> k = cache.key(n=1)
            >>> cache.get_or_build(k, parts={"n": 1}, build=lambda t: (t.write_text("7"), 7)[1],
            ...                    load=lambda p: int(p.read_text()))
            (7, False)
            >>> cache.get_or_build(k, parts={"n": 1}, build=lambda t: 0, load=lambda p: int(p.read_text()))
            (7, True)
        """
        hit = self._try_load(key, parts, load)
        if hit is not None:
            return hit[0], True
        with self.lock(key):
            hit = self._try_load(key, parts, load)  # another process may have built it meanwhile
            if hit is not None:
                return hit[0], True
            tmp_dir = self.root / ".building"
            scratch: tempfile.TemporaryDirectory[str] | None = None
            try:
                self._make_root()
                tmp_dir.mkdir(exist_ok=True)
                tmp = tmp_dir / f"{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"
                # Probe: an existing folder may still be read-only (the runtime's own error would be opaque).
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                tmp.unlink()
            except OSError as exc:
                log.warning("amdinfer cache %s: not writable (%s); running uncached", self.root, exc.strerror or exc)
                scratch = tempfile.TemporaryDirectory(prefix="amdinfer-build-")
                tmp = Path(scratch.name) / f"artefact{suffix}"
            try:
                obj = build(tmp)
                if scratch is not None:
                    pass  # nothing can be stored
                elif tmp.is_file():
                    extra = meta() if callable(meta) else meta
                    try:
                        self.put(key, tmp, extra, parts=parts, suffix=suffix)
                    except CacheError as exc:
                        log.warning("%s; the compiled model is used but not cached", exc)
                else:
                    log.warning(
                        "amdinfer cache %s: the builder of %s wrote no artefact; nothing cached", self.root, key
                    )
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
                if scratch is not None:
                    scratch.cleanup()
        return obj, False

    def _try_load(self, key: str, parts: Mapping[str, Any], load: Callable[[Path], T]) -> tuple[T] | None:
        path = self.get(key, parts=parts)
        if path is None:
            return None
        try:
            return (load(path),)
        except Exception as exc:
            self._invalidate(key, f"the runtime could not load it ({type(exc).__name__}: {str(exc).strip()[:300]})")
            return None

    # ------------------------------------------------------------------ listing and clearing
    def entries(self) -> list[CacheEntry]:
        """Every entry, oldest first (unsound ones included, with ``problem`` set).

        Example:
            >>> import tempfile
            >>> CompiledModelCache(tempfile.mkdtemp()).entries()
            []
        """
        if not self._usable_root():
            return []
        out = []
        for entry in self.root.iterdir():
            if entry.is_symlink() or not entry.is_dir() or not _KEY_RE.match(entry.name):
                continue
            size = 0
            for p in entry.iterdir():
                with contextlib.suppress(OSError):
                    st = p.lstat()
                    size += st.st_size if stat.S_ISREG(st.st_mode) else 0
            manifest, problem = self._read_manifest(entry.name)
            if manifest is None:
                out.append(CacheEntry(entry.name, None, size, entry.stat().st_mtime, problem=problem or "no manifest"))
                continue
            artefact = entry / manifest["artefact"]
            try:
                st = artefact.lstat()
                problem = _untrusted_file(st, "artefact")
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

    def _usable_root(self) -> bool:
        """``False`` when there is no cache folder yet; :class:`CacheError` when the path is not a cache folder."""
        try:
            st = self.root.stat()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise CacheError(f"cache folder '{self.root}': cannot be read ({exc.strerror or exc})") from None
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"cache folder '{self.root}': is {file_kind(st.st_mode)}, expected a directory")
        try:
            children = [p.name for p in self.root.iterdir()]
        except OSError as exc:
            raise CacheError(f"cache folder '{self.root}': cannot be listed ({exc.strerror or exc})") from None
        if children and not self._has_tag():
            raise CacheError(
                f"cache folder '{self.root}': holds {len(children)} files or folders but no amdinfer CACHEDIR.TAG; "
                "expected a folder amdinfer created for its cache (nothing was read or removed)"
            )
        return True

    def _has_tag(self) -> bool:
        tag = self.root / "CACHEDIR.TAG"
        try:
            return tag.is_file() and not tag.is_symlink() and tag.read_text(errors="replace").startswith(_TAG_SIGNATURE)
        except OSError:
            return False

    def size_bytes(self) -> int:
        """Bytes used by the cache's entries and the folders the runtimes manage inside it.

        Example:
            >>> import tempfile
            >>> CompiledModelCache(tempfile.mkdtemp()).size_bytes()
            0
        """
        if not self.root.is_dir():
            return 0
        total = 0
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.path.getsize(os.path.join(dirpath, name))
        return total

    def clear(self) -> int:
        """Remove every entry (and amdinfer's own scratch folders); returns the number of entries removed.

        Only what amdinfer wrote is removed: entry folders (32 hex digits holding nothing but a manifest and
        content-named artefacts), amdinfer's files in ``.locks`` and ``.building``, ``.trash-*`` and the
        runtime-managed folder ``ort-migraphx-ep``; other files, and folders that merely look like entries,
        are left alone.

        Raises:
            CacheError: the cache path is a file, or a non-empty folder without amdinfer's ``CACHEDIR.TAG``
                (nothing is removed).

        Example:
            >>> import tempfile
            >>> cache = CompiledModelCache(tempfile.mkdtemp())
            >>> _ = cache.put(cache.key(x=1), lambda t: t.write_bytes(b"1"))
            >>> cache.clear(), cache.entries()
            (1, [])
        """
        if not self._usable_root():
            return 0
        n = 0
        for p in self.root.iterdir():
            if p.is_symlink():
                continue
            if p.is_dir() and _KEY_RE.match(p.name):
                if _is_own_entry(p):
                    n += self.remove(p.name)
                else:
                    log.warning("amdinfer cache %s: %s is not an entry amdinfer wrote; left alone", self.root, p.name)
            elif p.is_dir() and _TRASH_RE.match(p.name):
                shutil.rmtree(p, ignore_errors=True)
            elif p.is_dir() and p.name in (".locks", ".building"):
                pattern = _LOCK_RE if p.name == ".locks" else _BUILDING_RE
                for f in p.iterdir():
                    if pattern.match(f.name) and not f.is_symlink() and f.is_file():
                        with contextlib.suppress(OSError):
                            f.unlink()
                with contextlib.suppress(OSError):
                    p.rmdir()  # only when empty
            elif p.is_dir() and p.name == RUNTIME_DIRS["ort-migraphx-ep"]:
                shutil.rmtree(p, ignore_errors=True)
        return n

    def runtime_dir(self, name: str) -> Path:
        """A folder inside the cache that a runtime manages itself (e.g. the ORT MIGraphX EP's model cache).

        Example:
            >>> import tempfile
            >>> CompiledModelCache(tempfile.mkdtemp()).runtime_dir("ort-migraphx-ep").name
            'ort-migraphx-ep'
        """
        if name not in RUNTIME_DIRS:
            raise CacheError(f"runtime_dir: got {name!r}, expected one of {sorted(RUNTIME_DIRS)}")
        path = self.root / RUNTIME_DIRS[name]
        try:
            self._make_root()
            path.mkdir(exist_ok=True)
            self._tag_root()
        except OSError as exc:
            raise CacheError(f"cache folder {self.root}: cannot create {path.name} ({exc.strerror or exc})") from exc
        return path


#: Folders inside the cache root that runtimes manage themselves (no manifest; cleared by ``clear``).
RUNTIME_DIRS = {"ort-migraphx-ep": "ort-migraphx-ep"}


def list_entries(cache_dir: PathLike | None = None) -> list[CacheEntry]:
    """Entries of the cache at ``cache_dir`` (default: :func:`default_cache_dir`); for ``amdinfer cache list``.

    Raises:
        CacheError: an explicitly given ``cache_dir`` does not exist, is a file, or is not an amdinfer cache.

    Example:
        >>> import tempfile
        >>> list_entries(tempfile.mkdtemp())
        []
    """
    cache = CompiledModelCache(cache_dir)
    _check_explicit(cache, cache_dir)
    return cache.entries()


def clear(cache_dir: PathLike | None = None) -> int:
    """Empty the cache at ``cache_dir`` (default: :func:`default_cache_dir`); for ``amdinfer cache clear``.

    Returns:
        The number of entries removed.

    Raises:
        CacheError: an explicitly given ``cache_dir`` does not exist, is a file, or is not an amdinfer cache.

    Example:
        >>> import tempfile
        >>> clear(tempfile.mkdtemp())
        0
    """
    cache = CompiledModelCache(cache_dir)
    _check_explicit(cache, cache_dir)
    return cache.clear()


def _check_explicit(cache: CompiledModelCache, cache_dir: PathLike | None) -> None:
    """A folder the user named must exist (the default one may not exist yet)."""
    if cache_dir is not None and not os.path.lexists(cache.root):
        raise CacheError(f"cache folder '{cache.root}': does not exist; expected an existing amdinfer cache folder")


# ---------------------------------------------------------------------- key parts describing the machine
def cpu_signature() -> str:
    """The CPU's architecture and instruction-set flags, digested (ORT's CPU-optimized graphs depend on them).

    ONNX Runtime's layout optimizations (NCHWc blocking) pick block sizes from the CPU's vector width, so an
    optimized model written on an AVX-512 machine is not valid on an AVX2 one.

    Example:
        >>> cpu_signature().startswith(platform.machine())
        True
    """
    flags = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    return f"{platform.machine()}:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def _gfx_from_target_version(version: int) -> str:
    """KFD's ``gfx_target_version`` (e.g. 90402, 90010, 110000) as a gfx name (gfx942, gfx90a, gfx1100)."""
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def amd_gpu_archs(sysfs: PathLike = "/sys/class/kfd/kfd/topology/nodes") -> list[dict[str, Any]]:
    """AMD GPUs the kernel driver (KFD) lists, in node order: ``[{"gfx": "gfx942", "cu": 304}, ...]``.

    Read from sysfs without initializing HIP. Empty without ROCm's driver (as on machines without an AMD GPU).

    Example:
        >>> amd_gpu_archs("/nonexistent")
        []
    """
    root = Path(sysfs)
    out = []
    if not root.is_dir():
        return out
    nodes = sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for node in nodes:
        props: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            for line in (node / "properties").read_text().splitlines():
                name, _, value = line.partition(" ")
                if value.strip().lstrip("-").isdigit():
                    props[name] = int(value)
        version = props.get("gfx_target_version", 0)
        if version > 0:  # CPU nodes report 0
            cu = props.get("simd_count", 0) // max(props.get("simd_per_cu", 1), 1)
            out.append({"gfx": _gfx_from_target_version(version), "cu": cu, "node": int(node.name)})
    return out


def visible_gpu_arch(
    device: int, archs: list[dict[str, Any]] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The gfx name of HIP device ``device`` (after ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES``), or ``"unknown"``.

    Best effort: HIP numbers GPUs in the driver's node order; a visibility variable that is not a list of
    indices (UUIDs) leaves the mapping unknown unless every GPU has the same architecture.

    Example:
        >>> two = [{"gfx": "gfx90a", "cu": 104}, {"gfx": "gfx942", "cu": 304}]
        >>> visible_gpu_arch(1, two, env={})
        'gfx942:304cu'
        >>> visible_gpu_arch(0, two, env={"HIP_VISIBLE_DEVICES": "1"})
        'gfx942:304cu'
        >>> visible_gpu_arch(0, [], env={})
        'unknown'
    """
    archs = amd_gpu_archs() if archs is None else archs
    env = os.environ if env is None else env
    if not archs:
        return "unknown"
    names = {f"{a['gfx']}:{a['cu']}cu" for a in archs}
    order = list(range(len(archs)))
    for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = env.get(var)
        if value is None or value == "":
            continue
        items = [v.strip() for v in value.split(",") if v.strip()]
        if not all(v.isdigit() for v in items):
            return names.pop() if len(names) == 1 else "unknown"
        order = [order[int(v)] for v in items if int(v) < len(order)]
    if device >= len(order):
        return "unknown"
    a = archs[order[device]]
    return f"{a['gfx']}:{a['cu']}cu"
