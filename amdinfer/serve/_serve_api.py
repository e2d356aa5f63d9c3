"""``serve(...)`` and ``serve_repository(...)``: a model, or a folder of them, served until stopped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._support._recipes import SERVED_RECIPES, get_recipe
from ..engines.base import Engine
from ..errors import OptionError
from ._bounds import check, check_options
from ._bundles import bundle_batching, bundle_folder
from ._canary import check_rate, load_reference
from ._defaults import ServedDefaults, expected_device, model_batch, served_defaults
from ._models import build_model, load_recipe_workers, load_workers, pipeline_types, served_defaults_for
from ._repository import ModelRepository
from ._rest import DEFAULT_MAX_REQUEST_BYTES
from ._server import Server
from ._supervisor import check_workers_per_device, process_slot
from ._workers import EngineWorker, PipelineWorker

__all__ = ["serve", "serve_repository"]

logger = logging.getLogger("amdinfer.serve")


def _bounded(options: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The entries of ``options`` named ``keys`` (those :func:`check_options` checks)."""
    return {k: options[k] for k in keys if options.get(k) is not None}


def _serve_in_processes(model: Any, n: int, options: dict[str, Any], load_options: dict[str, Any]) -> None:
    """``serve(model, workers_per_device=n, ...)`` as the command line of :func:`serve_processes`'s children."""
    from . import _cli

    if not isinstance(model, (str, Path)):
        raise OptionError(
            f"workers_per_device: got {n} with a {type(model).__name__} model; each server process loads its "
            "own engine, so give the model's path"
        )

    carried = get_recipe(options["recipe"], served=True).flags if options["recipe"] is not None else ()
    wrong = sorted(str(k) for k in options["recipe_options"] or {} if k not in carried)
    if wrong:
        raise OptionError(
            f"recipe_options: {', '.join(wrong)}: not carried to the server processes of workers_per_device={n} "
            f"(only the flags of recipe {options['recipe']!r} are: {', '.join(carried)}); use workers_per_device=1"
        )
    other = sorted(set(load_options) - {"providers", "batch_buckets"})
    if other:
        raise OptionError(
            f"{', '.join(other)}: not carried to the server processes of workers_per_device={n} (only providers "
            "and batch_buckets are); use workers_per_device=1, or the command line's flags"
        )
    if not isinstance(options["verify_reference"], str):
        raise OptionError(
            f"verify_reference: got a {type(options['verify_reference']).__name__} with workers_per_device={n}; "
            "each process builds its own reference: give 'ort' or 'numpy'"
        )
    argv = ["serve", str(model), "--workers-per-device", str(n)]
    flags = {
        "name": "--name", "host": "--host", "http_port": "--http-port", "max_batch_size": "--max-batch-size",
        "max_delay_ms": "--max-delay-ms", "backend": "--backend", "precision": "--precision",
        "max_request_bytes": "--max-request-bytes", "verify_sample": "--verify-sample",
        "verify_reference": "--verify-reference", "recipe": "--recipe",
    }  # fmt: skip
    for key, flag in flags.items():
        if options[key] is not None:
            argv += [flag, str(options[key])]
    argv += ["--grpc-port", "-1" if options["grpc_port"] is None else str(options["grpc_port"])]
    argv += ["--devices", ",".join(str(int(d)) for d in options["devices"])]
    argv += ["--shared-memory", {None: "auto", True: "on", False: "off"}[options["shared_memory"]]]
    if not options["warmup"]:
        argv.append("--no-warmup")
    providers = load_options.get("providers")
    if providers:
        argv += ["--providers", ",".join([providers] if isinstance(providers, str) else list(providers))]
    if load_options.get("batch_buckets") is not None:  # () is "none": no buckets; not given: each process decides
        argv += ["--batch-buckets", ",".join(str(int(b)) for b in load_options["batch_buckets"]) or "none"]
    for key, value in (options["recipe_options"] or {}).items():
        argv += ["--" + str(key).replace("_", "-"), str(value)]
    from ..cli import build_parser

    args = build_parser().parse_args(argv)  # one record of the flags: the command line's own parser
    code = _cli.run(args)
    if code:
        raise RuntimeError(f"the server processes stopped with exit code {code} (their log lines say why)")


