"""The :class:`Quantizer` protocol, the :class:`QuantizationSpec` it describes itself with, and :class:`QuantizerBase`.

Engines meet quantizers at one typed seam: a quantizer rewrites a model (:meth:`Quantizer.quantize`, used
by every engine that has no native knob) and describes what it asks for in a plain, frozen
:class:`QuantizationSpec` (precision, calibration method, block lists, ...). Each engine maps that
description onto its own knobs (MIGraphX ``quantize_fp16``/``quantize_int8``, the ONNX Runtime MIGraphX
EP's ``migraphx_fp16_enable``/calibration table) and lists in ``engine.info.notes`` what it cannot
honour. Quantizers hold no per-backend code.

Example:
    >>> from amdinfer.quantize import Fp16Quantizer
    >>> spec = Fp16Quantizer(keep_last_n=1).describe()
    >>> spec.precision, spec.keep_last_n, spec.calibration
    ('fp16', 1, False)
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from .._support._quant_protocol import QuantizationSpec, Quantizer

__all__ = ["QuantizationSpec", "Quantizer", "QuantizerBase"]


class QuantizerBase(abc.ABC):
    """Base class of amdinfer's quantizers: :class:`Quantizer` plus what mixed-precision search needs.

    Subclasses set :attr:`precision` and implement :meth:`quantize`, :meth:`describe` and
    :meth:`settings`. A quantizer plugs into ``amdinfer.load(model, quantizer=q)``.

    Example:
        >>> from amdinfer.quantize import Fp16Quantizer
        >>> isinstance(Fp16Quantizer(), QuantizerBase)
        True
    """

    #: ``"fp16"`` or ``"int8"``; engines report it as their precision.
    precision: str = ""

    @abc.abstractmethod
    def quantize(self, model: Any) -> onnx.ModelProto:
        """Return the rewritten model (the input is not modified)."""

    @abc.abstractmethod
    def describe(self) -> QuantizationSpec:
        """What this quantizer asks for (see :class:`QuantizationSpec`)."""

    def calibration_feeds(self, model: Any) -> list[dict[str, np.ndarray]]:
        """Calibration feeds for ``model`` (none by default)."""
        return []

    @abc.abstractmethod
    def settings(self) -> dict[str, Any]:
        """The settings that change the result, JSON-friendly (part of cache keys and reports)."""

    @abc.abstractmethod
    def _with_float_nodes(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> QuantizerBase:
        """A copy that also keeps ``keep`` in float, or quantizes ``only`` those nodes (mixed precision)."""

    @abc.abstractmethod
    def _quantize_prepared(self, prepared: onnx.ModelProto) -> onnx.ModelProto:
        """Quantize a model already through :func:`~amdinfer.quantize.prepare_model`."""

    def settings_hash(self) -> str:
        """Hex SHA-256 of :meth:`settings` (stable across runs).

        Example:
            >>> from amdinfer.quantize import Fp16Quantizer
            >>> Fp16Quantizer().settings_hash() == Fp16Quantizer().settings_hash()
            True
        """
        blob = json.dumps(self.settings(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.settings().items() if k != "kind")
        return f"{type(self).__name__}({shown})"
