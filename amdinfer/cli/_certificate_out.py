"""``amdinfer quantize``'s precision certificate: built from the report, attached to ``--out``, written by
``--certificate OUT.json`` (the JSON, and its plot beside it as ``OUT.png``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ._common import warn
from ._outputs import check_writable

__all__ = ["add_certificate_args", "check_certificate_paths", "write_certificate"]


def add_certificate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--certificate",
        metavar="OUT.json",
        help="also write the precision certificate (always stored in --out's metadata) as JSON there, and its "
        "plot (thresholds and per-layer precision; matplotlib) beside it as OUT.png",
    )


def check_certificate_paths(args: argparse.Namespace) -> tuple[Path, Path] | None:
    """``(json, png)`` of ``--certificate``, checked before any work; ``None`` without it."""
    if not getattr(args, "certificate", None):
        return None
    path = check_writable(args.certificate, "--certificate", args)
    if path.suffix.lower() != ".json":
        raise OptionError(f"--certificate: got {args.certificate!r}, expected a file name ending in .json")
    plot = check_writable(str(path.with_suffix(".png")), "--certificate's plot", args)
    return path, plot


def write_certificate(
    args: argparse.Namespace,
    report: Any,
    *,
    source: Any,
    qmodel: Any,
    held_out: list[Any],
    data_note: str,
    quantizer: Any,
    search: Any = None,
    paths: tuple[Path, Path] | None,
) -> tuple[Any, list[str]]:
    """Certify ``report``, attach the certificate to ``qmodel`` (before ``--out`` is written) and write
    ``--certificate``; returns the certificate and the text lines."""
    from ..quantize import certify

    cert = certify(
        report,
        float_model=source,
        quantized_model=qmodel,
        data=held_out,
        data_source=data_note,
        quantizer=quantizer,
        search=search,
    )
    cert.attach(qmodel)
    lines = [f"certified {cert.summary()} (in --out's metadata)"]
    if paths is not None:
        from .._support._files import write_atomic

        write_atomic(paths[0], (cert.to_json(indent=1) + "\n").encode(), argument="--certificate")
        try:
            cert.plot(paths[1])
            lines.append(f"          certificate {paths[0]}, plot {paths[1]}")
        except ImportError:
            warn(args, f"--certificate: no plot at {paths[1]} (matplotlib is not installed); the JSON is written")
            lines.append(f"          certificate {paths[0]} (no plot: matplotlib is not installed)")
    return cert, lines
