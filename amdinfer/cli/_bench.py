"""``amdinfer bench``: latency statistics and measured throughput, over a batch sweep, with a plot."""

from __future__ import annotations

import argparse
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._support._memory import HostMemory, device_peak, host_memory, mib
from ..errors import OptionError
from ._common import (
    add_model_args,
    add_output_args,
    emit,
    engine_header,
    feed_shapes,
    feeds_for,
    info_lines,
    load_engine,
    model_specs,
    parse_input_shapes,
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
    g = p.add_argument_group(
        "shape profile (trtexec's --minShapes/--optShapes/--maxShapes; give all three, for the same inputs)"
    )
    for which, what in (
        ("min", "smallest shapes the engine is built for"),
        ("opt", "shapes that are timed (--batch sweeps their axis 0 within min..max)"),
        ("max", "largest shapes the engine is built for"),
    ):
        g.add_argument(
            f"--{which}-shapes",
            type=parse_input_shapes,
            action="append",
            metavar="NAME:1x3x224x224,...",
            help=what,
        )
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
        raise OptionError("--batch: a sweep makes random inputs; drop --inputs or give one batch size")
    plot = check_plot_path(args.plot, "--plot", args) if args.plot else None
    batches = args.batch or [None]
    specs = model_specs(args.model).inputs
    profile = shape_profile(args, specs)
    plans = timed_shapes(args, specs, profile, batches) if not args.inputs else None
    if profile is not None and plans is not None:
        check_within_profile(profile, plans, args.batch)
    load_plans = _load_plans(plans, profile)
    extra = {"outputs_on": "device"} if args.io == "device" else {}
    before = host_memory()
    if args.pool > 1:
        import amdinfer

        engine: Any = amdinfer.EnginePool(lambda: load_engine(args, load_plans, **extra), args.pool)
    else:
        engine = load_engine(args, load_plans, **extra)
    results = []
    try:
        info = engine.info
        after_load = host_memory()
        bounds = (engine.engines[0] if args.pool > 1 else engine).shape_bounds
        ver = versions(info)
        if not args.json:
            # Printed (and flushed) before timing, so a long run says what it is timing while it runs; through
            # emit, so a reader that closes the pipe early (`| head -3`) ends the command quietly here.
            emit(args, {}, "\n".join(header_lines(args, info, ver, profile, before, after_load)))
        for shapes in plans or [{}]:
            feeds = feeds_for(args, engine, shapes)
            timed = {k: [int(d) for d in getattr(v, "shape", ())] for k, v in feeds.items()}
            if args.io == "device":
                feeds = to_device(engine.info, feeds)
            r = benchmark(
                engine,
                feeds,
                iterations=args.iterations,
                warmup=args.warmup,
                duration=args.duration,
                concurrency=args.concurrency,
                progress=progress_enabled(args),
            )
            r.extra["input_shapes"] = timed
            results.append(r)
        final = host_memory()
    finally:
        engine.close()
    if plot is not None:
        from .._support._files import write_atomic

        title = f"{args.model.rsplit('/', 1)[-1]}: {info.backend} {','.join(info.providers)} {info.precision}"
        # plot_sweep takes a path: the temporary file's name ends with the plot's suffix (the format).
        write_atomic(plot, lambda f: plot_sweep(results, f.name, title=title), argument="--plot")
    warnings = spread_warnings(results)
    device_bytes, device_note = device_peak(info)
    lines = _table(results)
    lines.append(
        f"memory    host RSS peak {mib(final.peak_bytes)} (since the process started, load included), "
        f"{mib(final.rss_bytes)} after timing; device peak: {device_note}"
    )
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
        "shape_profile": profile.to_dict() if profile is not None else None,
        "shape_bounds": _bounds_doc(bounds),
        "memory": _memory_doc(before, after_load, final, device_bytes, device_note),
        "results": [r.to_dict(latencies=True) for r in results],
        "warnings": warnings,
        "plot": str(plot) if plot is not None else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0


def _load_plans(plans: Any, profile: ShapeProfile | None) -> Any:
    """The shapes the engine is built for: the timed ones, and a profile's min and max after them (so shape_bounds,
    min/max per axis over the list, gives exactly the profile's bounds; int8 calibration takes the first)."""
    if profile is None or not plans:
        return plans
    return [*plans, {**plans[0], **profile.min}, {**plans[0], **profile.max}]


def _table(results: list[Any]) -> list[str]:
    """The latency table: one row per batch size, columns right-aligned."""
    rows = [_fmt(r) for r in results]
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]
    return ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [_HEADER, *rows]]


