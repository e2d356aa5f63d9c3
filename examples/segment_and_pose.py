"""Instance segmentation and pose with ``amdinfer.yolo``, offline, on the CPU (or a GPU).

The models come from ``amdinfer.testing.models.yolov8_seg`` / ``yolov8_pose``: YOLOv8 networks with seeded weights
and exactly the output layouts and metadata of Ultralytics' ``-seg`` and ``-pose`` exports, so the answers are
random-looking but the post-processing is the real one (Ultralytics 8.4's ``process_mask``, ``scale_masks``,
``Masks.xy``, ``scale_coords``; ``tests/results/test_seg_pose_parity.py`` checks it against Ultralytics itself).
Swap in your own export: ``amdinfer.yolo("yolo11n-seg.onnx")`` reads ``task``, ``names`` and ``kpt_shape`` from its
metadata.

    python examples/segment_and_pose.py
    python examples/segment_and_pose.py --out /tmp/segpose   # also writes the pictures as PNG
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import amdinfer
from amdinfer.testing.models import yolov8_pose, yolov8_seg


def made_image(h: int, w: int, seed: int) -> np.ndarray:
    """Discs of colour on noise: features that vary over the image."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 60, (h, w, 3)).astype(np.uint8)
    yy, xx = np.ogrid[:h, :w]
    for _ in range(8):
        y, x, r = rng.integers(0, h), rng.integers(0, w), rng.integers(h // 12, h // 4)
        image[(yy - y) ** 2 + (xx - x) ** 2 < r * r] = rng.integers(60, 255, 3)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the pictures (PNG)")
    args = parser.parse_args()
    image = made_image(360, 480, 0)
    cpu = {"providers": ["CPUExecutionProvider"]}

    with amdinfer.yolo(yolov8_seg(image_size=320, num_classes=3), conf=0.15, **cpu) as seg:
        det = seg(image)
    print(det)
    print("masks:", det.masks, "pixels per mask:", det.masks.areas[:5].tolist(), "...")
    print("first polygon (image pixels):", det.masks.xy[0][:4].round(1).tolist(), "...")
    row = json.loads(det.to_json(decimals=2))[0]
    print("a row of to_json():", {k: row[k] for k in ("name", "confidence", "box")}, "+ segments")
    served = det.to_tensors()  # what `amdinfer serve --recipe yolo` answers: masks as COCO RLE texts per box
    print("served tensors:", {k: (v.dtype.name, v.shape) for k, v in served.items()})

    with amdinfer.yolo(yolov8_pose(image_size=320), conf=0.15, **cpu) as pose:
        people = pose(image)
    print(people)
    print("keypoints:", people.keypoints, "first person, nose x, y, visibility:", people.keypoints.data[0, 0].round(2))

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        print("wrote", det.save(args.out / "segment.png"), people.save(args.out / "pose.png"))


if __name__ == "__main__":
    main()
