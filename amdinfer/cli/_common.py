"""What every subcommand shares: model/engine options, input shapes, feeds, JSON output, progress, messages.

The convention (docs/cli.md):

* a model is run with ``--backend``, ``--providers``, ``--precision``, ``--input-shapes name:1x3x224x224,...``,
  ``--batch`` and ``--inputs file.npz``;
* ``--json`` prints one JSON object on stdout: ``{"command": ..., "amdinfer": version, ...}`` with snake_case
  keys and the unit in the key (``_ms``, ``_s``, ``_bytes``, ``_per_s``);
* ``--quiet`` drops progress bars and notes on stderr;
* errors are one line on stderr, ``amdinfer <command>: <ErrorClass>: <message>``; exit 0 ok, 1 failure, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._files import check_allocation
from ..errors import InputError, OptionError

__all__ = [
    "IMAGE_SUFFIXES",
    "add_model_args",
    "add_output_args",
    "dumps",
    "emit",
    "feed_shapes",
    "info_lines",
    "load_engine",
    "load_npz",
    "load_samples",
    "make_feeds",
    "note",
    "parse_batches",
    "parse_input_shapes",
    "positive_int",
]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
_PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp64")


# ---------------------------------------------------------------------------------------------- argument types
def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an int >= {low}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"got {value}, expected an int >= {low}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an int >= 1 (how much memory it implies is checked where it is used)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an int >= 0."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number > 0") from None
    if not (value > 0 and np.isfinite(value)):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number > 0")
    return value


def parse_batches(text: str) -> list[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]`` (argparse type of ``--batch``).

    Example:
        >>> parse_batches("1,8,32")
        [1, 8, 32]
    """
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected batch sizes like 8 or 1,8,32")
    return [positive_int(p) for p in parts]


_SHAPE_ITEM = re.compile(r"\s*([^:,\s\[\]]+)\s*:\s*(\[\s*(?:\d+|N)?[\d,\s]*\]|(?:\d+|N)(?:x\d+)*)\s*(?:,|$)")


def parse_input_shapes(text: str) -> dict[str, tuple[int | None, ...]]:
    """``--input-shapes``: ``name:1x3x224x224,mask:1x128`` or Polygraphy's ``name:[1,3,224,224]``.

    Axis 0 may be ``N`` (``images:Nx3x640x640``): its size then comes from ``--batch`` (``None`` here).

    Example:
        >>> parse_input_shapes("images:1x3x640x640,mask:[1,128]")
        {'images': (1, 3, 640, 640), 'mask': (1, 128)}
        >>> parse_input_shapes("images:Nx3x640x640")
        {'images': (None, 3, 640, 640)}
    """
    out: dict[str, tuple[int | None, ...]] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _SHAPE_ITEM.match(text, pos)
        if m is None or m.end() == pos:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected name:1x3x224x224[,name2:...] (or name:[1,3,224,224]; axis 0 may be N)"
            )
        name, dims = m.group(1), m.group(2)
        values = [d for d in re.split(r"[x,\[\]\s]+", dims) if d]
        shape = tuple(None if d == "N" else int(d) for d in values)
        if any(d is not None and d < 1 for d in shape):
            raise argparse.ArgumentTypeError(f"input {name!r}: got shape {shape}, expected every dimension >= 1")
        if name in out:
            raise argparse.ArgumentTypeError(f"input {name!r} is given twice")
        out[name] = shape
        pos = m.end()
    if not out:
        raise argparse.ArgumentTypeError("got nothing, expected name:1x3x224x224")
    return out


def _merge_shapes(values: list[dict[str, tuple[int | None, ...]]] | None) -> dict[str, tuple[int | None, ...]]:
    merged: dict[str, tuple[int | None, ...]] = {}
    for v in values or []:
        merged.update(v)
    return merged


# ---------------------------------------------------------------------------------------------- arguments
def add_output_args(p: argparse.ArgumentParser) -> None:
    """``--json`` and ``--quiet``."""
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (schema: docs/cli.md)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or notes on stderr")


