"""A bundle's ``manifest.json``: what was built, for which runtime and machine, and the hash of every file.

The manifest carries its own digest (``manifest_sha256``, over the rest of it), so an edited manifest is told
apart from a damaged file; :func:`check_files` compares every file with the hash the manifest holds.

Example:
    >>> data = seal({"format": FORMAT, "files": {}})
    >>> data["manifest_sha256"] == manifest_digest(data)
    True
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BundleError

__all__ = [
    "FORMAT",
    "MANIFEST",
    "check_environment",
    "check_files",
    "environment",
    "file_sha256",
    "manifest_digest",
    "read_manifest",
    "seal",
]

#: The ``format`` a bundle's manifest declares; another one is refused.
FORMAT = "amdinfer-bundle/1"
#: The manifest's file name inside a bundle folder.
MANIFEST = "manifest.json"
#: Environment fields compared at load: a difference refuses the bundle (``None`` in the bundle: not recorded).
CHECKED = ("amdinfer", "onnxruntime", "migraphx", "ep_versions", "machine", "cpu", "gpu")


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks.

    Example:
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as d:
        ...     p = Path(d) / "x"; _ = p.write_bytes(b"abc")
        ...     file_sha256(p)[:12]
        'ba7816bf8f01'
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_digest(data: Mapping[str, Any]) -> str:
    """The SHA-256 of the manifest's canonical JSON without its ``manifest_sha256`` field.

    Example:
        >>> manifest_digest({"a": 1}) == manifest_digest({"a": 1, "manifest_sha256": "x"})
        True
    """
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``manifest_sha256`` set (see :func:`manifest_digest`).

    Example:
        >>> len(seal({"format": FORMAT})["manifest_sha256"])
        64
    """
    return {**data, "manifest_sha256": manifest_digest(data)}


def environment(backend: str, providers: Sequence[str], device: int = 0) -> dict[str, Any]:
    """The versions and the machine a bundle is made for (compared by :func:`check_environment`).

    ``cpu`` is the instruction-set signature (ORT's CPU-optimized graphs use layout fusions chosen by the vector
    width: a graph from an AVX-512 machine is not valid on an AVX2 one); ``gpu`` the AMD GPU architecture where the
    backend compiles for one (``None`` for the CPU EP).

    Example:
        >>> env = environment("ort", ["CPUExecutionProvider"])
        >>> env["gpu"] is None, env["machine"] == platform.machine()
        (True, True)
    """
    from .._support._hardware import cpu_signature, visible_gpu_arch

    env: dict[str, Any] = {
        "amdinfer": getattr(sys.modules.get("amdinfer"), "__version__", None),
        "onnxruntime": None,
        "migraphx": None,
        "ep_versions": {},
        "machine": platform.machine(),
        "cpu": cpu_signature(),
        "gpu": None,
    }
    if backend == "ort":
        import onnxruntime as ort

        from ..engines.ort import provider_record

        built_in = set(ort.get_available_providers())  # registered plugin EPs are listed here too
        versions = {d.ep_name: _ep_version(d) for d in ort.get_ep_devices()}  # a plugin's own version first
        env["onnxruntime"] = ort.__version__
        env["ep_versions"] = {p: versions.get(p) or (ort.__version__ if p in built_in else None) for p in providers}
        records = [provider_record(p) for p in providers if p != "CPUExecutionProvider"]
        if any(r is None or r.gpu for r in records):  # a CPU plugin (OpenVINO on its CPU device) has no GPU
            env["gpu"] = visible_gpu_arch(device)
    else:
        import migraphx

        env["migraphx"] = str(getattr(migraphx, "__version__", "unknown"))
        env["gpu"] = visible_gpu_arch(device)
    return env


def _ep_version(device: Any) -> str | None:
    """A plugin EP's version as its device reports it (``ep_metadata["version"]``), where it does."""
    meta = getattr(device, "ep_metadata", None)
    try:
        return str(meta["version"]) if meta is not None and "version" in meta else None
    except (TypeError, KeyError):
        return None


