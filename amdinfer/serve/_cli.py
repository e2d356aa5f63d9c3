"""``amdinfer serve MODEL ...``: the subcommand, registered by ``amdinfer.cli`` (imports KServe only when run)."""

from __future__ import annotations

import argparse
import logging
import logging.config
import math
from collections.abc import Callable
from typing import Any

from ._bounds import BOUNDS, FLAG, check, check_buckets, check_flag

__all__ = ["HELP", "NAME", "add_arguments", "configure_logging", "default_workers_per_device", "run"]

_LEVELS = ("debug", "info", "warning", "error")
_SHARED_MEMORY = {"auto": None, "on": True, "off": False}
#: each recipe's own flags (argparse dests); a flag of another recipe, or of none, is an error
_RECIPE_FLAGS = {
    "yolo": ("conf", "iou", "imgsz", "max_det", "decoder", "pipeline_threads", "max_image_pixels"),
    "classify": ("topk", "decoder", "pipeline_threads", "max_image_pixels"),
    "ocr": ("rec", "cls", "text_score", "pipeline_threads", "max_image_pixels"),
}

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


def _port(text: str) -> int:
    from ..errors import OptionError

    try:
        return int(check("http_port", int(text)))
    except (ValueError, OptionError):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a TCP port 0..65535") from None


def _grpc_port(text: str) -> int:
    return -1 if text.strip() == "-1" else _port(text)


def _bounded(option: str) -> Callable[[str], Any]:
    """The argparse type of a bounded flag: its text parsed and checked by :func:`._bounds.check_flag` (one table
    of bounds for the flags, ``models.toml`` and load requests)."""

    def parse(text: str) -> Any:
        from ..errors import OptionError

        try:
            return check_flag(option, text)
        except OptionError as exc:  # argparse names the flag itself: "argument --x: got ..."
            raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None

    parse.__name__ = option
    return parse


def _auto_or(option: str) -> Callable[[str], Any]:
    """:func:`_bounded`, or ``None`` for ``auto``."""
    bounded = _bounded(option)

    def parse(text: str) -> Any:
        if text.strip().lower() == "auto":
            return None
        try:
            return bounded(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc}, or auto") from None

    parse.__name__ = option
    return parse


def _byte_count(text: str) -> int:
    from ..errors import OptionError

    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        number = float(t[: len(t) - len(unit)]) * units[unit]
        value: Any = int(number) if math.isfinite(number) and number == int(number) else text
    except ValueError:
        value = text
    try:
        return int(check("max_request_bytes", value, FLAG))
    except OptionError:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected {BOUNDS['max_request_bytes'].accepted()}, e.g. 256M or 1G"
        ) from None


