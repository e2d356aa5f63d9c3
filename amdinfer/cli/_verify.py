"""``amdinfer verify``: compare a backend with another (the NumPy reference by default) or a golden file; exit 0/1."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ._common import (
    add_model_args,
    add_output_args,
    cache_line,
    cache_options,
    describe,
    emit,
    engine_header,
    feeds_for,
    info_lines,
    load_engine,
    model_specs,
    note,
    plan_feeds,
    shape_bounds,
    takes_option,
)
from ._common import non_negative_int as _non_negative
from ._outputs import check_writable

NAME = "verify"
HELP = "compare a backend's outputs with another backend's (default: the float64 NumPy reference) or a golden file"


def _tolerance(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number >= 0") from None
    if not (value >= 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number >= 0")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    g = p.add_argument_group("comparison")
    g.add_argument(
        "--against",
        metavar="BACKEND",
        help="the expected side: a backend (auto, ort, migraphx, reference; default reference) run on the same inputs",
    )
    g.add_argument("--against-providers", metavar="P1,P2", help="ONNX Runtime providers of --against (implies ort)")
    g.add_argument(
        "--reference-precision",
        default="fp64",
        choices=["fp64", "fp32"],
        help="precision of --against reference: fp64 (default) or fp32",
    )
    g.add_argument("--atol", type=_tolerance, help="absolute tolerance for every output (default: by precision)")
    g.add_argument("--rtol", type=_tolerance, help="relative tolerance for every output (default: by precision)")
    g.add_argument("--rms-tol", type=_tolerance, help="bound on the RMS error metric (default: by precision)")
    g.add_argument("--per-layer", action="store_true", help="compare every intermediate tensor; name the first bad one")
    g.add_argument("--top", type=_non_negative, default=10, help="rows of the per-layer table (default 10)")
    m = p.add_mutually_exclusive_group()
    m.add_argument("--save-golden", metavar="OUT.npz", help="write the inputs and the expected outputs (for CI)")
    m.add_argument(
        "--golden", metavar="GOLDEN.npz", help="compare with a golden file (verify --save-golden, run --save) instead"
    )
    add_output_args(p)


def _against(args: argparse.Namespace, feeds: dict[str, Any]) -> Any:
    """The expected side's engine: ``--against`` (default the reference) with its providers and the cache."""
    import amdinfer

    backend = args.against or "reference"
    source = model_specs(args.model)
    options: dict[str, Any] = {}
    if args.against_providers:
        options["providers"] = [p.strip() for p in args.against_providers.split(",") if p.strip()]
        backend = "ort" if backend == "auto" else backend
    if takes_option(backend, "use_cache"):
        options.update(cache_options(args, backend))
    if backend != "reference":
        shapes = {k: tuple(np.asarray(v).shape) for k, v in feeds.items()}
        bounds = shape_bounds(source.inputs, [shapes]) if {s.name for s in source.inputs} <= set(shapes) else {}
        if bounds:
            options["shapes"] = bounds
    # The expected side runs the float model as given, also when the engine under test runs an fp16 or int8 rewrite.
    precision = args.reference_precision if backend == "reference" else "fp32"
    return amdinfer.load(source, backend=backend, device=args.device, precision=precision, **options)


def _tolerances(args: argparse.Namespace) -> dict[str, Any]:
    return {"atol": args.atol, "rtol": args.rtol, "rms_tol": args.rms_tol}


