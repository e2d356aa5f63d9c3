"""``amdinfer profile``: per-node time and provider from ONNX Runtime's profiler, and a Chrome trace."""

from __future__ import annotations

import argparse

from ._common import (
    add_model_args,
    add_output_args,
    cache_line,
    emit,
    engine_header,
    feeds_for,
    info_lines,
    load_engine,
    plan_feeds,
    positive_int,
    progress_enabled,
)
from ._common import non_negative_int as _non_negative
from ._outputs import check_writable

NAME = "profile"
HELP = "per-node time and provider (which nodes ran on the CPU), per-op totals, a Chrome trace"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--runs", type=positive_int, default=10, help="profiled runs averaged per node (default 10)")
    p.add_argument("--warmup", type=_non_negative, default=2, help="runs before profiling counts (default 2)")
    p.add_argument("--top", type=_non_negative, default=15, help="rows of the slowest-node table (default 15)")
    p.add_argument("--trace", metavar="OUT.json", help="write the Chrome trace (chrome://tracing, Perfetto)")
    add_output_args(p)


def run(args: argparse.Namespace) -> int:
    from ..profile import profile

    trace = check_writable(args.trace, "--trace", args) if args.trace else None
    shapes = plan_feeds(args, [args.batch]) if not args.inputs else None
    engine = load_engine(args, shapes)
    with engine:
        feeds = feeds_for(args, engine, shapes[0] if shapes else {})
        report = profile(
            engine, feeds, runs=args.runs, warmup=args.warmup, trace=trace, progress=progress_enabled(args)
        )
        info = engine.info
    text = "\n".join([*info_lines(info), cache_line(args, info), report.format(top=args.top)])
    emit(args, {**engine_header(info), **report.to_dict()}, text)
    return 0
