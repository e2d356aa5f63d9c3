"""Engine options shared by every command that loads a model: providers and their raw options, threads, graph
optimization, and the compiled-model cache switch (on by default on the command line).

Re-exported by :mod:`amdinfer.cli._common`.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import OptionError

__all__ = ["cache_options", "engine_options", "takes_option"]


def takes_option(backend: str, option: str) -> bool:
    """Whether ``backend`` (``auto``: any backend it tries) takes ``option``; unknown when it cannot be imported."""
    import inspect

    from ..engines.registry import auto_order, get_backend

    for entry in auto_order() if backend == "auto" else [get_backend(backend)]:
        try:
            params = inspect.signature(entry.resolve()).parameters
        except (ImportError, TypeError, ValueError):
            return True  # amdinfer.load says why it cannot run
        if option in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return True
    return False


def cache_options(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    """``use_cache=``/``cache_dir=`` for ``backend`` from ``--cache/--no-cache/--cache-dir`` (on by default).

    Raises:
        OptionError: ``--cache-dir`` with ``--no-cache``, or with a backend that keeps no compiled artefact.

    Example:
        >>> cache_options(argparse.Namespace(cache=None, cache_dir=None), "ort")
        {'use_cache': True}
        >>> cache_options(argparse.Namespace(cache=None, cache_dir="c"), "reference")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --cache-dir 'c': backend 'reference' keeps no compiled artefact, so it has no...
    """
    use, folder = getattr(args, "cache", None), getattr(args, "cache_dir", None)
    if folder is not None and use is False:
        raise OptionError(f"--cache-dir {folder!r}: given together with --no-cache; drop one of them")
    if not takes_option(backend, "use_cache"):
        if folder is not None:
            raise OptionError(
                f"--cache-dir {folder!r}: backend {backend!r} keeps no compiled artefact, so it has no cache; "
                "drop --cache-dir"
            )
        return {}
    if use is False:
        return {"use_cache": False}
    return {"use_cache": True, **({"cache_dir": folder} if folder is not None else {})}


def _provider_list(args: argparse.Namespace, backend: str) -> list[Any] | None:
    """``--providers`` with ``--provider-option KEY=VALUE`` attached to the first one (ORT's ``(name, {k: v})``)."""
    names = [p.strip() for p in (getattr(args, "providers", None) or "").split(",") if p.strip()]
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
    """``amdinfer.load`` options from the engine group (providers, threads, graph optimization, transformer fusion,
    cache)."""
    options: dict[str, Any] = {}
    providers = _provider_list(args, backend)
    if providers is not None:
        options["providers"] = providers
        backend = "ort" if backend == "auto" else backend
    for flag, key in (("target", "target"), ("threads", "threads"), ("inter_op_threads", "inter_op_threads"),
                      ("graph_optimization", "graph_optimization")):  # fmt: skip
        if getattr(args, flag, None):
            options[key] = getattr(args, flag)
    fusion = getattr(args, "transformer_fusion", None)
    if fusion is not None:
        options["transformer_fusion"] = {"on": True, "off": False}.get(fusion, fusion)
    return {**options, **cache_options(args, backend)}
