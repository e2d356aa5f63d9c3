"""Goldens of Ultralytics' own segmentation and pose post-processing on shipped raw model outputs.

Two steps:

1. ``python benchmarks/ultralytics_seg_pose_goldens.py raw`` (amdinfer's environment): runs the offline builders
   ``yolov8_seg``/``yolov8_pose`` (seeded) on letterboxed seeded images through ONNX Runtime's CPU EP and writes their
   raw outputs to ``tests/data/seg_pose_raw.npz``.
2. ``python benchmarks/ultralytics_seg_pose_goldens.py goldens`` (an environment with ``ultralytics==8.4.190`` and
   torch, e.g. ``nox -s ultralytics_goldens`` or the H200 host): reads the raw outputs and runs Ultralytics'
   ``nms.non_max_suppression``, ``ops.process_mask(upsample=True)`` / ``process_mask_native``, ``ops.scale_boxes``,
   ``ops.scale_masks`` (as ``Results.plot`` maps masks to the image), ``Results.masks.xy`` and
   ``ops.scale_coords`` for keypoints, exactly as ``SegmentationPredictor``/``PosePredictor.construct_result`` do,
   and writes ``tests/data/seg_pose_goldens.npz`` (masks packed with ``np.packbits``).

``tests/results/test_seg_pose_parity.py`` compares amdinfer's stages with the goldens when the file is there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
RAW, GOLDENS = DATA / "seg_pose_raw.npz", DATA / "seg_pose_goldens.npz"
SIZE = 160
#: original image sizes (height, width): even padding, odd padding, a tall image
ORIGS = ((120, 200), (101, 173), (200, 90))
CONF, IOU, NC = 0.02, 0.7, 2


def make_raw() -> None:
    import onnxruntime as ort

    from amdinfer.preprocess import HwcToChw, Letterbox, Normalize
    from amdinfer.testing.models import yolov8_pose, yolov8_seg

    rng = np.random.default_rng(41)
    seg = ort.InferenceSession(
        yolov8_seg(3, num_classes=NC, image_size=SIZE).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    pose = ort.InferenceSession(yolov8_pose(5, image_size=SIZE).SerializeToString(), providers=["CPUExecutionProvider"])
    out: dict[str, np.ndarray] = {"origs": np.array(ORIGS), "size": np.array(SIZE), "conf": np.array(CONF)}
    out["iou"], out["nc"] = np.array(IOU), np.array(NC)
    for i, (h, w) in enumerate(ORIGS):
        image = np.zeros((h, w, 3), np.uint8)
        for _ in range(6):  # blobs of colour on noise: features that vary over the image
            y, x, r = rng.integers(0, h), rng.integers(0, w), rng.integers(8, 30)
            yy, xx = np.ogrid[:h, :w]
            image[(yy - y) ** 2 + (xx - x) ** 2 < r * r] = rng.integers(0, 255, 3)
        image = np.clip(image + rng.integers(0, 40, image.shape), 0, 255).astype(np.uint8)
        sample = HwcToChw()(Normalize(scale=1 / 255)(Letterbox(SIZE)(image)))
        x = sample.data[None].astype(np.float32)
        out[f"seg_output0_{i}"], out[f"seg_output1_{i}"] = seg.run(None, {"images": x})
        (out[f"pose_output0_{i}"],) = pose.run(None, {"images": x})
    np.savez_compressed(RAW, **out)
    print(f"wrote {RAW}")


def make_goldens() -> None:
    import torch
    from ultralytics.engine.results import Results
    from ultralytics.utils import nms, ops

    raw = dict(np.load(RAW))
    conf, iou, nc, size = float(raw["conf"]), float(raw["iou"]), int(raw["nc"]), int(raw["size"])
    out: dict[str, np.ndarray] = {}
    names = {i: f"class{i}" for i in range(nc)}
    for i, (h, w) in enumerate(raw["origs"].tolist()):
        orig = np.zeros((h, w, 3), np.uint8)
        pred = torch.from_numpy(raw[f"seg_output0_{i}"])
        proto = torch.from_numpy(raw[f"seg_output1_{i}"])[0]
        for retina in (False, True):
            (p,) = nms.non_max_suppression(pred.clone(), conf, iou, None, False, max_det=300, nc=nc)
            if retina:
                p[:, :4] = ops.scale_boxes((size, size), p[:, :4], orig.shape)
                masks = ops.process_mask_native(proto, p[:, 6:], p[:, :4], orig.shape[:2])
            else:
                masks = ops.process_mask(proto, p[:, 6:], p[:, :4], (size, size), upsample=True)
                p[:, :4] = ops.scale_boxes((size, size), p[:, :4], orig.shape)
            keep = masks.amax((-2, -1)) > 0
            p, masks = p[keep], masks[keep]
            r = Results(orig, path="", names=names, boxes=p[:, :6], masks=masks)
            full = ops.scale_masks(masks[None].float(), (h, w))[0] > 0.5  # what Results.plot lays over the image
            tag = f"seg{'_retina' if retina else ''}_{i}"
            out[f"{tag}_boxes"] = p[:, :4].numpy()
            out[f"{tag}_scores"] = p[:, 4].numpy()
            out[f"{tag}_classes"] = p[:, 5].numpy().astype(np.int64)
            out[f"{tag}_masks"] = np.packbits(full.numpy().astype(bool), axis=-1)
            polys = r.masks.xy
            out[f"{tag}_poly_lengths"] = np.array([len(q) for q in polys], np.int64)
            out[f"{tag}_polys"] = np.concatenate(polys).astype(np.float32) if polys else np.zeros((0, 2), np.float32)
        pred = torch.from_numpy(raw[f"pose_output0_{i}"])
        (p,) = nms.non_max_suppression(pred.clone(), conf, iou, None, False, max_det=300, nc=1)
        kpts = p[:, 6:].view(p.shape[0], 17, 3)
        kpts = ops.scale_coords((size, size), kpts, orig.shape)
        p[:, :4] = ops.scale_boxes((size, size), p[:, :4], orig.shape)
        r = Results(orig, path="", names={0: "person"}, boxes=p[:, :6], keypoints=kpts)
        out[f"pose_{i}_boxes"] = p[:, :4].numpy()
        out[f"pose_{i}_scores"] = p[:, 4].numpy()
        out[f"pose_{i}_keypoints"] = r.keypoints.data.numpy()
        out[f"pose_{i}_xyn"] = r.keypoints.xyn.numpy()
    import ultralytics

    out["ultralytics_version"] = np.array(ultralytics.__version__)
    out["torch_version"] = np.array(torch.__version__)
    np.savez_compressed(GOLDENS, **out)
    print(f"wrote {GOLDENS} (ultralytics {ultralytics.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else "goldens"
    {"raw": make_raw, "goldens": make_goldens}[step]()
