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
from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import helper

from ._support._external_data import external_location, external_tensors, load_external
from ._support._files import check_path, read_regular
from .errors import ModelError, OptionError
from .types import CONTAINERS, Dim, TensorSpec

__all__ = ["ModelLike", "ModelSource", "ai_onnx_opset", "graphs_of", "min_ir_version", "onnx_dtype_to_numpy"]

log = logging.getLogger("amdinfer.model")

ModelLike = Union[str, os.PathLike, bytes, bytearray, memoryview, onnx.ModelProto, "ModelSource"]

# Lowest IR version that can express each tensor element type newer than IR 4.
_DTYPE_MIN_IR = {17: 9, 18: 9, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12, 25: 13, 26: 13, 27: 14, 28: 14}


def graphs_of(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every subgraph in it (``Loop``/``If``/``Scan`` bodies, nested ones too), depth first.

    Example:
        >>> from onnx import helper
        >>> body = helper.make_graph([], "body", [], [])
        >>> node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
        >>> [g.name for g in graphs_of(helper.make_graph([node], "main", [], []))]
        ['main', 'body', 'body']
    """
    out = [graph]
    for node in graph.node:
        for a in node.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                out += graphs_of(sub)
    return out


def ai_onnx_opset(model: onnx.ModelProto) -> int:
    """The model's opset of the default ONNX domain (``""`` or ``"ai.onnx"``); 0 when it imports none.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> ai_onnx_opset(tiny_cnn()) > 0
        True
    """
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


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


def _dims(value_info: onnx.ValueInfoProto | onnx.TypeProto) -> tuple[Dim, ...]:
    tp = value_info.type if isinstance(value_info, onnx.ValueInfoProto) else value_info
    shape = tp.tensor_type.shape
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
    tp, container = value_info.type, []
    while tp.WhichOneof("value") in ("sequence_type", "optional_type"):  # sequence(tensor), optional(...)
        kind = tp.WhichOneof("value")
        container.append(kind.split("_")[0])
        tp = getattr(tp, kind).elem_type
    if tp.WhichOneof("value") != "tensor_type" or tuple(container) not in CONTAINERS:
        raise ModelError(
            f"tensor {value_info.name!r}: got type {onnx.helper.printable_type(value_info.type)!r}, expected a "
            "tensor, sequence(tensor), optional(tensor) or optional(sequence(tensor))"
        )
    tt = tp.tensor_type
    known = bool(not container or tt.HasField("shape"))  # an element type may leave the rank open
    dtype = onnx_dtype_to_numpy(tt.elem_type)
    return TensorSpec(value_info.name, dtype, _dims(tp), tuple(container), known)  # type: ignore[arg-type]


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


# A protobuf message is at most 2 GiB; bigger model files hold their weights as external data.
_MAX_MODEL_BYTES = 2**31


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
        if path is None and external_tensors(proto):
            t = external_tensors(proto)[0]
            raise ModelError(
                f"model {name}: tensor {t.name!r} keeps its data in external file {external_location(t)!r}; build the "
                "source with ModelSource.from_any(..., base_dir=) so the data is read from a known folder"
            )
        self.proto = proto
        self.path = path
        self.name = name
        self._bytes: bytes | None = None
        self._sha: str | None = None
        self.inputs: list[TensorSpec] = self._graph_inputs(proto)
        self.outputs: list[TensorSpec] = [_spec(v) for v in proto.graph.output]
        for kind, names in (
            ("input", [v.name for v in proto.graph.input]),
            ("output", [v.name for v in proto.graph.output]),
        ):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ModelError(
                    f"model {name}: graph {kind} {dup[0]!r} is listed {names.count(dup[0])} times; "
                    f"expected unique {kind} names"
                )

    @staticmethod
    def _graph_inputs(proto: onnx.ModelProto) -> list[TensorSpec]:
        init = {t.name for t in proto.graph.initializer} | {t.name for t in proto.graph.sparse_initializer}
        return [_spec(v) for v in proto.graph.input if v.name not in init]

    @classmethod
    def from_any(
        cls, model: ModelLike, *, check: bool = True, base_dir: str | os.PathLike | None = None
    ) -> ModelSource:
        """Read and validate a model.

        External data is read only from regular files inside the model's folder (for a path) or inside
        ``base_dir`` (for bytes or a ``ModelProto``, which have no folder); nothing is ever resolved against the
        working directory. See ``docs/security.md``.

        Args:
            model: a path, serialized bytes, an ``onnx.ModelProto`` or a ``ModelSource`` (returned as is).
            check: run ``onnx.checker`` (recommended; turn off only for models you trust and that are huge).
            base_dir: the folder an in-memory model's external data lives in. Without it an in-memory model
                that references external data is refused. For a path, the model's own folder is used.

        Raises:
            ModelError: the file is missing, not a regular file, not an ONNX model, truncated, invalid, or its
                external data is missing, outside its folder, not a regular file or of the wrong size.
            OptionError: ``base_dir`` is not a path (or is given with a path or a ``ModelSource``).

        Example:
            >>> ModelSource.from_any("/nonexistent.onnx")
            Traceback (most recent call last):
            ...
            amdinfer.errors.ModelError: model '/nonexistent.onnx': file not found
        """
        if base_dir is not None:
            base_dir = check_path(base_dir, "base_dir")
            if isinstance(model, (ModelSource, str, os.PathLike)):
                raise OptionError(
                    f"base_dir: given with a {type(model).__name__}; expected only with bytes or an onnx.ModelProto "
                    "(a model file's external data is read from the file's own folder)"
                )
        if isinstance(model, ModelSource):
            return model
        if isinstance(model, onnx.ModelProto):
            name = (model.graph.name and f"<ModelProto {model.graph.name}>") or "<ModelProto>"
            if base_dir is not None and external_tensors(model):
                copy = onnx.ModelProto()
                copy.CopyFrom(model)  # never change the caller's proto
                model = copy
            src = cls._in_memory(model, name, base_dir, None)
        elif isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            proto = cls._parse(data, "<bytes>")
            src = cls._in_memory(proto, "<bytes>", base_dir, data)
        elif isinstance(model, (str, os.PathLike)):
            src = cls._from_path(check_path(model, "model", error=ModelError))
        else:
            raise ModelError(f"model: got {type(model).__name__}, expected a path, bytes or onnx.ModelProto")
        if check:
            src.check()
        return src

    @classmethod
    def _in_memory(
        cls, proto: onnx.ModelProto, name: str, base_dir: str | os.PathLike | None, data: bytes | None
    ) -> ModelSource:
        external = external_tensors(proto)
        if external:
            if base_dir is None:
                t = external[0]
                raise ModelError(
                    f"model {name}: tensor {t.name!r} keeps its data in external file {external_location(t)!r}, but an "
                    "in-memory model has no folder to read it from; pass base_dir= (the folder holding the data) "
                    "or load the model from its file. amdinfer never resolves external data against the "
                    "working directory"
                )
            load_external(proto, Path(base_dir), name, external)
            data = None
        src = cls(proto, name=name)
        src._bytes = data
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
        if path.is_dir():
            raise ModelError(f"model {where}: is a directory, expected an .onnx file")
        # Regular files only: a FIFO would block, /dev/zero would be read until memory runs out.
        data = read_regular(path, "model", error=ModelError, max_bytes=_MAX_MODEL_BYTES)
        proto = cls._parse(data, where)
        external = external_tensors(proto)
        if external:
            load_external(proto, path.parent, f"model {where}", external)
        src = cls(proto, path=path, name=path.name)
        if not external:
            src._bytes = data
        return src

    def derived(self, model: onnx.ModelProto | bytes, *, check: bool = True) -> ModelSource:
        """A rewrite of this model (a quantizer's, a precision conversion's) that keeps this model's name.

        The rewrite lives in memory: it has no ``path`` (this model's file does not hold it), but it is still
        shown as the model it came from, so ``<OrtEngine resnet50.onnx on cpu, fp16>`` names the file.

        Args:
            model: the rewritten model, as a ``ModelProto`` or serialized bytes (kept as the model's bytes).
            check: run ``onnx.checker`` on it.

        Raises:
            ModelError: the bytes are not an ONNX model, or the rewrite fails validation.

        Example:
            >>> from amdinfer.testing.models import tiny_cnn
            >>> src = ModelSource(tiny_cnn(), name="cnn.onnx")
            >>> copy = src.derived(tiny_cnn(seed=1))
            >>> copy.name, copy.path, copy.sha256 != src.sha256
            ('cnn.onnx', None, True)
        """
        if isinstance(model, onnx.ModelProto):
            src = ModelSource(model, name=self.name)
        elif isinstance(model, (bytes, bytearray, memoryview)):
            data = bytes(model)
            src = ModelSource(self._parse(data, f"{self.name} (rewritten)"), name=self.name)
            src._bytes = data
        else:
            raise ModelError(f"model: got {type(model).__name__}, expected the rewritten onnx.ModelProto or bytes")
        if check:
            src.check()
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
        return {
            n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
            for g in graphs_of(self.proto.graph)
            for n in g.node
        }

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
