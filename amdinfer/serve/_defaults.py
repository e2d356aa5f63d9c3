"""What ``amdinfer serve`` runs with when no flag says: batching, buckets, processes and decode threads, derived from
the model and the device.

:func:`served_defaults` is the rule, one pure function over plain facts (the engine's device string and providers,
the model's batch axis, the cores and devices), so that CPU tests drive it with fake devices. The server calls it
twice: before loading with the device :func:`expected_device` predicts (``batch_buckets`` are an engine option, so
they must be known at load), and after loading with the engine's own ``info.device``; when the two disagree on the
buckets (an accelerator runtime installed but no device to run on) the engines are loaded again with the buckets of
the device they landed on.

The rule (docs/serving.md, "Defaults"):

=====================================  ===============  ===================  =========
device, model                          max batch        batch buckets        delay
=====================================  ===============  ===================  =========
accelerator, dynamic batch axis        64               8,16,32,64           2 ms
CPU, dynamic batch axis                32               none                 2 ms
fixed batch ``B`` (any device)         ``B``            none                 2 ms
no shared batch axis                   1                none                 2 ms
=====================================  ===============  ===================  =========

Why these: a GPU runs a batch of 8 in about the time of 1 (one kernel launch per layer either way), so padding small
batches up to 8 costs little there, while each bucket is one shape to warm up (and, for MIGraphX, one program to
compile): four buckets cover 1..64 rows with at most 2x padding above 8. ``1,2,4,...,64`` would add three warm shapes
for batches that a loaded server rarely forms. On a CPU the work grows with the rows, so padding costs its full
share and there are no buckets. 64 rows with a 2 ms window was the setting that took ResNet-50 fp16 served over
gRPC from 0.58x to 0.91x of the engine on an H200 (docs/performance.md). A recipe over a fixed-batch engine keeps the
accelerator's 64 (the pipeline runs chunks of ``B`` while its decode threads work on the whole batch), and never
buckets: its graph holds ``B`` (a batch-1 export's Reshapes), so a chunk padded to a bucket fails inside it. Its
``B`` is the model's (``FusedPipeline.fixed_batch``), not the fused graph's input axis, which is ``N``; buckets
given for it are refused at load.

Processes (``--workers-per-device``) and decode threads (``--pipeline-threads``) depend on the host only:
``max(1, min(4, cores // (2 x devices)))`` processes per device, and each recipe process decodes on all usable
cores when it is alone, ``max(2, cores // processes)`` when the host runs several.

Flags given always win; a given ``max_batch_size`` cuts the automatic buckets to it (``48``: ``8,16,32,48``), given
buckets make the largest one the automatic ``max_batch_size``.

Example:
    >>> d = served_defaults("cuda:0", ["CUDAExecutionProvider"], "N", cores=16)
    >>> d.max_batch_size, d.batch_buckets, d.max_delay_ms, d.workers_per_device
    (64, (8, 16, 32, 64), 2.0, 4)
    >>> print(d.batching_line())
    batches of up to 64 rows within 2 ms, buckets 8,16,32,64 (auto: CUDA EP, dynamic batch axis 'N')
    >>> print(served_defaults("cpu", ["CPUExecutionProvider"], "N", cores=2).batching_line())
    batches of up to 32 rows within 2 ms, no buckets (auto: CPU EP, dynamic batch axis 'N')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACCELERATOR_BUCKETS",
    "NOTE_ENV",
    "ServedDefaults",
    "default_workers_per_device",
    "expected_device",
    "is_accelerator",
    "model_batch",
    "pipeline_threads_per_process",
    "served_defaults",
]

#: the batch buckets of a dynamic-batch model on an accelerator
ACCELERATOR_BUCKETS = (8, 16, 32, 64)
#: the most server processes per device the default gives (8 on one H200 ran at a quarter of 4's rate)
MAX_DEFAULT_WORKERS_PER_DEVICE = 4
#: the environment variable in which ``amdinfer serve`` hands its server processes the processes' part of the start
#: line (what it chose and why); a process started otherwise has none
NOTE_ENV = "AMDINFER_SERVE_NOTE"

_ACCELERATOR_MAX_BATCH = 64
_CPU_MAX_BATCH = 32
_DELAY_MS = 2.0
_FLAGS = {
    "max_batch_size": "--max-batch-size",
    "batch_buckets": "--batch-buckets",
    "max_delay_ms": "--max-delay-ms",
    "workers_per_device": "--workers-per-device",
    "pipeline_threads": "--pipeline-threads",
}


@dataclass(frozen=True)
class ServedDefaults:
    """The values one served model runs with, and where each came from (``why[key]``: ``"given"``,
    ``"auto: ..."``, or another source such as ``"the engine's"``: the buckets of an engine loaded by the caller).

    Example:
        >>> d = served_defaults("cpu", [], 1, cores=2, given={"max_delay_ms": 5})
        >>> d.max_batch_size, d.why["max_delay_ms"], d.why["max_batch_size"]
        (1, 'given', 'auto: cpu, fixed batch 1')
    """

    max_batch_size: int
    batch_buckets: tuple[int, ...]
    max_delay_ms: float
    workers_per_device: int
    pipeline_threads: int | None
    why: dict[str, str] = field(default_factory=dict)

    def batching_line(self) -> str:
        """What the start line says of the batching: ``batches of up to 64 rows within 2 ms, buckets 8,16,32,64
        (auto: ...)``; a given value is followed by its flag, the automatic ones' reason comes once at the end.

        Example:
            >>> print(served_defaults("cuda:0", [], "N", cores=2, given={"max_batch_size": 16}).batching_line())
            batches of up to 16 rows (--max-batch-size) within 2 ms, buckets 8,16 (auto: cuda:0, dynamic batch axis 'N')
        """

        def flag(key: str) -> str:
            why = self.why.get(key, "given")
            if why == "given":
                return f" ({_FLAGS[key]})"
            return "" if why.startswith("auto") or (key == "batch_buckets" and not self.batch_buckets) else f" ({why})"

        buckets = f"buckets {','.join(map(str, self.batch_buckets))}" if self.batch_buckets else "no buckets"
        text = f"batches of up to {self.max_batch_size} rows{flag('max_batch_size')} within {self.max_delay_ms:g} ms"
        text += f"{flag('max_delay_ms')}, {buckets}{flag('batch_buckets')}"
        keys = ("max_batch_size", "max_delay_ms", "batch_buckets")
        auto = next((self.why[k] for k in keys if self.why.get(k, "given") != "given"), None)
        return f"{text} ({auto})" if auto else text

    def processes_line(self, processes: int | None = None) -> str:
        """``4 processes/device (auto: ...)`` and, for a recipe, ``4 decode threads each (auto: ...)``.

        Args:
            processes: the server processes on the host (default ``workers_per_device``: one device).

        Example:
            >>> served_defaults("cuda:0", [], "N", cores=16, recipe="classify").processes_line()
            '4 processes/device (auto: 16 cores, 1 device); 4 decode threads each (auto: 16 cores / 4 processes)'
        """
        n = self.workers_per_device
        text = f"{n} process{'es' if n > 1 else ''}/device ({self._source('workers_per_device')})"
        if self.pipeline_threads is not None:
            each = " each" if (processes or n) > 1 else ""
            text += f"; {self.pipeline_threads} decode threads{each} ({self._source('pipeline_threads')})"
        return text

    def _source(self, key: str) -> str:
        why = self.why.get(key, "given")
        return _FLAGS[key] if why == "given" else why


def default_workers_per_device(devices: int, cores: int) -> int:
    """Server processes per device unless told: ``max(1, min(4, cores // (2 * devices)))``.

    Each process parses, validates and batches its own requests while holding its own GIL; two cores per process
    leave one for that and one for its engine thread, gRPC's and ONNX Runtime's threads. Past four per GPU the
    engine, not the host, is the limit (docs/serving.md).

    Example:
        >>> default_workers_per_device(1, 2), default_workers_per_device(1, 16), default_workers_per_device(2, 12)
        (1, 4, 3)
    """
    return max(1, min(MAX_DEFAULT_WORKERS_PER_DEVICE, cores // (2 * max(1, devices))))


def pipeline_threads_per_process(processes: int, cores: int) -> int:
    """A recipe's decode threads in each of ``processes`` server processes on one host: ``max(2, cores //
    processes)`` (every process taking all the cores would run ``processes x cores`` threads on ``cores`` cores).

    Example:
        >>> pipeline_threads_per_process(4, 16), pipeline_threads_per_process(8, 8)
        (4, 2)
    """
    return max(2, cores // max(1, processes))


def _provider_label(device: str, providers: Sequence[str]) -> str:
    """``CUDA EP`` for ``CUDAExecutionProvider``; the device string when no provider is named (a native backend)."""
    if providers:
        name = str(providers[0])
        return name.removesuffix("ExecutionProvider") + " EP" if name.endswith("ExecutionProvider") else name
    return device or "cpu"


def is_accelerator(device: str) -> bool:
    """Whether an engine's ``info.device`` is an accelerator (anything but the host CPU).

    Example:
        >>> is_accelerator("cuda:0"), is_accelerator("cpu"), is_accelerator("")
        (True, False, False)
    """
    return bool(device) and str(device).split(":")[0].lower() != "cpu"


def served_defaults(
    device: str,
    providers: Sequence[str] = (),
    batch: str | int | None = "N",
    *,
    cores: int,
    devices: int = 1,
    recipe: str | None = None,
    given: Mapping[str, Any] | None = None,
) -> ServedDefaults:
    """The values a served model runs with: those ``given`` (not ``None``), the rule's for the others.

    Args:
        device: the engine's device as in ``engine.info.device`` (``"cpu"``, ``"cuda:0"``, ``"migraphx:0"``).
        providers: its ONNX Runtime providers, first one used (``engine.info.providers``; empty: a native backend).
        batch: the model's batch axis: a symbol name (``"N"``: dynamic), an int (a fixed batch size), ``None`` (no
            axis 0 that requests can share; each request is its own engine call).
        cores, devices: the host's usable cores; the devices served.
        recipe: the served recipe (``None``: the bare model; a recipe gets ``pipeline_threads``).
        given: the values the user set, by key (``max_batch_size``, ``batch_buckets``, ``max_delay_ms``, ...).

    Example:
        >>> d = served_defaults("cuda:0", ["CUDAExecutionProvider"], "N", cores=16, given={"max_batch_size": 48})
        >>> d.max_batch_size, d.batch_buckets
        (48, (8, 16, 32, 48))
        >>> served_defaults("cuda:0", [], "N", cores=16, given={"batch_buckets": (4, 8)}).max_batch_size
        8
        >>> d = served_defaults("cuda:0", ["CUDAExecutionProvider"], 1, cores=16)
        >>> d.max_batch_size, d.batch_buckets, d.why["max_batch_size"]
        (1, (), 'auto: CUDA EP, fixed batch 1')
        >>> d = served_defaults("cuda:0", ["CUDAExecutionProvider"], 1, cores=16, recipe="yolo")
        >>> d.max_batch_size, d.batch_buckets  # a recipe runs chunks of 1: 64 rows a batch, no buckets
        (64, ())
    """
    given = {k: v for k, v in (given or {}).items() if v is not None}
    label = _provider_label(device, providers)
    accelerator = is_accelerator(device)
    if isinstance(batch, str):
        axis = f"dynamic batch axis {batch!r}"
        max_batch = _ACCELERATOR_MAX_BATCH if accelerator else _CPU_MAX_BATCH
        buckets: tuple[int, ...] = ACCELERATOR_BUCKETS if accelerator else ()
    elif isinstance(batch, int) and not isinstance(batch, bool):
        axis = f"fixed batch {batch}"
        # a recipe runs chunks of B under one batch of decoded items; a bare request must carry B rows itself
        max_batch = _ACCELERATOR_MAX_BATCH if recipe and accelerator else _CPU_MAX_BATCH if recipe else batch
        buckets = ()
    else:
        axis, max_batch, buckets = "no shared batch axis", 1, ()
    why_auto = f"auto: {label}, {axis}"
    if "max_batch_size" in given and "batch_buckets" not in given and buckets:
        cap = int(given["max_batch_size"])
        buckets = () if cap == 1 else (*(b for b in buckets if b < cap), cap)
    if given.get("batch_buckets") and "max_batch_size" not in given:
        max_batch = max(given["batch_buckets"])
    workers = default_workers_per_device(devices, cores)
    processes = int(given.get("workers_per_device", workers)) * max(1, devices)
    threads = None
    if recipe is not None:
        threads = cores if processes == 1 else pipeline_threads_per_process(processes, cores)
    values: dict[str, Any] = {
        "max_batch_size": min(4096, max(1, int(max_batch))),
        "batch_buckets": tuple(buckets),
        "max_delay_ms": _DELAY_MS,
        "workers_per_device": workers,
        "pipeline_threads": threads,
    }
    why = dict.fromkeys(("max_batch_size", "batch_buckets", "max_delay_ms"), why_auto)
    why["workers_per_device"] = f"auto: {cores} cores, {devices} device{'s' if devices > 1 else ''}"
    one = processes == 1
    why["pipeline_threads"] = f"auto: all {cores} cores" if one else f"auto: {cores} cores / {processes} processes"
    for key, value in given.items():
        if key in values:
            values[key] = tuple(value) if key == "batch_buckets" else value
            why[key] = "given"
    if recipe is None:
        why.pop("pipeline_threads")
        values["pipeline_threads"] = None
    return ServedDefaults(
        max_batch_size=int(values["max_batch_size"]),
        batch_buckets=tuple(int(b) for b in values["batch_buckets"]),
        max_delay_ms=float(values["max_delay_ms"]),
        workers_per_device=int(values["workers_per_device"]),
        pipeline_threads=None if values["pipeline_threads"] is None else int(values["pipeline_threads"]),
        why=why,
    )


def model_batch(inputs: Sequence[Any], outputs: Sequence[Any], recipe: str | None = None) -> str | int | None:
    """The ``batch`` of :func:`served_defaults` from a model's input and output specs (:class:`~amdinfer.TensorSpec`):
    the symbol of axis 0 when requests can share it, the fixed size when axis 0 of the first input is a number,
    else ``None``. A recipe only needs its first input's axis 0 (the pipeline splits its own outputs).

    Example:
        >>> import numpy as np
        >>> from amdinfer.types import TensorSpec
        >>> x, y = TensorSpec("x", np.dtype("float32"), ("N", 3)), TensorSpec("y", np.dtype("float32"), ("N", 10))
        >>> k = TensorSpec("k", np.dtype("int64"), ("K", 3))
        >>> model_batch([x], [y]), model_batch([x], [k]), model_batch([x], [k], "yolo")
        ('N', None, 'N')
        >>> model_batch([TensorSpec("x", np.dtype("float32"), (1, 3))], [y])
        1
    """
    from ._workers import batch_axis

    if not inputs or not inputs[0].shape:
        return None
    first = inputs[0].shape[0]
    if isinstance(first, int) and not isinstance(first, bool):
        return int(first)
    if recipe is not None:
        return first if isinstance(first, str) else None
    return first if batch_axis(inputs, outputs) is None else None


def expected_device(
    backend: str = "auto", providers: Sequence[Any] | None = None, device: int = 0
) -> tuple[str, list[str]]:
    """The ``(info.device, info.providers)`` that ``amdinfer.load(model, backend=..., providers=...)`` is expected to
    give, without loading: the first provider named; else MIGraphX when its module imports (``backend="auto"`` or
    ``"migraphx"``); else ONNX Runtime's first available built-in provider in ``backend="auto"``'s order (MIGraphX,
    ROCm, CUDA, CPU); the CPU for the reference backend or without ONNX Runtime. The server checks the guess against
    the engine it loaded.

    Example:
        >>> expected_device(providers=["cpu"]), expected_device("reference")
        (('cpu', ['CPUExecutionProvider']), ('cpu', []))
        >>> expected_device(providers=["cuda"], device=1)
        ('cuda:1', ['CUDAExecutionProvider'])
    """
    from ..engines.ort import CPU_EP, PROVIDER_ORDER, import_ort, provider_record, resolve_provider_name

    def record(name: str) -> tuple[str, list[str]]:
        rec = provider_record(name)
        if rec is None or not (rec.gpu or rec.plugin):
            return ("cpu" if rec is None or rec.label == "cpu" else rec.label), [name]
        return f"{rec.label}:{device}", [name]

    if providers:
        first = providers[0] if isinstance(providers[0], str) else providers[0][0]
        return record(resolve_provider_name(first))
    if backend == "reference":
        return "cpu", []
    if backend in ("auto", "migraphx"):
        from ..engines.migraphx import probe

        if backend == "migraphx" or probe() is None:
            return f"rocm:{device}", []
    try:
        available = list(import_ort().get_available_providers())
    except ImportError:
        return "cpu", []
    # the built-in EPs in auto's order (a plugin EP is not predicted: the engine loaded says, and is checked)
    return record(next((n for n in PROVIDER_ORDER if n in available), CPU_EP))
