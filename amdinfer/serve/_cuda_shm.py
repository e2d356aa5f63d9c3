"""Triton's CUDA shared-memory extension: device memory a client exported with an IPC handle, opened here.

A client allocates device memory, exports it (``cudaIpcGetMemHandle``, 64 bytes) and registers the handle
with its device and size (``tritonclient.utils.cuda_shared_memory``). Each server process opens the handle
on first use through the GPU runtime, loaded with ctypes: the CUDA runtime (``libcudart``: the copy already
loaded in the process, else the one ``ctypes.util`` or the ``nvidia-cuda-runtime`` wheel finds) or, on
ROCm, the HIP runtime (``libamdhip64``), which has the same calls under ``hip`` names. Inputs are copied
device to host into the request (``cudaMemcpy``), outputs host to device into the region: the engine gets
host arrays, as from any other request.

Test seam: ``AMDINFER_DEVICE_IPC`` in the server's environment picks the opener: unset or ``auto`` (CUDA,
then HIP), ``cuda``, ``hip``, or ``host`` (:class:`HostIpc`, a stand-in for tests on machines without a
GPU: a "handle" names a POSIX shared-memory object, see :func:`host_handle`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import InputError

__all__ = [
    "HANDLE_BYTES",
    "handle_struct",
    "IPC_ENV",
    "NO_RUNTIME",
    "NO_RUNTIME_HINT",
    "CudaRegionStatus",
    "DeviceIpc",
    "DeviceMemory",
    "DeviceRegion",
    "HostIpc",
    "RuntimeIpc",
    "host_handle",
    "load_device_ipc",
    "pread_exact",
    "pwrite_all",
]

#: ``CUDA_IPC_HANDLE_SIZE`` (and ``HIP_IPC_HANDLE_SIZE``).
HANDLE_BYTES = 64
#: The environment variable that picks the opener (the test seam; see the module's docstring).
IPC_ENV = "AMDINFER_DEVICE_IPC"
#: What a server without a usable GPU runtime answers a CUDA registration (then why, then the hint).
NO_RUNTIME = (
    "CUDA shared memory needs the CUDA runtime (libcudart) or the HIP runtime (libamdhip64) and a GPU in the server"
)
NO_RUNTIME_HINT = "Send the tensor in the request or use system shared memory"
_HOST_MAGIC = b"amdinfer-host-ipc:"
_TO_DEVICE, _TO_HOST = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost (the same values in HIP)


@dataclass(frozen=True)
class CudaRegionStatus:
    """One registered CUDA region, as the status call reports it (``raw_handle`` stays on the server).

    Example:
        >>> CudaRegionStatus("gpu_in", bytes(64), 0, 1024).to_json()
        {'name': 'gpu_in', 'device_id': 0, 'byte_size': 1024}
    """

    name: str
    raw_handle: bytes
    device_id: int
    byte_size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def to_record(self) -> dict[str, Any]:
        """What the registry folder keeps (the handle too, so that every server process can open it)."""
        return {"kind": "cuda", **self.to_json(), "raw_handle": self.raw_handle.hex()}

    @classmethod
    def check(cls, name: str, raw_handle: Any, device_id: Any, byte_size: Any) -> CudaRegionStatus:
        """A checked registration.

        Raises:
            InputError: a handle that is not 64 bytes, a device id or a size that is not an int in range.

        Example:
            >>> CudaRegionStatus.check("g", b"x", 0, 64)
            Traceback (most recent call last):
            ...
            amdinfer.errors.InputError: CUDA shared-memory region 'g': raw_handle has 1 bytes, expected the 64 bytes of a cudaIpcMemHandle_t (tritonclient.utils.cuda_shared_memory.get_raw_handle)
        """  # noqa: E501
        where = f"CUDA shared-memory region {name!r}"
        if not isinstance(raw_handle, (bytes, bytearray)) or len(raw_handle) != HANDLE_BYTES:
            got = f"{len(raw_handle)} bytes" if isinstance(raw_handle, (bytes, bytearray)) else repr(raw_handle)[:40]
            raise InputError(
                f"{where}: raw_handle has {got}, expected the {HANDLE_BYTES} bytes of a cudaIpcMemHandle_t "
                "(tritonclient.utils.cuda_shared_memory.get_raw_handle)"
            )
        for label, value, low in (("device_id", device_id, 0), ("byte_size", byte_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"{where}: got {label}={value!r}, expected an int >= {low}")
        return cls(name, bytes(raw_handle), device_id, byte_size)


class DeviceMemory(Protocol):
    """An opened region: copies in and out of ``byte_size`` bytes of device memory."""

    def read(self, offset: int, size: int) -> memoryview: ...
    def write(self, offset: int, data: np.ndarray) -> None: ...
    def close(self) -> None: ...


class DeviceIpc(Protocol):
    """What opens IPC handles in this process (:class:`RuntimeIpc`, :class:`HostIpc`)."""

    name: str

    def device_count(self) -> int: ...
    def open(self, where: str, handle: bytes, device_id: int, byte_size: int) -> DeviceMemory: ...


class DeviceRegion:
    """One process's opening of a registered CUDA region: bounds-checked reads and writes.

    Example:
        >>> class Fake:
        ...     def read(self, offset, size): return memoryview(bytes(range(offset, offset + size)))
        ...     def close(self): pass
        >>> region = DeviceRegion(CudaRegionStatus("g", bytes(64), 0, 16), (0, 0), Fake())
        >>> bytes(region.read("input 'x'", 4, 4))
        b'\\x04\\x05\\x06\\x07'
        >>> region.read("input 'x'", 12, 8)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': offset 12 + byte_size 8 = 20 runs past region 'g' (16 bytes)
    """

    def __init__(self, spec: CudaRegionStatus, token: tuple[int, int], memory: Any) -> None:
        self.spec, self.token, self.memory = spec, token, memory
        self._lock = threading.Lock()  # a copy in flight finishes before the handle is closed

    def window(self, where: str, offset: int, size: int) -> tuple[int, int]:
        if offset + size > self.spec.byte_size:
            raise InputError(
                f"{where}: offset {offset} + byte_size {size} = {offset + size} runs past region "
                f"{self.spec.name!r} ({self.spec.byte_size} bytes)"
            )
        return offset, offset + size

    def check(self, where: str, offset: int, size: int) -> None:
        self.window(where, offset, size)

    def read(self, where: str, offset: int, size: int) -> memoryview:
        start, _ = self.window(where, offset, size)
        with self._lock:
            return self._memory(where).read(start, size)

    def write(self, where: str, offset: int, size: int, array: np.ndarray) -> None:
        start, _ = self.window(where, offset, size)
        with self._lock:
            self._memory(where).write(start, array)

    def _memory(self, where: str) -> Any:
        if self.memory is None:
            raise InputError(f"{where}: CUDA shared-memory region {self.spec.name!r} was unregistered")
        return self.memory

    def close(self) -> None:
        with self._lock:
            memory, self.memory = self.memory, None
        if memory is not None:
            memory.close()


def pread_exact(fd: int, offset: int, size: int) -> tuple[np.ndarray, int]:
    """``size`` bytes at ``offset`` of the file ``fd`` read into a fresh buffer, and how many bytes were there.

    A read system call never faults: from a file that shrank (a shared-memory object its owner truncated)
    it returns short. A mapping of the same file is no such thing: touching a page past its new end is
    SIGBUS, which kills the whole server, every other client's requests with it.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     _ = f.write(bytes(range(10))); f.flush()
        ...     buf, got = pread_exact(f.fileno(), 6, 8)
        >>> got, buf[:got].tolist()
        (4, [6, 7, 8, 9])
    """
    buf = np.empty(size, np.uint8)
    view, got = buf.data, 0
    while got < size:  # a regular file reads short only at its end; large reads come in pieces of 2 GiB
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return buf, got


def pwrite_all(fd: int, offset: int, data: np.ndarray) -> None:
    """Write ``data``'s bytes at ``offset`` of the file ``fd`` (a write past a shrunk end grows the file
    again, it never faults, unlike a store through a mapping).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     pwrite_all(f.fileno(), 2, np.array([7, 8], np.uint8))
        ...     _ = f.seek(0); f.read()
        b'\\x00\\x00\\x07\\x08'
    """
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    done = 0
    while done < len(raw):
        done += os.pwrite(fd, raw[done:], offset + done)


@dataclass(frozen=True)
class _Runtime:
    """One GPU runtime with CUDA's IPC calls: where its library is and the prefix of its function names."""

    label: str
    prefix: str
    names: tuple[str, ...]  # sonames tried after the copy already loaded and ctypes.util's
    short: str  # for ctypes.util.find_library and /proc/self/maps
    wheel_globs: tuple[str, ...] = ()  # under each sys.path entry (pip wheels)


