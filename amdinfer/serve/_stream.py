"""Triton's bidirectional ``ModelStreamInfer`` rpc of ``inference.GRPCInferenceService`` (KServe's proto does
not have it): what tritonclient's ``start_stream`` / ``async_stream_infer`` / ``stop_stream`` talk to.

Each ``ModelInferRequest`` read from a stream runs as its own task through the unary ``ModelInfer`` of the
server's servicer (datatype check, shared memory, binary contents, the batcher, the workers' per-request
isolation): requests of one stream are in flight together and batch with each other and with unary calls. The
answers are written in the order the requests were read, as Triton does for a model that is not decoupled
(``stream_infer_handler.cc``: "its response is sent in the same order as the request was received"); a slow
request holds back the answers behind it, never their work.

Each answer is a ``ModelStreamInferResponse``: ``infer_response`` (the unary answer, its ``id`` the request's,
plus Triton's ``triton_final_response: true`` parameter), or for a failed request ``error_message`` (the
message the unary call's status would carry) with an ``infer_response`` that holds only the request's ``id``,
``model_name`` and ``model_version`` (Triton's fields). A failure is confined to its request: the stream and
the other requests go on. The stream itself ends with a status only when reading it fails (the client went
away); ``stop_stream`` half-closes it and every request read is answered first.

At most :data:`MAX_IN_FLIGHT` requests of one stream are read and not yet answered; past that the server
stops reading (gRPC's flow control holds the client back). The message is built from a descriptor in a private
pool, as the shared-memory ones are (:mod:`amdinfer.serve._shm_grpc`); ``infer_response`` is declared
``bytes`` there, which has the wire form of the embedded message (both are length-delimited field 2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from ._statuses import answer_error, log_error

__all__ = ["MAX_IN_FLIGHT", "messages", "stream_handlers"]

logger = logging.getLogger("amdinfer.serve")

#: requests of one stream read and not yet answered (a constant, as the server's other request limits are)
MAX_IN_FLIGHT = 256
#: a request parameter of tritonclient's ``async_stream_infer`` (decoupled models only): taken off the request
_EMPTY_FINAL = "triton_enable_empty_final_response"
_STRING, _BYTES = 9, 12
_MESSAGES: dict[str, Any] = {}


def messages() -> dict[str, Any]:
    """The message classes by name (built once): ``ModelStreamInferResponse``.

    Example:
        >>> from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
        >>> inner = pb.ModelInferResponse(id="r-1", model_name="tiny")
        >>> answer = messages()["ModelStreamInferResponse"](infer_response=inner.SerializeToString())
        >>> wire = answer.SerializeToString()  # Triton's form: field 2 holds the embedded ModelInferResponse
        >>> pb.ModelInferResponse.FromString(type(answer).FromString(wire).infer_response).id
        'r-1'
    """
    if _MESSAGES:
        return _MESSAGES
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from ._shm_grpc import _add_fields

    proto = descriptor_pb2.FileDescriptorProto(name="amdinfer_stream.proto", package="inference", syntax="proto3")
    _add_fields(proto.message_type.add(name="ModelStreamInferResponse"),
                [("error_message", 1, _STRING), ("infer_response", 2, _BYTES)])  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    name = "ModelStreamInferResponse"
    _MESSAGES[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{name}"))
    return _MESSAGES


def _failed(exc: Exception, request: Any) -> Any:
    """The answer to a request that failed: the unary call's message, logged as the unary call's is."""
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb

    answer = answer_error(exc, request.model_name or None)
    if answer is None:  # not a kind the error table knows: KServe's answer to the unary call
        logger.error("INTERNAL ModelStreamInfer %r: %s", request.model_name[:80], exc, exc_info=exc)
        message = "Internal server error"
    else:
        log_error(answer, f"{answer.grpc} ModelStreamInfer", exc)
        message = answer.message
    head = pb.ModelInferResponse(id=request.id, model_name=request.model_name, model_version=request.model_version)
    return messages()["ModelStreamInferResponse"](error_message=message, infer_response=head.SerializeToString())


async def _answer(model_infer: Any, request: Any, context: Any) -> Any:
    """One streamed request through the unary ``ModelInfer``; its answer, or its error as an answer."""
    if _EMPTY_FINAL in request.parameters:
        del request.parameters[_EMPTY_FINAL]  # a stream option, not the model's: every answer here is final
    try:
        response = await model_infer(request, context)
    except Exception as exc:  # confined to this request (CancelledError is not an Exception: it ends the task)
        return _failed(exc, request)
    response.parameters["triton_final_response"].bool_param = True
    return messages()["ModelStreamInferResponse"](infer_response=response.SerializeToString())


def stream_handlers(model_infer: Any) -> dict[str, Any]:
    """The ``ModelStreamInfer`` rpc handler over ``model_infer`` (the servicer's unary
    ``ModelInfer(request, context)`` coroutine), by method name, for ``inference.GRPCInferenceService``.

    Example:
        >>> async def model_infer(request, context):
        ...     raise NotImplementedError
        >>> handler = stream_handlers(model_infer)["ModelStreamInfer"]
        >>> handler.request_streaming, handler.response_streaming
        (True, True)
    """
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb

    async def model_stream_infer(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        room = asyncio.Semaphore(MAX_IN_FLIGHT)
        order: asyncio.Queue[asyncio.Task[Any] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in requests:
                    await room.acquire()
                    order.put_nowait(asyncio.create_task(_answer(model_infer, request, context)))
            finally:
                order.put_nowait(None)  # read to the end, or reading failed: the writer answers what was read

        reader = asyncio.create_task(read())
        current: asyncio.Task[Any] | None = None
        try:
            while (current := await order.get()) is not None:
                answer = await current
                yield answer
                room.release()
            await reader  # reading failed (not a half-close): the stream ends with that status
        finally:  # the client went away or the server stops: nothing left is answered
            reader.cancel()
            for task in [current, *_drain(order)]:
                if task is not None:
                    task.cancel()

    return {
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(
            model_stream_infer,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=messages()["ModelStreamInferResponse"].SerializeToString,
        )
    }


def _drain(queue: asyncio.Queue[Any]) -> list[Any]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items