def _opencv_single_threaded() -> None:
    """OpenCV's own thread pool off in a server process that serves a recipe: the recipe's decode threads already
    share the cores out, and OpenCV's pool under each of them cost a quarter of the JPEG throughput on an H200 host
    (3,296 vs 2,654 img/s, docs/performance.md). A no-op without OpenCV."""
    try:
        import cv2
    except ImportError:
        return
    cv2.setNumThreads(1)


def _check_recipe(recipe: str | None, recipe_options: dict[str, Any] | None) -> None:
    """A served recipe with options its record takes (``pipeline_threads`` in its bounds), or no recipe and no
    options (never ignored).

    Raises:
        OptionError: an unknown recipe (the message lists the served ones), an option it does not take, a
            model it needs missing, or ``recipe_options`` without a recipe.

    Example:
        >>> _check_recipe(None, {"conf": 0.5})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: recipe_options: got ['conf'] without a recipe, expected recipe= one of [...]
    """
    check_options(_bounded(recipe_options or {}, "pipeline_threads"), "recipe_options")
    if recipe is not None:
        get_recipe(recipe, served=True).check_options(recipe_options or {}, "recipe_options")
    elif recipe_options:
        raise OptionError(
            f"recipe_options: got {sorted(map(str, recipe_options))} without a recipe, expected recipe= one of "
            f"{list(SERVED_RECIPES)}"
        )


def _ready_types() -> tuple[type, ...]:
    """What ``serve`` takes as built (the kinds :func:`build_model` serves): an Engine or one of
    :func:`~amdinfer.serve._models.pipeline_types`; ``serve`` also takes a list of them (one per device).

    Example:
        >>> [t.__name__ for t in _ready_types()]
        ['Engine', 'Pipeline', 'FusedPipeline', 'SlicedPipeline', 'Segmenter']
    """
    return (Engine, *pipeline_types())


def _target(
    model: Any, recipe: str | None, recipe_options: dict[str, Any] | None, rate: float, reference: Any, **load: Any
) -> tuple[Any, Any]:
    """What ``serve`` batches over (workers, or the ready engine/pipeline given) and the canary's reference."""
    if isinstance(model, (*_ready_types(), list, tuple)):
        if recipe is not None or recipe_options:
            raise OptionError(
                f"recipe: got {recipe!r} (options {recipe_options or {}}) with a ready {type(model).__name__}; "
                "a recipe is built from a model path, bytes or ModelProto (or serve amdinfer.yolo(...) itself)"
            )
        return model, reference
    if recipe is not None:
        _opencv_single_threaded()
        return load_recipe_workers(model, recipe, recipe_options=recipe_options, **load), reference
    target = load_workers(model, **load)
    if rate > 0 and isinstance(reference, str):
        reference = load_reference(model, reference)  # the model as given, not as rewritten
    slot = process_slot()
    if slot is not None:
        for worker in target:  # several processes per device: each labels its own worker in the metrics
            worker.name = f"{worker.name}-p{slot[0]}"
    return target, reference


def _peek_batch(model: Any, recipe: str | None) -> str | int | None:
    """The model's batch axis (:func:`model_batch`) read before loading it, without its external data; a model
    that cannot be read this way counts as batch-dynamic (the engine loaded next says, and is checked)."""
    import onnx

    from ..model import ModelSource

    try:
        if isinstance(model, ModelSource):
            source = model
        elif isinstance(model, onnx.ModelProto):
            source = ModelSource(model, path=Path("<ModelProto>"))  # a path: no refusal of external data here
        elif isinstance(model, (bytes, bytearray, memoryview)):
            source = ModelSource(onnx.load_from_string(bytes(model)), path=Path("<bytes>"))
        else:
            source = ModelSource(onnx.load(str(model), load_external_data=False), path=Path(model))
    except Exception:  # the load itself reports a bad model, with its own message
        return "N"
    return model_batch(source.inputs, source.outputs, recipe)


