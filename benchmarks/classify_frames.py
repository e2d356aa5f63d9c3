"""Fixed-size frames: ``amdinfer.classify`` on a stream of equal 640x480 frames, default vs host and graph geometry.

Issue 38, part 6: the default (``geometry="auto"``) must pick the geometry in the graph for equal frames by itself and
reach >= 0.7x the device-tensor engine. One run prints, each as frames/s and as a ratio of the engine's rate:

* ``engine``: ``engine.run`` on a ``(B, 3, 224, 224)`` float32 batch already on the device (a torch CUDA tensor),
  fp16, as benchmarks/datapath_gpu.py measures it;
* ``default``: ``amdinfer.classify(model, precision="fp16")``, ``map(frames, batch_size=B)``, nothing else said
  (its ``geometry`` record is printed: which geometry ran for which size and why);
* ``host``: the same with ``geometry="host"`` (the fused graph, resize and crop on the host);
* ``fuse``: ``classify(..., fuse=False).fuse(image_size=(480, 640))`` written by hand (``resize="auto"``);
* the parts of the default alone (:func:`parts`): ``graph_engine_device`` / ``graph_engine_host`` (the fused frames
  engine, geometry in the graph, on a uint8 batch on the device / on the host), ``h2d_pinned`` / ``h2d_pageable`` (one
  batch copied to the device, with GB/s), ``fill_one_thread`` (``np.stack`` of the frames into a buffer);
* ``answers``: the default's top-5 against the host geometry's on the same frames (equal: the exact resize).

The model: torchvision's ``resnet50(weights=None)`` exported to ONNX with a dynamic batch (random weights: the
rates do not depend on them), else amdinfer's own ResNet-50 builder when torchvision is missing. Frames: uint8
random 480x640x3. Each timed call is 16 batches (fill and drain are one batch each).

Usage::

    python benchmarks/classify_frames.py --out /tmp/frames          # the H200 (onnxruntime-gpu, torch)
    python benchmarks/classify_frames.py --provider cpu --quick       # a smoke run on the CPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:  # torch first: it loads CUDA's cuBLAS/cuDNN that onnxruntime-gpu links against
    import torch
except ImportError:  # pragma: no cover - the CPU smoke run
    torch = None  # type: ignore[assignment]
import onnx
import onnxruntime as ort

import amdinfer
from amdinfer.testing import models


def rate(fn: Callable[[], Any], items: int, *, warmup: int = 2, min_iters: int = 3, seconds: float = 1.0) -> float:
    """Items per second from the median time of one call (the warm-up calls build what the first call builds)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < min_iters or (time.perf_counter() < end and len(times) < 100):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return items / statistics.median(times)


def resnet50_onnx(quick: bool) -> tuple[onnx.ModelProto, str]:
    """torchvision's ResNet-50 (random weights) exported with a dynamic batch, else amdinfer's builder."""
    try:
        import torchvision
    except ImportError:
        torchvision = None
    if torch is None or torchvision is None or quick:
        return models.resnet50(), "amdinfer.testing.models.resnet50"  # its batch axis is N already
    net = torchvision.models.resnet50(weights=None).eval()
    path = Path(tempfile.mkdtemp(prefix="amdinfer-frames-")) / "resnet50.onnx"
    kwargs: dict[str, Any] = {"input_names": ["input"], "output_names": ["logits"], "opset_version": 17}
    kwargs["dynamic_axes"] = {"input": {0: "N"}, "logits": {0: "N"}}
    import inspect

    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # the TorchScript exporter: dynamic_axes as given
    with torch.no_grad():
        torch.onnx.export(net, (torch.zeros(1, 3, 224, 224),), str(path), **kwargs)
    return onnx.load(str(path)), f"torchvision {torchvision.__version__} resnet50(weights=None)"


