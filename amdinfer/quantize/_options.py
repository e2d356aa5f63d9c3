"""Option checks shared by the int8 quantizers: a choice from a table, a flag, and the ``cache=`` argument.

Example:
    >>> choice("method", "MinMax", {"minmax": "MinMax"}), flag("per_channel", True)
    ('minmax', True)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import OptionError

__all__ = ["choice", "flag", "resolve_cache"]


def choice(name: str, value: Any, table: dict[str, str]) -> str:
    """``value`` lower-cased when it is one of ``table``'s keys, else an :class:`~amdinfer.errors.OptionError`."""
    if not isinstance(value, str) or value.lower() not in table:
        raise OptionError(f"{name}: got {value!r}, expected one of {list(table)}")
    return value.lower()


def flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool, else an :class:`~amdinfer.errors.OptionError`."""
    if not isinstance(value, bool):
        raise OptionError(f"{name}: got {value!r}, expected True or False")
    return value


def resolve_cache(cache: Any) -> Any:
    """The ``CompiledModelCache`` that ``cache=`` stands for, or ``None`` (opt-in: see ``docs/cache.md``)."""
    if cache is False:
        return None
    from ..cache import CACHE_ENV, CompiledModelCache

    if cache is None:  # opt-in: the environment's cache folder only (docs/cache.md)
        return CompiledModelCache() if os.environ.get(CACHE_ENV) else None
    if cache is True:
        return CompiledModelCache()
    if isinstance(cache, CompiledModelCache):
        return cache
    if isinstance(cache, (str, Path)):
        from .._support._files import check_path

        return CompiledModelCache(check_path(cache, "cache"))
    raise OptionError(f"cache: got {cache!r}, expected None, True, False, a folder path or a CompiledModelCache")
