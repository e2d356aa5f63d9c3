"""Native MIGraphX bundles: one compiled program (``.mxr``) per shape bucket, written and opened through the
MIGraphX engine's own program builder (:class:`~amdinfer.engines.migraphx.MigraphxEngine`), so a bundle's program
is what the engine's cache would hold; loading reads the programs with ``migraphx.load`` and compiles nothing.

A program is tied to the MIGraphX that compiled it, its target (``gpu``, ``ref``, ``cpu``) and, on the GPU target,
the GPU architecture (``gfx942``...): the manifest records all three (``settings``: ``target``, ``arch``; the
version in ``environment``) and :func:`check_mxr` refuses a bundle whose values differ here, before anything loads.

Example:
    >>> mxr_arch("ref", 0), mxr_arch("gpu", 0, gpu="gfx942:304cu")
    ('ref', 'gfx942:304cu')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..engines.migraphx import MigraphxEngine
from ..errors import BackendUnavailableError, BundleError, OptionError
from ..model import ModelSource

__all__ = ["KIND_MXR", "MODEL_FILE", "BundledMigraphxEngine", "check_mxr", "compile_mxr", "mxr_arch", "open_mxr"]

KIND_MXR = "MIGraphX program (.mxr), one per bucket"
#: the source model inside a MIGraphX bundle (the engine's specs; a shape compiled when on_new_shape="compile")
MODEL_FILE = "migraphx/model.onnx"
_PRECISIONS = ("fp32", "fp16", "bf16")


def mxr_arch(target: str, device: int, *, gpu: str | None = None) -> str:
    """What a program of ``target`` is tied to: the GPU architecture (``gfx942:304cu``) on ``gpu``, ``"ref"`` on the
    reference target, the CPU signature on MIGraphX's ``cpu`` target (as the engine keys its cache)."""
    from .._support._hardware import cpu_signature, visible_gpu_arch

    if target == "gpu":
        return gpu if gpu is not None else visible_gpu_arch(device)
    return "ref" if target == "ref" else cpu_signature()


def _migraphx() -> Any:
    from ..engines._migraphx_support import import_migraphx

    try:
        return import_migraphx()
    except BackendUnavailableError as exc:
        raise BackendUnavailableError(
            f"bundle: backend 'migraphx' needs MIGraphX ({exc})", backend="migraphx"
        ) from None