def parts(row: dict[str, Any], clf: Any, frames: list[np.ndarray], hw: tuple[int, int], gpu: bool, timed: Any) -> None:
    """Where the default's time goes, each part alone: the fused frames engine (in-graph geometry + the model) on a
    batch already on the device and on a host batch; the host-to-device copy of one batch (pinned and pageable); the
    fill of a batch from the frames (one thread). The cause of a gap to the engine is the slowest of them."""
    fused = getattr(clf, "_fused", {}).get(hw)
    if fused is None:
        row["parts"] = "no fused engine for the frames' size"
        return
    eng, B = fused.engine, len(frames)
    name = eng.inputs[0].name
    batch = np.stack(frames)
    timed("graph_engine_host", lambda: eng.run({name: batch}), B)
    if gpu and torch is not None:
        dev = torch.from_numpy(batch).to("cuda")
        timed("graph_engine_device", lambda: eng.run({name: dev}), B)
        pinned = torch.from_numpy(batch).pin_memory()

        def copy(src: Any) -> Callable[[], None]:
            def go() -> None:
                src.to("cuda", non_blocking=True)
                torch.cuda.synchronize()

            return go

        mb = batch.nbytes / 1e6
        for key, src in (("h2d_pinned", pinned), ("h2d_pageable", torch.from_numpy(batch))):
            timed(key, copy(src), B)
            if row.get(key):
                row[key + "_GBps"] = round(row[key] * mb / B / 1e3, 1)
        out = pinned.numpy()
    else:
        out = np.empty_like(batch)
    timed("fill_one_thread", lambda: np.stack(frames, out=out), B)
    row["frame_MB"] = round(batch.nbytes / B / 1e6, 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="small frames, short timings, amdinfer's ResNet (a smoke run)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="a folder for classify_frames.json")
    args = p.parse_args(argv)
    gpu = args.provider == "cuda"
    B, secs = args.batch, 0.3 if args.quick else 1.5
    load: dict[str, Any] = {} if gpu else {"providers": ["CPUExecutionProvider"]}
    h, w = (48, 64) if args.quick else (480, 640)
    model, source = resnet50_onnx(args.quick)
    env = {
        "onnxruntime": ort.__version__,
        "amdinfer": amdinfer.__version__,
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None),
        "gpu": torch.cuda.get_device_name(0) if gpu and torch is not None else None,
        "cpus": os.cpu_count(),
        "batch": B,
        "frames": f"{w}x{h}",
        "model": source,
    }
    print(json.dumps(env), flush=True)
    row: dict[str, Any] = {"env": env}
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(B)]

    def stream(pipe: Any) -> Callable[[], None]:
        def go() -> None:
            for _ in pipe.map((frames[i % B] for i in range(16 * B)), batch_size=B):
                pass

        return go

    def timed(key: str, fn: Callable[[], Any], n: int) -> None:
        try:
            row[key] = round(rate(fn, n, seconds=secs), 1)
        except Exception as exc:  # one failing column must not lose the others
            row[key], row[key + "_error"] = None, f"{type(exc).__name__}: {str(exc)[:400]}"
        print(f"  {key}: {row[key]} frames/s" + (f" ({row.get(key + '_error')})" if row[key] is None else ""))

    t0 = time.perf_counter()
    with amdinfer.load(model, precision="fp16", **load) as eng:
        x = np.random.default_rng(2).random((B, 3, 224, 224), dtype=np.float32)
        xd = torch.from_numpy(x).to("cuda") if gpu and torch is not None else x
        row["engine_providers"] = eng.info.providers
        timed("engine", lambda: eng.run({eng.inputs[0].name: xd}), B)

    clf = amdinfer.classify(model, precision="fp16", **load)  # the defaults
    timed("default", stream(clf), 16 * B)
    row["default_kind"], row["default_geometry"] = type(clf).__name__, getattr(clf, "geometry", None)
    print(f"  default: {row['default_kind']}, geometry {row['default_geometry']}")
    parts(row, clf, frames, (h, w), gpu, timed)
    with amdinfer.classify(model, precision="fp16", geometry="host", **load) as host:
        timed("host", stream(host), 16 * B)
        want = [r.indices.tolist() for r in host.run_batch(frames)]
    got = [r.indices.tolist() for r in clf.run_batch(frames)]
    row["answers"] = f"{sum(a == b for a, b in zip(got, want))}/{B} top-5 equal to the host geometry's"
    clf.close()
    with amdinfer.classify(model, precision="fp16", fuse=False, **load) as staged:
        fused = staged.fuse(image_size=(h, w))
        timed("fuse", stream(fused), 16 * B)
        fused.close()
    engine = row.get("engine")
    for key in ("default", "host", "fuse", "graph_engine_host", "graph_engine_device", "h2d_pinned", "fill_one_thread"):
        if engine and row.get(key):
            row[f"{key}_vs_engine"] = round(row[key] / engine, 3)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    print(
        f"frames {w}x{h}, batch {B}: engine {engine}/s; "
        + ", ".join(f"{k} {row.get(k)}/s ({row.get(k + '_vs_engine')}x)" for k in ("default", "host", "fuse"))
        + f"; {row['answers']}; target default >= 0.7x"
    )
    print(json.dumps(row), flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "classify_frames.json").write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
