"""The backend's compiled form per bucket: EPContext models (ORT's compile API), ORT's optimized graph, MIGraphX
``.mxr`` programs.

Example:
    >>> sorted(EPCONTEXT_PROVIDERS)[:2]
    ['MIGraphXExecutionProvider', 'NvTensorRTRTXExecutionProvider']
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import onnx

from ..errors import OptionError
from ..model import ModelSource
from ._epcontext import KIND_EPCONTEXT, compile_epcontext_buckets
from ._golden import golden_feeds
from ._mxr import KIND_MXR, compile_mxr
from ._shaped import beyond_batch, compile_per_bucket, saved_graph_keywords

__all__ = ["EPCONTEXT_PROVIDERS", "KIND_EPCONTEXT", "KIND_MXR", "KIND_OPTIMIZED", "compile_buckets", "static_model"]

#: Providers whose compiled nodes ORT's compile API writes as EPContext nodes (static shapes: one file per bucket).
EPCONTEXT_PROVIDERS = frozenset(
    {
        "MIGraphXExecutionProvider",
        "NvTensorRTRTXExecutionProvider",
        "OpenVINOExecutionProvider",
        "QNNExecutionProvider",
        "TensorrtExecutionProvider",
        "VitisAIExecutionProvider",
    }
)
KIND_OPTIMIZED = "ORT optimized graph, shared by the buckets"


def compile_buckets(
    source: ModelSource,
    work: Path,
    plans: list[dict[str, Any]],
    *,
    backend: str,
    providers: Sequence[Any] | None,
    precision: str,
    device: int,
    options: dict[str, Any],
    say: Callable[[str], None],
    t0: float,
) -> dict[str, Any]:
    """Build every bucket into ``work``; ``{"kind", "providers", "files": {bucket: path}, ...}`` for the manifest."""
    if backend == "migraphx":
        return compile_mxr(
            source, work, plans, precision=precision, device=device, options=options, say=say, t0=t0, line=_line
        )
    if backend not in ("ort", "auto"):
        raise OptionError(f"bundle: backend {backend!r} has no compiled form to ship; expected 'ort' or 'migraphx'")
    from ..engines.ort import resolve_provider_name

    specs = list(providers or ["CPUExecutionProvider"])
    first = resolve_provider_name(specs[0] if isinstance(specs[0], str) else specs[0][0])
    if first in EPCONTEXT_PROVIDERS:
        return compile_epcontext_buckets(
            source, work, plans, first, specs, precision, device, say, t0, line=_line, static=static_model
        )
    if beyond_batch(plans):  # e.g. H/W buckets: one graph optimized for each bucket's static shapes
        return compile_per_bucket(
            source, work, plans, providers=specs, precision=precision, device=device, options=options, say=say,
            t0=t0, line=_line, static=static_model,
        )  # fmt: skip
    return _optimized(source, work, plans, specs, precision, device, options, say, t0)


def _line(plan: dict[str, Any], what: str, t: float, t0: float) -> str:
    shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in plan["shapes"].items())
    now = time.perf_counter()
    return f"bucket {plan['name']} ({shapes}): {what} in {now - t:.2f} s (elapsed {now - t0:.2f} s)"


def _optimized(
    source: ModelSource,
    work: Path,
    plans: list[dict[str, Any]],
    providers: list[Any],
    precision: str,
    device: int,
    options: dict[str, Any],
    say: Callable[[str], None],
    t0: float,
) -> dict[str, Any]:
    """ORT's optimized graph (``optimized_model_filepath``), written once: it keeps the model's dynamic axes."""
    from .._certificate._io import certificate_meta
    from ..engines.registry import get_backend

    (work / "ort").mkdir()
    rel = "ort/model.optimized.onnx"
    t = time.perf_counter()
    keywords = saved_graph_keywords(providers, precision, device, work / rel, options)
    engine = get_backend("ort").build(source, keywords)
    with engine:
        info = engine.info
        for i, plan in enumerate(plans):
            engine.run(golden_feeds(source, plan["shapes"], 0))
            say(_line(plan, "ORT optimized graph written and run" if i == 0 else "runs on the shared graph", t, t0))
            t = time.perf_counter()
        cert = certificate_meta(engine.model.proto).get("precision_certificate")
    if cert:
        _drop_certificate(work / rel)
    records = info.settings.get("provider_options", {})
    return {
        "kind": KIND_OPTIMIZED,
        "providers": [[name, dict(records.get(name, {}))] for name in info.providers],
        "files": {plan["name"]: rel for plan in plans},
        "settings": {"graph_optimization": getattr(info.options, "graph_optimization", "all")},
        "certificate": _certificate(work, cert),
    }


def _certificate(work: Path, cert: dict[str, Any] | None) -> dict[str, Any] | None:
    """The int8 certificate the compiled model carries, also written as ``certificate.json``."""
    if not cert:
        return None
    import json

    from ._manifest import file_sha256

    path = work / "certificate.json"
    path.write_text(json.dumps(cert, indent=2, sort_keys=True), encoding="utf-8")
    return {"path": "certificate.json", "sha256": file_sha256(path)}


def _drop_certificate(path: Path) -> None:
    """Remove the precision certificate ORT copied into the optimized graph: it certifies the quantized model's
    hash, not the optimized graph's (it would be shown as untrusted at load); ``certificate.json`` keeps it."""
    from .._certificate._hash import CERTIFICATE_KEY

    model = onnx.load(str(path))
    kept = [p for p in model.metadata_props if p.key != CERTIFICATE_KEY]
    if len(kept) != len(model.metadata_props):
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        onnx.save(model, str(path))


def static_model(model: onnx.ModelProto, shapes: dict[str, Any]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have the given fixed shapes (EPContext and ``.mxr`` are static).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = static_model(tiny_cnn(), {"input": (4, 3, 32, 32)})
        >>> [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        [4, 3, 32, 32]
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            for d, n in zip(dims, shapes[vi.name]):
                d.Clear()
                d.dim_value = int(n)
    return out
