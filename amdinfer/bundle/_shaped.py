"""Shape buckets beyond the batch axis on ONNX Runtime's optimizing EPs (the CPU EP, ROCm, CUDA): one optimized graph
per bucket, made from the model fixed to that bucket's input shapes, and an engine that routes each call by its
input shapes to its bucket's session.

``write_bundle(shapes=[{"images": (1, 3, 320, 320)}, {"images": (1, 3, 640, 640)}])`` (``amdinfer compile --bundle
--input-shapes ... --input-shapes ...``) writes ``ort/<bucket>.optimized.onnx`` per bucket: ORT's graph optimizer
sees static shapes (shape arithmetic folded, layouts chosen for the bucket). Loading opens every bucket's graph with
optimizations off; a shape outside the buckets is padded to one that holds it or refused (``on_new_shape``).

Example:
    >>> beyond_batch([{"shapes": {"x": (1, 3, 8, 8)}}, {"shapes": {"x": (4, 3, 8, 8)}}])
    False
    >>> beyond_batch([{"shapes": {"x": (1, 3, 8, 8)}}, {"shapes": {"x": (1, 3, 16, 8)}}])
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..engines.base import Engine
from ..errors import OptionError
from ..model import ModelSource

__all__ = ["KIND_OPTIMIZED_PER_BUCKET", "beyond_batch", "compile_per_bucket", "open_per_bucket"]

KIND_OPTIMIZED_PER_BUCKET = "ORT optimized graph, one per bucket (static shapes)"


def saved_graph_options(providers: list[Any], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for a session whose optimized graph a bundle keeps: on a GPU provider the ``extended`` level and
    NCHW convolutions unless the caller chose them, since the CUDA EP's NHWC layout rewrite (``prefer_nhwc``, which
    amdinfer tunes on) writes ops of the internal domain ``com.ms.internal.nhwc`` that a saved graph cannot hold:
    such a file fails ONNX's checker and does not load (found on the H200). The loading session applies its own
    layout, without compiling.

    Example:
        >>> saved_graph_options(["CUDAExecutionProvider"], {}), saved_graph_options(["cpu"], {})
        ({'graph_optimization': 'extended', 'prefer_nhwc': False}, {})
    """
    first = providers[0] if providers else "CPUExecutionProvider"
    name = first if isinstance(first, str) else first[0]
    if str(name).lower() in ("cpu", "cpuexecutionprovider"):
        return dict(options)
    return {"graph_optimization": "extended", "prefer_nhwc": False, **options}


def saved_graph_keywords(
    providers: list[Any], precision: str, device: int, path: Path, options: dict[str, Any]
) -> dict[str, Any]:
    """The ORT engine's keywords for a session that writes the optimized graph a bundle keeps at ``path``: no
    cache, :func:`saved_graph_options`, and for a bare fp16 the precision quantizer ``amdinfer.load`` passes."""
    keywords: dict[str, Any] = dict(
        providers=providers, precision=precision, device=device, optimized_model_path=path, cache=False,
        **saved_graph_options(providers, options),
    )  # fmt: skip
    if precision in ("fp16", "float16", "half") and options.get("quantizer") is None:
        from ..quantize._fp16 import precision_quantizer  # what amdinfer.load passes for a bare fp16

        keywords.setdefault("precision_quantizer", precision_quantizer)
    return keywords


def beyond_batch(plans: list[dict[str, Any]]) -> bool:
    """Whether the buckets differ on an axis other than the batch axis (0) of some input."""
    first = plans[0]["shapes"]
    return any(tuple(p["shapes"][k][1:]) != tuple(v[1:]) for p in plans[1:] for k, v in first.items())


def compile_per_bucket(
    source: ModelSource,
    work: Path,
    plans: list[dict[str, Any]],
    *,
    providers: list[Any],
    precision: str,
    device: int,
    options: dict[str, Any],
    say: Callable[[str], None],
    t0: float,
    line: Callable[[dict[str, Any], str, float, float], str],
    static: Callable[[Any, dict[str, Any]], Any],
) -> dict[str, Any]:
    """``ort/<bucket>.optimized.onnx`` per bucket (ORT's ``optimized_model_filepath`` of the model fixed to the
    bucket's shapes, ``static``), each run once on the bucket's shapes; ``{"kind", "providers", "files", ...}``."""
    from ..engines.registry import get_backend
    from ._golden import golden_feeds

    if precision not in ("fp32", "fp16", "float16", "half"):
        raise OptionError(
            f"bundle: precision {precision!r} with shape buckets beyond the batch axis: expected fp32 or fp16 (an "
            "int8 bundle takes batch buckets, --batch)"
        )
    (work / "ort").mkdir()
    files: dict[str, str] = {}
    info: Any = None
    for plan in plans:
        t = time.perf_counter()
        rel = f"ort/{plan['name']}.optimized.onnx"
        keywords = saved_graph_keywords(providers, precision, device, work / rel, options)
        fixed = source.derived(static(source.proto, plan["shapes"]), check=False)
        with get_backend("ort").build(fixed, keywords) as engine:
            engine.run(golden_feeds(source, plan["shapes"], 0))
            info = engine.info
        files[plan["name"]] = rel
        say(line(plan, "ORT optimized graph for the bucket's shapes written and run", t, t0))
    records = info.settings.get("provider_options", {})
    return {
        "kind": KIND_OPTIMIZED_PER_BUCKET,
        "providers": [[name, dict(records.get(name, {}))] for name in info.providers],
        "files": files,
        "settings": {"graph_optimization": getattr(info.options, "graph_optimization", "all")},
    }


def open_per_bucket(folder: Path, data: Mapping[str, Any], device: int, options: dict[str, Any]) -> Engine:
    """An engine over every bucket's graph (opened with optimizations off), routing each call to its bucket's;
    the same routing engine as EPContext bundles (:class:`~amdinfer.bundle._epcontext.BundledEpContextEngine`)."""
    import numpy as np

    from ._epcontext import BundledEpContextEngine

    buckets = data["buckets"]
    parts = [({k: tuple(int(d) for d in v) for k, v in b["shapes"].items()}, folder / b["file"]) for b in buckets]
    base: dict[str, Any] = {k: options.pop(k) for k in ("on_new_shape",) if k in options}
    options.pop("shapes", None)  # the buckets' shapes are what there is
    ort = dict(
        providers=[(name, dict(opts)) for name, opts in data["providers"]], device=device,
        graph_optimization="disable", cache=False, transformer_fusion=False, tuning=False, **options,
    )  # fmt: skip
    largest = max(buckets, key=lambda b: sum(int(np.prod(s)) for s in b["shapes"].values()))
    engine = BundledEpContextEngine(
        str(folder / largest["file"]), parts, data["model"]["inputs"], ort, device=device, **base
    )
    dtypes = {s.name: np.dtype(s.dtype) for s in engine.inputs}
    for shapes, _ in parts:  # prepared: other shapes pad to them or are refused
        engine._new_shapes.prepare({k: np.broadcast_to(np.zeros((), dtypes[k]), v) for k, v in shapes.items()})
    engine.info.settings["per_bucket"] = engine.info.settings.pop("epcontext", {})
    return engine
