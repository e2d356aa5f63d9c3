"""The server: KServe's ModelServer bound to a chosen host, its models (or a model repository), graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Sequence
from typing import Any

from kserve import ModelServer
from kserve.protocol.rest.server import RESTServer

from ..errors import OptionError
from ._defaults import NOTE_ENV
from ._grpc import GrpcServer
from ._net import bound_socket, check_host, check_port, is_loopback
from ._oip import AmdinferModel, FastDataPlane
from ._repository import ModelRepository
from ._rest import DEFAULT_MAX_REQUEST_BYTES, JsonResponse, install_routes, install_shm_routes
from ._shm import REGISTRY_ENV, SharedMemoryRegistry
from ._supervisor import process_slot
from ._workers import PipelineWorker

__all__ = ["Server"]

logger = logging.getLogger("amdinfer.serve")


def _multiprocess_metrics_route() -> None:
    """``/metrics`` summed over the server processes (prometheus_client's multiprocess mode)."""
    from kserve.model_server import app
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
    from starlette.responses import Response

    from ._metrics import relabelled

    async def metrics() -> Response:
        registry = CollectorRegistry()  # KServe's model_name label read as amdinfer's model, version
        registry.register(relabelled(multiprocess.MultiProcessCollector(None)))
        return Response(content=generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/metrics", metrics, methods=["GET"])
    app.router.routes.insert(0, app.router.routes.pop())  # first match wins: ahead of KServe's own /metrics


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
        warmup: run each engine (or image pipeline, on synthetic PNG files) at the batch sizes it will see
            (see ``EngineWorker.warmup``, ``PipelineWorker.warmup``) before the server reports ready.
        reuse_port: bind with ``SO_REUSEPORT`` so that several server processes (one per GPU) share the
            ports; the kernel spreads connections over them (see :func:`serve_processes`).
        max_request_bytes: the largest request body (REST) or message (gRPC) taken; a larger REST body is
            answered 413 before it is read (default 256 MiB: a batch of 64 images of 1024x1024x3 uint8).
        shared_memory: take tensors in system shared memory (``/dev/shm``) registered by clients on this
            host; ``None`` (default): on when ``host`` is a loopback address, off otherwise.
        repository: a :class:`~amdinfer.serve.ModelRepository`: its models are loaded at start and can be
            loaded/unloaded through Triton's repository API (see docs/serving.md).

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
        repository: ModelRepository | None = None,
    ) -> None:
        check_port("http_port", http_port)
        check_port("grpc_port", grpc_port, optional=True)
        check_host(host)
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes < 1024:
            raise OptionError(f"max_request_bytes: got {max_request_bytes!r}, expected an int >= 1024")
        if shared_memory is not None and not isinstance(shared_memory, bool):
            raise OptionError(f"shared_memory: got {shared_memory!r}, expected True, False or None (auto)")
        if repository is not None and not isinstance(repository, ModelRepository):
            raise OptionError(f"repository: got {type(repository).__name__}, expected a ModelRepository or None")
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
        self._shared_memory_given = shared_memory
        self.dataplane = FastDataPlane(model_registry=self.registered_models, repository=repository)
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
        # what turned it off: the flag itself, or auto on an interface that other hosts reach
        if self._shared_memory_given is False:
            given = "--shared-memory off (Server(shared_memory=False))"
        else:
            given = (
                f"--shared-memory auto, which allows it on a loopback --host only, and this server listens on "
                f"{self.host} (clients on other hosts must not name this host's memory)"
            )
        why = (
            f"system shared memory is off on this server: it was started with {given}; --shared-memory takes auto, "
            "on or off: start it with --shared-memory on (Server(shared_memory=True)) to allow it"
        )
        return SharedMemoryRegistry(os.environ.get(REGISTRY_ENV), enabled=self.shared_memory, disabled_reason=why)

    async def _serve(self, http_socket: Any, grpc: GrpcServer | None, ready: Any) -> None:
        assert self._stopping is not None
        loop = asyncio.get_running_loop()
        repository = self.dataplane.repository
        if repository is not None:
            await repository.start(self.registered_models)  # loads (and warms up) the models marked load = true
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
            await m.aclose()
        if repository is not None:
            await repository.close()
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
            >>> from amdinfer.serve import build_model
            >>> from amdinfer.testing.models import tiny_cnn
            >>> server = Server(http_port=8080, grpc_port=None)
            >>> server._models = [build_model("tiny", amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]))]
            >>> print(server.start_line({"tiny": [1, 32]}, None))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
            serving model 'tiny' on ort (CPUExecutionProvider), fp32, devices cpu; batches of up to 32
            rows within 2 ms, no buckets (auto: CPU EP, dynamic batch axis 'N'), warmed up at [1, 32]; REST
            http://127.0.0.1:8080, gRPC off, system shared memory on (pid ...)
        """
        repository = self.dataplane.repository
        models = [*self._models, *(repository.loaded if repository is not None else [])]
        parts = [_describe(m, warmed.get(m.name)) for m in models] or ["no model loaded"]
        if repository is not None:
            parts.append(f"model repository {repository.root}")
        if os.environ.get(NOTE_ENV):  # amdinfer serve's processes and decode threads, and why
            parts.append(os.environ[NOTE_ENV])
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
        plain = f"batches of up to {model.batcher.max_batch_size} rows within {delay:g} ms"
        text += f"; {model.batcher.chosen or plain}"  # chosen: the server's own choice, and why
    if warmed:
        text += f", warmed up at {warmed}"
    canary = model.batcher.canary
    if canary is not None:
        ref = canary.reference.info
        text += f"; canary re-runs {canary.rate:.2%} of requests on {ref.backend} ({ref.device}, {ref.precision})"
    return text
