"""Device-resident tensors for the ONNX Runtime engine: DLPack in, device arrays out, IO bound once.

On a GPU, :class:`~amdinfer.engines.ort.OrtEngine` runs through :class:`IoBindingRunner`: each input
shape gets a *slot* of device buffers bound to an ``onnxruntime.IOBinding`` once and reused by every
later call of that shape (and, with CUDA/HIP graphs on, captured once as a graph and replayed).
NumPy feeds are copied into the slot's buffers; device feeds (anything with ``__dlpack__``: PyTorch,
CuPy, JAX, ``onnxruntime.OrtValue``, :class:`DeviceArray`) are bound without a host round trip.
Outputs come back as NumPy arrays or, with ``outputs_on="device"`` (or ``"auto"`` with device feeds),
as :class:`DeviceArray` objects that any DLPack consumer takes without a copy.

Synchronisation: ONNX Runtime computes on its own non-blocking stream, which a caller's stream knows
nothing about, so before a run with a caller's device tensor the runner waits for the device
(``IOBinding.synchronize_inputs()``, i.e. ``cudaDeviceSynchronize``); when ``run`` returns,
ONNX Runtime has synchronised its stream, so outputs are complete.

:meth:`IoBindingRunner.run_many` keeps ``prefetch + 1`` host batches in flight on worker threads, each
run with host IO bound so that ONNX Runtime copies inside the run with the GIL released: one batch's
copies overlap another's compute. Small batches (under ``overlap_bytes``) run in turn on the graph path.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["cpu"], io_binding=True, outputs_on="device")
    >>> out = engine.run(DlpackOnly(np.zeros((2, 3, 32, 32), np.float32)))  # any DLPack producer
    >>> type(out["logits"]).__name__, np.from_dlpack(out["logits"]).shape
    ('DeviceArray', (2, 10))
    >>> engine.close()
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._concurrency import ordered_results
from ..errors import AmdinferError, InputError, OptionError

__all__ = [
    "CAPTURE_GATE",
    "CaptureGate",
    "DLPACK_DEVICE_TYPES",
    "DeviceArray",
    "DeviceFeed",
    "DlpackOnly",
    "IoBindingRunner",
    "OUTPUTS_ON",
    "device_feed",
    "host_feeds",
    "make_runner",
    "ort_device_type",
]

#: ``outputs_on=`` values: ``"auto"`` (device outputs when any feed is on the device), ``"host"``, ``"device"``.
OUTPUTS_ON: tuple[str, ...] = ("auto", "host", "device")

#: DLPack ``DLDeviceType`` codes amdinfer names (dlpack.h).
DLPACK_DEVICE_TYPES: dict[int, str] = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    10: "rocm",
    11: "rocm_host",
    13: "cuda_managed",
}
_HOST_DL_TYPES = (1, 3, 11)

# ONNX Runtime's OrtValue.data_type() strings -> NumPy dtypes.
_ORT_TYPES = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
}


# ---------------------------------------------------------------------------------------------- DLPack
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dl_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    if lanes != 1:
        raise TypeError(f"vector DLPack dtypes (lanes={lanes}) are not tensors amdinfer can bind")
    kind = {0: "i", 1: "u", 2: "f", 6: "b"}.get(code)
    if code == 4 and bits == 16:
        try:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            raise TypeError("a bfloat16 DLPack tensor needs ml_dtypes installed to be described") from None
    if kind is None:
        raise TypeError(f"DLPack dtype code {code} ({bits} bits) has no NumPy equivalent")
    if kind == "b":
        return np.dtype(np.bool_)
    return np.dtype(f"{kind}{bits // 8}")


@dataclass
class DeviceFeed:
    """A caller's device tensor as :class:`~amdinfer.Engine` checks and the runner binds it.

    Built by :func:`device_feed`; holds the producer object and its DLPack capsule (so the memory stays
    valid until the run ends) and exposes ``shape`` and a NumPy ``dtype`` for the engine's checks.

    Attributes:
        obj: the caller's object (a torch/CuPy/JAX array, an ``OrtValue``, a :class:`DeviceArray`).
        shape: the tensor's shape.
        dtype: its NumPy dtype.
        device_type: DLPack device type (2 CUDA, 10 ROCm, ...).
        device_id: device index.
        ptr: address of the first element.
        ortvalue: the ``onnxruntime.OrtValue`` when the feed is one (or wraps one), else ``None``.
        external: whether a device synchronisation is needed before ONNX Runtime reads it (producers
            other than ONNX Runtime may still be writing it on their own stream).

    Example:
        >>> feed = device_feed("x", DlpackOnly(np.ones((2, 3), np.float32)))
        >>> type(feed).__name__  # host DLPack tensors become NumPy views
        'ndarray'
    """

    obj: Any
    shape: tuple[int, ...]
    dtype: np.dtype
    device_type: int
    device_id: int
    ptr: int
    ortvalue: Any = None
    external: bool = True
    capsule: Any = None

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def device(self) -> str:
        """``"cuda:0"``, ``"rocm:1"``, ..."""
        return f"{DLPACK_DEVICE_TYPES.get(self.device_type, str(self.device_type))}:{self.device_id}"

    def __getitem__(self, item: Any) -> Any:
        raise InputError(
            f"a device tensor ({self.device}, shape {self.shape}) cannot be split or padded by batch_buckets; "
            "pad it on the device, or load the engine without batch_buckets="
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise InputError(
            f"a device tensor ({self.device}, shape {self.shape}) cannot be used where a host array is needed; "
            "copy it to the host explicitly"
        )


def device_feed(name: str, value: Any) -> Any:
    """Describe a DLPack-capable feed: host tensors become NumPy views, device tensors :class:`DeviceFeed`.

    Args:
        name: the input's name (for error messages).
        value: an object with ``__dlpack__`` (PyTorch, CuPy, JAX, NumPy, ``OrtValue``, :class:`DeviceArray`).

    Returns:
        ``np.ndarray`` (zero-copy view) for host memory, else a :class:`DeviceFeed`.

    Raises:
        InputError: the tensor is not contiguous, or its dtype has no NumPy equivalent.

    Example:
        >>> device_feed("x", DlpackOnly(np.arange(3, dtype=np.float32))).tolist()
        [0.0, 1.0, 2.0]
    """
    if isinstance(value, DeviceArray):
        value = value.ortvalue
    ortvalue = value if _is_ortvalue(value) else None
    try:
        dev_type, dev_id = (int(v) for v in value.__dlpack_device__())
    except Exception as exc:
        raise InputError(f"input {name!r}: {type(value).__name__}.__dlpack_device__() failed: {exc}") from None
    if dev_type in _HOST_DL_TYPES:
        try:
            return np.from_dlpack(value)
        except Exception as exc:
            raise InputError(f"input {name!r}: cannot view the host {type(value).__name__} as NumPy: {exc}") from None
    # Ask the producer to order its pending writes before work on the legacy default stream, where ONNX
    # Runtime's copies run (DLPack: stream 1 on CUDA, 0 on ROCm); producers that refuse a stream get a
    # device-wide synchronisation before the run instead.
    external = False
    with _producer_device(value, dev_type, dev_id):
        try:
            capsule = value.__dlpack__(stream=0 if dev_type == 10 else 1)
        except Exception:
            external = True
            try:
                capsule = value.__dlpack__()
            except Exception as exc:
                raise InputError(f"input {name!r}: {type(value).__name__}.__dlpack__() failed: {exc}") from None
    managed = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    try:
        dtype = _dl_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    except TypeError as exc:
        raise InputError(f"input {name!r}: {exc}") from None
    if t.strides:
        expected, ok = 1, True
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and int(t.strides[i]) != expected:
                ok = False
            expected *= shape[i]
        if not ok:
            strides = tuple(int(t.strides[i]) for i in range(t.ndim))
            raise InputError(
                f"input {name!r}: got a non-contiguous device tensor (shape {shape}, strides {strides} in elements), "
                "expected a C-contiguous one; call .contiguous() (PyTorch) or cupy.ascontiguousarray first"
            )
    ptr = int(t.data or 0) + int(t.byte_offset)
    return DeviceFeed(
        obj=value,
        shape=shape,
        dtype=dtype,
        device_type=dev_type,
        device_id=dev_id,
        ptr=ptr,
        ortvalue=ortvalue,
        external=external,
        capsule=capsule,
    )


#: Producers that export only from their "current device" (PyTorch: "Can't export tensors on a different
#: CUDA device index"), with the context manager that makes ``device`` current for the export. The
#: stream handshake (DLPack stream 1/0: the legacy default stream) is per device too, so it must run there.
_DEVICE_CONTEXTS: dict[str, Any] = {
    "torch": lambda mod, device: mod.cuda.device(device),
    "cupy": lambda mod, device: mod.cuda.Device(device),
}


def _producer_device(value: Any, dev_type: int, dev_id: int) -> Any:
    """A context in which ``value``'s library has ``dev_id`` as its current device (else a no-op)."""
    if dev_type in _HOST_DL_TYPES:
        return contextlib.nullcontext()
    root = type(value).__module__.split(".")[0]
    make = _DEVICE_CONTEXTS.get(root)
    mod = sys.modules.get(root)
    if make is None or mod is None:
        return contextlib.nullcontext()
    return make(mod, dev_id)


