"""Input shapes and feeds of the subcommands: the model's fixed dims, ``--input-shapes``, ``--batch``, ``--inputs``.

Re-exported by :mod:`amdinfer.cli._common`, where the subcommands import them from.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._support._files import check_allocation
from ..engines._checks import tensors_only
from ..errors import InputError, OptionError

__all__ = [
    "feed_shapes",
    "feeds_for",
    "fixed_batch_hint",
    "load_npz",
    "make_feeds",
    "model_specs",
    "plan_feeds",
    "shape_bounds",
]


def load_npz(path: str, what: str = "--inputs") -> dict[str, np.ndarray]:
    """Arrays of an ``.npz`` file: a regular file, headers checked before allocating, no pickled objects."""
    from .._support._files import read_npz

    return read_npz(path, what)


def _merge_shapes(values: list[dict[str, tuple[int | None, ...]]] | None) -> dict[str, tuple[int | None, ...]]:
    merged: dict[str, tuple[int | None, ...]] = {}
    for v in values or []:
        merged.update(v)
    return merged


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
                        f"input {spec.name!r}: axis {i} is dynamic ({_brief(model_shape[i])!r}); give its size with "
                        f"--input-shapes {spec.name}:{'x'.join(_dim(x, model_shape[j]) for j, x in enumerate(shape))} "
                        f"(a number for {_brief(model_shape[i])}) or inputs with --inputs"
                    )
        out[spec.name] = tuple(int(d) for d in shape)  # type: ignore[arg-type]
        check_allocation(
            out[spec.name], spec.dtype, f"input {spec.name!r} (random{f', --batch {batch}' if batch else ''})"
        )
    batched = [s for s in specs if s.shape and not isinstance(s.shape[0], int)]
    if batch is not None and specs and not batched and any(s.shape and s.shape[0] != batch for s in specs):
        fixed = ", ".join(f"{s.name} {_fmt(s.shape)}" for s in specs)
        raise OptionError(f"--batch {batch}: the model's batch axis is fixed ({fixed}); {fixed_batch_hint(specs)}")
    return out


def fixed_batch_hint(specs: Sequence[Any]) -> str:
    """The way forward for ``--batch`` on a model whose batch axis is fixed: its own batch, or a dynamic axis.

    Example:
        >>> from amdinfer.types import TensorSpec
        >>> fixed_batch_hint([TensorSpec("images", "float32", (1, 3, 64, 64))]).split(", or ")[0]
        "give --batch 1 (the model's own batch)"
    """
    first = specs[0]
    own = first.shape[0] if first.shape else 1
    return (
        f"give --batch {own} (the model's own batch), or give the model a dynamic batch axis: export it with one "
        f'(Ultralytics model.export(format="onnx", dynamic=True); torch.onnx.export(..., '
        f'dynamic_axes={{"{first.name}": {{0: "batch"}}}})) or rewrite this file with '
        "amdinfer._support._dynamic_batch.make_batch_dynamic (what amdinfer.yolo/classify do with "
        "dynamic_batch=True, proven on the CPU first; docs/pipeline.md), then bench the rewritten file"
    )


def _dim(value: int | None, model_dim: Any) -> str:
    if value is not None:
        return str(value)
    return str(model_dim) if model_dim and len(str(model_dim)) <= 24 else "?"


def _brief(dim: Any, most: int = 24) -> str:
    """A symbolic dimension for a message: a long traced expression cut to ``most`` characters.

    Example:
        >>> _brief("height"), _brief("Floor(Div(Add(Mul(height, 2), Sub(width, 1)), 32))")
        ('height', 'Floor(Div(Add(Mul(hei...')
    """
    text = str(dim)
    return text if len(text) <= most else text[: most - 3] + "..."


def _fmt(shape: Sequence[Any]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def make_feeds(specs: Sequence[Any], shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs: floats in [0, 1), ints in [0, 10), random bools."""
    tensors_only(specs, [], "the command line (its random feeds are tensors; run such a model from Python)")
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
    """The model's :class:`~amdinfer.ModelSource` (inputs and outputs without building an engine); for a bundle
    folder (``amdinfer compile --bundle``), its compiled model's."""
    from ..bundle import bundled_model, is_bundle
    from ..model import ModelSource

    return bundled_model(model) if is_bundle(model) else ModelSource.from_any(model)


def shape_bounds(specs: Sequence[Any], per_batch: Sequence[Mapping[str, tuple[int, ...]]]) -> dict[str, Any]:
    """``shapes=`` for ``amdinfer.load``: min/max over the shapes that will run, for inputs with dynamic dims."""
    out: dict[str, Any] = {}
    for spec in specs:
        if all(isinstance(d, int) for d in spec.shape) or not spec.is_tensor:  # make_feeds names a sequence
            continue
        shapes = [s[spec.name] for s in per_batch]
        lo = tuple(int(v) for v in np.min(shapes, axis=0))
        hi = tuple(int(v) for v in np.max(shapes, axis=0))
        out[spec.name] = lo if lo == hi else [lo, hi]
    return out


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
