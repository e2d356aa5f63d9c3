"""``amdinfer inspect``: what a model is and where it can run, before anything is compiled."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import OptionError
from ._common import add_output_args, emit, feed_shapes, model_specs, parse_input_shapes, positive_int

NAME = "inspect"
HELP = "inputs, outputs, nodes, parameters, size, opsets, op histogram, FLOPs estimate, op coverage per backend"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument(
        "--input-shapes",
        type=parse_input_shapes,
        action="append",
        metavar="NAME:1x3x224x224,...",
        help="shapes for the FLOPs estimate (dynamic axes other than the batch need one)",
    )
    p.add_argument("--batch", type=positive_int, default=None, help="batch size for the estimate (default 1)")
    p.add_argument("--no-coverage", action="store_true", help="skip the per-backend op coverage checks")
    add_output_args(p)


def _count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f}"


def _bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


#: A symbolic dimension longer than this is shown by a short name (``s0``, ``s1``, ...) with a legend line.
_LONG_DIM = 16
#: The most characters of an expression a legend line shows (the whole one is under ``--json``).
_LEGEND_CHARS = 96


class _Symbols:
    """Short names for long symbolic dimensions (a traced export's ``Floor(Div(...))`` expressions), one per
    distinct expression, and the legend that says what each stands for.

    Example:
        >>> sym = _Symbols()
        >>> long = "((height + 31) // 32) * 32 - (height + 1)"
        >>> sym.shape([1, 3, long, "width"]), sym.shape([long])
        ('(1, 3, s0, width)', '(s0)')
        >>> sym.legend()
        ['symbols    s0 = ((height + 31) // 32) * 32 - (height + 1)']
    """

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def dim(self, d: Any) -> str:
        if d is None:
            return "?"
        text = str(d)
        if isinstance(d, str) and len(text) > _LONG_DIM:
            return self.names.setdefault(text, f"s{len(self.names)}")
        return text

    def shape(self, shape: list[Any]) -> str:
        return "(" + ", ".join(self.dim(d) for d in shape) + ")"

    def legend(self) -> list[str]:
        lines = []
        for text, name in self.names.items():
            shown = (
                text if len(text) <= _LEGEND_CHARS else f"{text[:_LEGEND_CHARS]}... ({len(text)} characters; --json)"
            )
            lines.append(f"symbols    {name} = {shown}")
        return lines


def _quoted(sym: _Symbols, d: Any) -> str:
    short = sym.dim(d)
    return repr(d) if short == str(d) else short


def run(args: argparse.Namespace) -> int:
    from ._stats import migraphx_coverage, model_stats, ort_placement

    source = model_specs(args.model)
    overrides: dict[str, tuple[int | None, ...]] = {}
    for v in args.input_shapes or []:
        overrides.update(v)
    try:
        shapes = feed_shapes(source.inputs, overrides, args.batch)
        why_no_estimate = None
    except OptionError as exc:
        if overrides:
            raise
        shapes, why_no_estimate = None, str(exc)
    stats = model_stats(source, shapes)
    if not args.no_coverage:
        stats["coverage"] = {"migraphx": migraphx_coverage(source), "ort": ort_placement(source)}
    lines = [
        f"model      {stats['name']}  ({_bytes(stats['file_bytes'])}, IR {stats['ir_version']}, "
        f"opsets {stats['opsets']}, sha256 {stats['sha256'][:16]})",
        f"graph      {stats['nodes']} nodes, {_count(stats['parameters'])} parameters "
        f"({_bytes(stats['parameter_bytes'])})",
    ]
    sym = _Symbols()
    for kind in ("inputs", "outputs"):
        for s in stats[kind]:
            lines.append(f"{kind[:-1]:<10} {s['name']}: {s['dtype']} {sym.shape(s['shape'])}")
    if stats["dynamic"]:
        dyn = "; ".join(
            f"{name} " + ", ".join(f"axis {a} {_quoted(sym, d)}" for a, d in v["axes"].items())
            for name, v in stats["dynamic"].items()
        )
        lines.append(f"dynamic    {dyn}")
    lines += sym.legend()
    hist = stats["op_histogram"]
    lines.append(f"ops        {len(hist)} types: " + ", ".join(f"{op} {n}" for op, n in hist.items()))
    est = stats.get("estimate")
    if est is not None:
        at = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in est["input_shapes"].items())
        unknown = f", {est['unknown_nodes']} nodes of unknown shape" if est["unknown_nodes"] else ""
        lines.append(
            f"estimate   at {at}: {_count(est['macs'])}MACs, {_count(est['flops'])}FLOPs, "
            f"{_bytes(est['bytes'])} weights + activations{unknown}"
        )
    else:
        lines.append(f"estimate   none: {why_no_estimate}")
    cov = stats.get("coverage")
    if cov is not None:
        mgx = cov["migraphx"]
        state = "every op has a parser" if mgx["supported"] else f"no parser for {mgx['unsupported']}"
        lines.append(f"migraphx   {state} (operators from {mgx['operators_from']})")
        ort = cov["ort"]
        for prov, what in ort["providers"].items():
            lines.append(f"ort        {prov}: {what}")
        if ort.get("note"):
            lines.append(f"ort        {ort['note']}")
    stats["precision_certificate"], shown = certificate_section(source.proto)
    lines += shown
    emit(args, stats, "\n".join(lines))
    return 0


def certificate_section(proto: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The model's precision certificate for ``--json`` (``None`` without one; ``{"trusted": false, "problem"}``
    for one that cannot be trusted) and the text section's lines."""
    from .._certificate._io import inspect_certificate

    cert, problem = inspect_certificate(proto)
    if problem is not None:
        return {"trusted": False, "problem": problem}, [f"precision certificate: NOT TRUSTED, {problem}"]
    if cert is None:
        return None, ["precision certificate: none"]
    speed = "not measured" if cert.speed is None else f"{cert.speed.speedup:.2f}x fp32 on {cert.speed.provider}"
    counts = ", ".join(f"{p} {n}" for p, n in sorted(cert.layer_counts().items())) or "not recorded"
    lines = [
        f"precision certificate: {cert.precision} {cert.task} {cert.verdict} ({cert.judged_by}, {cert.created or '?'})",
        "  thresholds  " + (", ".join(f"{t} {'met' if t.holds else 'MISSED'}" for t in cert.thresholds) or "none"),
        f"  answers     {cert.answers[1]} {cert.unit} against the float model's {cert.answers[0]}",
        f"  data        {cert.data.items} items in {cert.data.samples} samples ({cert.data.source}), "
        f"sha256 {cert.data.sha256[:16]}",
        f"  layers      {counts}",
        f"  speed       {speed}",
        f"  models      float sha256 {cert.float_sha256[:16]}, quantized {cert.quantized_sha256[:16]} (this model)",
        "  versions    " + ", ".join(f"{k} {v}" for k, v in cert.versions.items()),
    ]
    lines += [f"  ! {r}" for r in cert.reasons]
    return {"trusted": True, **cert.to_dict()}, lines
