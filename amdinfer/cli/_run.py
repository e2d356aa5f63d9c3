"""``amdinfer run``: one run, output names, shapes and statistics."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from ._common import (
    add_model_args,
    add_output_args,
    cache_line,
    describe,
    emit,
    engine_header,
    feeds_for,
    info_lines,
    load_engine,
    plan_feeds,
)
from ._outputs import check_writable

NAME = "run"
HELP = "run a model once; print what ran and each output's dtype, shape and statistics"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument(
        "--save",
        metavar="OUT.npz",
        help="write the inputs and outputs to this .npz (input/<name>, output/<name>; verify --golden reads it)",
    )
    add_output_args(p)


def output_stats(arr: Any) -> dict[str, Any]:
    """dtype, shape, min/max/mean and NaN count of one output."""
    a = np.asarray(arr)
    d: dict[str, Any] = {"dtype": str(a.dtype), "shape": list(a.shape)}
    if a.size and a.dtype.kind in "fiub":
        f = a.astype(np.float64)
        nan = int(np.isnan(f).sum())
        finite = f[np.isfinite(f)]
        d.update(
            min=float(finite.min()) if finite.size else None,
            max=float(finite.max()) if finite.size else None,
            mean=float(finite.mean()) if finite.size else None,
            nan=nan,
        )
    return d


def run(args: argparse.Namespace) -> int:
    save = check_writable(args.save, "--save", args) if args.save else None
    shapes = plan_feeds(args, [args.batch]) if not args.inputs else None
    engine = load_engine(args, shapes)
    with engine:
        feeds = feeds_for(args, engine, shapes[0] if shapes else {})
        out = engine.run(feeds)
        info = engine.info
        stats = {name: output_stats(a) for name, a in out.items()}
        if save is not None:
            import amdinfer
            from amdinfer.verify import save_golden

            meta = {"engine": describe(info), "model_sha256": engine.model.sha256, "amdinfer": amdinfer.__version__}
            save_golden(save, feeds, out, meta, what="--save")
    lines = [*info_lines(info), cache_line(args, info)]
    lines.append("inputs    " + ", ".join(f"{k} {v.dtype} {tuple(v.shape)}" for k, v in feeds.items()))
    for name, s in stats.items():
        extra = ""
        if "min" in s and s["min"] is not None:
            extra = f" min {s['min']:.6g} max {s['max']:.6g} mean {s['mean']:.6g} nan {s['nan']}"
        lines.append(f"{name}: {s['dtype']} {tuple(s['shape'])}{extra}")
    if save is not None:
        lines.append(f"saved outputs to {save} (with the inputs: amdinfer verify --golden reads it)")
    payload = {
        **engine_header(info),
        "inputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in feeds.items()},
        "outputs": stats,
        "saved": str(save) if save is not None else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0
