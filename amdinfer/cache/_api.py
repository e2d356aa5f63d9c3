"""The functions behind ``amdinfer cache list`` and ``amdinfer cache clear``."""

from __future__ import annotations

import os

from ..errors import CacheError
from ._entries import CacheEntry
from ._paths import PathLike
from ._store import CompiledModelCache

__all__ = ["clear", "list_entries"]


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
