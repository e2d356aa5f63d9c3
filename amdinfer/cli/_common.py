"""What every subcommand shares: model/engine options, the cache switch, JSON output, progress, messages.

The convention (docs/cli.md):

* a model is run with ``--backend``, ``--providers``, ``--precision``, ``--input-shapes name:1x3x224x224,...``,
  ``--batch`` and ``--inputs file.npz``; engine options (``--threads``, ``--inter-op-threads``,
  ``--graph-optimization``, ``--provider-option``) and the compiled-model cache (``--cache/--no-cache``,
  ``--cache-dir``; on by default) are the same on every command that loads one;
* ``--json`` prints one JSON object on stdout: ``{"command": ..., "amdinfer": version, ...}`` with snake_case
  keys and the unit in the key (``_ms``, ``_s``, ``_bytes``, ``_per_s``);
* notes (what is loading, the backends passed over) go to stderr; ``--quiet`` drops them and progress bars;
* errors are one line on stderr, ``amdinfer <command>: <ErrorClass>: <message>``; exit 0 ok, 1 failure, 2 usage,
  3 not judged (``quantize`` with too little held-out data), 130 interrupted; a reader that closes stdout early
  (``| head -1``) ends the command quietly with exit 0.

Shapes and feeds live in :mod:`._feeds`, calibration samples in :mod:`._samples`; both are re-exported here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OptionError
from ._feeds import feed_shapes, feeds_for, load_npz, make_feeds, model_specs, plan_feeds, shape_bounds
from ._load_args import add_engine_args, cache_options, engine_options, takes_option
from ._samples import IMAGE_SUFFIXES, add_normalization_args, load_samples, parse_normalization

__all__ = [
    "IMAGE_SUFFIXES",
    "OutputClosed",
    "add_cache_args",
    "add_model_args",
    "add_normalization_args",
    "add_output_args",
    "cache_line",
    "cache_options",
    "describe",
    "dumps",
    "emit",
    "engine_header",
    "engine_options",
    "feed_shapes",
    "feeds_for",
    "info_lines",
    "load_engine",
    "load_npz",
    "load_samples",
    "make_feeds",
    "model_specs",
    "non_negative_int",
    "note",
    "parse_batches",
    "parse_input_shapes",
    "parse_normalization",
    "plan_feeds",
    "positive_float",
    "positive_int",
    "progress_enabled",
    "quantizer_cache",
    "quantizer_for",
    "shape_bounds",
    "warn",
]


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


# ---------------------------------------------------------------------------------------------- arguments
def add_output_args(p: argparse.ArgumentParser) -> None:
    """``--json`` and ``--quiet``."""
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (schema: docs/cli.md)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or notes on stderr")


def add_cache_args(g: Any) -> None:
    """``--cache/--no-cache`` and ``--cache-dir``: the compiled-model cache, on by default on the command line."""
    g.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="use the compiled-model cache (default: on; what `amdinfer compile` built is loaded from it)",
    )
    g.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="cache folder (implies --cache; default: $AMDINFER_CACHE_DIR, else the user cache folder)",
    )


def add_model_args(p: argparse.ArgumentParser, *, sweep: bool = False, inputs: bool = True) -> None:
    """The options of every subcommand that runs a model (the engine flags derived from the option records)."""
    p.add_argument("model", help="path to an .onnx file")
    g = p.add_argument_group("engine")
    g.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    add_engine_args(g)
    g.add_argument(
        "--provider-option",
        action="append",
        metavar="KEY=VALUE",
        help="a raw option of the first provider of --providers (repeat for more), e.g. device_id=1",
    )
    add_cache_args(g)
    g.add_argument(
        "--calibration",
        metavar="PATH",
        help="int8 calibration data: a folder of images or an .npz with one array per input (axis 0 = samples)",
    )
    add_normalization_args(g)
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
class OutputClosed(Exception):
    """The reader of stdout (or stderr) went away (``amdinfer ... | head -1``): the command ends quietly, exit 0."""

    def __init__(self, stream: Any) -> None:
        super().__init__("output closed by its reader")
        self.stream = stream


def _write(text: str, stream: Any) -> None:
    try:
        print(text, file=stream)
        stream.flush()
    except BrokenPipeError:
        raise OutputClosed(stream) from None


def emit(args: argparse.Namespace, payload: Mapping[str, Any], text: str | None) -> None:
    """``--json``: the payload as one JSON object; otherwise ``text``."""
    if getattr(args, "json", False):
        import amdinfer

        doc = {"command": args.command, "amdinfer": amdinfer.__version__, **payload}
        _write(dumps(doc), sys.stdout)
    elif text is not None:
        _write(text, sys.stdout)


_SCALAR_LIST = re.compile(r"\[\n\s+([^\[\]{}\n]*(?:\n\s+[^\[\]{}\n]*)*)\n\s*\]")


def dumps(doc: Any) -> str:
    """Strict JSON with two-space indents, lists of scalars on one line; NaN and infinities are written as ``null``
    (JSON has no such numbers, and strict parsers refuse Python's bare ``NaN``).

    Example:
        >>> print(dumps({"shape": [1, 3], "name": "x [ y ]"}))
        {
          "shape": [1, 3],
          "name": "x [ y ]"
        }
        >>> dumps({"rms": float("nan"), "max": [1.0, float("inf")]}).split()
        ['{', '"rms":', 'null,', '"max":', '[1.0,', 'null]', '}']
    """
    text = json.dumps(_finite(doc), indent=2, default=_json_default, allow_nan=False)
    # "[\n" never occurs inside a JSON string, so only structural lists are folded.
    return _SCALAR_LIST.sub(lambda m: "[" + " ".join(part.strip() for part in m.group(1).split("\n")) + "]", text)


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float (Python or NumPy, in dicts, lists, tuples and arrays) replaced by None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype.kind in "fc":
        return _finite(np.asarray(x).tolist())
    return x


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
        _write(f"amdinfer {args.command}: {message}", sys.stderr)


def warn(args: argparse.Namespace, message: str) -> None:
    """A warning line on stderr, dropped by ``--quiet`` like a note (the command's JSON lists it under ``warnings``)."""
    note(args, f"warning: {message}")


def progress_enabled(args: argparse.Namespace) -> bool:
    """Progress bars: on a terminal's stderr, unless ``--quiet``."""
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def describe(info: Any) -> str:
    """``ort (cpu, CPUExecutionProvider, fp32)``: the engine in one phrase."""
    providers = f", {', '.join(info.providers)}" if info.providers else ""
    return f"{info.backend} ({info.device}{providers}, {info.precision})"


def info_lines(info: Any) -> list[str]:
    """What ran: backend, device, providers, precision (the backends passed over are notes: :func:`load_engine`)."""
    providers = ", ".join(info.providers) or "-"
    return [f"backend   {info.backend} on {info.device}; providers {providers}; precision {info.precision}"]


def _note_skipped(args: argparse.Namespace, info: Any) -> None:
    """One note per reason a backend or provider was passed over (once per command, also for a pool)."""
    grouped: dict[str, list[str]] = {}
    for name, why in info.short_skipped().items():
        grouped.setdefault(why, []).append(name)
    if not grouped or getattr(args, "skipped_noted", False):
        return
    args.skipped_noted = True
    for why, names in grouped.items():
        note(args, f"passed over {', '.join(names)}: {why}")
    note(args, "(full reasons: engine.info.skipped, --json, amdinfer doctor)")


def cache_line(args: argparse.Namespace, info: Any) -> str:
    """Whether the engine came from the compiled-model cache, and from where.

    Example:
        >>> from amdinfer.engines.base import EngineInfo
        >>> info = EngineInfo(backend="reference", device="cpu", providers=[], precision="fp32")
        >>> cache_line(argparse.Namespace(cache=None), info)
        'cache     none (backend reference keeps no compiled artefact)'
    """
    cache = info.settings.get("cache")
    if isinstance(cache, dict) and cache.get("key"):
        state = "hit, loaded" if info.cache_hit else "miss, compiled and stored"
        return f"cache     {state}: {cache.get('kind') or 'artefact'} in {cache.get('dir')} (key {cache['key']})"
    if isinstance(cache, dict):
        return f"cache     {cache.get('kind') or 'on'} in {cache.get('dir')}"
    if info.settings.get("programs"):
        return f"cache     {'hit' if info.cache_hit else 'miss'} ({len(info.settings['programs'])} program(s))"
    if getattr(args, "cache", None) is False:
        return "cache     off (--no-cache)"
    if not takes_option(info.backend, "cache"):
        return f"cache     none (backend {info.backend} keeps no compiled artefact)"
    return f"cache     not used ({'; '.join(info.notes) or 'see engine.info.settings'})"


def engine_header(info: Any) -> dict[str, Any]:
    """The engine part of a JSON document."""
    cache = info.settings.get("cache")
    return {
        "backend": info.backend,
        "device": info.device,
        "providers": list(info.providers),
        "precision": info.precision,
        "runtime_version": info.runtime_version,
        "skipped": dict(info.skipped),
        "notes": list(info.notes),
        "cache_hit": info.cache_hit,
        "cache": dict(cache) if isinstance(cache, dict) else None,
        "settings": {k: info.settings[k] for k in ("session", "provider_options") if k in info.settings},
    }


# ---------------------------------------------------------------------------------------------- calibration data
def quantizer_for(args: argparse.Namespace, source: Any, shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """An :class:`~amdinfer.quantize.Int8Quantizer` from ``--calibration`` when ``--precision int8``."""
    norm = parse_normalization(args)
    if args.precision != "int8":
        if getattr(args, "calibration", None):
            raise OptionError(f"--calibration: only used with --precision int8, got --precision {args.precision}")
    elif not getattr(args, "calibration", None):
        raise OptionError(
            "--precision int8: give calibration data with --calibration FOLDER_OF_IMAGES or --calibration data.npz "
            "(uncalibrated int8 gives wrong answers)"
        )
    if not getattr(args, "calibration", None):
        if norm != (None, None):
            raise OptionError("--mean/--std: normalize --calibration image folders; there is no --calibration")
        return None
    from ..quantize import Int8Quantizer

    samples = load_samples(args.calibration, source.inputs, shapes, "--calibration", norm)
    return Int8Quantizer(calibration=samples, progress=progress_enabled(args), cache=quantizer_cache(args))


def quantizer_cache(args: argparse.Namespace) -> Any:
    """``Int8Quantizer(cache=...)`` from ``--cache/--no-cache/--cache-dir`` (on by default, as for engines)."""
    if getattr(args, "cache_dir", None) is not None:
        if getattr(args, "cache", None) is False:
            raise OptionError(f"--cache-dir {args.cache_dir!r}: given together with --no-cache; drop one of them")
        return args.cache_dir
    return getattr(args, "cache", None) is not False


# ---------------------------------------------------------------------------------------------- engines
def load_engine(
    args: argparse.Namespace, per_batch: Sequence[Mapping[str, tuple[int, ...]]] | None = None, **extra: Any
) -> Any:
    """``amdinfer.load`` from the common options (``--calibration`` turns into an int8 quantizer).

    The backends passed over are notes on stderr (dropped by ``--quiet``; ``--json`` has them in ``skipped``).
    """
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
    options: dict[str, Any] = {**engine_options(args, args.backend), **extra}
    if per_batch:
        bounds = shape_bounds(source.inputs, per_batch)
        if bounds:
            options["shapes"] = bounds
    quantizer = quantizer_for(args, source, per_batch[0] if per_batch else {})
    if quantizer is not None:
        options["quantizer"] = quantizer
    note(args, f"loading {Path(args.model).name} (backend {args.backend}, {args.precision})")
    from ..bundle import is_bundle

    target = args.model if is_bundle(args.model) else source  # a bundle folder: checked and loaded as built
    engine = amdinfer.load(target, backend=args.backend, device=args.device, precision=args.precision, **options)
    _note_skipped(args, engine.info)
    return engine
