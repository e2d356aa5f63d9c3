"""Classify real photos with ResNet-50, offline, on the CPU or an AMD GPU.

The model comes from ``amdinfer.testing.models.resnet50``: the real torchvision ResNet-50 v1.5 graph, but
**random weights**, so the predicted classes are meaningless (and close to uniform). What this shows is the
mechanics of a classification pipeline: resize, centre crop, ImageNet normalization, one batched engine
call, softmax and top-5. Swap in a trained export (``engine="resnet50.onnx"``) and pass the ImageNet class
names as ``labels=`` to get real answers.

The photos ship inside scikit-image (``pip install 'amdinfer-onnx[examples]'``); pass your own with ``--image``.

    python examples/classify.py
    python examples/classify.py --image cat.jpg --backend migraphx
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import amdinfer
from amdinfer.postprocess import Softmax, TopK
from amdinfer.preprocess import CenterCrop, HwcToChw, LoadImage, Normalize, Resize
from amdinfer.testing.models import resnet50

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def sample_images() -> dict[str, np.ndarray]:
    try:
        from skimage import data
    except ImportError:
        raise SystemExit(
            "the sample photos need scikit-image: pip install 'amdinfer-onnx[examples]' (or pass --image)"
        ) from None
    return {name: getattr(data, name)() for name in ("chelsea", "coffee", "astronaut")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", action="append", help="image file(s) to use instead of the sample photos")
    parser.add_argument("--backend", default="auto", help="amdinfer.load backend: auto, ort, migraphx, reference")
    parser.add_argument(
        "--out", default="examples-out/classified", help="folder for the annotated images (default: git-ignored)"
    )
    args = parser.parse_args()

    images = {Path(p).stem: p for p in args.image} if args.image else sample_images()

    pipe = amdinfer.Pipeline(
        preprocess=[
            LoadImage(),
            Resize(256),
            CenterCrop(224),
            Normalize(IMAGENET_MEAN, IMAGENET_STD, scale=1 / 255),
            HwcToChw(),
        ],
        engine=resnet50(),
        backend=args.backend,
        postprocess=[Softmax(), TopK(5)],  # TopK(5, labels=imagenet_names) with a trained model
    )
    print(pipe)
    print(f"engine: {pipe.engine.info.backend} {pipe.engine.info.providers or pipe.engine.info.device}")

    results = pipe.run_batch(list(images.values()))  # one engine call for all the photos
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    from PIL import Image, ImageDraw  # Pillow comes with scikit-image

    for (name, source), result in zip(images.items(), results):
        print(f"\n{name}: {result}")
        picture = Image.fromarray(LoadImage()(source).data)
        ImageDraw.Draw(picture).text((8, 8), f"class {result.index}  p={result.score:.4f}", fill=(255, 255, 0))
        path = out_dir / f"{name}.png"
        picture.save(path)
        print(f"saved {path}")
    pipe.close()


if __name__ == "__main__":
    main()
