"""The shared-memory parameters of an infer request: which tensors name a region, reading inputs, writing outputs.

A tensor of an ``InferRequest`` names a region with Triton's parameters (:data:`REGION`, :data:`OFFSET`,
:data:`BYTE_SIZE`) instead of carrying data. :func:`read_shared_inputs` checks each such input against its
datatype and shape and reads it from the region before anything runs (and checks the output regions);
:func:`write_shared_outputs` copies the outputs into theirs after the run. Both reach the regions through a
:class:`RegionAccess`: the server's :class:`~._shm.SharedMemoryRegistry`, which re-exports these names.

Example:
    >>> from types import SimpleNamespace as T
    >>> shm_reference("output 'y'", {"shared_memory_region": "out0", "shared_memory_byte_size": 40,
    ...                              "shared_memory_offset": 8})
    ('out0', 8, 40)
    >>> uses_shm(T(inputs=[T(parameters={"binary_data_size": 48})], request_outputs=None))
    False
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from ..errors import InputError

__all__ = [
    "BYTE_SIZE",
    "OFFSET",
    "REGION",
    "RegionAccess",
    "read_shared_inputs",
    "shm_reference",
    "uses_shm",
    "write_shared_outputs",
]

#: The tensor parameters of the extension (Triton's names).
REGION, OFFSET, BYTE_SIZE = "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"
_DTYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
           "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
           "FP32": "float32", "FP64": "float64"}  # fmt: skip


class RegionAccess(Protocol):
    """What the request helpers need of the regions (:class:`~._shm.SharedMemoryRegistry` is one).

    Example:
        >>> from types import SimpleNamespace as T
        >>> class Regions:  # a stand-in that keeps nothing
        ...     def read(self, where, region, offset, size): return memoryview(bytes(size))
        ...     def check(self, where, region, offset, size): pass
        ...     def write(self, where, region, offset, size, array): return array.nbytes
        >>> response = T(outputs=[T(name="y", data=[1.0, 2.0])])
        >>> write_shared_outputs(Regions(), response, [("y", ("out0", 0, 16))])
        >>> response.outputs[0]._parameters
        {'shared_memory_region': 'out0', 'shared_memory_byte_size': 16}
    """

    def read(self, where: str, region: str, offset: int, size: int) -> memoryview: ...
    def check(self, where: str, region: str, offset: int, size: int) -> None: ...
    def write(self, where: str, region: str, offset: int, size: int, array: np.ndarray) -> int: ...


def shm_reference(where: str, params: Mapping[str, Any] | None) -> tuple[str, int, int] | None:
    """``(region, offset, byte_size)`` when a tensor's parameters name a shared-memory region, else ``None``.

    Raises:
        InputError: a region without a byte size (or the reverse), or values of the wrong type.

    Example:
        >>> shm_reference("input 'x'", {"shared_memory_region": "in0", "shared_memory_byte_size": 48})
        ('in0', 0, 48)
        >>> shm_reference("input 'x'", {"binary_data_size": 48}) is None
        True
    """
    params = params or {}
    if REGION not in params and BYTE_SIZE not in params and OFFSET not in params:
        return None
    region, size, offset = params.get(REGION), params.get(BYTE_SIZE), params.get(OFFSET, 0)
    if not isinstance(region, str) or not region:
        raise InputError(f"{where}: got {REGION}={region!r}, expected the name of a registered region")
    for label, value in ((BYTE_SIZE, size), (OFFSET, offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{where}: got {label}={value!r} for region {region!r}, expected an int >= 0")
    return region, int(offset), int(size)  # type: ignore[arg-type]


def uses_shm(request: Any) -> bool:
    """Whether an ``InferRequest`` names a shared-memory region for an input or an output.

    Example:
        >>> from types import SimpleNamespace as T
        >>> uses_shm(T(inputs=[T(parameters={"shared_memory_region": "in0"})], request_outputs=None))
        True
    """
    tensors = [*request.inputs, *(request.request_outputs or [])]
    return any(t.parameters and REGION in t.parameters for t in tensors)


def read_shared_inputs(registry: RegionAccess, request: Any) -> list[tuple[str, tuple[str, int, int]]]:
    """Read each shared-memory input of an ``InferRequest`` into its own buffer (see the module's docstring
    for why a copy) and check the output regions before anything runs.

    Returns:
        ``(output name, (region, offset, byte size))`` of each output asked for in shared memory.

    Raises:
        InputError: an input with data as well, a non-numeric datatype, a byte size that is not the
            tensor's, or a region that is not registered or too small.

    Example:
        >>> from types import SimpleNamespace as T
        >>> request = T(inputs=[T(name="x", datatype="FP32", shape=[2, 2], _raw_data=None, data=None,
        ...             parameters={"shared_memory_region": "in0", "shared_memory_byte_size": 8})],
        ...             request_outputs=None)
        >>> from amdinfer.serve._shm import SharedMemoryRegistry
        >>> registry = SharedMemoryRegistry()
        >>> read_shared_inputs(registry, request)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': shared_memory_byte_size is 8 in region 'in0', expected 16 bytes ...
        >>> registry.close()
    """
    for inp in request.inputs:
        where = f"input {inp.name!r}"
        ref = shm_reference(where, inp.parameters)
        if ref is None:
            continue
        if inp._raw_data is not None or inp.data not in (None, []):
            raise InputError(f"{where}: has both data and a shared-memory region")
        if inp.datatype not in _DTYPES:
            raise InputError(f"{where}: got datatype {inp.datatype!r}, expected one of {', '.join(_DTYPES)}")
        shape = list(inp.shape)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise InputError(f"{where}: got shape {shape}, expected non-negative integers")
        region, offset, size = ref
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[inp.datatype]).itemsize
        if size != expected:
            raise InputError(
                f"{where}: shared_memory_byte_size is {size} in region {region!r}, expected {expected} bytes "
                f"for shape {shape} {inp.datatype}"
            )
        inp._raw_data = registry.read(where, region, offset, size)
    wanted = []
    for out in request.request_outputs or []:
        ref = shm_reference(f"output {out.name!r}", out.parameters)
        if ref is not None:
            registry.check(f"output {out.name!r}", *ref)
            wanted.append((out.name, ref))
    return wanted


def write_shared_outputs(registry: RegionAccess, response: Any, wanted: list) -> None:
    """Copy the outputs asked for in shared memory into their regions; the response keeps no data for them,
    only the region and the bytes written (``shared_memory_byte_size``).

    Example:
        >>> write_shared_outputs(None, None, [])  # nothing asked for: nothing to do
    """
    if not wanted:
        return
    by_name = {o.name: o for o in response.outputs}
    for name, (region, offset, size) in wanted:
        out = by_name[name]
        written = registry.write(f"output {name!r}", region, offset, size, np.asarray(out.data))
        params: dict[str, Any] = {REGION: region, BYTE_SIZE: written}
        if offset:
            params[OFFSET] = offset
        out._data, out._raw_data, out._parameters = None, b"", params
