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
import base64
import binascii
import logging
from typing import Any

import orjson
from kserve.errors import InvalidInput, ModelNotReady
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._config import install_config_routes
from ._oip import INFERENCE_HEADER, decode_rest, json_length, to_numpy, version_error
from ._shm import REGION, SharedMemoryRegistry, uses_shm
from ._statuses import HANDLED, answer_error, log_error

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "MAX_JSON_BYTES",
    "BodyLimit",
    "JsonResponse",
    "install_repository_routes",
    "install_routes",
    "install_shm_routes",
]

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


class JsonResponse(JSONResponse):
    """JSON written by orjson (NumPy values too): what KServe's app asks of FastAPI's ``ORJSONResponse``, which
    FastAPI deprecates with a warning at every response. The server makes it the app's default response class
    before KServe's routes are added (:func:`~amdinfer.serve.Server`).

    Example:
        >>> import numpy as np
        >>> JsonResponse({"shape": np.int64(3)}).body
        b'{"shape":3}'
    """

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


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
    """Parse a request and turn its JSON data and its ``BYTES`` elements into arrays (the costly part, off the
    loop for large bodies)."""
    request = decode_rest(body, json_length(header, len(body)), model_name, max_json_bytes=MAX_JSON_BYTES)
    request.model_version = version
    for inp in request.inputs:
        if inp.parameters and REGION in inp.parameters:
            continue  # read by the data plane
        if inp._raw_data is None or inp.datatype == "BYTES":  # JSON numbers; length-prefixed BYTES (images)
            inp._data = to_numpy(inp)
    return request


