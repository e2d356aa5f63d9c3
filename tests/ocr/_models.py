"""Where the PP-OCR models of the ``rapidocr==3.10.0`` wheel are, found without importing the package."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent.parent / "data"
PAGES = tuple(sorted(p.name for p in DATA.glob("ocr_page*.png")))
GOLDEN = DATA / "ocr_rapidocr.json"
FILES = {
    "det": "rapidocr/models/PP-OCRv6_det_small.onnx",
    "cls": "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
    "rec": "rapidocr/models/PP-OCRv6_rec_small.onnx",
}


def models() -> dict[str, Path] | None:
    """The three model files, or ``None`` when ``rapidocr`` 3.10.0 is not installed."""
    try:
        dist = importlib.metadata.distribution("rapidocr")
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != "3.10.0":
        return None
    paths = {k: Path(str(dist.locate_file(v))) for k, v in FILES.items()}
    return paths if all(p.is_file() for p in paths.values()) else None


needs_models = pytest.mark.skipif(
    models() is None,
    reason="needs the PP-OCR models of rapidocr==3.10.0: pip install --no-deps rapidocr==3.10.0 "
    "(nox -s tests installs it)",
)


def golden() -> dict[str, Any]:
    """RapidOCR's lines per page: the shipped file, or ``$AMDINFER_OCR_GOLDEN`` (``nox -s ocr_golden`` writes a
    live one)."""
    return json.loads(Path(os.environ.get("AMDINFER_OCR_GOLDEN") or GOLDEN).read_text())["pages"]