def _is_ortvalue(value: Any) -> bool:
    return type(value).__name__ == "OrtValue" and hasattr(value, "data_ptr") and hasattr(value, "device_name")


class DlpackOnly:
    """Wraps an array so that only the DLPack protocol is visible (a stand-in for a foreign producer in tests).

    Example:
        >>> np.from_dlpack(DlpackOnly(np.ones(2, np.float32))).tolist()
        [1.0, 1.0]
    """

    def __init__(self, array: Any) -> None:
        self._array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()


# ---------------------------------------------------------------------------------------------- outputs
class DeviceArray:
    """An output left on the device: a DLPack producer over an ``onnxruntime.OrtValue``.

    Consumers take it without a copy: ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)``,
    ``jax.dlpack.from_dlpack(a)``; it can be fed back into any amdinfer engine on the same device.
    It also exposes ``__cuda_array_interface__`` on CUDA for consumers (and ONNX Runtime versions)
    without DLPack.

    Attributes:
        ortvalue: the underlying ``onnxruntime.OrtValue`` (it owns the memory).
        shape: the shape.
        dtype: the NumPy dtype.
        device: ``"cuda:0"``, ``"cpu:0"``, ...

    Example:
        >>> import onnxruntime as ort
        >>> a = DeviceArray(ort.OrtValue.ortvalue_from_numpy(np.arange(4, dtype=np.float32)))
        >>> a.shape, a.dtype, a.numpy().tolist()
        ((4,), dtype('float32'), [0.0, 1.0, 2.0, 3.0])
    """

    __slots__ = ("_dl_device", "_pending", "device", "dtype", "ortvalue", "shape")

    def __init__(self, ortvalue: Any, pending: Any = None) -> None:
        self.ortvalue = ortvalue
        # A copy queued on the legacy default stream and not yet waited for: ``pending()`` waits.
        self._pending = pending
        self.shape = tuple(int(d) for d in ortvalue.shape())
        self.dtype = _ORT_TYPES.get(ortvalue.data_type(), None)
        if self.dtype is None:
            raise AmdinferError(f"output of type {ortvalue.data_type()} cannot be described as a NumPy dtype")
        name = ortvalue.device_name().lower()
        self._dl_device: tuple[int, int] | None = None
        self.device = f"{name}:{_ortvalue_device_id(ortvalue)}"

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def data_ptr(self) -> int:
        """Address of the first element on the device (the data is complete when this returns)."""
        self._wait()
        return int(self.ortvalue.data_ptr())

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending()
            self._pending = None

    def numpy(self) -> np.ndarray:
        """Copy to a new host array."""
        return self.ortvalue.numpy()

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        if not hasattr(self.ortvalue, "__dlpack__"):
            raise TypeError(
                "this onnxruntime's OrtValue has no DLPack export (onnxruntime >= 1.27 has); use "
                "__cuda_array_interface__ (torch.as_tensor(a, device='cuda'), cupy.asarray(a)) or .numpy()"
            )
        # The data is complete on the legacy default stream (DLPack stream 1 on CUDA; None means the
        # same); a consumer on any other stream gets it after a wait for amdinfer's copies.
        if stream not in (None, 1):
            self._wait()
        return self.ortvalue.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        if hasattr(self.ortvalue, "__dlpack_device__"):
            return tuple(self.ortvalue.__dlpack_device__())  # type: ignore[return-value]
        dev = self.device.split(":")[0]
        return ({"cpu": 1, "cuda": 2}.get(dev, 2), _ortvalue_device_id(self.ortvalue))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if not self.device.startswith("cuda"):
            raise AttributeError("__cuda_array_interface__ is only defined for CUDA memory")
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (int(self.ortvalue.data_ptr()), False),
            "version": 3,
            "strides": None,
            # CAI v3: the consumer orders its work after this stream (1: the legacy default stream)
            "stream": 1 if self._pending is not None else None,
        }

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r})"


