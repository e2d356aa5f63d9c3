"""``amdinfer serve MODEL ...``: the subcommand, registered by ``amdinfer.cli`` (imports KServe only when run).

The flags are defined in :mod:`._cli_args` (:func:`add_arguments` is re-exported here); this module checks the
parsed flags together and runs the server: in this process, or as a supervisor of one per device and worker.
"""

from __future__ import annotations

import argparse
import logging
import logging.config
import os
from typing import Any

from ._cli_args import RECIPE_FLAGS, SHARED_MEMORY, add_arguments
from ._defaults import NOTE_ENV

__all__ = ["HELP", "NAME", "add_arguments", "configure_logging", "default_workers_per_device", "run"]

NAME = "serve"
HELP = "serve a model over the Open Inference Protocol v2 (REST + gRPC) on KServe, one engine per GPU"


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

    given = {k: getattr(args, k) for flags in RECIPE_FLAGS.values() for k in flags if getattr(args, k) is not None}
    allowed = RECIPE_FLAGS.get(args.recipe or "", ())
    wrong = sorted(k for k in given if k not in allowed)
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        target = f"--recipe {args.recipe}" if args.recipe else "a bare model (no --recipe)"
        owners = sorted(r for r, keys in RECIPE_FLAGS.items() if all(k in keys for k in wrong))
        hint = f"; add --recipe {' or --recipe '.join(owners)}" if owners and not args.recipe else ""
        raise OptionError(f"{flags}: not an option of {target}{hint}")
    return given


def pipeline_threads_per_process(processes: int, cores: int | None = None) -> int:
    """The default ``--pipeline-threads`` of each of ``processes`` server processes on one host:
    ``max(2, cores // processes)`` (:func:`amdinfer.serve._defaults.pipeline_threads_per_process`).

    Each recipe pipeline decodes and resizes on its own pool of threads. Every process taking all the cores
    would run ``processes x cores`` threads on ``cores`` cores; this shares them out instead (docs/serving.md).

    Example:
        >>> pipeline_threads_per_process(4, cores=16), pipeline_threads_per_process(8, cores=8)
        (4, 2)
    """
    from ..pipeline._executor import default_threads
    from ._defaults import pipeline_threads_per_process as rule

    return rule(processes, default_threads() if cores is None else cores)


def _child_argv(args: argparse.Namespace, device: int, processes: int = 1) -> list[str]:
    """The ``amdinfer serve`` arguments of a process that serves ``device`` (one of ``processes`` server
    processes on this host).

    The batching flags (``--max-batch-size``, ``--max-delay-ms``, ``--batch-buckets``) are carried when given and
    left out when not: each process derives them from the device its engine runs on (:mod:`._defaults`). A recipe's
    ``--pipeline-threads`` is resolved here (the cores shared out over the host's ``processes``).

    Example:
        >>> from amdinfer.cli import build_parser
        >>> argv = _child_argv(build_parser().parse_args(["serve", "m.onnx", "--max-delay-ms", "1"]), 0, 2)
        >>> [a for a in argv if a.startswith("--max")]
        ['--max-request-bytes', '--max-delay-ms']
    """
    served = [args.model] if args.model else ["--model-repository", args.model_repository]
    argv = ["serve", *served, "--host", args.host, "--http-port", str(args.http_port), "--workers-per-device", "1"]
    argv += ["--grpc-port", str(args.grpc_port), "--backend", args.backend, "--precision", args.precision]
    argv += ["--devices", str(device), "--reuse-port", "--max-request-bytes", str(args.max_request_bytes)]
    for flag, value in (("--max-batch-size", args.max_batch_size), ("--max-delay-ms", args.max_delay_ms)):
        if value is not None:
            argv += [flag, str(value)]
    for flag, value in (("--name", args.name), ("--providers", args.providers)):
        if value:
            argv += [flag, value]
    if args.batch_buckets is not None:
        argv += ["--batch-buckets", ",".join(map(str, args.batch_buckets)) or "none"]
    if args.no_warmup:
        argv.append("--no-warmup")
    if args.log_level:
        argv += ["--log-level", args.log_level]
    if args.shape_log:
        argv += ["--shape-log", args.shape_log]
    if args.on_new_shape:
        argv += ["--on-new-shape", args.on_new_shape]
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


