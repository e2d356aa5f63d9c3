"""The :class:`Quantizer` protocol and the plan handed to the native MIGraphX engine.

A quantizer serves three paths with one object: it rewrites a model (:meth:`Quantizer.quantize`, used by
every engine that has no native knob), hands MIGraphX's Python API a plan (:meth:`Quantizer.migraphx_plan`)
and gives the ONNX Runtime MIGraphX EP its provider options (:meth:`Quantizer.ort_migraphx_options`).
Settings a path cannot express are listed, never dropped silently.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

__all__ = ["MigraphxQuantPlan", "Quantizer"]


@dataclass(frozen=True)
class MigraphxQuantPlan:
    """What the native MIGraphX engine applies between ``parse_onnx`` and ``compile``.

    Attributes:
        kind: ``"fp16"`` (``migraphx.quantize_fp16``) or ``"int8"`` (``migraphx.quantize_int8``).
        ins_names: MIGraphX instruction names to quantize (``["all"]``, ``["dot", "convolution"]``), or
            ``None`` for MIGraphX's default.
        calibration: the feeds for ``migraphx.quantize_int8`` (``None`` for fp16).
        unhonoured: settings MIGraphX cannot express; the engine puts them in ``info.notes``.

    Example:
        >>> plan = MigraphxQuantPlan(kind="fp16", ins_names=["all"])
        >>> plan.kind, plan.calibration, plan.unhonoured
        ('fp16', None, [])
    """

    kind: str
    ins_names: list[str] | None = None
    calibration: list[dict[str, np.ndarray]] | None = None
    unhonoured: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in ("fp16", "int8"):
            raise ValueError(f"MigraphxQuantPlan.kind: got {self.kind!r}, expected 'fp16' or 'int8'")


class Quantizer(abc.ABC):
    """Base class of :class:`~amdinfer.quantize.Fp16Quantizer` and :class:`~amdinfer.quantize.Int8Quantizer`.

    Subclasses set :attr:`precision` and implement :meth:`quantize`, :meth:`migraphx_plan`,
    :meth:`ort_migraphx_options` and :meth:`settings`. A quantizer plugs into
    ``amdinfer.load(model, quantizer=q)``: engines without a native knob call :meth:`quantize`.

    Example:
        >>> from amdinfer.quantize import Fp16Quantizer
        >>> isinstance(Fp16Quantizer(), Quantizer)
        True
    """

    #: ``"fp16"`` or ``"int8"``; engines report it as their precision.
    precision: str = ""

    @abc.abstractmethod
    def quantize(self, model: Any) -> onnx.ModelProto:
        """Return the rewritten model (the input is not modified)."""

    @abc.abstractmethod
    def migraphx_plan(self, input_names: Sequence[str]) -> MigraphxQuantPlan:
        """The plan the native MIGraphX engine applies (see :class:`MigraphxQuantPlan`)."""

    @abc.abstractmethod
    def ort_migraphx_options(self, model: Any, workdir: Path) -> tuple[dict[str, str], list[str]]:
        """Provider options for the ONNX Runtime MIGraphX EP, and the settings it cannot honour."""

    @abc.abstractmethod
    def settings(self) -> dict[str, Any]:
        """The settings that change the result, JSON-friendly (part of cache keys and reports)."""

    @abc.abstractmethod
    def _with_float_nodes(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> Quantizer:
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
