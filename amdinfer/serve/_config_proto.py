"""Triton's model configuration (``model_config.proto``), the part amdinfer reads and answers, as protobuf messages.

The messages are built from a descriptor in a private pool, as the shared-memory and repository ones are
(:mod:`amdinfer.serve._shm_grpc`): tritonclient is a client library, not part of the serve extra, and its protos
register ``inference.*`` in protobuf's default pool. Field names, numbers and types are Triton's, so the gRPC
``ModelConfig`` answer is read by tritonclient's own ``model_config_pb2`` and a ``config.pbtxt`` is parsed by
protobuf's ``text_format`` against exactly the fields amdinfer honours: any other field, Triton's or a typo, is
refused by name (:func:`parse_pbtxt`). The messages are proto2, so a field left out is told from one set to 0.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import OptionError

__all__ = ["messages", "parse_pbtxt"]

_STRING, _BOOL, _INT64, _UINT64, _INT32, _UINT32, _ENUM, _MESSAGE = 9, 8, 3, 4, 5, 13, 14, 11
_MANY = "*"
_DATATYPES = ("INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
              "FP32", "FP64", "STRING", "BF16")  # fmt: skip
_ENUMS = {
    "DataType": [f"TYPE_{t}" for t in _DATATYPES],
    "Kind": ["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"],
}
# message -> fields (name, number, type[, type name][, "*" repeated]); nested Triton messages are flattened
# (``ModelVersionPolicy.Latest`` is ``VersionLatest``): the wire and text forms carry field names, not type names
_SCHEMA: dict[str, list[tuple[Any, ...]]] = {
    "ModelTensorReshape": [("shape", 1, _INT64, _MANY)],
    "ModelInput": [("name", 1, _STRING), ("data_type", 2, _ENUM, "DataType"), ("dims", 4, _INT64, _MANY),
                   ("reshape", 5, _MESSAGE, "ModelTensorReshape")],
    "ModelOutput": [("name", 1, _STRING), ("data_type", 2, _ENUM, "DataType"), ("dims", 3, _INT64, _MANY),
                    ("reshape", 5, _MESSAGE, "ModelTensorReshape")],
    "ModelInstanceGroup": [("name", 1, _STRING), ("kind", 4, _ENUM, "Kind"), ("count", 2, _INT32),
                           ("gpus", 3, _INT32, _MANY)],
    "ModelDynamicBatching": [("preferred_batch_size", 1, _INT32, _MANY), ("max_queue_delay_microseconds", 2, _UINT64)],
    "VersionLatest": [("num_versions", 1, _UINT32)],
    "VersionAll": [],
    "VersionSpecific": [("versions", 1, _INT64, _MANY)],
    "ModelVersionPolicy": [("latest", 1, _MESSAGE, "VersionLatest"), ("all", 2, _MESSAGE, "VersionAll"),
                           ("specific", 3, _MESSAGE, "VersionSpecific")],
    "Accelerator": [("name", 1, _STRING)],
    "ExecutionAccelerators": [("gpu_execution_accelerator", 1, _MESSAGE, "Accelerator", _MANY)],
    "ModelOptimizationPolicy": [("execution_accelerators", 4, _MESSAGE, "ExecutionAccelerators")],
    "ModelConfig": [("name", 1, _STRING), ("platform", 2, _STRING), ("backend", 17, _STRING),
                    ("version_policy", 3, _MESSAGE, "ModelVersionPolicy"), ("max_batch_size", 4, _INT32),
                    ("input", 5, _MESSAGE, "ModelInput", _MANY), ("output", 6, _MESSAGE, "ModelOutput", _MANY),
                    ("instance_group", 7, _MESSAGE, "ModelInstanceGroup", _MANY),
                    ("default_model_filename", 8, _STRING), ("dynamic_batching", 11, _MESSAGE, "ModelDynamicBatching"),
                    ("optimization", 12, _MESSAGE, "ModelOptimizationPolicy")],
    # grpc_service.proto
    "ModelConfigRequest": [("name", 1, _STRING), ("version", 2, _STRING)],
    "ModelConfigResponse": [("config", 1, _MESSAGE, "ModelConfig")],
}  # fmt: skip
_MESSAGES: dict[str, Any] = {}


def messages() -> dict[str, Any]:
    """The message classes by name (built once): ``ModelConfig`` and its parts, ``ModelConfigRequest`` and
    ``ModelConfigResponse``.

    Example:
        >>> m = messages()["ModelConfig"](name="tiny", max_batch_size=8)
        >>> m.input.add(name="x", data_type=11, dims=[3, -1])  # doctest: +ELLIPSIS
        name: "x"
        ...
        >>> type(m).FromString(m.SerializeToString()).input[0].dims
        [3, -1]
    """
    if _MESSAGES:
        return _MESSAGES
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="amdinfer_model_config.proto", package="inference", syntax="proto2")
    for name, values in _ENUMS.items():
        enum = proto.enum_type.add(name=name)
        for number, value in enumerate(values):
            enum.value.add(name=value, number=number)
    for name, fields in _SCHEMA.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, *rest in fields:
            field = message.field.add(name=field_name, number=number, type=kind)
            field.label = fdp.LABEL_REPEATED if _MANY in rest else fdp.LABEL_OPTIONAL
            type_names = [r for r in rest if r != _MANY]
            if type_names:
                field.type_name = f".inference.{type_names[0]}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    for name in _SCHEMA:
        _MESSAGES[name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{name}"))
    return _MESSAGES


_NO_FIELD = re.compile(r'Message type "inference\.(\w+)" has no field named "([^"]*)"')
_NO_VALUE = re.compile(r'Enum type "inference\.(\w+)" has no value named (\S+?)\.?$')


def parse_pbtxt(text: str, where: str) -> Any:
    """A ``config.pbtxt`` as a ``ModelConfig`` message of the fields amdinfer reads.

    Raises:
        OptionError: a field amdinfer does not read (named, with the fields it reads there), an unknown
            enum value, or text that is not protobuf text format (with protobuf's line:column).

    Example:
        >>> parse_pbtxt('max_batch_size: 8  dynamic_batching { preferred_batch_size: [4, 8] }', "c").max_batch_size
        8
        >>> parse_pbtxt('sequence_batching { }', "det/config.pbtxt")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: det/config.pbtxt line 1: field 'sequence_batching' is not supported by ...
    """
    from google.protobuf import text_format

    config = messages()["ModelConfig"]()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        message = str(exc)
        line = f" line {exc.GetLine()}" if exc.GetLine() else ""
        if found := _NO_FIELD.search(message):
            kind, field = found.groups()
            known = [f.name for f in messages()[kind].DESCRIPTOR.fields]
            inside = "" if kind == "ModelConfig" else f" in {kind}"
            raise OptionError(
                f"{where}{line}: field {field[:80]!r}{inside} is not supported by amdinfer (it reads only "
                f"{', '.join(known)}{inside}); remove it, or serve the model with Triton"
            ) from None
        if found := _NO_VALUE.search(message):
            kind, value = found.groups()
            raise OptionError(
                f"{where}{line}: {kind} value {value[:80]} is not one of {', '.join(_ENUMS.get(kind, []))}"
            ) from None
        raise OptionError(f"{where}: not valid protobuf text format: {message[:200]}") from None
    return config
