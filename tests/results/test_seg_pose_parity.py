"""Segmentation and pose answers against Ultralytics 8.4.190's own post-processing on the same raw outputs.

``tests/data/seg_pose_raw.npz`` holds raw outputs of the offline builders ``yolov8_seg``/``yolov8_pose`` (seeded,
letterboxed seeded images of three sizes: even and odd padding, a tall image); ``tests/data/seg_pose_goldens.npz``
what Ultralytics' ``non_max_suppression``, ``process_mask``/``process_mask_native``, ``scale_boxes``,
``scale_masks``, ``Results.masks.xy`` and ``scale_coords`` made of them (``benchmarks/ultralytics_seg_pose_goldens.py``,
run with torch). The test is skipped, saying so, when the goldens file is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amdinfer.postprocess import Nms
from amdinfer.preprocess import Letterbox
from amdinfer.stages import Sample
from amdinfer.tasks import PoseDecode, ScaleKeypoints, SegmentDecode, SegmentMasks

DATA = Path(__file__).resolve().parents[1] / "data"
RAW = np.load(DATA / "seg_pose_raw.npz")
GOLDENS_PATH = DATA / "seg_pose_goldens.npz"
CASES = range(len(RAW["origs"]))

pytestmark = pytest.mark.skipif(
    not GOLDENS_PATH.exists(),
    reason="tests/data/seg_pose_goldens.npz is absent: run benchmarks/ultralytics_seg_pose_goldens.py goldens where "
    "torch and ultralytics==8.4.190 are installed (the H200 host, or `nox -s ultralytics_goldens`)",
)


@pytest.fixture(scope="module")
def goldens() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDENS_PATH))


def _meta(i: int) -> dict:
    h, w = RAW["origs"][i].tolist()
    return Letterbox(int(RAW["size"]))(np.zeros((h, w, 3), np.uint8)).meta


def _nms() -> Nms:
    return Nms(iou_threshold=float(RAW["iou"]), max_det=300, class_offset=7680)


def _segment(i: int, retina: bool):
    sample = Sample({"output0": RAW[f"seg_output0_{i}"], "output1": RAW[f"seg_output1_{i}"]}, _meta(i))
    for stage in (SegmentDecode(float(RAW["conf"])), _nms(), SegmentMasks(retina_masks=retina)):
        sample = stage(sample)
    return sample.data


@pytest.mark.parametrize("retina", [False, True])
@pytest.mark.parametrize("i", CASES)
def test_masks_boxes_and_polygons_equal_ultralytics(goldens: dict, i: int, retina: bool) -> None:
    det = _segment(i, retina)
    tag = f"seg{'_retina' if retina else ''}_{i}"
    assert len(det) == len(goldens[f"{tag}_boxes"]) > 3  # enough instances to mean something
    np.testing.assert_allclose(det.boxes, goldens[f"{tag}_boxes"], atol=1e-3)
    np.testing.assert_allclose(det.scores, goldens[f"{tag}_scores"], atol=1e-6)
    assert det.classes.tolist() == goldens[f"{tag}_classes"].tolist()
    w = int(RAW["origs"][i][1])
    want = np.unpackbits(goldens[f"{tag}_masks"], axis=-1, count=w).astype(bool)
    assert det.masks.data.shape == want.shape
    inter = (det.masks.data & want).sum(axis=(1, 2))
    union = (det.masks.data | want).sum(axis=(1, 2))
    iou = np.where(union > 0, inter / np.maximum(union, 1), 1.0)  # both empty (a sliver lost in the resize): equal
    assert iou.min() >= 0.99, (iou.min(), int(np.argmin(iou)))
    lengths = goldens[f"{tag}_poly_lengths"].tolist()
    assert [len(p) for p in det.masks.xy] == lengths
    ours = np.concatenate(det.masks.xy) if lengths else np.zeros((0, 2))
    np.testing.assert_allclose(ours, goldens[f"{tag}_polys"], atol=1e-3)


@pytest.mark.parametrize("i", CASES)
def test_keypoints_equal_ultralytics(goldens: dict, i: int) -> None:
    sample = Sample(RAW[f"pose_output0_{i}"], _meta(i))
    for stage in (PoseDecode((17, 3), float(RAW["conf"])), _nms(), ScaleKeypoints()):
        sample = stage(sample)
    det = sample.data
    assert len(det) == len(goldens[f"pose_{i}_boxes"]) > 3
    np.testing.assert_allclose(det.boxes, goldens[f"pose_{i}_boxes"], atol=1e-3)
    np.testing.assert_allclose(det.keypoints.data, goldens[f"pose_{i}_keypoints"], atol=1e-3)
    np.testing.assert_allclose(det.keypoints.xyn, goldens[f"pose_{i}_xyn"], atol=1e-5)
