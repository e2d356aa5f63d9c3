"""The bounds of every number ``amdinfer serve`` takes, in one table, and the one validator that checks them.

The command line's flags, ``models.toml`` / ``models.json`` (:mod:`amdinfer.serve._model_folder`), a repository
load request's ``config`` (REST and gRPC), ``serve(...)``, ``serve_repository(...)`` and the batcher all call
:func:`check` (or :func:`check_flag`, :func:`check_buckets`): a value must be of the right type (a bool is not
an int, a float is not an int), finite (``NaN``, ``Infinity`` and ``1e400`` are refused, whatever parsed them),
and within the bounds below. A violation is an :class:`~amdinfer.errors.OptionError` that names the option, where
it came from (the flag ``--x``, the file and its table, the load request's config, or the keyword argument),
what was received and what is accepted.

Why these bounds (each is far above any value that serves well, and below the first value that breaks a host):

- ``max_delay_ms`` 0..60000: how long the oldest request waits for batch-mates. A minute is already far past
  any client's patience (a batch window is a few ms); past it, a model with one client answers nothing for
  the whole wait, and ``Infinity``/``NaN`` would never answer at all (issue 35: the model and its unload hung).
- ``max_batch_size`` 1..4096: rows of one engine call. Each worker holds batch buffers of this many rows
  (twice, page-locked on a GPU); 4096 rows of a 640x640 RGB float image are 20 GB already.
- ``batch_buckets``: 1 to 64 sizes, each 1..4096 (the ``max_batch_size`` cap: a bucket is a batch the engine is
  padded to and allocates; ``[1073741824]`` made a one-row request allocate 12 TiB). A bucket above
  ``max_batch_size`` is allowed (it is where a full batch is padded to). Each bucket is a shape the engine
  compiles and warms up (MIGraphX: one program each), so 64 is far more than a ladder of powers of two needs.
- ``workers_per_device`` 1..min(64, 4 x usable cores): each server process holds its own engine, event loop and
  threads; past four per core they only contend (``--workers-per-device 1000`` started 1000 processes on a
  two-core host), and 64 per device is past what any GPU keeps busy.
- ``pipeline_threads`` 1..256: a recipe's decode and resize threads per process; 256 is past the cores of the
  largest host served (128), and each thread holds an image buffer.
- ``max_image_pixels`` 1..2**30: the pixels (width x height) a recipe's image header may declare
  (docs/security.md, "The pixel limit"); 2**30 is OpenCV's own limit, past which it refuses anyway.
- ``max_request_bytes`` 1024..2147483647: the largest request body or gRPC message; gRPC's message-length
  options are C ints (2 GiB - 1), and a request is held whole in memory.
- ``verify_sample`` 0..1: a fraction of requests.
- ``http_port`` 0..65535 and ``grpc_port`` 0..65535 (the command line's ``-1``: no gRPC): TCP ports.

No timeout of the server is configurable (the supervisor's reap and join times are constants), and the request
limits other than ``max_request_bytes`` (the JSON part of a REST body, shared-memory names) are constants too.

Example:
    >>> check("max_delay_ms", 4)
    4.0
    >>> check("max_delay_ms", float("inf"), "load 'lazy': config")
    Traceback (most recent call last):
    ...
    amdinfer.errors.OptionError: load 'lazy': config: option 'max_delay_ms' got inf, expected a finite number \
in 0..60000 (milliseconds)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError
from ..preprocess._image_header import MAX_IMAGE_PIXELS_BOUND

__all__ = [
    "BOUNDS",
    "FLAG",
    "MAX_BUCKETS",
    "Bound",
    "check",
    "check_buckets",
    "check_finite",
    "check_flag",
    "check_options",
    "max_workers_per_device",
]

#: ``where`` of a value given as a command-line flag (:func:`check` names the flag then)
FLAG = "flag"
#: the most batch sizes ``batch_buckets`` may list
MAX_BUCKETS = 64
#: the most server processes per device, whatever the host
_MAX_PROCESSES_PER_DEVICE = 64
_PER_CORE = 4


def max_workers_per_device(cores: int | None = None) -> int:
    """The most server processes per device: ``min(64, 4 x usable cores)``.

    Example:
        >>> max_workers_per_device(2), max_workers_per_device(128)
        (8, 64)
    """
    from ..pipeline._executor import default_threads

    cores = default_threads() if cores is None else cores
    return max(1, min(_MAX_PROCESSES_PER_DEVICE, _PER_CORE * cores))


def _workers_note() -> str:
    from ..pipeline._executor import default_threads

    return (
        f"{_PER_CORE} per usable core, {default_threads()} here, and {_MAX_PROCESSES_PER_DEVICE} at most: each "
        "process holds its own engine and threads"
    )


@dataclass(frozen=True)
class Bound:
    """One served number: its type and accepted range (``high`` may depend on the host).

    Example:
        >>> BOUNDS["max_batch_size"].accepted(), BOUNDS["max_batch_size"].flag
        ('an int in 1..4096 (rows per engine call)', '--max-batch-size')
    """

    option: str
    kind: type  # int or float
    low: float
    high: float | Callable[[], float]
    unit: str = ""
    note: Callable[[], str] | None = None

    @property
    def flag(self) -> str:
        """The command line's flag of the option (``--max-delay-ms``)."""
        return "--" + self.option.replace("_", "-")

    def upper(self) -> float:
        return self.high() if callable(self.high) else self.high

    def accepted(self) -> str:
        high = self.upper()
        what = "an int" if self.kind is int else "a finite number"
        low_s, high_s = (f"{v:g}" if self.kind is float else str(int(v)) for v in (self.low, high))
        extra = [self.unit] if self.unit else []
        if self.note is not None:
            extra.append(self.note())
        return f"{what} in {low_s}..{high_s}" + (f" ({'; '.join(extra)})" if extra else "")


