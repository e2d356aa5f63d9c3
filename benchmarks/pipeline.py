"""Pipeline throughput on the YOLOv8-style model at 640: ``pipe.map`` vs inference alone vs a plain loop.

Three ways over the same images (480x640 synthetic scenes, letterboxed to 640):

* inference only: ``engine.run`` on batches preprocessed beforehand (the ceiling ``map`` aims at);
* ``pipe.map(images, batch_size=B, workers=W)``: preprocessing, inference and postprocessing overlapped;
* a plain loop: ``[pipe(image) for image in images]``, one stage after another.

With the ORT backend each mode runs on two engines: ONNX Runtime's defaults, and ``spin_wait=False``
(intra-op threads that do not busy-wait between operators, which leaves the cores to the pre/postprocessing
threads; ``docs/pipeline.md``). Every ratio is taken against the *best* inference-only figure of the two, so
the option that helps ``map`` cannot flatter it by slowing the baseline down. "CPU s/img" is the process's CPU
time per image (both cores busy = 2x the wall time per image): it shows the threads' busy-waiting.

Target: ``map`` reaches at least 0.9x the inference-only throughput (it hides pre/postprocessing behind the
engine; on a CPU-only machine the engine and the stages compete for the same cores, so expect less there).

    python benchmarks/pipeline.py [--backend ort] [--batch 1] [--workers 2]   # AMDINFER_BENCH_QUICK=1: smoke run
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np
from _isolation import isolated, loadavg, machine, machine_lines

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


def interleaved(repeats: int, runs: dict[str, Callable[[], object]]) -> dict[str, tuple[float, float]]:
    """Best (wall, CPU) time of each run. Each run (a whole pass over the images) is timed alone after a pause
    that lets the previous run's spinning thread pools go idle (``benchmarks/_isolation.py``), the runs taking
    turns in a rotating order so that load from elsewhere hits them alike."""
    stats = isolated(runs, rounds=repeats, block=1, warmup=0, pause=0.5)
    best = {}
    for name, s in stats.items():
        i = min(range(len(s.wall)), key=s.wall.__getitem__)
        best[name] = (s.wall[i], s.cpu[i])
    return best


def preprocessed_batches(pipe: amdinfer.Pipeline, images: list[np.ndarray], batch: int) -> list[np.ndarray]:
    batches = []
    for start in range(0, len(images), batch):
        chunk = []
        for image in images[start : start + batch]:
            sample = image
            for stage in pipe.preprocess:
                sample = stage(sample)
            chunk.append(sample)
        batches.append(stack(chunk)[0])
    return batches


def main() -> None:
    start = machine()  # the load average before the runs
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="ort", help="amdinfer.load backend (default: ort)")
    parser.add_argument("--batch", type=int, default=1, help="images per engine call")
    parser.add_argument("--workers", type=int, default=2, help="pre/postprocessing threads of pipe.map")
    parser.add_argument("--images", type=int, default=6 if QUICK else 48)
    args = parser.parse_args()
    repeats = 2 if QUICK else 5

    images = scenes(args.images)
    model = yolov8(image_size=SIZE)
    configs: dict[str, dict[str, object]] = {"defaults": {}}
    if args.backend == "ort":
        configs["spin_wait=False"] = {"spin_wait": False}
    pipes = {
        name: amdinfer.Pipeline(
            preprocess=[Letterbox(SIZE), Normalize(scale=1 / 255), HwcToChw()],
            engine=model,
            backend=args.backend,
            postprocess=[YoloDecode(conf_threshold=0.25), Nms(iou_threshold=0.45), ScaleBoxes()],
            **options,
        )
        for name, options in configs.items()
    }
    batches = preprocessed_batches(next(iter(pipes.values())), images, args.batch)
    for pipe in pipes.values():
        pipe.run_batch(images[: args.batch])  # warm-up: first runs allocate

    def infer(engine: amdinfer.Engine) -> Callable[[], object]:
        return lambda: [engine.run({"images": b}) for b in batches]

    def mapped(pipe: amdinfer.Pipeline) -> Callable[[], object]:
        return lambda: list(pipe.map(images, batch_size=args.batch, workers=args.workers))

    def loop(pipe: amdinfer.Pipeline) -> Callable[[], object]:
        return lambda: [pipe(im) for im in images]

    runs: dict[str, Callable[[], object]] = {}
    for name, pipe in pipes.items():
        runs[f"inference only (`engine.run`, preprocessed beforehand), {name}"] = infer(pipe.engine)
        runs[f"`pipe.map(batch_size={args.batch}, workers={args.workers})`, {name}"] = mapped(pipe)
        runs[f"plain loop `[pipe(im) for im in images]`, {name}"] = loop(pipe)
    best = interleaved(repeats, runs)
    n = len(images)
    t_infer = min(t for name, (t, _) in best.items() if name.startswith("inference only"))

    info = next(iter(pipes.values())).engine.info
    load = loadavg()
    print("\n".join(machine_lines(start)))
    print()
    print(
        f"YOLOv8-style (n) at {SIZE}, {n} images 480x640, batch {args.batch}, workers {args.workers}, "
        f"{info.backend} {info.providers or info.device} {info.runtime_version}, {os.cpu_count()} CPUs, "
        f"best of {repeats}, load average {load:.2f} at the end"
    )
    print()
    print("| mode, engine options | images/s | vs best inference only | CPU s/img |")
    print("|---|---:|---:|---:|")
    for name, (t, cpu) in best.items():
        print(f"| {name} | {n / t:.2f} | {t_infer / t:.2f} | {cpu / n:.3f} |")
    print()
    for name in pipes:
        t_map = best[f"`pipe.map(batch_size={args.batch}, workers={args.workers})`, {name}"][0]
        t_loop = best[f"plain loop `[pipe(im) for im in images]`, {name}"][0]
        print(
            f"{name}: map / best inference-only = {t_infer / t_map:.2f} (target >= 0.9); "
            f"map / plain loop = {t_loop / t_map:.2f}x"
        )
    for pipe in pipes.values():
        pipe.close()


if __name__ == "__main__":
    main()
