"""The amdinfer exception tree.

Every error amdinfer raises on purpose is an :class:`AmdinferError`. Each subclass also inherits the
builtin exception a caller would naturally catch, so ``except ValueError`` keeps working around
``InputError``. :func:`error_status` is the one table of how each kind is answered: the HTTP status of the
REST server (and Ray), the gRPC status code of the gRPC server, the exit code of the ``amdinfer`` command.

Example:
    >>> import amdinfer
    >>> try:
    ...     amdinfer.load(b"not a model")
    ... except amdinfer.ModelError as exc:
    ...     print(type(exc).__name__)
    ModelError
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AgreementError",
    "AmdinferError",
    "BackendUnavailableError",
    "BundleError",
    "CacheError",
    "CertificateError",
    "EngineClosedError",
    "ErrorStatus",
    "InputError",
    "ModelError",
    "OptionError",
    "StageError",
    "StageInputError",
    "UnsupportedOperatorError",
    "error_status",
]


class AmdinferError(Exception):
    """Base class of every error raised by amdinfer.

    Example:
        >>> issubclass(InputError, AmdinferError)
        True
    """


class BackendUnavailableError(AmdinferError, ImportError):
    """A backend or execution provider cannot run here; the message says why and how to fix it.

    Attributes:
        backend: name of the backend or provider that failed.
        cause: the underlying error text (e.g. the dynamic loader's message).

    Example:
        >>> err = BackendUnavailableError("no migraphx", backend="migraphx")
        >>> err.backend
        'migraphx'
    """

    def __init__(self, message: str, *, backend: str | None = None, cause: str | None = None):
        super().__init__(message)
        self.backend = backend
        self.cause = cause


class ModelError(AmdinferError, ValueError):
    """The model cannot be read, is invalid, or needs something the runtime does not offer.

    Example:
        >>> raise ModelError("model 'x.onnx': truncated protobuf")
        Traceback (most recent call last):
        ...
        amdinfer.errors.ModelError: model 'x.onnx': truncated protobuf
    """


class AgreementError(ModelError):
    """A quantized model whose float outputs no longer agree with the float model's (cosine similarity below the
    quantizer's ``min_cosine``): refused rather than handed over (``amdinfer.quantize``).

    Attributes:
        check: the quantizer's :class:`~amdinfer.quantize.AgreementCheck` with every output's figures.

    Example:
        >>> issubclass(AgreementError, ModelError)
        True
    """

    def __init__(self, message: str, *, check: Any = None):
        super().__init__(message)
        self.check = check


class CertificateError(ModelError):
    """A precision certificate that cannot be trusted: damaged JSON, a foreign format, a missing or mistyped
    field, or one whose model hash is not the model's it travels with (``amdinfer.quantize.PrecisionCertificate``).

    Example:
        >>> issubclass(CertificateError, ModelError)
        True
    """


class BundleError(ModelError):
    """A deployable bundle (``amdinfer compile --bundle``) that cannot be loaded here: a file missing or changed
    since it was written, an edited manifest, or a bundle built for another runtime, provider or machine.

    Attributes:
        field: what differs (a file name, ``manifest``, or a manifest field such as ``onnxruntime``).
        rebuild: the ``amdinfer compile ... --bundle`` command that makes a bundle for this machine.

    Example:
        >>> err = BundleError("bundle 'b': onnxruntime differs", field="onnxruntime", rebuild="amdinfer compile m.onnx")
        >>> issubclass(BundleError, ModelError), err.field
        (True, 'onnxruntime')
    """

    def __init__(self, message: str, *, field: str | None = None, rebuild: str | None = None):
        super().__init__(message)
        self.field = field
        self.rebuild = rebuild


class UnsupportedOperatorError(ModelError):
    """The model uses operators that the chosen backend does not implement.

    Attributes:
        operators: sorted list of the unsupported ``domain::OpType`` names.

    Example:
        >>> UnsupportedOperatorError("unsupported", operators=["Foo"]).operators
        ['Foo']
    """

    def __init__(self, message: str, *, operators: list[str] | None = None):
        super().__init__(message)
        self.operators = list(operators or [])


class InputError(AmdinferError, ValueError):
    """Feeds given to an engine or a stage do not match what it expects.

    Example:
        >>> str(InputError("input 'x': got shape (1, 3), expected (N, 4)"))
        "input 'x': got shape (1, 3), expected (N, 4)"
    """


class OptionError(AmdinferError, TypeError):
    """An option has an unknown name, a wrong type or a value out of range.

    Example:
        >>> isinstance(OptionError("precision: got 'fp7'"), TypeError)
        True
    """


class EngineClosedError(AmdinferError, RuntimeError):
    """The engine was closed and cannot run any more.

    Example:
        >>> isinstance(EngineClosedError("closed"), RuntimeError)
        True
    """


class StageError(AmdinferError, RuntimeError):
    """A pre- or post-processing stage failed or returned something of the wrong kind.

    Example:
        >>> str(StageError("Letterbox: returned None"))
        'Letterbox: returned None'
    """


class StageInputError(StageError, InputError):
    """A :class:`StageError` whose cause is bad input (a uint16 or RGBA image, a wrong shape).

    ``except InputError`` (and ``ValueError``) catch it too: a server answers it as the client's mistake.

    Example:
        >>> isinstance(StageInputError("item 0: preprocess[1] Letterbox: ..."), (InputError, StageError))
        True
    """


class CacheError(AmdinferError, OSError):
    """The compiled-model cache cannot be used (e.g. its directory is not writable).

    Example:
        >>> isinstance(CacheError("read-only"), OSError)
        True
    """


@dataclass(frozen=True)
class ErrorStatus:
    """How each face of amdinfer answers one kind of error.

    Attributes:
        http: the REST status (``amdinfer serve``, Ray): 4xx the request's fault, 500 the server's.
        grpc: the gRPC status code's name (``grpc.StatusCode[grpc]``); a name, so this module needs no grpc.
        exit_code: the ``amdinfer`` command's exit status.

    Example:
        >>> ErrorStatus(400, "INVALID_ARGUMENT", 1).client
        True
    """

    http: int
    grpc: str
    exit_code: int

    @property
    def client(self) -> bool:
        """The request's fault (a 4xx status), not the server's: counted ``invalid``, logged in one line."""
        return 400 <= self.http < 500


_REQUEST = ErrorStatus(400, "INVALID_ARGUMENT", 1)  # the caller sent something wrong
_SERVER = ErrorStatus(500, "INTERNAL", 1)  # the model, the backend or the machine failed

#: The one table: each kind -> its HTTP status, gRPC code and CLI exit code. A subclass without a row of its
#: own answers as its nearest parent in the MRO (:func:`error_status`): AgreementError, CertificateError and
#: UnsupportedOperatorError as ModelError. docs/errors.md shows it (tested). A stage's failure counts as the
#: request's: the item it refused (an RGBA image, a wrong shape) came with it.
_STATUSES: dict[type[AmdinferError], ErrorStatus] = {
    AmdinferError: _SERVER,
    BackendUnavailableError: _SERVER,
    ModelError: _SERVER,
    InputError: _REQUEST,
    OptionError: _REQUEST,
    EngineClosedError: _SERVER,
    StageError: _REQUEST,
    StageInputError: _REQUEST,
    CacheError: _SERVER,
}


def error_status(error: BaseException | type[BaseException]) -> ErrorStatus | None:
    """The row of the error table for an exception or an exception class, found along its MRO.

    Args:
        error: an exception, or its class.

    Returns:
        The row of the nearest class in ``type(error).__mro__`` that has one; ``None`` for an exception that is
        not an :class:`AmdinferError` (each face keeps its own default for those: a server answers 500, the
        CLI shows a traceback).

    Example:
        >>> error_status(InputError("input 'x': got shape (3,), expected (N, 4)"))
        ErrorStatus(http=400, grpc='INVALID_ARGUMENT', exit_code=1)
        >>> class MyModelError(ModelError): ...
        >>> error_status(MyModelError).grpc, error_status(KeyError("x"))
        ('INTERNAL', None)
    """
    kind = error if isinstance(error, type) else type(error)
    return next((_STATUSES[k] for k in kind.__mro__ if k in _STATUSES), None)
