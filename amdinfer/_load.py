"""``amdinfer.load``: one entry point that picks, builds and explains an engine.

The user's keywords become the chosen backend's option record (``OrtOptions``, ``MigraphxOptions``,
``ReferenceOptions``: :class:`~amdinfer.engines.EngineOptions` subclasses), built and validated once by the registry
(:meth:`BackendEntry.build <amdinfer.engines.registry.BackendEntry.build>`); the engine receives the record.
"""

from __future__ import annotations

import difflib
import importlib.util
import logging
import os
from collections.abc import Sequence
from typing import Any, TypeGuard

from .engines._options import did_you_mean
from .engines.base import Engine
from .engines.registry import BackendEntry, auto_order, backend_entries, get_backend
from .errors import BackendUnavailableError, OptionError
from .model import ModelLike, ModelSource

__all__ = ["load"]

log = logging.getLogger("amdinfer")


def load(
    model: ModelLike,
    backend: str | Engine = "auto",
    providers: Sequence[str] | None = None,
    device: int = 0,
    precision: str = "fp32",
    base_dir: str | os.PathLike | None = None,
    **options: Any,
) -> Engine:
    """Load a model on the best working backend, or on the one you name.

    Args:
        model: a path, serialized bytes, an ``onnx.ModelProto`` or a :class:`~amdinfer.model.ModelSource`; or a
            bundle folder (``amdinfer compile --bundle``, :mod:`amdinfer.bundle`), checked and loaded without compiling.
        backend: ``"auto"`` (MIGraphX native, then ONNX Runtime with MIGraphX EP -> ROCm EP -> CUDA EP ->
            CPU, each tried for real; what was passed over and why lands in ``engine.info.skipped``),
            a registered name (``"ort"``, ``"migraphx"``, ``"reference"``), or an :class:`Engine`
            instance, which is returned as is.
        providers: ONNX Runtime providers to use, in order (implies ``backend="ort"`` under auto). A
            provider you name that cannot run raises :class:`BackendUnavailableError`.
        device: GPU index.
        precision: ``"fp32"``, ``"fp16"``, ``"bf16"``, ``"int8"`` (needs a quantizer with
            calibration data) or ``"fp64"`` (reference engine).
        base_dir: the folder an in-memory model's (bytes, ``ModelProto``) external data is read from; see
            :meth:`ModelSource.from_any <amdinfer.model.ModelSource.from_any>`. Not needed for a path.
        **options: backend options, e.g. ``shapes=``, ``batch_buckets=``, ``cache_dir=``,
            ``quantizer=``, ``threads=``, ``target=`` (MIGraphX): the fields of the backend's option record
            (:class:`~amdinfer.engines.ort.OrtOptions`, :class:`~amdinfer.engines.migraphx.MigraphxOptions`,
            :class:`~amdinfer.engines.reference.ReferenceOptions`), where each is documented. An option the backend
            does not take is an :class:`~amdinfer.errors.OptionError` (also a ``TypeError``) naming it, the backend
            and the options it takes; the record is in ``engine.info.options``.

    Returns:
        A ready :class:`Engine`.

    Raises:
        BackendUnavailableError: the requested backend cannot run here (or, under auto, none can).
        ModelError: the model cannot be read or is invalid.
        OptionError: an unknown backend or option.

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"])
        >>> engine.info.backend, engine.info.providers
        ('ort', ['CPUExecutionProvider'])
    """
    if _is_bundle(model):  # a folder written by ``amdinfer compile --bundle``: loaded as built, never compiled
        from .bundle import load_bundle

        wanted = None if precision == "fp32" else precision
        return load_bundle(model, backend=str(backend), providers=providers, device=device, precision=wanted, **options)
    if isinstance(backend, Engine):
        if options or providers is not None or base_dir is not None:
            raise OptionError("backend: an Engine instance was given, so providers/options cannot apply to it")
        return backend
    if base_dir is not None:
        model = ModelSource.from_any(model, base_dir=base_dir)
    if not isinstance(backend, str):
        raise OptionError(f"backend: got {type(backend).__name__}, expected a backend name or an Engine instance")
    if precision == "int8" and options.get("quantizer") is None:
        raise OptionError(
            "precision='int8': no calibration data was given, and every backend needs it (uncalibrated int8 gives "
            "wrong answers); pass quantizer=Int8Quantizer(calibration=samples) (amdinfer.quantize), or to a recipe "
            "(amdinfer.yolo, classify, ocr, text.embed) calibration=[images or texts like yours]"
        )
    common = dict(device=device, precision=precision, **options)
    if providers is not None:
        common["providers"] = list(providers) if not isinstance(providers, str) else [providers]
    if backend == "auto" and providers is not None:
        backend = "ort"  # naming ONNX Runtime providers means ONNX Runtime
    if backend != "auto":
        entry = get_backend(backend)
        _check_options(common, _accepted([entry]), f"backend {entry.name!r}")
        return entry.build(model, _with_precision_quantizer(entry, common))

    return _load_auto(model, common)


