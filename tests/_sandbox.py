"""The test run's sandbox: every user-level default folder points into one temporary folder.

``enter()`` is called by ``tests/conftest.py`` before any test is collected, so the suite (and the doctests
run in the same pytest invocation) never writes into the user's amdinfer cache, matplotlib/IPython/Jupyter
folders or ``$XDG_CACHE_HOME``. ``snapshot()`` of the user's amdinfer cache taken before and after the run
must be equal; ``conftest.pytest_sessionfinish`` fails the run if it is not.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Environment variables with a user-level default, each pointed at its own folder inside the sandbox.
SANDBOXED = (
    "AMDINFER_CACHE_DIR",
    "XDG_CACHE_HOME",
    "MPLCONFIGDIR",
    "IPYTHONDIR",
    "JUPYTER_RUNTIME_DIR",
    "JUPYTER_DATA_DIR",
    "JUPYTER_CONFIG_DIR",
    # hypothesis (tests/robustness/test_fuzz.py) writes its example database and a cache of the constants
    # it collects from source files under ./.hypothesis unless told otherwise
    "HYPOTHESIS_STORAGE_DIRECTORY",
)


def user_cache_dir() -> Path:
    """Where amdinfer's cache would go for this user if the tests did not redirect it."""
    from amdinfer.cache import default_cache_dir

    return default_cache_dir()


def snapshot(folder: Path) -> frozenset[tuple[str, int, int]] | None:
    """``(relative path, size, mtime_ns)`` of every file under ``folder``; ``None`` if it does not exist."""
    if not folder.is_dir():
        return None
    found = set()
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            try:
                st = path.lstat()
            except OSError:
                continue
            found.add((str(path.relative_to(folder)), st.st_size, st.st_mtime_ns))
    return frozenset(found)


def enter() -> Path:
    """Point every variable of :data:`SANDBOXED` into a new temporary folder and return that folder."""
    root = Path(tempfile.mkdtemp(prefix="amdinfer-tests-"))
    for name in SANDBOXED:
        folder = root / name.lower()
        folder.mkdir()
        os.environ[name] = str(folder)
    os.environ.setdefault("MPLBACKEND", "Agg")
    return root
