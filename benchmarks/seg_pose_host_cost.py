"""Where the time of a segmentation/pose image goes: the engine vs the host post-processing (masks, keypoints).

Runs ``amdinfer.yolo`` on the offline ``yolov8_seg`` / ``yolov8_pose`` builders (640 input, 1080x1920 images) and
times, per image, the engine call and each post-processing stage (``Pipeline`` speed), on the device given. It is
the measurement behind docs/pipeline.md's "fused onto the device where it pays": when the host stages take a small
share of the engine's time, fusing masks into the graph would not pay.

    python benchmarks/seg_pose_host_cost.py                       # CPU EP
    python benchmarks/seg_pose_host_cost.py --provider CUDAExecutionProvider   # the H200
    python benchmarks/seg_pose_host_cost.py --quick               # 320 input, 3 images (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import amdinfer
from amdinfer.testing.models import yolov8_pose, yolov8_seg


def _image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    image = rng.integers(0, 60, (h, w, 3)).astype(np.uint8)
    yy, xx = np.ogrid[:h, :w]
    for _ in range(12):
        y, x, r = rng.integers(0, h), rng.integers(0, w), rng.integers(h // 16, h // 5)
        image[(yy - y) ** 2 + (xx - x) ** 2 < r * r] = rng.integers(60, 255, 3)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="CPUExecutionProvider")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--conf", type=float, default=0.15, help="lower: more instances per image")
    args = parser.parse_args()
    size, n, shape = (320, 3, (540, 960)) if args.quick else (640, 20, (1080, 1920))
    rng = np.random.default_rng(0)
    images = [_image(rng, *shape) for _ in range(n)]
    rows = []
    for task, model in (("segment", yolov8_seg(image_size=size)), ("pose", yolov8_pose(image_size=size))):
        with amdinfer.yolo(model, conf=args.conf, providers=[args.provider], keep_image=False) as pipe:
            pipe(images[0])  # warm-up
            stages: dict[str, float] = {}
            count = 0
            start = time.perf_counter()
            for image in images:
                result = pipe(image)
                count += len(result)
                for name, ms in (result.speed or {}).items():
                    stages[name] = stages.get(name, 0.0) + ms / len(images)
            wall = (time.perf_counter() - start) / len(images) * 1e3
        rows.append({"task": task, "instances_per_image": count / len(images), "wall_ms": round(wall, 2)})
        rows[-1].update({k: round(v, 2) for k, v in stages.items()})
    print(json.dumps({"provider": args.provider, "input": size, "image": shape, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