def _is_bundle(model: object) -> TypeGuard[str | os.PathLike]:
    """Whether ``model`` names a bundle folder (a directory holding ``manifest.json``)."""
    if not isinstance(model, (str, os.PathLike)):
        return False
    return os.path.isdir(model) and os.path.isfile(os.path.join(model, "manifest.json"))


def _load_auto(model: ModelLike, options: dict[str, Any]) -> Engine:
    """``backend="auto"``: the first backend in :func:`auto_order` that takes ``options`` and loads the model.

    What was passed over and why lands in ``engine.info.skipped``; when none loads, the error lists them all.
    """
    _check_auto_options(options)
    source = ModelSource.from_any(model)
    skipped: dict[str, str] = {}
    for entry in auto_order():
        try:
            names = entry.option_names()
        except ImportError as exc:  # BackendUnavailableError included
            skipped[entry.name] = str(exc)
            continue
        unknown = [k for k in options if names is not None and k not in names]
        if unknown:
            skipped[entry.name] = f"does not take option(s) {unknown}"
            continue
        try:
            engine = entry.build(source, _with_precision_quantizer(entry, options))
        except BackendUnavailableError as exc:
            skipped[entry.name] = str(exc)
            log.info("backend %s passed over: %s", entry.name, exc)
            continue
        for name, why in skipped.items():
            engine.info.skipped.setdefault(name, why)
        return engine
    if skipped and all(why.startswith("does not take") for why in skipped.values()):
        given = sorted(k for k in options if k not in ("device", "precision"))  # every backend takes these two
        raise OptionError(
            f"options: no single backend takes all of {given}: " + "; ".join(f"{k} {v}" for k, v in skipped.items())
        )
    detail = "\n".join(f"  - {k}: {v}" for k, v in skipped.items())
    raise BackendUnavailableError(
        f"backend='auto': no backend could run this model:\n{detail}{_outside_auto()}", backend="auto"
    )


def _outside_auto() -> str:
    """What ``auto`` leaves out on purpose and how to go on, for its "no backend could run this model" error.

    Backends registered without an ``auto_priority`` (the NumPy reference: a slow checker) are never a silent
    fallback; the error names those that are ready here, so the user can pass one explicitly.
    """
    from ._support._install import pip_extra

    ready = [e for e in backend_entries() if e.auto_priority is None and e.run_diagnose().state == "ready"]
    lines = [""]
    if _onnxruntime_missing():  # the core install (numpy + onnx): the ONNX Runtime extra is what was left out
        lines.append(
            f"To run at speed, install ONNX Runtime: {pip_extra('cpu')}, or the [migraphx], [rocm] or [cuda] extra "
            "for a GPU."
        )
    for e in ready:
        what = f", {e.description}" if e.description else ""
        lines.append(
            f"Ready here but not part of backend='auto' (never a silent fallback): {e.name!r}{what}; "
            f"pass backend={e.name!r} to use it explicitly."
        )
    return "\n".join(lines)


def _onnxruntime_missing() -> bool:
    try:
        return importlib.util.find_spec("onnxruntime") is None
    except (ImportError, ValueError):  # a module blocked in sys.modules, a broken parent package
        return True


