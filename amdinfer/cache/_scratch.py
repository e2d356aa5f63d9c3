"""The scratch file a builder writes its artefact to, in ``<cache>/.building``, before the cache stores it."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["building_file", "written"]


def building_file(root: Path, key: str, suffix: str, make_root: Callable[[], None]) -> Path:
    """A new empty file in ``root/.building`` for a builder to overwrite (``OSError`` when it cannot be made).

    It exists for the whole build: ``clear`` removes an empty ``.building`` folder but leaves the files of a
    key whose lock is held. Creating it also probes that the folder is writable, as the runtime's own error
    would be opaque.
    """
    tmp_dir = root / ".building"
    for attempt in range(3):
        make_root()
        tmp_dir.mkdir(exist_ok=True)
        tmp = tmp_dir / f"{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return tmp
        except FileNotFoundError:
            if attempt == 2:  # `clear` keeps removing the empty folder between mkdir and open
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def written(path: Path) -> bool:
    """Whether a builder wrote ``path``: a regular file that is no longer the empty one made for it."""
    try:
        st = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size > 0
