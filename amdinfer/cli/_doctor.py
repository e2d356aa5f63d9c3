"""``amdinfer doctor``: what is installed, what loads, why a GPU is not used."""

from __future__ import annotations

import argparse

from ._common import add_output_args, emit

NAME = "doctor"
HELP = "what is installed, what loads, why a GPU is not used (full reasons)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_output_args(p)


def run(args: argparse.Namespace) -> int:
    from ..doctor import diagnose

    report = diagnose()
    emit(args, report.to_dict(), report.format())
    return 0
