"""``shapes=`` bounds as the optimization-profile options of the providers that build one engine per range.

TensorRT-style providers compile one engine for a range of input shapes and take that range as provider
options (``trt_profile_min_shapes="input_ids:1x1,attention_mask:1x1"`` and the ``opt``/``max`` twins). The
other providers take no such hint: the CPU, CUDA and ROCm EPs run any shape, and the MIGraphX EP compiles one
program per shape it meets (bound the shapes with ``batch_buckets=`` or length buckets instead). amdinfer itself
refuses a feed outside the bounds before any provider sees it.

Example:
    >>> from amdinfer.types import parse_shapes
    >>> bounds = parse_shapes({"input_ids": [(1, 1), (32, 512), (8, 128)]})
    >>> profile_options("TensorrtExecutionProvider", bounds)["trt_profile_opt_shapes"]
    'input_ids:8x128'
    >>> profile_options("CPUExecutionProvider", bounds)
    {}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...types import ShapeBounds

__all__ = ["PROFILE_OPTIONS", "batch_knobs", "profile_options"]

#: Provider -> prefix of its ``<prefix>_min_shapes`` / ``_opt_shapes`` / ``_max_shapes`` options.
PROFILE_OPTIONS = {
    "TensorrtExecutionProvider": "trt_profile",
    "NvTensorRTRTXExecutionProvider": "nv_profile",
}


def profile_options(provider: str, bounds: Mapping[str, ShapeBounds]) -> dict[str, str]:
    """The profile options of ``provider`` for ``bounds`` (``{}`` when it takes none or no bounds were given).

    ``opt`` is the bounds' :attr:`~amdinfer.types.ShapeBounds.optimal` shape (``max`` unless given). Raw
    provider options given with the provider (``(name, {...})``) override these.
    """
    prefix = PROFILE_OPTIONS.get(provider)
    if prefix is None or not bounds:
        return {}
    picks = {"min": lambda b: b.min, "opt": lambda b: b.optimal, "max": lambda b: b.max}
    return {
        f"{prefix}_{kind}_shapes": ",".join(
            f"{name}:{'x'.join(str(d) for d in pick(b))}" for name, b in sorted(bounds.items())
        )
        for kind, pick in picks.items()
    }


def batch_knobs(buckets: Sequence[int], bounds: Mapping[str, ShapeBounds]) -> dict[str, Any]:
    """What ``batch_buckets=`` and a dynamic-batch ``shapes=`` say, for providers that compile per batch size (the
    MIGraphX plugin's ``compile_batches`` and ``max_dynamic_batch``; :func:`~._providers.provider_options` maps them).

    Example:
        >>> from amdinfer.types import parse_shapes
        >>> batch_knobs((1, 8), parse_shapes({"x": [(1, 3), (16, 3)]}))
        {'compile_batches': (1, 8), 'max_dynamic_batch': 16}
    """
    knobs: dict[str, Any] = {}
    if buckets:
        knobs["compile_batches"] = tuple(buckets)
    batch_max = {b.max[0] for b in bounds.values() if b.max and b.min[0] != b.max[0]}
    if len(batch_max) == 1:
        knobs["max_dynamic_batch"] = batch_max.pop()
    return knobs
