"""The inter-process lock builders of one key take, so one compiles and the others load its result."""

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
    locks = root / ".locks"
    try:
        make_root()
        locks.mkdir(exist_ok=True)
        fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.warning("amdinfer cache %s: cannot create a lock file (%s); building unlocked", root, exc)
        yield False
        return
    got = False
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                got = True
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log.warning(
                        "amdinfer cache %s: lock for %s held for over %.0f s; building unlocked", root, key, timeout
                    )
                    break
                time.sleep(0.05)
        yield got
    finally:
        if got:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
