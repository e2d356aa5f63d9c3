"""``amdinfer serve MODEL ...``: the subcommand, registered by ``amdinfer.cli`` (imports KServe only when run)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "serve"
HELP = "serve a model over the Open Inference Protocol v2 (REST + gRPC) on KServe, one engine per GPU"


def _devices(text: str) -> list[int]:
    try:
        devices = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected comma-separated GPU indices like 0,1") from None
    if not devices:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected at least one GPU index")
    return devices


def _child_argv(args: argparse.Namespace, device: int) -> list[str]:
    """The ``amdinfer serve`` arguments of the process that serves ``device``."""
    argv = ["serve", args.model, "--host", args.host, "--http-port", str(args.http_port)]
    argv += ["--grpc-port", str(args.grpc_port), "--max-batch-size", str(args.max_batch_size)]
    argv += ["--max-delay-ms", str(args.max_delay_ms), "--backend", args.backend, "--precision", args.precision]
    argv += ["--devices", str(device), "--reuse-port"]
    for flag, value in (("--name", args.name), ("--providers", args.providers)):
        if value:
            argv += [flag, value]
    if args.batch_buckets:
        argv += ["--batch-buckets", ",".join(map(str, args.batch_buckets))]
    if args.no_warmup:
        argv.append("--no-warmup")
    return argv


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; the exit code (0: stopped cleanly)."""
    from . import _kserve_module

    _server = _kserve_module("_server")
    if len(args.devices) > 1 and not args.single_process:
        return int(_server.serve_processes([_child_argv(args, d) for d in args.devices]))
    options: dict[str, Any] = {}
    if args.providers:
        options["providers"] = args.providers.split(",")
    if args.batch_buckets:
        options["batch_buckets"] = args.batch_buckets
    _server.serve(
        args.model,
        name=args.name,
        host=args.host,
        http_port=args.http_port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port,
        max_batch_size=args.max_batch_size,
        max_delay_ms=args.max_delay_ms,
        devices=args.devices,
        backend=args.backend,
        precision=args.precision,
        warmup=not args.no_warmup,
        reuse_port=args.reuse_port,
        **options,
    )
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``serve`` flags (registered by ``amdinfer.cli``; see docs/serving.md).

    Example:
        >>> from amdinfer.cli import build_parser
        >>> args = build_parser().parse_args(["serve", "m.onnx", "--devices", "0,1", "--max-batch-size", "64"])
        >>> args.devices, args.max_batch_size, args.host
        ([0, 1], 64, '127.0.0.1')
    """
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--name", default=None, help="model name in the URLs (default: the file's stem)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0: all)")
    p.add_argument("--http-port", type=int, default=8080, help="REST port (default 8080)")
    p.add_argument("--grpc-port", type=int, default=8081, help="gRPC port (default 8081; -1: no gRPC)")
    p.add_argument("--max-batch-size", type=int, default=32, help="items per engine call at most (1: no batching)")
    p.add_argument("--max-delay-ms", type=float, default=2.0, help="how long a request waits for others (ms)")
    p.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    p.add_argument("--providers", help="comma-separated ONNX Runtime providers, e.g. cuda or cpu")
    p.add_argument("--precision", default="fp32", help="fp32, fp16, bf16")
    p.add_argument("--devices", type=_devices, default=[0], help="GPU indices, one worker each (default 0)")
    p.add_argument(
        "--batch-buckets",
        type=_devices,
        default=None,
        help="batch sizes the engine runs (padded up to the next), e.g. 8,16,32,64: fewer shapes to compile",
    )
    p.add_argument("--no-warmup", action="store_true", help="do not run each engine at its batch sizes first")
    p.add_argument(
        "--single-process",
        action="store_true",
        help="with several --devices: one process with a worker thread per GPU (default: a process per GPU)",
    )
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for the per-GPU processes
