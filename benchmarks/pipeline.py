"""Pipeline throughput on the YOLOv8-style model at 640: ``pipe.map`` vs inference alone vs a plain loop.

Three ways over the same images (480x640 synthetic scenes, letterboxed to 640):

* inference only: ``engine.run`` on batches preprocessed beforehand (the ceiling ``map`` aims at);
* ``pipe.map(images, batch_size=B, workers=W)``: preprocessing, inference and postprocessing overlapped;
* a plain loop: ``[pipe(image) for image in images]``, one stage after another.

Target: ``map`` reaches at least 0.9x the inference-only throughput (it hides pre/postprocessing behind the
engine; on a CPU-only machine the engine and the stages compete for the same cores, so expect less there).

    python benchmarks/pipeline.py [--backend ort] [--batch 1] [--workers 2]   # AMDINFER_BENCH_QUICK=1: smoke run
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

import amdinfer
from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
from amdinfer.preprocess import HwcToChw, Letterbox, Normalize, stack
from amdinfer.testing.models import yolov8

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"
SIZE = 640


def scenes(n: int, seed: int = 0) -> list[np.ndarray]:
    """Smooth 480x640 RGB scenes with a few flat rectangles: image-like, deterministic, no dependency."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:480, 0:640]
    out = []
    for _ in range(n):
        base = np.stack([(xx * rng.uniform(0.1, 0.4) + yy * rng.uniform(0.1, 0.4)) % 256 for _ in range(3)], -1)
        for _ in range(5):
            y0, x0 = rng.integers(0, 400), rng.integers(0, 560)
            base[y0 : y0 + rng.integers(20, 80), x0 : x0 + rng.integers(20, 80)] = rng.integers(0, 256, 3)
        out.append(base.astype(np.uint8))
    return out


def interleaved(repeats: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best time of each run, the runs taken in turn so that load from elsewhere hits them alike."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="ort", help="amdinfer.load backend (default: ort)")
    parser.add_argument("--batch", type=int, default=1, help="images per engine call")
    parser.add_argument("--workers", type=int, default=2, help="pre/postprocessing threads of pipe.map")
    parser.add_argument("--images", type=int, default=6 if QUICK else 48)
    args = parser.parse_args()
    repeats = 2 if QUICK else 5

    images = scenes(args.images)
    pipe = amdinfer.Pipeline(
        preprocess=[Letterbox(SIZE), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(image_size=SIZE),
        backend=args.backend,
        postprocess=[YoloDecode(conf_threshold=0.25), Nms(iou_threshold=0.45), ScaleBoxes()],
    )
    engine = pipe.engine
    batches = []
    for start in range(0, len(images), args.batch):
        chunk = []
        for image in images[start : start + args.batch]:
            sample = image
            for stage in pipe.preprocess:
                sample = stage(sample)
            chunk.append(sample)
        batches.append(stack(chunk)[0])
    pipe.run_batch(images[: args.batch])  # warm-up: first runs allocate

    n = len(images)
    best = interleaved(
        repeats,
        {
            "infer": lambda: [engine.run({"images": b}) for b in batches],
            "map": lambda: list(pipe.map(images, batch_size=args.batch, workers=args.workers)),
            "loop": lambda: [pipe(im) for im in images],
        },
    )
    t_infer, t_map, t_loop = best["infer"], best["map"], best["loop"]

    info = engine.info
    print(
        f"YOLOv8-style (n) at {SIZE}, {n} images 480x640, batch {args.batch}, workers {args.workers}, "
        f"{info.backend} {info.providers or info.device}, {os.cpu_count()} CPUs, best of {repeats}"
    )
    print()
    print("| mode | images/s | vs inference only |")
    print("|---|---:|---:|")
    for name, t in (
        ("inference only (`engine.run`, preprocessed beforehand)", t_infer),
        (f"`pipe.map(batch_size={args.batch}, workers={args.workers})`", t_map),
        ("plain loop `[pipe(im) for im in images]`", t_loop),
    ):
        print(f"| {name} | {n / t:.2f} | {t_infer / t:.2f} |")
    print()
    print(f"map / inference-only = {t_infer / t_map:.2f} (target >= 0.9); map / plain loop = {t_loop / t_map:.2f}x")
    pipe.close()


if __name__ == "__main__":
    main()
