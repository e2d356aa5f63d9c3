"""The flags of ``amdinfer serve``: their definitions and the argparse types that parse and bound them.

:func:`add_arguments` adds them to the ``serve`` parser (``amdinfer.cli`` calls it through :mod:`._cli`, which
checks the parsed flags and runs the server). Each bounded flag is parsed by :func:`._bounds.check_flag`, the one
table of bounds that ``models.toml`` and load requests use too. ``--recipe``'s choices and each recipe's own
flags come from the recipe registry (:data:`amdinfer.recipes.RECIPES`; :data:`RECIPE_FLAGS` says which flags
belong to which ``--recipe``).

Example:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="amdinfer serve")
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["m.onnx", "--batch-buckets", "8,16", "--pipeline-threads", "auto"])
    >>> args.batch_buckets, args.pipeline_threads, args.grpc_port
    ((8, 16), None, 8081)
    >>> args = parser.parse_args(["m.onnx"])  # not given: the server derives them from the model and the device
    >>> args.max_batch_size, args.max_delay_ms, args.batch_buckets, args.workers_per_device
    (None, None, None, None)
    >>> parser.parse_args(["m.onnx", "--batch-buckets", "none", "--max-batch-size", "auto"]).batch_buckets
    ()
    >>> RECIPE_FLAGS["classify"]
    ('topk', 'decoder', 'pipeline_threads', 'max_image_pixels')
    >>> parser.parse_args(["m.onnx", "--recipe", "ocr", "--text-score", "0.6"]).text_score
    0.6
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from .._support._recipes import RECIPES, SERVED_RECIPES, RecipeOption
from ._bounds import BOUNDS, FLAG, check, check_buckets, check_flag

__all__ = ["RECIPE_FLAGS", "SHARED_MEMORY", "add_arguments"]

_LEVELS = ("debug", "info", "warning", "error")
#: ``--shared-memory``'s choices -> ``serve(shared_memory=...)``
SHARED_MEMORY = {"auto": None, "on": True, "off": False}
#: each served recipe's own flags (argparse dests), from its record; a flag of another recipe, or of none, is an error
RECIPE_FLAGS = {name: RECIPES[name].flags for name in SERVED_RECIPES}


def _devices(text: str) -> list[int]:
    try:
        devices = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected comma-separated GPU indices like 0,1") from None
    if not devices:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected at least one GPU index")
    return devices


def _port(text: str) -> int:
    from ..errors import OptionError

    try:
        return int(check("http_port", int(text)))
    except (ValueError, OptionError):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a TCP port 0..65535") from None


def _grpc_port(text: str) -> int:
    return -1 if text.strip() == "-1" else _port(text)


def _bounded(option: str) -> Callable[[str], Any]:
    """The argparse type of a bounded flag: its text parsed and checked by :func:`._bounds.check_flag` (one table
    of bounds for the flags, ``models.toml`` and load requests)."""

    def parse(text: str) -> Any:
        from ..errors import OptionError

        try:
            return check_flag(option, text)
        except OptionError as exc:  # argparse names the flag itself: "argument --x: got ..."
            raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None

    parse.__name__ = option
    return parse


def _auto_or(option: str) -> Callable[[str], Any]:
    """:func:`_bounded`, or ``None`` for ``auto``."""
    bounded = _bounded(option)

    def parse(text: str) -> Any:
        if text.strip().lower() == "auto":
            return None
        try:
            return bounded(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc}, or auto") from None

    parse.__name__ = option
    return parse


def _byte_count(text: str) -> int:
    from ..errors import OptionError

    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        number = float(t[: len(t) - len(unit)]) * units[unit]
        value: Any = int(number) if math.isfinite(number) and number == int(number) else text
    except ValueError:
        value = text
    try:
        return int(check("max_request_bytes", value, FLAG))
    except OptionError:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected {BOUNDS['max_request_bytes'].accepted()}, e.g. 256M or 1G"
        ) from None


def _buckets(text: str) -> tuple[int, ...]:
    from ..errors import OptionError

    try:
        sizes: list[Any] = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected comma-separated batch sizes like 8,16,32") from None
    try:
        return check_buckets(sizes, FLAG)
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(": ")[2]) from None


def _buckets_or_auto(text: str) -> tuple[int, ...] | None:
    """:func:`_buckets`; ``auto``: ``None`` (the server's default); ``none``: ``()`` (no buckets)."""
    word = text.strip().lower()
    if word == "auto":
        return None
    if word == "none":
        return ()
    return _buckets(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``serve`` flags (registered by ``amdinfer.cli``; see docs/serving.md).

    Example:
        >>> from amdinfer.cli import build_parser
        >>> args = build_parser().parse_args(["serve", "m.onnx", "--devices", "0,1", "--max-batch-size", "64"])
        >>> args.devices, args.max_batch_size, args.host, args.max_request_bytes
        ([0, 1], 64, '127.0.0.1', 268435456)
        >>> build_parser().parse_args(["serve", "m.onnx", "--max-request-bytes", "64M"]).max_request_bytes
        67108864
        >>> args = build_parser().parse_args(["serve", "m.onnx", "--verify-sample", "0.01"])
        >>> args.verify_sample, args.verify_reference
        (0.01, 'ort')
        >>> [build_parser().parse_args(["serve", "m.onnx", "--workers-per-device", n]).workers_per_device
        ...  for n in ("2", "auto")]
        [2, None]
    """
    _add_served_arguments(p)
    _add_engine_arguments(p)
    _add_canary_arguments(p)
    _add_recipe_arguments(p)


def _add_served_arguments(p: argparse.ArgumentParser) -> None:
    """What is served and where: the model or repository, the addresses, request limits, logging."""
    p.add_argument("model", nargs="?", default=None, help="path to an .onnx file (or --model-repository DIR)")
    p.add_argument(
        "--model-repository",
        default=None,
        metavar="DIR",
        help="serve every model of a folder (*.onnx, NAME/model.onnx, options in DIR/models.toml); "
        "Triton's repository API loads and unloads them (see docs/serving.md)",
    )
    p.add_argument("--name", default=None, help="model name in the URLs (default: the file's stem)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0: all)")
    p.add_argument("--http-port", type=_port, default=8080, help="REST port (default 8080)")
    p.add_argument("--grpc-port", type=_grpc_port, default=8081, help="gRPC port (default 8081; -1: no gRPC)")
    p.add_argument(
        "--max-request-bytes",
        type=_byte_count,
        default=256 << 20,
        help="largest request body/message taken, e.g. 64M (default 256M: 64 images of 1024x1024x3); "
        "larger REST bodies get 413 before they are read",
    )
    p.add_argument(
        "--max-image-pixels",
        type=_bounded("max_image_pixels"),
        metavar="N",
        help="a recipe's images: the most pixels (width x height) a header may declare; larger ones get 400 "
        "before decoding (default 89478485, Pillow's limit)",
    )
    p.add_argument(
        "--shared-memory",
        choices=list(SHARED_MEMORY),
        default="auto",
        help="take tensors in system shared memory registered by clients on this host (Triton's extension); "
        "auto (default): on when --host is a loopback address",
    )
    p.add_argument(
        "--log-level",
        choices=_LEVELS,
        default=None,
        help="amdinfer's log level (default info: one start line, one line per refused request); debug adds "
        "KServe's and uvicorn's lines and per-request access lines",
    )
    p.add_argument(
        "--shape-log",
        default=None,
        metavar="FILE",
        help="write the request and engine-call shapes per model and input (JSON histogram, every few seconds and "
        "at exit; FILE.<pid> per process when there are several) for amdinfer compile --shapes-from FILE",
    )
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for the per-GPU processes


def _add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """How each model runs: backend, devices, batching, server processes per device."""
    p.add_argument(
        "--max-batch-size",
        type=_auto_or("max_batch_size"),
        default=None,
        metavar="N",
        help="items per engine call at most, 1..4096 (1: no batching); default: auto (64 on an accelerator with a "
        "dynamic batch axis, 32 on the CPU, B for a fixed batch B; the largest --batch-buckets when given)",
    )
    p.add_argument(
        "--max-delay-ms",
        type=_auto_or("max_delay_ms"),
        default=None,
        metavar="MS",
        help="how long a request waits for others (ms, 0..60000); default: auto (2)",
    )
    p.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    p.add_argument("--providers", help="comma-separated ONNX Runtime providers, e.g. cuda or cpu")
    p.add_argument("--precision", default="fp32", help="fp32, fp16, bf16")
    p.add_argument("--devices", type=_devices, default=[0], help="GPU indices, one worker each (default 0)")
    p.add_argument(
        "--batch-buckets",
        type=_buckets_or_auto,
        default=None,
        help="batch sizes the engine runs (padded up to the next), e.g. 8,16,32,64: fewer shapes to compile "
        "(1 to 64 sizes, each 1..4096; none: no padding); default: auto (8,16,32,64 on an accelerator with a dynamic "
        "batch axis, cut at --max-batch-size; none on the CPU or with a fixed batch)",
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="do not run each engine (or recipe pipeline) at its batch sizes first"
    )
    p.add_argument(
        "--on-new-shape",
        choices=["compile", "pad", "error"],
        default=None,
        help="a request shape the engine was not warmed for: compile it (default; logged as a WARNING), pad it to "
        "a warmed shape, or refuse it (400); see docs/serving.md",
    )
    p.add_argument(
        "--single-process",
        action="store_true",
        help="with several --devices: one process with a worker thread per GPU (default: a process per GPU)",
    )
    p.add_argument(
        "--workers-per-device",
        type=_auto_or("workers_per_device"),
        default=None,
        metavar="N",
        help="server processes per device, all on the same ports (SO_REUSEPORT), each with its own engine; "
        "default: auto (max(1, min(4, usable cores // (2 x devices)))); at most min(64, 4 x usable cores)",
    )


def _add_canary_arguments(p: argparse.ArgumentParser) -> None:
    """The numerical canary (``--verify-sample``)."""
    p.add_argument(
        "--verify-sample",
        type=_bounded("verify_sample"),
        default=0.0,
        metavar="RATE",
        help="numerical canary: re-run this fraction of requests (0..1, e.g. 0.01) on a reference engine in the "
        "background and export the divergence as metrics, logging requests over tolerance (default 0: off)",
    )
    p.add_argument(
        "--verify-reference",
        choices=["ort", "numpy"],
        default="ort",
        help="the canary's reference: ort (CPU fp32 ONNX Runtime, default) or numpy (the NumPy reference, "
        "for small models)",
    )


def _recipe_flag_options() -> dict[str, tuple[RecipeOption, list[str]]]:
    """Every flag option of the served recipes, once, with the recipes that take it (one record per name)."""
    out: dict[str, tuple[RecipeOption, list[str]]] = {}
    for name in SERVED_RECIPES:
        for option in RECIPES[name].options:
            if option.flag:
                out.setdefault(option.name, (option, []))[1].append(name)
    return out


def _flag_help(option: RecipeOption, owners: list[str]) -> str:
    if not option.model:
        return f"{', '.join(owners)}: {option.help}"
    return f"{', '.join(owners)}: {option.help} (.onnx{'' if option.required else '; default: none'})"


def _add_recipe_arguments(p: argparse.ArgumentParser) -> None:
    """``--recipe`` and each recipe's own flags (see ``RECIPE_FLAGS``), from the recipe registry."""
    served = "; ".join(f"{n}: {RECIPES[n].summary}" for n in SERVED_RECIPES)
    p.add_argument(
        "--recipe",
        choices=list(SERVED_RECIPES),
        default=None,
        help=f"serve a recipe of the model ({served}): clients send JPEG/PNG files as a BYTES input 'images' "
        "(see docs/serving.md); default: the bare model",
    )
    for option, owners in _recipe_flag_options().values():
        p.add_argument(
            option.cli,
            type=option.kinds[0],
            choices=list(option.choices) or None,
            default=None,
            metavar="PATH" if option.model else None,
            help=_flag_help(option, owners),
        )
    p.add_argument(
        "--pipeline-threads",
        type=_auto_or("pipeline_threads"),
        default=None,
        metavar="N",
        help="threads that decode and resize a recipe's images in each server process, 1..256; default: auto (all "
        "usable cores in one process; max(2, cores // processes) with several)",
    )
