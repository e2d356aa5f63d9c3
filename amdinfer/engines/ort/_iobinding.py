"""The IOBinding runner: device buffers per input shape, bound once, optionally replayed as CUDA/HIP graphs.

On a GPU, :class:`~amdinfer.engines.ort.OrtEngine` runs through :class:`IoBindingRunner`: each input
shape gets a *slot* of device buffers bound to an ``onnxruntime.IOBinding`` once and reused by every
later call of that shape (and, with CUDA/HIP graphs on, captured once as a graph and replayed).
NumPy feeds are copied into the slot's buffers; device feeds (:class:`~amdinfer.engines._dlpack.DeviceFeed`,
made from anything with ``__dlpack__``) are bound without a host round trip. Outputs come back as NumPy
arrays or, with ``outputs_on="device"`` (or ``"auto"`` with device feeds), as
:class:`~amdinfer.DeviceArray` objects that any DLPack consumer takes without a copy.

Synchronisation: ONNX Runtime computes on its own non-blocking stream, which a caller's stream knows
nothing about, so before a run with a caller's device tensor the runner waits for the device
(``IOBinding.synchronize_inputs()``, i.e. ``cudaDeviceSynchronize``); when ``run`` returns,
ONNX Runtime has synchronised its stream, so outputs are complete.

:meth:`IoBindingRunner.run_many` keeps ``prefetch + 1`` host batches in flight on worker threads, each
run with host IO bound so that ONNX Runtime copies inside the run with the GIL released: one batch's
copies overlap another's compute. Small batches (under ``overlap_bytes``) run in turn on the graph path.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.engines._dlpack import DlpackOnly
    >>> from amdinfer.testing.models import tiny_cnn
    >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["cpu"], io_binding=True, outputs_on="device")
    >>> out = engine.run(DlpackOnly(np.zeros((2, 3, 32, 32), np.float32)))  # any DLPack producer
    >>> type(out["logits"]).__name__, np.from_dlpack(out["logits"]).shape
    ('DeviceArray', (2, 10))
    >>> engine.close()
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..._support._concurrency import ordered_results
from ..._support._validate import check_int
from ...errors import InputError
from .._dlpack import DeviceArray, DeviceFeed
from ._capture import CAPTURE_GATE, CAPTURE_RUNS, CaptureGate
from ._errors import translate_run_error
from ._providers import ort_device_type
from ._values import ORT_TYPES

__all__ = ["OUTPUTS_ON", "IoBindingRunner"]

#: ``outputs_on=`` values: ``"auto"`` (device outputs when any feed is on the device), ``"host"``, ``"device"``.
OUTPUTS_ON: tuple[str, ...] = ("auto", "host", "device")


class _Slot:
    """Device buffers and an IOBinding for one input shape (one entry of a ring for run_many)."""

    __slots__ = (
        "binding",
        "direct",
        "fixed_bound",
        "foreign",
        "fresh_outputs",
        "graph_id",
        "graph_runs",
        "inputs",
        "key",
        "lock",
        "outputs",
        "run_options",
        "runs",
    )

    def __init__(self, key: Any, binding: Any, inputs: dict[str, Any], graph_id: int, run_options: Any) -> None:
        self.key = key
        self.binding = binding
        self.inputs = inputs
        self.outputs: dict[str, Any] | None = None  # fixed outputs once their shapes are known (graph slots)
        self.graph_id = graph_id
        self.run_options = run_options
        self.runs = 0
        self.graph_runs = 0  # runs with the slot's gpu_graph_id (ONNX Runtime captures during the first ones)
        self.lock = threading.Lock()
        self.foreign: set[str] = set()  # inputs bound to the caller's memory instead of the slot's buffers
        self.direct: set[str] = set()  # inputs bound for good to the caller's memory (address-keyed slots)
        self.fresh_outputs = False
        self.fixed_bound = False


class IoBindingRunner:
    """Runs an ``onnxruntime.InferenceSession`` through IOBinding with per-shape device buffers.

    Args:
        ort: the ``onnxruntime`` module.
        session: the session.
        provider: the session's first provider (decides the device type).
        device_id: device index.
        inputs: the engine's input specs (name, dtype).
        output_names: the model's output names, in order.
        graphs: whether the session was created with CUDA/HIP graph capture on; each slot then
            gets its own ``gpu_graph_id`` (up to ``max_graphs``; later shapes run uncaptured).
        max_graphs: how many graphs to capture at most.
        max_direct: how many address-keyed graph slots (caller's device memory bound without a copy)
            each input shape may have.

    Example:
        >>> import onnxruntime as ort
        >>> from amdinfer.testing.models import tiny_cnn
        >>> sess = ort.InferenceSession(tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
        >>> from amdinfer.types import TensorSpec
        >>> runner = IoBindingRunner(ort, sess, "CPUExecutionProvider", 0,
        ...                          [TensorSpec("input", np.dtype("float32"), ("N", 3, 32, 32))], ["logits"])
        >>> runner.run({"input": np.zeros((1, 3, 32, 32), np.float32)}, None, "host")["logits"].shape
        (1, 10)
    """

    def __init__(
        self,
        ort: Any,
        session: Any,
        provider: str,
        device_id: int,
        inputs: Sequence[Any],
        output_names: Sequence[str],
        *,
        graphs: bool = False,
        max_graphs: int = 32,
        max_direct: int = 4,
    ) -> None:
        self._ort = ort
        self._session = session
        self._provider = provider
        self._dev = ort_device_type(provider)
        self._dev_id = int(device_id)
        self._dl_types = {"cuda": (2, 13), "gpu": (10, 2), "cpu": (1,)}[self._dev]
        self._input_dtypes = {s.name: np.dtype(s.dtype) for s in inputs}
        self._input_names = [s.name for s in inputs]
        self._output_names = list(output_names)
        self._graphs = bool(graphs)
        self._max_graphs = int(max_graphs)
        self._max_direct = int(max_direct)
        self._direct_count: dict[Any, int] = {}
        self._next_graph = 0
        self._slots: dict[Any, _Slot] = {}
        self._lock = threading.RLock()
        # OrtValue.from_dlpack + update_inplace(OrtValue) (onnxruntime >= 1.27) allow device-to-device copies
        # into a graph slot's fixed buffers; older versions bind the caller's memory and skip the graph.
        self._d2d = hasattr(ort.OrtValue, "from_dlpack")
        self._fence_value: Any = None
        self._local = threading.local()
        #: run_many overlaps copies for host batches of at least this many input bytes; smaller ones run in
        #: turn on the graph path. 64 MiB from the H200 measurements (docs/gpu.md): below it (ResNet-50 b64,
        #: YOLOv8 b1) the graph path was faster, above it (ResNet-50 b256, YOLOv8 b64/b256) the overlap.
        self.overlap_bytes = 64 << 20
        #: the process-wide :class:`~amdinfer.engines.ort._capture.CaptureGate` (an attribute: tests watch it)
        self.gate: CaptureGate = CAPTURE_GATE
        self._plain_run_options = ort.RunOptions()
        if self._graphs:
            self._plain_run_options.add_run_config_entry("gpu_graph_id", "-1")
        self.notes: list[str] = []

    # ------------------------------------------------------------------ slots
    def _new_slot(self, key: Any, shapes: Mapping[str, tuple[int, ...]]) -> _Slot:
        ort = self._ort
        binding = self._session.io_binding()
        inputs = {}
        for name in self._input_names:
            ov = ort.OrtValue.ortvalue_from_shape_and_type(
                list(shapes[name]), self._input_dtypes[name], self._dev, self._dev_id
            )
            binding.bind_ortvalue_input(name, ov)
            inputs[name] = ov
        graph_id = -1
        if self._graphs:
            with self._lock:
                if self._next_graph < self._max_graphs:
                    graph_id = self._next_graph
                    self._next_graph += 1
                elif not any("max_graphs" in n for n in self.notes):
                    self.notes.append(
                        f"more than {self._max_graphs} input shapes: shapes after that run without graph capture"
                    )
        ro = ort.RunOptions()
        if self._graphs:
            ro.add_run_config_entry("gpu_graph_id", str(graph_id))
        return _Slot(key, binding, inputs, graph_id, ro)

    def _direct_slot(self, key: Any, feeds: Mapping[str, Any]) -> _Slot | None:
        """A graph slot bound to the caller's device memory itself (no copy), keyed by shape and addresses.

        A graph replays with the addresses it was captured with, and reads whatever is there at replay
        time: so a caller that feeds tensors at the same address again (PyTorch's caching allocator
        hands the same blocks back) gets the graph without a device-to-device copy. Up to
        ``max_direct`` address sets per shape; other calls copy into the shape's own slot.
        """
        ptrs = tuple(v.ptr if type(v) is DeviceFeed else None for v in feeds.values())
        if all(p is None for p in ptrs) or any(type(v) is DeviceFeed and v.external for v in feeds.values()):
            return None
        dkey = (key, ptrs)
        slot = self._slots.get(dkey)
        if slot is not None:
            return slot
        with self._lock:
            slot = self._slots.get(dkey)
            if slot is not None:
                return slot
            if self._direct_count.get(key, 0) >= self._max_direct or self._next_graph >= self._max_graphs:
                return None
            for value in feeds.values():
                if type(value) is DeviceFeed and (
                    value.device_type not in self._dl_types or value.device_id != self._dev_id
                ):
                    return None  # _load of the shape slot raises the error that names the input
            slot = self._new_slot(dkey, {n: feeds[n].shape for n in self._input_names})
            for name, value in feeds.items():
                if type(value) is not DeviceFeed:
                    continue
                self._bind_caller_memory(slot, name, value)
                slot.direct.add(name)
                del slot.inputs[name]  # the caller's memory replaces the slot's buffer
            self._direct_count[key] = self._direct_count.get(key, 0) + 1
            self._slots[dkey] = slot
        return slot

    def _bind_caller_memory(self, slot: _Slot, name: str, value: DeviceFeed) -> None:
        """Bind the caller's device tensor as input ``name`` of the slot (its OrtValue, else its pointer)."""
        if value.native is not None:
            slot.binding.bind_ortvalue_input(name, value.native)
        else:
            slot.binding.bind_input(name, self._dev, self._dev_id, value.dtype, list(value.shape), value.ptr)

    def _slot_for(self, key: Any, shapes: Mapping[str, tuple[int, ...]]) -> _Slot:
        slot = self._slots.get(key)
        if slot is None:
            with self._lock:
                slot = self._slots.get(key)
                if slot is None:
                    slot = self._slots[key] = self._new_slot(key, shapes)
        return slot

    # ------------------------------------------------------------------ one run
    def _fence(self) -> None:
        """Wait for the copies amdinfer queued on the legacy default stream (not for ONNX Runtime's compute).

        A host-to-device copy from pageable memory may return before its DMA lands, and device-to-device
        copies are asynchronous; a 4-byte device-to-host copy on the same stream returns only after them.
        ONNX Runtime computes on its own non-blocking stream, so this does not wait for a running batch.
        """
        if self._dev == "cpu":
            return
        with self._section(False):  # also called later by DeviceArray consumers, outside any run
            if self._fence_value is None:
                self._fence_value = self._ort.OrtValue.ortvalue_from_numpy(
                    np.zeros(1, np.float32), self._dev, self._dev_id
                )
            self._fence_value.numpy()

    def _load(self, slot: _Slot, feeds: Mapping[str, Any]) -> None:
        """Copy the feeds into the slot's buffers, or bind the caller's device memory (graph-less slots)."""
        graph = self._uses_graph(slot, feeds)
        copied = False
        if any(type(v) is not np.ndarray and v.external for v in feeds.values()):
            slot.binding.synchronize_inputs()  # a producer that took no stream: wait for the whole device
        for name, value in feeds.items():
            if type(value) is np.ndarray:
                slot.inputs[name].update_inplace(value)
                copied = True
                if name in slot.foreign:
                    slot.binding.bind_ortvalue_input(name, slot.inputs[name])
                    slot.foreign.discard(name)
                continue
            if name in slot.direct:
                continue  # bound at slot creation to this very address
            if value.device_type not in self._dl_types or value.device_id != self._dev_id:
                raise InputError(
                    f"input {name!r}: got a tensor on {value.device}, expected one on this engine's device "
                    f"({self._dev}:{self._dev_id}, {self._provider}); move it there first"
                )
            if graph:
                src = value.native if value.native is not None else self._ort.OrtValue.from_dlpack(value.capsule)
                slot.inputs[name].update_inplace(src)
                copied = True
                continue
            self._bind_caller_memory(slot, name, value)
            slot.foreign.add(name)
        if copied or any(type(v) is not np.ndarray for v in feeds.values()):
            # copies landed, and the producers' writes (ordered before the legacy stream by DLPack) too
            self._fence()

    def _uses_graph(self, slot: _Slot, feeds: Mapping[str, Any]) -> bool:
        if slot.graph_id < 0:
            return False
        if self._d2d:
            return True
        return all(type(v) is np.ndarray for v in feeds.values())

    def _execute(self, slot: _Slot, graph: bool) -> None:
        ro = slot.run_options
        if slot.outputs is None or not graph:
            # First run of a shape (output shapes unknown) or a run that cannot use the graph: outputs
            # bound by device only, so ONNX Runtime allocates fresh ones (nothing the caller holds is reused).
            for name in self._output_names:
                slot.binding.bind_output(name, self._dev, self._dev_id)
            slot.fixed_bound = False
            ro = self._plain_run_options
        elif not slot.fixed_bound:
            for name, ov in slot.outputs.items():
                slot.binding.bind_ortvalue_output(name, ov)
            slot.fixed_bound = True
        if ro is slot.run_options and slot.graph_id >= 0:
            slot.graph_runs += 1
        try:
            self._session.run_with_iobinding(slot.binding, ro)
        except Exception as exc:
            raise translate_run_error(exc) from None
        if graph and slot.outputs is None:
            slot.outputs = dict(zip(self._output_names, slot.binding.get_outputs()))
            for name, ov in slot.outputs.items():
                slot.binding.bind_ortvalue_output(name, ov)
            slot.fixed_bound = True
            slot.fresh_outputs = True
        slot.runs += 1

    def _fetch(self, slot: _Slot, names: Sequence[str], on_device: bool, graph: bool) -> dict[str, Any]:
        if graph and slot.outputs is not None and not slot.fresh_outputs:
            values = slot.outputs
            if not on_device:
                return {n: self._to_host(values[n]) for n in names}
            # a graph's outputs are overwritten by its next replay: hand out copies (on the legacy
            # stream; a consumer on another stream makes DeviceArray wait for them, see DeviceArray)
            return {n: DeviceArray(self._copy(values[n]), pending=self._fence) for n in names}
        slot.fresh_outputs = False
        outs = dict(zip(self._output_names, slot.binding.get_outputs()))
        if not on_device:
            return {n: self._to_host(outs[n]) for n in names}
        result = {n: DeviceArray(outs[n]) for n in names}
        if graph:
            # these buffers are the slot's fixed outputs from now on: hand out copies
            result = {n: DeviceArray(self._copy(outs[n]), pending=self._fence) for n in names}
        return result

    def _to_host(self, ov: Any) -> np.ndarray:
        # A CPU OrtValue's numpy() is a view of memory the next run reuses; a device one's is a new copy.
        arr = ov.numpy()
        return arr.copy() if self._dev == "cpu" else arr

    def _copy(self, ov: Any) -> Any:
        """A new device OrtValue holding a copy of ``ov``."""
        new = self._ort.OrtValue.ortvalue_from_shape_and_type(
            ov.shape(), ORT_TYPES[ov.data_type()], self._dev, self._dev_id
        )
        new.update_inplace(ov)
        return new

    def _wants_device(self, feeds: Mapping[str, Any], outputs_on: str) -> bool:
        if outputs_on == "device":
            return True
        if outputs_on == "host":
            return False
        return any(type(v) is not np.ndarray for v in feeds.values())

    def run(self, feeds: Mapping[str, Any], outputs: Sequence[str] | None, outputs_on: str) -> dict[str, Any]:
        """One checked call: ``feeds`` values are C-contiguous NumPy arrays or :class:`DeviceFeed`.

        Args:
            feeds: input name -> array (already checked by the engine).
            outputs: output names (``None``: all, in model order).
            outputs_on: ``"auto"``, ``"host"`` or ``"device"``.

        Returns:
            output name -> NumPy array or :class:`DeviceArray`.
        """
        slot, names, on_device = self._slot_of(feeds, outputs, outputs_on)
        with slot.lock:
            graph = self._uses_graph(slot, feeds)
            with self._section(graph and slot.outputs is not None and slot.graph_runs < CAPTURE_RUNS):
                self._load(slot, feeds)
                self._execute(slot, graph)
                return self._fetch(slot, names, on_device, graph)

    def _slot_of(
        self, feeds: Mapping[str, Any], outputs: Sequence[str] | None, outputs_on: str
    ) -> tuple[_Slot, list[str], bool]:
        """The slot for these feeds (address-bound when graphs allow), the output names, device outputs or not."""
        key = tuple(feeds[n].shape for n in self._input_names)
        slot = self._direct_slot(key, feeds) if self._graphs else None
        if slot is None:
            slot = self._slot_for(key, {n: feeds[n].shape for n in self._input_names})
        names = self._output_names if outputs is None else list(outputs)
        return slot, names, self._wants_device(feeds, outputs_on)

    def prepare(self, feeds: Mapping[str, Any], outputs: Sequence[str] | None, outputs_on: str) -> Any:
        """A callable repeating :meth:`run` for these checked feeds (:func:`._prepared_run.prepared_call`)."""
        from ._prepared_run import prepared_call

        return prepared_call(self, feeds, outputs, outputs_on)

    def _section(self, may_capture: bool) -> Any:
        """The :class:`CaptureGate` section a run takes: alone when it may capture a graph, else shared."""
        if self._dev == "cpu" and not self._graphs:
            return contextlib.nullcontext()  # touches no device: nothing to keep out of a capture
        return self.gate.capture() if may_capture else self.gate.run()

    # ------------------------------------------------------------------ overlapped batches
    def _host_run(self, feeds: Mapping[str, Any], names: Sequence[str], on_device: bool) -> dict[str, Any]:
        """One batch with host IO bound as such: ONNX Runtime copies in and out inside the run.

        ``run_with_iobinding`` releases the GIL for the whole run, copies included, so runs in other
        threads proceed meanwhile; each run gets its own stream, so one batch's copies overlap another's
        compute on the device. (``update_inplace``/``numpy()`` copies would hold the GIL.)
        """
        with self._section(False):
            return self._host_run_locked(feeds, names, on_device)

    def _host_run_locked(self, feeds: Mapping[str, Any], names: Sequence[str], on_device: bool) -> dict[str, Any]:
        local = self._local
        binding = getattr(local, "binding", None)
        if binding is None:
            binding = local.binding = self._session.io_binding()
        for name, value in feeds.items():
            if type(value) is np.ndarray:
                binding.bind_cpu_input(name, value)
            elif value.native is not None:
                binding.bind_ortvalue_input(name, value.native)
            else:
                binding.bind_input(name, self._dev, self._dev_id, value.dtype, list(value.shape), value.ptr)
        if any(type(v) is not np.ndarray for v in feeds.values()):
            if any(type(v) is not np.ndarray and v.external for v in feeds.values()):
                binding.synchronize_inputs()
            self._fence()
        where = self._dev if on_device else "cpu"
        for name in self._output_names:
            binding.bind_output(name, where, self._dev_id if on_device else 0)
        try:
            self._session.run_with_iobinding(binding, self._plain_run_options)
        except Exception as exc:
            raise translate_run_error(exc) from None
        outs = dict(zip(self._output_names, binding.get_outputs()))
        if on_device:
            return {n: DeviceArray(outs[n]) for n in names}
        # fresh CPU tensors each run (outputs rebound above); the arrays keep them alive
        return {n: outs[n].numpy() for n in names}

    def run_many(
        self,
        batches: Iterable[Any],
        check: Any,
        outputs: Sequence[str] | None,
        outputs_on: str,
        prefetch: int = 2,
    ) -> Iterator[dict[str, Any]]:
        """Run batches in order with ``prefetch + 1`` batches in flight, so copies overlap compute.

        Host batches run with host IO bound as such (:meth:`_host_run`): ONNX Runtime copies them to
        the device and the outputs back inside each run, with the GIL released, on a stream per run,
        so the transfers of one batch overlap the compute of the others. Device batches go through
        :meth:`run` (bound device memory, graph replay).

        Args:
            batches: feeds per batch (dicts, or one array for a single-input model).
            check: the engine's feed check (``Engine._check_feeds``).
            outputs: output names (``None``: all).
            outputs_on: ``"auto"``, ``"host"`` or ``"device"``.
            prefetch: batches in flight besides the oldest (>= 1).

        Yields:
            One output dict per batch, in order.
        """
        prefetch = check_int("prefetch", prefetch, minimum=1)
        from concurrent.futures import ThreadPoolExecutor

        names = self._output_names if outputs is None else list(outputs)

        def one(batch: Any) -> dict[str, Any]:
            feeds = check(batch)
            on_device = self._wants_device(feeds, outputs_on)
            host = all(type(v) is np.ndarray for v in feeds.values())
            if host and sum(v.nbytes for v in feeds.values()) >= self.overlap_bytes:
                return self._host_run(feeds, names, on_device)
            return self.run(feeds, names, outputs_on)

        it = iter(batches)
        first = next(it, None)
        if first is None:
            return
        feeds0 = check(first)
        if sum(getattr(v, "nbytes", 0) for v in feeds0.values() if type(v) is np.ndarray) < self.overlap_bytes:
            # Small batches: a bound, graph-replayed run beats overlapping copies (measured on an H200:
            # ResNet-50 fp16 b1 1,470 vs 570 img/s, b64 6,471 vs 5,760).
            yield self.run(feeds0, names, outputs_on)
            for batch in it:
                yield self.run(check(batch), names, outputs_on)
            return
        it = itertools.chain([feeds0], it)
        with ThreadPoolExecutor(max_workers=prefetch + 1, thread_name_prefix="amdinfer-run") as pool:
            yield from ordered_results(lambda batch: pool.submit(one, batch), it, depth=prefetch + 1)

    # ------------------------------------------------------------------ lifecycle
    @property
    def shapes(self) -> list[Any]:
        """The input-shape keys that have slots (for ``engine.info``)."""
        return list(self._slots)

    def close(self) -> None:
        """Drop every slot (device buffers and bindings)."""
        self._slots.clear()