def _feeds(source: ModelSource, shapes: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Zero-strided arrays of the bucket's shapes: the engine looks programs up by the feeds' shapes only."""
    return {s.name: np.broadcast_to(np.zeros((), np.dtype(s.dtype)), tuple(shapes[s.name])) for s in source.inputs}


def compile_mxr(
    source: ModelSource,
    work: Path,
    plans: list[dict[str, Any]],
    *,
    precision: str,
    device: int,
    options: dict[str, Any],
    say: Callable[[str], None],
    t0: float,
    line: Callable[[dict[str, Any], str, float, float], str],
) -> dict[str, Any]:
    """One ``migraphx/<bucket>.mxr`` per bucket (the engine's parse, quantize and compile, or its cache), the source
    model as ``migraphx/model.onnx``; ``{"kind", "files", "settings", "environment", ...}`` for the manifest
    (``line`` formats a bucket's progress line)."""
    from ..engines._migraphx_support import migraphx_environment

    mgx = _migraphx()
    if precision not in _PRECISIONS:
        raise OptionError(
            f"bundle: precision {precision!r} on MIGraphX bundles: expected one of {list(_PRECISIONS)} (int8 "
            "calibration is not shipped in a bundle)"
        )
    keywords = {"target": "gpu", **options, "precision": precision, "device": device}
    (work / "migraphx").mkdir()
    files: dict[str, str] = {}
    seconds: dict[str, float] = {}
    engine = MigraphxEngine(source, **keywords)
    try:
        target = engine.info.settings["target"]
        compile_opts = engine.info.settings["compile"]
        for plan in plans:
            t = time.perf_counter()
            program = engine._program_for(_feeds(source, plan["shapes"]))
            rel = f"migraphx/{plan['name']}.mxr"
            mgx.save(program.prog, str(work / rel), format="msgpack")
            files[plan["name"]] = rel
            seconds[plan["name"]] = round(program.seconds, 3)
            what = "MIGraphX program loaded from the cache" if program.cache_hit else "MIGraphX program compiled"
            say(line(plan, f"{what} for target {target!r} and saved", t, t0))
    finally:
        engine.close()
    (work / MODEL_FILE).write_bytes(source.to_bytes())
    version = str(getattr(mgx, "__version__", "unknown"))
    arch = mxr_arch(target, device)
    return {
        "kind": KIND_MXR,
        "providers": [],
        "files": files,
        "settings": {
            "target": target,
            "arch": arch,
            "compile": compile_opts,
            "compile_seconds": seconds,
            "migraphx_env": migraphx_environment(),
            "model_file": MODEL_FILE,
        },
        # a ref program suits any CPU, a GPU program the GPU architecture only (check_mxr compares both)
        "environment": {"migraphx": version, "gpu": arch if target == "gpu" else None,
                        "cpu": arch if target == "cpu" else None},
    }  # fmt: skip


def check_mxr(folder: Path, data: Mapping[str, Any], device: int, options: Mapping[str, Any]) -> None:
    """This machine's MIGraphX version, the target asked for and the architecture are the bundle's.

    Raises:
        BackendUnavailableError: MIGraphX does not import here.
        BundleError: the first of version, target, architecture that differs, both values and the rebuild command.
    """
    mgx = _migraphx()
    settings = data.get("settings", {})
    rebuild = data.get("rebuild")
    built_target = settings.get("target", "gpu")
    asked = options.get("target", built_target)
    here = {
        "migraphx": str(getattr(mgx, "__version__", "unknown")),
        "target": asked,
        "arch": mxr_arch(asked, device),
    }
    built = {"migraphx": data.get("environment", {}).get("migraphx"), "target": built_target,
             "arch": settings.get("arch")}  # fmt: skip
    for name in ("migraphx", "target", "arch"):
        if built[name] is None or built[name] == here[name]:
            continue
        why = {
            "migraphx": " (a .mxr program is read by the MIGraphX version that wrote it)",
            "target": f" (target={asked!r} was asked for; a program runs on the target it was compiled for)",
            "arch": " (a program is compiled for one device architecture)",
        }[name]
        raise BundleError(
            f"bundle '{folder}': MIGraphX {name} is {built[name]!r} in the bundle, {here[name]!r} here{why}; rebuild "
            f"it on this machine: {rebuild}",
            field=name,
            rebuild=rebuild,
        )
    for name, value in settings.get("migraphx_env", {}).items():
        import os

        if os.environ.get(name) != value:
            raise BundleError(
                f"bundle '{folder}': {name}={value!r} when the bundle was compiled, {os.environ.get(name)!r} here (it "
                f"changes what MIGraphX compiles); set it, or rebuild the bundle: {rebuild}",
                field=name,
                rebuild=rebuild,
            )


class BundledMigraphxEngine(MigraphxEngine):
    """A :class:`~amdinfer.engines.migraphx.MigraphxEngine` whose programs are a bundle's ``.mxr`` files, read with
    ``migraphx.load`` at construction: nothing is parsed or compiled (``info.settings["programs"]`` says
    ``"bundle"`` for each). Another shape runs under ``on_new_shape`` (the bundle's, by default ``"pad"``).

    Args:
        model: the bundle's source model (its specs; a new shape compiles from it under ``on_new_shape="compile"``).
        programs: ``[(shapes, path), ...]``, one per bucket.
        **keywords: :class:`~amdinfer.engines.migraphx.MigraphxOptions` fields.

    Example:
        >>> BundledMigraphxEngine.backend_name
        'migraphx'
    """

    def __init__(self, model: Any, programs: list[tuple[dict[str, tuple[int, ...]], Path]], /, **keywords: Any):
        self._bundle_programs = programs
        super().__init__(model, **keywords)

    def _first_programs(self, inputs: Any, info: Any) -> None:
        from ..engines._migraphx_support import signature_of, static_input_dims
        from ..errors import ModelError

        mgx = self._mgx
        builder = self._builder
        for shapes, path in self._bundle_programs:
            t0 = time.perf_counter()
            with self._on_device():
                try:
                    prog = mgx.load(str(path), format="msgpack")
                except Exception as exc:
                    raise ModelError(f"bundle program {path}: migraphx.load failed: {str(exc).strip()}") from None
            if hasattr(prog, "is_compiled") and not prog.is_compiled():
                raise ModelError(f"bundle program {path}: not a compiled MIGraphX program")
            program = builder._describe(prog, shapes)
            program.cache_hit, program.seconds = True, time.perf_counter() - t0
            self._programs[signature_of(shapes)] = program
            entry = {"inputs": static_input_dims(shapes), "cache_hit": False, "bundle": path.name}
            info.settings["programs"].append({**entry, "seconds": round(program.seconds, 4)})
        info.compile_seconds = 0.0
        info.cache_hit = False  # the bundle's programs, not the cache's


def open_mxr(folder: Path, data: Mapping[str, Any], device: int, options: dict[str, Any]) -> BundledMigraphxEngine:
    """The engine over a bundle's ``.mxr`` programs, its buckets prepared (``on_new_shape`` routes the rest)."""
    settings = data.get("settings", {})
    programs = [
        ({k: tuple(int(d) for d in v) for k, v in b["shapes"].items()}, folder / b["file"]) for b in data["buckets"]
    ]
    keywords: dict[str, Any] = {
        "target": settings.get("target", "gpu"),
        "precision": data["precision"],
        "device": device,
        "cache": False,
        **options,
    }
    for name, value in settings.get("compile", {}).items():
        keywords.setdefault(name, value)
    batches = data.get("batch_buckets") or []
    if batches and len(batches) == len(data["buckets"]):
        keywords["batch_buckets"] = batches
    engine = BundledMigraphxEngine(str(folder / settings.get("model_file", MODEL_FILE)), programs, **keywords)
    for shapes, _ in programs:
        engine._new_shapes.prepare(_feeds(engine.model, shapes))
    return engine
