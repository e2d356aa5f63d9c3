"""``amdinfer cache list|clear``: the compiled-model cache as a table."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ._common import add_output_args, emit

NAME = "cache"
HELP = "list (as a table) or clear the compiled-model cache"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("--cache-dir", default=None, help="cache folder (default: $AMDINFER_CACHE_DIR or ~/.cache/amdinfer)")
    add_output_args(p)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)  # pragma: no cover


def _when(created: float) -> str:
    iso = _iso(created)
    return iso[:16].replace("T", " ") if iso else "?"


def _iso(created: float) -> str | None:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(created))) if created else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _certificate(meta: dict[str, Any]) -> dict[str, Any] | None:
    """An entry's precision certificate for ``--json``: verdict, task, metrics, summary (``None`` without one)."""
    from .._certificate._io import meta_certificate

    cert, problem = meta_certificate(meta)
    if problem is not None:
        return {"trusted": False, "problem": problem}
    if cert is None:
        return None
    main = cert.thresholds[0] if cert.thresholds else None
    return {
        "trusted": True,
        "verdict": cert.verdict,
        "task": cert.task,
        "metric": None if main is None else {"name": main.metric, "value": main.value, "bound": str(main)},
        "metrics": dict(cert.metrics),
        "summary": cert.summary(),
    }


def _certified(meta: dict[str, Any]) -> str:
    """The table's certificate column: ``PASS f1 0.9712``, ``damaged``, or ``-``."""
    c = _certificate(meta)
    if c is None:
        return "-"
    if not c["trusted"]:
        return "damaged"
    m = c["metric"]
    value = "" if m is None or m["value"] is None else f" {m['name']} {m['value']:.4f}"
    return f"{c['verdict']}{value}"


def run(args: argparse.Namespace) -> int:
    from .. import cache

    root = cache.resolve_cache_dir(args.cache_dir)
    if args.action == "clear":
        removed = cache.clear(args.cache_dir)
        emit(args, {"cache_dir": str(root), "removed": removed}, f"removed {removed} entries from {root}")
        return 0
    entries = cache.list_entries(args.cache_dir)
    rows = []
    for e in entries:
        parts = e.parts
        model = str(e.meta.get("model") or parts.get("model", "?"))
        rows.append(
            [
                e.key[:12],
                e.backend,
                e.precision,
                e.kind,
                model if len(model) <= 24 else model[:23] + "…",
                _size(e.size_bytes),
                _when(e.created),
                _certified(e.meta),
                e.problem or "ok",
            ]
        )
    total = sum(e.size_bytes for e in entries)
    if rows:
        header = ["key", "backend", "precision", "kind", "model", "size", "created (UTC)", "certificate", "state"]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
        lines.append(f"{len(rows)} entries, {_size(total)} in {root}")
        text = "\n".join(lines)
    else:
        text = f"(cache is empty: {root})"
    listed = [{**e.to_dict(), "created_utc": _iso(e.created), "certificate": _certificate(e.meta)} for e in entries]
    payload = {"cache_dir": str(root), "total_bytes": total, "entries": listed}
    emit(args, payload, text)
    return 0
