"""The parser, the subcommand registry and the one error convention."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: Subcommand modules, in ``--help`` order. Each defines NAME, HELP, add_arguments(parser) and run(args) -> int.
#: Register a new subcommand by appending its module path here.
SUBCOMMANDS: list[str] = [
    "amdinfer.cli._doctor",
    "amdinfer.cli._inspect",
    "amdinfer.cli._run",
    "amdinfer.cli._predict",
    "amdinfer.cli._val",
    "amdinfer.cli._bench",
    "amdinfer.cli._profile",
    "amdinfer.cli._verify",
    "amdinfer.cli._compile",
    "amdinfer.cli._quantize",
    "amdinfer.cli._cache",
    "amdinfer.serve._cli",  # amdinfer serve (KServe is imported only when it runs)
]


#: The machine's errors rather than amdinfer's (the file system's, memory, an optional package missing): one
#: line and exit 1, as the error table answers amdinfer's own (:func:`amdinfer.errors.error_status`).
_ENVIRONMENT_ERRORS = (OSError, MemoryError, ImportError)


class _UsageError(Exception):
    """Raised by the parser instead of exiting, so ``main`` returns 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(f"{self.prog}: UsageError: {message} (see {self.prog} --help)")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        # argparse reports options no subcommand knows from the top-level parser ("amdinfer: ..."); name the
        # subcommand they were given to, whose --help lists the options it takes.
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(ns, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            message = f"unrecognized arguments: {' '.join(extra)}"
            raise _UsageError(f"{prog}: UsageError: {message} (see {prog} --help)")
        return ns


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation tools).

    Example:
        >>> build_parser().parse_args(["bench", "m.onnx", "--batch", "1,8"]).batch
        [1, 8]
    """
    parser = _Parser(
        prog="amdinfer",
        description="Run ONNX models on AMD GPUs and prove the answers.",
        epilog=(
            "Exit codes: 0 success, 1 failure (a check failed, or an error), 2 usage, 3 not judged (quantize with "
            "too little held-out data for a verdict), 130 interrupted. See docs/cli.md."
        ),
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for path in SUBCOMMANDS:
        module = importlib.import_module(path)
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(fn=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``amdinfer`` console script; returns the exit code.

    Exit codes (docs/cli.md): 0 ok, 1 failure (an error, or a check that failed), 2 usage, 3 not judged
    (``amdinfer quantize`` with too little held-out data for a verdict; the model is written), 130 interrupted.

    A reader that closes stdout early (``amdinfer cache list --json | head -1``) ends the command with 0: the
    stream is pointed at the null device, as Python's documentation advises for ``SIGPIPE``.

    Example:
        >>> main(["run", "missing.onnx", "--batch", "0"])  # a usage error: one line on stderr
        2
    """
    from ._common import OutputClosed

    try:
        return _main(argv)
    except OutputClosed as exc:
        # The reader closed the pipe early (`amdinfer run m.onnx --json | head -1`): what it read was all it
        # wanted. The stream's descriptor is pointed at devnull so the interpreter's final flush cannot fail.
        _to_devnull(exc.stream)
        return 0


def _to_devnull(stream: object) -> None:
    """Point ``stream``'s file descriptor at the null device (what Python's docs advise on SIGPIPE)."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # a replaced stream (tests): nothing to redirect
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _flush(stream: object) -> None:
    from ._common import OutputClosed

    try:
        stream.flush()  # type: ignore[attr-defined]
    except BrokenPipeError:
        raise OutputClosed(stream) from None


def _main(argv: Sequence[str] | None) -> int:
    from amdinfer.errors import error_status

    from ._common import OutputClosed, _write

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except BrokenPipeError:  # --help into a closed pipe
        raise OutputClosed(sys.stdout) from None
    except SystemExit as exc:  # --help
        _flush(sys.stdout)
        return exc.code if isinstance(exc.code, int) else 0
    if args.version:
        import amdinfer

        _write(f"amdinfer {amdinfer.__version__}", sys.stdout)
        return 0
    if not getattr(args, "fn", None):
        try:
            parser.print_help()
        except BrokenPipeError:
            raise OutputClosed(sys.stdout) from None
        _flush(sys.stdout)
        return 2
    # -q: amdinfer's own WARNING lines (e.g. fp16 on a CPU provider) are notes too; errors still print.
    logger = logging.getLogger("amdinfer")
    level = logger.level
    if getattr(args, "quiet", False):
        logger.setLevel(logging.ERROR)
    try:
        return int(args.fn(args))
    except Exception as exc:
        # amdinfer's errors (exit code from the error table) and the machine's are one line, never a
        # traceback; anything else is a bug in amdinfer and keeps its traceback.
        status = error_status(exc)
        if status is None and not isinstance(exc, _ENVIRONMENT_ERRORS):
            raise
        print(f"amdinfer {args.command}: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return 1 if status is None else status.exit_code
    except KeyboardInterrupt:
        print(f"amdinfer {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        logger.setLevel(level)


def _one_line(message: str) -> str:
    return " ".join(message.split()) or "(no message)"
