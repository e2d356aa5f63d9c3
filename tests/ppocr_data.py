"""Trained-model fixtures for the quantization accuracy tests and benchmark: PP-OCR from a wheel, real images.

The models are the PP-OCRv4 text detector and the PP-OCR v2.0 text-direction classifier that
``rapidocr-onnxruntime`` ships inside its wheel (Paddle2ONNX exports: weights in ``Constant`` nodes,
opset 11/12, ``-1``/``"?"`` dims); nothing is downloaded. Images are scikit-image's bundled photographs of
printed text (``data.page()``, ``data.text()``) and text pages and lines rendered once with Pillow's bundled
font and shipped in ``tests/data/ppocr_synthetic.npz`` (the pixels depend on the Pillow/FreeType build).

The detector's boxes come from a simplified DB post-processing (rapidocr's settings: probability > 0.3,
mean box score >= 0.5), without polygon unclipping: enough to compare the quantized box set with the float
one, which is all these checks need.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np

DET_MODEL = "ch_PP-OCRv4_det_infer.onnx"
CLS_MODEL = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
#: Text pages and lines rendered once with Pillow and shipped: rendering depends on the Pillow/FreeType build.
SYNTHETIC = Path(__file__).parent / "data" / "ppocr_synthetic.npz"


def missing_packages() -> list[str]:
    """The optional packages these fixtures need that are not installed."""
    need = {
        "rapidocr_onnxruntime": "rapidocr-onnxruntime",
        "skimage": "scikit-image",
        "scipy": "scipy",
    }
    return [dist for mod, dist in need.items() if importlib.util.find_spec(mod) is None]


def model_path(name: str = DET_MODEL) -> Path:
    """Path of a model inside the installed ``rapidocr_onnxruntime`` wheel (the package is not imported)."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("rapidocr-onnxruntime is not installed: pip install rapidocr-onnxruntime")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not in the installed rapidocr-onnxruntime wheel")
    return path


def _rgb(image: np.ndarray) -> np.ndarray:
    return np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[..., :3]


def _resized_bgr(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """``img`` (RGB) resized with anti-aliasing, as BGR float32 scaled to ``(x/255 - 0.5) / 0.5`` (PaddleOCR's)."""
    from skimage.transform import resize

    x = resize(img, (height, width), preserve_range=True, anti_aliasing=True).astype(np.float32)
    return (x[..., ::-1] / 255.0 - 0.5) / 0.5


def det_input(image: np.ndarray, side: int = 320) -> np.ndarray:
    """PP-OCR detector input: longer side ~``side``, both sides multiples of 32, BGR, ``(x/255 - 0.5) / 0.5``."""
    img = _rgb(image)
    h, w = img.shape[:2]
    s = side / max(h, w)
    nh, nw = max(32, round(h * s / 32) * 32), max(32, round(w * s / 32) * 32)
    x = _resized_bgr(img, nh, nw)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


@functools.cache
def _shipped() -> dict[str, np.ndarray]:
    with np.load(SYNTHETIC) as data:
        return {k: data[k] for k in data.files}


def synthetic_page(seed: int) -> np.ndarray:
    """A shipped RGB page of a few dark text lines in random sizes on a light background (rendered once by
    ``tests/data/make_ppocr_images.py``: calibration seeds 0-11 are 320x320, held-out seeds 1000-1011 384x320)."""
    key = f"page_{seed}"
    if key not in _shipped():
        raise KeyError(f"{SYNTHETIC.name} has no page for seed {seed}; see tests/data/make_ppocr_images.py")
    return _shipped()[key]


def real_pages() -> list[np.ndarray]:
    """scikit-image's photographs of printed text: ``page()`` and ``text()``."""
    from skimage import data

    return [data.page(), data.text()]


def _on_canvas(x: np.ndarray, side: int = 320) -> np.ndarray:
    """``x`` (1, 3, h, w) in the top-left corner of a ``side`` x ``side`` input (0 is mid-grey)."""
    out = np.zeros((1, 3, side, side), np.float32)
    h, w = min(side, x.shape[2]), min(side, x.shape[3])
    out[:, :, :h, :w] = x[:, :, :h, :w]
    return out


def det_calibration(n: int = 12) -> list[np.ndarray]:
    """Detector calibration inputs, all 320 x 320 (ONNX Runtime's histogram calibrators need one shape):
    synthetic pages (seeds 0..n-1) and the left halves of the real pages."""
    page, text = real_pages()
    feeds = [_on_canvas(det_input(synthetic_page(s), 320)) for s in range(n)]
    feeds += [_on_canvas(det_input(page[:, : page.shape[1] // 2], 256)), _on_canvas(det_input(text[:, :220], 256))]
    return feeds


def det_held_out(n: int = 8) -> list[np.ndarray]:
    """Held-out detector inputs: the whole real pages at three scales and synthetic pages (seeds 1000+)."""
    feeds = [det_input(img, side) for img in real_pages() for side in (320, 480, 640)]
    feeds += [det_input(synthetic_page(1000 + s), 384) for s in range(n)]
    return feeds


def det_boxes(outputs: dict[str, np.ndarray], thresh: float = 0.3, box_thresh: float = 0.5) -> list[np.ndarray]:
    """Axis-aligned text boxes ``(K, 4)`` xyxy per image from the detector's probability map."""
    from scipy import ndimage

    prob = np.asarray(next(iter(outputs.values())), np.float32)
    found = []
    for p in prob[:, 0]:
        labels, _ = ndimage.label(p > thresh)
        boxes = []
        for i, sl in enumerate(ndimage.find_objects(labels)):
            if sl is None:
                continue
            ys, xs = sl
            if ys.stop - ys.start < 3 or xs.stop - xs.start < 3:
                continue
            if p[sl][labels[sl] == i + 1].mean() < box_thresh:
                continue
            boxes.append([xs.start, ys.start, xs.stop, ys.stop])
        found.append(np.asarray(boxes, np.float64).reshape(-1, 4))
    return found


def text_mask_iou(quantized: list[dict[str, np.ndarray]], reference: list[dict[str, np.ndarray]]) -> float:
    """IoU of the ``prob > 0.3`` text masks, pooled over samples (the probability-map metric)."""
    inter = union = 0
    for q, r in zip(quantized, reference):
        a = np.asarray(next(iter(q.values()))) > 0.3
        b = np.asarray(next(iter(r.values()))) > 0.3
        inter += int(np.count_nonzero(a & b))
        union += int(np.count_nonzero(a | b))
    return inter / union if union else 1.0


def cls_input(line: np.ndarray) -> np.ndarray:
    """Direction-classifier input: a text-line image resized to height 48 (width <= 192, right-padded)."""
    img = _rgb(line)
    h, w = img.shape[:2]
    nw = min(192, max(8, round(w * 48 / h)))
    x = _resized_bgr(img, 48, nw)
    out = np.zeros((1, 3, 48, 192), np.float32)
    out[0, :, :, :nw] = x.transpose(2, 0, 1)
    return out


def text_lines(seed: int, n: int) -> list[np.ndarray]:
    """The first ``n`` shipped text-line images of ``seed``; every other one is rotated by 180 degrees."""
    count = sum(k.startswith(f"line_{seed}_") for k in _shipped())
    lines = [_shipped()[f"line_{seed}_{i}"] for i in range(count)]
    if len(lines) < n:
        raise KeyError(f"{SYNTHETIC.name} has {len(lines)} lines for seed {seed}, {n} asked for")
    return lines[:n]
