"""Triton's system shared-memory extension: regions registered by name, opened from ``/dev/shm`` by key.

A client creates a POSIX shared-memory object (``tritonclient.utils.shared_memory``), registers a window of
it under a name, and then names that region (with an offset and a byte size) instead of sending a tensor's
bytes. The server opens the object, checks every access against the registered window, reads each input
into a fresh buffer with ``pread`` (one copy, no socket) and writes outputs with ``pwrite``.

Why not a mapping, which would save that copy: the client owns the object and can shrink it at any time
(``ftruncate``); a mapped page past the new end is SIGBUS on first touch, and the engine touches input pages
long after any size check, so one client could kill the server and every other client's requests. A read or
write system call cannot fault that way: a shrunk object reads short, and that request alone is refused
(``InputError``, 400 / ``INVALID_ARGUMENT``) naming the tensor, the region and its registered and current
sizes.

The registrations live in a folder (one small file per region), so that every server process of
``amdinfer serve --devices 0,1`` sees what a client registered through any of them; each process opens a
region's object on first use and notices an unregistration at the next access. CUDA regions (Triton's CUDA
shared-memory extension, :mod:`._cuda_shm`) share the folder and the names: a name is one region of either
kind, and a tensor names either the same way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ._cuda_shm import (
    NO_RUNTIME,
    NO_RUNTIME_HINT,
    CudaRegionStatus,
    DeviceIpc,
    DeviceRegion,
    load_device_ipc,
    pread_exact,
    pwrite_all,
)

__all__ = [
    "REGION",
    "MAX_NAME_BYTES",
    "REGISTRY_ENV",
    "RegionStatus",
    "SharedMemoryRegistry",
    "check_region_name",
    "read_shared_inputs",
    "shm_reference",
    "uses_shm",
    "write_shared_outputs",
]

#: The tensor parameters of the extension (Triton's names).
REGION, OFFSET, BYTE_SIZE = "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"
#: The folder of registrations shared by the server processes of one ``amdinfer serve`` (set by the supervisor).
REGISTRY_ENV = "AMDINFER_SHM_REGISTRY"
SHM_FOLDER = Path("/dev/shm")
#: The longest region name (UTF-8 bytes); a registration is a file named by the name in hex.
MAX_NAME_BYTES = 100
logger = logging.getLogger("amdinfer.serve")
_DTYPES = {"BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
           "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
           "FP32": "float32", "FP64": "float64"}  # fmt: skip


@dataclass(frozen=True)
class RegionStatus:
    """One registered region, as the status call reports it.

    Example:
        >>> RegionStatus("in0", "/input0", 0, 64).to_json()
        {'name': 'in0', 'key': '/input0', 'offset': 0, 'byte_size': 64}
    """

    name: str
    key: str
    offset: int
    byte_size: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


def shm_reference(where: str, params: Mapping[str, Any] | None) -> tuple[str, int, int] | None:
    """``(region, offset, byte_size)`` when a tensor's parameters name a shared-memory region, else ``None``.

    Raises:
        InputError: a region without a byte size (or the reverse), or values of the wrong type.

    Example:
        >>> shm_reference("input 'x'", {"shared_memory_region": "in0", "shared_memory_byte_size": 48})
        ('in0', 0, 48)
        >>> shm_reference("input 'x'", {"binary_data_size": 48}) is None
        True
    """
    params = params or {}
    if REGION not in params and BYTE_SIZE not in params and OFFSET not in params:
        return None
    region, size, offset = params.get(REGION), params.get(BYTE_SIZE), params.get(OFFSET, 0)
    if not isinstance(region, str) or not region:
        raise InputError(f"{where}: got {REGION}={region!r}, expected the name of a registered region")
    for label, value in ((BYTE_SIZE, size), (OFFSET, offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{where}: got {label}={value!r} for region {region!r}, expected an int >= 0")
    return region, int(offset), int(size)  # type: ignore[arg-type]


def _object_path(key: Any) -> Path:
    """The file of a POSIX shared-memory key (``/name`` or ``name``) under /dev/shm, never outside it."""
    if not isinstance(key, str) or not key.strip("/"):
        raise InputError(f"key: got {key!r}, expected a shared-memory key such as '/input0'")
    name = key.lstrip("/")
    if "/" in name or "\0" in name or name in (".", "..") or len(name.encode()) > 255:
        raise InputError(f"key: got {key!r}, expected one POSIX shared-memory name (no '/' after the first)")
    return SHM_FOLDER / name


class _Opened:
    """One process's descriptor of a registered region's object (``offset + byte_size`` bytes of it).

    Reads and writes are ``pread``/``pwrite`` under a lock (so that a close never meets a copy in flight and
    a reused descriptor number is never read), each after an ``fstat`` that the object still holds the
    registered window; a read that comes back short is an object that shrank meanwhile.
    """

    def __init__(self, spec: RegionStatus, token: tuple[int, int]) -> None:
        path = _object_path(spec.key)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise InputError(
                f"region {spec.name!r}: no shared-memory object {spec.key!r}; create it first, e.g. "
                "with tritonclient.utils.shared_memory.create_shared_memory_region"
            ) from None
        except OSError as exc:
            raise InputError(f"region {spec.name!r}: cannot open {spec.key!r} ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"region {spec.name!r}: {spec.key!r} is not a shared-memory object")
            end = spec.offset + spec.byte_size
            if end > info.st_size:
                raise InputError(
                    f"region {spec.name!r}: offset {spec.offset} + byte_size {spec.byte_size} = {end} runs past "
                    f"the end of {spec.key!r} ({info.st_size} bytes)"
                )
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self.spec = spec
        self.token = token
        self._lock = threading.Lock()

    def window(self, where: str, offset: int, size: int) -> tuple[int, int]:
        """The absolute byte range of ``size`` bytes at ``offset`` into the region, bounds-checked."""
        spec = self.spec
        if offset + size > spec.byte_size:
            raise InputError(
                f"{where}: offset {offset} + byte_size {size} = {offset + size} runs past region {spec.name!r} "
                f"({spec.byte_size} bytes)"
            )
        return spec.offset + offset, spec.offset + offset + size

    def _shrank(self, where: str, size: int, *, during: bool = False) -> InputError:
        spec = self.spec
        now = f"shrank during the read (it ended after {size} bytes)" if during else f"has shrunk to {size} bytes"
        return InputError(
            f"{where}: region {spec.name!r} was registered as {spec.offset + spec.byte_size} bytes of "
            f"{spec.key!r} (offset {spec.offset} + byte_size {spec.byte_size}), but the object {now}"
        )

    def _checked_fd(self, where: str) -> int:
        """The descriptor, once ``fstat`` says the object still holds the registered window (lock held)."""
        if self.fd is None:
            raise InputError(f"{where}: shared-memory region {self.spec.name!r} was unregistered")
        size = os.fstat(self.fd).st_size
        if size < self.spec.offset + self.spec.byte_size:
            raise self._shrank(where, size)
        return self.fd

    def check(self, where: str, offset: int, size: int) -> None:
        self.window(where, offset, size)
        with self._lock:
            self._checked_fd(where)

    def read(self, where: str, offset: int, size: int) -> memoryview:
        start, _ = self.window(where, offset, size)
        with self._lock:
            buf, got = pread_exact(self._checked_fd(where), start, size)
        if got < size:  # shrunk between the fstat and the read
            raise self._shrank(where, start + got, during=True)
        return buf.data.toreadonly()

    def write(self, where: str, offset: int, size: int, arr: np.ndarray) -> None:
        # a shrink after the fstat only makes pwrite grow the client's object again: no fault, no one else's bytes
        start, _ = self.window(where, offset, size)
        with self._lock:
            pwrite_all(self._checked_fd(where), start, arr)

    def close(self) -> None:
        with self._lock:
            fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def _no_paths() -> Iterator[None]:
    """A fault of the registry folder (full disk, removed folder) as an ``OSError`` without the file name: the
    folder is the server's temporary path, which clients must not see."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise
        raise OSError(exc.errno, f"shared-memory registry: {exc.strerror}") from None


