"""The REST side of the server: bounded bodies, the OIP v2 infer routes, versions, quiet client errors.

KServe's own infer route declares a pydantic body: FastAPI parses any JSON body on the event loop, validates
it element by element and echoes the whole body into its 422 answer (a 40 MB body that is not a request
held the server for 89 s, health checks included). amdinfer's routes come first instead: the body is
refused with 413 before it is read when it is larger than the limit, read as bytes otherwise, and parsed
by :func:`~amdinfer.serve.decode_rest` on a worker thread when it is large, so the event loop keeps
answering ``/v2/health/*`` meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from kserve.errors import InvalidInput, ModelNotReady
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InputError
from ._oip import INFERENCE_HEADER, decode_rest, json_length, to_numpy, version_error

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "MAX_JSON_BYTES", "BodyLimit", "install_routes"]

logger = logging.getLogger("amdinfer.serve")

#: The default body limit: a batch of 64 images of 1024x1024x3 uint8 (201 MB) with room for the JSON header;
#: the same limit bounds gRPC messages.
DEFAULT_MAX_REQUEST_BYTES = 256 << 20
#: The JSON part of a request (the whole body without binary tensors) at most: parsing JSON numbers costs
#: ~30x their binary size in memory and time; larger tensors belong in binary data.
MAX_JSON_BYTES = 64 << 20
#: Bodies larger than this are parsed on a worker thread, not on the event loop.
_OFF_LOOP_BYTES = 256 << 10


def _too_large(limit: int, got: str) -> str:
    return (
        f"request body: got {got}, expected at most {limit} bytes (the server's --max-request-bytes; send "
        "fewer items per request)"
    )


class BodyLimit:
    """ASGI middleware: bodies over ``limit`` bytes get 413 before they are read; bad lengths get 400.

    A declared ``Content-Length`` over the limit is answered at once, without reading a byte. A body sent
    without a length (chunked) is counted as it arrives and refused as soon as it passes the limit.

    Example:
        >>> import asyncio
        >>> sent = []
        >>> async def app(scope, receive, send): raise AssertionError("not reached")
        >>> async def send(message): sent.append(message)
        >>> scope = {"type": "http", "headers": [(b"content-length", b"2000")]}
        >>> asyncio.run(BodyLimit(app, limit=1000)(scope, None, send))
        >>> sent[0]["status"]
        413
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = int(limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                declared = value
        if declared is not None:
            if not declared.isdigit():
                await _answer(send, 400, f"Content-Length: got {declared[:40]!r}, expected a byte count")
                return
            if int(declared) > self.limit:
                await _answer(send, 413, _too_large(self.limit, f"Content-Length {int(declared)}"))
                return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, _too_large(self.limit, f"more than {self.limit} bytes (chunked)"))
            return message

        await self.app(scope, counted, send)


async def _answer(send: Send, status: int, message: str) -> None:
    body = orjson.dumps({"error": message})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _decode(body: bytes, header: str | None, model_name: str, version: str | None) -> Any:
    """Parse a request and turn its JSON data into arrays (the costly part, off the loop for large bodies)."""
    request = decode_rest(body, json_length(header, len(body)), model_name, max_json_bytes=MAX_JSON_BYTES)
    request.model_version = version
    try:
        for inp in request.inputs:
            if inp._raw_data is None:
                inp._data = to_numpy(inp)
    except InputError as exc:
        raise InvalidInput(str(exc)) from None
    return request


async def _client_error(request: Request, exc: Exception) -> JSONResponse:
    """400 with the message; one log line, no traceback: the client sent it, the server is fine."""
    logger.info("400 %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(status_code=400, content={"error": str(exc)})


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    logger.info("%d %s %s: %s", exc.status_code, request.method, request.url.path, exc.detail)
    return JSONResponse(status_code=exc.status_code, content={"error": exc.detail})


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 without the request body echoed back (it may be huge)."""
    errors: list[dict[str, Any]] = getattr(exc, "errors", list)()
    where = [".".join(str(p) for p in e.get("loc", ())) + ": " + str(e.get("msg", "")) for e in errors[:5]]
    return JSONResponse(status_code=422, content={"error": "request does not validate", "detail": where})


def install_routes(app: Any, dataplane: Any, *, max_request_bytes: int) -> None:
    """amdinfer's REST routes, handlers and body limit on KServe's FastAPI ``app`` (first match wins).

    - ``POST /v2/models/{name}[/versions/{v}]/infer``: the body read as bytes under the limit and decoded by
      :func:`~amdinfer.serve.decode_rest` (JSON or binary tensors), large bodies off the event loop;
    - ``GET /v2/models/{name}/versions/{v}[/ready]``: the same answer for a version as gRPC gives;
    - client errors (``InvalidInput``, 413, 422) answered with their message and logged in one line.

    Example:
        >>> from fastapi import FastAPI
        >>> from kserve.model_repository import ModelRepository
        >>> from amdinfer.serve import FastDataPlane
        >>> app = FastAPI()
        >>> install_routes(app, FastDataPlane(model_registry=ModelRepository()), max_request_bytes=1 << 20)
        >>> [r.path for r in app.router.routes][:2]
        ['/v2/models/{model_name}/infer', '/v2/models/{model_name}/versions/{model_version}/infer']
    """
    from fastapi.exceptions import RequestValidationError

    async def infer(request: Request, model_name: str, model_version: str | None = None) -> Response:
        if not await dataplane.model_ready(model_name, True):
            raise ModelNotReady(model_name)
        body = await request.body()  # bounded by BodyLimit, installed below with these routes
        header = request.headers.get(INFERENCE_HEADER)
        if len(body) > _OFF_LOOP_BYTES:
            infer_request = await asyncio.to_thread(_decode, body, header, model_name, model_version)
        else:
            infer_request = _decode(body, header, model_name, model_version)
        headers = dict(request.headers)
        response, response_headers = await dataplane.infer(
            model_name=model_name, request=infer_request, headers=headers
        )
        response, encoded_headers = dataplane.encode(
            model_name=model_name, response=response, headers=headers, req_attributes={}
        )
        response_headers = {**response_headers, **encoded_headers}
        for drop in ("content-length", "content-type"):
            response_headers.pop(drop, None)
        if isinstance(response, bytes):
            return Response(response, media_type="application/octet-stream", headers=response_headers)
        return Response(orjson.dumps(response), media_type="application/json", headers=response_headers)

    async def versioned(model_name: str, model_version: str) -> Response:
        await dataplane.get_model(model_name)  # 404 for an unknown model, as without a version
        raise InvalidInput(version_error(model_name, model_version))

    routes = [
        ("/v2/models/{model_name}/infer", infer, ["POST"]),
        ("/v2/models/{model_name}/versions/{model_version}/infer", infer, ["POST"]),
        ("/v2/models/{model_name}/versions/{model_version}", versioned, ["GET"]),
        ("/v2/models/{model_name}/versions/{model_version}/ready", versioned, ["GET"]),
    ]
    for i, (path, endpoint, methods) in enumerate(routes):
        app.add_api_route(path, endpoint, methods=methods, include_in_schema=False)
        app.router.routes.insert(i, app.router.routes.pop())  # ahead of KServe's routes for the same paths
    app.add_exception_handler(InvalidInput, _client_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(BodyLimit, limit=max_request_bytes)
