"""External data: reading an ONNX model's out-of-file tensors from regular files inside one folder.

A model over 2 GiB (or one exported so) keeps its weights in files next to it; each tensor names a location, an
offset and a length. :func:`load_external` reads them only from regular files inside the folder it is given,
sizes checked against the tensor's shape first, and inlines them into the proto; ``..``, absolute paths and
symbolic links out of the folder are refused. :class:`~amdinfer.model.ModelSource` is its only caller. See
``docs/security.md``.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> import onnx
    >>> from onnx.external_data_helper import convert_model_to_external_data
    >>> from amdinfer.testing.models import tiny_cnn
    >>> folder = Path(tempfile.mkdtemp())
    >>> model = tiny_cnn()
    >>> convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    >>> onnx.save(model, folder / "cnn.onnx")
    >>> proto = onnx.load(folder / "cnn.onnx", load_external_data=False)
    >>> tensors = external_tensors(proto)
    >>> sorted({external_location(t) for t in tensors})
    ['weights.bin']
    >>> load_external(proto, folder, "model 'cnn.onnx'", tensors)
    >>> external_tensors(proto)
    []
    >>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from ..errors import ModelError
from ._files import read_regular

__all__ = ["external_location", "external_tensors", "load_external"]


def external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every tensor (initializers, attributes, subgraphs, functions) whose data lives in an external file."""
    from onnx.external_data_helper import _get_all_tensors

    tensors = list(_get_all_tensors(proto))
    for func in proto.functions:
        for node in func.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    tensors.append(attr.t)
                elif attr.type == onnx.AttributeProto.TENSORS:
                    tensors.extend(attr.tensors)
    return [t for t in tensors if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL]


def external_location(t: onnx.TensorProto) -> str | None:
    """The file an external tensor names (its ``location`` key); ``None`` when it names none."""
    return next((e.value for e in t.external_data if e.key == "location"), None)


def _external_int(t: onnx.TensorProto, key: str, where: str) -> int | None:
    value = next((e.value for e in t.external_data if e.key == key), None)
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise ModelError(f"{where}: tensor {t.name!r} has external-data {key} {value!r}, expected an int >= 0")
    return n


def load_external(proto: onnx.ModelProto, base: Path, where: str, tensors: list[onnx.TensorProto]) -> None:
    """Read each external tensor's bytes from a regular file inside ``base``, sizes checked first."""
    try:
        root = base.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise ModelError(f"{where}: external-data folder '{base}' cannot be used ({exc})") from None
    if not root.is_dir():
        raise ModelError(f"{where}: external-data folder '{base}' is not a directory")
    for t in tensors:
        loc = external_location(t)
        if loc is None:
            raise ModelError(f"{where}: tensor {t.name!r} is external but names no location")
        if "\0" in loc or not loc:
            raise ModelError(f"{where}: tensor {t.name!r} has external-data location {loc!r}, expected a file name")
        if os.path.isabs(loc):
            raise ModelError(
                f"{where}: tensor {t.name!r} points at {loc!r}, an absolute path; expected a path inside '{base}'"
            )
        try:
            file = (root / loc).resolve()
        except (OSError, RuntimeError) as exc:
            raise ModelError(f"{where}: tensor {t.name!r}: location {loc!r} cannot be resolved ({exc})") from None
        if root not in file.parents:
            raise ModelError(
                f"{where}: tensor {t.name!r} points at {loc!r}, outside the model's folder '{base}' "
                "(through '..' or a symbolic link)"
            )
        if not file.exists():
            raise ModelError(
                f"{where}: external data file {loc!r} for initializer {t.name!r} not found (expected at {file})"
            )
        offset = _external_int(t, "offset", where) or 0
        length = _external_int(t, "length", where)
        expected = _tensor_nbytes(t)
        if length is None:
            length = expected
        elif expected is not None and length != expected:
            raise ModelError(
                f"{where}: tensor {t.name!r} declares external-data length {length}, but its shape "
                f"{list(t.dims)} needs {expected} bytes"
            )
        raw = read_regular(
            file,
            f"{where}: external data {loc!r} of tensor {t.name!r} at",
            error=ModelError,
            offset=offset,
            length=length,
        )
        if expected is not None and len(raw) != expected:
            raise ModelError(
                f"{where}: tensor {t.name!r}: external file {loc!r} holds {len(raw)} bytes from offset {offset}, "
                f"expected {expected} for shape {list(t.dims)}"
            )
        t.raw_data = raw
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _tensor_nbytes(t: onnx.TensorProto) -> int | None:
    """Bytes the tensor's shape needs in raw form; ``None`` for strings (variable length)."""
    if t.data_type == onnx.TensorProto.STRING:
        return None
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None
    count = 1
    for d in t.dims:
        count *= int(d)
    bits = {getattr(onnx.TensorProto, n, -1): 4 for n in ("INT4", "UINT4", "FLOAT4E2M1")}.get(t.data_type)
    if bits is not None:
        return (count * bits + 7) // 8
    return count * itemsize
