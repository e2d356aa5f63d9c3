"""Triton's model-configuration route: ``GET /v2/models/NAME[/versions/V]/config`` and the gRPC ``ModelConfig`` rpc.

The answer is Triton's ``model_config.proto`` (as JSON over REST, as the message over gRPC), built from what the
server runs, not from what was asked: the batcher's ``max_batch_size`` and delay, the engine's batch buckets
(``dynamic_batching.preferred_batch_size``), the devices of this process's workers and the server processes per
device (``instance_group``), the tensors of the engine, or of a recipe's answer (:func:`recipe_outputs`).

As Triton does, ``dims`` leave the batch axis out when ``max_batch_size`` is over 0, and have ``-1`` for a
dynamic axis; a tensor with no axis but the batch is ``dims: [1]`` with ``reshape: {shape: []}``. A model whose
requests do not share axis 0 with their answers (an engine without a shared batch axis; a detector or OCR recipe,
whose answers hold one row per box or text line, with ``*_batch_index``) has ``max_batch_size: 0`` and its full
shapes; ``dynamic_batching`` is there whenever the server batches requests (``max_batch_size`` over 1).
"""

from __future__ import annotations

from typing import Any

from ._answer_specs import engine_of as _engine
from ._answer_specs import recipe_outputs
from ._oip import AmdinferModel, version_error

__all__ = ["TRITON_DATATYPES", "install_config_routes", "model_config", "model_config_handlers"]

#: OIP v2 datatype -> Triton's ``DataType`` name
TRITON_DATATYPES = {
    "BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
    "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64", "BYTES": "TYPE_STRING", "BF16": "TYPE_BF16",
}  # fmt: skip


def _tensor(spec: dict[str, Any], batched: bool, dims_field: str = "dims") -> dict[str, Any]:
    dims = list(spec["shape"][1:] if batched else spec["shape"])
    entry: dict[str, Any] = {"name": spec["name"], "data_type": TRITON_DATATYPES.get(spec["datatype"], "TYPE_INVALID")}
    entry[dims_field] = dims or [1]
    if not dims:
        entry["reshape"] = {"shape": []}
    return entry


def _instance_group(model: AmdinferModel) -> dict[str, Any]:
    from ._supervisor import process_slot

    slot = process_slot()
    devices = [str(_engine(w).info.device or "cpu") for w in model.batcher.workers]
    gpus = [int(d.rpartition(":")[2]) for d in devices if d != "cpu" and d.rpartition(":")[2].isdigit()]
    group: dict[str, Any] = {"name": model.name, "count": slot[1] if slot else 1}
    group["kind"] = "KIND_GPU" if gpus else "KIND_CPU"
    if gpus:
        group["gpus"] = gpus
    return group


async def model_config(model: AmdinferModel) -> dict[str, Any]:
    """Triton's model configuration of a served model, as JSON (what ``tritonclient.http``'s
    ``get_model_config`` returns).

    Example:
        >>> import asyncio, amdinfer, json
        >>> from amdinfer.serve import build_model
        >>> from amdinfer.testing.models import tiny_cnn
        >>> model = build_model("tiny", amdinfer.load(tiny_cnn(), providers=["cpu"]), max_batch_size=8)
        >>> config = asyncio.run(model_config(model))
        >>> config["max_batch_size"], config["input"], config["dynamic_batching"]
        (8, [{'name': 'input', 'data_type': 'TYPE_FP32', 'dims': [3, 32, 32]}], \
{'preferred_batch_size': [], 'max_queue_delay_microseconds': 2000})
        >>> config["instance_group"]
        [{'name': 'tiny', 'count': 1, 'kind': 'KIND_CPU'}]
        >>> asyncio.run(model.aclose())
    """
    first: Any = model.batcher.workers[0]
    engine = _engine(first)
    outputs, rows = await recipe_outputs(model)
    batched = bool(first.batchable) and rows
    batch = model.batcher.max_batch_size
    ort = engine.info.backend == "ort"
    config: dict[str, Any] = {
        "name": model.name,
        "platform": "onnxruntime_onnx" if ort else "",
        "backend": "onnxruntime" if ort else str(engine.info.backend),
    }
    version = getattr(model, "version", "")
    if version:
        config["version_policy"] = {"specific": {"versions": [int(version)]}}
    config["max_batch_size"] = batch if batched else 0
    config["input"] = [_tensor(t, batched) for t in model.get_input_types()]
    config["output"] = [_tensor(t, batched) for t in outputs]
    if batch > 1:
        config["dynamic_batching"] = {
            "preferred_batch_size": [b for b in engine.batch_buckets if b <= batch],
            "max_queue_delay_microseconds": round(model.batcher.max_delay * 1e6),
        }
    config["instance_group"] = [_instance_group(model)]
    config["default_model_filename"] = "model.onnx"
    return config


async def _served(dataplane: Any, name: str, version: str) -> AmdinferModel:
    """The model ``name`` (``ModelNotFound`` / ``ModelNotReady`` as for metadata); a version other than the one
    served is refused."""
    from kserve.errors import InvalidInput

    model = await dataplane.get_model(name)
    if not isinstance(model, AmdinferModel):
        raise InvalidInput(f"model {name!r}: not an amdinfer model; it has no Triton configuration")
    if version and version != getattr(model, "version", ""):
        raise InvalidInput(version_error(name, version, getattr(model, "version", "")))
    return model


def install_config_routes(app: Any, dataplane: Any) -> None:
    """``GET /v2/models/{name}/config`` and ``GET /v2/models/{name}/versions/{v}/config`` on ``app``: Triton's model
    configuration as JSON (:func:`model_config`), ahead of KServe's routes.

    Example:
        >>> from fastapi import FastAPI
        >>> from kserve.model_repository import ModelRepository
        >>> from amdinfer.serve import FastDataPlane
        >>> app = FastAPI()
        >>> install_config_routes(app, FastDataPlane(model_registry=ModelRepository()))
        >>> [r.path for r in app.router.routes][:2]
        ['/v2/models/{model_name}/config', '/v2/models/{model_name}/versions/{model_version}/config']
    """
    import orjson
    from starlette.responses import Response

    async def config(model_name: str, model_version: str = "") -> Response:
        model = await _served(dataplane, model_name, model_version)
        return Response(orjson.dumps(await model_config(model)), media_type="application/json")

    routes = ["/v2/models/{model_name}/config", "/v2/models/{model_name}/versions/{model_version}/config"]
    for i, path in enumerate(routes):
        app.add_api_route(path, config, methods=["GET"], include_in_schema=False)
        app.router.routes.insert(i, app.router.routes.pop())


def model_config_handlers(dataplane: Any) -> dict[str, Any]:
    """The gRPC ``ModelConfig`` handler of ``inference.GRPCInferenceService`` (Triton's messages,
    :mod:`amdinfer.serve._config_proto`), by method name.

    Example:
        >>> from kserve.model_repository import ModelRepository
        >>> from amdinfer.serve import FastDataPlane
        >>> list(model_config_handlers(FastDataPlane(model_registry=ModelRepository())))
        ['ModelConfig']
    """
    import grpc
    from google.protobuf import json_format

    from ._config_proto import messages

    m = messages()

    async def config(request: Any, context: Any) -> Any:
        model = await _served(dataplane, request.name, request.version)
        response = m["ModelConfigResponse"]()
        json_format.ParseDict(await model_config(model), response.config)
        return response

    handler = grpc.unary_unary_rpc_method_handler(
        config,
        request_deserializer=m["ModelConfigRequest"].FromString,
        response_serializer=m["ModelConfigResponse"].SerializeToString,
    )
    return {"ModelConfig": handler}