def _bounds_doc(bounds: Any) -> dict[str, Any]:
    """``shape_bounds`` of the JSON document: the engine's bounds per dynamic input."""
    return {
        k: {"min": list(b.min), "opt": list(b.opt) if b.opt is not None else None, "max": list(b.max)}
        for k, b in bounds.items()
    }


def _memory_doc(
    before: HostMemory, after_load: HostMemory, final: HostMemory, device_bytes: Any, device_note: str
) -> dict[str, Any]:
    """``memory`` of the JSON document."""
    return {
        "host_rss_source": final.source,
        "host_rss_before_load_bytes": before.rss_bytes,
        "host_rss_after_load_bytes": after_load.rss_bytes,
        "host_rss_after_bytes": final.rss_bytes,
        "host_rss_peak_bytes": final.peak_bytes,
        "device_peak_bytes": device_bytes,
        "device_peak_note": device_note,
    }


def header_lines(
    args: argparse.Namespace,
    info: Any,
    ver: dict[str, str],
    profile: ShapeProfile | None,
    before: HostMemory,
    after_load: HostMemory,
) -> list[str]:
    """What is about to be timed: engine, versions, load, shapes, memory after load, the timing plan."""
    lines = info_lines(info)
    lines.append("versions  " + ", ".join(f"{k} {v}" for k, v in ver.items()))
    lines.append(
        f"load      {info.load_seconds:.3f} s (compile {info.compile_seconds:.3f} s, "
        f"cache {'hit' if info.cache_hit else 'miss'}); "
        + ("host IO (numpy in/out)" if args.io == "host" else "device IO (inputs and outputs in GPU memory)")
    )
    if profile is not None:
        timed = "opt" if not args.batch else f"opt with axis 0 = --batch {','.join(map(str, args.batch))}"
        for name in profile.opt:
            lo, opt, hi = (_dims(d[name]) for d in (profile.min, profile.opt, profile.max))
            lines.append(f"shapes    {name}: min {lo}, opt {opt}, max {hi}; timed at {timed}")
    lines.append(
        f"memory    host RSS {mib(before.rss_bytes)} before load, {mib(after_load.rss_bytes)} after ({before.source})"
    )
    timing = f"{args.duration} s" if args.duration else f"{args.iterations} calls"
    lines.append(
        f"timing    {timing} per batch after {args.warmup} warm-up calls; concurrency {args.concurrency}"
        + (f", pool of {args.pool}" if args.pool > 1 else "")
        + "; latency in ms, items/s = items / wall time, first = first call (ms)"
    )
    return lines


# ---------------------------------------------------------------------------------------------- shape profile
_PROFILE_FLAGS = ("--min-shapes", "--opt-shapes", "--max-shapes")


@dataclass(frozen=True)
class ShapeProfile:
    """trtexec's per-input shape profile: the engine is built for ``min``..``max``, and ``opt`` is timed.

    Example:
        >>> ShapeProfile({"x": (1, 4)}, {"x": (2, 8)}, {"x": (4, 16)}).to_dict()
        {'x': {'min': [1, 4], 'opt': [2, 8], 'max': [4, 16]}}
    """

    min: dict[str, tuple[int, ...]]
    opt: dict[str, tuple[int, ...]]
    max: dict[str, tuple[int, ...]]

    def to_dict(self) -> dict[str, dict[str, list[int]]]:
        """Per input, the three shapes as lists (the JSON form)."""
        return {k: {"min": list(self.min[k]), "opt": list(self.opt[k]), "max": list(self.max[k])} for k in self.opt}


