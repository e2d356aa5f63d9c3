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

This module keeps the registry; :mod:`._shm_region` is one system region's opened object (the ``pread`` and
``pwrite`` above) and :mod:`._shm_requests` the tensor parameters of an infer request, whose names are
re-exported here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ._cuda_shm import NO_RUNTIME, NO_RUNTIME_HINT, CudaRegionStatus, DeviceIpc, DeviceRegion, load_device_ipc
from ._shm_region import RegionStatus, SystemRegion, object_path
from ._shm_requests import REGION, read_shared_inputs, shm_reference, uses_shm, write_shared_outputs

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

#: The folder of registrations shared by the server processes of one ``amdinfer serve`` (set by the supervisor).
REGISTRY_ENV = "AMDINFER_SHM_REGISTRY"
#: The longest region name (UTF-8 bytes); a registration is a file named by the name in hex.
MAX_NAME_BYTES = 100
logger = logging.getLogger("amdinfer.serve")


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
        self._mapped: dict[str, SystemRegion | DeviceRegion] = {}
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
        object_path(key)
        with self._lock, _no_paths():
            self._record(spec, SystemRegion(spec, (0, 0)))  # opens and size-checks the object first
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

    def _record(self, spec: RegionStatus | CudaRegionStatus, mapped: SystemRegion | DeviceRegion) -> None:
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

    def _lookup(self, where: str, region: str) -> SystemRegion | DeviceRegion:
        """The opening of ``region`` as registered now (opened again if it was registered again elsewhere)."""
        self._check_enabled()
        check_region_name(f"{where}: ", region)
        with _no_paths():
            return self._lookup_checked(where, region)

    def _lookup_checked(self, where: str, region: str) -> SystemRegion | DeviceRegion:
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
                opened = (
                    self._open_device(spec, token) if isinstance(spec, CudaRegionStatus) else SystemRegion(spec, token)
                )
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
