"""The compiled-model cache itself: :class:`CompiledModelCache` (keys, verified reads, atomic writes, locks)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .._support._files import file_kind
from ..errors import CacheError
from ._entries import RUNTIME_DIRS, CacheEntry, clear_folder, scan_entries
from ._lock import file_lock
from ._manifest import (
    FORMAT,
    KEY_RE,
    MANIFEST,
    artefact_problem,
    canonical,
    normalize,
    read_manifest,
    sha256_file,
    write_json_atomic,
)
from ._paths import PathLike, resolve_cache_dir
from ._scratch import building_file, written

__all__ = ["CompiledModelCache"]

log = logging.getLogger("amdinfer.cache")

_TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
#: Artefacts a newer manifest no longer names are kept this long for readers of the old manifest.
_STALE_GRACE_S = 60.0

T = TypeVar("T")


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
        return hashlib.sha256(canonical(parts).encode()).hexdigest()[:32]

    def _entry_dir(self, key: str) -> Path:
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise CacheError(f"cache key: got {key!r}, expected 32 lowercase hex digits from CompiledModelCache.key()")
        return self.root / key

    # ------------------------------------------------------------------ reading
    def _read_manifest(self, key: str) -> tuple[dict[str, Any] | None, str | None]:
        """(manifest, problem); (None, None) when there is no entry. Every field's type is checked."""
        return read_manifest(self._entry_dir(key) / MANIFEST, key)

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
        if parts is not None and manifest["parts"] != normalize(parts):
            self._invalidate(key, "its key parts differ from the ones asked for (key mismatch)")
            return None
        artefact = entry / manifest["artefact"]
        bad = artefact_problem(artefact, manifest)
        if bad is not None:
            self._invalidate(key, bad)
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
            digest = sha256_file(tmp)
            final = entry / f"{digest[:16]}{suffix}"
            os.replace(tmp, final)
            manifest = {
                "format": FORMAT,
                "key": key,
                "artefact": final.name,
                "size": size,
                "sha256": digest,
                "created": time.time(),
                "parts": normalize(parts or {}),
                "meta": normalize(meta or {}),
                "writer": {"pid": os.getpid(), "host": platform.node(), "python": sys.version.split()[0]},
            }
            write_json_atomic(entry / MANIFEST, manifest)
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
    def _drop_stale(entry: Path, keep: str) -> None:
        now = time.time()
        try:
            names = list(entry.iterdir())
        except OSError:  # the entry was cleared meanwhile: nothing stale left
            return
        for p in names:
            if p.name in (keep, MANIFEST):
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
        with file_lock(self.root, key, timeout, self._make_root) as got:
            yield got

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
            scratch: tempfile.TemporaryDirectory[str] | None = None
            try:
                tmp = building_file(self.root, key, suffix, self._make_root)
            except OSError as exc:
                log.warning("amdinfer cache %s: not writable (%s); running uncached", self.root, exc.strerror or exc)
                scratch = tempfile.TemporaryDirectory(prefix="amdinfer-build-")
                tmp = Path(scratch.name) / f"artefact{suffix}"
            try:
                try:
                    obj = build(tmp)
                except Exception:
                    if scratch is not None or os.path.lexists(tmp):
                        raise
                    # Our scratch file vanished: another process cleared the cache (unlocked build, or a
                    # folder removed under us). That is no reason to fail the load: build again, uncached.
                    log.warning(
                        "amdinfer cache %s: the scratch file of %s was removed while it was built (cache cleared "
                        "meanwhile?); building again in a private folder, not cached",
                        self.root,
                        key,
                    )
                    scratch = tempfile.TemporaryDirectory(prefix="amdinfer-build-")
                    tmp = Path(scratch.name) / f"artefact{suffix}"
                    obj = build(tmp)
                if scratch is not None:
                    pass  # nothing can be stored
                elif written(tmp):
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
            if not os.path.lexists(path):
                # Removed between the check and the load (another process cleared the cache): not damaged,
                # and a newer entry may already stand in its place, so nothing is removed; build it again.
                log.info("amdinfer cache %s: entry %s was removed while it was loaded; rebuilding it", self.root, key)
                return None
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
        return scan_entries(self.root)

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
        runtime-managed folders ``ort-migraphx-ep`` and ``ort-migraphx-plugin-ep``; other files, and folders that
        merely look like entries, are left alone.

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
        return clear_folder(self.root, self.remove)

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