def _dims(shape: Any) -> str:
    return "x".join("N" if d is None else str(d) for d in shape)


def _model_dims(shape: Any) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _merged(flag: str, values: list[dict[str, tuple[int | None, ...]]] | None) -> dict[str, tuple[int | None, ...]]:
    out: dict[str, tuple[int | None, ...]] = {}
    for v in values or []:
        for name, shape in v.items():
            if name in out:
                raise OptionError(f"{flag}: input {name!r} is given twice ({_dims(out[name])} and {_dims(shape)})")
            out[name] = shape
    return out


def _check_profile_input(name: str, model: Sequence[Any], merged: dict[str, Any]) -> None:
    """One profiled input: concrete shapes of the model's rank and fixed dims, min <= opt <= max per axis."""
    for flag, shapes in merged.items():
        shape = shapes[name]
        if None in shape:
            raise OptionError(
                f"{flag} {name}:{_dims(shape)}: got N, expected numbers (a profile's shapes are concrete; "
                "--batch then sweeps axis 0 within min..max)"
            )
        if len(shape) != len(model):
            raise OptionError(
                f"{flag}: input {name!r} got {len(shape)} dims {_dims(shape)}, "
                f"expected rank {len(model)} {_model_dims(model)}"
            )
        for i, (d, m) in enumerate(zip(shape, model)):
            if isinstance(m, int) and d != m:
                raise OptionError(f"{flag}: input {name!r} axis {i} got {d}, expected {m} (fixed in the model)")
    lo, opt, hi = (merged[f][name] for f in _PROFILE_FLAGS)
    for i, (a, b, c) in enumerate(zip(lo, opt, hi)):
        if not (a is not None and b is not None and c is not None and a <= b <= c):
            raise OptionError(
                f"input {name!r} axis {i}: got min {a}, opt {b}, max {c} (--min-shapes {name}:{_dims(lo)}, "
                f"--opt-shapes {name}:{_dims(opt)}, --max-shapes {name}:{_dims(hi)}); expected min <= opt <= max "
                "on every axis"
            )


def shape_profile(args: argparse.Namespace, specs: Sequence[Any]) -> ShapeProfile | None:
    """``--min-shapes``/``--opt-shapes``/``--max-shapes`` checked against each other and the model.

    Returns ``None`` when none of the three is given.

    Raises:
        OptionError: one or two of the three without the others, an input named in one and not the others, a
            name not in the model, an ``N``, a rank or fixed dimension the model contradicts, min > opt or
            opt > max on an axis, an input also in ``--input-shapes``, or ``--inputs`` given too.

    Example:
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import transformer_encoder
        >>> specs = ModelSource.from_any(transformer_encoder()).inputs  # input (N, S, 64)
        >>> ns = argparse.Namespace(input_shapes=None, inputs=None, min_shapes=[{"input": (1, 4, 64)}],
        ...     opt_shapes=[{"input": (2, 8, 64)}], max_shapes=[{"input": (4, 6, 64)}])
        >>> shape_profile(ns, specs)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: input 'input' axis 1: got min 4, opt 8, max 6 (--min-shapes input:1x4x64, \
--opt-shapes input:2x8x64, --max-shapes input:4x6x64); expected min <= opt <= max on every axis
    """
    given = {flag: getattr(args, flag[2:].replace("-", "_"), None) for flag in _PROFILE_FLAGS}
    if not any(given.values()):
        return None
    missing = [f for f, v in given.items() if not v]
    if missing:
        present = ", ".join(f for f in _PROFILE_FLAGS if f not in missing)
        raise OptionError(
            f"{', '.join(missing)}: missing (got {present}); --min-shapes, --opt-shapes and --max-shapes go together"
        )
    if getattr(args, "inputs", None):
        raise OptionError(
            "--inputs with --min-shapes/--opt-shapes/--max-shapes: the timed inputs are random ones of the opt "
            "shapes; drop --inputs, or drop the three shape options and time the file's inputs"
        )
    merged = {flag: _merged(flag, v) for flag, v in given.items()}
    by_name = {s.name: s for s in specs}
    names = [s.name for s in specs]
    for flag, shapes in merged.items():
        unknown = [n for n in shapes if n not in by_name]
        if unknown:
            raise OptionError(f"{flag}: got input(s) {unknown}, expected names among {names}")
    named = [n for n in names if any(n in shapes for shapes in merged.values())]
    for flag, shapes in merged.items():
        lacking = [n for n in named if n not in shapes]
        if lacking:
            raise OptionError(
                f"{flag}: input(s) {lacking} missing; --min-shapes, --opt-shapes and --max-shapes name the same inputs"
            )
    fixed = {}
    for v in getattr(args, "input_shapes", None) or []:
        fixed.update(v)
    both = [n for n in named if n in fixed]
    if both:
        raise OptionError(
            f"input(s) {both}: given in --input-shapes and in --min-shapes/--opt-shapes/--max-shapes; the timed "
            "shape of a profiled input is its --opt-shapes, so drop it from --input-shapes"
        )
    for name in named:
        _check_profile_input(name, by_name[name].shape, merged)

    def concrete(flag: str) -> dict[str, tuple[int, ...]]:
        return {n: tuple(int(d) for d in merged[flag][n] if d is not None) for n in named}

    return ShapeProfile(concrete("--min-shapes"), concrete("--opt-shapes"), concrete("--max-shapes"))


