"""DLPack interop, not tied to any runtime: device tensors in (:func:`device_feed`), device arrays out.

Any object with ``__dlpack__`` (PyTorch, CuPy, JAX, NumPy, ``onnxruntime.OrtValue``, :class:`DeviceArray`)
can be fed to an engine that takes device tensors: host tensors become NumPy views, device tensors a
:class:`DeviceFeed` (shape, NumPy dtype, device, address) that the engine's checks read and its runner
binds. Outputs left on the device are :class:`DeviceArray` objects, DLPack producers over a runtime's
own value; each runtime registers its value type once with :func:`register_device_value` (ONNX Runtime
registers ``OrtValue`` in :mod:`amdinfer.engines.ort`), so this module imports no runtime.

Example:
    >>> import numpy as np
    >>> feed = device_feed("x", DlpackOnly(np.arange(3, dtype=np.float32)))
    >>> type(feed).__name__, feed.tolist()
    ('ndarray', [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AmdinferError, InputError

__all__ = [
    "DLPACK_DEVICE_TYPES",
    "DeviceArray",
    "DeviceFeed",
    "DeviceValueType",
    "DlpackOnly",
    "device_feed",
    "host_feeds",
    "register_device_value",
]

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
        native: the runtime's own value (e.g. an ``onnxruntime.OrtValue``) when the feed is one (or a
            :class:`DeviceArray` over one), else ``None``.
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
    native: Any = None
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
        value = value.value
    native = value if _value_type(value) is not None else None
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
        native=native,
        external=external,
        capsule=capsule,
    )


# ---------------------------------------------------------------------------------------------- runtime values
@dataclass(frozen=True)
class DeviceValueType:
    """How :class:`DeviceArray` reads one runtime's device value (registered by that runtime's backend).

    Attributes:
        name: the runtime's name for the type, e.g. ``"onnxruntime.OrtValue"``.
        matches: whether an object is such a value.
        shape: its shape.
        dtype: its NumPy dtype (``None``: not describable).
        device: ``(device name, index)``, e.g. ``("cuda", 0)``.
        data_ptr: address of the first element.
        to_numpy: a host copy.

    Example:
        >>> vt = DeviceValueType("numpy", lambda v: isinstance(v, np.ndarray), lambda v: v.shape,
        ...                      lambda v: v.dtype, lambda v: ("cpu", 0), lambda v: v.ctypes.data, np.array)
        >>> vt.name
        'numpy'
    """

    name: str
    matches: Callable[[Any], bool]
    shape: Callable[[Any], tuple[int, ...]]
    dtype: Callable[[Any], np.dtype | None]
    device: Callable[[Any], tuple[str, int]]
    data_ptr: Callable[[Any], int]
    to_numpy: Callable[[Any], np.ndarray]


_VALUE_TYPES: list[DeviceValueType] = []


def register_device_value(value_type: DeviceValueType) -> None:
    """Teach :class:`DeviceArray` and :func:`device_feed` one runtime's device value type (idempotent by name).

    Example:
        >>> before = len(_VALUE_TYPES)
        >>> register_device_value(DeviceValueType("demo", lambda v: False, tuple, lambda v: None,
        ...                                       lambda v: ("cpu", 0), id, np.array))
        >>> register_device_value(DeviceValueType("demo", lambda v: False, tuple, lambda v: None,
        ...                                       lambda v: ("cpu", 0), id, np.array))
        >>> len(_VALUE_TYPES) - before
        1
    """
    for i, known in enumerate(_VALUE_TYPES):
        if known.name == value_type.name:
            _VALUE_TYPES[i] = value_type
            return
    _VALUE_TYPES.append(value_type)


def _value_type(value: Any) -> DeviceValueType | None:
    for vt in _VALUE_TYPES:
        if vt.matches(value):
            return vt
    return None


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
    """An output left on the device: a DLPack producer over a runtime's own value (e.g. an ``OrtValue``).

    Consumers take it without a copy: ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)``,
    ``jax.dlpack.from_dlpack(a)``; it can be fed back into any amdinfer engine on the same device.
    It also exposes ``__cuda_array_interface__`` on CUDA for consumers (and runtimes) without DLPack.
    The value's type must be registered with :func:`register_device_value` (ONNX Runtime's is, by
    :mod:`amdinfer.engines.ort`).

    Attributes:
        value: the runtime's value (it owns the memory).
        shape: the shape.
        dtype: the NumPy dtype.
        device: ``"cuda:0"``, ``"cpu:0"``, ...

    Example:
        >>> import onnxruntime as ort
        >>> import amdinfer.engines.ort  # registers OrtValue
        >>> a = DeviceArray(ort.OrtValue.ortvalue_from_numpy(np.arange(4, dtype=np.float32)))
        >>> a.shape, a.dtype, a.numpy().tolist()
        ((4,), dtype('float32'), [0.0, 1.0, 2.0, 3.0])
    """

    __slots__ = ("_dev_id", "_dev_name", "_kind", "_pending", "device", "dtype", "shape", "value")

    def __init__(self, value: Any, pending: Any = None) -> None:
        kind = _value_type(value)
        if kind is None:
            raise AmdinferError(
                f"DeviceArray: got a {type(value).__name__}, expected a registered device value type "
                f"({[vt.name for vt in _VALUE_TYPES] or 'none registered'}); see register_device_value"
            )
        self._kind = kind
        self.value = value
        # A copy queued on the legacy default stream and not yet waited for: ``pending()`` waits.
        self._pending = pending
        self.shape = tuple(int(d) for d in kind.shape(value))
        dtype = kind.dtype(value)
        if dtype is None:
            raise AmdinferError(f"a {kind.name} of this element type cannot be described as a NumPy dtype")
        self.dtype: np.dtype = dtype
        self._dev_name, self._dev_id = kind.device(value)
        self.device = f"{self._dev_name}:{self._dev_id}"

    @property
    def ortvalue(self) -> Any:
        """The underlying value (the name from when only ONNX Runtime produced device arrays)."""
        return self.value

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
        return int(self._kind.data_ptr(self.value))

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending()
            self._pending = None

    def numpy(self) -> np.ndarray:
        """Copy to a new host array."""
        return self._kind.to_numpy(self.value)

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        if not hasattr(self.value, "__dlpack__"):
            raise TypeError(
                f"this {self._kind.name} has no DLPack export (onnxruntime >= 1.27 has); use "
                "__cuda_array_interface__ (torch.as_tensor(a, device='cuda'), cupy.asarray(a)) or .numpy()"
            )
        # The data is complete on the legacy default stream (DLPack stream 1 on CUDA; None means the
        # same); a consumer on any other stream gets it after a wait for amdinfer's copies.
        if stream not in (None, 1):
            self._wait()
        return self.value.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        if hasattr(self.value, "__dlpack_device__"):
            return tuple(self.value.__dlpack_device__())  # type: ignore[return-value]
        return ({"cpu": 1, "cuda": 2}.get(self._dev_name, 2), self._dev_id)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        if not self.device.startswith("cuda"):
            raise AttributeError("__cuda_array_interface__ is only defined for CUDA memory")
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (int(self._kind.data_ptr(self.value)), False),
            "version": 3,
            "strides": None,
            # CAI v3: the consumer orders its work after this stream (1: the legacy default stream)
            "stream": 1 if self._pending is not None else None,
        }

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device!r})"


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
