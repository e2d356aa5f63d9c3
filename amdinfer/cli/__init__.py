"""The ``amdinfer`` command line: doctor, inspect, run, bench, profile, verify, compile, quantize, cache.

One module per subcommand (``_bench.py``, ...); :data:`SUBCOMMANDS` lists them in the order ``--help``
shows them. A subcommand module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; adding one is adding its module path to :data:`SUBCOMMANDS`.

Example:
    >>> from amdinfer.cli import main
    >>> main(["--version"])  # doctest: +ELLIPSIS
    amdinfer ...
    0
"""

from __future__ import annotations

from ._main import SUBCOMMANDS, build_parser, main

__all__ = ["SUBCOMMANDS", "build_parser", "main"]