def timed_shapes(
    args: argparse.Namespace, specs: Sequence[Any], profile: ShapeProfile | None, batches: Sequence[int | None]
) -> list[dict[str, tuple[int, ...]]]:
    """The input shapes timed at each batch size: ``--input-shapes``, the profile's opt, ``--batch`` on axis 0.

    Example:
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import transformer_encoder
        >>> specs = ModelSource.from_any(transformer_encoder()).inputs
        >>> p = ShapeProfile({"input": (1, 4, 64)}, {"input": (2, 8, 64)}, {"input": (4, 16, 64)})
        >>> ns = argparse.Namespace(input_shapes=None)
        >>> timed_shapes(ns, specs, p, [None]), timed_shapes(ns, specs, p, [1, 4])
        ([{'input': (2, 8, 64)}], [{'input': (1, 8, 64)}, {'input': (4, 8, 64)}])
    """
    overrides: dict[str, tuple[int | None, ...]] = {}
    for v in getattr(args, "input_shapes", None) or []:
        overrides.update(v)
    if profile is not None:
        sweep = any(b is not None for b in batches)
        overrides.update({k: ((None, *v[1:]) if sweep and v else v) for k, v in profile.opt.items()})
    return [feed_shapes(specs, overrides, b) for b in batches]


def check_within_profile(
    profile: ShapeProfile, plans: Sequence[Mapping[str, tuple[int, ...]]], batch: Sequence[int] | None
) -> None:
    """Every timed shape of a profiled input lies within its min..max (``--batch`` may take axis 0 outside).

    Raises:
        OptionError: a batch size outside min..max on axis 0.

    Example:
        >>> p = ShapeProfile({"x": (1, 4)}, {"x": (2, 4)}, {"x": (4, 4)})
        >>> check_within_profile(p, [{"x": (8, 4)}], [8])
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --batch 8: input 'x' axis 0 must lie within --min-shapes x:1x4 and \
--max-shapes x:4x4 (1..4); give sizes within 1..4, or widen the profile to hold 8
    """
    for plan in plans:
        for name in profile.opt:
            shape, lo, hi = plan[name], profile.min[name], profile.max[name]
            bad = [i for i, (d, a, c) in enumerate(zip(shape, lo, hi)) if not a <= d <= c]
            if bad:
                i = bad[0]
                raise OptionError(
                    f"--batch {shape[0] if batch else _dims(shape)}: input {name!r} axis {i} must lie within "
                    f"--min-shapes {name}:{_dims(lo)} and --max-shapes {name}:{_dims(hi)} ({lo[i]}..{hi[i]}); give "
                    f"sizes within {lo[i]}..{hi[i]}, or widen the profile to hold {shape[i]}"
                )
