"""The gRPC side of the server: KServe's servicer on a grpc.aio server bound to the chosen host.

Errors get the error table's code (:func:`amdinfer.errors.error_status`: ``INVALID_ARGUMENT`` for a bad
request, ``NOT_FOUND`` for an unknown model, ``INTERNAL`` for the server's own failure); a model version gets
the answer REST gives; a datatype is checked by name before KServe decodes it.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc
from kserve.protocol.grpc.interceptors import ExceptionToStatusInterceptor
from kserve.protocol.grpc.servicer import InferenceServicer

from ._config import model_config_handlers
from ._net import bound_socket
from ._oip import request_from_grpc, version_error
from ._repository_grpc import repository_handlers
from ._shm import SharedMemoryRegistry
from ._shm_grpc import SERVICE, add_shared_memory_rpcs
from ._statuses import answer_error, log_error
from ._stream import stream_handlers

__all__ = ["GrpcServer"]

_OIP_DATATYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",  # encoded images for pipelines that start with LoadImage (see amdinfer.serve._images)
)


class _Interceptor(ExceptionToStatusInterceptor):
    """The error table's status (:mod:`amdinfer.serve._statuses`): the request's fault in one log line, the
    server's own with its traceback; anything else is KServe's (``INTERNAL``)."""

    async def handle_exception(self, ex: Exception, request_or_iterator: Any, context: Any, method_name: str) -> None:
        from grpc import StatusCode

        model = getattr(request_or_iterator, "model_name", None)
        answer = answer_error(ex, model if isinstance(model, str) else None)
        if answer is None:
            await super().handle_exception(ex, request_or_iterator, context, method_name)
            return
        log_error(answer, f"{answer.grpc} {method_name}", ex)
        await context.abort(StatusCode[answer.grpc], answer.message)


class _Servicer(InferenceServicer):
    """KServe's servicer; a model version gets the answer REST gives, a datatype is checked by name."""

    async def ModelInfer(self, request: Any, context: Any) -> Any:  # gRPC's method name
        from kserve.errors import InvalidInput
        from kserve.utils.utils import to_headers

        for tensor in request.inputs:
            if tensor.datatype not in _OIP_DATATYPES:
                raise InvalidInput(
                    f"input {tensor.name[:80]!r}: got datatype {tensor.datatype[:40]!r}, expected one of "
                    f"{', '.join(_OIP_DATATYPES)}"
                )
        # KServe's decoder pairs raw_input_contents with the inputs by position; with shared-memory inputs
        # they belong to the other inputs only
        infer_request = request_from_grpc(request)
        response, _ = await self._data_plane.infer(
            request=infer_request, headers=to_headers(context), model_name=request.model_name
        )
        return response.to_grpc()

    async def ModelMetadata(self, request: Any, context: Any) -> Any:  # gRPC's method name
        await self._versioned(request, context)
        return await super().ModelMetadata(request, context)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        await self._versioned(request, context)
        return await super().ModelReady(request, context)

    async def _versioned(self, request: Any, context: Any) -> None:
        if request.version:
            from kserve.errors import InvalidInput

            model = await self._data_plane.get_model(request.name)  # NOT_FOUND for an unknown model first
            served = getattr(model, "version", "")
            if request.version != served:  # a Triton-layout model's own version is its unversioned answer
                raise InvalidInput(version_error(request.name, request.version, served))


def _kserve_handlers(servicer: Any) -> dict[str, Any]:
    """KServe's rpc handlers of ``inference.GRPCInferenceService`` by method name (what its generated code
    would add to a server)."""
    captured: dict[str, Any] = {}

    class _Capture:
        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            pass

        def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
            captured.update(handlers)

    grpc_predict_v2_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, _Capture())
    return captured


class GrpcServer:
    """KServe's gRPC servicer on a grpc.aio server listening on ``host:port`` (KServe's binds ``[::]``).

    Bound on construction (a taken port is an error before the models load), started by :meth:`start`.
    """

    def __init__(
        self,
        host: str,
        port: int,
        dataplane: Any,
        repository_extension: Any,
        grace: float,
        *,
        max_message: int,
        reuse_port: bool,
        shm: SharedMemoryRegistry | None = None,
    ) -> None:
        from grpc import aio

        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._grace = grace
        self._server = aio.server(
            futures.ThreadPoolExecutor(max_workers=4),
            interceptors=(_Interceptor(),),
            options=[
                ("grpc.max_send_message_length", max_message),
                ("grpc.max_receive_message_length", max_message),
                # gRPC sets SO_REUSEPORT by default: a second server would share a taken port silently
                ("grpc.so_reuseport", 1 if reuse_port else 0),
            ],
        )
        servicer = _Servicer(dataplane, repository_extension)
        handlers = _kserve_handlers(servicer)
        handlers.update(repository_handlers(dataplane))  # Triton's wire forms, in place of KServe's
        handlers.update(model_config_handlers(dataplane))  # Triton's ModelConfig (amdinfer.serve._config)
        handlers.update(stream_handlers(servicer.ModelInfer))  # Triton's ModelStreamInfer (amdinfer.serve._stream)
        from grpc import method_handlers_generic_handler

        self._server.add_generic_rpc_handlers((method_handlers_generic_handler(SERVICE, handlers),))
        self._server.add_registered_method_handlers(SERVICE, handlers)
        if shm is not None:  # Triton's shared-memory rpcs, next to KServe's of the same service
            add_shared_memory_rpcs(self._server, shm)
        if not reuse_port and port:  # a taken port in one line, before gRPC's own error log
            bound_socket(host, port, reuse_port=False, protocol="gRPC").close()
        try:
            bound = self._server.add_insecure_port(self.address)
        except Exception as exc:  # grpc raises RuntimeError("Failed to bind ...") in recent releases
            bound, why = 0, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:
            why = "the port is taken or the address is not this machine's"
        if bound == 0:
            raise OSError(f"gRPC: cannot listen on {self.address}: {why}")

    async def start(self) -> None:
        await self._server.start()

    async def wait(self) -> None:
        await self._server.wait_for_termination()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=self._grace)