class SharedMemoryRegistry:
    """The system shared-memory regions of a server, by name: register, unregister, status, read, write.

    Args:
        folder: where registrations are kept (shared by the processes of one server); ``None``: a new
            temporary folder, removed by :meth:`close`.
        enabled: ``False`` refuses every call with ``disabled_reason`` (a server bound to other interfaces
            than loopback: a remote client must not name this host's memory).
        disabled_reason: the sentence that says why and how to turn it on.
        device_ipc: what opens CUDA IPC handles (``None``: :func:`~._cuda_shm.load_device_ipc` at the first
            CUDA registration or access in this process).

    Example:
        >>> from multiprocessing import shared_memory
        >>> block = shared_memory.SharedMemory(create=True, size=64)
        >>> registry = SharedMemoryRegistry()
        >>> _ = registry.register("in0", "/" + block.name, 0, 64)
        >>> block.buf[:16] = np.arange(4, dtype=np.float32).tobytes()
        >>> registry.read("input 'x'", "in0", 0, 16).cast("f").tolist()
        [0.0, 1.0, 2.0, 3.0]
        >>> registry.read("input 'x'", "in0", 60, 16)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': offset 60 + byte_size 16 = 76 runs past region 'in0' (64 bytes)
        >>> os.truncate("/dev/shm/" + block.name, 0)  # the client shrinks its object: this request fails alone
        >>> registry.read("input 'x'", "in0", 0, 16)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': region 'in0' was registered as 64 bytes of '/...' (offset 0 + byte_size 64), but the object has shrunk to 0 bytes
        >>> registry.close(); block.close(); block.unlink()
    """  # noqa: E501

    def __init__(
        self,
        folder: str | Path | None = None,
        *,
        enabled: bool = True,
        disabled_reason: str = "",
        device_ipc: DeviceIpc | None = None,
    ) -> None:
        self._owned = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="amdinfer-shm-") if folder is None else folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.enabled = bool(enabled)
        self.disabled_reason = disabled_reason or "system shared memory is turned off on this server"
        self._mapped: dict[str, _Opened | DeviceRegion] = {}
        self._lock = threading.Lock()
        self._ipc = device_ipc
        self._ipc_error: str | None = None  # why no runtime loads here, without the library paths tried

    def device_ipc(self) -> DeviceIpc:
        """What opens CUDA IPC handles in this process (loaded once).

        Raises:
            InputError: no GPU runtime can be loaded here. The client's message names no library path (those
                are the server's files): the server's log has what was tried, once per process.
        """
        if self._ipc is None:
            if self._ipc_error is None:
                try:
                    self._ipc = load_device_ipc()
                    return self._ipc
                except InputError as exc:
                    logger.warning("%s", exc)
                    why = str(exc)
                    if why.startswith(NO_RUNTIME):  # what was tried names library paths
                        why = f"{NO_RUNTIME}; none is usable here (the server's log says what was tried)"
                        why += f". {NO_RUNTIME_HINT}"
                    self._ipc_error = why
            raise InputError(self._ipc_error)
        return self._ipc

    def _check_enabled(self) -> None:
        if not self.enabled:
            raise InputError(self.disabled_reason)

    def _file(self, name: str) -> Path:
        return self.folder / (name.encode().hex() + ".json")

    def register(self, name: Any, key: Any, offset: Any, byte_size: Any) -> RegionStatus:
        """Register ``byte_size`` bytes at ``offset`` of the object ``key`` as region ``name``.

        Raises:
            InputError: the extension is off, a bad name/key/offset/size, an object that does not exist or is
                too small for the window, or a name that is already registered.
        """
        self._check_enabled()
        check_region_name("", name)
        for label, value, low in (("offset", offset, 0), ("byte_size", byte_size, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"region {name!r}: got {label}={value!r}, expected an int >= {low}")
        spec = RegionStatus(name, key, offset, byte_size)
        _object_path(key)
        with self._lock, _no_paths():
            self._record(spec, _Opened(spec, (0, 0)))  # opens and size-checks the object first
        return spec

    def register_cuda(self, name: Any, raw_handle: Any, device_id: Any, byte_size: Any) -> CudaRegionStatus:
        """Register ``byte_size`` bytes of device memory exported by ``raw_handle`` (a ``cudaIpcMemHandle_t``)
        on device ``device_id`` as CUDA region ``name``; the handle is opened here to check it.

        Raises:
            InputError: the extension is off, a bad name/handle/device/size, no GPU runtime in the server, a
                device this server does not see, a handle the runtime cannot open, a name already registered.
        """
        self._check_enabled()
        check_region_name("", name)
        spec = CudaRegionStatus.check(name, raw_handle, device_id, byte_size)
        with self._lock, _no_paths():
            self._record(spec, self._open_device(spec, (0, 0)))
        return spec

    def _record(self, spec: RegionStatus | CudaRegionStatus, mapped: _Opened | DeviceRegion) -> None:
        """Write the registration (atomically, refusing a taken name) and keep this process's opening."""
        name = spec.name
        record = spec.to_record() if isinstance(spec, CudaRegionStatus) else spec.to_json()
        tmp = self.folder / f".{name.encode().hex()}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps(record))
        try:
            os.link(tmp, self._file(name))  # atomic, and fails if the name is taken (by any process)
        except FileExistsError:
            mapped.close()
            held = self._read(name)
            what = (
                f"key {held.key!r}"
                if isinstance(held, RegionStatus)
                else f"CUDA, device {held.device_id}"
                if held
                else "?"
            )
            raise InputError(f"region {name!r}: already registered ({what}); unregister it first") from None
        finally:
            tmp.unlink()
        info = os.stat(self._file(name))
        mapped.token = (info.st_ino, info.st_mtime_ns)
        self._drop(name)
        self._mapped[name] = mapped

    def _open_device(self, spec: CudaRegionStatus, token: tuple[int, int]) -> DeviceRegion:
        where = f"CUDA shared-memory region {spec.name!r}"
        ipc = self.device_ipc()
        count = ipc.device_count()
        if spec.device_id >= count:
            raise InputError(
                f"{where}: device_id {spec.device_id} is not a device of this server ({ipc.name} sees {count}: "
                f"0 to {count - 1})"
            )
        return DeviceRegion(spec, token, ipc.open(where, spec.raw_handle, spec.device_id, spec.byte_size))

    def unregister(self, name: str = "", *, cuda: bool = False) -> list[str]:
        """Unregister region ``name`` (``""``: every region of the kind); unknown names and regions of the
        other kind are ignored, as Triton does.

        Returns:
            The names unregistered.

        Raises:
            InputError: the extension is off, or a name that no region can have (see :func:`check_region_name`).
        """
        self._check_enabled()
        if name:
            check_region_name("", name)
        names = [name] if name else [s.name for s in self.status(cuda=cuda)]
        gone = []
        with self._lock, _no_paths():
            for n in names:
                if isinstance(self._read(n), CudaRegionStatus) != cuda:
                    continue
                try:
                    self._file(n).unlink()
                    gone.append(n)
                except FileNotFoundError:
                    pass
                self._drop(n)
        return gone

    def status(self, name: str = "", *, cuda: bool = False) -> list[Any]:
        """The registered regions of the kind (system, or ``cuda``: :class:`CudaRegionStatus`); ``name``: that
        one only.

        Raises:
            InputError: ``name`` is not registered as a region of the kind, or no region can have it.
        """
        self._check_enabled()
        kind = CudaRegionStatus if cuda else RegionStatus
        if name:
            check_region_name("", name)
            with _no_paths():
                spec = self._read(name)
            if not isinstance(spec, kind):
                label = "a CUDA" if cuda else "a system"
                raise InputError(f"region {name!r}: not registered as {label} shared-memory region; registered: "
                                 f"{self._names()}")  # fmt: skip
            return [spec]
        with _no_paths():
            specs = [self._read(bytes.fromhex(p.stem).decode()) for p in sorted(self.folder.glob("*.json"))]
        return [s for s in specs if isinstance(s, kind)]

    def read(self, where: str, region: str, offset: int, size: int) -> memoryview:
        """``size`` bytes at ``offset`` into ``region``, read into a fresh buffer (a read-only view of it).

        Raises:
            InputError: the region is not registered, the window is outside it, or its object has shrunk
                since registration (before or during the read).
        """
        return self._lookup(where, region).read(where, offset, size)

    def check(self, where: str, region: str, offset: int, size: int) -> None:
        """Check that ``region`` is registered and holds ``size`` bytes at ``offset`` (before a run)."""
        self._lookup(where, region).check(where, offset, size)

    def write(self, where: str, region: str, offset: int, size: int, array: np.ndarray) -> int:
        """Copy ``array`` into ``region`` at ``offset``; the bytes written.

        Raises:
            InputError: the array is larger than ``size``, or the window is outside the region.
        """
        arr = np.ascontiguousarray(array)
        if arr.dtype.hasobject:
            raise InputError(f"{where}: a {arr.dtype} output cannot be written to shared memory region {region!r}")
        if arr.nbytes > size:
            raise InputError(
                f"{where}: got {arr.nbytes} bytes (shape {list(arr.shape)}, {arr.dtype}), but "
                f"shared_memory_byte_size is {size} in region {region!r}"
            )
        self._lookup(where, region).write(where, offset, size, arr)
        return arr.nbytes

    def close(self) -> None:
        """Close every region of this process (and remove the folder if this registry made it)."""
        with self._lock:
            for name in list(self._mapped):
                self._drop(name)
        if self._owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _read(self, name: str) -> RegionStatus | CudaRegionStatus | None:
        try:
            data = json.loads(self._file(name).read_text())
        except FileNotFoundError:
            return None
        if data.get("kind") == "cuda":
            handle = bytes.fromhex(data["raw_handle"])
            return CudaRegionStatus(data["name"], handle, int(data["device_id"]), int(data["byte_size"]))
        return RegionStatus(data["name"], data["key"], int(data["offset"]), int(data["byte_size"]))

    def _names(self) -> list[str]:
        return sorted(bytes.fromhex(p.stem).decode() for p in self.folder.glob("*.json"))

    def _drop(self, name: str) -> None:
        mapped = self._mapped.pop(name, None)
        if mapped is not None:
            mapped.close()

    def _lookup(self, where: str, region: str) -> _Opened | DeviceRegion:
        """The opening of ``region`` as registered now (opened again if it was registered again elsewhere)."""
        self._check_enabled()
        check_region_name(f"{where}: ", region)
        with _no_paths():
            return self._lookup_checked(where, region)

    def _lookup_checked(self, where: str, region: str) -> _Opened | DeviceRegion:
        try:
            info = os.stat(self._file(region))
        except FileNotFoundError:
            with self._lock:
                self._drop(region)
            raise InputError(
                f"{where}: shared-memory region {region!r} is not registered; registered: {self._names()}"
            ) from None
        token = (info.st_ino, info.st_mtime_ns)
        with self._lock:
            mapped = self._mapped.get(region)
            if mapped is None or mapped.token != token:
                self._drop(region)
                spec = self._read(region)
                if spec is None:
                    raise InputError(f"{where}: shared-memory region {region!r} is not registered")
                opened = self._open_device(spec, token) if isinstance(spec, CudaRegionStatus) else _Opened(spec, token)
                mapped = self._mapped[region] = opened
            return mapped


def check_region_name(where: str, name: Any) -> str:
    """``name`` if a region can have it (1 to :data:`MAX_NAME_BYTES` bytes of UTF-8 text without NUL), the
    one check of every call that names a region: register, status, unregister and each tensor of an infer.

    Args:
        where: the start of the message (``"input 'x': "``; ``""`` for the shared-memory calls).
        name: the name the client sent.

    Raises:
        InputError: any other name (a long one is shown cut, with its length).

    Example:
        >>> check_region_name("", "in0")
        'in0'
        >>> check_region_name("input 'x': ", "a" * 128)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': region name: got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (128 bytes), expected 1 to 100 bytes of text
    """  # noqa: E501
    if isinstance(name, str):
        try:
            size = len(name.encode())
        except UnicodeEncodeError:  # a lone surrogate from a JSON escape
            size = -1
        if 0 < size <= MAX_NAME_BYTES and "\0" not in name:
            return name
        shown = repr(name) if len(name) <= 40 else f"{name[:32]!r}... ({size} bytes)"
        if size < 0:
            shown += " (not UTF-8)"
    else:
        shown = repr(name)[:40]
    raise InputError(f"{where}region name: got {shown}, expected 1 to {MAX_NAME_BYTES} bytes of text")


def uses_shm(request: Any) -> bool:
    """Whether an ``InferRequest`` names a shared-memory region for an input or an output.

    Example:
        >>> from types import SimpleNamespace as T
        >>> uses_shm(T(inputs=[T(parameters={"shared_memory_region": "in0"})], request_outputs=None))
        True
    """
    tensors = [*request.inputs, *(request.request_outputs or [])]
    return any(t.parameters and REGION in t.parameters for t in tensors)


def read_shared_inputs(registry: SharedMemoryRegistry, request: Any) -> list[tuple[str, tuple[str, int, int]]]:
    """Read each shared-memory input of an ``InferRequest`` into its own buffer (see the module's docstring
    for why a copy) and check the output regions before anything runs.

    Returns:
        ``(output name, (region, offset, byte size))`` of each output asked for in shared memory.

    Raises:
        InputError: an input with data as well, a non-numeric datatype, a byte size that is not the
            tensor's, or a region that is not registered or too small.

    Example:
        >>> from types import SimpleNamespace as T
        >>> request = T(inputs=[T(name="x", datatype="FP32", shape=[2, 2], _raw_data=None, data=None,
        ...             parameters={"shared_memory_region": "in0", "shared_memory_byte_size": 8})],
        ...             request_outputs=None)
        >>> registry = SharedMemoryRegistry()
        >>> read_shared_inputs(registry, request)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': shared_memory_byte_size is 8 in region 'in0', expected 16 bytes ...
        >>> registry.close()
    """
    for inp in request.inputs:
        where = f"input {inp.name!r}"
        ref = shm_reference(where, inp.parameters)
        if ref is None:
            continue
        if inp._raw_data is not None or inp.data not in (None, []):
            raise InputError(f"{where}: has both data and a shared-memory region")
        if inp.datatype not in _DTYPES:
            raise InputError(f"{where}: got datatype {inp.datatype!r}, expected one of {', '.join(_DTYPES)}")
        shape = list(inp.shape)
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise InputError(f"{where}: got shape {shape}, expected non-negative integers")
        region, offset, size = ref
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[inp.datatype]).itemsize
        if size != expected:
            raise InputError(
                f"{where}: shared_memory_byte_size is {size} in region {region!r}, expected {expected} bytes "
                f"for shape {shape} {inp.datatype}"
            )
        inp._raw_data = registry.read(where, region, offset, size)
    wanted = []
    for out in request.request_outputs or []:
        ref = shm_reference(f"output {out.name!r}", out.parameters)
        if ref is not None:
            registry.check(f"output {out.name!r}", *ref)
            wanted.append((out.name, ref))
    return wanted


def write_shared_outputs(registry: SharedMemoryRegistry, response: Any, wanted: list) -> None:
    """Copy the outputs asked for in shared memory into their regions; the response keeps no data for them,
    only the region and the bytes written (``shared_memory_byte_size``).

    Example:
        >>> write_shared_outputs(None, None, [])  # nothing asked for: nothing to do
    """
    if not wanted:
        return
    by_name = {o.name: o for o in response.outputs}
    for name, (region, offset, size) in wanted:
        out = by_name[name]
        written = registry.write(f"output {name!r}", region, offset, size, np.asarray(out.data))
        params: dict[str, Any] = {REGION: region, BYTE_SIZE: written}
        if offset:
            params[OFFSET] = offset
        out._data, out._raw_data, out._parameters = None, b"", params