def add_model_args(p: argparse.ArgumentParser, *, sweep: bool = False, inputs: bool = True) -> None:
    """The options of every subcommand that runs a model."""
    p.add_argument("model", help="path to an .onnx file")
    g = p.add_argument_group("engine")
    g.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    g.add_argument("--providers", help="ONNX Runtime providers in order, e.g. migraphx,cpu (implies --backend ort)")
    g.add_argument("--target", help="MIGraphX target: gpu (default) or ref")
    g.add_argument("--device", type=non_negative_int, default=0, help="GPU index (default 0)")
    g.add_argument("--precision", default="fp32", choices=_PRECISIONS, help="fp32 (default), fp16, bf16, int8, fp64")
    g.add_argument(
        "--threads", type=positive_int, help="ONNX Runtime intra-op threads (default: the runtime's, one per core)"
    )
    g.add_argument(
        "--calibration",
        metavar="PATH",
        help="int8 calibration data: a folder of images or an .npz with one array per input (axis 0 = samples)",
    )
    g = p.add_argument_group("inputs")
    g.add_argument(
        "--input-shapes",
        type=parse_input_shapes,
        action="append",
        metavar="NAME:1x3x224x224,...",
        help="shapes of random inputs, for dynamic axes (Polygraphy's name:[1,3,224,224] also works)",
    )
    if sweep:
        g.add_argument(
            "--batch",
            type=parse_batches,
            default=None,
            metavar="N[,N...]",
            help="batch size(s) for a dynamic axis 0; a list sweeps (default: from --input-shapes, else 1)",
        )
    else:
        g.add_argument(
            "--batch",
            type=positive_int,
            default=None,
            help="batch size for a dynamic axis 0 (default: from --input-shapes, else 1)",
        )
    if inputs:
        g.add_argument("--inputs", metavar="FILE.npz", help=".npz with one array per input name (default: random)")
    g.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random inputs (default 0)")


# ---------------------------------------------------------------------------------------------- output
def emit(args: argparse.Namespace, payload: Mapping[str, Any], text: str | None) -> None:
    """``--json``: the payload as one JSON object; otherwise ``text``."""
    if getattr(args, "json", False):
        import amdinfer

        doc = {"command": args.command, "amdinfer": amdinfer.__version__, **payload}
        print(dumps(doc))
    elif text is not None:
        print(text)


_SCALAR_LIST = re.compile(r"\[\n\s+([^\[\]{}\n]*(?:\n\s+[^\[\]{}\n]*)*)\n\s*\]")


def dumps(doc: Any) -> str:
    """JSON with two-space indents, lists of scalars on one line.

    Example:
        >>> print(dumps({"shape": [1, 3], "name": "x [ y ]"}))
        {
          "shape": [1, 3],
          "name": "x [ y ]"
        }
    """
    text = json.dumps(doc, indent=2, default=_json_default)
    # "[\n" never occurs inside a JSON string, so only structural lists are folded.
    return _SCALAR_LIST.sub(lambda m: "[" + " ".join(part.strip() for part in m.group(1).split("\n")) + "]", text)


def _json_default(x: Any) -> Any:
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)


def note(args: argparse.Namespace, message: str) -> None:
    """A line on stderr (dropped by ``--quiet``)."""
    if not getattr(args, "quiet", False):
        print(f"amdinfer {args.command}: {message}", file=sys.stderr)


def progress_enabled(args: argparse.Namespace) -> bool:
    """Progress bars: on a terminal's stderr, unless ``--quiet``."""
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def info_lines(info: Any) -> list[str]:
    """What ran: backend, device, providers, precision, and one short line per backend passed over."""
    providers = ", ".join(info.providers) or "-"
    lines = [f"backend   {info.backend} on {info.device}; providers {providers}; precision {info.precision}"]
    grouped: dict[str, list[str]] = {}
    for name, why in info.short_skipped().items():
        grouped.setdefault(why, []).append(name)
    for why, names in grouped.items():
        lines.append(f"  passed over {', '.join(names)}: {why}")
    if grouped:
        lines.append("  (full reasons: engine.info.skipped, --json, amdinfer doctor)")
    return lines