#: every number the server takes, by option name (see the module's text for why each bound)
BOUNDS: dict[str, Bound] = {
    b.option: b
    for b in (
        Bound("max_delay_ms", float, 0, 60_000, "milliseconds"),
        Bound("max_batch_size", int, 1, 4096, "rows per engine call"),
        Bound("batch_bucket", int, 1, 4096, "rows: the max_batch_size cap"),
        Bound("workers_per_device", int, 1, max_workers_per_device, note=_workers_note),
        Bound("pipeline_threads", int, 1, 256, "threads per server process"),
        Bound("max_image_pixels", int, 1, MAX_IMAGE_PIXELS_BOUND, "pixels per image"),
        Bound("max_request_bytes", int, 1024, 2**31 - 1, "bytes, below 2 GiB: gRPC's message limit is a C int"),
        Bound("verify_sample", float, 0, 1, "a fraction of requests"),
        Bound("http_port", int, 0, 65535, "a TCP port"),
        Bound("grpc_port", int, 0, 65535, "a TCP port"),
    )
}


def _got(option: str, where: str) -> str:
    """The start of an error about ``option`` given in ``where``: ``max_delay_ms: got``, ``--max-delay-ms: got``
    or ``models.toml: [models.x]: option 'max_delay_ms' got``."""
    if where == FLAG:
        return "--" + option.replace("_", "-") + ": got"
    return f"{where}: option {option!r} got" if where else f"{option}: got"


def check(option: str, value: Any, where: str = "") -> Any:
    """``value`` of ``option`` as its type (int or float), if it is one, finite and within :data:`BOUNDS`.

    Args:
        option: a key of :data:`BOUNDS`.
        value: what was given (NumPy scalars are taken; a bool is not a number here).
        where: where it came from, named in the error: ``""`` (a keyword argument: ``max_delay_ms: ...``),
            :data:`FLAG` (``--max-delay-ms: ...``), or a table (``models.toml: [models.x]: option ...``).

    Raises:
        OptionError: a value of another type, not finite, or out of bounds.

    Example:
        >>> check("max_batch_size", True)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: max_batch_size: got True, expected an int in 1..4096 (rows per engine call)
    """
    bound = BOUNDS[option]
    ints = (int, np.integer)
    numbers = (int, float, np.integer, np.floating)
    v: Any = None
    if isinstance(value, ints if bound.kind is int else numbers) and not isinstance(value, (bool, np.bool_)):
        try:
            v = bound.kind(value)
        except OverflowError:  # an int past float's range
            v = None
    if v is None or (isinstance(v, float) and not math.isfinite(v)) or not bound.low <= v <= bound.upper():
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise OptionError(f"{_got(bound.option, where)} {shown}, expected {bound.accepted()}")
    return v


def check_flag(option: str, text: str) -> Any:
    """A command-line flag's text parsed as ``option``'s type and :func:`check`-ed (the error shows the text).

    Example:
        >>> check_flag("max_delay_ms", "nan")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --max-delay-ms: got 'nan', expected a finite number in 0..60000 (milliseconds)
    """
    bound = BOUNDS[option]
    try:
        value: Any = bound.kind(text.strip())
        return check(option, value, FLAG)
    except (ValueError, OverflowError, OptionError):
        raise OptionError(f"{_got(option, FLAG)} {text!r}, expected {bound.accepted()}") from None


def check_buckets(value: Any, where: str = "") -> tuple[int, ...]:
    """``batch_buckets``: 1 to :data:`MAX_BUCKETS` ints, each :func:`check`-ed as ``batch_bucket``.

    Example:
        >>> check_buckets([8, 16])
        (8, 16)
        >>> check_buckets([1073741824], "models.toml: [models.x]")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: models.toml: [models.x]: option 'batch_buckets' got 1073741824 (item 0), \
expected an int in 1..4096 (rows: the max_batch_size cap)
    """
    got = _got("batch_buckets", where)
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__"):
        raise OptionError(f"{got} {str(value)[:80]!r}, expected a list of 1 to {MAX_BUCKETS} batch sizes")
    items = list(value)
    if not 1 <= len(items) <= MAX_BUCKETS:
        raise OptionError(
            f"{got} {len(items)} batch sizes, expected 1 to {MAX_BUCKETS} (each is a shape the engine "
            "compiles and warms up)"
        )
    out = []
    for i, b in enumerate(items):
        try:
            out.append(check("batch_bucket", b))
        except OptionError:
            raise OptionError(f"{got} {b!r} (item {i}), expected {BOUNDS['batch_bucket'].accepted()}") from None
    return tuple(out)


def check_options(options: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``options`` with each bounded one (a key of :data:`BOUNDS`, or ``batch_buckets``) checked; others as given.

    Example:
        >>> check_options({"max_batch_size": 8, "precision": "fp16", "batch_buckets": [1, 8]})
        {'max_batch_size': 8, 'precision': 'fp16', 'batch_buckets': (1, 8)}
    """
    out = dict(options)
    for key, value in options.items():
        if key == "batch_buckets":
            out[key] = check_buckets(value, where)
        elif key in BOUNDS:
            out[key] = check(key, value, where)
    return out


def check_finite(value: Any, where: str, path: str = "") -> None:
    """Refuse a non-finite float anywhere in a parsed config value (nested lists and tables too).

    Example:
        >>> check_finite({"conf": [0.5, float("nan")]}, "load 'x': config", "recipe_options")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: load 'x': config: option 'recipe_options.conf[1]' got nan, expected a finite number
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise OptionError(f"{where}: option {path!r} got {value!r}, expected a finite number")
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(v, where, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(v, where, f"{path}[{i}]")