_RUNTIMES = {
    "cuda": _Runtime("CUDA runtime (libcudart)", "cuda", ("libcudart.so.13", "libcudart.so.12", "libcudart.so"),
                     "cudart", ("nvidia/cuda_runtime/lib/libcudart.so.*", "nvidia/cu13/lib/libcudart.so.*")),
    "hip": _Runtime("HIP runtime (libamdhip64)", "hip", ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                    "/opt/rocm/lib/libamdhip64.so"), "amdhip64"),
}  # fmt: skip


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


def handle_struct(handle: bytes) -> _Handle:
    """The ``cudaIpcMemHandle_t``/``hipIpcMemHandle_t`` passed by value: all 64 bytes, NUL bytes included.

    (``_Handle(handle)`` would not do: a ``c_char`` array field set from bytes stops at the first NUL byte, and
    the driver then refuses the handle with "invalid argument", as it did on an H200.)

    Example:
        >>> h = bytes([1, 0, 2]) + bytes(61)
        >>> bytes(memoryview(handle_struct(h))) == h
        True
    """
    return _Handle.from_buffer_copy(handle)


def _candidates(runtime: _Runtime) -> list[str]:
    """Library paths to try: the copy the process already loaded (ORT's, torch's) first."""
    found = []
    try:
        with open("/proc/self/maps") as maps:
            found += sorted({line.split()[-1] for line in maps if f"lib{runtime.short}.so" in line})
    except OSError:
        pass
    if name := ctypes.util.find_library(runtime.short):
        found.append(name)
    for folder in sys.path:
        for pattern in runtime.wheel_globs:
            found += sorted(glob.glob(os.path.join(folder, pattern)))
    return list(dict.fromkeys([*found, *runtime.names]))


