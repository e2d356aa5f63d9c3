"""Detect objects in real photos with a YOLOv8-style model, offline, on the CPU or an AMD GPU.

The model comes from ``amdinfer.testing.models.yolov8``: the real YOLOv8n graph and output layout, but
**random weights**, so the boxes it finds are meaningless. What this shows is the mechanics: letterbox,
inference, decoding, NMS and boxes mapped back to each original image. Swap in a trained export
(``engine="yolov8n.onnx"``) and the same code gives real detections.

The photos ship inside scikit-image (``pip install 'amdinfer-onnx[examples]'``); pass your own with ``--image``.

    python examples/detect.py                                  # skimage's astronaut, coffee, chelsea
    python examples/detect.py --image street.jpg --backend migraphx
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import amdinfer
from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
from amdinfer.preprocess import HwcToChw, Letterbox, LoadImage, Normalize
from amdinfer.testing.models import yolov8

COCO = (
    "person bicycle car motorcycle airplane bus train truck boat traffic_light fire_hydrant stop_sign "
    "parking_meter bench bird cat dog horse sheep cow elephant bear zebra giraffe backpack umbrella handbag tie "
    "suitcase frisbee skis snowboard sports_ball kite baseball_bat baseball_glove skateboard surfboard "
    "tennis_racket bottle wine_glass cup fork knife spoon bowl banana apple sandwich orange broccoli carrot "
    "hot_dog pizza donut cake chair couch potted_plant bed dining_table toilet tv laptop mouse remote keyboard "
    "cell_phone microwave oven toaster sink refrigerator book clock vase scissors teddy_bear hair_drier toothbrush"
).split()


def sample_images() -> dict[str, np.ndarray]:
    try:
        from skimage import data
    except ImportError:
        raise SystemExit(
            "the sample photos need scikit-image: pip install 'amdinfer-onnx[examples]' (or pass --image)"
        ) from None
    return {name: getattr(data, name)() for name in ("astronaut", "coffee", "chelsea")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", action="append", help="image file(s) to use instead of the sample photos")
    parser.add_argument("--backend", default="auto", help="amdinfer.load backend: auto, ort, migraphx, reference")
    parser.add_argument("--size", type=int, default=640, help="model input size (a multiple of 32)")
    parser.add_argument(
        "--out", default="examples-out/detections", help="folder for the annotated images (default: git-ignored)"
    )
    args = parser.parse_args()

    images = {Path(p).stem: p for p in args.image} if args.image else sample_images()

    pipe = amdinfer.Pipeline(
        preprocess=[LoadImage(), Letterbox(args.size), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(image_size=args.size),
        backend=args.backend,
        # Random weights light up many anchors; max_det=15 keeps the pictures readable.
        postprocess=[YoloDecode(conf_threshold=0.25, labels=COCO), Nms(iou_threshold=0.45, max_det=15), ScaleBoxes()],
    )
    print(pipe)
    print(f"engine: {pipe.engine.info.backend} {pipe.engine.info.providers or pipe.engine.info.device}")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    loader = LoadImage()
    # map() overlaps decoding/letterboxing of the next image with inference on this one.
    for (name, source), det in zip(images.items(), pipe.map(images.values(), batch_size=1)):
        print(f"\n{name}: {det}")
        original = loader(source).data
        annotated = det.draw(original, text=True)
        from PIL import Image  # Pillow comes with scikit-image

        path = out_dir / f"{name}.png"
        Image.fromarray(annotated).save(path)
        print(f"saved {path}")
    pipe.close()


if __name__ == "__main__":
    main()