def engine_header(info: Any) -> dict[str, Any]:
    """The engine part of a JSON document."""
    return {
        "backend": info.backend,
        "device": info.device,
        "providers": list(info.providers),
        "precision": info.precision,
        "runtime_version": info.runtime_version,
        "skipped": dict(info.skipped),
    }


# ---------------------------------------------------------------------------------------------- files
def load_npz(path: str, what: str = "--inputs") -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` file: a regular file, headers checked before allocating, no pickled objects."""
    from .._files import read_npz

    return read_npz(path, what)


# ---------------------------------------------------------------------------------------------- shapes and feeds
def feed_shapes(
    specs: Sequence[Any], overrides: Mapping[str, tuple[int | None, ...]], batch: int | None
) -> dict[str, tuple[int, ...]]:
    """The concrete shape of every input: the model's fixed dims, ``--input-shapes``, then ``--batch`` on axis 0.

    ``--batch`` and a number on axis 0 of ``--input-shapes`` must agree (write ``N`` there to take ``--batch``).

    Raises:
        OptionError: an unknown input name, a shape that contradicts the model or ``--batch``, or a dynamic axis
            with no value.

    Example:
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import tiny_cnn
        >>> specs = ModelSource.from_any(tiny_cnn()).inputs  # input (N, 3, 32, 32)
        >>> feed_shapes(specs, {"input": (None, 3, 32, 32)}, 4)
        {'input': (4, 3, 32, 32)}
        >>> feed_shapes(specs, {"input": (2, 3, 32, 32)}, 5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --input-shapes input:2x3x32x32 and --batch 5 disagree on axis 0 of input 'input'...
    """
    names = [s.name for s in specs]
    unknown = [n for n in overrides if n not in names]
    if unknown:
        raise OptionError(f"--input-shapes: got input(s) {unknown}, expected names among {names}")
    out = {}
    for spec in specs:
        model_shape = list(spec.shape)
        if spec.name in overrides:
            shape: list[int | None] = list(overrides[spec.name])
            if len(shape) != len(model_shape):
                raise OptionError(
                    f"--input-shapes: input {spec.name!r} got {len(shape)} dims {tuple(shape)}, "
                    f"expected rank {len(model_shape)} {tuple(model_shape)}"
                )
            for i, (d, m) in enumerate(zip(shape, model_shape)):
                if isinstance(m, int) and d is None:
                    shape[i] = m  # ``N`` on a fixed batch axis
                elif isinstance(m, int) and d != m:
                    raise OptionError(
                        f"--input-shapes: input {spec.name!r} axis {i} got {d}, expected {m} (fixed in the model)"
                    )
            if batch is not None and shape and not isinstance(model_shape[0], int) and shape[0] not in (None, batch):
                given = "x".join(str(d) for d in overrides[spec.name])
                rest = "x".join(str(d) for d in overrides[spec.name][1:])
                raise OptionError(
                    f"--input-shapes {spec.name}:{given} and --batch {batch} disagree on axis 0 of input "
                    f"{spec.name!r}; give equal values, drop one, or write axis 0 as N "
                    f"(--input-shapes {spec.name}:N{'x' + rest if rest else ''}) to take it from --batch"
                )
        else:
            shape = [d if isinstance(d, int) else None for d in model_shape]
        if batch is not None and model_shape and not isinstance(model_shape[0], int):
            shape[0] = batch
        for i, d in enumerate(shape):
            if d is None:
                if i == 0:
                    shape[0] = 1
                else:
                    raise OptionError(
                        f"input {spec.name!r}: axis {i} is dynamic ({model_shape[i]!r}); give its size with "
                        f"--input-shapes {spec.name}:{'x'.join(_dim(x, model_shape[j]) for j, x in enumerate(shape))} "
                        f"(a number for {model_shape[i]}) or inputs with --inputs"
                    )
        out[spec.name] = tuple(int(d) for d in shape)  # type: ignore[arg-type]
        check_allocation(
            out[spec.name], spec.dtype, f"input {spec.name!r} (random{f', --batch {batch}' if batch else ''})"
        )
    batched = [s for s in specs if s.shape and not isinstance(s.shape[0], int)]
    if batch is not None and specs and not batched and any(s.shape and s.shape[0] != batch for s in specs):
        fixed = ", ".join(f"{s.name} {_fmt(s.shape)}" for s in specs)
        raise OptionError(f"--batch {batch}: the model's batch axis is fixed ({fixed})")
    return out


def _dim(value: int | None, model_dim: Any) -> str:
    return str(value) if value is not None else str(model_dim or "?")


def _fmt(shape: Sequence[Any]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def make_feeds(specs: Sequence[Any], shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs: floats in [0, 1), ints in [0, 10), random bools."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        shape = shapes[spec.name]
        check_allocation(shape, spec.dtype, f"input {spec.name!r} (random)")
        if spec.dtype.kind == "f":
            feeds[spec.name] = rng.random(shape, dtype=np.float32).astype(spec.dtype)
        elif spec.dtype.kind in "iu":
            feeds[spec.name] = rng.integers(0, 10, size=shape).astype(spec.dtype)
        elif spec.dtype.kind == "b":
            feeds[spec.name] = rng.random(shape) > 0.5
        else:
            raise InputError(f"input {spec.name!r}: cannot make random {spec.dtype}; give inputs with --inputs")
    return feeds


def model_specs(model: str) -> Any:
    """The model's :class:`~amdinfer.ModelSource` (inputs and outputs without building an engine)."""
    from ..model import ModelSource

    return ModelSource.from_any(model)


def shape_bounds(specs: Sequence[Any], per_batch: Sequence[Mapping[str, tuple[int, ...]]]) -> dict[str, Any]:
    """``shapes=`` for ``amdinfer.load``: min/max over the shapes that will run, for inputs with dynamic dims."""
    out: dict[str, Any] = {}
    for spec in specs:
        if all(isinstance(d, int) for d in spec.shape):
            continue
        shapes = [s[spec.name] for s in per_batch]
        lo = tuple(int(v) for v in np.min(shapes, axis=0))
        hi = tuple(int(v) for v in np.max(shapes, axis=0))
        out[spec.name] = lo if lo == hi else [lo, hi]
    return out


# ---------------------------------------------------------------------------------------------- calibration data
def load_samples(path: str, specs: Sequence[Any], shapes: Mapping[str, tuple[int, ...]], what: str) -> list[Any]:
    """Samples from a folder of images (resized to the input's H x W, scaled to [0, 1], NCHW) or an ``.npz``.

    An ``.npz`` holds one array per input name; axis 0 indexes samples (each becomes a batch of one).
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise InputError(f"{what}: folder {path!r} has no images ({', '.join(IMAGE_SUFFIXES)})")
        if len(specs) != 1:
            raise InputError(f"{what}: images feed one input, the model has {[s.name for s in specs]}; use an .npz")
        spec = specs[0]
        shape = shapes[spec.name]
        if len(shape) != 4 or shape[1] not in (1, 3):
            raise InputError(f"{what}: images need an NCHW input with 1 or 3 channels; input {spec.name!r} is {shape}")
        from ..preprocess import HwcToChw, LoadImage, Normalize, Resize

        mode = "RGB" if shape[1] == 3 else "L"
        stages = [LoadImage(mode), Resize((shape[2], shape[3])), Normalize(scale=1 / 255.0, dtype=spec.dtype)]
        stages.append(HwcToChw())
        out = []
        for f in files:
            x: Any = str(f)
            for stage in stages:
                x = stage(x)
            arr = getattr(x, "data", x)
            out.append({spec.name: np.ascontiguousarray(np.asarray(arr)[None])})
        return out
    arrays = load_npz(path, what)
    names = [s.name for s in specs]
    if sorted(arrays) != sorted(names):
        if len(arrays) == 1 and len(names) == 1:
            arrays = {names[0]: next(iter(arrays.values()))}
        else:
            raise InputError(f"{what}: {path!r} has arrays {sorted(arrays)}, expected one per input {names}")
    n = {k: v.shape[0] if v.ndim else 0 for k, v in arrays.items()}
    if len(set(n.values())) != 1 or 0 in n.values():
        raise InputError(f"{what}: arrays of {path!r} disagree on the sample count (axis 0): {n}")
    count = next(iter(n.values()))
    return [{k: np.ascontiguousarray(v[i : i + 1]) for k, v in arrays.items()} for i in range(count)]


def quantizer_for(args: argparse.Namespace, source: Any, shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """An :class:`~amdinfer.quantize.Int8Quantizer` from ``--calibration`` when ``--precision int8``."""
    if args.precision != "int8":
        if getattr(args, "calibration", None):
            raise OptionError(f"--calibration: only used with --precision int8, got --precision {args.precision}")
        return None
    if not getattr(args, "calibration", None):
        raise OptionError(
            "--precision int8: give calibration data with --calibration FOLDER_OF_IMAGES or --calibration data.npz "
            "(uncalibrated int8 gives wrong answers)"
        )
    from ..quantize import Int8Quantizer

    samples = load_samples(args.calibration, source.inputs, shapes, "--calibration")
    return Int8Quantizer(calibration=samples, progress=progress_enabled(args))


# ---------------------------------------------------------------------------------------------- engines
def load_engine(
    args: argparse.Namespace, per_batch: Sequence[Mapping[str, tuple[int, ...]]] | None = None, **extra: Any
) -> Any:
    """``amdinfer.load`` from the common options (``--calibration`` turns into an int8 quantizer)."""
    import amdinfer

    source = model_specs(args.model)
    if getattr(args, "inputs", None) and getattr(args, "given_inputs", None) is None:
        # Read (and check) the inputs before anything is compiled: a bad file fails fast.
        args.given_inputs = load_npz(args.inputs)
        if not per_batch:
            names = {s.name for s in source.inputs}
            per_batch = [{k: tuple(v.shape) for k, v in args.given_inputs.items() if k in names}]
            if set(per_batch[0]) != names:
                per_batch = None
    options: dict[str, Any] = dict(extra)
    if getattr(args, "providers", None):
        options["providers"] = [p.strip() for p in args.providers.split(",") if p.strip()]
    if getattr(args, "target", None):
        options["target"] = args.target
    if getattr(args, "threads", None):
        options["threads"] = args.threads
    if per_batch:
        bounds = shape_bounds(source.inputs, per_batch)
        if bounds:
            options["shapes"] = bounds
    quantizer = quantizer_for(args, source, per_batch[0] if per_batch else {})
    if quantizer is not None:
        options["quantizer"] = quantizer
    note(args, f"loading {Path(args.model).name} (backend {args.backend}, {args.precision})")
    return amdinfer.load(source, backend=args.backend, device=args.device, precision=args.precision, **options)


def plan_feeds(args: argparse.Namespace, batches: Sequence[int | None]) -> list[dict[str, tuple[int, ...]]]:
    """The input shapes for each batch size (one entry per batch)."""
    source = model_specs(args.model)
    overrides = _merge_shapes(getattr(args, "input_shapes", None))
    return [feed_shapes(source.inputs, overrides, b) for b in batches]


def feeds_for(args: argparse.Namespace, engine: Any, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """``--inputs`` when given, else seeded random inputs of ``shapes``."""
    if getattr(args, "inputs", None):
        if getattr(args, "given_inputs", None) is None:
            args.given_inputs = load_npz(args.inputs)
        return dict(args.given_inputs)
    specs = engine.inputs if hasattr(engine, "inputs") else engine.engines[0].inputs  # an EnginePool has none
    return make_feeds(specs, shapes, args.seed)