def _buckets(text: str) -> tuple[int, ...]:
    from ..errors import OptionError

    try:
        sizes: list[Any] = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected comma-separated batch sizes like 8,16,32") from None
    try:
        return check_buckets(sizes, FLAG)
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def _recipe_options(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe flags given on the command line, checked against ``--recipe``.

    Raises:
        OptionError: a recipe flag without ``--recipe`` or of the other recipe (never ignored).

    Example:
        >>> from amdinfer.cli import build_parser
        >>> _recipe_options(build_parser().parse_args(["serve", "m.onnx", "--recipe", "yolo", "--conf", "0.5"]))
        {'conf': 0.5}
        >>> _recipe_options(build_parser().parse_args(["serve", "m.onnx", "--topk", "3"]))
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --topk: not an option of a bare model (no --recipe); add --recipe classify
    """
    from ..errors import OptionError

    given = {k: getattr(args, k) for flags in _RECIPE_FLAGS.values() for k in flags if getattr(args, k) is not None}
    allowed = _RECIPE_FLAGS.get(args.recipe or "", ())
    wrong = sorted(k for k in given if k not in allowed)
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        target = f"--recipe {args.recipe}" if args.recipe else "a bare model (no --recipe)"
        owners = sorted(r for r, keys in _RECIPE_FLAGS.items() if all(k in keys for k in wrong))
        hint = f"; add --recipe {' or --recipe '.join(owners)}" if owners and not args.recipe else ""
        raise OptionError(f"{flags}: not an option of {target}{hint}")
    return given


def pipeline_threads_per_process(processes: int, cores: int | None = None) -> int:
    """The default ``--pipeline-threads`` of each of ``processes`` server processes on one host:
    ``max(2, cores // processes)``.

    Each recipe pipeline decodes and resizes on its own pool of threads. Every process taking all the cores
    would run ``processes x cores`` threads on ``cores`` cores; this shares them out instead (docs/serving.md).

    Example:
        >>> pipeline_threads_per_process(4, cores=16), pipeline_threads_per_process(8, cores=8)
        (4, 2)
    """
    from .._executor import default_threads

    cores = default_threads() if cores is None else cores
    return max(2, cores // max(1, processes))


def _child_argv(args: argparse.Namespace, device: int, processes: int = 1) -> list[str]:
    """The ``amdinfer serve`` arguments of a process that serves ``device`` (one of ``processes`` server
    processes on this host)."""
    served = [args.model] if args.model else ["--model-repository", args.model_repository]
    argv = ["serve", *served, "--host", args.host, "--http-port", str(args.http_port), "--workers-per-device", "1"]
    argv += ["--grpc-port", str(args.grpc_port), "--max-batch-size", str(args.max_batch_size)]
    argv += ["--max-delay-ms", str(args.max_delay_ms), "--backend", args.backend, "--precision", args.precision]
    argv += ["--devices", str(device), "--reuse-port", "--max-request-bytes", str(args.max_request_bytes)]
    for flag, value in (("--name", args.name), ("--providers", args.providers)):
        if value:
            argv += [flag, value]
    if args.batch_buckets:
        argv += ["--batch-buckets", ",".join(map(str, args.batch_buckets))]
    if args.no_warmup:
        argv.append("--no-warmup")
    if args.log_level:
        argv += ["--log-level", args.log_level]
    if args.verify_sample:
        argv += ["--verify-sample", repr(args.verify_sample), "--verify-reference", args.verify_reference]
    if args.recipe:
        argv += ["--recipe", args.recipe]
        options = _recipe_options(args)
        if options.get("pipeline_threads") is None:
            options["pipeline_threads"] = pipeline_threads_per_process(processes)
        for key, value in options.items():
            argv += ["--" + key.replace("_", "-"), str(value)]
    return [*argv, "--shared-memory", args.shared_memory]


#: the most server processes per device the default gives
MAX_DEFAULT_WORKERS_PER_DEVICE = 4


def default_workers_per_device(devices: int, cores: int | None = None) -> int:
    """How many server processes per device ``amdinfer serve`` starts unless told:
    ``max(1, min(4, cores // (2 * devices)))``.

    Each process parses, validates and batches its own requests while holding its own GIL; two cores per
    process leave one for that and one for its engine thread, gRPC's and ONNX Runtime's threads. Past four
    per GPU the engine, not the host, is the limit (docs/serving.md).

    Args:
        devices: how many devices are served.
        cores: the cores this process may use (default: its CPU affinity).

    Example:
        >>> default_workers_per_device(1, cores=2), default_workers_per_device(1, cores=16)
        (1, 4)
        >>> default_workers_per_device(2, cores=12), default_workers_per_device(8, cores=8)
        (3, 1)
    """
    from .._executor import default_threads

    cores = default_threads() if cores is None else cores
    return max(1, min(MAX_DEFAULT_WORKERS_PER_DEVICE, cores // (2 * max(1, devices))))


def _processes_per_device(args: argparse.Namespace) -> tuple[int, str]:
    """``--workers-per-device``, or its default; and where the number comes from.

    Raises:
        OptionError: ``--workers-per-device`` above 1 with ``--single-process``.
    """
    from ..errors import OptionError

    n = args.workers_per_device
    if args.single_process:
        if n not in (None, 1):
            raise OptionError(
                f"--workers-per-device {n} with --single-process: one process cannot run {n} server processes "
                "per device; drop one of the two flags"
            )
        return 1, "--single-process"
    if args.reuse_port:  # a child of serve_processes: it serves, it does not start more
        return 1, "a child process"
    devices = len(args.devices)
    why = "--workers-per-device"
    if n is None:
        from .._executor import default_threads

        cores = default_threads()
        n = default_workers_per_device(devices, cores)
        why = f"the default max(1, min(4, {cores} usable cores // (2 x {devices} devices)))"
    return int(n), why


def configure_logging(level: str | None) -> None:
    """Logging for the ``amdinfer serve`` process: one stream on stderr, unless something configured it.

    With a configuration already in place (handlers on the root or ``amdinfer`` logger), only ``level`` is
    applied to the ``amdinfer`` logger, if given. Otherwise: ``amdinfer`` logs at ``level`` (default info:
    the start line and one line per refused request); KServe and uvicorn log warnings and errors only
    (``debug`` shows their startup lines and one access line per request too). KServe installs its own
    configuration only on a ``kserve`` logger without handlers, so it gets this one.

    Example:
        >>> from amdinfer.cli import build_parser
        >>> build_parser().parse_args(["serve", "m.onnx", "--log-level", "debug"]).log_level
        'debug'
    """
    chosen = getattr(logging, (level or "info").upper())
    if logging.getLogger().handlers or logging.getLogger("amdinfer").handlers:
        if level:
            logging.getLogger("amdinfer").setLevel(chosen)
        return
    others = logging.DEBUG if chosen <= logging.DEBUG else max(chosen, logging.WARNING)
    stream = {"handlers": ["stderr"], "level": others, "propagate": False}
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"line": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
            "handlers": {
                "stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "line"}
            },
            "root": {"handlers": ["stderr"], "level": max(chosen, logging.WARNING)},
            "loggers": {
                "amdinfer": {"level": chosen},
                "kserve": stream,
                "kserve.trace": {"level": others},
                "uvicorn": stream,
                "uvicorn.error": {"level": others},
                "uvicorn.access": {"level": others},
            },
        }
    )


def _check_served(args: argparse.Namespace, recipe_options: dict[str, Any]) -> None:
    """A model path or ``--model-repository DIR``, and no one-model flag with a repository.

    Raises:
        OptionError: both or neither given; ``--recipe``, its options, ``--name`` or ``--verify-sample`` with
            ``--model-repository``.

    Example:
        >>> from amdinfer.cli import build_parser
        >>> _check_served(build_parser().parse_args(["serve", "--model-repository", "models", "--name", "x"]), {})
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --name with --model-repository: --recipe, its options, --name and \
--verify-sample apply to one model; put recipes and options in DIR/models.toml
    """
    from ..errors import OptionError

    if (args.model is None) == (args.model_repository is None):
        raise OptionError(
            f"model: got {args.model!r} and --model-repository {args.model_repository!r}, expected one of them "
            "(a model path, or --model-repository DIR)"
        )
    if args.model_repository is None:
        return
    flags = {"--recipe": args.recipe, "--name": args.name, "--verify-sample": args.verify_sample}
    flags.update({"--" + k.replace("_", "-"): v for k, v in recipe_options.items()})
    given = [flag for flag, value in flags.items() if value]
    if given:
        raise OptionError(
            f"{', '.join(given)} with --model-repository: --recipe, its options, --name and --verify-sample apply "
            "to one model; put recipes and options in DIR/models.toml"
        )


def _run_processes(args: argparse.Namespace, n: int, why: str) -> int:
    """Supervise ``n`` server processes per device (:func:`~amdinfer.serve.serve_processes`)."""
    from ..errors import OptionError
    from . import _kserve_module
    from ._net import check_host

    if args.http_port == 0 or args.grpc_port == 0:
        raise OptionError(
            f"--http-port {args.http_port} --grpc-port {args.grpc_port}: port 0 (any free port) with "
            f"{len(args.devices) * n} server processes would give each its own port; give the ports"
        )
    check_host(args.host)  # before any child starts: one line, not one per child
    logging.getLogger("amdinfer.serve").info(
        "starting %d server processes: %d per device (%s) on device%s %s",
        n * len(args.devices),
        n,
        why,
        "s" if len(args.devices) > 1 else "",
        ",".join(map(str, args.devices)),
    )
    children = [_child_argv(args, d, n * len(args.devices)) for d in args.devices for _ in range(n)]
    return int(_kserve_module("_supervisor").serve_processes(children, workers_per_device=n))


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; the exit code (0: stopped cleanly)."""
    from . import _kserve_module

    configure_logging(args.log_level)
    recipe_options = _recipe_options(args)  # before anything starts: a misplaced flag fails at once
    _check_served(args, recipe_options)
    n, why = _processes_per_device(args)
    if n > 1 or (len(args.devices) > 1 and not args.single_process):
        return _run_processes(args, n, why)
    api = _kserve_module("_serve_api")
    options: dict[str, Any] = dict(
        host=args.host,
        http_port=args.http_port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port,
        devices=args.devices,
        warmup=not args.no_warmup,
        reuse_port=args.reuse_port,
        max_request_bytes=args.max_request_bytes,
        shared_memory=_SHARED_MEMORY[args.shared_memory],
        backend=args.backend,
        precision=args.precision,
        max_batch_size=args.max_batch_size,
        max_delay_ms=args.max_delay_ms,
    )
    if args.providers:
        options["providers"] = args.providers.split(",")
    if args.batch_buckets:
        options["batch_buckets"] = args.batch_buckets
    if args.model_repository:
        api.serve_repository(args.model_repository, **options)
        return 0
    api.serve(
        args.model,
        name=args.name,
        verify_sample=args.verify_sample,
        verify_reference=args.verify_reference,
        recipe=args.recipe,
        recipe_options=recipe_options,
        **options,
    )
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``serve`` flags (registered by ``amdinfer.cli``; see docs/serving.md).

    Example:
        >>> from amdinfer.cli import build_parser
        >>> args = build_parser().parse_args(["serve", "m.onnx", "--devices", "0,1", "--max-batch-size", "64"])
        >>> args.devices, args.max_batch_size, args.host, args.max_request_bytes
        ([0, 1], 64, '127.0.0.1', 268435456)
        >>> build_parser().parse_args(["serve", "m.onnx", "--max-request-bytes", "64M"]).max_request_bytes
        67108864
        >>> args = build_parser().parse_args(["serve", "m.onnx", "--verify-sample", "0.01"])
        >>> args.verify_sample, args.verify_reference
        (0.01, 'ort')
        >>> [build_parser().parse_args(["serve", "m.onnx", "--workers-per-device", n]).workers_per_device
        ...  for n in ("2", "auto")]
        [2, None]
    """
    _add_served_arguments(p)
    _add_engine_arguments(p)
    _add_canary_arguments(p)
    _add_recipe_arguments(p)


def _add_served_arguments(p: argparse.ArgumentParser) -> None:
    """What is served and where: the model or repository, the addresses, request limits, logging."""
    p.add_argument("model", nargs="?", default=None, help="path to an .onnx file (or --model-repository DIR)")
    p.add_argument(
        "--model-repository",
        default=None,
        metavar="DIR",
        help="serve every model of a folder (*.onnx, NAME/model.onnx, options in DIR/models.toml); "
        "Triton's repository API loads and unloads them (see docs/serving.md)",
    )
    p.add_argument("--name", default=None, help="model name in the URLs (default: the file's stem)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0: all)")
    p.add_argument("--http-port", type=_port, default=8080, help="REST port (default 8080)")
    p.add_argument("--grpc-port", type=_grpc_port, default=8081, help="gRPC port (default 8081; -1: no gRPC)")
    p.add_argument(
        "--max-request-bytes",
        type=_byte_count,
        default=256 << 20,
        help="largest request body/message taken, e.g. 64M (default 256M: 64 images of 1024x1024x3); "
        "larger REST bodies get 413 before they are read",
    )
    p.add_argument(
        "--max-image-pixels",
        type=_bounded("max_image_pixels"),
        metavar="N",
        help="a recipe's images: the most pixels (width x height) a header may declare; larger ones get 400 "
        "before decoding (default 89478485, Pillow's limit)",
    )
    p.add_argument(
        "--shared-memory",
        choices=list(_SHARED_MEMORY),
        default="auto",
        help="take tensors in system shared memory registered by clients on this host (Triton's extension); "
        "auto (default): on when --host is a loopback address",
    )
    p.add_argument(
        "--log-level",
        choices=_LEVELS,
        default=None,
        help="amdinfer's log level (default info: one start line, one line per refused request); debug adds "
        "KServe's and uvicorn's lines and per-request access lines",
    )
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for the per-GPU processes


def _add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """How each model runs: backend, devices, batching, server processes per device."""
    p.add_argument(
        "--max-batch-size",
        type=_bounded("max_batch_size"),
        default=32,
        help="items per engine call at most, 1..4096 (1: no batching)",
    )
    p.add_argument(
        "--max-delay-ms",
        type=_bounded("max_delay_ms"),
        default=2.0,
        help="how long a request waits for others (ms, 0..60000)",
    )
    p.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    p.add_argument("--providers", help="comma-separated ONNX Runtime providers, e.g. cuda or cpu")
    p.add_argument("--precision", default="fp32", help="fp32, fp16, bf16")
    p.add_argument("--devices", type=_devices, default=[0], help="GPU indices, one worker each (default 0)")
    p.add_argument(
        "--batch-buckets",
        type=_buckets,
        default=None,
        help="batch sizes the engine runs (padded up to the next), e.g. 8,16,32,64: fewer shapes to compile "
        "(1 to 64 sizes, each 1..4096)",
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="do not run each engine (or recipe pipeline) at its batch sizes first"
    )
    p.add_argument(
        "--single-process",
        action="store_true",
        help="with several --devices: one process with a worker thread per GPU (default: a process per GPU)",
    )
    p.add_argument(
        "--workers-per-device",
        type=_auto_or("workers_per_device"),
        default=None,
        metavar="N",
        help="server processes per device, all on the same ports (SO_REUSEPORT), each with its own engine "
        "(default auto: max(1, min(4, usable cores // (2 x devices))); at most min(64, 4 x usable cores))",
    )


def _add_canary_arguments(p: argparse.ArgumentParser) -> None:
    """The numerical canary (``--verify-sample``)."""
    p.add_argument(
        "--verify-sample",
        type=_bounded("verify_sample"),
        default=0.0,
        metavar="RATE",
        help="numerical canary: re-run this fraction of requests (0..1, e.g. 0.01) on a reference engine in the "
        "background and export the divergence as metrics, logging requests over tolerance (default 0: off)",
    )
    p.add_argument(
        "--verify-reference",
        choices=["ort", "numpy"],
        default="ort",
        help="the canary's reference: ort (CPU fp32 ONNX Runtime, default) or numpy (the NumPy reference, "
        "for small models)",
    )


def _add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """``--recipe`` and each recipe's own flags (see ``_RECIPE_FLAGS``)."""
    p.add_argument(
        "--recipe",
        choices=list(_RECIPE_FLAGS),
        default=None,
        help="serve amdinfer.yolo / amdinfer.classify / amdinfer.ocr (the model: the text detector) of the model: "
        "clients send JPEG/PNG files as a BYTES input 'images' (see docs/serving.md); default: the bare model",
    )
    p.add_argument("--rec", default=None, help="ocr: the text recogniser model (.onnx)")
    p.add_argument("--cls", default=None, help="ocr: the text direction classifier model (.onnx; default: none)")
    p.add_argument("--text-score", type=float, default=None, help="ocr: lowest line score kept (default 0.5)")
    p.add_argument("--conf", type=float, default=None, help="yolo: confidence threshold (default 0.25)")
    p.add_argument("--iou", type=float, default=None, help="yolo: NMS IoU threshold (default 0.7)")
    p.add_argument("--imgsz", type=int, default=None, help="yolo: letterbox size (default 640)")
    p.add_argument("--max-det", type=int, default=None, help="yolo: boxes per image at most (default 300)")
    p.add_argument("--topk", type=int, default=None, help="classify: classes per image (default 5)")
    p.add_argument(
        "--decoder",
        choices=["auto", "opencv", "pillow", "nvjpeg"],
        default=None,
        help="the recipe's image decoder (default auto: OpenCV when installed, else Pillow)",
    )
    p.add_argument(
        "--pipeline-threads",
        type=_auto_or("pipeline_threads"),
        default=None,
        metavar="N",
        help="threads that decode and resize a recipe's images in each server process (default: all usable cores "
        "in one process; max(2, cores // processes) with several; 1..256)",
    )
