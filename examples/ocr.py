"""Read the text of the shipped test pages with PP-OCR (det -> cls -> rec) through ``amdinfer.ocr``, offline.

The models are the ones inside the ``rapidocr`` 3.10.0 wheel (Apache-2.0), found through the installed
distribution without importing it: ``pip install --no-deps rapidocr==3.10.0``. Without it the example says so
and exits cleanly. Pages: ``tests/data/ocr_page*.png``; pass your own with ``--image``.

    python examples/ocr.py
    python examples/ocr.py --image scan.png --out annotated/
"""

from __future__ import annotations

import argparse
import importlib.metadata
from pathlib import Path

import amdinfer

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "det": "rapidocr/models/PP-OCRv6_det_small.onnx",
    "cls": "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "rec": "rapidocr/models/PP-OCRv6_rec_small.onnx",
}


def model_files() -> dict[str, Path] | None:
    try:
        dist = importlib.metadata.distribution("rapidocr")
    except importlib.metadata.PackageNotFoundError:
        return None
    paths = {k: Path(str(dist.locate_file(v))) for k, v in MODELS.items()}
    return paths if all(p.is_file() for p in paths.values()) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", nargs="*", help="pages to read (default: the shipped test pages)")
    ap.add_argument("--out", type=Path, default=None, help="write each page with its lines drawn into this folder")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    files = model_files()
    if files is None:
        print("needs the PP-OCR models of the rapidocr wheel: pip install --no-deps rapidocr==3.10.0")
        return
    pages = args.image or sorted(str(p) for p in (ROOT / "tests" / "data").glob("ocr_page*.png"))
    with amdinfer.ocr(
        files["det"], files["rec"], files["cls"], providers=["CPUExecutionProvider"], threads=args.threads
    ) as pipe:
        for page, lines in zip(pages, pipe(pages)):
            print(f"{Path(page).name}: {len(lines)} lines")
            for line in lines:
                print(f"  {line.score:.3f}  {line.text}")
            if args.out is not None and len(lines):
                args.out.mkdir(parents=True, exist_ok=True)
                print("  ->", lines.save(args.out / Path(page).name))


if __name__ == "__main__":
    main()
