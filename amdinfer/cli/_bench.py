"""``amdinfer bench``: latency statistics and measured throughput, over a batch sweep, with a plot."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from ._common import (
    add_model_args,
    add_output_args,
    emit,
    engine_header,
    feeds_for,
    info_lines,
    load_engine,
    plan_feeds,
    positive_float,
    positive_int,
    progress_enabled,
)
from ._common import non_negative_int as _non_negative
from ._outputs import check_plot_path

NAME = "bench"
HELP = "latency mean/std/percentiles and measured throughput, over a batch sweep (--batch 1,8,32)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p, sweep=True)
    g = p.add_argument_group("timing")
    g.add_argument("--iterations", type=positive_int, default=50, help="timed calls per batch size (default 50)")
    g.add_argument("--duration", type=positive_float, help="time calls for this many seconds instead")
    g.add_argument("--warmup", type=_non_negative, default=5, help="untimed calls after the first (default 5)")
    g.add_argument("--concurrency", type=positive_int, default=1, help="threads calling the engine at once")
    g.add_argument(
        "--pool", type=positive_int, default=1, help="engine instances the threads share (for non-thread-safe ones)"
    )
    g.add_argument(
        "--io",
        choices=["host", "device"],
        default="host",
        help="host: NumPy in and out, copies included (default); device: inputs and outputs stay in GPU memory "
        "(ONNX Runtime GPU providers)",
    )
    g.add_argument("--plot", metavar="OUT.png", help="latency and throughput against batch (matplotlib)")
    add_output_args(p)


def versions(info: Any) -> dict[str, str]:
    """Versions that matter for a timing."""
    import numpy
    import onnx

    import amdinfer

    out = {
        "amdinfer": amdinfer.__version__,
        "runtime": info.runtime_version or "-",
        "numpy": numpy.__version__,
        "onnx": onnx.__version__,
        "python": platform.python_version(),
    }
    return out


def to_device(info: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    """Copy the feeds into the GPU memory of the engine's first provider, once, before timing.

    Raises:
        OptionError: the engine is not ONNX Runtime on a GPU provider.
    """
    from ..errors import OptionError

    provider = info.providers[0] if info.providers else ""
    if info.backend != "ort" or provider in ("", "CPUExecutionProvider"):
        raise OptionError(
            f"--io device: the engine is {info.backend} on {info.device} ({provider or 'no provider'}); device "
            "IO needs an ONNX Runtime GPU provider (--providers migraphx, rocm or cuda)"
        )
    import onnxruntime as ort

    from ..engines._dlpack import DeviceArray
    from ..engines.ort import ort_device_type

    dev, index = ort_device_type(provider), int(info.device.rpartition(":")[2] or 0)
    return {k: DeviceArray(ort.OrtValue.ortvalue_from_numpy(v, dev, index)) for k, v in feeds.items()}


def spread_warnings(results: list[Any]) -> list[str]:
    """One line per kind of doubt over all batch sizes."""
    from ..bench import SPREAD_WARNING_CV

    out = []
    wide = [r for r in results if r.mean_ms > 0 and r.std_ms / r.mean_ms > SPREAD_WARNING_CV]
    if wide:
        at = ", ".join(f"batch {r.batch} std/mean {r.std_ms / r.mean_ms:.0%}" for r in wide)
        out.append(
            f"latency spread is high ({at}): other load on this machine, clock scaling or too few calls; "
            "treat these numbers as rough"
        )
    few = min(len(r.latencies_ms) for r in results)
    if few < 100:
        out.append(f"{few} timed calls: p99 is interpolated, not a measured tail (use --iterations >= 100)")
    return out


def _fmt(r: Any) -> list[str]:
    return [
        str(r.batch),
        str(len(r.latencies_ms)),
        f"{r.mean_ms:.3f}",
        f"{r.std_ms:.3f}",
        f"{r.min_ms:.3f}",
        f"{r.p50_ms:.3f}",
        f"{r.p90_ms:.3f}",
        f"{r.p95_ms:.3f}",
        f"{r.p99_ms:.3f}",
        f"{r.max_ms:.3f}",
        f"{r.throughput:.1f}",
        f"{r.first_run_ms:.1f}",
    ]


_HEADER = ["batch", "n", "mean", "std", "min", "p50", "p90", "p95", "p99", "max", "items/s", "first"]


def run(args: argparse.Namespace) -> int:
    from ..bench import benchmark, plot_sweep

    if args.inputs and args.batch and len(args.batch) > 1:
        from ..errors import OptionError

        raise OptionError("--batch: a sweep makes random inputs; drop --inputs or give one batch size")
    plot = check_plot_path(args.plot, "--plot", args) if args.plot else None
    batches = args.batch or [None]
    plans = plan_feeds(args, batches) if not args.inputs else None
    extra = {"outputs_on": "device"} if args.io == "device" else {}
    if args.pool > 1:
        import amdinfer

        engine: Any = amdinfer.EnginePool(lambda: load_engine(args, plans, **extra), args.pool)
    else:
        engine = load_engine(args, plans, **extra)
    results = []
    try:
        info = engine.info
        for shapes in plans or [{}]:
            feeds = feeds_for(args, engine, shapes)
            if args.io == "device":
                feeds = to_device(engine.info, feeds)
            results.append(
                benchmark(
                    engine,
                    feeds,
                    iterations=args.iterations,
                    warmup=args.warmup,
                    duration=args.duration,
                    concurrency=args.concurrency,
                    progress=progress_enabled(args),
                )
            )
    finally:
        engine.close()
    if plot is not None:
        from .._files import write_atomic

        title = f"{args.model.rsplit('/', 1)[-1]}: {info.backend} {','.join(info.providers)} {info.precision}"
        # plot_sweep takes a path: the temporary file's name ends with the plot's suffix (the format).
        write_atomic(plot, lambda f: plot_sweep(results, f.name, title=title), argument="--plot")
    ver = versions(info)
    warnings = spread_warnings(results)
    lines = info_lines(info)
    lines.append("versions  " + ", ".join(f"{k} {v}" for k, v in ver.items()))
    lines.append(
        f"load      {info.load_seconds:.3f} s (compile {info.compile_seconds:.3f} s, "
        f"cache {'hit' if info.cache_hit else 'miss'}); "
        + ("host IO (numpy in/out)" if args.io == "host" else "device IO (inputs and outputs in GPU memory)")
    )
    timing = f"{args.duration} s" if args.duration else f"{args.iterations} calls"
    lines.append(
        f"timing    {timing} per batch after {args.warmup} warm-up calls; concurrency {args.concurrency}"
        + (f", pool of {args.pool}" if args.pool > 1 else "")
        + "; latency in ms, items/s = items / wall time, first = first call (ms)"
    )
    rows = [_fmt(r) for r in results]
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]
    for row in [_HEADER, *rows]:
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
    lines += [f"warning: {w}" for w in warnings]
    if plot is not None:
        lines.append(f"plot      {plot}")
    payload = {
        **engine_header(info),
        "versions": ver,
        "load_s": info.load_seconds,
        "compile_s": info.compile_seconds,
        "cache_hit": info.cache_hit,
        "io": args.io,
        "concurrency": args.concurrency,
        "pool": args.pool,
        "results": [r.to_dict() for r in results],
        "warnings": warnings,
        "plot": str(plot) if plot is not None else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0
