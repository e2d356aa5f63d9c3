"""MIGraphX's quantization knobs, mapped from a quantizer's :class:`~amdinfer.quantize.QuantizationSpec`.

``migraphx.quantize_fp16(prog, ins_names=["all"])`` and ``migraphx.quantize_int8(prog, target,
calibration, ins_names)`` quantize a whole program, per instruction kind; what a spec asks beyond that
(block lists, kept layers, calibration methods, per-channel scales) is listed as not honoured, never
dropped silently. Used by the native MIGraphX engine; the ORT MIGraphX EP shares :func:`migraphx_unhonoured`.

Example:
    >>> from amdinfer.quantize import QuantizationSpec
    >>> migraphx_unhonoured(QuantizationSpec("fp16", node_block_list=("conv1",)))
    ['node_block_list=conv1 (MIGraphX cannot keep single nodes in float)']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["MIGRAPHX_INT8_INS", "MigraphxQuantPlan", "migraphx_ins_names", "migraphx_plan", "migraphx_unhonoured"]

#: ONNX op type -> the MIGraphX instruction ``quantize_int8`` quantizes for it.
MIGRAPHX_INT8_INS = {"Conv": "convolution", "ConvTranspose": "convolution", "MatMul": "dot", "Gemm": "dot"}


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


def migraphx_unhonoured(spec: Any) -> list[str]:
    """The parts of a :class:`~amdinfer.quantize.QuantizationSpec` MIGraphX cannot express.

    Example:
        >>> from amdinfer.quantize import QuantizationSpec
        >>> migraphx_unhonoured(QuantizationSpec("int8", calibration=True, method="minmax", per_channel=True))
        ['per_channel=True (MIGraphX quantize_int8 uses per-tensor scales)']
    """
    out = []
    if spec.op_block_list:
        out.append(f"op_block_list={sorted(spec.op_block_list)} (MIGraphX converts every instruction to fp16)")
    if spec.node_block_list:
        name = "exclude_nodes" if spec.precision == "int8" else "node_block_list"
        out.append(f"{name}={', '.join(spec.node_block_list)} (MIGraphX cannot keep single nodes in float)")
    if spec.keep_last_n:
        out.append(f"keep_last_n={spec.keep_last_n} (MIGraphX cannot keep single layers in float)")
    if spec.mixed:
        out.append("mixed precision: MIGraphX quantizes every instruction of the chosen kinds")
    if not spec.keep_io_types:
        out.append("keep_io_types=False (MIGraphX keeps the model's input and output types)")
    if spec.precision == "int8":
        if spec.method not in (None, "minmax"):
            out.append(f"method={spec.method!r} (MIGraphX calibrates with its own max-abs ranges)")
        if spec.per_channel:
            out.append("per_channel=True (MIGraphX quantize_int8 uses per-tensor scales)")
        if spec.reduce_range:
            out.append("reduce_range=True (MIGraphX uses the full int8 range)")
        if spec.activation_type != "int8" or spec.weight_type != "int8":
            out.append(
                f"activation_type={spec.activation_type!r}, weight_type={spec.weight_type!r} "
                "(MIGraphX quantizes to symmetric int8)"
            )
        if spec.format != "qdq":
            out.append(f"format={spec.format!r} (MIGraphX quantizes the float program itself)")
        unmapped = [t for t in (spec.op_types or []) if t not in MIGRAPHX_INT8_INS]
        if unmapped:
            out.append(f"op_types {unmapped} (MIGraphX int8 quantizes only convolution and dot)")
    out.extend(spec.notes)
    return out


def migraphx_ins_names(spec: Any) -> list[str]:
    """The ``ins_names`` for MIGraphX's quantize call.

    Example:
        >>> from amdinfer.quantize import QuantizationSpec
        >>> migraphx_ins_names(QuantizationSpec("int8", op_types=("MatMul", "Relu")))
        ['dot']
    """
    if spec.precision == "fp16":
        return ["all"]
    if spec.op_types is None:
        return ["dot", "convolution"]
    return list(dict.fromkeys(MIGRAPHX_INT8_INS[t] for t in spec.op_types if t in MIGRAPHX_INT8_INS))


def migraphx_plan(quantizer: Any, model: Any) -> MigraphxQuantPlan:
    """The plan the native MIGraphX engine applies for ``quantizer`` on ``model``.

    Args:
        quantizer: a :class:`~amdinfer.quantize.Quantizer`.
        model: the model (its inputs name the calibration feeds).

    Example:
        >>> from amdinfer.quantize import Fp16Quantizer
        >>> plan = migraphx_plan(Fp16Quantizer(op_block_list=[]), None)
        >>> plan.kind, plan.ins_names, plan.unhonoured
        ('fp16', ['all'], [])
    """
    spec = quantizer.describe()
    feeds = None
    if spec.precision == "int8":
        feeds = [{k: np.ascontiguousarray(v) for k, v in f.items()} for f in quantizer.calibration_feeds(model)]
    return MigraphxQuantPlan(
        kind=spec.precision, ins_names=migraphx_ins_names(spec), calibration=feeds, unhonoured=migraphx_unhonoured(spec)
    )
