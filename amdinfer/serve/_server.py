"""The server: KServe's ModelServer bound to a chosen host, one worker per device, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from kserve import ModelServer
from kserve.protocol.rest.server import RESTServer

from ..engines.base import Engine
from ..errors import OptionError
from ._batcher import DynamicBatcher
from ._canary import Canary, check_rate, load_reference
from ._cli import default_workers_per_device
from ._grpc import GrpcServer
from ._metrics import ServingMetrics
from ._net import bound_socket, check_host, check_port, is_loopback
from ._oip import AmdinferModel, FastDataPlane
from ._rest import DEFAULT_MAX_REQUEST_BYTES, JsonResponse, install_routes, install_shm_routes
from ._shm import REGISTRY_ENV, SharedMemoryRegistry
from ._workers import EngineWorker, PipelineWorker

__all__ = [
    "PROCESS_ENV",
    "Server",
    "build_model",
    "default_workers_per_device",
    "load_recipe_workers",
    "load_workers",
    "process_slot",
    "serve",
    "serve_processes",
]

logger = logging.getLogger("amdinfer.serve")


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


#: The recipes ``serve(recipe=...)`` and ``amdinfer serve --recipe`` know.
RECIPES = ("yolo", "classify")


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
    """One :class:`PipelineWorker` per device over ``amdinfer.yolo(model, ...)`` or ``amdinfer.classify(model, ...)``.

    Requests send encoded images (input ``images``, datatype ``BYTES``, one JPEG/PNG file per element; uint8
    ``(N, H, W, 3)`` arrays work too); see docs/serving.md for the answer's layout.

    Args:
        model: the model (path, bytes or ModelProto), built once per device.
        recipe: ``"yolo"`` or ``"classify"``.
        devices: GPU indices, one pipeline each.
        backend: ``amdinfer.load``'s backend.
        precision: ``amdinfer.load``'s precision.
        recipe_options: the recipe's own options (``conf``, ``iou``, ``imgsz``, ``max_det``; ``topk``, ...).
        **load_options: other ``amdinfer.load`` options (``providers=``, ...).

    Raises:
        OptionError: an unknown recipe, or devices that are empty or repeated.

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> workers = load_recipe_workers(yolov8(image_size=64), "yolo", recipe_options={"imgsz": 64},
        ...                               providers=["CPUExecutionProvider"])
        >>> [(w.name, w.input_name, w.takes_images) for w in workers]
        [('device0', 'images', True)]
        >>> for w in workers: w.pipeline.close()
    """
    from .. import recipes

    if recipe not in RECIPES:
        raise OptionError(f"recipe: got {recipe!r}, expected one of {RECIPES}")
    build = getattr(recipes, recipe)
    devices = list(devices)
    if not devices or len(set(devices)) != len(devices):
        raise OptionError(f"devices: got {devices}, expected distinct device indices")
    workers: list[PipelineWorker] = []
    try:
        for d in devices:
            # keep_image=False: the server never sends the picture back
            pipe = build(model, backend=backend, device=int(d), precision=precision, keep_image=False,
                         **(recipe_options or {}), **load_options)  # fmt: skip
            # one request name for every recipe (an unfused classifier's engine input has the model's own name)
            workers.append(PipelineWorker(pipe, input_name="images", name=f"device{d}"))
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


def build_model(
    name: str,
    target: Any,
    *,
    max_batch_size: int = 32,
    max_delay_ms: float = 2.0,
    verify_sample: float = 0.0,
    verify_reference: str | Engine | Canary = "ort",
) -> AmdinferModel:
    """A KServe model over a batcher for an engine, a list of workers (one per device) or a Pipeline.

    Args:
        name: the model's name in the URL.
        target: an :class:`~amdinfer.Engine`, a :class:`~amdinfer.Pipeline` or
            :class:`~amdinfer.fuse.FusedPipeline`, a list of them (one per device), or workers
            (:class:`EngineWorker`, :class:`PipelineWorker`).
        max_batch_size: rows per engine call at most (1: no batching).
        max_delay_ms: how long a request may wait for others.
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
    from ..fuse import FusedPipeline
    from ..pipeline import Pipeline

    items = list(target) if isinstance(target, (list, tuple)) else [target]
    workers: list[Any] = []
    for item in items:
        if isinstance(item, Engine):
            workers.append(EngineWorker(item, name=f"device{len(workers)}"))
        elif isinstance(item, (Pipeline, FusedPipeline)):
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
    if isinstance(first, EngineWorker) and not first.batchable:
        max_batch_size = 1  # no shared batch axis: each request is its own engine call
    canary = _canary(name, workers, verify_sample, verify_reference)
    metrics = ServingMetrics(name)
    batcher = DynamicBatcher(
        workers, max_batch_size=max_batch_size, max_delay_ms=max_delay_ms, observer=metrics, canary=canary
    )
    return AmdinferModel(name, batcher, inputs=first.inputs, outputs=first.outputs, check=first.check, metrics=metrics)


