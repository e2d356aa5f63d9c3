"""The parser, the subcommand registry and the one error convention."""

from __future__ import annotations

import argparse
import importlib
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
    "amdinfer.cli._bench",
    "amdinfer.cli._profile",
    "amdinfer.cli._verify",
    "amdinfer.cli._compile",
    "amdinfer.cli._quantize",
    "amdinfer.cli._cache",
    "amdinfer.serve._cli",  # amdinfer serve (KServe is imported only when it runs)
]


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
        epilog="Exit codes: 0 success, 1 failure (a check failed, or an error), 2 usage. See docs/cli.md.",
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
    """Entry point of the ``amdinfer`` console script; returns the exit code (0 ok, 1 failure, 2 usage).

    Example:
        >>> main(["run", "missing.onnx", "--batch", "0"])  # a usage error: one line on stderr
        2
    """
    from amdinfer.errors import AmdinferError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    if args.version:
        import amdinfer

        print(f"amdinfer {amdinfer.__version__}")
        return 0
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    try:
        return int(args.fn(args))
    except (AmdinferError, OSError, MemoryError, ImportError) as exc:
        # User errors, the file system's, and optional packages that are missing are one line, never a
        # traceback; anything else is a bug in amdinfer and keeps its traceback.
        print(f"amdinfer {args.command}: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"amdinfer {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(message: str) -> str:
    return " ".join(message.split()) or "(no message)"
