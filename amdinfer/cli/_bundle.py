"""``amdinfer compile MODEL --bundle DIR``: write a deployable bundle (``amdinfer.bundle``), a line per bucket."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import OptionError
from ._common import emit, note, quantizer_for
from ._feeds import model_specs, plan_feeds
from ._load_args import engine_options

#: Options a bundle decides itself (it is its own compiled form; its buckets come from --batch/--input-shapes).
_OWN = ("cache", "cache_dir", "batch_buckets", "shapes", "optimized_model_path")


def add_bundle_arguments(p: argparse.ArgumentParser) -> None:
    """``--bundle DIR`` and ``--force`` on ``amdinfer compile``."""
    p.add_argument(
        "--bundle",
        metavar="DIR",
        help="write a deployable bundle folder (compiled form per bucket, goldens, manifest.json; docs/deploy.md)",
    )
    p.add_argument("--force", action="store_true", help="with --bundle: replace an existing bundle in DIR")
    p.add_argument(
        "--shapes",
        action="append",
        type=parse_shape_buckets,
        metavar="NAME:1x3x320x320,1x3x640x640",
        help="with --bundle: shape buckets, one compiled form each (repeat for each dynamic input, same count)",
    )


def parse_shape_buckets(text: str) -> tuple[str, list[tuple[int, ...]]]:
    """``--shapes``: ``name:1x3x320x320,1x3x640x640`` (one shape per bucket).

    Example:
        >>> parse_shape_buckets("images:1x3x320x320,2x3x640x640")
        ('images', [(1, 3, 320, 320), (2, 3, 640, 640)])
    """
    name, sep, rest = text.partition(":")
    try:
        shapes = [tuple(int(d) for d in item.split("x")) for item in rest.split(",")]
    except ValueError:
        shapes = []
    if not sep or not name or not shapes or any(d < 1 for s in shapes for d in s):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected name:1x3x320x320,1x3x640x640 (one shape per bucket)")
    return name, shapes


def _buckets(given: list[tuple[str, list[tuple[int, ...]]]], source: Any) -> list[dict[str, tuple[int, ...]]]:
    """One ``{input: shape}`` per bucket from ``--shapes`` (inputs of fixed shape filled in from the model)."""
    counts = {len(shapes) for _, shapes in given}
    if len(counts) != 1:
        raise OptionError(f"--shapes: got {[(n, len(s)) for n, s in given]} buckets per input, expected the same count")
    fixed = {s.name: tuple(s.shape) for s in source.inputs if s.is_tensor and all(isinstance(d, int) for d in s.shape)}
    named = dict(given)
    return [{**fixed, **{n: shapes[i] for n, shapes in named.items()}} for i in range(counts.pop())]


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
    if getattr(args, "shapes", None):
        if args.batch or getattr(args, "input_shapes", None):
            raise OptionError("--shapes: the buckets' full shapes; give them without --batch and --input-shapes")
        shapes = _buckets(args.shapes, source)
    elif args.batch and not getattr(args, "input_shapes", None):
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
