"""Write ``tests/data/ocr_rapidocr.json``: RapidOCR 3.10.0's lines on the shipped pages ``ocr_page*.png``.

Needs ``rapidocr==3.10.0`` with its dependencies (pyclipper, shapely, omegaconf, ...) and onnxruntime; the tests
only need the wheel's model files (``pip install --no-deps rapidocr==3.10.0``). RapidOCR runs with its defaults
(PP-OCRv6 det/rec small, PP-OCR v2.0 mobile cls, ``text_score`` 0.5) on each page's path. Run
``python tests/data/make_ocr_golden.py [OUT]`` (``nox -s ocr_golden`` writes it to the shipped path).
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def main(out: Path) -> None:
    import onnxruntime
    from rapidocr import RapidOCR

    engine = RapidOCR(params={"Global.log_level": "warning"})
    pages = {}
    for path in sorted(HERE.glob("ocr_page*.png")):
        res = engine(str(path))
        boxes = [] if res.boxes is None else [[[float(v) for v in p] for p in q] for q in res.boxes]
        texts = list(res.txts or ())
        scores = [float(s) for s in (res.scores or ())]
        pages[path.name] = {"boxes": boxes, "texts": texts, "scores": scores}
        print(path.name, texts)
    meta = {
        "rapidocr": importlib.metadata.version("rapidocr"),
        "onnxruntime": onnxruntime.__version__,
        "models": ["PP-OCRv6_det_small.onnx", "ch_ppocr_mobile_v2.0_cls_mobile.onnx", "PP-OCRv6_rec_small.onnx"],
    }
    out.write_text(json.dumps({"meta": meta, "pages": pages}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "ocr_rapidocr.json")