def _predicted_batch(batch: str | int | None, recipe: str | None, options: dict[str, Any] | None, device: str) -> Any:
    """``batch`` as the recipe will load it: a YOLO or classify recipe on an accelerator makes a batch-1 export
    batch-dynamic (``dynamic_batch="auto"``, :mod:`amdinfer.recipes._dynamic_batch`), so its buckets are chosen for a
    dynamic batch before the load, not after it (a second load). A refused rewrite is caught by the check after it.

    Example:
        >>> _predicted_batch(1, "yolo", None, "cuda:0"), _predicted_batch(1, "yolo", None, "cpu")
        ('N', 1)
        >>> _predicted_batch(1, "yolo", {"dynamic_batch": False}, "cuda:0"), _predicted_batch(1, None, None, "cuda:0")
        (1, 1)
    """
    dynamic = (options or {}).get("dynamic_batch", "auto")
    if batch == 1 and recipe in ("yolo", "classify") and dynamic is not False and device != "cpu":
        return "N"
    return batch


def _workers_of(target: Any) -> list[Any]:
    """``target`` (workers, or a ready Engine/Pipeline or a list of them) as workers, for the defaults' rule."""
    items = list(target) if isinstance(target, (list, tuple)) else [target]
    out: list[Any] = []
    for item in items:
        if isinstance(item, Engine):
            out.append(EngineWorker(item))
        elif isinstance(item, pipeline_types()):
            out.append(PipelineWorker(item))
        else:
            out.append(item)
    return out


def _close(target: Any, reference: Any, given_reference: Any) -> None:
    for worker in target:
        (worker.engine if isinstance(worker, EngineWorker) else worker.pipeline).close()
    if isinstance(reference, Engine) and reference is not given_reference:
        reference.close()


def _served_target(
    model: Any,
    recipe: str | None,
    recipe_options: dict[str, Any] | None,
    rate: float,
    reference: Any,
    given: dict[str, Any],
    **load: Any,
) -> tuple[Any, Any, ServedDefaults]:
    """:func:`_target`, with the batching derived from the model and the device where ``given`` (and
    ``load["batch_buckets"]``) has ``None``.

    The buckets are an engine option, so they are chosen before loading, for the device :func:`expected_device`
    predicts; the rule is applied again to the engine loaded, and when that disagrees on the buckets (the device
    predicted is not the one the engine runs on) the engines are loaded again with the right ones.
    """
    from ..pipeline._executor import default_threads

    ready = isinstance(model, (*_ready_types(), list, tuple))
    threads = (recipe_options or {}).get("pipeline_threads")
    bundle = None if ready else bundle_folder(model)
    if bundle is not None:  # served as built: its buckets (others refused), its largest bucket the batch limit
        batching = bundle_batching(bundle, load.pop("batch_buckets", None), "batch_buckets")
        if given.get("max_batch_size") is None:
            given["max_batch_size"] = batching["max_batch_size"]
    given = {**given, "batch_buckets": load.pop("batch_buckets", None), "pipeline_threads": threads}
    buckets_auto = given["batch_buckets"] is None and not ready and bundle is None
    if given.get("batch_buckets"):
        load["batch_buckets"] = given["batch_buckets"]
    predicted: tuple[int, ...] = ()
    guessed_dynamic = False
    if buckets_auto:
        try:
            device, providers = expected_device(load["backend"], load.get("providers"), int(load["devices"][0]))
        except Exception:  # an unknown backend or provider: the load says which, with its own message
            device, providers = "cpu", []
        peeked = _peek_batch(model, recipe)
        batch = _predicted_batch(peeked, recipe, recipe_options, device)
        guessed_dynamic = batch != peeked
        predicted = served_defaults(device, providers, batch, cores=default_threads(), devices=len(load["devices"]),
                                    recipe=recipe, given=given).batch_buckets  # fmt: skip
        if predicted:
            load["batch_buckets"] = predicted
    try:
        target, ref = _target(model, recipe, recipe_options, rate, reference, **load)
    except OptionError:
        if not (guessed_dynamic and predicted):
            raise
        # the recipe kept the export's fixed batch (its proof refused, or it runs on the CPU): no buckets then
        logger.info("expected %s to get a dynamic batch, but it kept its fixed batch: loading it without buckets",
                    recipe)  # fmt: skip
        load.pop("batch_buckets", None)
        predicted = ()
        target, ref = _target(model, recipe, recipe_options, rate, reference, **load)
    workers = _workers_of(target)
    chosen = served_defaults_for(workers, given, recipe, engine_buckets=ready or bundle is not None)  # their own
    if buckets_auto and chosen.batch_buckets != predicted:
        logger.info(
            "expected buckets %s, but the engine runs on %s: loading again with %s",
            ",".join(map(str, predicted)) or "none",
            chosen.why.get("batch_buckets", "?").removeprefix("auto: "),
            ",".join(map(str, chosen.batch_buckets)) or "none",
        )
        _close(workers, ref, reference)
        load.pop("batch_buckets", None)
        if chosen.batch_buckets:
            load["batch_buckets"] = chosen.batch_buckets
        target, ref = _target(model, recipe, recipe_options, rate, reference, **load)
    return target, ref, chosen


