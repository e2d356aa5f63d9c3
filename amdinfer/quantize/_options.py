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


def reduce_range_choice(value: Any) -> tuple[bool, str]:
    """``reduce_range=``: ``(7-bit weights?, why)``; ``"auto"`` is 7-bit exactly where this CPU's int8 sums saturate.

    See :func:`~amdinfer._support._hardware.int8_saturates`. The choice is part of the quantizer's settings (its
    cache key and certificate), so a model quantized on another kind of CPU is not mistaken for this one's.

    Example:
        >>> reduce_range_choice(False)
        (False, 'reduce_range=False (set by the caller)')
        >>> reduce_range_choice("auto")[1].startswith("reduce_range=auto: ")
        True
    """
    if isinstance(value, str) and value == "auto":
        from .._support._hardware import int8_saturates

        if int8_saturates():
            return True, (
                "reduce_range=auto: 7-bit weights (this x86 CPU has no VNNI or AMX: ONNX Runtime's uint8 x int8 "
                "products sum pairs in 16 bits and saturate with full-range weights)"
            )
        return False, "reduce_range=auto: 8-bit weights (this CPU's int8 dot products do not saturate)"
    if not isinstance(value, bool):
        raise OptionError(f"reduce_range: got {value!r}, expected 'auto', True or False")
    return value, f"reduce_range={value} (set by the caller)"


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
