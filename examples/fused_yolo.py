"""Run a fused YOLO pipeline on photos: uint8 images in, detections out of one ONNX graph.

    python examples/fused_yolo.py [--model yolov8n.onnx] [--out DIR]

Without ``--model`` it uses the YOLOv8n-style test detector (random weights, so few or no detections at
conf=0.25; pass a trained Ultralytics export for real answers). Photos: scikit-image's bundled images when
installed, else synthetic ones. Writes the fused model and one JSON of detections per photo into ``--out``
(default: a fresh temporary folder).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx

import amdinfer


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
    p.add_argument("--out", default=None)
    args = p.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="amdinfer-fused-yolo-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        from amdinfer.testing.models import yolov8

        model: object = yolov8(image_size=320)
    else:
        model = args.model
    # One call builds LoadImage -> Letterbox -> Normalize -> HwcToChw -> model -> decode -> NMS -> rescale,
    # and fuse=True compiles everything after the letterbox into one ONNX graph.
    with amdinfer.yolo(model, conf=args.conf, iou=0.7, max_det=300, channels="RGB", fuse=True) as det:
        onnx.save(det.model, out / "fused.onnx")
        for name, image in photos().items():
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