def _built(name: str, target: Any, chosen: ServedDefaults, rate: float, reference: Any) -> Any:
    """:func:`build_model` with the batching ``chosen``, which the start line names."""
    served = build_model(name, target, max_batch_size=chosen.max_batch_size, max_delay_ms=chosen.max_delay_ms,
                         verify_sample=rate, verify_reference=reference)  # fmt: skip
    served.batcher.chosen = chosen.batching_line()
    return served


def serve(
    model: Any,
    *,
    name: str | None = None,
    host: str = "127.0.0.1",
    http_port: int = 8080,
    grpc_port: int | None = 8081,
    max_batch_size: int | None = None,
    max_delay_ms: float | None = None,
    devices: Sequence[int] = (0,),
    backend: str = "auto",
    precision: str = "fp32",
    warmup: bool = True,
    reuse_port: bool = False,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    shared_memory: bool | None = None,
    verify_sample: float = 0.0,
    verify_reference: str | Engine = "ort",
    recipe: str | None = None,
    recipe_options: dict[str, Any] | None = None,
    workers_per_device: int = 1,
    **load_options: Any,
) -> None:
    """Serve a model (path/bytes/ModelProto: one engine per device), an Engine or a pipeline, until stopped.

    Args:
        model: what to serve; a model is loaded once per device, a pipeline (:func:`_ready_types`) served as built.
        name: the model's name in URLs (default: the file's stem, else ``"model"``).
        host: interface to bind (``127.0.0.1``; ``0.0.0.0`` for every interface).
        http_port, grpc_port: REST and gRPC ports (``grpc_port=None``: REST only).
        max_batch_size, max_delay_ms: rows per engine call at most (1: no batching), how long a request may wait
            for others; ``None``: from the model and the device like ``batch_buckets`` (``()``: none), named in the
            start line (:mod:`amdinfer.serve._defaults`).
        devices: GPU indices, one worker (engine) each.
        backend, precision: ``amdinfer.load``'s.
        warmup: run each engine (a recipe: its pipeline, decoding included) at its batch sizes before reporting ready.
        reuse_port: share the ports with other server processes (``SO_REUSEPORT``; see :func:`serve_processes`).
        max_request_bytes: the largest request taken (REST body or gRPC message); larger REST bodies get 413.
        shared_memory: take tensors in system shared memory (``None``: when ``host`` is loopback).
        verify_sample: the fraction of requests the numerical canary re-runs on ``verify_reference`` (0: off).
        verify_reference: ``"ort"`` (CPU fp32 ONNX Runtime) or ``"numpy"`` (the NumPy reference), loaded from
            ``model`` as given; or an :class:`~amdinfer.Engine` (see :func:`build_model`).
        recipe: serve ``amdinfer.yolo``, ``amdinfer.classify`` or ``amdinfer.ocr`` of the model (``"yolo"``,
            ``"classify"``, ``"ocr"``: ``model`` is the text detector; the served recipes of
            :data:`amdinfer.recipes.RECIPES`): requests send encoded images (``BYTES``); ``None``: the bare model.
        recipe_options: the options its record takes (``conf``, ``iou``, ``imgsz``, ``max_det``; ``topk``; ``rec``,
            ``cls``, ``text_score`` ...; ``max_image_pixels``: the pixel limit, docs/security.md); no others.
        workers_per_device: server processes per device (1: this process serves, a worker thread per
            device). With more, ``model`` must be a path: ``amdinfer serve`` runs in
            ``len(devices) * workers_per_device`` child processes sharing the ports (:func:`serve_processes`),
            and ``load_options`` may only be ``providers`` and ``batch_buckets`` (what the command line carries).
        **load_options: other ``amdinfer.load`` options (``providers=``, ``batch_buckets=``, ...).

    Raises:
        OptionError: a bad option (checked before anything loads; numbers against the bounds of
            :mod:`amdinfer.serve._bounds`); with ``workers_per_device > 1``, a model that is not a path, or an
            option the child processes' command line cannot carry.

    Example:
        >>> serve(b"onnx bytes", workers_per_device=2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: workers_per_device: got 2 with a bytes model; ... give the model's path
    """
    check_workers_per_device(workers_per_device)
    # every number against the one table of bounds, before anything loads or a child process starts
    given = {"max_batch_size": max_batch_size, "max_delay_ms": max_delay_ms, "max_request_bytes": max_request_bytes}
    buckets = load_options.get("batch_buckets")
    check_options({**_bounded(given, *given), **_bounded({"batch_buckets": buckets or None}, "batch_buckets")})
    _check_recipe(recipe, recipe_options)
    # The server's options are checked before a model is loaded: a bad port fails in a second, not after it.
    server = Server(host=host, http_port=http_port, grpc_port=grpc_port, warmup=warmup, reuse_port=reuse_port,
                    max_request_bytes=max_request_bytes, shared_memory=shared_memory)  # fmt: skip
    rate = check_rate(verify_sample)
    if workers_per_device > 1:
        options = dict(name=name, host=host, http_port=http_port, grpc_port=grpc_port, max_batch_size=max_batch_size,
                       max_delay_ms=max_delay_ms, devices=devices, backend=backend, precision=precision,
                       warmup=warmup, max_request_bytes=max_request_bytes, shared_memory=shared_memory,
                       verify_sample=verify_sample, verify_reference=verify_reference, recipe=recipe,
                       recipe_options=recipe_options)  # fmt: skip
        return _serve_in_processes(model, workers_per_device, options, load_options)
    load = dict(devices=devices, backend=backend, precision=precision, **load_options)
    target, reference, chosen = _served_target(model, recipe, recipe_options, rate, verify_reference, given, **load)
    name = name or (Path(model).stem if isinstance(model, (str, Path)) else "model")
    server.start([_built(name, target, chosen, rate, reference)])