class RuntimeIpc:
    """IPC handles opened through the CUDA runtime or the HIP runtime (ctypes, no Python bindings needed).

    Args:
        kind: ``"cuda"`` or ``"hip"``.

    Raises:
        InputError: no copy of the runtime could be loaded (the message lists what was tried), or it sees no
            device (no driver, no GPU).

    Example:
        >>> try:
        ...     ipc = RuntimeIpc("cuda")
        ... except InputError:  # no CUDA runtime on this machine: the message lists what was tried
        ...     ipc = None
        >>> ipc is None or ipc.device_count() >= 0
        True
    """

    def __init__(self, kind: str) -> None:
        runtime = _RUNTIMES[kind]
        self.name, self._p, tried = runtime.label, runtime.prefix, []
        for path in _candidates(runtime):  # the first copy that loads and sees a device (a driver, a GPU)
            try:
                self.path, self._lib = path, ctypes.CDLL(path)
                self._fn("GetErrorString").restype = ctypes.c_char_p
                self._fn("IpcOpenMemHandle").argtypes = [ctypes.POINTER(ctypes.c_void_p), _Handle, ctypes.c_uint]
                self._fn("Memcpy").argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                self._fn("IpcCloseMemHandle").argtypes = [ctypes.c_void_p]
                self._fn("StreamSynchronize").argtypes = [ctypes.c_void_p]
                if self.device_count() > 0:
                    return
                tried.append(f"{path}: sees no device")
            except (OSError, AttributeError, InputError) as exc:
                tried.append(f"{path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        raise InputError(f"{runtime.label} is not usable; tried {'; '.join(tried)}")

    def __repr__(self) -> str:
        return f"RuntimeIpc({self.name}: {self.path})"

    def _fn(self, name: str) -> Any:
        return getattr(self._lib, self._p + name)

    def _call(self, where: str, name: str, *args: Any) -> None:
        code = self._fn(name)(*args)
        if code != 0:
            text = (self._fn("GetErrorString")(code) or b"?").decode(errors="replace")
            raise InputError(f"{where}{': ' if where else ''}{self._p}{name} failed with error {code} ({text})")

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        self._call("", "GetDeviceCount", ctypes.byref(count))
        return count.value

    def open(self, where: str, handle: bytes, device_id: int, byte_size: int) -> DeviceMemory:
        self._call(where, "SetDevice", device_id)
        ptr = ctypes.c_void_p()
        self._call(where, "IpcOpenMemHandle", ctypes.byref(ptr), handle_struct(handle), 1)  # lazy peer access
        memory = _RuntimeMemory(self, where, device_id, int(ptr.value or 0))
        # a byte_size past the exported allocation would make every copy of the region run off its mapping
        held = self.allocation_bytes(memory.ptr)
        if held is not None and byte_size > held:
            memory.close()
            raise InputError(
                f"{where}: byte_size {byte_size} is larger than the device allocation of raw_handle ({held} bytes)"
            )
        return memory

    def allocation_bytes(self, ptr: int) -> int | None:
        """The bytes from ``ptr`` to the end of its device allocation, from the driver
        (``cuMemGetAddressRange``, ``hipMemGetAddressRange``); ``None`` when it cannot say."""
        try:
            fn = (
                self._lib.hipMemGetAddressRange
                if self._p == "hip"
                else ctypes.CDLL("libcuda.so.1").cuMemGetAddressRange_v2
            )
        except (OSError, AttributeError):
            return None
        base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)  # CUdeviceptr / hipDeviceptr_t: 64-bit
        if fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) != 0:
            return None
        return int(base.value + size.value - ptr)


