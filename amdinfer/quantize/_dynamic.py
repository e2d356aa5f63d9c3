"""``DynamicInt8Quantizer``: int8 weights, activations quantized at run time (ONNX Runtime's ``quantize_dynamic``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import AmdinferError, ModelError
from ..model import ModelSource
from ._agreement import AgreementCheck, check_low_accuracy, check_min_cosine, enforce, measure
from ._base import QuantizationSpec, QuantizerBase
from ._data import data_hash, materialize, to_feeds
from ._fp16 import _check_nodes, _str_list
from ._int8 import QUANT_TYPES
from ._int8_checks import check_weights, quantized_nodes, save_for_quantizer
from ._int8_reader import _import_quantization, _ort_prints_to_log
from ._options import choice, flag, reduce_range_choice
from ._prepare import prepare_model
from ._transformer import mask_path_nodes

__all__ = ["DynamicInt8Quantizer"]

#: What ``quantize()`` tells engines that quantize natively (they need calibration data, which this has not).
DYNAMIC_NOTE = (
    "dynamic int8: weights int8, activations quantized at run time by ONNX Runtime (MatMulInteger); an engine "
    "that quantizes natively (MIGraphX) needs Int8Quantizer(calibration=...)"
)


class DynamicInt8Quantizer(QuantizerBase):
    """Dynamic int8 through ONNX Runtime's ``quantize_dynamic``: int8 weights, activations quantized per call.

    No calibration: each activation's range is taken from the tensor itself at run time, so an outlier in one
    batch does not coarsen every other batch. ONNX Runtime's recommended int8 form for Transformers on CPU:
    on the trained MiniLM it keeps a mean cosine of 0.997 with the float embeddings (``docs/quantization.md``).
    The weights of ``MatMul`` nodes whose second input is a constant are quantized by default (per output
    channel), attention's products of two activations stay in float, and so do nodes that read an
    attention-mask value (:func:`~amdinfer.quantize._transformer.mask_path_nodes`).

    Args:
        data: samples (feed dicts or arrays) for the accuracy check; ``None`` skips it.
        input_name: the input bare arrays of ``data`` feed (multi-input models).
        op_types: op types to quantize (ONNX Runtime's dynamic registry: ``MatMul``, ``Gather``, ``Conv``,
            ``Attention``, ...).
        per_channel: one weight scale per output channel (on MiniLM: cosine 0.997 against 0.975 per tensor).
        reduce_range: 7-bit weights (for CPUs without VNNI); ``"auto"`` (the default): 7-bit on an x86 CPU without
            VNNI or AMX, else 8-bit (``reduce_range_why``).
        weight_type: ``"int8"`` or ``"uint8"``.
        exclude_nodes: node names kept in float.
        min_cosine: with ``data``, the least mean cosine similarity each float output must keep with the
            float model (``None``: no check).
        low_accuracy: ``"raise"`` refuses a model below ``min_cosine``; ``"warn"`` logs a WARNING.
        prepare: run :func:`~amdinfer.quantize.prepare_model` first.

    Raises:
        OptionError: an option has a wrong type or value.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import transformer_encoder, random_inputs
        >>> model = transformer_encoder()
        >>> q = DynamicInt8Quantizer(data=[random_inputs(model, seed=0)])
        >>> "MatMulInteger" in {n.op_type for n in q.quantize(model).graph.node}
        True
        >>> q.agreement.passed
        True
        >>> amdinfer.load(model, providers=["cpu"], quantizer=q).info.precision
        'int8'
    """

    precision = "int8"

    def __init__(
        self,
        *,
        data: Iterable[Any] | None = None,
        input_name: str | None = None,
        op_types: Sequence[str] = ("MatMul",),
        per_channel: bool = True,
        reduce_range: bool | str = "auto",
        weight_type: str = "int8",
        exclude_nodes: Sequence[str] = (),
        min_cosine: float | None = 0.98,
        low_accuracy: str = "raise",
        prepare: bool = True,
    ) -> None:
        self._data = data
        self.input_name = input_name
        self.op_types = _str_list("op_types", op_types)
        self.per_channel = flag("per_channel", per_channel)
        self.reduce_range, self.reduce_range_why = reduce_range_choice(reduce_range)
        self.weight_type = choice("weight_type", weight_type, QUANT_TYPES)
        self.exclude_nodes = _str_list("exclude_nodes", exclude_nodes)
        self.min_cosine = check_min_cosine(min_cosine)
        self.low_accuracy = check_low_accuracy(low_accuracy)
        self.prepare = flag("prepare", prepare)
        #: What the accuracy check measured on the last :meth:`quantize` (``None`` before it or without ``data``).
        self.agreement: AgreementCheck | None = None
        self._items: list[Any] | None = None
        self._only: list[str] | None = None

    def _data_items(self) -> list[Any] | None:
        if self._data is None:
            return None
        if self._items is None:
            self._items = materialize(self._data, what="data", progress=False)
        return self._items

    def settings(self) -> dict[str, Any]:
        """The settings that change the result (the check's data and bound too: a cached model skips it).

        Example:
            >>> DynamicInt8Quantizer().settings()["op_types"]
            ['MatMul']
        """
        items = self._data_items()
        out: dict[str, Any] = {
            "kind": "int8-dynamic",
            "op_types": list(self.op_types),
            "per_channel": self.per_channel,
            "reduce_range": self.reduce_range,
            "weight_type": self.weight_type,
            "exclude_nodes": list(self.exclude_nodes),
            "prepare": self.prepare,
            "check": None
            if items is None or self.min_cosine is None
            else {
                "min_cosine": self.min_cosine,
                "low_accuracy": self.low_accuracy,
                "data": data_hash(x if isinstance(x, dict) else {"": np.asarray(x)} for x in items),
            },
        }
        if self._only is not None:
            out["only_nodes"] = list(self._only)
        return out

    def quantize(self, model: Any) -> onnx.ModelProto:
        """Return the dynamically quantized model, checked against the float model on ``data``.

        Raises:
            ModelError: the model cannot be prepared, a weight to quantize holds NaN or inf, or ONNX Runtime's
                quantizer failed.
            InputError: a sample of ``data`` does not fit the model or holds NaN or inf.
            AgreementError: a float output's mean cosine with the float model is below ``min_cosine``.

        Example:
            >>> from amdinfer.testing.models import transformer_encoder
            >>> m = DynamicInt8Quantizer(op_types=["MatMul"]).quantize(transformer_encoder())
            >>> sorted({n.op_type for n in m.graph.node} & {"DynamicQuantizeLinear", "MatMulInteger"})
            ['DynamicQuantizeLinear', 'MatMulInteger']
        """
        prepared = prepare_model(model, optimize=self.prepare)
        items = self._data_items() if self.min_cosine is not None else None
        feeds = None
        if items is not None:  # checked before quantizing: bad data should not cost a quantization
            feeds = to_feeds(items, prepared, what="data", input_name=self.input_name, finite=True)
        quantized = self._quantize_prepared(prepared)
        if feeds is not None and self.min_cosine is not None:
            self.agreement = measure(quantized, prepared, feeds, self.min_cosine)
            hints = (
                "exclude_nodes= for the layers that lose most (evaluate(..., per_layer=True) or AutoMixedPrecision "
                "find them), per_channel=True, or Fp16Quantizer()"
            )
            name = prepared.graph.name or "<ModelProto>"
            enforce(self.agreement, what="int8 (dynamic)", model=name, low_accuracy=self.low_accuracy, hints=hints)
        return quantized

    def _quantize_prepared(self, prepared: onnx.ModelProto) -> onnx.ModelProto:
        quantization = _import_quantization()
        _check_nodes("exclude_nodes", self.exclude_nodes, prepared)
        if self._only is not None:
            _check_nodes("only", self._only, prepared)
        excluded = list(dict.fromkeys(list(self.exclude_nodes) + mask_path_nodes(prepared)))
        src = ModelSource.from_any(prepared, check=False)
        check_weights(src, quantized_nodes(prepared, op_types=self.op_types, excluded=excluded, only=self._only))
        with tempfile.TemporaryDirectory(prefix="amdinfer-int8-") as tmp:
            inp, out = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
            save_for_quantizer(src, inp)
            try:
                with _ort_prints_to_log():
                    quantization.quantize_dynamic(
                        str(inp),
                        str(out),
                        op_types_to_quantize=list(self.op_types),
                        per_channel=self.per_channel,
                        reduce_range=self.reduce_range,
                        weight_type=getattr(quantization.QuantType, QUANT_TYPES[self.weight_type]),
                        nodes_to_quantize=self._only,
                        nodes_to_exclude=excluded,
                        extra_options={"MatMulConstBOnly": True},
                    )
                return onnx.load_model(str(out))
            except AmdinferError:
                raise
            except Exception as exc:  # ONNX Runtime's errors and asserts
                text = str(exc).strip().splitlines()
                raise ModelError(
                    f"model {src.name}: ONNX Runtime's dynamic int8 quantizer failed ({type(exc).__name__}: "
                    f"{text[0] if text else 'no message'})"
                ) from exc

    def describe(self) -> QuantizationSpec:
        """What this quantizer asks for: int8 without calibration data (native int8 paths need some).

        Example:
            >>> spec = DynamicInt8Quantizer().describe()
            >>> spec.precision, spec.calibration, spec.op_types
            ('int8', False, ('MatMul',))
        """
        notes = [DYNAMIC_NOTE]
        if self.agreement is not None:
            notes.append(f"int8 accuracy check: {self.agreement.summary()}")
        return QuantizationSpec(
            precision="int8",
            node_block_list=tuple(self.exclude_nodes),
            mixed=self._only is not None,
            per_channel=self.per_channel,
            reduce_range=self.reduce_range,
            activation_type="uint8",
            weight_type=self.weight_type,
            format="qoperator",
            op_types=tuple(self.op_types),
            notes=tuple(notes),
        )

    def _with_float_nodes(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> DynamicInt8Quantizer:
        clone = object.__new__(DynamicInt8Quantizer)
        clone.__dict__.update(self.__dict__)
        clone.exclude_nodes = list(dict.fromkeys(list(self.exclude_nodes) + list(keep)))
        clone._only = None if only is None else list(only)
        return clone
