"""``amdinfer compile MODEL --shapes-from LOG``: compile the buckets the planner proposes for observed shapes.

``LOG`` is a server's shape log (``amdinfer serve --shape-log FILE``: the engine calls' shapes of the model named
like the file, or the only model in it), a JSON list of shapes (``[[1, 3, 224, 224], ...]``, or batch sizes
``[1, 1, 3]``), a JSON histogram (``{"1x3x224x224": 90}``) or text, one shape per line (``1x3x224x224`` or
``1,3,224,224``, optionally followed by a count; ``#`` starts a comment). The model's first input is planned
(:func:`amdinfer.engines._plan.plan_buckets`, at most ``--max-buckets``): along the batch axis, and along the
axes the model declares safe to pad (``amdinfer.pad_axes``); shapes that differ elsewhere get buckets of their
own.

Example:
    >>> sorted(parse_shapes_text("# batch sizes\\n1\\n3 2\\n1x3x8\\n").items())
    [((1,), 1), ((1, 3, 8), 1), ((3,), 2)]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import OptionError

__all__ = ["add_shapes_from_argument", "parse_shapes_text", "plan_line", "read_shapes", "shapes_from"]

_LINE = re.compile(r"^\s*(\d+(?:\s*[x,]\s*\d+)*)(?:\s+(\d+))?\s*$")


def add_shapes_from_argument(p: argparse.ArgumentParser) -> None:
    """``--shapes-from LOG`` and ``--max-buckets N`` (``amdinfer compile``)."""
    from ._common import positive_int

    p.add_argument(
        "--shapes-from",
        metavar="LOG",
        nargs="+",
        default=None,
        help="compile the buckets planned from observed shapes: a server's --shape-log, a JSON list or histogram "
        "of shapes, or text (one shape per line, e.g. 4x3x224x224 [count]); several are added up (one per server "
        "process); instead of --batch",
    )
    p.add_argument(
        "--max-buckets",
        type=positive_int,
        default=4,
        metavar="N",
        help="with --shapes-from: the most buckets (compiles) to plan (default 4)",
    )


def parse_shapes_text(text: str, where: str = "LOG") -> Counter[tuple[int, ...]]:
    """Shapes of a text file: one per line (``1x3x8``, ``1,3,8`` or a batch size), then an optional count."""
    out: Counter[tuple[int, ...]] = Counter()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            raise OptionError(f"{where}: line {number}: got {raw.strip()!r}, expected a shape like 4x3x224x224 [count]")
        out[tuple(int(d) for d in re.split(r"\s*[x,]\s*", m.group(1)))] += int(m.group(2) or 1)
    return out


def _from_log(data: dict[str, Any], where: str, model: str) -> tuple[str, Counter[tuple[int, ...]]]:
    models = data.get("models") or {}
    name = model if model in models else next(iter(models)) if len(models) == 1 else None
    if name is None:
        raise OptionError(f"{where}: a shape log of models {sorted(models)}, none named {model!r} (the model's stem)")
    inputs = models[name].get("inputs") or {}
    if not inputs:
        raise OptionError(f"{where}: model {name!r} has no shapes recorded yet (serve some requests first)")
    first = next(iter(inputs))
    counts = inputs[first].get("calls") or inputs[first].get("requests") or {}
    return first, Counter({tuple(int(d) for d in k.split("x")): int(n) for k, n in counts.items()})


def read_shapes(path: str | Path, model: str = "") -> tuple[str | None, Counter[tuple[int, ...]]]:
    """``(input name or None, {shape: count})`` from a shape log, a JSON list/histogram or a text file.

    Raises:
        OptionError: the file is missing or holds no shapes in a known form (named, with the form expected).
    """
    where = f"--shapes-from {path}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise OptionError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except ValueError:
        return None, parse_shapes_text(text, where)
    try:
        if isinstance(data, dict) and "models" in data:
            return _from_log(data, where, model)
        if isinstance(data, dict):
            return None, Counter({tuple(int(d) for d in str(k).split("x")): int(n) for k, n in data.items()})
        if isinstance(data, list):
            return None, Counter(tuple([int(s)] if isinstance(s, int) else (int(d) for d in s)) for s in data)
    except OptionError:
        raise
    except (TypeError, ValueError, AttributeError):
        pass
    raise OptionError(f"{where}: expected a shape log, a JSON list of shapes or a {{'1x3x8': count}} histogram")


def shapes_from(args: argparse.Namespace) -> list[dict[str, tuple[int, ...]]] | None:
    """The input shapes to compile for ``--shapes-from`` (``None`` when not given); sets ``args.batch`` to the
    planned batch sizes when only the batch axis is bucketed, and ``args.shapes_plan`` to the plan.

    Raises:
        OptionError: with ``--batch``; shapes of another rank than the model's first input, or that vary beyond
            what can be bucketed (see :func:`~amdinfer.engines._plan.plan_buckets`).
    """
    if getattr(args, "shapes_from", None) is None:
        return None
    if getattr(args, "batch", None):
        raise OptionError("--shapes-from: plans the batch sizes itself; drop --batch")
    from ..engines._new_shapes import pad_axes_from
    from ..engines._plan import plan_buckets
    from ._feeds import model_specs, plan_feeds

    source = model_specs(args.model)
    specs = [s for s in source.inputs if s.is_tensor]
    name, hist = None, Counter[tuple[int, ...]]()
    for log in args.shapes_from:  # one per server process (--shape-log FILE.<pid>.json): added up
        found, counts = read_shapes(log, Path(str(args.model)).stem)
        name, hist = name or found, hist + counts
    spec = next((s for s in specs if s.name == name), specs[0])
    if spec.rank > 1 and {len(s) for s in hist} == {1}:  # batch sizes: plan them, every input gets them
        plan = plan_buckets(hist, max_buckets=args.max_buckets)
        args.shapes_plan, args.batch = plan, list(plan.batch_sizes)
        return plan_feeds(args, args.batch)
    bad = sorted({len(s) for s in hist} - {spec.rank})
    if bad:
        raise OptionError(
            f"--shapes-from: input {spec.name!r} has rank {spec.rank} ({spec.shape}); got shapes of rank {bad}"
        )
    declared = pad_axes_from({p.key: p.value for p in source.proto.metadata_props}, source.inputs)
    axes = (0, *declared.get(spec.name, ()))
    plan = plan_buckets(hist, max_buckets=args.max_buckets, axes=axes)
    args.shapes_plan = plan
    batch_only = all(s[1:] == plan.shapes[0][1:] for s in plan.shapes)
    if batch_only:
        args.batch = list(plan.batch_sizes)
    if not batch_only and getattr(args, "bundle", None):
        raise OptionError(
            f"--shapes-from with --bundle: the planned buckets {list(plan.shapes)} vary beyond the batch axis, and a "
            "bundle's buckets come from --batch/--input-shapes; bundle the batch sizes, or compile these into the cache"
        )
    if len(specs) == 1:
        return [{spec.name: s} for s in plan.shapes]
    if batch_only:  # every input gets the planned batch sizes
        return plan_feeds(args, args.batch)
    raise OptionError(
        f"--shapes-from: the shapes of {spec.name!r} vary beyond the batch axis, and the model has inputs "
        f"{[s.name for s in specs]}; plan a single-input model, or compile with --batch and --shape"
    )


def plan_line(args: argparse.Namespace) -> str | None:
    """The compile report's line for a ``--shapes-from`` plan (``None`` without one).

    Example:
        >>> from amdinfer.engines._plan import plan_buckets
        >>> plan_line(argparse.Namespace(shapes_plan=plan_buckets([1, 1, 3, 7, 8], 2), shapes_from=["log.json"]))
        'planned   2 buckets from log.json: (3,), (8,); padding 5 elements over 20 fed (25.0%)'
    """
    plan = getattr(args, "shapes_plan", None)
    if plan is None:
        return None
    shown, logs = ", ".join(map(str, plan.shapes)), ", ".join(map(str, args.shapes_from))
    return (
        f"planned   {len(plan.shapes)} buckets from {logs}: {shown}; padding {plan.waste} elements over "
        f"{plan.fed} fed ({100 * plan.overhead:.1f}%)"
    )
