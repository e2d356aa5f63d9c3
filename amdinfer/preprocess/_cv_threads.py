"""OpenCV's own thread pool kept to one thread while amdinfer places images on several threads of its own.

OpenCV runs ``cvtColor``, ``resize`` and ``warpAffine`` on a pool of its own (``parallel_for_``, one worker per
core). With amdinfer's placement pool on the same cores (one decode and letterbox per thread), each of our
threads asks that pool for the cores the others are using: on the H200 host's 16 cores ``map`` of JPEG paths ran
at 0.30x the engine with OpenCV's default and 0.53x with ``cv2.setNumThreads(1)``. :func:`single_threaded_opencv`
sets ``cv2.setNumThreads(1)`` while at least one multi-threaded placement runs and puts back the count it found
when the last one ends.

The setting is **process-wide** (OpenCV has one pool): OpenCV calls made by other threads of the process while a
placement runs are single-threaded too. The first time it changes the count, the ``amdinfer.preprocess``
logger says so once at DEBUG. Without OpenCV installed it does nothing; OpenCV is imported when installed but
not yet imported (the placement would import it anyway when its stages use it).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ._common import _have, _import

__all__ = ["single_threaded_opencv"]

log = logging.getLogger("amdinfer.preprocess")

_lock = threading.Lock()
_users = 0  # placements inside the context now
_saved: int | None = None  # the count found when the first entered, when it was changed
_logged = False


def _opencv() -> Any:
    """``cv2`` when it is installed (imported if need be), else ``None``."""
    cv2 = sys.modules.get("cv2")
    if cv2 is not None or not _have("cv2"):
        return cv2
    try:
        return _import("cv2")
    except ImportError:  # installed but broken: nothing to set
        return None


def _enter() -> None:
    global _users, _saved, _logged
    with _lock:
        _users += 1
        if _users > 1:
            return
        cv2 = _opencv()
        if cv2 is None:
            return
        found = int(cv2.getNumThreads())
        if found > 1:
            cv2.setNumThreads(1)
            _saved = found
            if not _logged:
                _logged = True
                log.debug(
                    "OpenCV's thread pool set to 1 thread (from %d) while images are placed on several threads; "
                    "put back when the last placement ends (process-wide)",
                    found,
                )


def _exit() -> None:
    global _users, _saved
    with _lock:
        _users -= 1
        if _users > 0 or _saved is None:
            return
        saved, _saved = _saved, None
        cv2 = sys.modules.get("cv2")
        if cv2 is not None and int(cv2.getNumThreads()) == 1:  # not if the caller set another count meanwhile
            cv2.setNumThreads(saved)


@contextlib.contextmanager
def single_threaded_opencv(active: bool = True) -> Iterator[None]:
    """OpenCV on one thread inside the block (see the module); refcounted, so nested and concurrent use is safe.

    Args:
        active: ``False`` makes it do nothing (a placement on one thread keeps OpenCV's pool).

    Example:
        >>> import cv2
        >>> before = cv2.getNumThreads()
        >>> with single_threaded_opencv():
        ...     with single_threaded_opencv():
        ...         inside = cv2.getNumThreads()
        ...     still = cv2.getNumThreads()
        >>> inside, still, cv2.getNumThreads() == before
        (1, 1, True)
    """
    if not active:
        yield
        return
    _enter()
    try:
        yield
    finally:
        _exit()