def serve_repository(
    folder: str | Path,
    *,
    host: str = "127.0.0.1",
    http_port: int = 8080,
    grpc_port: int | None = 8081,
    devices: Sequence[int] = (0,),
    warmup: bool = True,
    reuse_port: bool = False,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    shared_memory: bool | None = None,
    state: str | Path | None = None,
    **defaults: Any,
) -> None:
    """Serve every model of a repository folder until stopped (``amdinfer serve --model-repository DIR``).

    Args:
        folder: the repository (see :class:`~amdinfer.serve.ModelRepository` and docs/serving.md).
        host, http_port, grpc_port, warmup, reuse_port, max_request_bytes, shared_memory: as for :func:`serve`.
        devices: this process's devices; each model gets one worker per device.
        state: the folder of load/unload records shared by the processes of one server (default: the
            ``AMDINFER_REPOSITORY_STATE`` variable that :func:`serve_processes` sets; none: one process).
        **defaults: options for every model (``backend``, ``providers``, ``precision``, ``max_batch_size``,
            ``max_delay_ms``, ``batch_buckets``), overridden by the folder's ``models.toml``.

    Raises:
        OptionError: a bad server option, a folder that is not a repository, or a broken ``models.toml``
            (before anything loads; numbers against the bounds of :mod:`amdinfer.serve._bounds`).

    Example:
        >>> serve_repository("/no/such/folder", http_port=0, grpc_port=None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: model repository: got '/no/such/folder', expected a folder of .onnx models
    """
    check("max_request_bytes", max_request_bytes)
    repository = ModelRepository(folder, devices=devices, defaults=defaults, state=state, warmup=warmup)
    server = Server(host=host, http_port=http_port, grpc_port=grpc_port, warmup=warmup, reuse_port=reuse_port,
                    max_request_bytes=max_request_bytes, shared_memory=shared_memory,
                    repository=repository)  # fmt: skip
    asyncio.run(server.serve([]))
