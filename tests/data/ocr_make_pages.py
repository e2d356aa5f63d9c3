"""Render the OCR test pages ``tests/data/ocr_page*.png`` (run once; the PNGs are shipped).

Deterministic: fixed text, Pillow's bundled font (``ImageFont.load_default(size=...)``), fixed angles, and two
crops of scikit-image's bundled photographs of printed text. The pixels depend on the Pillow/FreeType build,
which is why the PNGs are shipped rather than rendered in the tests. Run:
``python tests/data/ocr_make_pages.py`` (needs Pillow and scikit-image).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

HERE = Path(__file__).parent

TEXT = [
    "Cascades run a second model on the pieces",
    "of the first: text detection, then reading.",
    "Invoice 2024-117   Total: 1,280.50 EUR",
    "The quick brown fox jumps over the lazy dog",
]
LEFT = ["Column one starts here", "with short lines of", "plain printed text and", "numbers like 42 and 7."]
RIGHT = ["The second column", "reads after the first", "in reading order,", "top to bottom."]


def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)  # type: ignore[return-value]


def text_page() -> Image.Image:
    im = Image.new("RGB", (640, 400), (250, 250, 245))
    d = ImageDraw.Draw(im)
    y = 30
    for i, line in enumerate(TEXT):
        size = (28, 22, 24, 20)[i]
        d.text((30 + 10 * i, y), line, font=_font(size), fill=(20, 20, 30))
        y += size + 40
    d.text((420, 350), "Page 1 of 3", font=_font(18), fill=(80, 30, 30))
    return im


def columns_page() -> Image.Image:
    im = Image.new("RGB", (640, 420), (255, 255, 255))
    d = ImageDraw.Draw(im)
    d.text((30, 20), "Two Columns", font=_font(32), fill=(0, 0, 0))
    for k, (x, lines) in enumerate(((30, LEFT), (350, RIGHT))):
        for i, line in enumerate(lines):
            d.text((x, 100 + 60 * i + 6 * k), line, font=_font(22), fill=(30, 30, 30))
    return im


def rotated_page() -> Image.Image:
    im = Image.new("RGB", (640, 480), (245, 245, 250))
    block = Image.new("RGB", (460, 150), (245, 245, 250))
    d = ImageDraw.Draw(block)
    for i, line in enumerate(["A block of text that is", "rotated by a few degrees", "still reads line by line"]):
        d.text((10, 10 + 46 * i), line, font=_font(28), fill=(10, 10, 60))
    im.paste(block.rotate(7, expand=True, fillcolor=(245, 245, 250), resample=Image.BICUBIC), (40, 20))
    flip = Image.new("RGB", (420, 50), (245, 245, 250))
    ImageDraw.Draw(flip).text((10, 8), "This line is upside down", font=_font(28), fill=(60, 10, 10))
    im.paste(flip.rotate(180), (120, 330))
    ImageDraw.Draw(im).text((40, 420), "and this one is upright", font=_font(26), fill=(10, 60, 10))
    return im


def photo_pages() -> list[Image.Image]:
    from skimage import data

    page = data.page()  # a scanned page of printed text (grey)
    text = data.text()  # a photograph of handwritten-style printed text on a wall (grey)
    return [Image.fromarray(np.stack([page] * 3, -1)), Image.fromarray(np.stack([text] * 3, -1))]


def main() -> None:
    pages = [text_page(), columns_page(), rotated_page(), *photo_pages()]
    for i, im in enumerate(pages):
        im.save(HERE / f"ocr_page{i}.png", optimize=True)
        print(HERE / f"ocr_page{i}.png", im.size)


if __name__ == "__main__":
    main()
