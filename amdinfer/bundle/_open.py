"""Loading a bundle: check the manifest, the files and the machine first, then open the compiled form without
compiling, and run the goldens on the first load on a machine (``load_bundle``)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..engines.base import Engine
from ..errors import BundleError, OptionError
from ._compile import KIND_EPCONTEXT, KIND_MXR, KIND_OPTIMIZED
from ._golden import check_goldens
from ._manifest import MANIFEST, check_environment, check_files, environment, read_manifest
from ._shaped import KIND_OPTIMIZED_PER_BUCKET

__all__ = ["bundled_model", "is_bundle", "load_bundle"]


def is_bundle(path: Any) -> bool:
    """Whether ``path`` is a folder holding a bundle's ``manifest.json``.

    Example:
        >>> is_bundle("/nonexistent"), is_bundle(b"bytes")
        (False, False)
    """
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = Path(path)
    return p.is_dir() and (p / MANIFEST).is_file()


def load_bundle(
    directory: str | os.PathLike,
    *,
    backend: str = "auto",
    providers: Any = None,
    device: int = 0,
    precision: str | None = None,
    verify: bool | None = None,
    **options: Any,
) -> Engine:
    """Open a bundle written by :func:`~amdinfer.bundle.write_bundle` (``amdinfer compile --bundle``).

    Checked first, before anything is loaded: the manifest is amdinfer's and unedited, every file is there with its
    hash, and this machine runs the versions and architecture the bundle was built for (and ORT's compiled-model
    compatibility check for EPContext models). Then the compiled form is opened as it is, with ONNX Runtime's
    graph optimizations off: nothing is optimized or compiled again.

    Args:
        directory: the bundle folder.
        backend: ``"auto"`` or the bundle's backend.
        providers: ``None`` or the bundle's providers (another list is refused: rebuild for it).
        device: GPU index.
        precision: ``None`` or the bundle's precision.
        verify: run the goldens; ``None`` runs them on the first load on this machine (a marker in the cache
            folder remembers the bundle's manifest hash), ``False`` never.
        **options: further engine options (``threads=``, ``shapes=``...).

    Returns:
        The engine; ``info.settings["bundle"]`` says which bundle (folder, manifest hash) and the goldens' result.

    Raises:
        BundleError: a tampered, incomplete or incompatible bundle, or a golden that does not match.

    Example:
        >>> import tempfile
        >>> from amdinfer.bundle import write_bundle
        >>> from amdinfer.testing.models import tiny_cnn
        >>> folder = write_bundle(tiny_cnn(), tempfile.mkdtemp() + "/b", batch_buckets=[1])
        >>> load_bundle(folder).info.settings["bundle"]["kind"]
        'ORT optimized graph, shared by the buckets'
    """
    folder = Path(directory)
    data = read_manifest(folder)
    check_files(folder, data)
    _check_request(folder, data, backend, providers, precision, options)
    names = [name for name, _ in data["providers"]]
    if data["kind"] == KIND_MXR:
        from ._mxr import check_mxr

        check_mxr(folder, data, device, options)  # MIGraphX's version, target and architecture first
    options.setdefault("on_new_shape", data.get("on_new_shape", "pad"))
    verdicts: dict[str, str] = {}
    if data["kind"] == KIND_EPCONTEXT:
        from ._epcontext import check_epcontext

        verdicts = check_epcontext(folder, data, device)  # ORT's compatibility API, the EP and its device first
    check_environment(folder, data, environment(data["backend"], names, device))
    engine = _open(folder, data, device, options)
    record: dict[str, Any] = {
        "dir": str(folder.resolve()),
        "manifest_sha256": data["manifest_sha256"],
        "kind": data["kind"],
        "buckets": [b["name"] for b in data["buckets"]],
        "precision": data["precision"],
        "model_sha256": data["model"]["sha256"],
        "certificate": data.get("certificate"),
        "compatibility": verdicts,
    }
    marker = _marker(data)
    if verify is None:
        verify = marker is None or not marker.is_file()
    if verify:
        try:
            record["verify"] = check_goldens(engine, folder, data)
        except BaseException:
            engine.close()
            raise
        _remember(marker, folder, record["verify"])
    else:
        seen = "verified on this machine before" if marker is not None and marker.is_file() else "verify=False"
        record["verify"] = {"ran": False, "passed": None, "summary": f"not run ({seen})"}
    engine.info.settings["bundle"] = record
    engine.info.precision = data["precision"]
    engine.info.notes.append(f"loaded from bundle {folder} (manifest {data['manifest_sha256'][:12]}): not compiled")
    return engine


def _check_request(
    folder: Path, data: dict[str, Any], backend: str, providers: Any, precision: str | None, options: dict[str, Any]
) -> None:
    """What the caller asks for must be what the bundle holds: a bundle is not recompiled for other settings."""
    rebuild = data.get("rebuild")
    if backend not in ("auto", data["backend"]):
        raise BundleError(
            f"bundle '{folder}': built for backend {data['backend']!r}, backend={backend!r} was asked for; rebuild "
            f"it with --backend {backend}: {rebuild}",
            field="backend",
            rebuild=rebuild,
        )
    if providers is not None:
        from ..engines.ort import resolve_provider_name

        asked = [
            resolve_provider_name(p if isinstance(p, str) else p[0])
            for p in ([providers] if isinstance(providers, str) else providers)
        ]
        held = [name for name, _ in data["providers"]]
        if asked != held[: len(asked)]:
            raise BundleError(
                f"bundle '{folder}': built for providers {held}, {asked} were asked for; rebuild it with "
                f"--providers {','.join(asked)}: {rebuild}",
                field="providers",
                rebuild=rebuild,
            )
    if precision not in (None, "fp32", data["precision"]):
        raise BundleError(
            f"bundle '{folder}': built at precision {data['precision']!r}, {precision!r} was asked for; rebuild it "
            f"with --precision {precision}: {rebuild}",
            field="precision",
            rebuild=rebuild,
        )
    for name in ("batch_buckets", "quantizer", "optimized_model_path", "graph_optimization"):
        if options.get(name) is not None:
            raise OptionError(
                f"{name}: a bundle is loaded as it was built ({data['kind']}); rebuild it to change {name}"
            )
    options.pop("cache_dir", None)  # the bundle is the compiled form; the cache is not used
    options.pop("cache", None)


def _open(folder: Path, data: dict[str, Any], device: int, options: dict[str, Any]) -> Engine:
    """The engine over the bundle's compiled form, with nothing optimized or compiled again."""
    if data["kind"] == KIND_MXR:
        from ._mxr import open_mxr

        return open_mxr(folder, data, device, options)
    if data["kind"] == KIND_EPCONTEXT:
        from . import _epcontext
        from ._epcontext import open_epcontext

        _epcontext.RELOAD = reload_bundle

        return open_epcontext(folder, data, device, options)
    if data["kind"] == KIND_OPTIMIZED_PER_BUCKET:
        from . import _epcontext
        from ._shaped import open_per_bucket

        _epcontext.RELOAD = reload_bundle

        return open_per_bucket(folder, data, device, options)
    from ..engines.ort import OrtEngine

    buckets = data["buckets"]
    files = {b["file"] for b in buckets}
    providers = [(name, dict(opts)) for name, opts in data["providers"]]
    keywords: dict[str, Any] = dict(
        providers=providers, device=device, graph_optimization="disable", cache=False, transformer_fusion=False,
        tuning=False, **options,
    )  # fmt: skip
    batches = data.get("batch_buckets") or []
    if data["kind"] == KIND_OPTIMIZED and len(files) == 1:
        if len(batches) == len(buckets):
            keywords["batch_buckets"] = batches
        engine = OrtEngine(str(folder / buckets[0]["file"]), **keywords)
        for b in buckets if not engine.batch_buckets else ():  # shape buckets: prepared, others under on_new_shape
            zeros = {s.name: np.broadcast_to(np.zeros((), s.dtype), b["shapes"][s.name]) for s in engine.inputs}
            engine._new_shapes.prepare(zeros)
        return engine
    # Static models, one per bucket: the largest bucket's model, smaller batches padded to it.
    largest = max(buckets, key=lambda b: b.get("batch", 0))
    if batches:
        keywords["batch_buckets"] = [largest["batch"]]
    return OrtEngine(str(folder / largest["file"]), **keywords)


def _marker(data: dict[str, Any]) -> Path | None:
    """The file that records a verified load of this bundle on this machine, in the cache folder."""
    from .._support._hardware import cpu_signature
    from ..cache import resolve_cache_dir

    try:
        root = Path(resolve_cache_dir(None))
    except Exception:  # no usable cache folder: verify every time
        return None
    machine = re.sub(r"[^A-Za-z0-9_.-]", "_", cpu_signature())
    return root / "bundles-verified" / f"{data['manifest_sha256'][:24]}-{machine}.json"


def _remember(marker: Path | None, folder: Path, result: dict[str, Any]) -> None:
    if marker is None:
        return
    from ..cache import CompiledModelCache

    try:
        CompiledModelCache(marker.parent.parent)._make_root()  # an amdinfer cache folder (CACHEDIR.TAG) holds it
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"bundle": str(folder.resolve()), **result}, default=str), encoding="utf-8")
    except OSError:
        pass  # a read-only cache: the goldens run again next time


def bundled_model(directory: str | os.PathLike) -> Any:
    """The :class:`~amdinfer.model.ModelSource` of a bundle's first compiled model (its inputs and outputs are the
    source model's), read after the manifest and file checks.

    Example:
        >>> import tempfile
        >>> from amdinfer.bundle import write_bundle
        >>> from amdinfer.testing.models import tiny_cnn
        >>> [s.name for s in bundled_model(write_bundle(tiny_cnn(), tempfile.mkdtemp() + "/b")).inputs]
        ['input']
    """
    from ..model import ModelSource

    folder = Path(directory)
    data = read_manifest(folder)
    check_files(folder, data)
    if data["kind"] == KIND_EPCONTEXT:
        from ._epcontext import epcontext_specs_model

        return epcontext_specs_model(folder, data)  # static per bucket: the source model's axes
    return ModelSource.from_any(folder / data.get("settings", {}).get("model_file", data["buckets"][0]["file"]))


def reload_bundle(folder: str, device: int, on_new_shape: str) -> Engine:
    """A pickled bundle engine opened again from its folder, checks included (``verify=False``)."""
    return load_bundle(folder, device=device, on_new_shape=on_new_shape, verify=False)
