"""One system shared-memory region as a server process sees it: its registration and its opened object.

:class:`RegionStatus` is what a client registered (a window of ``byte_size`` bytes at ``offset`` into the
POSIX object ``key``); :class:`SystemRegion` is this process's descriptor of that object, read with ``pread``
and written with ``pwrite``, each access checked against the window and against the object's current size
(a client can shrink its object at any time; :mod:`._shm` says why no mapping). :func:`object_path` keeps a
key inside ``/dev/shm``. :class:`~._shm.SharedMemoryRegistry` opens one per region and process, as it opens
a :class:`~._cuda_shm.DeviceRegion` for a CUDA region.

Example:
    >>> from multiprocessing import shared_memory
    >>> block = shared_memory.SharedMemory(create=True, size=8)
    >>> region = SystemRegion(RegionStatus("out0", "/" + block.name, 0, 8), (0, 0))
    >>> region.write("output 'y'", 4, 4, np.arange(4, dtype=np.uint8))
    >>> bytes(block.buf[:8])
    b'\\x00\\x00\\x00\\x00\\x00\\x01\\x02\\x03'
    >>> region.check("output 'y'", 6, 4)
    Traceback (most recent call last):
    ...
    amdinfer.errors.InputError: output 'y': offset 6 + byte_size 4 = 10 runs past region 'out0' (8 bytes)
    >>> region.close(); block.close(); block.unlink()
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ._cuda_shm import pread_exact, pwrite_all

__all__ = ["SHM_FOLDER", "RegionStatus", "SystemRegion", "object_path"]

SHM_FOLDER = Path("/dev/shm")


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


def object_path(key: Any) -> Path:
    """The file of a POSIX shared-memory key (``/name`` or ``name``) under /dev/shm, never outside it.

    Example:
        >>> object_path("/input0")
        PosixPath('/dev/shm/input0')
        >>> object_path("/a/../b")
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: key: got '/a/../b', expected one POSIX shared-memory name (no '/' after the first)
    """
    if not isinstance(key, str) or not key.strip("/"):
        raise InputError(f"key: got {key!r}, expected a shared-memory key such as '/input0'")
    name = key.lstrip("/")
    if "/" in name or "\0" in name or name in (".", "..") or len(name.encode()) > 255:
        raise InputError(f"key: got {key!r}, expected one POSIX shared-memory name (no '/' after the first)")
    return SHM_FOLDER / name


class SystemRegion:
    """One process's descriptor of a registered region's object (``offset + byte_size`` bytes of it).

    Reads and writes are ``pread``/``pwrite`` under a lock (so that a close never meets a copy in flight and
    a reused descriptor number is never read), each after an ``fstat`` that the object still holds the
    registered window; a read that comes back short is an object that shrank meanwhile.

    Example:
        >>> from multiprocessing import shared_memory
        >>> block = shared_memory.SharedMemory(create=True, size=16)
        >>> block.buf[:4] = bytes([1, 2, 3, 4])
        >>> region = SystemRegion(RegionStatus("in0", "/" + block.name, 0, 16), (0, 0))
        >>> bytes(region.read("input 'x'", 0, 4))
        b'\\x01\\x02\\x03\\x04'
        >>> region.close(); block.close(); block.unlink()
    """

    def __init__(self, spec: RegionStatus, token: tuple[int, int]) -> None:
        path = object_path(spec.key)
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
