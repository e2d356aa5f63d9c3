"""What the REST server, the gRPC server and Ray answer for an exception, read from one table.

amdinfer's own errors are answered by the table in :func:`amdinfer.errors.error_status`; KServe's protocol
errors (``InvalidInput``, an unknown model, a server not ready) by the rows below, the statuses KServe gives
them. Anything else is a bug and keeps the server's default: 500 / ``INTERNAL``, its traceback in the log.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from kserve.errors import (
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    ServerNotLive,
    ServerNotReady,
    UnsupportedProtocol,
)

from ..errors import AmdinferError, error_status

__all__ = ["HANDLED", "ErrorAnswer", "answer_error", "log_error", "outcome"]

logger = logging.getLogger("amdinfer.serve")

#: KServe's protocol errors (not amdinfer's kinds): HTTP status, gRPC code name.
_PROTOCOL: dict[type[Exception], tuple[int, str]] = {
    InvalidInput: (400, "INVALID_ARGUMENT"),
    ModelNotFound: (404, "NOT_FOUND"),
    ModelNotReady: (503, "UNAVAILABLE"),
    ServerNotReady: (503, "UNAVAILABLE"),
    ServerNotLive: (503, "UNAVAILABLE"),
    UnsupportedProtocol: (501, "INVALID_ARGUMENT"),
}
#: The kinds answered here (the REST app installs one handler for each).
HANDLED: tuple[type[Exception], ...] = (AmdinferError, *_PROTOCOL)


class ErrorAnswer(NamedTuple):
    """The answer to one failed call."""

    http: int
    grpc: str
    message: str
    #: the server's own failure (500): its traceback is logged; other answers are one log line
    fault: bool


def answer_error(exc: BaseException, model: str | None = None) -> ErrorAnswer | None:
    """The status and the message for ``exc``; ``None``: not a kind the table knows (the server's default).

    The request's fault is answered with its message as it is; the server's own failure names the model
    (when known) and the error's class.

    Example:
        >>> from amdinfer.errors import InputError, ModelError
        >>> answer_error(InputError("input 'x': got shape (3,), expected (N, 4)")).http
        400
        >>> answer_error(ModelError("truncated"), "det")
        ErrorAnswer(http=500, grpc='INTERNAL', message="model 'det': ModelError: truncated", fault=True)
        >>> answer_error(KeyError("a bug")) is None
        True
    """
    row = error_status(exc)
    if row is not None:
        http, grpc = row.http, row.grpc
    else:
        found = next((answer for kind, answer in _PROTOCOL.items() if isinstance(exc, kind)), None)
        if found is None:
            return None
        http, grpc = found
    message = str(exc)
    fault = http == 500
    if fault:
        message = f"{type(exc).__name__}: {message}"
        if model:
            message = f"model {model!r}: {message}"
    return ErrorAnswer(http, grpc, message, fault)


def log_error(answer: ErrorAnswer, what: str, exc: BaseException) -> None:
    """Log an answered error: the server's fault with its traceback, a 5xx in one WARNING line (a model not
    ready), the request's fault in one INFO line (the client sent it; the server is fine).

    Example:
        >>> from amdinfer.errors import InputError
        >>> exc = InputError("input 'x': given twice")
        >>> log_error(answer_error(exc), "400 POST /v2/models/m/infer", exc)
    """
    if answer.fault:
        logger.error("%s: %s", what, answer.message, exc_info=exc)
    else:
        logger.log(logging.WARNING if answer.http >= 500 else logging.INFO, "%s: %s", what, answer.message)


def outcome(exc: BaseException) -> str:
    """The metrics' label of a failed request: ``invalid`` (the request's fault) or ``error``.

    Example:
        >>> from amdinfer.errors import EngineClosedError, StageInputError
        >>> outcome(StageInputError("LoadImage: got dtype uint16")), outcome(EngineClosedError("closed"))
        ('invalid', 'error')
    """
    answer = answer_error(exc)
    return "invalid" if answer is not None and answer.http < 500 else "error"
