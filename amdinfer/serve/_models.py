"""What a served model is built from: engine or pipeline workers (one per device), the canary, the batcher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._support._recipes import get_recipe
from ..engines.base import Engine
from ..errors import OptionError
from ..preprocess import LoadImage
from ._batcher import DynamicBatcher
from ._bounds import check, check_buckets
from ._canary import Canary, check_rate, load_reference
from ._defaults import ServedDefaults, model_batch, served_defaults
from ._metrics import ServingMetrics
from ._oip import AmdinferModel
from ._shapes import watch_model
from ._workers import EngineWorker, PipelineWorker

__all__ = ["build_model", "load_recipe_workers", "load_workers", "pipeline_types", "served_defaults_for"]


def load_workers(
    model: Any,
    *,
    devices: Sequence[int] = (0,),
    backend: str = "auto",
    precision: str = "fp32",
    **load_options: Any,
) -> list[EngineWorker]:
    """One :class:`EngineWorker` per device: ``amdinfer.load(model, device=d, ...)`` for each ``d``.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> workers = load_workers(tiny_cnn(), devices=[0, 1], providers=["CPUExecutionProvider"])
        >>> [w.name for w in workers]
        ['device0', 'device1']
        >>> for w in workers: w.engine.close()
    """
    from .._load import load

    devices = list(devices)
    if not devices or len(set(devices)) != len(devices):
        raise OptionError(f"devices: got {devices}, expected distinct device indices")
    if "batch_buckets" in load_options:
        load_options["batch_buckets"] = list(check_buckets(load_options["batch_buckets"]))
    workers = []
    try:
        for d in devices:
            engine = load(model, backend=backend, device=int(d), precision=precision, **load_options)
            workers.append(EngineWorker(engine, name=f"device{d}"))
    except BaseException:
        for w in workers:
            w.engine.close()
        raise
    return workers


def load_recipe_workers(
    model: Any,
    recipe: str,
    *,
    devices: Sequence[int] = (0,),
    backend: str = "auto",
    precision: str = "fp32",
    recipe_options: dict[str, Any] | None = None,
    **load_options: Any,
) -> list[PipelineWorker]:
    """One :class:`PipelineWorker` per device over ``amdinfer.yolo(model, ...)`` (with ``tiles``: its
    :class:`~amdinfer.pipeline.SlicedPipeline`), ``amdinfer.classify(model, ...)``, ``amdinfer.ocr(model, rec=...,
    cls=...)`` (``model`` the text detector) or ``amdinfer.segment(model, ...)``.

    Requests send encoded images (input ``images``, datatype ``BYTES``, one JPEG/PNG file per element; uint8
    ``(N, H, W, 3)`` arrays work too); see docs/serving.md for the answer's layout.

    Args:
        model: the model (path, bytes or ModelProto), built once per device.
        recipe: a served recipe of the registry (:data:`amdinfer.recipes.RECIPES`): ``"yolo"``, ``"classify"``,
            ``"ocr"`` or ``"segment"``.
        devices: GPU indices, one pipeline each.
        backend: ``amdinfer.load``'s backend.
        precision: ``amdinfer.load``'s precision.
        recipe_options: the recipe's own options, those its record lists (``conf``, ``iou``, ``imgsz``,
            ``max_det``; ``topk``; ``rec``, ``cls`` (the OCR recogniser and classifier models), ``text_score``;
            ``decoder``, ``fuse`` ...), and
            ``pipeline_threads``: the threads that decode and resize (the pipeline's ``threads``; default its own);
            ``max_image_pixels``: the pixel limit of its ``LoadImage`` (default 89,478,485; docs/security.md).
        **load_options: other ``amdinfer.load`` options (``providers=``, ...).

    Raises:
        OptionError: an unknown recipe, an option it does not take (or of the wrong type), a model it needs
            missing (``"ocr"`` without ``rec``), devices that are empty or repeated, a ``pipeline_threads`` or
            ``batch_buckets`` out of bounds (:mod:`amdinfer.serve._bounds`).

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> workers = load_recipe_workers(yolov8(image_size=64), "yolo", recipe_options={"imgsz": 64},
        ...                               providers=["CPUExecutionProvider"])
        >>> [(w.name, w.input_name, w.takes_images) for w in workers]
        [('device0', 'images', True)]
        >>> for w in workers: w.pipeline.close()
    """
    entry = get_recipe(recipe, served=True)
    devices = list(devices)
    if not devices or len(set(devices)) != len(devices):
        raise OptionError(f"devices: got {devices}, expected distinct device indices")
    options = entry.check_options(recipe_options or {}, "recipe_options")
    build = entry.builder_function()
    threads = options.pop("pipeline_threads", None)
    if threads is not None:
        threads = check("pipeline_threads", threads, "recipe_options")
    limit = options.pop("max_image_pixels", None)  # LoadImage's, checked from each request's image headers
    if limit is not None:
        limit = check("max_image_pixels", limit, "recipe_options")
    if "batch_buckets" in load_options:
        load_options["batch_buckets"] = list(check_buckets(load_options["batch_buckets"]))
    workers: list[PipelineWorker] = []
    try:
        for d in devices:
            # keep_image=False: the server never sends the picture back
            pipe = build(model, backend=backend, device=int(d), precision=precision, keep_image=False,
                         **options, **load_options)  # fmt: skip
            inner = getattr(pipe, "detector", pipe)  # a SlicedPipeline's detector runs the tiles
            if threads is not None and hasattr(inner, "threads"):  # a fused pipeline's pool (an unfused one has none)
                inner.threads = threads
            # one request name for every recipe (an unfused classifier's engine input has the model's own name)
            workers.append(PipelineWorker(pipe, input_name="images", name=f"device{d}"))
            if limit is not None and isinstance(workers[-1]._load_image, LoadImage):  # every recipe starts with one
                workers[-1]._load_image.max_pixels = limit
    except BaseException:
        for w in workers:
            w.pipeline.close()
        raise
    return workers


def _canary(
    name: str, workers: Sequence[Any], verify_sample: float, verify_reference: str | Engine | Canary
) -> Canary | None:
    """The canary of a served model (``None`` when ``verify_sample`` is 0)."""
    if isinstance(verify_reference, Canary):
        return verify_reference
    rate = check_rate(verify_sample)
    if rate == 0:
        return None
    first = workers[0]
    if not isinstance(first, EngineWorker):
        raise OptionError(
            f"verify_sample: got {rate} for model {name!r}, a pipeline; the canary checks engines only "
            "(serve the engine, or verify the pipeline offline with amdinfer.verify)"
        )
    engine = first.engine
    if isinstance(verify_reference, str):
        if engine.info.precision != "fp32":
            # engine.model is the rewritten (fp16, quantized) graph: a reference built from it shares its errors
            raise OptionError(
                f"verify_reference: got {verify_reference!r} for an engine at precision {engine.info.precision}; "
                "give the reference engine built from the original model, e.g. "
                "amdinfer.load(model, providers=['cpu'], precision='fp32'), or serve the model by path"
            )
        verify_reference = load_reference(engine.model, verify_reference)
    return Canary(verify_reference, rate=rate, model=name, precision=engine.info.precision)


def served_defaults_for(
    workers: Sequence[Any],
    given: dict[str, Any] | None = None,
    recipe: str | None = None,
    *,
    engine_buckets: bool = False,
) -> ServedDefaults:
    """:func:`~amdinfer.serve._defaults.served_defaults` for loaded workers (one per device): the first one's
    engine device, providers and batch axis (a pipeline's ``fixed_batch`` when it has one: a fused graph's input
    axis is ``N`` even over a batch-1 export), the host's usable cores, ``given`` values kept. ``engine_buckets``:
    the buckets are the engine's own (loaded by the caller), whatever the rule would pick.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> worker = EngineWorker(amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]))
        >>> served_defaults_for([worker]).batching_line()
        "batches of up to 32 rows within 2 ms, no buckets (auto: CPU EP, dynamic batch axis 'N')"
        >>> worker.engine.close()
    """
    from ..pipeline._executor import default_threads

    first = workers[0]
    pipeline = isinstance(first, PipelineWorker)
    engine = first.pipeline.engine if pipeline else first.engine
    # a fused graph's input axis is N even when the model inside has a fixed batch: that one decides (no buckets)
    fixed = getattr(first.pipeline, "fixed_batch", None) if pipeline else None
    batch = fixed or model_batch(engine.inputs, engine.outputs, recipe or ("pipeline" if pipeline else None))
    info = engine.info
    given = dict(given or {})
    if engine_buckets:
        given["batch_buckets"] = engine.batch_buckets
    chosen = served_defaults(
        str(info.device or "cpu"), list(info.providers or ()), batch, cores=default_threads(),
        devices=len(workers), recipe=recipe or ("pipeline" if pipeline else None), given=given,
    )  # fmt: skip
    if engine_buckets:
        chosen.why["batch_buckets"] = "the engine's"
    return chosen


def pipeline_types() -> tuple[type, ...]:
    """The pipelines served as built, each behind a :class:`PipelineWorker`: a Pipeline, a FusedPipeline, a
    :class:`~amdinfer.pipeline.SlicedPipeline` (``amdinfer.yolo(model, tiles=...)``), a
    :class:`~amdinfer.recipes.Segmenter` (``amdinfer.segment``).

    Example:
        >>> [t.__name__ for t in pipeline_types()]
        ['Pipeline', 'FusedPipeline', 'SlicedPipeline', 'Segmenter']
    """
    from ..pipeline import Pipeline
    from ..pipeline._slices import SlicedPipeline
    from ..pipeline.fuse import FusedPipeline
    from ..recipes import Segmenter

    return (Pipeline, FusedPipeline, SlicedPipeline, Segmenter)


def build_model(
    name: str,
    target: Any,
    *,
    max_batch_size: int | None = None,
    max_delay_ms: float | None = None,
    verify_sample: float = 0.0,
    verify_reference: str | Engine | Canary = "ort",
) -> AmdinferModel:
    """A KServe model over a batcher for an engine, a list of workers (one per device) or a Pipeline.

    Args:
        name: the model's name in the URL.
        target: an :class:`~amdinfer.Engine`, a :class:`~amdinfer.Pipeline` or
            :class:`~amdinfer.pipeline.fuse.FusedPipeline`, a list of them (one per device), or workers
            (:class:`EngineWorker`, :class:`PipelineWorker`).
        max_batch_size: rows per engine call at most (1: no batching); ``None``: derived from the engine's device
            and batch axis (:mod:`amdinfer.serve._defaults`: 64 on an accelerator, 32 on the CPU).
        max_delay_ms: how long a request may wait for others (``None``: 2 ms).
        verify_sample: the fraction of requests the numerical canary re-runs on a reference engine, in
            ``[0, 1]`` (0: no canary; see :class:`Canary` and docs/serving.md). Engines only.
        verify_reference: the canary's reference: ``"ort"`` (CPU fp32 ONNX Runtime) or ``"numpy"`` (the NumPy
            reference), built from the engine's model (fp32 engines only); an :class:`~amdinfer.Engine`
            built from the original model; or a ready :class:`Canary` (then ``verify_sample`` is not used).

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = build_model("tiny", amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]))
        >>> [t["shape"] for t in m.get_input_types()]
        [[-1, 3, 32, 32]]
    """
    items = list(target) if isinstance(target, (list, tuple)) else [target]
    workers: list[Any] = []
    for item in items:
        if isinstance(item, Engine):
            workers.append(EngineWorker(item, name=f"device{len(workers)}"))
        elif isinstance(item, pipeline_types()):
            workers.append(PipelineWorker(item, name=f"device{len(workers)}"))
        elif isinstance(item, (EngineWorker, PipelineWorker)):
            workers.append(item)
        else:
            raise OptionError(
                f"target: got {type(item).__name__}, expected an Engine, a Pipeline, a FusedPipeline or a list of "
                "them (one per device)"
            )
    first = workers[0]
    if not all(type(w) is type(first) for w in workers):
        raise OptionError("target: mixes engines and pipelines; give one kind, one per device")
    chosen = None
    if max_batch_size is None or max_delay_ms is None:
        given = {"max_batch_size": max_batch_size, "max_delay_ms": max_delay_ms}
        chosen = served_defaults_for(workers, given, engine_buckets=True)
        max_batch_size, max_delay_ms = chosen.max_batch_size, chosen.max_delay_ms
    if isinstance(first, EngineWorker) and not first.batchable:
        max_batch_size = 1  # no shared batch axis: each request is its own engine call
    canary = _canary(name, workers, verify_sample, verify_reference)
    watch_model(name, workers)  # the shape log, and a WARNING for each compile outside warm-up
    metrics = ServingMetrics(name)
    batcher = DynamicBatcher(
        workers, max_batch_size=max_batch_size, max_delay_ms=max_delay_ms, observer=metrics, canary=canary
    )
    if chosen is not None:
        batcher.chosen = chosen.batching_line()
    return AmdinferModel(name, batcher, inputs=first.inputs, outputs=first.outputs, check=first.check, metrics=metrics)
