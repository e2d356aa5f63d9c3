"""Shared argument checks: one wording for "got ..., expected ..." across the package.

Each helper returns the checked value (converted where that is lossless) or raises
:class:`~amdinfer.OptionError` (or the error class given) naming the argument, what it received and
what it expected.

Example:
    >>> check_int("threads", 4, minimum=0)
    4
    >>> check_int("threads", True)
    Traceback (most recent call last):
    ...
    amdinfer.errors.OptionError: threads: got True, expected an int
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import OptionError

__all__ = ["check_bool", "check_int", "check_optional_bool", "flag", "is_int"]


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy) and not a bool.

    Example:
        >>> is_int(3), is_int(np.int64(3)), is_int(True), is_int(3.0)
        (True, True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[Exception] = OptionError,
    what: str | None = None,
) -> int:
    """``value`` as an ``int`` if it is one (not a bool) within ``[minimum, maximum]``.

    Args:
        name: the argument's name, used in the message.
        value: what the caller passed.
        minimum: smallest allowed value (``None``: no bound).
        maximum: largest allowed value (``None``: no bound).
        error: the exception class to raise.
        what: the expectation to print instead of the generated one.

    Example:
        >>> check_int("prefetch", 0, minimum=1)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: prefetch: got 0, expected an int >= 1
    """
    ok = is_int(value) and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        if what is None:
            what = "an int"
            if minimum is not None and maximum is not None:
                what += f" in [{minimum}, {maximum}]"
            elif minimum is not None:
                what += f" >= {minimum}"
            elif maximum is not None:
                what += f" <= {maximum}"
        raise error(f"{name}: got {value!r}, expected {what}")
    return int(value)


def check_bool(name: str, value: Any, *, error: type[Exception] = OptionError) -> bool:
    """``value`` if it is ``True`` or ``False``.

    Example:
        >>> check_bool("tuning", 1)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: tuning: got 1, expected True or False
    """
    if not isinstance(value, bool):
        raise error(f"{name}: got {value!r}, expected True or False")
    return value


def check_optional_bool(name: str, value: Any, *, none_means: str = "") -> bool | None:
    """``value`` if it is ``True``, ``False`` or ``None``.

    Example:
        >>> check_optional_bool("tf32", None) is None
        True
    """
    if value is not None and not isinstance(value, bool):
        hint = f" ({none_means})" if none_means else ""
        raise OptionError(f"{name}: got {value!r}, expected True, False or None{hint}")
    return value


def flag(value: Any) -> str:
    """``"1"`` or ``"0"``: how ONNX Runtime and MIGraphX spell booleans in string options.

    Example:
        >>> flag(True), flag(False)
        ('1', '0')
    """
    return "1" if value else "0"
