"""Where the time of a segmentation/pose image goes: the engine vs the host post-processing (masks, keypoints).

Runs ``amdinfer.yolo`` on the offline ``yolov8_seg`` / ``yolov8_pose`` builders (640 input, 1080x1920 images) and
times, per image, the engine call and each post-processing stage (``Pipeline`` speed), on the device given. It is
the measurement behind docs/pipeline.md's "fused onto the device where it pays": when the host stages take a small
share of the engine's time, fusing masks into the graph would not pay.

For the segmenter it then splits the host work by part on the engine's own outputs, the same instances twice:
``before``, the whole-plane NumPy kernels (``amdinfer.tasks._mask_ops``: masks at the input size, their resize to the
image, polygons found at post-processing, RLE of the whole planes: what ``SegmentMasks`` did up to 2026-12-03) and
``after``, what ``SegmentMasks`` does now (each mask inside its box's window, polygons and the image-size planes made
when first read). Each part in host ms per image and as a ratio to the engine's ms, for all the instances and for the
first ``--instances`` of them (Ultralytics' ``max_det`` order: by score), in Ultralytics' default
(``retina_masks=False``) and ``retina_masks=True``. The ``before`` and ``after`` masks are compared (equal or the
script fails).

    python benchmarks/seg_pose_host_cost.py                       # CPU EP
    python benchmarks/seg_pose_host_cost.py --provider CUDAExecutionProvider   # the H200
    python benchmarks/seg_pose_host_cost.py --quick               # 320 input, 3 images (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import amdinfer
from amdinfer.postprocess import ScaleBoxes
from amdinfer.results import Masks
from amdinfer.results._masks import mask_polygons
from amdinfer.tasks import SegmentMasks
from amdinfer.tasks import _mask_ops as ops
from amdinfer.testing.models import yolov8_pose, yolov8_seg


def _image(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    image = rng.integers(0, 60, (h, w, 3)).astype(np.uint8)
    yy, xx = np.ogrid[:h, :w]
    for _ in range(12):
        y, x, r = rng.integers(0, h), rng.integers(0, w), rng.integers(h // 16, h // 5)
        image[(yy - y) ** 2 + (xx - x) ** 2 < r * r] = rng.integers(60, 255, 3)
    return image


def _whole_plane_rle(mask: np.ndarray) -> dict[str, Any]:
    """``rle_encode`` as it was: the whole plane in column-major order."""
    flat = mask.ravel(order="F")
    bounds = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1, [flat.size]])
    counts = np.diff(bounds).tolist()
    return {"size": list(mask.shape), "counts": [0, *counts] if flat.size and flat[0] else counts}


class _Clock:
    """Adds each part's milliseconds into ``parts``."""

    def __init__(self, parts: dict[str, float]) -> None:
        self.parts = parts

    def __call__(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.parts[name] = self.parts.get(name, 0.0) + (time.perf_counter() - start) * 1e3
        return out


def _before(clock: _Clock, det: Any, meta: dict[str, Any], retina: bool) -> np.ndarray:
    """``SegmentMasks`` as it was (whole planes, polygons now), part by part; the image-size masks."""
    protos, orig, inp = meta["yolo_protos"], tuple(meta["orig_shape"]), tuple(meta["input_shape"])
    clock("matmul", ops.mask_logits, protos, det.coefficients)  # also inside the next part: subtracted below
    if retina:
        boxes = clock("boxes", lambda: ScaleBoxes().process(det, meta).boxes)
        native = clock("upsample_crop", ops.masks_native, protos, det.coefficients, boxes, orig)
        keep = clock("drop_empty", lambda: native.any(axis=(1, 2)))
        full = clock("drop_empty", lambda: native[keep].astype(bool))
        polys = clock("polygons", _polygons_of, full, None, orig)
    else:
        at_input = clock("upsample_crop", ops.masks_at_input, protos, det.coefficients, det.boxes, inp)
        keep = clock("drop_empty", lambda: at_input.any(axis=(1, 2)))
        at_input = clock("drop_empty", lambda: at_input[keep])
        clock("boxes", lambda: ScaleBoxes().process(det.select(keep), meta))
        full = clock("unletterbox", ops.unletterbox_binary, at_input, orig)
        polys = clock("polygons", _polygons_of, at_input, ops.content_box(inp, orig), orig)
    clock("masks_object", Masks, full, polys)
    clock("rle", lambda: [_whole_plane_rle(m) for m in full])
    return full


def _polygons_of(masks: np.ndarray, box: Any, orig: tuple[int, int]) -> list[np.ndarray]:
    """The polygons as ``SegmentMasks`` found them before: contours of the whole planes, mapped to the image."""
    h0, w0 = orig
    out = []
    for p in mask_polygons(masks):
        if box is not None:
            top, left, bottom, right = box
            p = (p - np.array([left, top], np.float32)) / np.array([(right - left) / w0, (bottom - top) / h0])
        out.append(np.clip(p, 0, np.array([w0, h0])).astype(np.float32))
    return out


def _after(clock: _Clock, det: Any, meta: dict[str, Any], retina: bool) -> np.ndarray:
    """``SegmentMasks`` now, whole, then the first reads of what it defers; the image-size masks."""
    protos = meta["yolo_protos"]
    clock("matmul", ops.mask_logits, protos, det.coefficients)
    out = clock("segment_masks", SegmentMasks(retina_masks=retina).process, det, dict(meta))
    clock("polygons (first .xy)", lambda: out.masks.xy)
    clock("rle", out.masks.rle)
    return clock("planes (first .data)", lambda: out.masks.data)


def _parts(pipe: Any, samples: list[tuple[Any, dict[str, Any]]], retina: bool, limit: int | None) -> dict[str, Any]:
    """Host ms per image of each part, before and after, on the raw outputs ``samples`` of the pipeline."""
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    count = 0
    decode, nms = pipe.postprocess[0], pipe.postprocess[1]
    for data, meta in list(samples):  # a copy: the recorder appends what decode.process sees below
        meta = dict(meta)
        start = time.perf_counter()
        det = nms.process(decode.process(data, meta), meta)
        ms = (time.perf_counter() - start) * 1e3
        if limit is not None:
            det = det.select(np.argsort(-det.scores, kind="stable")[:limit])
        old = _before(_Clock(before), det, dict(meta), retina)  # ScaleBoxes rewrites the geometry in meta
        new = _after(_Clock(after), det, meta, retina)
        if not np.array_equal(old, new):
            raise SystemExit(f"the masks differ before and after (retina_masks={retina}): a bug, not a benchmark")
        for parts in (before, after):
            parts["decode_nms"] = parts.get("decode_nms", 0.0) + ms
        count += len(new)
    n = len(samples)
    before["upsample_crop"] -= before.get("matmul", 0.0)  # the matmul runs inside both mask kernels
    for parts in (before, after):
        for k in parts:
            parts[k] /= n
    before["postprocess"] = sum(v for k, v in before.items() if k != "rle")
    after["postprocess"] = after["decode_nms"] + after["segment_masks"]
    after["with_first_reads"] = after["postprocess"] + after["polygons (first .xy)"] + after["planes (first .data)"]
    return {"instances_per_image": count / n, "before": before, "after": after}


def _capture(pipe: Any) -> list[tuple[Any, dict[str, Any]]]:
    """Records what the pipeline's first post-processing stage (SegmentDecode) receives: the raw outputs."""
    stage = pipe.postprocess[0]
    seen: list[tuple[Any, dict[str, Any]]] = []
    process = stage.process

    def keep(data: Any, meta: dict[str, Any]) -> Any:
        seen.append((data, dict(meta)))
        return process(data, meta)

    stage.process = keep
    return seen


def _table(split: dict[str, Any], inference_ms: float) -> str:
    lines = []
    for key, entry in split.items():
        lines.append(f"{key}: {entry['instances_per_image']:.0f} instances/image, inference {inference_ms:.2f} ms")
        names = list(dict.fromkeys([*entry["before"], *entry["after"]]))
        lines.append(f"  {'part':28s} {'before ms':>10s} {'x inf':>7s} {'after ms':>10s} {'x inf':>7s}")
        for name in names:
            cells = []
            for side in ("before", "after"):
                v = entry[side].get(name)
                cells.append(f"{'-':>10s} {'':>7s}" if v is None else f"{v:10.2f} {v / inference_ms:7.2f}")
            lines.append(f"  {name:28s} {cells[0]} {cells[1]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="CPUExecutionProvider")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--conf", type=float, default=0.15, help="lower: more instances per image")
    parser.add_argument("--images", type=int, default=None, help="images per task (default 20; --quick 3)")
    parser.add_argument("--instances", type=int, default=100, help="the split also for the first N instances")
    args = parser.parse_args()
    size, n, shape = (320, 3, (540, 960)) if args.quick else (640, 20, (1080, 1920))
    n = args.images or n
    rng = np.random.default_rng(0)
    images = [_image(rng, *shape) for _ in range(n)]
    rows, split = [], {}
    for task, model in (("segment", yolov8_seg(image_size=size)), ("pose", yolov8_pose(image_size=size))):
        with amdinfer.yolo(model, conf=args.conf, providers=[args.provider], keep_image=False) as pipe:
            pipe(images[0])  # warm-up
            samples = _capture(pipe) if task == "segment" else []
            stages: dict[str, float] = {}
            count = 0
            start = time.perf_counter()
            for image in images:
                result = pipe(image)
                count += len(result)
                for name, ms in (result.speed or {}).items():
                    stages[name] = stages.get(name, 0.0) + ms / len(images)
            wall = (time.perf_counter() - start) / len(images) * 1e3
        rows.append({"task": task, "instances_per_image": count / len(images), "wall_ms": round(wall, 2)})
        rows[-1].update({k: round(v, 2) for k, v in stages.items()})
        if task == "segment":
            for retina in (False, True):
                for limit in (None, args.instances):
                    key = f"retina_masks={retina}, {'all' if limit is None else f'first {limit}'}"
                    split[key] = _parts(pipe, samples, retina, limit)
            inference_ms = stages.get("inference", float("nan"))
    versions = {"amdinfer": amdinfer.__version__, "numpy": np.__version__, "python": platform.python_version()}
    try:
        import onnxruntime

        versions["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    rounded = {
        key: {
            side: {p: round(ms, 2) for p, ms in entry[side].items()} if side != "instances_per_image" else entry[side]
            for side in entry
        }
        for key, entry in split.items()
    }
    out = {
        "provider": args.provider,
        "input": size,
        "image": shape,
        "rows": rows,
        "segment_parts": rounded,
        "machine": platform.processor() or platform.machine(),
        "versions": versions,
    }
    print(json.dumps(out, indent=1))
    print(_table(split, inference_ms))


if __name__ == "__main__":
    main()
