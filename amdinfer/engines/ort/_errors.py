"""ONNX Runtime's exceptions as amdinfer errors.

Example:
    >>> type(translate_run_error(RuntimeError("boom"))).__name__
    'AmdinferError'
"""

from __future__ import annotations

import re

from ...errors import AmdinferError, InputError

__all__ = ["IR_RE", "translate_run_error"]

#: ONNX Runtime's message for a model newer than it reads (the engine lowers the IR version and retries).
IR_RE = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")


def translate_run_error(exc: Exception) -> Exception:
    """The amdinfer error for an exception ONNX Runtime raised while running.

    ``InvalidArgument`` (bad feeds) becomes :class:`~amdinfer.InputError`; anything else an
    :class:`~amdinfer.AmdinferError` carrying ONNX Runtime's text.

    Example:
        >>> class InvalidArgument(Exception): ...
        >>> translate_run_error(InvalidArgument("bad shape"))
        InputError('onnxruntime rejected the feeds: bad shape')
    """
    text = str(exc).strip()
    if type(exc).__name__ == "InvalidArgument":
        return InputError(f"onnxruntime rejected the feeds: {text}")
    return AmdinferError(f"onnxruntime failed while running: {text}")
