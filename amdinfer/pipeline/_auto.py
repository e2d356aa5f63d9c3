"""Batch sizes chosen for the device: what ``map(batch_size="auto")`` (the default) and one call on a list use.

One pure rule, :func:`auto_batch_size`, from what the engine is (its device, providers, batch buckets, the
model's fixed batch) and, when known, the device's free memory and one item's input bytes:

* a model with a **fixed batch** ``B`` (no ``batch_buckets``): ``B``, whatever the device (the model takes
  nothing else);
* on the **CPU**: 1. ONNX Runtime's CPU provider already spreads one item over every core, so a larger batch
  adds a batch's latency and host copies without raising the rate;
* on an **accelerator** with a dynamic batch axis: the largest of the engine's ``batch_buckets`` when it has
  them (the batch the engine was prepared for), else 64 (enough rows to keep a GPU busy while the host places
  the next batches); capped by memory when the free memory and the item size are known
  (``free_memory_bytes // (MEMORY_PER_ITEM * item_bytes)``), never below 1.

:func:`split_size` is the sub-batch of one call on a list (``run_batch``, ``__call__`` on a list) on an
accelerator: a list of at least two automatic batches runs as a stream of such batches through the executor's
``map``, so that placing batch k+1 overlaps the engine on batch k; a shorter list is one engine call, its items
placed in parallel (measured on an H200, 2026-12-02: a call of 64 pages split into 4 x 16 ran at 0.36x the engine,
as one batch 0.54x: smaller engine batches and a stream started per call cost more than the overlap gains). The
pipelines record what ``map`` chose in
``engine.info.settings["map_batch_size"]`` (``{"size": n, "why": "..."}``, :func:`record`) and say once per
engine, on an accelerator, how to export a dynamic batch when the model's batch is fixed (:func:`hint_fixed`; the
recipes first make a batch-1 model dynamic when that is proven, ``dynamic_batch="auto"``: the hint then says why
it was not).

Example:
    >>> auto_batch_size("cpu", ["CPUExecutionProvider"], (), None)[0]
    1
    >>> auto_batch_size("cuda:0", ["CUDAExecutionProvider"], (), None)[0]
    64
    >>> auto_batch_size("cuda:0", ["CUDAExecutionProvider"], (8, 16, 32), None)[0]
    32
    >>> split_size(64, 64), split_size(1024, 64)
    (None, 64)
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from ..engines._buckets import bucket_rows

__all__ = [
    "ACCELERATOR_BATCH",
    "MEMORY_PER_ITEM",
    "auto_batch_size",
    "device_free_memory",
    "export_hint",
    "hint_fixed",
    "on_accelerator",
    "record",
    "split_size",
]

log = logging.getLogger("amdinfer.pipeline")

#: the batch an accelerator gets when the engine has no ``batch_buckets``
ACCELERATOR_BATCH = 64
#: the device bytes one item of a batch is budgeted, as a multiple of its input bytes (its input, the activations
#: of the model on it, and the batches in flight; a rough multiple, used only to cap very large items)
MEMORY_PER_ITEM = 32


def on_accelerator(device: Any) -> bool:
    """Whether an engine's ``info.device`` is an accelerator (anything but ``"cpu"``; ``None`` reads as the CPU).

    Example:
        >>> on_accelerator("cpu"), on_accelerator("cuda:0"), on_accelerator(None)
        (False, True, False)
    """
    return str(device or "cpu") != "cpu"


def auto_batch_size(
    device: str | None,
    providers: Sequence[str] = (),
    batch_buckets: Sequence[int] = (),
    fixed_batch: int | None = None,
    free_memory_bytes: int | None = None,
    item_bytes: int | None = None,
) -> tuple[int, str]:
    """The batch size ``map`` uses by default (``batch_size="auto"``) and why: ``(size, why)``. See the module.

    Args:
        device: the engine's ``info.device`` (``"cpu"``, ``"cuda:0"``, ``"rocm:0"``, ...).
        providers: the providers the engine uses (named in ``why``).
        batch_buckets: the engine's ``batch_buckets`` (empty: none).
        fixed_batch: the model's fixed batch size, when its batch axis is fixed, else ``None``.
        free_memory_bytes: the device's free memory, when known.
        item_bytes: one item's input bytes, when known.

    Example:
        >>> auto_batch_size("cpu", fixed_batch=None)
        (1, 'on the CPU: 1 (ONNX Runtime spreads one item over every core; a larger batch adds latency, not rate)')
        >>> auto_batch_size("cuda:0", fixed_batch=1)[0]
        1
        >>> size, why = auto_batch_size("cuda:0", free_memory_bytes=2**30, item_bytes=2**20)  # capped by memory
        >>> size, why.split(": ", 1)[1]
        (32, '64, capped to 32 by the free memory (1024 MiB, 32 x 1.0 MiB an item)')
    """
    where = str(device or "cpu")
    if fixed_batch is not None:
        return int(fixed_batch), (
            f"the model's batch axis is fixed at {fixed_batch} (batch_buckets cannot change a fixed axis; "
            "export the model with a dynamic batch to batch more)"
        )
    if not on_accelerator(where):
        return 1, "on the CPU: 1 (ONNX Runtime spreads one item over every core; a larger batch adds latency, not rate)"
    named = f"{where} ({providers[0]})" if providers else where
    buckets = sorted(int(b) for b in batch_buckets)
    size, why = (
        (buckets[-1], f"on {named}: the engine's largest batch bucket of {tuple(buckets)}")
        if buckets
        else (ACCELERATOR_BATCH, f"on {named} with a dynamic batch axis: {ACCELERATOR_BATCH}")
    )
    if free_memory_bytes is not None and item_bytes:
        cap = max(1, int(free_memory_bytes) // (MEMORY_PER_ITEM * int(item_bytes)))
        if cap < size:
            fitting = [b for b in buckets if b <= cap]
            size = fitting[-1] if fitting else cap
            why += (
                f", capped to {size} by the free memory ({int(free_memory_bytes) / 2**20:.0f} MiB, "
                f"{MEMORY_PER_ITEM} x {int(item_bytes) / 2**20:.1f} MiB an item)"
            )
    return max(1, size), why


def split_size(n: int, batch: int, batch_buckets: Sequence[int] = (), fixed_batch: int | None = None) -> int | None:
    """The sub-batch one call on a list of ``n`` items runs in on an accelerator, or ``None`` for one batch.

    ``batch`` items (the :func:`auto_batch_size` of the engine; at most the largest of its buckets, or a fixed
    batch), split only when the list holds at least two of them, so that placing one overlaps the engine on
    another; a shorter list is one call.

    Example:
        >>> split_size(64, 64), split_size(1024, 64), split_size(128, 64), split_size(64, 16, (8, 16))
        (None, 64, 64, 16)
        >>> split_size(8, 1, fixed_batch=1)
        1
    """
    if fixed_batch is not None:
        sub = max(int(fixed_batch), int(batch))
        return sub if n >= 2 * sub else None
    sub = max(1, int(batch))
    if batch_buckets:
        sub = min(bucket_rows(sorted(batch_buckets), sub), max(batch_buckets))
    return sub if n >= 2 * sub else None


def device_free_memory(device: str | None) -> int | None:
    """The free memory of a CUDA/ROCm ``device`` (``"cuda:0"``) as PyTorch reports it, when PyTorch is already
    imported in this process (it is never imported for this); ``None`` otherwise.

    Example:
        >>> device_free_memory("cpu") is None
        True
    """
    torch = sys.modules.get("torch")
    where = str(device or "cpu")
    if torch is None or not where.startswith(("cuda", "rocm", "hip")):
        return None
    try:
        index = int(where.split(":", 1)[1]) if ":" in where else 0
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        free, _ = torch.cuda.mem_get_info(index)
        return int(free)
    except Exception:  # a build without that device, or another runtime's name for it
        return None


def record(info: Any, size: int, why: str) -> None:
    """Put the choice in ``info.settings["map_batch_size"]`` (once: the first ``map`` that resolves it).

    Example:
        >>> from amdinfer.engines import EngineInfo
        >>> info = EngineInfo(backend="ort")
        >>> record(info, 1, "on the CPU"); record(info, 8, "later")
        >>> info.settings["map_batch_size"]
        {'size': 1, 'why': 'on the CPU'}
    """
    settings = getattr(info, "settings", None)
    if isinstance(settings, dict):
        settings.setdefault("map_batch_size", {"size": int(size), "why": why})


def export_hint(fixed_batch: int, refused: str | None = None) -> str:
    """What to do about a model whose batch axis is fixed: how to export a dynamic one; ``refused``: why the
    recipes' automatic rewrite (``dynamic_batch``, ``engine.info.settings["dynamic_batch"]``) did not apply.

    Example:
        >>> "dynamic=True" in export_hint(1)
        True
        >>> export_hint(1, "dynamic_batch=False").split("; ")[1]
        'it was not made dynamic (dynamic_batch=False)'
    """
    why = f"; it was not made dynamic ({refused})" if refused else ""
    return (
        f"the model's batch axis is fixed at {fixed_batch}, so on this device every engine call takes "
        f"{fixed_batch} item(s){why}; to batch more, export it with a dynamic batch axis: Ultralytics "
        '`model.export(format="onnx", dynamic=True)`, torch.onnx.export(..., dynamic_axes={"images": {0: "batch"}}) '
        "(your input's name); amdinfer.load(..., batch_buckets=...) cannot help a fixed axis"
    )


def hint_fixed(info: Any, fixed_batch: int | None) -> bool:
    """On an accelerator, log :func:`export_hint` once per engine (INFO, logger ``amdinfer.pipeline``) and keep it
    in ``info.notes``; returns whether it logged now. When ``info.settings["dynamic_batch"]`` records a rewrite
    that did not apply, the hint says why.

    Example:
        >>> from amdinfer.engines import EngineInfo
        >>> info = EngineInfo(backend="ort", device="cuda:0")
        >>> hint_fixed(info, 1), hint_fixed(info, 1), hint_fixed(EngineInfo(backend="ort"), 1)
        (True, False, False)
    """
    if fixed_batch is None or not on_accelerator(getattr(info, "device", "cpu")):
        return False
    notes = getattr(info, "notes", None)
    record = (getattr(info, "settings", None) or {}).get("dynamic_batch")
    refused = record.get("why") if isinstance(record, dict) and not record.get("applied") else None
    hint = export_hint(fixed_batch, refused)
    if not isinstance(notes, list) or hint in notes:
        return False
    notes.append(hint)
    log.info("%s", hint)
    return True