def _accepted(entries: Sequence[BackendEntry]) -> dict[str, tuple[str, ...] | None]:
    """The option names of each backend in ``entries`` (``None``: any), leaving out those that cannot import."""
    accepted: dict[str, tuple[str, ...] | None] = {}
    for entry in entries:
        try:
            accepted[entry.name] = entry.option_names()
        except ImportError:
            continue
    return accepted


def _check_auto_options(options: dict[str, Any]) -> None:
    """Under ``backend="auto"``: an option that no registered backend takes is a typo, reported before loading.

    Backends whose module cannot be imported are left out of the check (their options are unknown), so a
    backend that cannot load never turns a valid option into an error.
    """
    _check_options(options, _accepted(auto_order()), "options")


def _check_load_options(options: dict[str, Any], backend: Any, also: Sequence[str] = ()) -> None:
    """What :func:`load` checks of ``options`` before anything loads, for a caller that passes them on (a recipe's
    ``**load_options``); ``also``: the caller's own argument names, offered for a misspelling too.

    Example:
        >>> _check_load_options({"calibratoin": []}, "ort", also=["calibration"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: backend 'ort': unknown option(s) ['calibratoin'] (did you mean 'calibration'?)...
    """
    if not isinstance(backend, str):
        return  # an Engine instance: load says what cannot apply to it
    given = {k: v for k, v in options.items() if k != "base_dir"}
    if backend == "auto" and given.get("providers") is not None:
        backend = "ort"  # as load: naming ONNX Runtime providers means ONNX Runtime
    if backend == "auto":
        _check_options(given, _accepted(auto_order()), "options", also)
    else:
        _check_options(given, _accepted([get_backend(backend)]), f"backend {backend!r}", also)


def _check_options(
    options: dict[str, Any], accepted: dict[str, tuple[str, ...] | None], what: str, also: Sequence[str] = ()
) -> None:
    """A misspelt option is an :class:`OptionError` with the closest valid names (difflib), not the whole list.

    Example:
        >>> _check_options({"use_cache": 0}, {"ort": ("cache", "threads")}, "options")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: options: unknown option(s) ['use_cache'] (did you mean 'cache'?); the options ...
    """
    if not accepted or any(names is None for names in accepted.values()):
        return  # none importable, or a factory taking **kwargs: any name may be right
    valid = sorted(set().union(*(names for names in accepted.values() if names is not None)))
    unknown = [k for k in options if k not in valid]
    if not unknown:
        return
    names = sorted({*valid, *also})
    hint = did_you_mean(unknown, names)
    if not hint:
        close = sorted({c for k in unknown for c in difflib.get_close_matches(k, names, n=3, cutoff=0.4)})
        hint = f" (the closest valid names: {', '.join(close)})" if close else ""
    raise OptionError(f"{what}: unknown option(s) {unknown}{hint}; {_documented(list(accepted))}")


def _documented(backends: list[str]) -> str:
    """Where the options of ``backends`` are documented: their option records (``docs/engines.md``)."""
    records = []
    for name in backends:
        record = get_backend(name).options_type()
        if record is not None:
            records.append(f"{record.__module__.replace('._options', '')}.{record.__qualname__}")
    where = f" ({', '.join(records)})" if records else ""
    return f"the options are documented with each backend's record{where} and in docs/engines.md"


def _with_precision_quantizer(entry: BackendEntry, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` plus ``precision_quantizer=`` for a backend that takes it: what a bare ``precision=``
    means where the runtime rewrites the model, decided here, above the engines (they never import
    :mod:`amdinfer.quantize`)."""
    names = entry.option_names()
    if names is None or "precision_quantizer" not in names or options.get("precision_quantizer") is not None:
        return options
    if str(options.get("precision", "")).lower() not in ("fp16", "float16", "half"):
        return options  # only a bare fp16 asks for it (a quantizer's precision is the quantizer's own)
    from .quantize._fp16 import precision_quantizer

    return {**options, "precision_quantizer": precision_quantizer}
