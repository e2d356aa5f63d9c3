"""The compiled-model cache: MIGraphX programs (``.mxr``) and ONNX Runtime optimized models, keyed and verified.

An entry is a folder ``<root>/<key>/`` with the artefact and a small ``manifest.json`` that records the key,
the parts the key was made of (model hash, shapes, precision, options, backend and runtime version, GPU
architecture...), the artefact's size and SHA-256. Reads check all of it: a missing, truncated, corrupt or
mismatched entry is logged (logger ``amdinfer.cache``), removed and rebuilt by the caller; it is never
trusted. Writes go to a temporary file in the entry's folder and are moved into place with
:func:`os.replace`, manifest last, so a reader sees either the old entry, the new one or none. Builders of
the same key in several processes take a file lock, so one compiles and the others load its result.

The cache folder is, in order: the ``path=`` / ``cache_dir=`` you pass, ``$AMDINFER_CACHE_DIR``, the
platform's user cache dir (``platformdirs`` when installed, else ``$XDG_CACHE_HOME/amdinfer`` or
``~/.cache/amdinfer``).

Example:
    >>> import tempfile
    >>> from amdinfer.cache import CompiledModelCache
    >>> cache = CompiledModelCache(tempfile.mkdtemp())
    >>> key = cache.key(model="ab12", backend="demo", precision="fp32")
    >>> path = cache.put(key, lambda tmp: tmp.write_bytes(b"artefact"), parts={"backend": "demo"}, suffix=".bin")
    >>> cache.get(key).read_bytes()
    b'artefact'
    >>> [e.key == key for e in cache.entries()]
    [True]
"""

from __future__ import annotations

# The machine fingerprint lives in amdinfer._support._hardware (doctor needs it too); kept importable from here.
from .._support._hardware import _gfx_from_target_version, amd_gpu_archs, cpu_signature, visible_gpu_arch  # noqa: F401
from ._api import clear, list_entries
from ._entries import RUNTIME_DIRS, CacheEntry
from ._paths import CACHE_ENV, default_cache_dir, resolve_cache_dir
from ._store import CompiledModelCache

__all__ = [
    "CACHE_ENV",
    "RUNTIME_DIRS",
    "CacheEntry",
    "CompiledModelCache",
    "amd_gpu_archs",
    "clear",
    "cpu_signature",
    "default_cache_dir",
    "list_entries",
    "resolve_cache_dir",
]
