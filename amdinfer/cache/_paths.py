"""Where the cache lives: the ``path=`` you pass, ``$AMDINFER_CACHE_DIR``, or the platform's user cache dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from .._support._files import check_path

__all__ = ["CACHE_ENV", "PathLike", "default_cache_dir", "resolve_cache_dir"]

#: Environment variable that overrides the default cache folder.
CACHE_ENV = "AMDINFER_CACHE_DIR"

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
