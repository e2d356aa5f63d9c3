"""Writing a bundle: the backend's compiled form per shape bucket, goldens, and the manifest (``write_bundle``)."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..engines._new_shapes import check_on_new_shape
from ..errors import OptionError
from ..model import ModelLike, ModelSource
from ._compile import compile_buckets
from ._golden import runs_tf32, write_goldens
from ._manifest import FORMAT, MANIFEST, environment, file_sha256, seal

__all__ = ["write_bundle"]

Shapes = Mapping[str, Sequence[int]]


def write_bundle(
    model: ModelLike,
    directory: str | os.PathLike,
    *,
    batch_buckets: Sequence[int] | None = None,
    shapes: Sequence[Shapes] | None = None,
    precision: str = "fp32",
    backend: str = "ort",
    providers: Sequence[Any] | None = None,
    device: int = 0,
    seed: int = 0,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    command: str | None = None,
    **options: Any,
) -> Path:
    """Compile ``model`` once per shape bucket into one folder that another machine of the same kind loads
    without compiling (:func:`amdinfer.load` on the folder; see ``docs/deploy.md``).

    The folder holds the backend's compiled form (ONNX Runtime: EPContext models from ORT's compile API for a
    provider that compiles, else ORT's optimized graph; native MIGraphX: one ``.mxr`` program per bucket), one
    ``golden/<bucket>.npz`` of seeded inputs and the outputs of the source model on the NumPy reference (the
    CPU EP where the reference lacks an operator), and ``manifest.json``: the source model's hash, versions,
    providers and their options, the machine, the buckets, the precision (and the int8 certificate) and the
    SHA-256 of every file. The bundle is loaded once before it is handed over, its goldens checked.

    Args:
        model: the source model (a path, bytes, ``onnx.ModelProto`` or ``ModelSource``).
        directory: the bundle folder; it must not exist or be empty (``overwrite=True`` replaces a bundle).
        batch_buckets: batch sizes of the model's dynamic axis 0, e.g. ``[1, 8, 32]``.
        shapes: or the full input shapes of each bucket, ``[{input: shape}, ...]``.
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8`` (int8 needs ``quantizer=``).
        backend: ``"ort"`` or ``"migraphx"``.
        providers: ONNX Runtime providers (default: the CPU EP).
        device: GPU index.
        seed: seed of the golden inputs.
        overwrite: replace an existing bundle in ``directory``.
        progress: called with one line per bucket (what was built, elapsed seconds).
        command: the command that rebuilds the bundle, recorded for error messages (the CLI passes its own).
        **options: further engine options (``threads=``, ``quantizer=``, MIGraphX's ``target=``...);
            ``on_new_shape`` (``"pad"`` by default, or ``"error"``, ``"compile"``) is recorded as the loaded
            bundle's policy for shapes outside its buckets.

    Returns:
        The bundle folder.

    Example:
        >>> import tempfile, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> folder = write_bundle(tiny_cnn(), tempfile.mkdtemp() + "/b", batch_buckets=[1, 2])
        >>> engine = amdinfer.load(folder, verify=True)
        >>> engine.info.settings["bundle"]["buckets"], engine.info.settings["bundle"]["verify"]["passed"]
        (['b1', 'b2'], True)
    """
    t0 = time.perf_counter()
    say = progress or (lambda line: None)
    source = ModelSource.from_any(model)
    folder = Path(directory)
    _check_target(folder, overwrite)
    plans = _plans(source, batch_buckets, shapes)
    policy = check_on_new_shape(options.pop("on_new_shape", "pad"))  # the loaded bundle's default
    rebuild = command or rebuild_command(
        source, folder, batch_buckets, shapes, precision, backend, providers, target=options.get("target"),
        on_new_shape=policy,
    )  # fmt: skip
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))  # renamed into place when whole
    try:
        built = compile_buckets(
            source, work, plans, backend=backend, providers=providers, precision=precision, device=device,
            options=options, say=say, t0=t0,
        )  # fmt: skip
        goldens = write_goldens(source, work, plans, seed, precision, runs_tf32(built.get("providers")))
        data = {**_manifest(source, work, plans, built, goldens, precision, backend, device, rebuild),
                "on_new_shape": policy}  # fmt: skip
        (work / MANIFEST).write_text(_json(seal(data)), encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(work, folder)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    summary = _self_check(folder, backend)
    say(f"bundle {folder}: {len(plans)} bucket(s), goldens {summary}, {time.perf_counter() - t0:.2f} s")
    return folder


def _self_check(folder: Path, backend: str) -> str:
    """Load the new bundle as a target machine would and run its goldens; a bundle that fails is removed."""
    from ._open import load_bundle

    try:
        with load_bundle(folder, verify=True) as engine:
            return str(engine.info.settings["bundle"]["verify"]["summary"])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _json(data: Mapping[str, Any]) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def _check_target(folder: Path, overwrite: bool) -> None:
    """Refuse a folder that holds something other than a bundle, or a bundle without ``overwrite``."""
    if folder.exists() and not folder.is_dir():
        raise OptionError(f"bundle: '{folder}' is a file, expected a folder (new or empty)")
    if folder.is_dir() and any(folder.iterdir()):
        if not (folder / MANIFEST).is_file():
            raise OptionError(f"bundle: '{folder}' is a non-empty folder that is not a bundle; choose a new folder")
        if not overwrite:
            raise OptionError(f"bundle: '{folder}' already holds a bundle; pass overwrite=True (--force) to replace it")


def _plans(
    source: ModelSource, batch_buckets: Sequence[int] | None, shapes: Sequence[Shapes] | None
) -> list[dict[str, Any]]:
    """One ``{"name", "batch", "shapes"}`` per bucket: the full input shapes each bucket is built for."""
    if batch_buckets and shapes:
        raise OptionError("bundle: give batch_buckets= or shapes=, not both")
    tensors = [s for s in source.inputs if s.is_tensor]
    if shapes:
        out = []
        for i, plan in enumerate(shapes):
            missing = [s.name for s in tensors if s.name not in plan]
            if missing:
                raise OptionError(f"shapes[{i}]: got inputs {sorted(plan)}, expected every input {missing} too")
            given = {k: tuple(int(d) for d in v) for k, v in plan.items()}
            out.append({"name": "s" + "_".join("x".join(map(str, v)) for v in given.values()), "shapes": given})
        return out
    buckets = sorted({int(b) for b in (batch_buckets or [1])})
    if any(b < 1 for b in buckets):
        raise OptionError(f"batch_buckets: got {list(batch_buckets or [])}, expected positive ints")
    plans = []
    for b in buckets:
        dims: dict[str, tuple[int, ...]] = {}
        for s in tensors:
            fixed = [d if isinstance(d, int) else None for d in s.shape]
            if any(d is None for d in fixed[1:]):
                raise OptionError(
                    f"batch_buckets: input {s.name!r} has shape {s.shape} with dynamic axes beyond the batch; give "
                    "shapes= (--input-shapes) instead"
                )
            if fixed and fixed[0] is not None and fixed[0] != b:
                raise OptionError(f"batch_buckets: input {s.name!r} has a fixed batch {fixed[0]}, got bucket {b}")
            dims[s.name] = (b, *(int(d or 0) for d in fixed[1:])) if fixed else ()
        plans.append({"name": f"b{b}", "batch": b, "shapes": dims})
    return plans


def rebuild_command(
    source: ModelSource,
    folder: Path,
    batch_buckets: Sequence[int] | None,
    shapes: Sequence[Shapes] | None,
    precision: str,
    backend: str,
    providers: Sequence[Any] | None,
    *,
    target: str | None = None,
    on_new_shape: str = "pad",
) -> str:
    """The ``amdinfer compile ... --bundle`` command that builds this bundle again (``target``: MIGraphX's).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> rebuild_command(ModelSource.from_any(tiny_cnn()), Path("b"), [1, 4], None, "fp32", "ort", None)
        'amdinfer compile MODEL.onnx --bundle b --batch 1,4 --force'
    """
    parts = ["amdinfer", "compile", str(source.path) if source.path else "MODEL.onnx", "--bundle", str(folder)]
    if backend != "ort":
        parts += ["--backend", backend]
    if target is not None:
        parts += ["--target", target]
    if on_new_shape != "pad":
        parts += ["--on-new-shape", on_new_shape]
    if providers:
        parts += ["--providers", ",".join(p if isinstance(p, str) else str(p[0]) for p in providers)]
    if precision != "fp32":
        parts += ["--precision", precision]
    if batch_buckets:
        parts += ["--batch", ",".join(str(b) for b in sorted(set(batch_buckets)))]
    for name in dict(shapes[0]) if shapes else ():
        parts += ["--shapes", f"{name}:" + ",".join("x".join(map(str, plan[name])) for plan in shapes or [])]
    return " ".join(shlex.quote(p) for p in [*parts, "--force"])


def _manifest(
    source: ModelSource,
    work: Path,
    plans: list[dict[str, Any]],
    built: dict[str, Any],
    goldens: dict[str, Any],
    precision: str,
    backend: str,
    device: int,
    rebuild: str,
) -> dict[str, Any]:
    """The manifest's content, before :func:`seal`."""
    files = {p.relative_to(work).as_posix(): file_sha256(p) for p in sorted(work.rglob("*")) if p.is_file()}
    names = [name for name, _ in built["providers"]] if backend == "ort" else []
    buckets = [
        {**plan, "shapes": {k: list(v) for k, v in plan["shapes"].items()}, "file": built["files"][plan["name"]],
         "golden": goldens["files"][plan["name"]]}
        for plan in plans
    ]  # fmt: skip
    return {
        "format": FORMAT,
        "model": {
            "name": source.name,
            "sha256": source.sha256,
            "inputs": [
                {"name": s.name, "dtype": str(np.dtype(s.dtype)), "shape": list(s.shape)} for s in source.inputs
            ],
            "outputs": [s.name for s in source.outputs],
        },
        "backend": backend,
        "kind": built["kind"],
        "providers": built["providers"],
        "settings": built.get("settings", {}),
        "precision": precision,
        "certificate": built.get("certificate"),
        "buckets": buckets,
        "batch_buckets": [p["batch"] for p in plans if "batch" in p],
        "golden": {"engine": goldens["engine"], "tolerance": goldens["tolerance"], "seed": goldens["seed"]},
        "environment": {**environment(backend, names, device), **built.get("environment", {})},
        "compatibility": built.get("compatibility", {}),
        "files": files,
        "rebuild": rebuild,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
