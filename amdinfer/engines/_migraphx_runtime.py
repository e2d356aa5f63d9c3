"""MIGraphX's runtime as amdinfer meets it, without needing ``migraphx`` to run: importing it (and saying why
an import failed: the PyPI placeholder, a missing ``PYTHONPATH``, missing ROCm libraries), the ``MIGRAPHX_*``
environment, telling device errors from model errors, and HIP device selection through ``libamdhip64``
(``hipSetDevice``).

The MIGraphX API used here was read from ``src/py/migraphx_py.cpp`` of ROCm/AMDMIGraphX
(HEAD f729a52, 2026-05-29).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib
import importlib.metadata
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BackendUnavailableError

__all__ = [
    "HipRuntime",
    "diagnose_import_failure",
    "import_migraphx",
    "looks_like_device_error",
    "migraphx_environment",
]


#: Where ROCm installs the ``migraphx`` extension module (``/opt/rocm/lib/migraphx.cpython-3XX-....so``).
ROCM_LIB_DIRS = ("/opt/rocm/lib", "/opt/rocm/lib64")

INSTALL_HINT = (
    "install MIGraphX from ROCm (e.g. `sudo apt install migraphx` on Ubuntu with AMD's ROCm repository; "
    "it ships the Python module as /opt/rocm/lib/migraphx.cpython-3XX-x86_64-linux-gnu.so) and put it on "
    "the path: `export PYTHONPATH=/opt/rocm/lib:$PYTHONPATH` (and `LD_LIBRARY_PATH=/opt/rocm/lib` if its "
    "libraries are not found); check with `amdinfer doctor`. The PyPI package named `migraphx` (0.0.1) is "
    "an empty placeholder, not MIGraphX"
)


# ---------------------------------------------------------------------- importing
def diagnose_import_failure(
    error: str,
    *,
    dist_version: str | None,
    dist_has_module: bool,
    rocm_modules: Sequence[str],
    python_tag: str,
    imported_without_api: bool = False,
) -> str:
    """Explain why ``import migraphx`` did not give MIGraphX, and how to fix it.

    Args:
        error: the ``ImportError`` text (empty when the import succeeded but the module is not MIGraphX).
        dist_version: version of an installed distribution named ``migraphx`` (``None`` if none).
        dist_has_module: whether that distribution installed any module file.
        rocm_modules: ``migraphx*.so`` files found in ROCm's library folders.
        python_tag: this interpreter's tag, e.g. ``"cpython-311"``.
        imported_without_api: ``import migraphx`` succeeded but the module has no ``parse_onnx``.

    Example:
        >>> msg = diagnose_import_failure("No module named 'migraphx'", dist_version="0.0.1", dist_has_module=False,
        ...                               rocm_modules=[], python_tag="cpython-311")
        >>> "PyPI package 'migraphx' 0.0.1 is an empty placeholder" in msg, "pip uninstall migraphx" in msg
        (True, True)
    """
    head = "backend 'migraphx': "
    if dist_version is not None and (not dist_has_module or imported_without_api):
        why = (
            f"the installed PyPI package 'migraphx' {dist_version} is an empty placeholder (it installs no MIGraphX "
            "module); `pip uninstall migraphx`, then "
        )
        return head + why + INSTALL_HINT
    if imported_without_api:
        return (
            head
            + f"`import migraphx` found a module without MIGraphX's API ({error or 'no parse_onnx'}); "
            + INSTALL_HINT
        )
    missing_lib = re.search(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file", error)
    if missing_lib:
        return (
            head + f"the migraphx module was found but its library {missing_lib.group(1)} cannot be loaded ({error}); "
            "add ROCm's library folder to the loader path: `export LD_LIBRARY_PATH=/opt/rocm/lib:$LD_LIBRARY_PATH`, "
            "and check that the ROCm version matches the one MIGraphX was built for"
        )
    if rocm_modules:
        matching = [m for m in rocm_modules if python_tag in os.path.basename(m)]
        if matching:
            folder = os.path.dirname(matching[0])
            return (
                head + f"MIGraphX is installed ({matching[0]}) but not on Python's path; "
                f"`export PYTHONPATH={folder}:$PYTHONPATH`"
            )
        built = sorted(
            {m.group(0) for m in (re.search(r"cpython-\d+", os.path.basename(p)) for p in rocm_modules) if m}
        )
        return (
            head + f"ROCm's MIGraphX module exists only for {built or rocm_modules} ({', '.join(rocm_modules)}), "
            f"but this interpreter is {python_tag}; run a Python version it was built for (or build MIGraphX for "
            "this one)"
        )
    return head + f"`import migraphx` failed ({error}); " + INSTALL_HINT


def _dist_info() -> tuple[str | None, bool]:
    try:
        dist = importlib.metadata.distribution("migraphx")
    except importlib.metadata.PackageNotFoundError:
        return None, False
    files = [str(f) for f in (dist.files or [])]
    has_module = any(
        (f.startswith("migraphx") and (f.endswith((".py", ".so", ".pyd")))) and ".dist-info" not in f for f in files
    )
    return dist.version, has_module


def _rocm_modules() -> list[str]:
    roots = list(ROCM_LIB_DIRS)
    if os.environ.get("ROCM_PATH"):
        roots.insert(0, os.path.join(os.environ["ROCM_PATH"], "lib"))
    found: list[str] = []
    for root in roots:
        found.extend(sorted(glob.glob(os.path.join(root, "migraphx*.so"))))
    return list(dict.fromkeys(found))


def import_migraphx() -> Any:
    """Import AMD's ``migraphx`` module, or raise :class:`BackendUnavailableError` saying why and how to fix it.

    Example:
        >>> try:
        ...     import_migraphx()
        ... except BackendUnavailableError as exc:
        ...     exc.backend
        'migraphx'
    """
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    try:
        module = importlib.import_module("migraphx")
    except ImportError as exc:
        version, has_module = _dist_info()
        msg = diagnose_import_failure(
            str(exc), dist_version=version, dist_has_module=has_module, rocm_modules=_rocm_modules(), python_tag=tag
        )
        raise BackendUnavailableError(msg, backend="migraphx", cause=str(exc)) from exc
    if not hasattr(module, "parse_onnx") or not hasattr(module, "get_target"):
        version, has_module = _dist_info()
        where = getattr(module, "__file__", None) or "a namespace package"
        msg = diagnose_import_failure(
            f"module at {where} has no parse_onnx/get_target",
            dist_version=version,
            dist_has_module=has_module,
            rocm_modules=_rocm_modules(),
            python_tag=tag,
            imported_without_api=True,
        )
        raise BackendUnavailableError(msg, backend="migraphx", cause=f"no MIGraphX API in {where}")
    return module


def migraphx_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``MIGRAPHX_*`` environment variables set now (they change what MIGraphX compiles; part of cache keys).

    Example:
        >>> migraphx_environment({"MIGRAPHX_DISABLE_MLIR": "1", "HOME": "/root"})
        {'MIGRAPHX_DISABLE_MLIR': '1'}
    """
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if k.startswith("MIGRAPHX_")}


