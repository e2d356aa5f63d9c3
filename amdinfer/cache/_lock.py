"""The inter-process lock builders of one key take, so one compiles and the others load its result.

``clear`` may delete a lock file: it does so only while holding the lock itself (:func:`remove_unless_held`), and
a process that obtains a lock checks that the file it locked is still the one at the path (else it locks the
new one), so deleting a lock file never lets two builders hold "the" lock at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

log = logging.getLogger("amdinfer.cache")


@contextlib.contextmanager
def file_lock(root: Path, key: str, timeout: float, make_root: Callable[[], None]) -> Iterator[bool]:
    """Hold ``<root>/.locks/<key>.lock`` (``flock``); yields whether the lock was obtained.

    Without ``fcntl`` (non-POSIX), when the lock file cannot be created, or after ``timeout`` seconds,
    yields ``False`` (logged) and the caller builds unlocked.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield False
        return
    path = root / ".locks" / f"{key}.lock"
    deadline = time.monotonic() + timeout
    fd = -1
    got = False
    try:
        while not got:
            try:
                make_root()
                path.parent.mkdir(exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as exc:
                log.warning("amdinfer cache %s: cannot create a lock file (%s); building unlocked", root, exc)
                break
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    got = True
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
            if not got:
                log.warning(
                    "amdinfer cache %s: lock for %s held for over %.0f s; building unlocked", root, key, timeout
                )
                break
            if not _still_at(fd, path):  # `clear` deleted the file we waited on: lock the current one
                got = False
                os.close(fd)
                fd = -1
        yield got
    finally:
        if fd >= 0:
            if got:
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextlib.contextmanager
def holding_if_free(path: Path) -> Iterator[bool]:
    """Take the lock at ``path`` if nobody holds it (never waits); yields whether it was taken.

    ``clear`` deletes a key's lock and ``.building`` files only inside this, so a build in progress (which holds
    its key's lock) keeps its files. Yields ``True`` without locking where ``fcntl`` is missing.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield True
        return
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        yield True  # no lock file: no locked build of this key
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
