"""``amdinfer compile MODEL --bundle DIR``: write a deployable bundle (``amdinfer.bundle``), a line per bucket."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import OptionError
from ._common import emit, note, quantizer_for
from ._feeds import model_specs, plan_feeds
from ._load_args import engine_options

#: Options a bundle decides itself (it is its own compiled form; its buckets come from --batch/--input-shapes).
_OWN = ("use_cache", "cache_dir", "batch_buckets", "shapes", "optimized_model_path")


def add_bundle_arguments(p: argparse.ArgumentParser) -> None:
    """``--bundle DIR`` and ``--force`` on ``amdinfer compile``."""
    p.add_argument(
        "--bundle",
        metavar="DIR",
        help="write a deployable bundle folder (compiled form per bucket, goldens, manifest.json; docs/deploy.md)",
    )
    p.add_argument("--force", action="store_true", help="with --bundle: replace an existing bundle in DIR")


def run_bundle(args: argparse.Namespace) -> int:
    """Write the bundle, printing each bucket's line as it is built; the summary (or ``--json``) on stdout."""
    from ..bundle import read_manifest, write_bundle

    if getattr(args, "out", None):
        raise OptionError("--out: not with --bundle (the bundle folder is the output); drop --out")
    backend = "ort" if args.backend == "auto" else args.backend
    if backend not in ("ort", "migraphx"):
        raise OptionError(f"--backend {args.backend}: a bundle holds ONNX Runtime's or MIGraphX's compiled form")
    options: dict[str, Any] = engine_options(args, backend)
    providers = options.pop("providers", None)
    for name in _OWN:
        options.pop(name, None)
    if getattr(args, "on_new_shape", "compile") != "compile":  # the bundle's policy (default "pad")
        options["on_new_shape"] = args.on_new_shape
    source = model_specs(args.model)
    batches, shapes = None, None
    if args.batch and not getattr(args, "input_shapes", None):
        batches = list(args.batch)
    else:
        shapes = plan_feeds(args, args.batch or [None])
    quantizer = quantizer_for(args, source, (shapes or [{}])[0])
    if quantizer is not None:
        options["quantizer"] = quantizer
    folder = write_bundle(
        source, args.bundle, batch_buckets=batches, shapes=shapes, precision=args.precision, backend=backend,
        providers=providers, device=args.device, seed=args.seed, overwrite=args.force,
        progress=lambda line: note(args, line), **options,
    )  # fmt: skip
    data = read_manifest(folder)
    lines = [
        f"bundle    {folder}",
        f"kind      {data['kind']}",
        f"buckets   {', '.join(b['name'] for b in data['buckets'])}",
        f"providers {', '.join(name for name, _ in data['providers']) or data['backend']}",
        f"precision {data['precision']}",
        f"manifest  {data['manifest_sha256'][:16]}",
        f"load it   amdinfer run {folder}   (or amdinfer.load({str(folder)!r}))",
    ]
    payload = {
        "bundle": str(folder),
        "kind": data["kind"],
        "buckets": data["buckets"],
        "providers": data["providers"],
        "precision": data["precision"],
        "manifest_sha256": data["manifest_sha256"],
        "environment": data["environment"],
    }
    emit(args, payload, "\n".join(lines))
    return 0
