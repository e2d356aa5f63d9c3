"""The shared-memory rpcs of Triton's ``inference.GRPCInferenceService`` (KServe's proto does not have them).

The messages are built from a descriptor in a private pool: tritonclient's and KServe's protos register
``inference.*`` in protobuf's default pool, and these must not collide with either. The wire forms (field
numbers and types) are Triton's ``grpc_service.proto``.
"""

from __future__ import annotations

from typing import Any

from ._shm import SharedMemoryRegistry

__all__ = ["add_shared_memory_rpcs", "messages"]

SERVICE = "inference.GRPCInferenceService"

_STRING, _UINT64, _INT64, _BYTES, _MESSAGE = 9, 4, 3, 12, 11
# message name -> fields (name, number, type[, message type]); "<Status>.RegionStatus" and a map entry are nested
_SCHEMA: dict[str, list[tuple[Any, ...]]] = {
    "SystemSharedMemoryStatusRequest": [("name", 1, _STRING)],
    "SystemSharedMemoryRegisterRequest": [("name", 1, _STRING), ("key", 2, _STRING), ("offset", 3, _UINT64),
                                          ("byte_size", 4, _UINT64)],
    "SystemSharedMemoryRegisterResponse": [],
    "SystemSharedMemoryUnregisterRequest": [("name", 1, _STRING)],
    "SystemSharedMemoryUnregisterResponse": [],
    "CudaSharedMemoryStatusRequest": [("name", 1, _STRING)],
    "CudaSharedMemoryRegisterRequest": [("name", 1, _STRING), ("raw_handle", 2, _BYTES), ("device_id", 3, _INT64),
                                        ("byte_size", 4, _UINT64)],
    "CudaSharedMemoryRegisterResponse": [],
    "CudaSharedMemoryUnregisterRequest": [("name", 1, _STRING)],
    "CudaSharedMemoryUnregisterResponse": [],
}  # fmt: skip
_STATUS = {
    "SystemSharedMemoryStatusResponse": [("name", 1, _STRING), ("key", 2, _STRING), ("offset", 3, _UINT64),
                                         ("byte_size", 4, _UINT64)],
    "CudaSharedMemoryStatusResponse": [("name", 1, _STRING), ("device_id", 2, _UINT64), ("byte_size", 3, _UINT64)],
}  # fmt: skip
_MESSAGES: dict[str, Any] = {}


def _add_fields(message: Any, fields: list[tuple[Any, ...]]) -> None:
    from google.protobuf import descriptor_pb2

    for name, number, kind, *type_name in fields:
        field = message.field.add(name=name, number=number, type=kind)
        field.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
        if type_name:
            field.type_name = type_name[0]


def messages() -> dict[str, Any]:
    """The message classes by name (built once).

    Example:
        >>> m = messages()["SystemSharedMemoryRegisterRequest"](name="in0", key="/k", byte_size=64)
        >>> type(m).FromString(m.SerializeToString()).byte_size
        64
    """
    if _MESSAGES:
        return _MESSAGES
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="amdinfer_shm_service.proto", package="inference", syntax="proto3")
    for name, fields in _SCHEMA.items():
        _add_fields(proto.message_type.add(name=name), fields)
    for name, fields in _STATUS.items():
        status = proto.message_type.add(name=name)
        _add_fields(status.nested_type.add(name="RegionStatus"), fields)
        entry = status.nested_type.add(name="RegionsEntry")
        entry.options.map_entry = True
        _add_fields(entry, [("key", 1, _STRING), ("value", 2, _MESSAGE, f".inference.{name}.RegionStatus")])
        _add_fields(status, [("regions", 1, _MESSAGE, f".inference.{name}.RegionsEntry")])
        status.field[0].label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    for name in [*_SCHEMA, *_STATUS]:
        _MESSAGES[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{name}"))
    return _MESSAGES


def add_shared_memory_rpcs(server: Any, registry: SharedMemoryRegistry) -> None:
    """Add the System/CUDA shared-memory rpcs of ``inference.GRPCInferenceService`` to a grpc.aio server
    (CUDA registrations carry the 64 handle bytes as they are; REST sends them in base64).

    Errors are :class:`~amdinfer.InputError` (``INVALID_ARGUMENT`` through the server's interceptor).

    Example:
        >>> import grpc
        >>> from concurrent.futures import ThreadPoolExecutor
        >>> server = grpc.server(ThreadPoolExecutor(1))
        >>> registry = SharedMemoryRegistry(enabled=False)
        >>> add_shared_memory_rpcs(server, registry)
        >>> _ = server.stop(None); registry.close()
    """
    import grpc

    m = messages()

    async def system_status(request: Any, context: Any) -> Any:
        response = m["SystemSharedMemoryStatusResponse"]()
        for spec in registry.status(request.name):
            region = response.regions[spec.name]
            region.name, region.key, region.offset, region.byte_size = spec.name, spec.key, spec.offset, spec.byte_size
        return response

    async def system_register(request: Any, context: Any) -> Any:
        registry.register(request.name, request.key, request.offset, request.byte_size)
        return m["SystemSharedMemoryRegisterResponse"]()

    async def system_unregister(request: Any, context: Any) -> Any:
        registry.unregister(request.name)
        return m["SystemSharedMemoryUnregisterResponse"]()

    async def cuda_status(request: Any, context: Any) -> Any:
        response = m["CudaSharedMemoryStatusResponse"]()
        for spec in registry.status(request.name, cuda=True):
            region = response.regions[spec.name]
            region.name, region.device_id, region.byte_size = spec.name, spec.device_id, spec.byte_size
        return response

    async def cuda_register(request: Any, context: Any) -> Any:
        registry.register_cuda(request.name, request.raw_handle, request.device_id, request.byte_size)
        return m["CudaSharedMemoryRegisterResponse"]()

    async def cuda_unregister(request: Any, context: Any) -> Any:
        registry.unregister(request.name, cuda=True)
        return m["CudaSharedMemoryUnregisterResponse"]()

    rpcs = {
        "SystemSharedMemoryStatus": system_status,
        "SystemSharedMemoryRegister": system_register,
        "SystemSharedMemoryUnregister": system_unregister,
        "CudaSharedMemoryStatus": cuda_status,
        "CudaSharedMemoryRegister": cuda_register,
        "CudaSharedMemoryUnregister": cuda_unregister,
    }
    handlers = {
        method: grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=m[f"{method}Request"].FromString,
            response_serializer=m[f"{method}Response"].SerializeToString,
        )
        for method, fn in rpcs.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
