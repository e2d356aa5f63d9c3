"""Reading untrusted files and writing user-named outputs safely.

Every file amdinfer reads on a caller's behalf (models, external data, images, ``.npz`` inputs, cache
manifests) goes through here, so a FIFO never blocks, ``/dev/zero`` is never read until memory runs out, and a
path with a NUL byte or of the wrong type is a typed error that names the argument. Every output file a user
names (``amdinfer compile --out``, ``quantize --out``, ``profile --trace``, ...) is written by
:func:`write_atomic`: a temporary file beside it, renamed over it, so a symbolic link planted at the path is
replaced, never followed. See ``docs/security.md``.

Example:
    >>> from amdinfer._support._files import check_path
    >>> check_path("model.onnx", "model").name
    'model.onnx'
    >>> check_path("a\\0b", "model")
    Traceback (most recent call last):
    ...
    amdinfer.errors.OptionError: model: got 'a\\x00b', a path with a NUL byte; expected a file path
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import AmdinferError, InputError, OptionError

__all__ = [
    "allocation_limit",
    "check_allocation",
    "check_path",
    "file_kind",
    "read_npz",
    "read_regular",
    "same_file",
    "write_atomic",
]


def check_path(value: Any, what: str, *, error: type[AmdinferError] = OptionError) -> Path:
    """``value`` as a :class:`~pathlib.Path`, or ``error`` naming ``what`` when it is not a usable path.

    Example:
        >>> check_path(5, "cache_dir")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: cache_dir: got int 5, expected a path (str or os.PathLike)
    """
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise error(f"{what}: got {type(value).__name__} {value!r}, expected a path (str or os.PathLike)")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise error(f"{what}: got {type(value).__name__} {value!r}, expected a path (str or os.PathLike)")
    if "\0" in text:
        raise error(f"{what}: got {text!r}, a path with a NUL byte; expected a file path")
    if not text:
        raise error(f"{what}: got an empty path, expected a file path")
    return Path(text)


def file_kind(mode: int) -> str:
    """A readable name for the file type in ``st_mode`` ("a directory", "a FIFO", ...).

    Example:
        >>> file_kind(stat.S_IFIFO)
        'a FIFO (named pipe)'
    """
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"  # pragma: no cover


def read_regular(
    path: Any,
    what: str,
    *,
    error: type[AmdinferError] = InputError,
    max_bytes: int | None = None,
    offset: int = 0,
    length: int | None = None,
) -> bytes:
    """The bytes of a regular file, checked before reading: never blocks on a FIFO, never reads a device.

    The file is opened non-blocking and checked with ``fstat`` on the open descriptor, so it cannot be swapped
    for a FIFO between the check and the read.

    Args:
        path: the file.
        what: how the error names it (``"model '/x.onnx'"``, ``"LoadImage"``).
        error: the error class raised.
        max_bytes: refuse larger files (``None``: the allocation limit).
        offset: first byte to read.
        length: bytes to read from ``offset`` (``None``: to the end); the file must hold them.

    Raises:
        error: missing, not a regular file, unreadable, too large, or shorter than ``offset + length``.

    Example:
        >>> read_regular("/dev/zero", "image")
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: image '/dev/zero': is a character device, expected a regular file
    """
    p = check_path(path, what, error=error)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} '{p}': file not found") from None
    except OSError as exc:
        raise error(f"{what} '{p}': cannot open ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} '{p}': is {file_kind(st.st_mode)}, expected a regular file")
    except BaseException:
        os.close(fd)
        raise
    with open(fd, "rb", closefd=True) as f:
        size = st.st_size
        limit = allocation_limit() if max_bytes is None else max_bytes
        if offset < 0 or (length is not None and length < 0):
            raise error(f"{what} '{p}': got offset {offset} / length {length}, expected non-negative values")
        want = size - offset if length is None else length
        if offset + want > size:
            raise error(
                f"{what} '{p}': has {size} bytes, expected at least {offset + want} (offset {offset} + length {want})"
            )
        if want > limit:
            raise error(f"{what} '{p}': {want} bytes to read, more than the limit of {limit} bytes")
        try:
            if offset:
                f.seek(offset)
            data = f.read(want)
        except OSError as exc:
            raise error(f"{what} '{p}': cannot read ({exc.strerror or exc})") from None
    if len(data) != want:
        raise error(f"{what} '{p}': read {len(data)} bytes, expected {want} (the file changed while reading)")
    return data


def allocation_limit() -> int:
    """Bytes amdinfer agrees to allocate for one array or one file read: the machine's physical memory.

    Example:
        >>> allocation_limit() > 0
        True
    """
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
        return 1 << 40


def check_allocation(shape: Any, dtype: Any, what: str, *, error: type[AmdinferError] = InputError) -> int:
    """The bytes an array of ``shape`` and ``dtype`` needs; ``error`` when that cannot be allocated.

    Computed with Python ints, so it never overflows and allocates nothing.

    Example:
        >>> check_allocation((2, 3), np.float32, "input 'x'")
        24
        >>> check_allocation((10**12, 3, 32, 32), np.float32, "input 'x'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': shape (1000000000000, 3, 32, 32) float32 needs 12288000000000000 bytes...
    """
    count = 1
    for d in shape:
        count *= int(d)
    nbytes = count * np.dtype(dtype).itemsize
    limit = allocation_limit()
    if nbytes > limit:
        raise error(
            f"{what}: shape {tuple(int(d) for d in shape)} {np.dtype(dtype)} needs {nbytes} bytes, "
            f"more than this machine's memory ({limit} bytes); expected a smaller shape"
        )
    return nbytes


def read_npz(path: Any, what: str, *, error: type[AmdinferError] = InputError) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, with every header checked before its array is allocated.

    Object (pickled) arrays are refused; each member's declared shape must fit its stored size.

    Example:
        >>> read_npz("/nonexistent.npz", "--inputs")
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: --inputs '/nonexistent.npz': file not found
    """
    raw = read_regular(path, what, error=error)
    where = f"{what} '{path}'"
    try:
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise error(f"{where}: not an .npz file ({exc}); expected a file written by numpy.savez") from None
    out: dict[str, np.ndarray] = {}
    with zf:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            try:
                with zf.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
                    else:
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
                    if dtype.hasobject:
                        raise error(f"{where}: array {name!r} holds Python objects (pickled); expected numeric arrays")
                    nbytes = check_allocation(shape, dtype, f"{where}: array {name!r}", error=error)
                    stored = info.file_size - member.tell()  # the zip's declared size, less the header
                    if nbytes > stored:
                        raise error(
                            f"{where}: array {name!r} declares shape {shape} ({nbytes} bytes) "
                            f"but stores {stored} bytes; the file is truncated or corrupt"
                        )
                    data = member.read(nbytes)
                    if len(data) != nbytes:
                        raise error(f"{where}: array {name!r}: {len(data)} bytes, expected {nbytes} (truncated)")
                    arr = np.frombuffer(data, dtype=dtype)
                    arr = arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)
                    out[name] = arr.copy()
            except AmdinferError:
                raise
            except Exception as exc:  # zlib, header syntax, ...
                raise error(
                    f"{where}: array {name!r} is not readable ({type(exc).__name__}: {exc}); "
                    "expected a file written by numpy.savez"
                ) from None
    return out


