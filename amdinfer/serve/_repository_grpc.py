"""The model-repository rpcs of Triton's ``inference.GRPCInferenceService``: RepositoryIndex,
RepositoryModelLoad, RepositoryModelUnload.

KServe's proto names the load/unload rpcs too, but with other messages (``model_name`` is field 1 there,
field 2 in Triton's), so tritonclient's requests would be misread: these handlers replace KServe's. The
messages are built from a descriptor in a private pool, as the shared-memory ones are
(:mod:`amdinfer.serve._shm_grpc`); field numbers and types are Triton's ``grpc_service.proto``.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError
from ._shm_grpc import _add_fields

__all__ = ["messages", "repository_handlers"]

_STRING, _BOOL, _INT64, _BYTES, _MESSAGE = 9, 8, 3, 12, 11
_MESSAGES: dict[str, Any] = {}


def messages() -> dict[str, Any]:
    """The message classes by name (built once).

    Example:
        >>> m = messages()["RepositoryModelLoadRequest"](model_name="tiny")
        >>> m.parameters["config"].string_param = '{"max_batch_size": 4}'
        >>> type(m).FromString(m.SerializeToString()).parameters["config"].string_param
        '{"max_batch_size": 4}'
    """
    if _MESSAGES:
        return _MESSAGES
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    repeated = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    proto = descriptor_pb2.FileDescriptorProto(name="amdinfer_repository.proto", package="inference", syntax="proto3")
    param = proto.message_type.add(name="ModelRepositoryParameter")
    param.oneof_decl.add(name="parameter_choice")
    _add_fields(param, [("bool_param", 1, _BOOL), ("int64_param", 2, _INT64), ("string_param", 3, _STRING),
                        ("bytes_param", 4, _BYTES)])  # fmt: skip
    for f in param.field:
        f.oneof_index = 0
    _add_fields(proto.message_type.add(name="RepositoryIndexRequest"), [("repository_name", 1, _STRING),
                                                                         ("ready", 2, _BOOL)])  # fmt: skip
    index = proto.message_type.add(name="RepositoryIndexResponse")
    _add_fields(index.nested_type.add(name="ModelIndex"), [("name", 1, _STRING), ("version", 2, _STRING),
                                                           ("state", 3, _STRING), ("reason", 4, _STRING)])  # fmt: skip
    _add_fields(index, [("models", 1, _MESSAGE, ".inference.RepositoryIndexResponse.ModelIndex")])
    index.field[0].label = repeated
    for name in ("RepositoryModelLoad", "RepositoryModelUnload"):
        request = proto.message_type.add(name=f"{name}Request")
        entry = request.nested_type.add(name="ParametersEntry")
        entry.options.map_entry = True
        _add_fields(entry, [("key", 1, _STRING), ("value", 2, _MESSAGE, ".inference.ModelRepositoryParameter")])
        _add_fields(request, [("repository_name", 1, _STRING), ("model_name", 2, _STRING),
                              ("parameters", 3, _MESSAGE, f".inference.{name}Request.ParametersEntry")])  # fmt: skip
        request.field[2].label = repeated
        proto.message_type.add(name=f"{name}Response")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    for m in proto.message_type:
        _MESSAGES[m.name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{m.name}"))
    return _MESSAGES


def _parameters(where: str, request: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The request's parameters as plain values; unknown names are refused."""
    out = {}
    for key, value in request.parameters.items():
        if key not in allowed:
            raise InputError(
                f"{where}: got parameter {key[:80]!r}, expected only {list(allowed)} (model files are not taken: "
                "put the model in the repository folder)"
            )
        choice = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, choice) if choice else None
    return out


def repository_handlers(dataplane: Any) -> dict[str, Any]:
    """The three rpc handlers over ``dataplane.repository`` (``None``: the index lists the served models;
    load and unload are refused). Errors are :class:`~amdinfer.InputError` (``INVALID_ARGUMENT``).

    Example:
        >>> from kserve.model_repository import ModelRepository
        >>> from amdinfer.serve import FastDataPlane
        >>> sorted(repository_handlers(FastDataPlane(model_registry=ModelRepository())))
        ['RepositoryIndex', 'RepositoryModelLoad', 'RepositoryModelUnload']
    """
    import grpc

    m = messages()

    def repository(where: str) -> Any:
        if dataplane.repository is None:
            served = sorted(dataplane._model_registry.get_models())
            raise InputError(
                f"{where}: this server has no model repository (it serves {served}); start it with "
                "--model-repository DIR to load and unload models"
            )
        return dataplane.repository

    async def index(request: Any, context: Any) -> Any:
        if dataplane.repository is None:
            rows = [{"name": n, "state": "READY", "reason": ""} for n in sorted(dataplane._model_registry.get_models())]
        else:
            rows = await dataplane.repository.index(bool(request.ready))
        response = m["RepositoryIndexResponse"]()
        for row in rows:
            response.models.add(name=row["name"], state=row["state"], reason=row["reason"])
        return response

    async def load(request: Any, context: Any) -> Any:
        where = f"load {request.model_name[:80]!r}"
        params = _parameters(where, request, ("config",))
        await repository(where).load(request.model_name, params.get("config"))
        return m["RepositoryModelLoadResponse"]()

    async def unload(request: Any, context: Any) -> Any:
        where = f"unload {request.model_name[:80]!r}"
        _parameters(where, request, ("unload_dependents",))
        await repository(where).unload(request.model_name)
        return m["RepositoryModelUnloadResponse"]()

    rpcs = {"RepositoryIndex": index, "RepositoryModelLoad": load, "RepositoryModelUnload": unload}
    return {
        method: grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=m[f"{method}Request"].FromString,
            response_serializer=m[f"{method}Response"].SerializeToString,
        )
        for method, fn in rpcs.items()
    }
