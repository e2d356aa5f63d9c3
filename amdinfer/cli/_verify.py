"""``amdinfer verify``: compare a backend with the NumPy reference, or with a golden file; exit 0/1."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ._common import (
    add_model_args,
    add_output_args,
    emit,
    engine_header,
    feeds_for,
    info_lines,
    load_engine,
    load_npz,
    model_specs,
    note,
    plan_feeds,
)
from ._common import non_negative_int as _non_negative
from ._outputs import check_writable, save_npz

NAME = "verify"
HELP = "compare a backend's outputs with the float64 NumPy reference (or a golden file); exit 1 on mismatch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--reference-precision", default="fp64", choices=["fp64", "fp32"], help="fp64 (default) or fp32")
    p.add_argument("--per-layer", action="store_true", help="compare every intermediate tensor; name the first bad one")
    p.add_argument("--top", type=_non_negative, default=10, help="rows of the per-layer table (default 10)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--save-golden", metavar="OUT.npz", help="write the inputs and the reference's outputs (for CI)")
    g.add_argument("--golden", metavar="GOLDEN.npz", help="compare with a golden file instead of the reference")
    add_output_args(p)


def _describe(info: Any) -> str:
    providers = f", {', '.join(info.providers)}" if info.providers else ""
    return f"{info.backend} ({info.device}{providers}, {info.precision})"


def save_golden(path: Path, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """``input/<name>`` and ``output/<name>`` arrays plus a JSON ``meta`` string, readable without pickle.

    Written at exactly ``path`` (no ``.npz`` appended), through a temporary file renamed over it.
    """
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    arrays.update({f"input/{k}": np.asarray(v) for k, v in feeds.items()})
    arrays.update({f"output/{k}": np.asarray(v) for k, v in outputs.items()})
    save_npz(path, arrays, "--save-golden")


def load_golden(path: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """Inputs, outputs and meta of a golden file written by ``--save-golden``."""
    data = load_npz(path, "--golden")
    feeds = {k[6:]: v for k, v in data.items() if k.startswith("input/")}
    outs = {k[7:]: v for k, v in data.items() if k.startswith("output/")}
    if not feeds or not outs:
        raise InputError(
            f"--golden: {path!r} has arrays {sorted(data)}, expected input/<name> and output/<name> "
            "(a file written by amdinfer verify --save-golden)"
        )
    try:
        meta = json.loads(str(data["meta"])) if "meta" in data else {}
    except ValueError:
        meta = {}
    return feeds, outs, meta


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
    golden = load_golden(args.golden) if args.golden else None
    if golden is not None and (args.inputs or args.per_layer):
        raise OptionError("--golden: it holds the inputs and outputs; drop --inputs and --per-layer")
    shapes = plan_feeds(args, [args.batch]) if not (args.inputs or golden) else None
    engine = load_engine(args, shapes)
    with engine:
        feeds = golden[0] if golden is not None else feeds_for(args, engine, shapes[0] if shapes else {})
        info = engine.info
        lines = info_lines(info)[1:]  # the verify line names the engine
        if golden is not None:
            g_meta = golden[2]
            expected_name = f"golden file {args.golden}" + (f" ({g_meta['engine']})" if g_meta.get("engine") else "")
            lines.insert(0, f"verify    {_describe(info)} against {expected_name}")
            actual = engine.run(feeds)
            names = [n for n in golden[1] if n in actual]
            missing = [n for n in golden[1] if n not in actual]
            if missing:
                raise InputError(f"--golden: outputs {missing} are not outputs of the model ({list(actual)})")
            report: Any = verify.compare(
                {n: actual[n] for n in names}, {n: golden[1][n] for n in names}, precision=info.precision
            )
            ref_desc = expected_name
        else:
            # The reference runs the float model as given, also when the engine runs an fp16 or int8 rewrite of it.
            ref = amdinfer.load(model_specs(args.model), backend="reference", precision=args.reference_precision)
            with ref:
                ref_desc = _describe(ref.info)
                lines.insert(0, f"verify    {_describe(info)} against {ref_desc}")
                if args.per_layer:
                    note(args, f"comparing every intermediate tensor of {len(engine.model.proto.graph.node)} nodes")
                report = verify.compare_engines(engine, ref, feeds, per_layer=args.per_layer)
                if save is not None:
                    meta = {"engine": ref_desc, "model_sha256": engine.model.sha256, "amdinfer": amdinfer.__version__}
                    save_golden(save, feeds, ref.run(feeds), meta)
    lines.insert(
        1, "inputs    " + ", ".join(f"{k} {np.asarray(v).dtype} {tuple(np.asarray(v).shape)}" for k, v in feeds.items())
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
        "passed": report.passed,
        "report": report.to_dict(),
        "golden_saved": str(save) if save is not None else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0 if report.passed else 1
