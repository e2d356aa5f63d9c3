"""The seam where engines meet quantizers: the :class:`Quantizer` protocol and :class:`QuantizationSpec`.

It lives below both layers (engines import it, :mod:`amdinfer.quantize` implements it and re-exports
it); the public import path is ``amdinfer.quantize``.

Example:
    >>> QuantizationSpec("fp16").keep_io_types
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import onnx

__all__ = ["PrecisionQuantizer", "QuantizationSpec", "Quantizer"]


@dataclass(frozen=True)
class QuantizationSpec:
    """What a quantizer asks for, in terms any engine can map onto its own knobs.

    Attributes:
        precision: ``"fp16"`` or ``"int8"``.
        keep_io_types: float32 inputs and outputs are kept.
        op_block_list: op types left in float.
        node_block_list: node names left in float (fp16 block list, int8 ``exclude_nodes``).
        keep_last_n: the last ``n`` weighted layers and the head after them stay in float.
        mixed: only some nodes are quantized (mixed precision).
        calibration: int8 with calibration data (:meth:`Quantizer.calibration_feeds`).
        method: calibration method (``"minmax"``, ``"entropy"``, ``"percentile"``, ``"distribution"``).
        percentile: the percentile for ``method="percentile"``.
        per_channel: per-channel weight scales.
        reduce_range: 7-bit weights.
        activation_type: ``"int8"`` or ``"uint8"``.
        weight_type: ``"int8"`` or ``"uint8"``.
        format: ``"qdq"`` or ``"qoperator"``.
        op_types: op types to quantize (``None``: the quantizer's default).
        notes: what the engine should add to ``info.notes`` whatever it does (e.g. kept layers of a search).

    Example:
        >>> QuantizationSpec("int8", calibration=True, method="minmax").format
        'qdq'
    """

    precision: str
    keep_io_types: bool = True
    op_block_list: tuple[str, ...] = ()
    node_block_list: tuple[str, ...] = ()
    keep_last_n: int = 0
    mixed: bool = False
    calibration: bool = False
    method: str | None = None
    percentile: float | None = None
    per_channel: bool = False
    reduce_range: bool = False
    activation_type: str = "int8"
    weight_type: str = "int8"
    format: str = "qdq"
    op_types: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.precision not in ("fp16", "int8"):
            raise ValueError(f"QuantizationSpec.precision: got {self.precision!r}, expected 'fp16' or 'int8'")


@runtime_checkable
class Quantizer(Protocol):
    """What an engine needs from a quantizer (``amdinfer.load(model, quantizer=q)``).

    :class:`~amdinfer.quantize.Fp16Quantizer`, :class:`~amdinfer.quantize.Int8Quantizer` and
    :class:`~amdinfer.quantize.AutoMixedPrecision` implement it; any object with these members plugs in.

    Example:
        >>> from amdinfer.quantize import Fp16Quantizer
        >>> isinstance(Fp16Quantizer(), Quantizer)
        True
    """

    @property
    def precision(self) -> str:
        """``"fp16"`` or ``"int8"``; engines report it as their precision."""
        ...

    def describe(self) -> QuantizationSpec:
        """What the quantizer asks for, for engines with native knobs."""
        ...

    def quantize(self, model: Any) -> onnx.ModelProto:
        """The rewritten model (the input is not modified)."""
        ...

    def calibration_feeds(self, model: Any) -> list[dict[str, np.ndarray]]:
        """Calibration samples as feed dicts for ``model``'s inputs (empty when none are needed)."""
        ...

    def settings(self) -> dict[str, Any]:
        """The settings that change the result, JSON-friendly (part of cache keys and reports)."""
        ...


@runtime_checkable
class PrecisionQuantizer(Protocol):
    """Maps a bare ``precision=`` to the quantizer that realises it by rewriting the model (``None``: no rewrite).

    A backend whose runtime has no native knob for a precision (ONNX Runtime's CPU, CUDA and ROCm providers for
    fp16) runs a rewritten model instead. Which quantizer stands for ``precision="fp16"`` is decided once, above
    the engines: :func:`amdinfer.load` hands :func:`amdinfer.quantize.precision_quantizer` to the backends that
    take a ``precision_quantizer=`` option, so no engine imports :mod:`amdinfer.quantize`.

    Example:
        >>> from amdinfer.quantize import precision_quantizer
        >>> isinstance(precision_quantizer, PrecisionQuantizer)
        True
    """

    def __call__(self, precision: str, *, keep_io_types: bool = True) -> Quantizer | None:
        """The quantizer for ``precision`` (float32/float64: ``None``)."""
        ...