def _multiprocess_metrics_route() -> None:
    """``/metrics`` summed over the server processes (prometheus_client's multiprocess mode)."""
    from kserve.model_server import app
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
    from starlette.responses import Response

    async def metrics() -> Response:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/metrics", metrics, methods=["GET"])
    app.router.routes.insert(0, app.router.routes.pop())  # first match wins: ahead of KServe's own /metrics


#: set by :func:`serve_processes` in each child: ``"J/N"``, the child's index J (0-based) among the N server
#: processes of its device
PROCESS_ENV = "AMDINFER_SERVE_PROCESS"


def process_slot() -> tuple[int, int] | None:
    """``(index, count)`` of this server process among its device's, when :func:`serve_processes` started it
    with several per device; else ``None``.

    Example:
        >>> import os
        >>> os.environ[PROCESS_ENV] = "1/2"; process_slot()
        (1, 2)
        >>> del os.environ[PROCESS_ENV]; process_slot() is None
        True
    """
    text = os.environ.get(PROCESS_ENV, "")
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or int(count) < 2:
        return None
    return int(index), int(count)


def _forward(stream: Any, last: list[str]) -> None:
    """Copy a child's stderr to ours line by line, keeping its last non-empty line (its error, if it fails)."""
    out = getattr(sys.stderr, "buffer", None)
    for line in iter(stream.readline, b""):
        if line.strip():
            last[0] = line.decode(errors="replace").strip()
        if out is not None:
            out.write(line)
            out.flush()
        else:
            sys.stderr.write(line.decode(errors="replace"))
    stream.close()