async def _error(request: Request, exc: Exception) -> JSONResponse:
    """The status and message of the error table (:mod:`amdinfer.serve._statuses`): the request's fault in one
    log line, the server's own with its traceback."""
    answer = answer_error(exc, request.path_params.get("model_name"))
    if answer is None:  # registered only for the table's kinds
        raise exc
    log_error(answer, f"{answer.http} {request.method} {request.url.path}", exc)
    return JSONResponse(status_code=answer.http, content={"error": answer.message})


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
    - errors answered by the error table (:func:`amdinfer.errors.error_status`, KServe's protocol errors):
      the request's (``InvalidInput``, ``InputError``) with their message, logged in one line; 413, 422;
    - Triton's repository routes (:func:`install_repository_routes`) and model configuration
      (:func:`~amdinfer.serve._config.install_config_routes`).

    Example:
        >>> from fastapi import FastAPI
        >>> from kserve.model_repository import ModelRepository
        >>> from amdinfer.serve import FastDataPlane
        >>> app = FastAPI()
        >>> install_routes(app, FastDataPlane(model_registry=ModelRepository()), max_request_bytes=1 << 20)
        >>> [r.path for r in app.router.routes][:6]  # doctest: +NORMALIZE_WHITESPACE
        ['/v2/models/{model_name}/config', '/v2/models/{model_name}/versions/{model_version}/config',
         '/v2/repository/index', '/v2/repository/models/{model_name}/load',
         '/v2/repository/models/{model_name}/unload', '/v2/models/{model_name}/infer']
    """
    from fastapi.exceptions import RequestValidationError

    async def infer(request: Request, model_name: str, model_version: str | None = None) -> Response:
        if not await dataplane.model_ready(model_name, True):
            raise ModelNotReady(model_name, dataplane.unavailable_reason(model_name))
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
        if uses_shm(infer_request):
            response = _without_null_data(response, encoded_headers)
        response_headers = {**response_headers, **encoded_headers}
        for drop in ("content-length", "content-type"):
            response_headers.pop(drop, None)
        if isinstance(response, bytes):
            return Response(response, media_type="application/octet-stream", headers=response_headers)
        return Response(orjson.dumps(response), media_type="application/json", headers=response_headers)

    async def versioned(request: Request, model_name: str, model_version: str) -> Response:
        served = getattr(await dataplane.get_model(model_name), "version", "")  # 404 for an unknown model first
        if model_version != served:
            raise InvalidInput(version_error(model_name, model_version, served))
        if request.url.path.endswith("/ready"):  # the served version: the answers without a version
            if not await dataplane.model_ready(model_name):
                raise ModelNotReady(model_name, dataplane.unavailable_reason(model_name))
            return JsonResponse({"name": model_name, "ready": True})
        return JsonResponse({**await dataplane.model_metadata(model_name), "versions": [served]})

    routes = [
        ("/v2/models/{model_name}/infer", infer, ["POST"]),
        ("/v2/models/{model_name}/versions/{model_version}/infer", infer, ["POST"]),
        ("/v2/models/{model_name}/versions/{model_version}", versioned, ["GET"]),
        ("/v2/models/{model_name}/versions/{model_version}/ready", versioned, ["GET"]),
    ]
    for i, (path, endpoint, methods) in enumerate(routes):
        app.add_api_route(path, endpoint, methods=methods, include_in_schema=False)
        app.router.routes.insert(i, app.router.routes.pop())  # ahead of KServe's routes for the same paths
    install_repository_routes(app, dataplane)
    install_config_routes(app, dataplane)  # Triton's model configuration (amdinfer.serve._config)
    for kind in HANDLED:
        app.add_exception_handler(kind, _error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(BodyLimit, limit=max_request_bytes)


def _without_null_data(response: Any, headers: dict[str, str]) -> Any:
    """The response without ``"data": null`` (outputs written to shared memory define no data, says Triton)."""
    if isinstance(response, dict):
        for out in response.get("outputs", []):
            if "data" in out and out["data"] is None:
                del out["data"]
        return response
    if isinstance(response, bytes) and INFERENCE_HEADER in headers:
        n = int(headers[INFERENCE_HEADER])
        head = _without_null_data(orjson.loads(response[:n]), {})
        encoded = orjson.dumps(head)
        headers[INFERENCE_HEADER] = str(len(encoded))
        return encoded + response[n:]
    return response


def install_shm_routes(app: Any, registry: SharedMemoryRegistry) -> None:
    """Triton's shared-memory routes on ``app`` over ``registry``:
    ``/v2/systemsharedmemory[/region/NAME]/status|register|unregister`` and the same under
    ``/v2/cudasharedmemory`` (register body ``{"raw_handle": {"b64": ...}, "device_id": N, "byte_size": B}``).

    Example:
        >>> from fastapi import FastAPI
        >>> app = FastAPI()
        >>> registry = SharedMemoryRegistry(enabled=False)
        >>> install_shm_routes(app, registry)
        >>> sorted({r.path for r in app.router.routes if "systemshared" in r.path})[:2]
        ['/v2/systemsharedmemory/region/{region_name}/register', '/v2/systemsharedmemory/region/{region_name}/status']
        >>> registry.close()
    """

    async def status(region_name: str = "") -> Response:
        return Response(
            orjson.dumps([s.to_json() for s in registry.status(region_name)]), media_type="application/json"
        )

    async def register(request: Request, region_name: str) -> Response:
        spec = await _json_object(request, f"region {region_name!r}")
        if not {"key", "byte_size"} <= set(spec):
            raise InvalidInput(f'region {region_name!r}: expected a JSON object with "key", "byte_size" and "offset"')
        registry.register(region_name, spec["key"], spec.get("offset", 0), spec["byte_size"])
        logger.debug("registered shared-memory region %r: %s", region_name, spec)
        return Response(status_code=200)

    async def unregister(region_name: str = "") -> Response:
        registry.unregister(region_name)
        return Response(status_code=200)

    async def cuda_status(region_name: str = "") -> Response:
        specs = registry.status(region_name, cuda=True)
        return Response(orjson.dumps([s.to_json() for s in specs]), media_type="application/json")

    async def cuda_register(request: Request, region_name: str) -> Response:
        where = f"CUDA shared-memory region {region_name!r}"
        spec = await _json_object(request, where)
        if not {"raw_handle", "device_id", "byte_size"} <= set(spec):
            raise InvalidInput(f'{where}: expected a JSON object with "raw_handle", "device_id" and "byte_size"')
        registry.register_cuda(region_name, _b64_handle(where, spec["raw_handle"]), spec["device_id"],
                               spec["byte_size"])  # fmt: skip
        logger.debug("registered CUDA shared-memory region %r on device %s", region_name, spec["device_id"])
        return Response(status_code=200)

    async def cuda_unregister(region_name: str = "") -> Response:
        registry.unregister(region_name, cuda=True)
        return Response(status_code=200)

    endpoints = {
        "/v2/systemsharedmemory": (status, register, unregister),
        "/v2/cudasharedmemory": (cuda_status, cuda_register, cuda_unregister),
    }
    for base, (on_status, on_register, on_unregister) in endpoints.items():
        for path, endpoint, method in (
            ("/status", on_status, "GET"),
            ("/region/{region_name}/status", on_status, "GET"),
            ("/region/{region_name}/register", on_register, "POST"),
            ("/unregister", on_unregister, "POST"),
            ("/region/{region_name}/unregister", on_unregister, "POST"),
        ):
            app.add_api_route(base + path, endpoint, methods=[method], include_in_schema=False)


def _b64_handle(where: str, raw_handle: Any) -> bytes:
    """The handle bytes of a REST register body's ``{"b64": "..."}``."""
    b64 = raw_handle.get("b64") if isinstance(raw_handle, dict) else None
    if not isinstance(b64, str):
        raise InvalidInput(f'{where}: raw_handle got {str(raw_handle)[:80]!r}, expected {{"b64": "<base64 text>"}}')
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"{where}: raw_handle.b64 is not base64 ({exc}): {b64[:80]!r}") from None


