"""Engine options shared by every command that loads a model, derived from the backends' option records.

Each field of a backend's record (:class:`~amdinfer.engines.ort.OrtOptions`, ...) that carries a
:class:`~amdinfer.engines.Flag` is one flag: ``--`` and its name with dashes, its help the field's help, its choices
and type the flag's (:func:`add_engine_args`); :func:`engine_options` turns the given flags back into
``amdinfer.load`` keywords. Two flags have command-line forms of their own: ``--provider-option`` (raw options of
the first provider) and the compiled-model cache (``--cache/--no-cache/--cache-dir``, on by default here).

Re-exported by :mod:`amdinfer.cli._common`.
"""

from __future__ import annotations

import argparse
from dataclasses import Field
from typing import Any

from ..errors import OptionError

__all__ = ["add_engine_args", "cache_options", "engine_options", "takes_option"]


def takes_option(backend: str, option: str) -> bool:
    """Whether ``backend`` (``auto``: any backend it tries) takes ``option``; unknown when it cannot be imported.

    Example:
        >>> takes_option("reference", "cache"), takes_option("ort", "cache")
        (False, True)
    """
    from ..engines.registry import auto_order, get_backend

    for entry in auto_order() if backend == "auto" else [get_backend(backend)]:
        try:
            names = entry.option_names()
        except ImportError:
            return True  # amdinfer.load says why it cannot run
        if names is None or option in names:
            return True
    return False


def _flagged() -> list[tuple[Field[Any], list[str]]]:
    """The record fields with a flag, once each, with the backends that take them (registry order)."""
    from ..engines import EngineOptions
    from ..engines._options import flagged_fields
    from ..engines.registry import backend_entries

    records: list[tuple[str, type[EngineOptions]]] = [("every backend", EngineOptions)]
    for entry in backend_entries():
        try:
            record = entry.options_type()
        except ImportError:
            continue
        if record is not None:
            records.append((entry.name, record))
    return flagged_fields(records)


def _argparse_type(flag: Any) -> Any:
    """The argparse type of a :class:`~amdinfer.engines.Flag`: its kind, its least value, comma lists."""

    def parse(text: str) -> Any:
        if flag.split:
            items = [p.strip() for p in text.split(",") if p.strip()]
            if not items:
                raise argparse.ArgumentTypeError(f"got {text!r}, expected a comma-separated list")
            return items
        try:
            value = flag.kind(text)
        except ValueError:
            what = getattr(flag.kind, "__name__", "a value")
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {what}") from None
        if flag.minimum is not None and value < flag.minimum:
            raise argparse.ArgumentTypeError(f"got {value}, expected an int >= {flag.minimum}")
        return value

    parse.__name__ = getattr(flag.kind, "__name__", "value")  # argparse names the type in its messages
    return parse


def add_engine_args(g: Any) -> None:
    """One flag per record field with a :class:`~amdinfer.engines.Flag`: ``--device``, ``--precision``,
    ``--providers``, ``--target``, ``--threads``, ... (the shared fields default to the record's default, the
    others to "not given")."""
    for f, owners in _flagged():
        flag = f.metadata["flag"]
        shared = "every backend" in owners
        default = f.default if shared else None
        given = f"; default: {f.default}" if f.default not in (None, ()) else ""
        shown = f" (default: {default})" if shared else f" ({', '.join(owners)}{given})"
        g.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=None if flag.choices else _argparse_type(flag),
            choices=list(flag.choices) if flag.choices else None,
            default=default,
            metavar=flag.metavar,
            help=(f.metadata["help"] + shown).replace("%", "%%"),
        )


def cache_options(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """``cache=``/``cache_dir=`` for ``backend`` from ``--cache/--no-cache/--cache-dir`` (on by default).

    Raises:
        OptionError: ``--cache-dir`` with ``--no-cache``, or with a backend that keeps no compiled artefact.

    Example:
        >>> cache_options(argparse.Namespace(cache=None, cache_dir=None), "ort")
        {'cache': True}
        >>> cache_options(argparse.Namespace(cache=None, cache_dir="c"), "reference")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --cache-dir 'c': backend 'reference' keeps no compiled artefact, so it has no...
    """
    use, folder = getattr(args, "cache", None), getattr(args, "cache_dir", None)
    if folder is not None and use is False:
        raise OptionError(f"--cache-dir {folder!r}: given together with --no-cache; drop one of them")
    if not takes_option(backend, "cache"):
        if folder is not None:
            raise OptionError(
                f"--cache-dir {folder!r}: backend {backend!r} keeps no compiled artefact, so it has no cache; "
                "drop --cache-dir"
            )
        return {}
    if use is False:
        return {"cache": False}
    return {"cache": True, **({"cache_dir": folder} if folder is not None else {})}


def _provider_list(args: argparse.Namespace, backend: str) -> list[Any] | None:
    """``--providers`` with ``--provider-option KEY=VALUE`` attached to the first one (ORT's ``(name, {k: v})``)."""
    names = list(getattr(args, "providers", None) or [])
    raw = getattr(args, "provider_option", None) or []
    if raw and not names:
        raise OptionError(
            "--provider-option: applies to the first provider of --providers; give --providers "
            f"(e.g. --providers cpu --provider-option {raw[0]})"
        )
    if raw and backend not in ("auto", "ort"):
        raise OptionError(f"--provider-option: sets ONNX Runtime provider options; got --backend {backend}")
    options: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise OptionError(f"--provider-option: got {item!r}, expected KEY=VALUE (e.g. device_id=1)")
        if key.strip() in options:
            raise OptionError(f"--provider-option: {key.strip()!r} is given twice")
        options[key.strip()] = value.strip()
    if not names:
        return None
    return [(names[0], options), *names[1:]] if options else names


def engine_options(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """``amdinfer.load`` keywords from the engine flags that were given (the shared ``--device`` and
    ``--precision`` are passed by the caller), plus the cache's."""
    options: dict[str, Any] = {}
    for f, owners in _flagged():
        value = getattr(args, f.name, None)
        if "every backend" in owners or value is None:
            continue
        if f.name == "providers":
            options["providers"] = _provider_list(args, backend)
            backend = "ort" if backend == "auto" else backend
            continue
        options[f.name] = f.metadata["flag"].value(value)
    if getattr(args, "provider_option", None) and "providers" not in options:
        _provider_list(args, backend)  # raises: --provider-option needs --providers
    return {**options, **cache_options(args, backend)}