# ---------------------------------------------------------------------------------------------- writing
def same_file(a: Any, b: Any) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same resolved path, or (both existing) the same inode.

    Example:
        >>> same_file("/tmp/../tmp/x.onnx", "/tmp/x.onnx"), same_file("/tmp/x.onnx", "/tmp/y.onnx")
        (True, False)
    """
    try:
        if os.path.samefile(a, b):  # hard links, bind mounts, symbolic links
            return True
    except (OSError, ValueError):  # one of them does not exist (yet)
        pass
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):  # a symbolic-link loop
        return os.path.abspath(os.fspath(a)) == os.path.abspath(os.fspath(b))


def write_atomic(
    path: Any, data: bytes | bytearray | memoryview | Callable[[IO[bytes]], object], *, argument: str
) -> Path:
    """Write an output file the caller named: to a temporary file beside it, then :func:`os.replace` over it.

    A symbolic link at ``path`` is replaced by the new file, never followed (the file it points at is left
    as it was); a reader sees the old file or the new one, never half of one; the temporary file (same folder,
    created exclusively by :func:`tempfile.mkstemp`) is removed when anything fails. The new file gets the
    usual mode (``0o666`` less the umask).

    Args:
        path: the output file.
        data: the bytes, or a function that writes them to the binary file object it is given. Writers
            that take only a path may write to ``f.name`` (the temporary file; its name ends with ``path``'s
            suffix), but must not add to the name (``np.savez`` appends ``.npz`` to a path: give it ``f``).
        argument: the option or argument that named the file (``"--out"``), for errors.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OptionError: the folder does not exist or cannot be written, ``path`` is a folder, or writing failed
            (disk full). Errors of ``data`` itself propagate unchanged (after the clean-up).

    Example:
        >>> import os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> write_atomic(os.path.join(d, "a.bin"), b"abc", argument="--out").read_bytes()
        b'abc'
        >>> write_atomic(os.path.join(d, "b.txt"), lambda f: f.write(b"hi"), argument="--out").read_bytes()
        b'hi'
        >>> write_atomic(os.path.join(d, "missing", "c"), b"", argument="--out")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --out: cannot write '.../missing/c': folder '.../missing' does not exist
    """
    p = check_path(path, argument).expanduser()
    folder = p.parent
    if not folder.is_dir():
        raise OptionError(f"{argument}: cannot write '{p}': folder '{folder}' does not exist")
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(p).st_mode):
            raise OptionError(f"{argument}: cannot write '{p}': it is a folder; expected a file path")
    try:
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{p.name[:64]}.", suffix=f".tmp{p.suffix[:16]}")
    except OSError as exc:
        raise OptionError(f"{argument}: cannot write '{p}': {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        raw = io.FileIO(fd, "r+", closefd=True)
        raw.name = tmp_name  # type: ignore[misc]  # for writers that take only a path
        with io.BufferedRandom(raw) as f:
            os.fchmod(fd, 0o666 & ~_umask())
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            os.fsync(fd)
        st = os.lstat(tmp)
        if not stat.S_ISREG(st.st_mode):  # the writer replaced our file with something else
            raise OptionError(f"{argument}: the writer left {file_kind(st.st_mode)} at '{tmp}', expected a file")
        os.replace(tmp, p)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise OptionError(f"{argument}: cannot write '{p}': {exc.strerror or exc}") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return p


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _umask() -> int:
    """The process umask, read without changing it where Linux reports it (``os.umask`` is process-wide)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # pragma: no cover - non-Linux
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover
