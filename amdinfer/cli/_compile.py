"""``amdinfer compile``: build a backend's compiled artefact into the cache and say where it went."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ._bundle import add_bundle_arguments, run_bundle
from ._common import (
    add_model_args,
    add_output_args,
    emit,
    engine_header,
    info_lines,
    load_engine,
    make_feeds,
    plan_feeds,
)
from ._outputs import check_writable, copy_file
from ._shapes_from import add_shapes_from_argument, plan_line, shapes_from

NAME = "compile"
HELP = "compile a model for a backend/precision/shapes into the cache (MIGraphX .mxr, ORT optimized model)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_args(p, sweep=True, inputs=False)  # --cache-dir among them
    p.add_argument("--out", metavar="PATH", help="also copy the compiled artefact here")
    add_bundle_arguments(p)
    add_shapes_from_argument(p)  # --shapes-from LOG, --max-buckets N
    add_output_args(p)


def _norm(x: Any) -> str:
    return json.dumps(x, sort_keys=True, default=list)


def artefacts(cache_dir: Path, info: Any, model_name: str) -> list[tuple[str, Path]]:
    """``(key, file)`` of every cache entry the engine built or loaded.

    ONNX Runtime records its one entry's key in ``info.settings["cache"]``; MIGraphX records one program per
    input-shape signature in ``info.settings["programs"]``, matched to entries by backend, model and inputs.
    """
    from ..cache import CompiledModelCache

    entries = [e for e in CompiledModelCache(cache_dir).entries() if e.path is not None]
    cache = info.settings.get("cache")
    if isinstance(cache, dict) and cache.get("key"):
        return [(e.key, e.path) for e in entries if e.key == cache["key"]]  # type: ignore[misc]
    signatures = {_norm(p.get("inputs")) for p in info.settings.get("programs", []) if isinstance(p, dict)}
    return [
        (e.key, e.path)  # type: ignore[misc]
        for e in sorted(entries, key=lambda e: e.created)
        if e.backend == info.backend
        and e.meta.get("model") == model_name
        and _norm(e.parts.get("inputs")) in signatures
    ]


def run(args: argparse.Namespace) -> int:
    from ..cache import resolve_cache_dir

    planned = shapes_from(args)  # --shapes-from: the planned buckets (args.batch set when only the batch varies)
    if getattr(args, "bundle", None):
        return run_bundle(args)
    out = check_writable(args.out, "--out", args) if args.out else None
    if args.backend == "reference":
        raise OptionError("--backend reference: the NumPy reference has nothing to compile; use ort or migraphx")
    if args.cache is False:
        raise OptionError("--no-cache: compile builds into the compiled-model cache; drop --no-cache")
    cache_dir = resolve_cache_dir(args.cache_dir)
    plans = planned or plan_feeds(args, args.batch or [None])
    # The folder run/bench/verify/profile resolve the same way (--cache-dir, $AMDINFER_CACHE_DIR, user cache).
    args.cache_dir = str(cache_dir)
    engine = load_engine(args, plans)
    with engine:
        # Backends that compile per input shape on first use (MIGraphX) build each planned shape now.
        for plan in plans:
            engine.run(make_feeds(engine.inputs, plan, args.seed))
        info = engine.info
        model_name = engine.model.name
    found = artefacts(cache_dir, info, model_name)
    kind = (info.settings.get("cache") or {}).get("kind") or (
        "MIGraphX program (.mxr), one per input shape" if info.backend == "migraphx" else ""
    )
    if out is not None:
        if len(found) != 1:
            what = f"{len(found)} artefacts (one per shape; give one --batch)" if found else "no artefact"
            raise OptionError(f"--out: backend {info.backend} left {what} in {cache_dir} ({kind or 'nothing cached'})")
        copy_file(found[0][1], out, "--out")
    lines = info_lines(info)
    state = "loaded from the cache" if info.cache_hit else "compiled"
    lines.append(f"compile   {state} in {info.compile_seconds:.3f} s (load {info.load_seconds:.3f} s)")
    shapes = ", ".join(
        f"{k} " + " .. ".join(dict.fromkeys("x".join(map(str, plan[k])) for plan in plans)) for k in plans[0]
    )
    lines.append(f"shapes    {shapes}")
    lines += [line for line in [plan_line(args)] if line]
    if found:
        lines += [f"artefact  {p}" for _, p in found]
    else:
        lines.append(f"artefact  (none: {kind or 'the backend keeps it itself'})")
    if kind:
        lines.append(f"kind      {kind}")
    lines.append(f"cache     {cache_dir}" + (f" key {found[0][0]}" if len(found) == 1 else ""))
    if out is not None:
        lines.append(f"copied to {out}")
    payload = {
        **engine_header(info),
        "compile_s": info.compile_seconds,
        "load_s": info.load_seconds,
        "cache_hit": info.cache_hit,
        "cache_dir": str(cache_dir),
        "key": found[0][0] if len(found) == 1 else None,
        "artefact": str(found[0][1]) if len(found) == 1 else None,
        "artefacts": [{"key": k, "path": str(p)} for k, p in found],
        "kind": kind or None,
        "input_shapes": [{k: list(v) for k, v in plan.items()} for plan in plans],
        "out": str(out) if out else None,
    }
    emit(args, payload, "\n".join(lines))
    return 0