class _RuntimeMemory:
    """Opened device memory: ``Memcpy`` device to host (inputs) and host to device (outputs)."""

    def __init__(self, ipc: RuntimeIpc, where: str, device_id: int, ptr: int) -> None:
        self.ipc, self.where, self.device_id, self.ptr = ipc, where, device_id, ptr

    def read(self, offset: int, size: int) -> memoryview:
        host = np.empty(size, np.uint8)
        self.ipc._call(self.where, "SetDevice", self.device_id)  # the runtime's current device is per thread
        self.ipc._call(self.where, "Memcpy", host.ctypes.data, self.ptr + offset, size, _TO_HOST)
        return memoryview(host.data).toreadonly()

    def write(self, offset: int, data: np.ndarray) -> None:
        data = np.ascontiguousarray(data)
        self.ipc._call(self.where, "SetDevice", self.device_id)
        self.ipc._call(self.where, "Memcpy", self.ptr + offset, data.ctypes.data, data.nbytes, _TO_DEVICE)
        # from pageable memory Memcpy may return before the DMA lands: the client reads after the response
        self.ipc._call(self.where, "StreamSynchronize", None)

    def close(self) -> None:
        self.ipc._fn("IpcCloseMemHandle")(ctypes.c_void_p(self.ptr))


def host_handle(key: str) -> bytes:
    """A 64-byte "handle" that :class:`HostIpc` opens as the POSIX shared-memory object ``key`` (tests).

    Example:
        >>> len(host_handle("/amdinfer-gpu-in")), host_handle("/x")[:20]
        (64, b'amdinfer-host-ipc:x\\x00')
    """
    name = key.lstrip("/").encode()
    if len(_HOST_MAGIC) + len(name) > HANDLE_BYTES:
        raise InputError(f"key: got {key!r}, expected at most {HANDLE_BYTES - len(_HOST_MAGIC)} bytes")
    return (_HOST_MAGIC + name).ljust(HANDLE_BYTES, b"\0")


