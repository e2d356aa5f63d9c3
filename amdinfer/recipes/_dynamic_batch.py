"""The recipes' ``dynamic_batch``: a model exported with a fixed batch of 1, made batch-dynamic when proven.

A batch-1 export runs one engine call (and one host round trip) per image: on an H200 the trained YOLOv8n as
Ultralytics exports it ran ``map`` at 234 pages/s, 0.34x its batch-1 engine, and batch-dynamic at batch 64 about
1,400/s. :func:`load_engine` loads the recipe's engine and, as ``dynamic_batch`` says, rewrites the model's batch
axis first (:func:`~amdinfer._support._dynamic_batch.make_batch_dynamic`, proven by
:func:`~amdinfer._support._dynamic_batch.prove_batch_dynamic` on ONNX Runtime's CPU EP, the verdict cached by the
model's hash):

* ``"auto"`` (the default): on an accelerator (the engine's ``info.device`` is not the CPU), a model whose batch
  axis is fixed at 1 is rewritten when proven, and the engine loaded again from the rewrite; ``map`` and
  ``run_batch`` then batch by the automatic size. On the CPU the model is kept (batch 1 is fastest there).
* ``True``: rewrite (on any device) or raise :class:`~amdinfer.errors.ModelError` with the proof's reason.
* ``False``: never.

What happened is in ``engine.info.settings["dynamic_batch"]`` (``{"applied": bool, "why": str}``; the fused
engine's too) and logged once at INFO (logger ``amdinfer.recipes``); a refusal's reason is also in the hint
the pipelines log once on an accelerator (:func:`~amdinfer.pipeline._auto.hint_fixed`), with how to export a
dynamic batch.

Example:
    >>> from amdinfer.testing.models import yolov8
    >>> from amdinfer.model import ModelSource
    >>> m = yolov8(image_size=64, num_classes=2)
    >>> for vi in list(m.graph.input) + list(m.graph.output):
    ...     vi.type.tensor_type.shape.dim[0].dim_value = 1
    >>> engine = load_engine(ModelSource(m), True, "auto", {"providers": ["CPUExecutionProvider"]})
    >>> engine.inputs[0].shape[0], engine.info.settings["dynamic_batch"]["applied"]
    ('N', True)
    >>> engine.close()
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import ModelError, OptionError
from ..model import ModelLike, ModelSource

__all__ = ["check_dynamic_batch", "load_engine"]

log = logging.getLogger("amdinfer.recipes")

KEY = "dynamic_batch"


def check_dynamic_batch(value: Any) -> None:
    """Refuse a ``dynamic_batch`` other than ``"auto"``, ``True`` or ``False``.

    Example:
        >>> check_dynamic_batch("yes")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: dynamic_batch: got 'yes', expected 'auto', True or False
    """
    if value is not True and value is not False and not (isinstance(value, str) and value == "auto"):
        raise OptionError(f"dynamic_batch: got {value!r}, expected 'auto', True or False")


def _fixed(source: ModelSource) -> int | None:
    shape = source.inputs[0].shape if source.inputs else ()
    first = shape[0] if shape else None
    return int(first) if isinstance(first, int) and not isinstance(first, bool) else None


def _record(engine: Any, applied: bool, why: str, *, announce: bool = True) -> Any:
    settings = getattr(getattr(engine, "info", None), "settings", None)
    if isinstance(settings, dict):
        settings[KEY] = {"applied": applied, "why": why}
    if announce:
        log.info("dynamic_batch: %s: %s", "rewritten" if applied else "kept as exported", why)
    return engine


def carry_record(source: Any, target: Any) -> None:
    """Copy ``source`` engine's ``settings["dynamic_batch"]`` to ``target``'s (the fused engine of the recipe).

    Example:
        >>> from types import SimpleNamespace as NS
        >>> a, b = NS(info=NS(settings={KEY: {"applied": True, "why": "x"}})), NS(info=NS(settings={}))
        >>> carry_record(a, b); b.info.settings
        {'dynamic_batch': {'applied': True, 'why': 'x'}}
    """
    record = getattr(getattr(source, "info", None), "settings", {}).get(KEY)
    settings = getattr(getattr(target, "info", None), "settings", None)
    if record is not None and isinstance(settings, dict):
        settings.setdefault(KEY, dict(record))


def _verdict(source: ModelSource, load: dict[str, Any]) -> Any:
    from .._support._dynamic_batch import batch_dynamic_verdict

    cache = load.get("cache", True) is not False
    return batch_dynamic_verdict(source, cache_dir=load.get("cache_dir"), cache=cache)


def load_engine(model: ModelLike, choice: Any, backend: str, load: dict[str, Any]) -> Any:
    """The recipe's engine for ``model`` (read once), its batch axis rewritten as ``choice`` (``dynamic_batch``)
    says; see the module. ``load``: :func:`amdinfer.load`'s other arguments (``base_dir`` is taken from it).

    Raises:
        ModelError: ``choice=True`` and the model's batch cannot be made dynamic (the reason), or the model itself.
        OptionError: ``batch_buckets`` on a fixed-batch model that stays fixed.
    """
    from .._load import load as load_model
    from ..pipeline._auto import on_accelerator
    from ..pipeline.fuse._model import check_fixed_buckets

    check_dynamic_batch(choice)
    if not isinstance(backend, str):  # an Engine passed in runs as it is (never closed or reloaded here)
        return load_model(model, backend=backend, **load)
    source = (
        model if isinstance(model, ModelSource) else ModelSource.from_any(model, base_dir=load.pop("base_dir", None))
    )
    fixed = _fixed(source)
    if fixed is None:
        return _record(
            load_model(source, backend=backend, **load), False, "the model's batch axis is dynamic", announce=False
        )
    if fixed != 1 or choice is False:
        why = (
            "dynamic_batch=False"
            if choice is False
            else f"the batch axis is fixed at {fixed}; the rewrite takes batch 1"
        )
        if choice is True:
            raise ModelError(f"dynamic_batch=True: cannot make the model's batch dynamic: {why}")
        return _record(load_model(source, backend=backend, **load), False, why)
    if choice is True:
        verdict, rewritten = _verdict(source, load)
        if not verdict.applied:
            raise ModelError(f"dynamic_batch=True: cannot make the model's batch dynamic: {verdict.why}")
        return _record(load_model(source.derived(rewritten, check=False), backend=backend, **load), True, verdict.why)
    # "auto": the device decides, so load first; buckets other than 1 cannot apply to the batch-1 model itself
    buckets = [int(b) for b in load.get("batch_buckets") or ()]
    first_load = {k: v for k, v in load.items() if k != "batch_buckets"} if set(buckets) - {1} else load
    engine = load_model(source, backend=backend, **first_load)
    try:
        if not on_accelerator(engine.info.device):
            check_fixed_buckets(1, buckets)
            return _record(engine, False, "on the CPU the batch-1 model is kept (batch 1 is fastest there)")
        verdict, rewritten = _verdict(source, load)
        if not verdict.applied:
            check_fixed_buckets(1, buckets)
            return _record(engine, False, verdict.why)
    except BaseException:
        engine.close()
        raise
    engine.close()
    why = f"on {engine.info.device}: the batch axis fixed at 1 is made dynamic ({verdict.why})"
    return _record(load_model(source.derived(rewritten, check=False), backend=backend, **load), True, why)