def _ortvalue_device_id(ortvalue: Any) -> int:
    try:
        return int(ortvalue.__dlpack_device__()[1])
    except Exception:
        return 0


def ort_device_type(provider: str) -> str:
    """The device name ONNX Runtime's Python API uses for a provider's memory.

    ``"cuda"`` for the CUDA and ROCm EPs (ROCm builds map their GPU device to ``"cuda"``), ``"gpu"``
    for the MIGraphX EP (a generic GPU device with AMD's vendor id), ``"cpu"`` otherwise. The AMD
    mappings follow ONNX Runtime's sources and are not verified on AMD hardware.

    Example:
        >>> ort_device_type("CUDAExecutionProvider"), ort_device_type("CPUExecutionProvider")
        ('cuda', 'cpu')
    """
    return {
        "CUDAExecutionProvider": "cuda",
        "ROCMExecutionProvider": "cuda",
        "MIGraphXExecutionProvider": "gpu",
    }.get(provider, "cpu")


# ---------------------------------------------------------------------------------------------- runner
# ---------------------------------------------------------------------------------------------- graph capture
#: Runs with a slot's ``gpu_graph_id`` that go through :meth:`CaptureGate.capture`: ONNX Runtime makes a
#: few plain runs to settle its allocations, then captures (CUDA EP: one or two runs before; margin kept).
_CAPTURE_RUNS = 3


