"""The ``amdinfer`` command line: doctor, inspect, run, bench, verify, cache.

Example:
    >>> from amdinfer.cli import main
    >>> main(["--version"])  # doctest: +ELLIPSIS
    amdinfer ...
    0
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

__all__ = ["main"]


def _load_engine(args: argparse.Namespace) -> Any:
    import amdinfer

    options: dict[str, Any] = {}
    if getattr(args, "providers", None):
        options["providers"] = args.providers.split(",")
    if getattr(args, "target", None):
        options["target"] = args.target
    return amdinfer.load(args.model, backend=args.backend, device=args.device, precision=args.precision, **options)


def _feeds(engine: Any, args: argparse.Namespace) -> dict[str, np.ndarray]:
    from amdinfer._files import check_allocation, read_npz
    from amdinfer.errors import InputError

    if args.inputs:
        return read_npz(args.inputs, "--inputs")
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for spec in engine.inputs:
        shape = []
        for i, d in enumerate(spec.shape):
            if isinstance(d, int):
                shape.append(d)
            elif i == 0:
                shape.append(args.batch)
            else:
                raise InputError(
                    f"input {spec.name!r}: axis {i} is dynamic ({d!r}); give inputs with --inputs file.npz"
                )
        check_allocation(shape, spec.dtype, f"input {spec.name!r} (random, --batch {args.batch})")
        if spec.dtype.kind == "f":
            feeds[spec.name] = rng.random(shape, dtype=np.float32).astype(spec.dtype)
        elif spec.dtype.kind in "iu":
            feeds[spec.name] = rng.integers(0, 10, size=shape).astype(spec.dtype)
        elif spec.dtype.kind == "b":
            feeds[spec.name] = rng.random(shape) > 0.5
        else:
            raise InputError(f"input {spec.name!r}: cannot make random {spec.dtype}; give inputs with --inputs")
    return feeds


def _cmd_doctor(args: argparse.Namespace) -> int:
    from amdinfer.doctor import diagnose

    report = diagnose()
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from amdinfer.model import ModelSource

    src = ModelSource.from_any(args.model)
    print(f"model    {src.name}  (IR {src.ir_version}, opsets {src.opsets}, sha256 {src.sha256[:16]})")
    for kind, specs in (("input ", src.inputs), ("output", src.outputs)):
        for s in specs:
            print(f"{kind}   {s.name}: {s.dtype} {tuple(s.shape)}")
    print(f"ops      {', '.join(sorted(src.operators()))}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.save:
        from amdinfer._files import check_path
        from amdinfer.errors import OptionError

        folder = check_path(args.save, "--save").expanduser().parent
        if not folder.is_dir():
            raise OptionError(f"--save: got {args.save!r}, but folder '{folder}' does not exist; expected a file path")
    engine = _load_engine(args)
    with engine:
        feeds = _feeds(engine, args)
        out = engine.run(feeds)
        info = engine.info
        print(f"backend {info.backend} on {info.device}; providers {info.providers}; precision {info.precision}")
        for k, why in info.skipped.items():
            print(f"  passed over {k}: {why}")
        for name, arr in out.items():
            a = np.asarray(arr)
            stats = ""
            if a.size and a.dtype.kind in "fiu":
                f = a.astype(np.float64)
                nan = int(np.isnan(f).sum())
                stats = f" min {np.nanmin(f):.6g} max {np.nanmax(f):.6g} mean {np.nanmean(f):.6g} nan {nan}"
            print(f"{name}: {a.dtype} {a.shape}{stats}")
        if args.save:
            np.savez(args.save, **{k: np.asarray(v) for k, v in out.items()})
            print(f"saved outputs to {args.save}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from amdinfer.bench import benchmark

    engine = _load_engine(args)
    with engine:
        result = benchmark(engine, _feeds(engine, args), iterations=args.iterations, warmup=args.warmup)
        d = result.to_dict()
        d.update(backend=engine.info.backend, device=engine.info.device, providers=engine.info.providers)
    print(json.dumps(d, indent=2) if args.json else result)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    import amdinfer
    from amdinfer import verify

    engine = _load_engine(args)
    with engine, amdinfer.load(args.model, backend="reference", precision=args.reference_precision) as ref:
        feeds = _feeds(engine, args)
        report = verify.compare_engines(engine, ref, feeds, per_layer=args.per_layer)
        print(report)
        return 0 if report.passed else 1


def _cmd_profile(args: argparse.Namespace) -> int:
    from amdinfer.profile import profile

    engine = _load_engine(args)
    with engine:
        report = profile(engine, _feeds(engine, args), runs=args.runs)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report)
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from amdinfer import cache

    if args.action == "list":
        entries = cache.list_entries(args.cache_dir)
        for e in entries:
            print(e)
        if not entries:
            print("(cache is empty)")
    else:
        print(f"removed {cache.clear(args.cache_dir)} entries")
    return 0


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    p.add_argument("--providers", help="comma-separated ONNX Runtime providers, e.g. migraphx,cpu")
    p.add_argument("--target", help="MIGraphX target: gpu or ref")
    p.add_argument("--device", type=_int_at_least(0), default=0, help="GPU index")
    p.add_argument("--precision", default="fp32", help="fp32, fp16, bf16")
    p.add_argument("--inputs", help=".npz file with one array per input name (default: random)")
    p.add_argument(
        "--batch", type=_int_at_least(1), default=1, help="batch size for random inputs with a dynamic axis 0"
    )
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="seed for random inputs")


def _int_at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an int >= {low}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"got {value}, expected an int >= {low}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, ``amdinfer <command>: UsageError: <message>``, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: UsageError: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation tools)."""
    parser = _Parser(prog="amdinfer", description="Run ONNX models on AMD GPUs and prove the answers.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("doctor", help="what is installed, what loads, why a GPU is not used")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_doctor)

    p = sub.add_parser("inspect", help="inputs, outputs, opsets and operators of a model")
    p.add_argument("model")
    p.set_defaults(fn=_cmd_inspect)

    p = sub.add_parser("run", help="run a model once and print output names, shapes and stats")
    _add_engine_args(p)
    p.add_argument("--save", help="write the outputs to this .npz file")
    p.set_defaults(fn=_cmd_run)

    p = sub.add_parser("bench", help="latency percentiles and throughput")
    _add_engine_args(p)
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_bench)

    p = sub.add_parser("profile", help="per-node time and provider (which nodes ran on the CPU)")
    _add_engine_args(p)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_profile)

    p = sub.add_parser("verify", help="compare a backend's outputs with the NumPy reference")
    _add_engine_args(p)
    p.add_argument("--reference-precision", default="fp64", help="fp64 (default) or fp32")
    p.add_argument("--per-layer", action="store_true", help="name the first layer that diverges")
    p.set_defaults(fn=_cmd_verify)

    p = sub.add_parser("cache", help="list or clear the compiled-model cache")
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("--cache-dir", default=None)
    p.set_defaults(fn=_cmd_cache)

    from amdinfer.serve._cli import add_parser as _add_serve  # amdinfer serve (KServe imported when run)

    _add_serve(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``amdinfer`` console script; returns the exit code."""
    from amdinfer.errors import AmdinferError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        import amdinfer

        print(f"amdinfer {amdinfer.__version__}")
        return 0
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    try:
        return int(args.fn(args))
    except (AmdinferError, OSError, MemoryError) as exc:
        # User errors (and the file system's) are one line, never a traceback; anything else is a bug.
        text = " ".join(str(exc).split()) or "(no message)"
        print(f"amdinfer {args.command}: {type(exc).__name__}: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"amdinfer {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
