"""``amdinfer compile``: build a backend's compiled artefact into the cache and say where it went."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ._common import (
    add_model_args,
    add_output_args,
    check_writable,
    emit,
    engine_header,
    info_lines,
    load_engine,
    plan_feeds,
)

NAME = "compile"
HELP = "compile a model for a backend/precision/shapes into the cache (MIGraphX .mxr, ORT optimized model)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p, sweep=True, inputs=False)
    p.add_argument("--cache-dir", help="cache folder (default: $AMDINFER_CACHE_DIR or ~/.cache/amdinfer)")
    p.add_argument("--out", metavar="PATH", help="also copy the compiled artefact here")
    add_output_args(p)


def _artefact(cache_dir: Path, info: Any) -> tuple[str | None, Path | None]:
    """The cache key and artefact file of what the engine just built or loaded."""
    from ..cache import CompiledModelCache

    keys = []
    settings = info.settings
    if isinstance(settings.get("cache"), dict) and settings["cache"].get("key"):
        keys.append(settings["cache"]["key"])
    entries = {e.key: e for e in CompiledModelCache(cache_dir).entries()}
    for key in keys:
        if key in entries:
            return key, entries[key].path
    # MIGraphX records one program per shape signature; its entries are the newest ones for this model.
    for e in sorted(entries.values(), key=lambda e: -e.created):
        if e.backend == info.backend and e.path is not None:
            return e.key, e.path
    return None, None


def run(args: argparse.Namespace) -> int:
    from ..cache import resolve_cache_dir

    out = check_writable(args.out, "--out") if args.out else None
    if args.backend == "reference":
        raise OptionError("--backend reference: the NumPy reference has nothing to compile; use ort or migraphx")
    cache_dir = resolve_cache_dir(args.cache_dir)
    plans = plan_feeds(args, args.batch or [None])
    engine = load_engine(args, plans, use_cache=True, cache_dir=str(cache_dir))
    with engine:
        info = engine.info
    key, path = _artefact(cache_dir, info)
    kind = (info.settings.get("cache") or {}).get("kind") or (
        "MIGraphX program (.mxr)" if info.backend == "migraphx" else ""
    )
    if out is not None:
        if path is None:
            raise OptionError(
                f"--out: backend {info.backend} left no artefact in {cache_dir} ({kind or 'nothing cached'})"
            )
        shutil.copyfile(path, out)
    lines = info_lines(info)
    state = "loaded from the cache" if info.cache_hit else "compiled"
    lines.append(f"compile   {state} in {info.compile_seconds:.3f} s (load {info.load_seconds:.3f} s)")
    shapes = ", ".join(
        f"{k} " + " .. ".join(dict.fromkeys("x".join(map(str, plan[k])) for plan in plans)) for k in plans[0]
    )
    lines.append(f"shapes    {shapes}")
    lines.append(f"artefact  {path if path else '(none: ' + (kind or 'the backend keeps it itself') + ')'}")
    if kind:
        lines.append(f"kind      {kind}")
    lines.append(f"cache     {cache_dir}" + (f" key {key}" if key else ""))
    if out is not None:
        lines.append(f"copied to {out}")
    payload = {
        **engine_header(info),
        "compile_s": info.compile_seconds,
        "load_s": info.load_seconds,
        "cache_hit": info.cache_hit,
        "cache_dir": str(cache_dir),
        "key": key,
        "artefact": str(path) if path else None,
        "kind": kind or None,
        "input_shapes": [{k: list(v) for k, v in plan.items()} for plan in plans],
        "out": str(out) if out else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0