def _layer_table(report: Any, top: int) -> list[str]:
    from ..verify._report import _COLUMNS, _row, _text_table

    compared = [e for e in report.layers if e.report is not None]
    if report.passed:
        chosen = sorted(compared, key=lambda e: -(e.report.rms or 0.0))[:top]
        title = f"per-layer: all {len(compared)} tensors agree; the {len(chosen)} largest rms errors:"
    else:
        first = report.first_divergence
        chosen = [e for e in compared if e.index >= first.index][:top]
        title = (
            f"per-layer: first divergence at node {first.node!r} ({first.op_type}, #{first.index}), "
            f"{len(report.diverged)}/{len(compared)} tensors diverge; {len(chosen)} rows from there:"
        )
    rows = [[str(e.index), e.node, e.op_type, *_row(e.report)] for e in chosen]
    lines = [title]
    if rows:
        lines.append(_text_table(["#", "node", "op", *_COLUMNS], rows))
    if len(rows) < len(compared):
        lines.append(f"  ({len(compared) - len(rows)} more: --top N shows more, --json has all)")
    if report.skipped:
        lines.append(f"  not compared: {len(report.skipped)} tensors (see --json)")
    return lines


def run(args: argparse.Namespace) -> int:
    import amdinfer

    from .. import verify

    save = check_writable(args.save_golden, "--save-golden", args) if args.save_golden else None
    golden = verify.load_golden(args.golden, "--golden") if args.golden else None
    if golden is not None and (args.inputs or args.per_layer or args.against or args.against_providers):
        raise OptionError("--golden: it holds the inputs and expected outputs; drop --inputs, --per-layer, --against")
    if args.against_providers and args.against not in (None, "auto", "ort"):
        raise OptionError(f"--against-providers: ONNX Runtime providers; got --against {args.against}")
    if args.reference_precision != "fp64" and args.against not in (None, "reference"):
        raise OptionError(f"--reference-precision: applies to --against reference, got --against {args.against}")
    tol = _tolerances(args)
    shapes = plan_feeds(args, [args.batch]) if not (args.inputs or golden) else None
    engine = load_engine(args, shapes)
    with engine:
        feeds = golden.inputs if golden is not None else feeds_for(args, engine, shapes[0] if shapes else {})
        info = engine.info
        if golden is not None:
            made_by = golden.meta.get("engine")
            ref_desc = f"golden file {args.golden}" + (f" ({made_by})" if made_by else "")
            actual = engine.run(feeds)
            missing = [n for n in golden.outputs if n not in actual]
            if missing:
                raise InputError(f"--golden: outputs {missing} are not outputs of the model ({list(actual)})")
            names = list(golden.outputs)
            report: Any = verify.compare(
                {n: actual[n] for n in names}, dict(golden.outputs), precision=info.precision, **tol
            )
        else:
            with _against(args, feeds) as ref:
                ref_desc = describe(ref.info)
                if args.per_layer:
                    note(args, f"comparing every intermediate tensor of {len(engine.model.proto.graph.node)} nodes")
                report = verify.compare_engines(engine, ref, feeds, per_layer=args.per_layer, **tol)
                if save is not None:
                    meta = {"engine": ref_desc, "model_sha256": engine.model.sha256, "amdinfer": amdinfer.__version__}
                    verify.save_golden(save, feeds, ref.run(feeds), meta, what="--save-golden")
    lines = [f"verify    {describe(info)} against {ref_desc}", *info_lines(info)[1:], cache_line(args, info)]
    lines.append(
        "inputs    " + ", ".join(f"{k} {np.asarray(v).dtype} {tuple(np.asarray(v).shape)}" for k, v in feeds.items())
    )
    given = {k: v for k, v in tol.items() if v is not None}
    if given:
        lines.append(
            "tolerance " + ", ".join(f"{k} {v:g}" for k, v in given.items()) + " (given; the rest by precision)"
        )
    if args.per_layer:
        lines += _layer_table(report, args.top)
    else:
        lines.append(repr(report))
    if save is not None:
        lines.append(f"golden    wrote inputs and reference outputs to {save}")
    lines.append("result    " + ("PASSED" if report.passed else "FAILED (exit 1)"))
    payload = {
        **engine_header(info),
        "expected": ref_desc,
        "tolerance": tol,
        "passed": report.passed,
        "report": report.to_dict(),
        "golden_saved": str(save) if save is not None else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0 if report.passed else 1