class HostIpc:
    """A stand-in for a GPU runtime (the test seam, ``AMDINFER_DEVICE_IPC=host``): one "device", whose
    handles (:func:`host_handle`) name POSIX shared-memory objects; reads and writes copy, as a device would.

    Example:
        >>> from multiprocessing import shared_memory
        >>> block = shared_memory.SharedMemory(create=True, size=16)
        >>> memory = HostIpc().open("region 'g'", host_handle(block.name), 0, 16)
        >>> memory.write(4, np.arange(3, dtype=np.uint8)); bytes(memory.read(4, 3))
        b'\\x00\\x01\\x02'
        >>> memory.close(); block.close(); block.unlink()
    """

    name = "host memory (test stand-in for a GPU runtime)"

    def device_count(self) -> int:
        return 1

    def open(self, where: str, handle: bytes, device_id: int, byte_size: int) -> DeviceMemory:
        name = handle[len(_HOST_MAGIC) :].rstrip(b"\0").decode(errors="replace")
        if not handle.startswith(_HOST_MAGIC) or not name or "/" in name or name in (".", ".."):
            raise InputError(f"{where}: raw_handle is not a handle this server can open ({self.name})")
        try:
            fd = os.open(os.path.join("/dev/shm", name), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise InputError(f"{where}: cannot open the memory of raw_handle ({exc.strerror})") from None
        try:
            if os.fstat(fd).st_size < byte_size:
                raise InputError(f"{where}: byte_size {byte_size} is larger than the memory of raw_handle")
        except BaseException:
            os.close(fd)
            raise
        return _HostMemory(fd, where, byte_size)


class _HostMemory:
    """The stand-in's memory: ``pread``/``pwrite`` of the object (no mapping: a shrink must not be SIGBUS)."""

    def __init__(self, fd: int, where: str, byte_size: int) -> None:
        self.fd, self.where, self.byte_size = fd, where, byte_size

    def _check(self) -> None:
        size = os.fstat(self.fd).st_size
        if size < self.byte_size:
            raise InputError(
                f"{self.where}: registered as {self.byte_size} bytes, but the memory of raw_handle has shrunk to "
                f"{size} bytes"
            )

    def read(self, offset: int, size: int) -> memoryview:
        self._check()
        buf, got = pread_exact(self.fd, offset, size)
        if got < size:
            raise InputError(
                f"{self.where}: registered as {self.byte_size} bytes, but the memory of raw_handle has shrunk to "
                f"{offset + got} bytes"
            )
        return buf.data.toreadonly()

    def write(self, offset: int, data: np.ndarray) -> None:
        self._check()
        pwrite_all(self.fd, offset, data)

    def close(self) -> None:
        os.close(self.fd)


def load_device_ipc() -> DeviceIpc:
    """The opener this process uses: ``AMDINFER_DEVICE_IPC`` (``auto``: the CUDA runtime, else HIP).

    Raises:
        InputError: no GPU runtime could be loaded or sees a device (the message says what was tried), or an
            unknown value.

    Example:
        >>> os.environ[IPC_ENV] = "host"
        >>> load_device_ipc().name
        'host memory (test stand-in for a GPU runtime)'
        >>> del os.environ[IPC_ENV]
    """
    choice = os.environ.get(IPC_ENV, "auto") or "auto"
    if choice == "host":
        return HostIpc()
    if choice not in ("auto", *_RUNTIMES):
        raise InputError(f"{IPC_ENV}: got {choice!r}, expected auto, {', '.join(_RUNTIMES)} or host")
    why = []
    for kind in _RUNTIMES if choice == "auto" else (choice,):
        try:
            return RuntimeIpc(kind)
        except InputError as exc:
            why.append(str(exc))
    raise InputError(f"{NO_RUNTIME}; none is usable here: {' | '.join(why)}. {NO_RUNTIME_HINT}")
