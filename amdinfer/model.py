"""Model sources: read a model from a path, bytes or an ``onnx.ModelProto``, validate it, hash it.

Example:
    >>> from amdinfer.model import ModelSource
    >>> from amdinfer.testing.models import tiny_cnn
    >>> src = ModelSource.from_any(tiny_cnn())
    >>> [spec.name for spec in src.inputs], len(src.sha256)
    (['input'], 64)
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import helper

from .errors import ModelError
from .types import Dim, TensorSpec

__all__ = ["ModelLike", "ModelSource", "min_ir_version", "onnx_dtype_to_numpy"]

log = logging.getLogger("amdinfer.model")

ModelLike = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto, "ModelSource"]

# Lowest IR version that can express each tensor element type newer than IR 4.
_DTYPE_MIN_IR = {17: 9, 18: 9, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12, 25: 13, 26: 13, 27: 14, 28: 14}


def onnx_dtype_to_numpy(elem_type: int) -> np.dtype:
    """Map an ONNX ``TensorProto`` element type to a NumPy dtype.

    Types NumPy lacks (bfloat16, float8) map to ``object``-free stand-ins used only for display.

    Example:
        >>> onnx_dtype_to_numpy(onnx.TensorProto.FLOAT)
        dtype('float32')
    """
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError) as exc:  # pragma: no cover - exotic types
        raise ModelError(f"tensor element type {elem_type}: no NumPy equivalent") from exc


_ANONYMOUS_DIMS = {"", "?", "-1", "None", "unk__"}


def _dims(value_info: onnx.ValueInfoProto) -> tuple[Dim, ...]:
    shape = value_info.type.tensor_type.shape
    out: list[Dim] = []
    for d in shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param not in _ANONYMOUS_DIMS:
            out.append(d.dim_param)
        else:
            # Exporters write unknown dims as dim_value -1/0 or dim_param "?"/"-1" (Paddle2ONNX):
            # each is its own unknown dim, not one symbol shared across inputs.
            out.append(None)
    return tuple(out)


def _spec(value_info: onnx.ValueInfoProto) -> TensorSpec:
    tt = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise ModelError(f"tensor {value_info.name!r}: only tensor inputs/outputs are supported")
    return TensorSpec(value_info.name, onnx_dtype_to_numpy(tt.elem_type), _dims(value_info))


def _used_dtypes(model: onnx.ModelProto) -> set[int]:
    g = model.graph
    types = {t.data_type for t in g.initializer}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        types.add(vi.type.tensor_type.elem_type)
    for node in g.node:
        for attr in node.attribute:
            if attr.name == "to" and attr.type == onnx.AttributeProto.INT:
                types.add(attr.i)
            if attr.type == onnx.AttributeProto.TENSOR:
                types.add(attr.t.data_type)
    return types


def min_ir_version(model: onnx.ModelProto) -> int:
    """The lowest IR version that can hold this model (its opsets and element types).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> min_ir_version(tiny_cnn())
        8
    """
    opsets = list(model.opset_import)
    try:
        need = helper.find_min_ir_version_for(opsets, ignore_unknown=True) if opsets else 3
    except TypeError:  # older onnx without ignore_unknown
        need = helper.find_min_ir_version_for(opsets)
    for t in _used_dtypes(model):
        need = max(need, _DTYPE_MIN_IR.get(t, 3))
    if model.functions:
        need = max(need, 8)
    return int(need)


class ModelSource:
    """A validated ONNX model with its content hash, specs and where it came from.

    Use :meth:`from_any` to build one; engines receive this object.

    Attributes:
        proto: the model, external data loaded.
        path: the file it was read from, if any (external data is resolved next to it).
        name: a display name (file name or ``"<bytes>"`` / ``"<ModelProto>"``).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> src = ModelSource.from_any(tiny_cnn().SerializeToString())
        >>> src.name
        '<bytes>'
    """

    def __init__(self, proto: onnx.ModelProto, *, path: Path | None = None, name: str = "<ModelProto>"):
        self.proto = proto
        self.path = path
        self.name = name
        self._bytes: bytes | None = None
        self._sha: str | None = None
        self.inputs: list[TensorSpec] = self._graph_inputs(proto)
        self.outputs: list[TensorSpec] = [_spec(v) for v in proto.graph.output]

    @staticmethod
    def _graph_inputs(proto: onnx.ModelProto) -> list[TensorSpec]:
        init = {t.name for t in proto.graph.initializer} | {t.name for t in proto.graph.sparse_initializer}
        return [_spec(v) for v in proto.graph.input if v.name not in init]

    @classmethod
    def from_any(cls, model: ModelLike, *, check: bool = True) -> ModelSource:
        """Read and validate a model.

        Args:
            model: a path, serialized bytes, an ``onnx.ModelProto`` or a ``ModelSource`` (returned as is).
            check: run ``onnx.checker`` (recommended; turn off only for models you trust and that are huge).

        Raises:
            ModelError: the file is missing, a directory, not an ONNX model, truncated, invalid, or its
                external data is missing.

        Example:
            >>> ModelSource.from_any("/nonexistent.onnx")
            Traceback (most recent call last):
            ...
            amdinfer.errors.ModelError: model '/nonexistent.onnx': file not found
        """
        if isinstance(model, ModelSource):
            return model
        if isinstance(model, onnx.ModelProto):
            src = cls(model, name=(model.graph.name and f"<ModelProto {model.graph.name}>") or "<ModelProto>")
        elif isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            proto = cls._parse(data, "<bytes>")
            src = cls(proto, name="<bytes>")
            src._bytes = data
        elif isinstance(model, (str, os.PathLike)):
            src = cls._from_path(Path(model))
        else:
            raise ModelError(f"model: got {type(model).__name__}, expected a path, bytes or onnx.ModelProto")
        if check:
            src.check()
        return src

    @staticmethod
    def _parse(data: bytes, where: str) -> onnx.ModelProto:
        if not data:
            raise ModelError(f"model {where}: empty (0 bytes), expected a serialized ONNX ModelProto")
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as exc:  # protobuf raises DecodeError / RuntimeWarning subclasses
            raise ModelError(
                f"model {where}: not a readable ONNX file ({type(exc).__name__}: {exc}); "
                "the file is truncated, corrupt or not ONNX"
            ) from None
        if not proto.HasField("graph") or proto.ir_version == 0:
            raise ModelError(
                f"model {where}: parsed as protobuf but holds no ONNX graph (ir_version={proto.ir_version}); "
                "the file is truncated, corrupt or not ONNX"
            )
        return proto

    @classmethod
    def _from_path(cls, path: Path) -> ModelSource:
        where = f"'{path}'"
        if not path.exists():
            raise ModelError(f"model {where}: file not found")
        if path.is_dir():
            raise ModelError(f"model {where}: is a directory, expected an .onnx file")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelError(f"model {where}: cannot read ({exc.strerror})") from None
        proto = cls._parse(data, where)
        external = [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        if external:
            base = path.parent
            for t in external:
                loc = next((e.value for e in t.external_data if e.key == "location"), None)
                if loc is None:
                    raise ModelError(f"model {where}: initializer {t.name!r} is external but names no location")
                file = (base / loc).resolve()
                if base.resolve() not in file.parents and file.parent != base.resolve():
                    raise ModelError(
                        f"model {where}: initializer {t.name!r} points at {loc!r}, outside the model's folder"
                    )
                if not file.is_file():
                    raise ModelError(
                        f"model {where}: external data file {loc!r} for initializer {t.name!r} not found "
                        f"(expected at {file})"
                    )
            try:
                onnx.load_external_data_for_model(proto, str(base))
            except Exception as exc:
                raise ModelError(f"model {where}: external data could not be read ({exc})") from None
        src = cls(proto, path=path, name=path.name)
        if not external:
            src._bytes = data
        return src

    def check(self) -> None:
        """Run ``onnx.checker`` and raise :class:`ModelError` naming the problem."""
        try:
            # Checking the serialized bytes avoids a second serialization inside onnx.checker;
            # the bytes are needed anyway for the content hash and the runtime.
            if self._bytes is not None or self.proto.ByteSize() < 2**31 - 1:
                onnx.checker.check_model(self.to_bytes())
            elif self.path is not None:
                onnx.checker.check_model(str(self.path))
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid"
            raise ModelError(f"model {self.name}: failed ONNX validation: {first}") from None

    def to_bytes(self) -> bytes:
        """The serialized model (external data inlined), cached."""
        if self._bytes is None:
            self._bytes = self.proto.SerializeToString()
        return self._bytes

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of the serialized model: the model's identity in caches."""
        if self._sha is None:
            self._sha = hashlib.sha256(self.to_bytes()).hexdigest()
        return self._sha

    @property
    def ir_version(self) -> int:
        """The model's IR version."""
        return int(self.proto.ir_version)

    @property
    def opsets(self) -> dict[str, int]:
        """Opset version per domain (``""`` is ai.onnx)."""
        return {o.domain or "": int(o.version) for o in self.proto.opset_import}

    def operators(self) -> set[str]:
        """The operator types used, as ``"OpType"`` (ai.onnx) or ``"domain::OpType"``, subgraphs included."""
        ops: set[str] = set()

        def walk(nodes: Iterable[onnx.NodeProto]) -> None:
            for n in nodes:
                ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        walk(a.g.node)
                    elif a.type == onnx.AttributeProto.GRAPHS:
                        for g in a.graphs:
                            walk(g.node)

        walk(self.proto.graph.node)
        return ops

    def with_ir_version(self, max_ir: int) -> ModelSource:
        """A copy whose IR version is at most ``max_ir``, when nothing in the model needs more.

        onnx 1.23 writes IR 14 while runtimes built against older onnx refuse it; the IR version only
        gates the features a model may use, so lowering it is safe when the model's opsets and element
        types exist in the older IR.

        Raises:
            ModelError: the model needs a newer IR than ``max_ir``; the message says what needs it.

        Example:
            >>> from amdinfer.testing.models import tiny_cnn
            >>> ModelSource.from_any(tiny_cnn()).with_ir_version(9).ir_version
            9
        """
        if self.ir_version <= max_ir:
            return self
        need = min_ir_version(self.proto)
        if need > max_ir:
            raise ModelError(
                f"model {self.name}: IR version {self.ir_version} but the runtime reads at most IR {max_ir}, "
                f"and the model needs IR >= {need} (opsets {self.opsets}); re-export it with an older opset "
                "or upgrade the runtime"
            )
        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        proto.ir_version = max_ir
        log.info("model %s: lowered IR version %d -> %d for the runtime", self.name, self.ir_version, max_ir)
        return ModelSource(proto, path=self.path, name=self.name)

    def __repr__(self) -> str:
        return f"ModelSource({self.name!r}, ir={self.ir_version}, opsets={self.opsets}, sha256={self.sha256[:12]})"
