"""Render the synthetic text pages and lines that the PP-OCR quantization tests use, once, into an npz.

The tests never render text themselves: Pillow's default font (``ImageFont.load_default(size=...)``) draws
different pixels with different Pillow/FreeType builds, and every accuracy figure downstream moved with them.
This script is how ``tests/data/ppocr_synthetic.npz`` was made; run it only to change that data on purpose:

    python tests/data/make_ppocr_images.py            # writes tests/data/ppocr_synthetic.npz

Contents (uint8 RGB arrays): ``page_<seed>`` (detector pages: calibration seeds 0-11 at 320x320, held-out
seeds 1000-1011 at 384 wide x 320 high) and ``line_<seed>_<i>`` (direction-classifier lines: seed 0 x 32
calibration, seed 1 x 120 held-out, seed 2 x 64 mixed-precision search; odd ``i`` rotated by 180 degrees).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).with_name("ppocr_synthetic.npz")

WORDS = (
    "the quick brown fox jumps over a lazy dog ONNX Runtime MIGraphX int8 fp16 invoice total amount due "
    "2024 page chapter section figure table 42 3.14 quantization calibration accuracy report"
).split()

#: Pillow sizes (width, height).
PAGES = {**{s: (320, 320) for s in range(12)}, **{1000 + s: (384, 320) for s in range(12)}}
LINES = {0: 32, 1: 120, 2: 64}


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: fixed-size bitmap font
        return ImageFont.load_default()


def render_page(seed: int, size: tuple[int, int]) -> np.ndarray:
    """An RGB page of a few dark text lines in random sizes on a light background."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    img = Image.new("RGB", size, tuple(int(v) for v in rng.integers(190, 256, 3)))
    draw = ImageDraw.Draw(img)
    y = int(rng.integers(4, 20))
    while y < size[1] - 20:
        fs = int(rng.integers(14, 30))
        text = " ".join(rng.choice(WORDS, int(rng.integers(1, 5))))
        x = int(rng.integers(0, size[0] // 3))
        draw.text((x, y), text, fill=tuple(int(v) for v in rng.integers(0, 80, 3)), font=_font(fs))
        y += fs + int(rng.integers(6, 30))
    return np.asarray(img)


def render_lines(seed: int, n: int) -> list[np.ndarray]:
    """``n`` single text-line images; every other one rotated by 180 degrees."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        fs = int(rng.integers(18, 34))
        text = " ".join(rng.choice(WORDS, int(rng.integers(1, 4))))
        font = _font(fs)
        box = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font)
        w = int(box[2] - box[0]) + 12
        img = Image.new("RGB", (w, fs + 14), tuple(int(v) for v in rng.integers(190, 256, 3)))
        ImageDraw.Draw(img).text((6, 4), text, fill=tuple(int(v) for v in rng.integers(0, 80, 3)), font=font)
        arr = np.asarray(img)
        lines.append(np.ascontiguousarray(arr[::-1, ::-1] if i % 2 else arr))
    return lines


def main() -> int:
    import PIL

    arrays: dict[str, np.ndarray] = {}
    for seed, size in PAGES.items():
        arrays[f"page_{seed}"] = render_page(seed, size)
    for seed, n in LINES.items():
        for i, line in enumerate(render_lines(seed, n)):
            arrays[f"line_{seed}_{i}"] = line
    arrays["pillow_version"] = np.array(PIL.__version__)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.2f} MB, {len(arrays) - 1} images, Pillow {PIL.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
