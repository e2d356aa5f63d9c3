"""Time amdinfer's nms / batched_nms against cv2.dnn.NMSBoxes(Batched) and torchvision, on detector-like boxes.

Boxes are jittered copies of random objects (about 100 per object, like a detector's raw output at a low
confidence threshold) plus 5 % background boxes, in a 1280 x 1280 image, with uniform scores and 80 classes.
Every competitor must keep exactly the same set of boxes. Prints a markdown table of median times and ratios.

    python benchmarks/nms.py --sizes 1000 10000 30000 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from amdinfer.reference import batched_nms, nms


def detector_boxes(
    n: int, seed: int = 0, image: float = 1280.0, per_object: int = 100, n_classes: int = 80
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` float32 xyxy boxes clustered around ``n / per_object`` objects, uniform scores, int64 classes."""
    rng = np.random.default_rng(seed)
    k = max(1, n // per_object)
    centers = rng.uniform(0, image, (k, 2))
    sizes = np.exp(rng.uniform(np.log(16), np.log(400), (k, 2)))
    object_class = rng.integers(0, n_classes, k)
    n_background = n // 20
    owner = rng.integers(0, k, n - n_background)
    c = centers[owner] + rng.normal(0, 0.15, (len(owner), 2)) * sizes[owner]
    s = sizes[owner] * np.exp(rng.normal(0, 0.2, (len(owner), 2)))
    c = np.concatenate([c, rng.uniform(0, image, (n_background, 2))])
    s = np.concatenate([s, np.exp(rng.uniform(np.log(8), np.log(300), (n_background, 2)))])
    classes = np.concatenate([object_class[owner], rng.integers(0, n_classes, n_background)])
    perm = rng.permutation(n)
    boxes = np.concatenate([c - s / 2, c + s / 2], axis=1).astype(np.float32)[perm]
    return boxes, rng.uniform(0, 1, n).astype(np.float32), classes[perm].astype(np.int64)


def competitors(
    boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float
) -> dict[str, dict[str, Callable[[], np.ndarray]]]:
    """For "nms" and "batched_nms", the functions to time, each returning kept indices."""
    runs: dict[str, dict[str, Callable[[], np.ndarray]]] = {
        "nms": {"amdinfer": lambda: nms(boxes, scores, iou)},
        "batched_nms": {"amdinfer": lambda: batched_nms(boxes, scores, classes, iou)},
    }
    try:
        import cv2

        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1).astype(np.float64)
        s64, c32 = scores.astype(np.float64), classes.astype(np.int32)
        runs["nms"]["cv2"] = lambda: np.asarray(cv2.dnn.NMSBoxes(xywh, s64, 0.0, iou)).ravel()
        runs["batched_nms"]["cv2"] = lambda: np.asarray(cv2.dnn.NMSBoxesBatched(xywh, s64, c32, 0.0, iou)).ravel()
    except ImportError:
        pass
    try:
        import torch
        import torchvision

        tb, ts, tc = torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(classes)
        runs["nms"]["torchvision"] = lambda: torchvision.ops.nms(tb, ts, iou).numpy()
        runs["batched_nms"]["torchvision"] = lambda: torchvision.ops.batched_nms(tb, ts, tc, iou).numpy()
    except ImportError:
        pass
    return runs


def bench(sizes: list[int], repeats: int, iou: float, clock: Callable[[], float]) -> list[str]:
    rows = [
        "| op | boxes | kept | amdinfer (ms) | cv2 (ms) | torchvision (ms) | amdinfer / best other |",
        "|" + "---|" * 7,
    ]
    for n in sizes:
        boxes, scores, classes = detector_boxes(n)
        for op, funcs in competitors(boxes, scores, classes, iou).items():
            kept = {name: np.sort(f()) for name, f in funcs.items()}  # also a warm-up
            reference = kept["amdinfer"]
            for name, k in kept.items():
                if not np.array_equal(k, reference):
                    raise SystemExit(f"{op} n={n}: {name} keeps {len(k)} boxes, amdinfer {len(reference)}: sets differ")
            times: dict[str, list[float]] = {name: [] for name in funcs}
            for _ in range(repeats):
                # Interleaved, so that load from elsewhere on the machine hits every competitor alike.
                for name, f in funcs.items():
                    start = clock()
                    f()
                    times[name].append(clock() - start)
            median = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            others = [v for name, v in median.items() if name != "amdinfer"]
            ratio = f"{median['amdinfer'] / min(others):.2f}" if others else "n/a"
            cell = {
                name: f"{median[name]:.2f}" if name in median else "n/a" for name in ("amdinfer", "cv2", "torchvision")
            }
            timings = " | ".join(cell[name] for name in ("amdinfer", "cv2", "torchvision"))
            rows.append(f"| {op} | {n} | {len(reference)} | {timings} | {ratio} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 30000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iou", type=float, default=0.45)
    parser.add_argument(
        "--clock", choices=["wall", "cpu"], default="wall", help="cpu: process time, steadier on a shared machine"
    )
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print("\n".join(bench(args.sizes, args.repeats, args.iou, clock)))


if __name__ == "__main__":
    main()