def serve_processes(child_argv: Sequence[Sequence[str]], *, workers_per_device: int = 1) -> int:
    """Run several server processes on shared ports (``SO_REUSEPORT``) and supervise them.

    Each child is ``python -m amdinfer serve ... --devices D --reuse-port``: its own event loop, its own
    KServe stack and engine, so request decoding scales with the processes instead of sharing one GIL; the
    kernel spreads connections over the processes listening. ``child_argv`` lists the children device by
    device, ``workers_per_device`` consecutive ones each; each child learns its index on its device through
    ``AMDINFER_SERVE_PROCESS`` (``J/N``, see :func:`process_slot`) and, with several per device, labels its
    worker ``deviceD-pJ`` in the metrics and names itself in its start line. ``/metrics`` sums every process
    (prometheus_client multiprocess mode, in a temporary folder); shared-memory regions registered through
    any process are seen by all (one registry folder). SIGINT/SIGTERM go to every child; a child that exits
    with an error (at start: port taken, a model that does not load) stops the others, and its last stderr
    line is logged as the reason.

    Args:
        child_argv: the ``amdinfer`` arguments of each child (after ``python -m amdinfer``).
        workers_per_device: how many consecutive children serve the same device.

    Returns:
        0 when every child stopped cleanly, else the first non-zero exit code.

    Raises:
        OptionError: ``workers_per_device`` is not an int >= 1 dividing the number of children.

    Example:
        >>> serve_processes([])
        0
    """
    if isinstance(workers_per_device, bool) or not isinstance(workers_per_device, int) or workers_per_device < 1:
        raise OptionError(f"workers_per_device: got {workers_per_device!r}, expected an int >= 1")
    if len(child_argv) % workers_per_device:
        raise OptionError(
            f"workers_per_device: got {workers_per_device} for {len(child_argv)} children, expected a divisor"
        )
    if not child_argv:
        return 0
    import threading

    with tempfile.TemporaryDirectory(prefix="amdinfer-serve-") as folder:
        # metrics summed over the processes; shared-memory regions registered through any of them
        os.mkdir(metrics := os.path.join(folder, "metrics"))
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=metrics, **{REGISTRY_ENV: os.path.join(folder, "shm")})
        children: list[subprocess.Popen[bytes]] = []
        lasts: list[list[str]] = []
        readers: list[threading.Thread] = []
        stopping = False
        failure: int | None = None

        def stop(*_: object) -> None:
            nonlocal stopping
            stopping = True
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for i, argv in enumerate(child_argv):
                slot = {PROCESS_ENV: f"{i % workers_per_device}/{workers_per_device}"}
                child = subprocess.Popen(
                    [sys.executable, "-m", "amdinfer", *argv], env={**env, **slot}, stderr=subprocess.PIPE
                )
                children.append(child)
                lasts.append([""])
                reader = threading.Thread(target=_forward, args=(child.stderr, lasts[-1]), daemon=True)
                reader.start()
                readers.append(reader)
            while True:
                running = any(c.poll() is None for c in children)
                failed = [i for i, c in enumerate(children) if c.poll() not in (None, 0)]
                if not stopping and failed:
                    i = failed[0]
                    failure = children[i].returncode
                    readers[i].join(5)
                    device = (
                        child_argv[i][child_argv[i].index("--devices") + 1] if "--devices" in child_argv[i] else "?"
                    )
                    logger.error(
                        "server process %d of %d (device %s, pid %d) exited with code %d: %s; stopping the others",
                        i + 1,
                        len(children),
                        device,
                        children[i].pid,
                        children[i].returncode,
                        lasts[i][0] or "no message",
                    )
                    stop()  # one child failed (port taken, model error): stop the others
                if not running:
                    break
                time.sleep(0.2)
            for reader in readers:
                reader.join(5)
            # the failure reported, not the SIGTERM its siblings got; a child killed by signal S: 128 + S
            code = failure if failure is not None else next((c.returncode for c in children if c.returncode), 0)
            return code if code >= 0 else 128 - code
        finally:
            stop()  # a supervisor that fails itself (cannot start a child) leaves none behind
            for child in children:
                try:
                    child.wait(60)
                except subprocess.TimeoutExpired:
                    child.kill()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class Server(ModelServer):
    """KServe's ModelServer with amdinfer's data plane, bound to ``host`` (``127.0.0.1`` by default).

    REST (``http_port``) and gRPC (``grpc_port``) speak the Open Inference Protocol v2: ``/v2/health/live``,
    ``/v2/health/ready``, ``/v2/models/<name>``, ``/v2/models/<name>/ready``, ``/v2/models/<name>/infer``
    and ``/metrics``, plus Triton's system shared-memory extension (``/v2/systemsharedmemory/...`` and its
    gRPC rpcs). SIGINT/SIGTERM stop it gracefully: no new requests, queued ones finish, engines close.
    When it is serving it logs one line on the ``amdinfer.serve`` logger: each model's backend, providers,
    precision and devices, its batching, and the addresses.

    Args:
        host: the interface to bind; ``0.0.0.0`` exposes the server to the network (no TLS, no auth:
            put it behind a proxy, see docs/serving.md).
        http_port: REST port (0: any free port).
        grpc_port: gRPC port (``None``: no gRPC).
        grace_period: seconds that in-flight requests get at shutdown.
        warmup: run each engine at the batch sizes it will see (see ``EngineWorker.warmup``) before the
            server reports ready.
        reuse_port: bind with ``SO_REUSEPORT`` so that several server processes (one per GPU) share the
            ports; the kernel spreads connections over them (see :func:`serve_processes`).
        max_request_bytes: the largest request body (REST) or message (gRPC) taken; a larger REST body is
            answered 413 before it is read (default 256 MiB: a batch of 64 images of 1024x1024x3 uint8).
        shared_memory: take tensors in system shared memory (``/dev/shm``) registered by clients on this
            host; ``None`` (default): on when ``host`` is a loopback address, off otherwise.

    Raises:
        OptionError: a port outside 0..65535, a host that is neither an address nor a resolvable name, or a
            ``max_request_bytes`` below 1 KiB.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> server = Server(http_port=0, grpc_port=None)
        >>> server.host, server.shared_memory
        ('127.0.0.1', True)
        >>> Server(host="0.0.0.0", http_port=0, grpc_port=None).shared_memory  # other hosts must not name our memory
        False
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        http_port: int = 8080,
        grpc_port: int | None = 8081,
        grace_period: int = 30,
        warmup: bool = True,
        reuse_port: bool = False,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        shared_memory: bool | None = None,
    ) -> None:
        check_port("http_port", http_port)
        check_port("grpc_port", grpc_port, optional=True)
        check_host(host)
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes < 1024:
            raise OptionError(f"max_request_bytes: got {max_request_bytes!r}, expected an int >= 1024")
        if shared_memory is not None and not isinstance(shared_memory, bool):
            raise OptionError(f"shared_memory: got {shared_memory!r}, expected True, False or None (auto)")
        super().__init__(
            http_port=http_port,
            grpc_port=grpc_port or 0,
            enable_grpc=grpc_port is not None,
            workers=1,
            grace_period=grace_period,
            enable_latency_logging=False,
        )
        self.host = host
        self.warmup = bool(warmup)
        self.reuse_port = bool(reuse_port)
        self.max_request_bytes = max_request_bytes
        #: whether clients may register system shared-memory regions
        self.shared_memory = is_loopback(host) if shared_memory is None else shared_memory
        self.dataplane = FastDataPlane(model_registry=self.registered_models)
        self._models: list[AmdinferModel] = []
        self._stopping: asyncio.Event | None = None

    async def serve(self, models: Sequence[AmdinferModel], *, ready: Any = None) -> None:
        """Serve until :meth:`shutdown` (or a signal); then drain the batchers and close the engines."""
        self._models = list(models)
        self._stopping = asyncio.Event()
        # Bind both ports before the models register and warm up: a taken port is one clear error, at once.
        http_socket = bound_socket(self.host, self.http_port, reuse_port=self.reuse_port)
        shm = self.dataplane.shm = self._shared_memory_registry()
        grpc = None
        try:
            if self.enable_grpc:
                grpc = GrpcServer(
                    self.host,
                    self.grpc_port,
                    self.dataplane,
                    self.model_repository_extension,
                    5,
                    max_message=self.max_request_bytes,
                    reuse_port=self.reuse_port,
                    shm=shm,
                )
            await self._serve(http_socket, grpc, ready)
        finally:
            http_socket.close()
            shm.close()

    def _shared_memory_registry(self) -> SharedMemoryRegistry:
        why = (
            f"system shared memory is off on this server: it listens on {self.host}, and clients on other hosts "
            "must not name this host's memory; start it with --shared-memory on (Server(shared_memory=True)) "
            "to allow it"
        )
        return SharedMemoryRegistry(os.environ.get(REGISTRY_ENV), enabled=self.shared_memory, disabled_reason=why)

    async def _serve(self, http_socket: Any, grpc: GrpcServer | None, ready: Any) -> None:
        assert self._stopping is not None
        loop = asyncio.get_running_loop()
        self._register_and_check_atleast_one_model_is_ready(self._models)
        warmed = {}
        for m in self._models:
            if self.warmup:
                # every worker at once (one device each), off the event loop; before the server is ready
                jobs = [
                    loop.run_in_executor(None, w.warmup, m.batcher.max_batch_size)
                    for w in m.batcher.workers
                    if hasattr(w, "warmup")
                ]
                sizes = await asyncio.gather(*jobs)
                warmed[m.name] = sizes[0] if sizes else []
            await m.batcher.start()
        rest = self._make_rest_server()
        if grpc is not None:
            await grpc.start()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.shutdown)
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        rest_task = asyncio.create_task(rest._server.serve(sockets=[http_socket]))
        while not rest._server.started and not rest_task.done():
            await asyncio.sleep(0.01)
        if rest_task.done():
            await rest_task  # raises why it could not start (port taken, ...)
            raise OSError(f"REST: could not start on {self.host}:{self.http_port}")
        logger.info("%s", self.start_line(warmed, grpc.address if grpc is not None else None))
        if ready is not None:
            ready(self)
        await self._stopping.wait()
        # stop taking requests, let in-flight ones finish, then drain the batchers and close the engines
        rest._server.should_exit = True
        if grpc is not None:
            await grpc.stop()
        await rest_task
        for m in self._models:
            await m.batcher.stop()
            for w in m.batcher.workers:
                target = getattr(w, "engine", None) or getattr(w, "pipeline", None)
                if target is not None:
                    target.close()
            if m.batcher.canary is not None:
                m.batcher.canary.close()
        logger.info("stopped (pid %d)", os.getpid())

    def _make_rest_server(self) -> RESTServer:
        """KServe's REST server on its app, with amdinfer's routes first and without KServe's timing middleware
        (two log lines per request)."""
        from kserve.model_server import app

        rest = RESTServer(
            "kserve.model_server:app",
            self.dataplane,
            self.model_repository_extension,
            self.http_port,
            grace_period=self.grace_period,
            timeout_keep_alive=self.timeout_keep_alive,
        )
        rest.config.host = self.host  # KServe binds 0.0.0.0
        # KServe's app answers with FastAPI's ORJSONResponse, deprecated with a warning at each response; its
        # routes take the app's default class when they are added, so set ours first
        app.router.default_response_class = JsonResponse
        rest._register_endpoints(app)
        rest._add_exception_handlers(app)
        install_routes(app, self.dataplane, max_request_bytes=self.max_request_bytes)
        assert self.dataplane.shm is not None
        install_shm_routes(app, self.dataplane.shm)
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            _multiprocess_metrics_route()
        return rest

    def start_line(self, warmed: dict[str, list[int]], grpc_address: str | None) -> str:
        """The one line logged when the server is ready: what serves each model, and where.

        Example:
            >>> import amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> server = Server(http_port=8080, grpc_port=None)
            >>> server._models = [build_model("tiny", amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]))]
            >>> print(server.start_line({"tiny": [1, 32]}, None))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
            serving model 'tiny' on ort (CPUExecutionProvider), fp32, devices cpu; batches of up to 32
            rows within 2 ms, warmed up at [1, 32]; REST http://127.0.0.1:8080, gRPC off, system shared memory on
            (pid ...)
        """
        parts = [_describe(m, warmed.get(m.name)) for m in self._models]
        shm = "on" if self.shared_memory else "off (not loopback; --shared-memory on allows it)"
        where = f"REST http://{self.host}:{self.http_port}, gRPC {grpc_address or 'off'}, system shared memory {shm}"
        slot = process_slot()
        mine = f", server process {slot[0] + 1} of {slot[1]} on its device" if slot else ""
        return f"serving {'; '.join(parts)}; {where} (pid {os.getpid()}{mine})"

    def shutdown(self) -> None:
        """Stop gracefully (what SIGINT/SIGTERM do)."""
        if self._stopping is not None:
            self._stopping.set()

    def start(self, models: Sequence[AmdinferModel]) -> None:  # type: ignore[override]
        """Serve ``models`` in this thread until a signal arrives (KServe's entry point, our binding)."""
        asyncio.run(self.serve(models))


def _describe(model: AmdinferModel, warmed: list[int] | None) -> str:
    """``model 'NAME' on BACKEND (PROVIDERS), PRECISION, devices D0, D1; batching``."""
    workers = model.batcher.workers
    engines = [getattr(w, "engine", None) or w.pipeline.engine for w in workers]  # type: ignore[attr-defined]
    info = engines[0].info
    kind = "pipeline" if isinstance(workers[0], PipelineWorker) else "model"
    providers = f" ({', '.join(info.providers)})" if info.providers else ""
    text = f"{kind} {model.name!r} on {info.backend}{providers}, {info.precision}, devices "
    text += ", ".join(e.info.device for e in engines)
    reason = getattr(workers[0], "unbatchable_reason", None)
    if reason:
        text += f"; one request per engine call ({reason})"
    else:
        delay = model.batcher.max_delay * 1000
        text += f"; batches of up to {model.batcher.max_batch_size} rows within {delay:g} ms"
    if warmed:
        text += f", warmed up at {warmed}"
    canary = model.batcher.canary
    if canary is not None:
        ref = canary.reference.info
        text += f"; canary re-runs {canary.rate:.2%} of requests on {ref.backend} ({ref.device}, {ref.precision})"
    return text


def _serve_in_processes(model: str, n: int, options: dict[str, Any], load_options: dict[str, Any]) -> int:
    """``serve(model, workers_per_device=n, ...)`` as the command line of :func:`serve_processes`'s children."""
    from . import _cli

    allowed = _cli._RECIPE_FLAGS.get(options["recipe"] or "", ())
    wrong = sorted(str(k) for k in options["recipe_options"] or {} if k not in allowed)
    if wrong:
        raise OptionError(f"recipe_options: got {wrong} for recipe {options['recipe']!r}, expected some of {allowed}")
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
    argv = ["serve", model, "--workers-per-device", str(n)]
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
    if load_options.get("batch_buckets"):
        argv += ["--batch-buckets", ",".join(str(int(b)) for b in load_options["batch_buckets"])]
    for key, value in (options["recipe_options"] or {}).items():
        argv += ["--" + str(key).replace("_", "-"), str(value)]
    from ..cli import build_parser

    args = build_parser().parse_args(argv)  # one record of the flags: the command line's own parser
    return _cli.run(args)


def serve(
    model: Any,
    *,
    name: str | None = None,
    host: str = "127.0.0.1",
    http_port: int = 8080,
    grpc_port: int | None = 8081,
    max_batch_size: int = 32,
    max_delay_ms: float = 2.0,
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
    """Serve a model (path/bytes/ModelProto: one engine per device), an Engine or a Pipeline, until stopped.

    Args:
        model: what to serve; a model is loaded once per entry of ``devices``.
        name: the model's name in URLs (default: the file's stem, else ``"model"``).
        host: interface to bind (``127.0.0.1``; ``0.0.0.0`` for every interface).
        http_port: REST port.
        grpc_port: gRPC port (``None``: REST only).
        max_batch_size: rows per engine call at most (1: no batching).
        max_delay_ms: how long a request may wait for others to batch with.
        devices: GPU indices, one worker (engine) each.
        backend: ``amdinfer.load``'s backend.
        precision: ``amdinfer.load``'s precision.
        warmup: run each engine at its batch sizes before reporting ready.
        reuse_port: share the ports with other server processes (``SO_REUSEPORT``; see :func:`serve_processes`).
        max_request_bytes: the largest request taken (REST body or gRPC message); larger REST bodies get 413.
        shared_memory: take tensors in system shared memory (``None``: when ``host`` is loopback).
        verify_sample: the fraction of requests the numerical canary re-runs on ``verify_reference`` (0: off).
        verify_reference: ``"ort"`` (CPU fp32 ONNX Runtime) or ``"numpy"`` (the NumPy reference), loaded from
            ``model`` as given; or an :class:`~amdinfer.Engine` (see :func:`build_model`).
        recipe: serve ``amdinfer.yolo`` or ``amdinfer.classify`` of the model (``"yolo"``, ``"classify"``):
            requests send encoded images (``BYTES``); ``None``: the bare model.
        recipe_options: the recipe's own options (``conf``, ``iou``, ``imgsz``, ``max_det``; ``size``,
            ``crop``, ``topk``, ...).
        workers_per_device: server processes per device (1: this process serves, a worker thread per
            device). With more, ``model`` must be a path: ``amdinfer serve`` runs in
            ``len(devices) * workers_per_device`` child processes sharing the ports (:func:`serve_processes`),
            and ``load_options`` may only be ``providers`` and ``batch_buckets`` (what the command line carries).
        **load_options: other ``amdinfer.load`` options (``providers=``, ``batch_buckets=``, ...).

    Raises:
        OptionError: a bad option (checked before anything loads); with ``workers_per_device > 1``, a model
            that is not a path, or an option the child processes' command line cannot carry.

    Example:
        >>> serve  # doctest: +ELLIPSIS
        <function serve at ...>
        >>> serve(b"onnx bytes", workers_per_device=2)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: workers_per_device: got 2 with a bytes model; ... give the model's path
    """
    from pathlib import Path

    from ..fuse import FusedPipeline
    from ..pipeline import Pipeline

    if isinstance(workers_per_device, bool) or not isinstance(workers_per_device, int) or workers_per_device < 1:
        raise OptionError(f"workers_per_device: got {workers_per_device!r}, expected an int >= 1")
    # The server's options are checked before a model is loaded: a bad port fails in a second, not after it.
    server = Server(
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        warmup=warmup,
        reuse_port=reuse_port,
        max_request_bytes=max_request_bytes,
        shared_memory=shared_memory,
    )
    rate = check_rate(verify_sample)
    if workers_per_device > 1:
        if not isinstance(model, (str, Path)):
            raise OptionError(
                f"workers_per_device: got {workers_per_device} with a {type(model).__name__} model; each server "
                "process loads its own engine, so give the model's path"
            )
        options = dict(
            name=name, host=host, http_port=http_port, grpc_port=grpc_port, max_batch_size=max_batch_size,
            max_delay_ms=max_delay_ms, devices=devices, backend=backend, precision=precision, warmup=warmup,
            max_request_bytes=max_request_bytes, shared_memory=shared_memory, verify_sample=verify_sample,
            verify_reference=verify_reference, recipe=recipe, recipe_options=recipe_options,
        )  # fmt: skip
        code = _serve_in_processes(str(model), workers_per_device, options, load_options)
        if code:
            raise RuntimeError(f"the server processes stopped with exit code {code} (their log lines say why)")
        return
    if isinstance(model, (Engine, Pipeline, FusedPipeline, list, tuple)):
        if recipe is not None or recipe_options:
            raise OptionError(
                f"recipe: got {recipe!r} (options {recipe_options or {}}) with a ready {type(model).__name__}; "
                "a recipe is built from a model path, bytes or ModelProto (or serve amdinfer.yolo(...) itself)"
            )
        target = model
    elif recipe is not None:
        target = load_recipe_workers(model, recipe, devices=devices, backend=backend, precision=precision,
                                     recipe_options=recipe_options, **load_options)  # fmt: skip
    else:
        target = load_workers(model, devices=devices, backend=backend, precision=precision, **load_options)
        if rate > 0 and isinstance(verify_reference, str):
            verify_reference = load_reference(model, verify_reference)  # the model as given, not as rewritten
    slot = process_slot()
    if slot is not None and isinstance(target, list):
        for worker in target:  # several processes per device: each labels its own worker in the metrics
            worker.name = f"{worker.name}-p{slot[0]}"
    if name is None:
        name = Path(model).stem if isinstance(model, (str, Path)) else "model"
    built = build_model(
        name,
        target,
        max_batch_size=max_batch_size,
        max_delay_ms=max_delay_ms,
        verify_sample=rate,
        verify_reference=verify_reference,
    )
    server.start([built])