class CaptureGate:
    """A process-wide gate: a CUDA/HIP graph capture runs alone, every other device call alongside others.

    ONNX Runtime captures in ``cudaStreamCaptureModeGlobal``: while one stream captures, a CUDA call that
    may synchronise (``cudaStreamSynchronize``, ``cudaMalloc``, a blocking copy) from *any* thread of the
    process invalidates the capture and fails itself ("operation not permitted when stream is capturing").
    Two engines on two GPUs, or two threads on one engine, hit this on their first runs. So every device
    call of every :class:`IoBindingRunner` holds the gate shared (:meth:`run`), and the runs that may
    capture hold it alone (:meth:`capture`). Captures are rare (the first runs of each input shape);
    replays and copies then run concurrently as before. Waiting captures go first, so a stream of
    shared runs cannot starve them. Re-entrant per thread: a nested section runs inside the outer one.

    Example:
        >>> gate = CaptureGate()
        >>> with gate.run(), gate.run():  # shared sections nest and overlap
        ...     gate.active
        1
        >>> with gate.capture():
        ...     gate.capturing
        True
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0  # threads inside a shared section
        self._capturing = False
        self._waiting = 0  # captures waiting for the shared sections to drain
        self._local = threading.local()

    @property
    def active(self) -> int:
        """Threads inside a shared section now."""
        return self._active

    @property
    def capturing(self) -> bool:
        """Whether a capture section is running now."""
        return self._capturing

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """A shared section: any number run at once, never while a capture runs."""
        local = self._local
        if getattr(local, "depth", 0):
            local.depth += 1
            try:
                yield
            finally:
                local.depth -= 1
            return
        with self._cond:
            while self._capturing or self._waiting:
                self._cond.wait()
            self._active += 1
        local.depth = 1
        try:
            yield
        finally:
            local.depth = 0
            with self._cond:
                self._active -= 1
                if not self._active:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """An exclusive section: waits until no other section runs, and holds every other one off."""
        local = self._local
        if getattr(local, "depth", 0):
            local.depth += 1  # already inside a section of this gate: nesting cannot wait for itself
            try:
                yield
            finally:
                local.depth -= 1
            return
        with self._cond:
            self._waiting += 1
            try:
                while self._capturing or self._active:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._capturing = True
        local.depth = 1
        try:
            yield
        finally:
            local.depth = 0
            with self._cond:
                self._capturing = False
                self._cond.notify_all()


#: The gate every runner of this process uses (replaceable in tests through ``IoBindingRunner.gate``).
CAPTURE_GATE = CaptureGate()


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
        #: the process-wide :class:`CaptureGate` (an attribute so that tests can watch it)
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
        if value.ortvalue is not None:
            slot.binding.bind_ortvalue_input(name, value.ortvalue)
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
                src = value.ortvalue if value.ortvalue is not None else self._ort.OrtValue.from_dlpack(value.capsule)
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
            from .ort import _translate_run_error

            raise _translate_run_error(exc) from None
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
            ov.shape(), _ORT_TYPES[ov.data_type()], self._dev, self._dev_id
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
        key = tuple(feeds[n].shape for n in self._input_names)
        slot = self._direct_slot(key, feeds) if self._graphs else None
        if slot is None:
            slot = self._slot_for(key, {n: feeds[n].shape for n in self._input_names})
        names = self._output_names if outputs is None else list(outputs)
        on_device = self._wants_device(feeds, outputs_on)
        with slot.lock:
            graph = self._uses_graph(slot, feeds)
            with self._section(graph and slot.outputs is not None and slot.graph_runs < _CAPTURE_RUNS):
                self._load(slot, feeds)
                self._execute(slot, graph)
                return self._fetch(slot, names, on_device, graph)

    def _section(self, may_capture: bool) -> Any:
        """The :class:`CaptureGate` section a run takes: alone when it may capture, else shared."""
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
            elif value.ortvalue is not None:
                binding.bind_ortvalue_input(name, value.ortvalue)
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
            from .ort import _translate_run_error

            raise _translate_run_error(exc) from None
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
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 1:
            raise OptionError(f"prefetch: got {prefetch!r}, expected an int >= 1")
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


# ---------------------------------------------------------------------------------------------- engine glue
def make_runner(
    ort: Any,
    session: Any,
    providers: Sequence[str],
    device_id: int,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    datapath: Any,
    info: Any,
) -> IoBindingRunner | None:
    """The runner an ORT engine uses (``None``: plain ``session.run`` with NumPy), recorded in ``info``.

    Args:
        ort: the ``onnxruntime`` module.
        session: the engine's session.
        providers: the providers the session really uses.
        device_id: GPU index.
        inputs: input specs.
        outputs: output specs.
        datapath: the engine's :class:`~amdinfer.engines._ort_tuning.DataPathOptions`.
        info: the engine's ``EngineInfo`` (``settings["data_path"]`` is set).

    Example:
        >>> import onnxruntime as ort
        >>> from amdinfer.engines._ort_tuning import DataPathOptions
        >>> from amdinfer.engines.base import EngineInfo
        >>> from amdinfer.testing.models import tiny_cnn
        >>> sess = ort.InferenceSession(tiny_cnn().SerializeToString(), providers=["CPUExecutionProvider"])
        >>> info = EngineInfo(backend="ort")
        >>> make_runner(ort, sess, ["CPUExecutionProvider"], 0, [], [], DataPathOptions(), info) is None
        True
        >>> info.settings["data_path"]["io_binding"]
        False
    """
    provider = providers[0] if providers else "CPUExecutionProvider"
    bind = datapath.binds_io(provider)
    opts = info.settings.get("provider_options", {}).get(provider, {})
    graphs = bind and any(opts.get(k) == "1" for k in ("enable_cuda_graph", "enable_hip_graph"))
    info.settings["data_path"] = {
        "io_binding": bind,
        "device_memory": ort_device_type(provider) if bind else "cpu",
        "outputs_on": datapath.outputs_on,
        "gpu_graphs": graphs,
        "fp16_io": datapath.fp16_io,
    }
    if not bind:
        return None
    runner = IoBindingRunner(ort, session, provider, device_id, inputs, [s.name for s in outputs], graphs=graphs)
    if graphs and not runner._d2d:
        info.notes.append(
            f"onnxruntime {ort.__version__} has no device-to-device OrtValue copy: runs with device tensors "
            "bind them directly and skip graph replay"
        )
    return runner


def host_feeds(feeds: Mapping[str, Any], why: str) -> dict[str, Any]:
    """The feeds as NumPy arrays; a device tensor is an :class:`~amdinfer.InputError` naming ``why``.

    Example:
        >>> host_feeds({"x": np.zeros(2)}, "outputs='all'")["x"].shape
        (2,)
    """
    for name, value in feeds.items():
        if type(value) is not np.ndarray:
            raise InputError(
                f"input {name!r}: got a device tensor ({getattr(value, 'device', '?')}), but {why} "
                "runs on host arrays; copy it to the host first"
            )
    return dict(feeds)
