"""Typed option records: one frozen dataclass per backend, each option typed, defaulted and documented once.

A backend's options are the fields of an :class:`EngineOptions` subclass, each a ``dataclasses.field`` with its
default and :func:`option_doc` metadata (one line of help, details, and how it appears on the command
line). Everything else is derived from
the fields: the record's ``Attributes:`` documentation (:func:`document_options`), the keywords
:func:`amdinfer.load` takes for that backend and the error naming a misspelt one (:meth:`EngineOptions.from_keywords`),
what ``engine.info.options`` shows (:meth:`EngineOptions.describe`) and the ``amdinfer`` command's engine flags
(:func:`flagged_fields`). A record is validated as it is built (``__post_init__``), so a record is always valid.

Example:
    >>> opts = EngineOptions.from_keywords({"batch_buckets": [8, 1]}, backend="toy")
    >>> opts.batch_buckets, opts.keywords()
    ((1, 8), {'batch_buckets': (1, 8)})
    >>> EngineOptions.from_keywords({"batch_bucket": [1]}, backend="toy")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    amdinfer.errors.OptionError: backend 'toy': unknown option(s) ['batch_bucket'] (did you mean 'batch_buckets'?); ...
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, TypeVar

from .._support._quant_protocol import Quantizer
from .._support._validate import check_int
from ..errors import OptionError
from ..types import PRECISIONS, ShapeBounds, normalize_precision, parse_shapes
from ._new_shapes import ON_NEW_SHAPE, check_on_new_shape

__all__ = [
    "EngineOptions",
    "Flag",
    "did_you_mean",
    "document_options",
    "flagged_fields",
    "option_doc",
    "unknown_option_error",
]

R = TypeVar("R", bound="EngineOptions")
T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Flag:
    """How an option appears on the ``amdinfer`` command line: ``--`` and its name with dashes.

    Attributes:
        kind: what the text is turned into (``int``, ``str``); ``split=True`` makes it a comma-separated list.
        minimum: the least value of an ``int`` flag (checked by the command line, exit 2).
        choices: the words the flag takes (``None``: any).
        values: word -> option value (``{"on": True, "off": False}``); other words pass as they are.
        metavar: the placeholder in ``--help``.
        split: a comma-separated list (``--providers migraphx,cpu``).

    Example:
        >>> Flag(int, minimum=1).minimum
        1
    """

    kind: Callable[[str], Any] = str
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    values: Mapping[str, Any] = field(default_factory=dict)
    metavar: str | None = None
    split: bool = False

    def value(self, word: Any) -> Any:
        """The option value for a parsed word (``values`` applied; lists item by item)."""
        if not self.values:
            return word
        if isinstance(word, list):
            return [self.values.get(w, w) for w in word]
        return self.values.get(word, word)


def option_doc(help: str, details: str = "", *, flag: Flag | None = None) -> dict[str, Any]:
    """A record field's ``metadata``: one line of help (also the command line's), details, and its flag.

    Example:
        >>> @dataclass(frozen=True)
        ... class Opts:
        ...     n: int = field(default=1, metadata=option_doc("how many"))
        >>> fields(Opts)[0].metadata["help"]
        'how many'
    """
    return {"help": help, "details": details, "flag": flag}


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def document_options(cls: T) -> T:
    """Append an ``Attributes:`` section, written from the fields' help, details and defaults, to ``cls.__doc__``.

    The section goes before the docstring's ``Example:``, so each option is documented once, where it is declared.

    Example:
        >>> "batch_buckets (default ``None``)" in EngineOptions.__doc__
        True
    """
    rows = []
    for f in fields(cls):
        text, details = f.metadata.get("help", ""), f.metadata.get("details", "")
        if details:
            text += (" " if details.startswith("(") else ". ") + details
        rows.append(f"    {f.name} (default ``{_default(f)!r}``): {text}")
    doc = cls.__doc__ or ""
    head, sep, tail = doc.partition("\n    Example:")
    cls.__doc__ = head.rstrip() + "\n\n    Attributes:\n" + "\n".join(f"    {r}" for r in rows) + "\n" + sep + tail
    return cls


def did_you_mean(unknown: Sequence[str], valid: Sequence[str]) -> str:
    """`` (did you mean 'threads'?)`` for each misspelt option with a close valid name.

    Example:
        >>> did_you_mean(["thread"], ["threads", "device"])
        " (did you mean 'threads'?)"
    """
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(k, sorted(valid), n=1, cutoff=0.6)
        if close:
            hints.append((k, close[0]))
    if not hints:
        return ""
    if len(unknown) == 1:
        return f" (did you mean {hints[0][1]!r}?)"
    return " (did you mean " + ", ".join(f"{good!r} for {bad!r}" for bad, good in hints) + "?)"


def unknown_option_error(backend: str, unknown: Sequence[str], valid: Sequence[str]) -> OptionError:
    """The error for options a backend does not take: names them, the backend and the options it takes.

    Example:
        >>> str(unknown_option_error("ort", ["thread"], ["threads"]))
        "backend 'ort': unknown option(s) ['thread'] (did you mean 'threads'?); it takes ['threads']"
    """
    return OptionError(
        f"backend {backend!r}: unknown option(s) {list(unknown)}{did_you_mean(unknown, valid)}; "
        f"it takes {sorted(valid)}"
    )


def _shown(value: Any) -> Any:
    """A JSON-friendly form of an option value (objects by their type, callables by their qualified name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, ShapeBounds):
        return {"min": list(value.min), "max": list(value.max), "opt": None if value.opt is None else list(value.opt)}
    if isinstance(value, Mapping):
        return {str(k): _shown(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_shown(v) for v in value]
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return type(value).__name__


@dataclass(frozen=True)
class EngineOptions:
    """The options every engine takes; each backend's record (``OrtOptions``, ...) extends it with its own.

    Build one from keywords with :meth:`from_keywords` (what :func:`amdinfer.load` does) or directly; either way
    it is validated as it is built, and an engine given a record uses it as it is.

    Example:
        >>> EngineOptions(precision="float16", batch_buckets=[4, 1, 4]).precision, EngineOptions().batch_buckets
        ('fp16', None)
    """

    precision: str = field(
        default="fp32",
        metadata=option_doc(
            "the precision to run at: fp32, fp16, bf16, int8 (with a calibrated quantizer) or fp64 (reference)",
            "(aliases such as ``float16`` accepted; a ``quantizer=``'s own precision wins).",
            flag=Flag(choices=PRECISIONS),
        ),
    )
    device: int = field(default=0, metadata=option_doc("the GPU index", flag=Flag(int, minimum=0)))
    shapes: Mapping[str, ShapeBounds] = field(
        default_factory=dict,
        metadata=option_doc(
            "per-input shape bounds",
            "``{name: [min_shape, max_shape(, opt_shape)]}`` or one static shape per input (kept as "
            ":class:`~amdinfer.types.ShapeBounds`; ``None``: none).",
        ),
    )
    batch_buckets: tuple[int, ...] | None = field(
        default=None,
        metadata=option_doc(
            "batch sizes inputs are padded to", "(kept sorted; a batch above the largest is split; ``None``: none)."
        ),
    )
    on_new_shape: str = field(
        default="compile",
        metadata=option_doc(
            "what a shape the engine was not prepared for does: compile (on first use), pad (to a prepared shape) "
            "or error",
            "(prepared: ``batch_buckets``, static ``shapes=``, warmed shapes; recorded in "
            "``info.settings['new_shapes']``; see docs/engines.md).",
            flag=Flag(choices=ON_NEW_SHAPE),
        ),
    )
    quantizer: Quantizer | None = field(
        default=None,
        metadata=option_doc(
            "a quantizer (amdinfer.quantize: Fp16Quantizer, Int8Quantizer, AutoMixedPrecision, or any object of its "
            "protocol)",
            "mapped to the backend's own knobs where it has them, else the model it rewrites is run.",
        ),
    )

    def __post_init__(self) -> None:
        self._set("precision", normalize_precision(self.precision))
        self._set("device", check_int("device", self.device, minimum=0, what="a GPU index >= 0"))
        self._set("shapes", parse_shapes(self.shapes))
        self._set("batch_buckets", _parse_buckets(self.batch_buckets))
        self._set("on_new_shape", check_on_new_shape(self.on_new_shape))
        if self.quantizer is not None and not isinstance(self.quantizer, Quantizer):
            raise OptionError(
                f"quantizer: got a {type(self.quantizer).__name__}, expected an amdinfer.quantize.Quantizer "
                "(Fp16Quantizer, Int8Quantizer, AutoMixedPrecision, or an object with precision, describe, quantize, "
                "calibration_feeds and settings)"
            )

    def _set(self, name: str, value: Any) -> None:
        """Store a normalized value while the record is built (the record is frozen afterwards)."""
        object.__setattr__(self, name, value)

    @property
    def run_precision(self) -> str:
        """The precision the engine runs at: the quantizer's when one is given, else :attr:`precision`."""
        q = getattr(self.quantizer, "precision", None)
        return normalize_precision(q) if isinstance(q, str) else self.precision

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The keywords this record takes, sorted.

        Example:
            >>> EngineOptions.option_names()
            ('batch_buckets', 'device', 'on_new_shape', 'precision', 'quantizer', 'shapes')
        """
        return tuple(sorted(f.name for f in fields(cls) if f.init))

    @classmethod
    def from_keywords(cls: type[R], keywords: Mapping[str, Any], *, backend: str) -> R:
        """The record for ``backend`` from a user's keywords; an unknown keyword is an :class:`~amdinfer.OptionError`.

        Raises:
            OptionError: a keyword the record has no field for (named, with the closest field and every field), or
                a value that does not validate.

        Example:
            >>> EngineOptions.from_keywords({"device": 1}, backend="toy").device
            1
        """
        names = cls.option_names()
        unknown = [k for k in keywords if k not in names]
        if unknown:
            raise unknown_option_error(backend, unknown, names)
        return cls(**keywords)

    def keywords(self) -> dict[str, Any]:
        """The keywords that differ from the defaults: ``from_keywords(r.keywords(), ...) == r``.

        Example:
            >>> EngineOptions(device=2).keywords()
            {'device': 2}
        """
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init and getattr(self, f.name) != _default(f)}

    def describe(self, *, changed_only: bool = False) -> dict[str, Any]:
        """Every option (or only those not at their default) in a JSON-friendly form, as ``engine.info`` shows them.

        Example:
            >>> EngineOptions(batch_buckets=[2]).describe(changed_only=True)
            {'batch_buckets': [2]}
        """
        given = self.keywords() if changed_only else {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return {k: _shown(v) for k, v in given.items()}


document_options(EngineOptions)


def _parse_buckets(buckets: Any) -> tuple[int, ...] | None:
    if buckets is None:
        return None
    try:
        out = tuple(sorted({int(b) for b in buckets}))
    except (TypeError, ValueError):
        raise OptionError(f"batch_buckets: got {buckets!r}, expected a list of positive ints") from None
    if not out or out[0] < 1:
        raise OptionError(f"batch_buckets: got {buckets!r}, expected a non-empty list of positive ints")
    return out


def flagged_fields(records: Sequence[tuple[str, type[EngineOptions]]]) -> list[tuple[Field[Any], list[str]]]:
    """The fields that have a command-line :class:`Flag`, once each, with the backends that take them.

    ``records`` is ``(backend, record type)`` in registry order; shared fields (:class:`EngineOptions`) come first.

    Example:
        >>> [(f.name, owners) for f, owners in flagged_fields([("toy", EngineOptions)])]
        [('precision', ['toy']), ('device', ['toy']), ('on_new_shape', ['toy'])]
    """
    out: dict[str, tuple[Field[Any], list[str]]] = {}
    for backend, record in records:
        for f in fields(record):
            if f.metadata.get("flag") is None:
                continue
            out.setdefault(f.name, (f, []))[1].append(backend)
    return list(out.values())