def read_manifest(folder: Path) -> dict[str, Any]:
    """The bundle's manifest, checked to be amdinfer's format and unedited.

    Raises:
        BundleError: no or unreadable manifest, another format, or a digest that does not match its content.

    Example:
        >>> read_manifest(Path("/nonexistent"))
        Traceback (most recent call last):
        ...
        amdinfer.errors.BundleError: bundle '/nonexistent': no manifest.json (not a bundle folder, or copied without it)
    """
    path = folder / MANIFEST
    if not path.is_file():
        raise BundleError(
            f"bundle '{folder}': no {MANIFEST} (not a bundle folder, or copied without it)", field=MANIFEST
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"bundle '{folder}': {MANIFEST} cannot be read ({exc})", field=MANIFEST) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise BundleError(f"bundle '{folder}': {MANIFEST} has format {got!r}, expected {FORMAT!r}", field="format")
    if data.get("manifest_sha256") != manifest_digest(data):
        raise BundleError(
            f"bundle '{folder}': {MANIFEST} was edited after the bundle was written (its digest does not match its "
            f"content); rebuild it: {data.get('rebuild', 'amdinfer compile MODEL --bundle DIR')}",
            field=MANIFEST,
            rebuild=data.get("rebuild"),
        )
    return data


def check_files(folder: Path, data: Mapping[str, Any]) -> None:
    """Every file the manifest lists is there with its hash, and nothing but the manifest is unlisted.

    Raises:
        BundleError: naming the first missing, changed or unlisted file.
    """
    files: dict[str, str] = data.get("files", {})
    rebuild = data.get("rebuild")
    for name, digest in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise BundleError(
                f"bundle '{folder}': file {name!r} is missing; copy the whole folder, or rebuild it: {rebuild}",
                field=name,
                rebuild=rebuild,
            )
        if file_sha256(path) != digest:
            raise BundleError(
                f"bundle '{folder}': file {name!r} changed since the bundle was written (sha256 differs from the "
                f"manifest's {digest[:12]}); rebuild it: {rebuild}",
                field=name,
                rebuild=rebuild,
            )
    extra = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != MANIFEST and p.relative_to(folder).as_posix() not in files
    )
    if extra:
        raise BundleError(
            f"bundle '{folder}': file {extra[0]!r} is not in the manifest (added after the bundle was written); "
            f"remove it or rebuild: {rebuild}",
            field=extra[0],
            rebuild=rebuild,
        )


def check_environment(folder: Path, data: Mapping[str, Any], here: Mapping[str, Any]) -> None:
    """The bundle's runtime versions, providers' versions and machine are this machine's.

    Raises:
        BundleError: naming the first field that differs, both values and the rebuild command.

    Example:
        >>> env = {"amdinfer": "1", "onnxruntime": "1.32.0", "cpu": "x86_64:abc"}
        >>> check_environment(Path("b"), {"environment": env, "rebuild": "amdinfer compile m.onnx --bundle b"}, env)
        >>> try:
        ...     check_environment(Path("b"), {"environment": {**env, "onnxruntime": "1.31.0"}, "rebuild": "R"}, env)
        ... except BundleError as exc:
        ...     print(exc.field, exc.rebuild)
        onnxruntime R
    """
    built = data.get("environment", {})
    rebuild = data.get("rebuild")
    for name in CHECKED:
        want, got = built.get(name), here.get(name)
        if want is None or want == got:
            continue
        why = (
            " (the compiled graph is tied to the machine it was built on)" if name in ("cpu", "gpu", "machine") else ""
        )
        raise BundleError(
            f"bundle '{folder}': {name} is {want!r} in the bundle, {got!r} here{why}; rebuild it on this machine: "
            f"{rebuild}",
            field=name,
            rebuild=rebuild,
        )
