"""Dynamic-resolution segmentation: ``amdinfer.segment`` on images of several sizes, one engine, first call vs steady.

Issue 41 item 4: one engine serves many sizes without recompiling. For each canvas step (``size_step``: the model's
stride, i.e. the least padding, and a coarse bucket), one :class:`~amdinfer.recipes.Segmenter` is built and fed the
sizes in order; per size it prints the first call (ms; a new engine shape pays its set-up here: ORT's CPU memory
plan, the CUDA EP's per-shape state and cuDNN algorithm search, a MIGraphX compile) and the median of the steady
calls after it, the canvas it ran at, and at the end the engine shapes fed (``engine.info.settings["segment"]``).
The last size is larger than ``--patch`` and runs in blended patches batched through the executor.

The model is amdinfer's offline UNet builder (``amdinfer.testing.models.unet``: encoder-decoder with skips, seeded
weights; the rate does not depend on them). Images: uint8 random.

Usage::

    python benchmarks/segment_sizes.py --provider cpu --quick        # this CPU (a few seconds)
    python benchmarks/segment_sizes.py --provider cuda --out /tmp/seg # the H200 (onnxruntime-gpu, CUDA EP)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

try:  # torch first on the H200: it loads CUDA's cuBLAS/cuDNN that onnxruntime-gpu links against
    import torch  # noqa: F401
except ImportError:  # the CPU run needs no torch
    pass
import onnxruntime as ort

import amdinfer
from amdinfer.testing import models

QUICK_SIZES = [(120, 160), (125, 170), (240, 320), (250, 330), (480, 640), (900, 1200)]
FULL_SIZES = [(480, 640), (500, 700), (720, 1280), (736, 1290), (1080, 1920), (1100, 1900), (4000, 6000)]


def _ms(runner: Any, image: np.ndarray) -> float:
    start = time.perf_counter()
    runner(image)
    return (time.perf_counter() - start) * 1e3


def run_sizes(model: Any, steps: tuple[int, ...], sizes: list[tuple[int, int]], patch: int, steady: int, load: dict):
    """For each ``size_step`` one engine (a whole-image Segmenter and a patched one on it); per size: the first call on
    each engine, then the steady calls alternating between them (so a shared CPU's load falls on both alike)."""
    bound = max(h for h, _ in sizes[:-1]), max(w for _, w in sizes[:-1])
    rng = np.random.default_rng(0)
    runs: list[dict[str, Any]] = []
    segs = []
    for step in steps:
        whole = amdinfer.segment(model, size_step=step, max_size=tuple(-(-b // step) * step for b in bound), **load)
        tiles = amdinfer.segment(model, size_step=step, patch=patch, backend=whole.engine)  # the same engine
        segs.append((whole, tiles))
        runs.append({"size_step": step, "rows": [], "engines": len({id(whole.engine), id(tiles.engine)})})
    try:
        for h, w in sizes:
            image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            pick = [tiles if (h, w) == sizes[-1] else whole for whole, tiles in segs]
            firsts = [_ms(seg, image) for seg in pick]
            times: list[list[float]] = [[] for _ in pick]
            for _ in range(steady):
                for k, seg in enumerate(pick):
                    times[k].append(_ms(seg, image))
            for k, seg in enumerate(pick):
                plan, median = seg.plan((h, w)), statistics.median(times[k])
                runs[k]["rows"].append(
                    {
                        "size": f"{h}x{w}",
                        "canvas": f"{plan.canvas[0]}x{plan.canvas[1]}",
                        "windows": len(plan.windows),
                        "first_ms": round(firsts[k], 2),
                        "steady_ms": round(median, 2),
                        "megapixels_per_s": round(h * w / 1e6 / (median / 1e3), 2),
                    }
                )
        for run, (whole, _) in zip(runs, segs):
            run["record"] = dict(whole.engine.info.settings["segment"])
            run["backend"] = whole.engine.info.backend
    finally:
        for whole, tiles in segs:
            tiles.close()
            whole.close()
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--provider", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes and model (a CPU smoke run)")
    parser.add_argument("--steady", type=int, default=None, help="steady calls per size (default 5, quick 3)")
    parser.add_argument("--out", type=Path, default=None, help="write segment_sizes.json here")
    args = parser.parse_args(argv)
    quick = args.quick
    model = models.unet(depth=3, width=8) if quick else models.unet(depth=4, width=32)
    stride = int(next(p.value for p in model.metadata_props if p.key == "stride"))
    sizes = QUICK_SIZES if quick else FULL_SIZES
    patch = 256 if quick else 1024
    provider = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[args.provider]
    load = {"backend": "ort", "providers": [provider]}
    steady = args.steady or (3 if quick else 5)
    out: dict[str, Any] = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
            "amdinfer": amdinfer.__version__,
        },
        "model": f"unet(depth={3 if quick else 4}, width={8 if quick else 32}), stride {stride}",
        "provider": provider,
        "load_average": os.getloadavg(),
        "runs": run_sizes(model, (stride, 128), sizes, patch, steady, load),
    }
    out["load_average_after"] = os.getloadavg()
    for run in out["runs"]:
        print(f"size_step={run['size_step']}  ({run['backend']}, {provider}; {run['engines']} engine)")
        print(f"  pieces (canvases, patches) per engine shape: {run['record']['shapes']}")
        print(f"  {'size':>10} {'canvas':>10} {'win':>4} {'first ms':>10} {'steady ms':>10} {'MP/s':>7}")
        for r in run["rows"]:
            print(
                f"  {r['size']:>10} {r['canvas']:>10} {r['windows']:>4} {r['first_ms']:>10.1f} "
                f"{r['steady_ms']:>10.1f} {r['megapixels_per_s']:>7.2f}"
            )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "segment_sizes.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
