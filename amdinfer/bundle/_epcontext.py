"""EPContext bundles: one model per shape bucket compiled by an EP through ONNX Runtime's compile API, checked
with ORT's compiled-model compatibility API before it loads, and served by an engine that routes each input
shape to its bucket's model.

Written per bucket: ``ort/<bucket>.ctx.onnx`` (one ``EPContext`` node per compiled partition) and the EP's
compiled data beside it (``ort/<bucket>.ctx_<EP>.bin`` for OpenVINO). The manifest records per bucket ORT's
compatibility info string (``compatibility``) and, once, the EP and the device it compiled for (``settings["ep"]``:
name, version, device, vendor, the device's architecture and capabilities) with the provider options.

Example:
    >>> _specs([{"name": "x", "dtype": "float32", "shape": ["N", 3]}])[0].shape
    ('N', 3)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..engines import Engine, EngineInfo
from ..errors import BundleError, InputError, OptionError
from ..model import ModelSource
from ..types import TensorSpec

__all__ = [
    "KIND_EPCONTEXT",
    "BundledEpContextEngine",
    "check_epcontext",
    "compile_epcontext_buckets",
    "epcontext_specs_model",
    "open_epcontext",
]

KIND_EPCONTEXT = "ORT EPContext model (compile API), one per bucket"


def compile_epcontext_buckets(
    source: ModelSource,
    work: Path,
    plans: list[dict[str, Any]],
    name: str,
    specs: list[Any],
    precision: str,
    device: int,
    say: Callable[[str], None],
    t0: float,
    *,
    line: Callable[[dict[str, Any], str, float, float], str],
    static: Callable[[Any, dict[str, Any]], Any],
) -> dict[str, Any]:
    """One EPContext model per bucket (the model fixed to the bucket's shapes by ``static`` first), for the
    manifest; ``line`` makes each bucket's progress line."""
    from ..engines.ort import compile_epcontext, import_ort, provider_options

    if precision != "fp32":
        raise OptionError(
            f"bundle: precision {precision!r} with {name}: set the provider's own precision option "
            "(--provider-option, e.g. migraphx_fp16_enable=1); EPContext bundles compile the model as given"
        )
    ort = import_ort()
    given = specs[0][1] if not isinstance(specs[0], str) else {}
    # amdinfer's fp32 setting of the EP (OpenVINO's INFERENCE_PRECISION_HINT=f32), the caller's options over it
    opts = {**provider_options(name, device=device, precision="fp32"), **{str(k): str(v) for k, v in given.items()}}
    (work / "ort").mkdir()
    files, compat, ep = {}, {}, {}
    for plan in plans:
        t = time.perf_counter()
        rel = f"ort/{plan['name']}.ctx.onnx"
        model = static(source.proto, plan["shapes"]).SerializeToString()
        built = compile_epcontext(ort, model, work / rel, name, opts, device)
        files[plan["name"]] = rel
        if built["compatibility"] is not None:
            compat[plan["name"]] = built["compatibility"]
        ep = built["device"]
        say(line(plan, f"EPContext model compiled by {name} on {ep['device']}", t, t0))
    return {
        "kind": KIND_EPCONTEXT,
        "providers": [[name, opts]],
        "files": files,
        "compatibility": compat,
        "settings": {"ep": ep, "compile_api": "onnxruntime.ModelCompiler, ERROR_IF_NO_NODES_COMPILED, data in files"},
    }


def check_epcontext(folder: Path, data: Mapping[str, Any], device: int) -> dict[str, Any]:
    """Before anything loads: the EP is here with a device (plugins registered), ONNX Runtime's compatibility
    check accepts every bucket's compiled model, and the EP's version and device are the recorded ones.

    Returns:
        ``{"bucket": state}``: ORT's verdicts (``"not checked (...)"`` where this ONNX Runtime has no such API).

    Raises:
        BundleError: naming the bucket or field, both values and the rebuild command.
    """
    from ..engines.ort import compatibility_verdict, import_ort
    from ..errors import BackendUnavailableError

    ort = import_ort()
    name = data["providers"][0][0]
    rebuild = data.get("rebuild")
    verdicts: dict[str, str] = {}
    for bucket, info in sorted(data.get("compatibility", {}).items()):
        try:
            verdict = compatibility_verdict(ort, name, info, device)
        except BackendUnavailableError as exc:
            raise BundleError(
                f"bundle '{folder}': built for {name}, which cannot run here: {exc}; rebuild it for a provider "
                f"this machine has: {rebuild}",
                field="providers",
                rebuild=rebuild,
            ) from None
        if verdict is None:
            verdicts[bucket] = f"not checked (onnxruntime {ort.__version__} has no compiled-model compatibility API)"
            continue
        state, judged = verdict
        verdicts[bucket] = state
        if judged == "refused":
            raise BundleError(
                f"bundle '{folder}': ONNX Runtime says bucket {bucket}'s compiled model does not suit {name} here "
                f"({state}: built for {info!r}); rebuild it on this machine: {rebuild}",
                field="compatibility",
                rebuild=rebuild,
            )
    _check_ep(folder, data, ort, name, device)
    return verdicts


def _check_ep(folder: Path, data: Mapping[str, Any], ort: Any, name: str, device: int) -> None:
    """The EP's version and the device's name and architecture here are the ones the bundle recorded."""
    from ..engines.ort import ep_device_record

    built = data.get("settings", {}).get("ep") or {}
    here = ep_device_record(ort, name, device)
    pairs = [("version", built.get("version"), here["version"]), ("device", built.get("device"), here["device"])]
    for key in ("FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE"):
        pairs.append((key, built.get("metadata", {}).get(key), here["metadata"].get(key)))
    for field, want, got in pairs:
        if want is not None and want != got:
            raise BundleError(
                f"bundle '{folder}': {name} {field} is {want!r} in the bundle, {got!r} here; rebuild it on this "
                f"machine: {data.get('rebuild')}",
                field=f"ep {field}",
                rebuild=data.get("rebuild"),
            )


def _specs(inputs: Sequence[Mapping[str, Any]]) -> list[TensorSpec]:
    return [TensorSpec(i["name"], np.dtype(i["dtype"]), tuple(i["shape"])) for i in inputs]


def _key(shapes: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(sorted((k, tuple(int(d) for d in v)) for k, v in shapes.items()))


class BundledEpContextEngine(Engine):
    """The engine over an EPContext bundle: one ONNX Runtime session per bucket, each made from that bucket's
    compiled model (nothing compiled), and each call routed by its input shapes to the bucket's session (smaller
    batches padded to the nearest bucket first, ``batch_buckets``; other shapes under ``on_new_shape``).

    Args:
        model: the largest bucket's EPContext model (what pickling carries; the specs come from ``inputs``).
        parts: ``[(shapes, path), ...]``: each bucket's input shapes and EPContext model.
        inputs: the source model's inputs as the manifest records them (with their dynamic axes).
        ort: keywords of each bucket's :class:`~amdinfer.engines.ort.OrtEngine`.
        **keywords: :class:`~amdinfer.engines.EngineOptions` fields (``batch_buckets``, ``on_new_shape``, ...).

    Example:
        >>> BundledEpContextEngine.backend_name
        'ort'
    """

    backend_name = "ort"

    def __init__(
        self,
        model: Any,
        parts: list[tuple[dict[str, tuple[int, ...]], Path]],
        inputs: list[dict[str, Any]],
        ort: dict[str, Any],
        /,
        **keywords: Any,
    ) -> None:
        self._parts_given, self._input_records, self._ort_keywords = parts, inputs, ort
        self._parts: dict[Any, Engine] = {}
        super().__init__(model, **keywords)

    def _load(self, source: ModelSource) -> tuple[list[TensorSpec], list[TensorSpec], EngineInfo]:
        from ..engines.ort import OrtEngine

        t0 = time.perf_counter()
        try:
            for shapes, path in self._parts_given:
                self._parts[_key(shapes)] = OrtEngine(str(path), **self._ort_keywords)
        except BaseException:
            self._close()
            raise
        first = next(iter(self._parts.values()))
        info = EngineInfo(
            backend="ort",
            device=first.info.device,
            providers=list(first.info.providers),
            requested_providers=list(first.info.requested_providers),
            runtime_version=first.info.runtime_version,
            compile_seconds=0.0,
            settings={**first.info.settings, "epcontext": self._sessions_record(time.perf_counter() - t0)},
            notes=list(first.info.notes),
        )
        outputs = [TensorSpec(s.name, s.dtype, self._batch_axis(s.shape)) for s in first.outputs]
        return _specs(self._input_records), outputs, info

    def _batch_axis(self, shape: tuple[Any, ...]) -> tuple[Any, ...]:
        """An output's shape with axis 0 open when the buckets differ in batch (each part's own is fixed)."""
        batches = {dict(k)[self._input_records[0]["name"]][0] for k in self._parts if k}
        return ("N", *shape[1:]) if shape and len(batches) > 1 else tuple(shape)

    def _sessions_record(self, seconds: float) -> dict[str, Any]:
        from ..engines.ort import epcontext_nodes

        parts = []
        for (shapes, path), engine in zip(self._parts_given, self._parts.values()):
            nodes = epcontext_nodes(engine.model.proto)
            used = engine.info.settings.get("plugin_ep", {}).get("nodes") or {}
            parts.append(
                {"file": path.name, "inputs": {k: list(v) for k, v in shapes.items()}, "epcontext_nodes": nodes,
                 "nodes_per_provider": used}
            )  # fmt: skip
        return {"sessions": parts, "open_seconds": round(seconds, 4)}

    def _run(self, feeds: dict[str, Any], outputs: list[str] | None) -> dict[str, np.ndarray]:
        key = _key({k: np.shape(v) for k, v in feeds.items()})
        part = self._parts.get(key)
        if part is None:
            raise InputError(
                f"inputs: got shapes {dict(key)}, expected the shapes of one of the bundle's buckets "
                f"{[dict(k) for k in self._parts]} (a compiled model is static; batches are padded to a bucket)"
            )
        return part.run(feeds, outputs=outputs)

    def _close(self) -> None:
        for engine in self._parts.values():
            engine.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its bundle folder: the copy is loaded again, checks included (``verify=False``)."""
        folder = self._parts_given[0][1].parent.parent
        if RELOAD is None:
            raise BundleError(f"bundle {folder}: cannot pickle an engine that amdinfer.bundle did not open")
        return (RELOAD, (str(folder), self._device, self._options.on_new_shape))


#: The loader a pickled engine is opened again with (:func:`amdinfer.bundle._open.reload_bundle`), set by the module
#: that opens these engines: it sits above this one, which does not import it.
RELOAD: Any = None


def open_epcontext(folder: Path, data: Mapping[str, Any], device: int, options: dict[str, Any]) -> Engine:
    """The engine over an EPContext bundle: every bucket's session made now from its compiled model."""
    buckets = data["buckets"]
    parts = [({k: tuple(int(d) for d in v) for k, v in b["shapes"].items()}, folder / b["file"]) for b in buckets]
    base: dict[str, Any] = {k: options.pop(k) for k in ("on_new_shape",) if k in options}
    bounds = options.pop("shapes", None)  # bounds to compile for: the buckets' compiled shapes are what there is
    ort = dict(
        providers=[(name, dict(opts)) for name, opts in data["providers"]], device=device,
        graph_optimization="disable", cache=False, transformer_fusion=False, tuning=False, **options,
    )  # fmt: skip
    batches = data.get("batch_buckets") or []
    if batches and len(batches) == len(buckets):
        base["batch_buckets"] = batches
    largest = max(buckets, key=lambda b: int(np.prod([int(np.prod(s)) for s in b["shapes"].values()])))
    engine = BundledEpContextEngine(
        str(folder / largest["file"]), parts, data["model"]["inputs"], ort, device=device, **base
    )
    for shapes, _ in parts:  # the buckets' shapes are prepared: others pad to them or are refused
        engine._new_shapes.prepare(_zeros(engine, shapes))
    if bounds:
        engine.info.notes.append(f"shapes={bounds!r} not used: an EPContext bundle runs its buckets' compiled shapes")
    return engine


def _zeros(engine: Engine, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    return {s.name: np.zeros(shapes[s.name], np.dtype(s.dtype)) for s in engine.inputs if s.name in shapes}


def epcontext_specs_model(folder: Path, data: Mapping[str, Any]) -> ModelSource:
    """The first bucket's EPContext model with the source model's input axes (named where they are dynamic), held
    in memory: what the CLI reads an EPContext bundle's inputs and outputs from (each bucket's own is static)."""
    import onnx

    proto = onnx.load(str(folder / data["buckets"][0]["file"]), load_external_data=False)
    given = {i["name"]: i["shape"] for i in data["model"]["inputs"]}
    for vi in proto.graph.input:
        for k, (d, want) in enumerate(zip(vi.type.tensor_type.shape.dim, given.get(vi.name, ()))):
            if not isinstance(want, int):
                d.Clear()
                d.dim_param = str(want) if want else f"{vi.name}_{k}"
    return ModelSource(proto, name=data["model"]["name"])
