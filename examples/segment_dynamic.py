"""Semantic segmentation at any image size, offline, on the CPU (or a GPU): one engine, many sizes, large images in
blended patches.

The model comes from ``amdinfer.testing.models.unet``: a small UNet (encoder, decoder, skips) with dynamic height and
width whose weights are set so that each pixel's class follows its colour (dark, bright, red, green, blue) plus a
seeded context term; so the answers can be checked by eye and by hand. Swap in your own export
(``amdinfer.segment("model.onnx")``: ``(N, 3, H, W)`` in, ``(N, C, H, W)`` logits out, metadata ``stride`` and
``names`` when it has them).

    python examples/segment_dynamic.py
    python examples/segment_dynamic.py --out /tmp/seg   # also writes the colour overlays as PNG
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import amdinfer
from amdinfer.testing.models import UNET_CLASSES, unet

COLOURS = {"dark": (0, 0, 0), "bright": (255, 255, 255), "red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}


def made_image(h: int, w: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rectangles of the five colours, a little noise, and the class of every pixel."""
    rng = np.random.default_rng(seed)
    truth = np.zeros((h, w), np.int64)
    for _ in range(8):
        y, x = rng.integers(0, h), rng.integers(0, w)
        truth[y : y + rng.integers(h // 8, h // 2), x : x + rng.integers(w // 8, w // 2)] = rng.integers(1, 5)
    palette = np.array([COLOURS[n] for n in UNET_CLASSES])
    image = np.clip(palette[truth] + rng.integers(-10, 11, (h, w, 3)), 0, 255).astype(np.uint8)
    return image, truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write each overlay here as PNG")
    parser.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"])
    args = parser.parse_args()

    model = unet(depth=3)  # stride 8
    engine = amdinfer.load(model, providers=args.providers)
    # one engine, two segmenters on it: images padded to 32-pixel buckets, and images cut in 128-pixel patches
    with engine, amdinfer.segment(model, backend=engine, size_step=32) as whole:
        with amdinfer.segment(model, backend=engine, patch=128, patch_overlap=0.25) as tiles:
            for h, w, seg in [(120, 200, whole), (97, 131, whole), (250, 333, whole), (700, 900, tiles)]:
                image, truth = made_image(h, w, seed=h)
                result = seg(image)
                plan = seg.plan((h, w))
                right = float((result.classes == truth).mean())
                print(f"{h}x{w}: canvas {plan.canvas[0]}x{plan.canvas[1]}, {len(plan.windows)} window(s), "
                      f"{right:.1%} of pixels right; {result!r}")  # fmt: skip
                if args.out is not None:
                    args.out.mkdir(parents=True, exist_ok=True)
                    result.save(args.out / f"segment_{h}x{w}.png")
        print("engine shapes run:", engine.info.settings["segment"]["shapes"])


if __name__ == "__main__":
    main()