_DEVICE_ERROR_WORDS = ("hip", "no device", "not loaded or not supported", "cannot open shared object", "gpu")


def looks_like_device_error(message: str) -> bool:
    """Whether a MIGraphX error is about the device or runtime libraries rather than the model.

    Example:
        >>> looks_like_device_error("Failed to get device properties: hipErrorNoDevice")
        True
        >>> looks_like_device_error("PARSE_CONV: padding mode not supported")
        False
    """
    text = message.lower()
    return any(word in text for word in _DEVICE_ERROR_WORDS)


# ---------------------------------------------------------------------- HIP device selection
@dataclass
class HipRuntime:
    """The few HIP runtime calls amdinfer needs, through ``ctypes`` on the ``libamdhip64`` MIGraphX loaded.

    MIGraphX's GPU target compiles for, and a loaded program binds to, the calling thread's *current* HIP
    device (``target::get_context()`` uses ``hipGetDevice``); its Python module offers no way to choose one.
    Setting ``HIP_VISIBLE_DEVICES`` works only before HIP initializes, i.e. before anything in the process
    touched the GPU. ``hipSetDevice`` is per thread and can be called at any time, so the engine makes its
    device current around compiling, loading and running, and restores the caller's device afterwards.

    Example:
        >>> hip = HipRuntime.find()  # None on a machine without ROCm
        >>> hip is None or hip.device_count() >= 0
        True
    """

    lib: Any
    path: str

    @classmethod
    def find(cls, loaded_maps: str | None = None) -> HipRuntime | None:
        """The HIP runtime already loaded in this process (by MIGraphX), else one on the loader path; or None."""
        candidates: list[str] = []
        if loaded_maps is None:
            with contextlib.suppress(OSError):
                with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
                    loaded_maps = f.read()
        for line in (loaded_maps or "").splitlines():
            part = line.split()[-1] if line.split() else ""
            if "libamdhip64.so" in os.path.basename(part) and part not in candidates:
                candidates.append(part)
        candidates += ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"]
        candidates += [os.path.join(d, "libamdhip64.so") for d in ROCM_LIB_DIRS]
        for name in candidates:
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            for fn in ("hipGetDeviceCount", "hipGetDevice", "hipSetDevice"):
                getattr(lib, fn).restype = ctypes.c_int
            return cls(lib, name)
        return None

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            raise BackendUnavailableError(
                f"backend 'migraphx': {call} failed with HIP error {status} (no usable AMD GPU, or the driver and "
                "ROCm versions disagree; check with `rocminfo` and `amdinfer doctor`)",
                backend="migraphx",
                cause=f"{call} -> {status}",
            )

    def device_count(self) -> int:
        """Number of GPUs HIP sees (after ``HIP_VISIBLE_DEVICES``)."""
        n = ctypes.c_int(0)
        self._check(self.lib.hipGetDeviceCount(ctypes.byref(n)), "hipGetDeviceCount")
        return int(n.value)

    def get_device(self) -> int:
        """The calling thread's current device."""
        d = ctypes.c_int(0)
        self._check(self.lib.hipGetDevice(ctypes.byref(d)), "hipGetDevice")
        return int(d.value)

    def set_device(self, device: int) -> None:
        """Make ``device`` current for the calling thread."""
        self._check(self.lib.hipSetDevice(ctypes.c_int(device)), f"hipSetDevice({device})")

    @contextlib.contextmanager
    def using(self, device: int) -> Iterator[None]:
        """Make ``device`` current for the block, then restore the thread's previous device."""
        previous = self.get_device()
        if previous != device:
            self.set_device(device)
        try:
            yield
        finally:
            if previous != device:
                self.set_device(previous)
