"""``amdinfer verify``: compare a backend with another (the NumPy reference by default) or a golden file; exit 0/1."""

from __future__ import annotations

import argparse
from pathlib import Path
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
    p.add_argument(
        "expected_model",
        nargs="?",
        metavar="EXPECTED",
        help="the expected side's model (e.g. the float model of a quantized MODEL), run on --against; default MODEL",
    )
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
    g.add_argument(
        "--bisect",
        action="store_true",
        help="find the first node whose output diverges while its inputs agree (each tensor on its own scale)",
    )
    g.add_argument("--out", metavar="DIR", help="with --bisect: write a minimal ONNX reproducer of that node there")
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
    source = model_specs(args.expected_model or args.model)
    options: dict[str, Any] = {}
    if args.against_providers:
        options["providers"] = [p.strip() for p in args.against_providers.split(",") if p.strip()]
        backend = "ort" if backend == "auto" else backend
    if takes_option(backend, "cache"):
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


def _check_out_dir(path: str, args: argparse.Namespace) -> Path:
    """``--out DIR``: a folder (created if missing) in an existing folder, not one of the files the command reads."""
    from .._support._files import check_path, same_file

    p = check_path(path, "--out").expanduser()
    if p.exists() and not p.is_dir():
        raise OptionError(f"--out: got {path!r}, a file; expected a folder for the reproducer (created if missing)")
    if not p.parent.is_dir():
        raise OptionError(f"--out: got {path!r}, but folder '{p.parent}' does not exist")
    for label, other in (("the model", args.model), ("EXPECTED", args.expected_model), ("--inputs", args.inputs)):
        if other and Path(other).parent.resolve() == p.resolve() and Path(other).name in _REPRO_FILES:
            raise OptionError(f"--out: got {path!r}; the reproducer would replace {label} ({other!r})")
        if other and same_file(p, other):
            raise OptionError(f"--out: got {path!r}, the same path as {label}")
    return p


#: The files ``--bisect --out DIR`` writes in DIR.
_REPRO_FILES = ("model.onnx", "actual.onnx", "expected.onnx", "inputs.npz", "expected.npz", "actual.npz",
                "bisect.json", "README.md")  # fmt: skip


def _bisect_lines(report: Any, top: int, out: Path | None) -> list[str]:
    """The table (the culprit's inputs and outputs, or the largest errors), the verdict, the reproducer."""
    lines = [f"bisect    walked {len(report.steps)} nodes of the float graph; precision {report.precision}"]
    lines.append(report.table(top=min(top, 5)))
    if report.skipped:
        lines.append(f"  not compared: {len(report.skipped)} tensors without a counterpart (see --json)")
    lines.append("verdict   " + report.verdict)
    repro = report.reproducer
    if repro is not None:
        checked = {True: "reproduces", False: "does not reproduce alone", None: "not run"}[repro.reproduced]
        lines.append(f"reproducer {repro.directory} ({checked}): {repro.command}")
    elif report.culprit is not None and out is None:
        lines.append("reproducer none written: add --out DIR")
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
    if args.bisect and (args.per_layer or golden is not None or save is not None):
        raise OptionError("--bisect: walks every intermediate tensor itself; drop --per-layer, --golden, --save-golden")
    if args.out and not args.bisect:
        raise OptionError("--out: the folder of the --bisect reproducer; add --bisect")
    if golden is not None and args.expected_model:
        raise OptionError(f"{args.expected_model}: a second model is the expected side; drop it or --golden")
    out = _check_out_dir(args.out, args) if args.out else None
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
                if args.per_layer or args.bisect:
                    note(args, f"comparing every intermediate tensor of {len(engine.model.proto.graph.node)} nodes")
                if args.bisect:
                    report = verify.bisect(engine, ref, feeds, out_dir=out, **tol)
                else:
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
    if args.bisect:
        lines += _bisect_lines(report, args.top, out)
    elif args.per_layer:
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