def default_workers_per_device(devices: int, cores: int | None = None) -> int:
    """How many server processes per device ``amdinfer serve`` starts unless told:
    ``max(1, min(4, cores // (2 * devices)))`` (:func:`amdinfer.serve._defaults.default_workers_per_device`).

    Args:
        devices: how many devices are served.
        cores: the cores this process may use (default: its CPU affinity).

    Example:
        >>> default_workers_per_device(1, cores=2), default_workers_per_device(1, cores=16)
        (1, 4)
        >>> default_workers_per_device(2, cores=12), default_workers_per_device(8, cores=8)
        (3, 1)
    """
    from ..pipeline._executor import default_threads
    from ._defaults import default_workers_per_device as rule

    return rule(devices, default_threads() if cores is None else cores)


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
        from ..pipeline._executor import default_threads

        cores = default_threads()
        n = default_workers_per_device(devices, cores)
        why = f"the default max(1, min(4, {cores} usable cores // (2 x {devices} devices)))"
    return int(n), why


def _processes_note(args: argparse.Namespace, n: int) -> str:
    """The processes' part of each server process's start line: how many per device, and a recipe's decode
    threads, each with where it came from (:meth:`ServedDefaults.processes_line`).

    Example:
        >>> from amdinfer.cli import build_parser
        >>> _processes_note(build_parser().parse_args(["serve", "m.onnx", "--workers-per-device", "2"]), 2)
        '2 processes/device (--workers-per-device)'
    """
    from ..pipeline._executor import default_threads
    from ._defaults import served_defaults

    given = {"workers_per_device": n if args.workers_per_device is not None or args.single_process else None}
    given["pipeline_threads"] = getattr(args, "pipeline_threads", None)
    chosen = served_defaults("", cores=default_threads(), devices=len(args.devices), recipe=args.recipe, given=given)
    line = chosen.processes_line(n * len(args.devices))
    return line.replace("(--workers-per-device)", "(--single-process)", 1) if args.single_process else line


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
    os.environ[NOTE_ENV] = _processes_note(args, n)  # the children's start lines (they inherit the environment)
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


def _on_new_shape(args: argparse.Namespace) -> str:
    """``--on-new-shape``, an ``amdinfer.load`` option of the served model's engines (not of a repository's)."""
    if args.model_repository:
        from ..errors import OptionError

        raise OptionError(
            f"--on-new-shape {args.on_new_shape}: not taken with --model-repository (each model is loaded with its "
            "own options); serve the model by path, or load it with on_new_shape in Python"
        )
    return str(args.on_new_shape)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; the exit code (0: stopped cleanly)."""
    from . import _kserve_module

    configure_logging(args.log_level)
    recipe_options = _recipe_options(args)  # before anything starts: a misplaced flag fails at once
    _check_served(args, recipe_options)
    n, why = _processes_per_device(args)
    if n > 1 or (len(args.devices) > 1 and not args.single_process):
        return _run_processes(args, n, why)
    if args.shape_log:  # a process of several on the same ports (reuse_port) writes its own file
        from ._shapes import configure_shape_log

        configure_shape_log(args.shape_log, per_process=args.reuse_port)
    if not args.reuse_port:  # a child has its supervisor's note
        os.environ[NOTE_ENV] = _processes_note(args, n)
    api = _kserve_module("_serve_api")
    options: dict[str, Any] = dict(
        host=args.host,
        http_port=args.http_port,
        grpc_port=None if args.grpc_port < 0 else args.grpc_port,
        devices=args.devices,
        warmup=not args.no_warmup,
        reuse_port=args.reuse_port,
        max_request_bytes=args.max_request_bytes,
        shared_memory=SHARED_MEMORY[args.shared_memory],
        backend=args.backend,
        precision=args.precision,
    )
    # not given (None): serve() derives them from the model and the device; a repository from its own defaults
    for key in ("max_batch_size", "max_delay_ms", "batch_buckets"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if args.providers:
        options["providers"] = args.providers.split(",")
    if args.on_new_shape:
        options["on_new_shape"] = _on_new_shape(args)
    if args.model_repository:
        if options.get("batch_buckets") == ():
            del options["batch_buckets"]  # the repository's default is no buckets
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