async def _json_object(request: Request, where: str) -> dict[str, Any]:
    """A request's JSON object body (``{}`` when empty)."""
    body = await request.body()
    if not body.strip():
        return {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"{where}: the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{where}: got a JSON {type(data).__name__}, expected an object")
    return data


def _parameters(data: dict[str, Any], where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    params = data.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidInput(f"{where}: 'parameters' got {type(params).__name__}, expected an object")
    unknown = sorted(k for k in params if k not in allowed)
    if unknown:
        raise InvalidInput(
            f"{where}: got parameters {unknown}, expected only {list(allowed)} (model files are not taken: "
            "put the model in the repository folder)"
        )
    return params


def install_repository_routes(app: Any, dataplane: Any) -> None:
    """Triton's model-repository routes on ``app`` over ``dataplane.repository``, ahead of KServe's (whose
    load/unload take no body and close no engine).

    - ``POST /v2/repository/index`` (body ``{"ready": bool}`` or empty): ``[{"name", "state", "reason"}]``;
    - ``POST /v2/repository/models/{name}/load`` (``{"parameters": {"config": "<JSON options>"}}`` or
      empty): load or reload;
    - ``POST /v2/repository/models/{name}/unload``: unload after the requests in flight.

    Without a repository the index lists the served models and load/unload answer 400. Errors (a name not
    in the folder, a path out of it, a model that fails to load) answer 400 with the reason.

    Example:
        >>> from fastapi import FastAPI
        >>> from kserve.model_repository import ModelRepository
        >>> from amdinfer.serve import FastDataPlane
        >>> app = FastAPI()
        >>> install_repository_routes(app, FastDataPlane(model_registry=ModelRepository()))
        >>> [r.path for r in app.router.routes][:1]
        ['/v2/repository/index']
    """

    def repository(where: str) -> Any:
        repo = dataplane.repository
        if repo is None:
            served = sorted(dataplane._model_registry.get_models())
            raise InvalidInput(
                f"{where}: this server has no model repository (it serves {served}); start it with "
                "--model-repository DIR to load and unload models"
            )
        return repo

    async def index(request: Request) -> Response:
        data = await _json_object(request, "repository index")
        ready = data.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput(f"repository index: 'ready' got {ready!r}, expected true or false")
        if dataplane.repository is None:
            rows = [{"name": n, "state": "READY", "reason": ""} for n in sorted(dataplane._model_registry.get_models())]
        else:
            rows = await dataplane.repository.index(ready)
        return Response(orjson.dumps(rows), media_type="application/json")

    async def load(request: Request, model_name: str) -> Response:
        where = f"load {model_name!r}"
        params = _parameters(await _json_object(request, where), where, ("config",))
        await repository(where).load(model_name, params.get("config"))
        return Response(status_code=200)

    async def unload(request: Request, model_name: str) -> Response:
        where = f"unload {model_name!r}"
        params = _parameters(await _json_object(request, where), where, ("unload_dependents",))
        if not isinstance(params.get("unload_dependents", False), bool):
            raise InvalidInput(f"{where}: 'unload_dependents' got {params['unload_dependents']!r}, expected a bool")
        await repository(where).unload(model_name)
        return Response(status_code=200)

    routes = [
        ("/v2/repository/index", index),
        ("/v2/repository/models/{model_name}/load", load),
        ("/v2/repository/models/{model_name}/unload", unload),
    ]
    for i, (path, endpoint) in enumerate(routes):
        app.add_api_route(path, endpoint, methods=["POST"], include_in_schema=False)
        app.router.routes.insert(i, app.router.routes.pop())
