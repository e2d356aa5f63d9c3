"""``amdinfer val --task segment|pose|semantic`` and :mod:`amdinfer.metrics`' mask, keypoint and semantic metrics.

Truths: hand-computed values (perfect predictions give 1.0; a known half overlap of two squares gives the IoU
counted by hand, hence which thresholds match; a known confusion gives the mIoU by hand), a direct
``pycocotools`` ``COCOeval`` call on the same annotations, and end-to-end the builders' own predictions used as
labels (random weights: only properties, never their numbers).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.cli import main
from amdinfer.metrics import (
    DetectionSet,
    keypoint_map,
    keypoint_sigmas,
    load_detection_set,
    load_semantic_set,
    mask_map,
    polygon_rle,
    segmentation_iou,
)

pytest.importorskip("pycocotools")
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

SHAPES = Path(__file__).parent / "data" / "val_shapes"
CPU = ["--providers", "cpu", "-q"]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "amdinfer-cache"))
    monkeypatch.chdir(tmp_path)


def _picture(path: Path, h: int = 40, w: int = 60) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(path)


def _square(x0: int, y0: int, side: int, size: tuple[int, int]) -> dict:
    return polygon_rle([[x0, y0, x0 + side, y0, x0 + side, y0 + side, x0, y0 + side]], size)


# --------------------------------------------------------------------------------------------------- masks
def test_mask_map_hand_computed_overlaps() -> None:
    size = (20, 20)
    truth = DetectionSet(("a.png",), (np.array([[0, 0, 8, 8.0]]),), (np.array([0]),), ("a",), (size,), "x",
                         masks=((_square(0, 0, 8, size),),))  # fmt: skip
    box = np.array([[0, 0, 8, 8, 0.9, 0]])
    exact = np.zeros((1, *size), bool)
    exact[0, :8, :8] = True
    m = mask_map([(box, exact)], truth)
    assert (m.box.map50, m.box.map50_95, m.mask.map50, m.mask.map50_95) == pytest.approx((1, 1, 1, 1), abs=1e-12)
    # shifted 2 columns: 48 of 64 pixels shared, union 80: IoU 0.6 matches at thresholds 0.50, 0.55, 0.60 of 10
    shifted = np.zeros((1, *size), bool)
    shifted[0, :8, 2:10] = True
    m = mask_map([(box, shifted)], truth)
    assert m.mask.map50 == pytest.approx(1.0, abs=1e-12)
    assert m.mask.map50_95 == pytest.approx(3 / 10, abs=1e-12)
    assert m.box.map50_95 == pytest.approx(1.0, abs=1e-12)  # the boxes still coincide
    # half: 32 of 64 shared, union 96: IoU 1/3, below every threshold
    half = np.zeros((1, *size), bool)
    half[0, :8, 4:12] = True
    assert mask_map([(box, half)], truth).mask.map50 == pytest.approx(0.0, abs=1e-12)


def test_mask_map_equals_a_direct_pycocotools_call() -> None:
    rng = np.random.default_rng(0)
    size = (32, 48)
    gts, preds, truth_masks, boxes, classes = [], [], [], [], []
    for _ in range(3):
        rles, b, c, rows, dts = [], [], [], [], []
        for _ in range(3):
            x, y, s = int(rng.integers(0, 30)), int(rng.integers(0, 18)), int(rng.integers(6, 14))
            rles.append(_square(x, y, s, size))
            b.append([x, y, x + s, y + s])
            c.append(int(rng.integers(0, 2)))
            m = np.zeros(size, bool)
            dx, dy = rng.integers(-1, 2, 2)
            m[max(y + dy, 0) : y + dy + s, max(x + dx, 0) : x + dx + s] = True
            rows.append(
                [x + dx, y + dy, x + dx + s, y + dy + s, rng.uniform(), c[-1] if rng.uniform() < 0.9 else 1 - c[-1]]
            )
            dts.append(m)
        truth_masks.append(tuple(rles))
        boxes.append(np.array(b, np.float64))
        classes.append(np.array(c))
        preds.append((np.array(rows, np.float64), np.array(dts)))
    truth = DetectionSet(tuple(f"{i}.png" for i in range(3)), tuple(boxes), tuple(classes), ("a", "b"),
                         (size,) * 3, "x", masks=tuple(truth_masks))  # fmt: skip
    got = mask_map(preds, truth)
    images = [{"id": i + 1, "height": size[0], "width": size[1]} for i in range(3)]
    anns = [{"id": len(gts) + 1 + k, "image_id": i + 1, "category_id": int(c) + 1, "iscrowd": 0,
             "segmentation": dict(r), "area": float(mask_utils.area(r)),
             "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]}
            for i in range(3)
            for k, (r, b, c) in enumerate(zip(truth_masks[i], boxes[i], classes[i]), 3 * i)]  # fmt: skip
    results = []
    for i, (rows, ms) in enumerate(preds):
        for r, m in zip(rows, ms):
            rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
            results.append({"image_id": i + 1, "category_id": int(r[5]) + 1, "score": float(r[4]), "segmentation": rle})
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": anns, "categories": [{"id": 1}, {"id": 2}]}
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(results), "segm")
        ev.params.maxDets = [1, 10, 100]
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert 0.05 < got.mask.map50_95 < 0.95
    assert got.mask.map50_95 == pytest.approx(ev.stats[0], abs=1e-12)
    assert got.mask.map50 == pytest.approx(ev.stats[1], abs=1e-12)


def test_segment_labels_yolo_polygons_and_coco_json(tmp_path) -> None:
    _picture(tmp_path / "set" / "images" / "a.png", 40, 60)
    (tmp_path / "set" / "labels").mkdir()
    # a triangle (0, 0) (30, 0) (0, 20) in pixels, and a box line (a rectangle 12 x 8 at (36, 20))
    (tmp_path / "set" / "labels" / "a.txt").write_text("1 0 0 0.5 0 0 0.5\n0 0.7 0.6 0.2 0.2\n")
    (tmp_path / "set" / "data.yaml").write_text("val: images\nnames: [a, b]\n")
    seg = load_detection_set(tmp_path / "set", task="segment")
    det = load_detection_set(tmp_path / "set")
    np.testing.assert_allclose(seg.boxes[0], det.boxes[0])  # detect keeps the polygon's box
    np.testing.assert_allclose(seg.boxes[0], [[0, 0, 30, 20], [36, 20, 48, 28]], atol=1e-9)
    assert det.masks == () and seg.task == "segment"
    tri = polygon_rle([[0, 0, 30, 0, 0, 20]], (40, 60))
    assert mask_utils.decode(seg.masks[0][0]).tolist() == mask_utils.decode(tri).tolist()
    assert int(mask_utils.area(seg.masks[0][1])) == 12 * 8
    # COCO json: polygons, uncompressed and compressed RLE read to the same masks
    rect = np.zeros((40, 60), np.uint8, order="F")
    rect[20:28, 36:48] = 1
    compressed = mask_utils.encode(rect)
    doc = {"images": [{"id": 1, "file_name": "a.png", "height": 40, "width": 60}],
           "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}],
           "annotations": [
               {"id": 1, "image_id": 1, "category_id": 2, "bbox": [0, 0, 30, 20],
                "segmentation": [[0, 0, 30, 0, 0, 20]]},
               {"id": 2, "image_id": 1, "category_id": 1, "bbox": [36, 20, 12, 8],
                "segmentation": amdinfer.results.Masks(rect[None].astype(bool)).rle()[0]},
               {"id": 3, "image_id": 1, "category_id": 1, "bbox": [36, 20, 12, 8],
                "segmentation": {"size": [40, 60], "counts": compressed["counts"].decode()}}]}  # fmt: skip
    (tmp_path / "set" / "coco.json").write_text(json.dumps(doc))
    coco = load_detection_set(tmp_path / "set" / "coco.json", task="segment")
    decoded = [mask_utils.decode(r) for r in coco.masks[0]]
    assert decoded[0].tolist() == mask_utils.decode(tri).tolist()
    assert decoded[1].tolist() == decoded[2].tolist() == rect.tolist()


# --------------------------------------------------------------------------------------------------- pose
def _pose_truth(k: int = 3) -> DetectionSet:
    kp = np.array([[[10 + 5 * j, 10 + 3 * j, 2] for j in range(k)]], np.float64)
    return DetectionSet(("a.png",), (np.array([[5, 5, 25, 35.0]]),), (np.array([0]),), ("p",), ((40, 40),), "x",
                        keypoints=(kp,), areas=(np.array([20 * 30 * 0.53]),))  # fmt: skip


def test_keypoint_map_hand_computed() -> None:
    truth = _pose_truth(3)
    row = np.array([5, 5, 25, 35, 0.9, 0.0])
    perfect = np.concatenate([row, truth.keypoints[0][0].ravel()])[None]
    m = keypoint_map([perfect], truth)
    assert (m.box.map50_95, m.pose.map50_95) == pytest.approx((1, 1), abs=1e-12)
    # every keypoint moved by d px: OKS = exp(-d^2 / (2 * area * (2 sigma)^2)), sigma = 1/3 (Ultralytics' 1/K)
    area, var = 20 * 30 * 0.53, (2 / 3) ** 2
    d = np.sqrt(-np.log(0.72) * 2 * area * var)  # OKS 0.72: matched at 0.50 ... 0.70, five thresholds of ten
    moved = perfect.copy()
    moved[0, 6::3] += d
    m = keypoint_map([moved], truth)
    assert m.pose.map50 == pytest.approx(1.0, abs=1e-12) and m.pose.map50_95 == pytest.approx(0.5, abs=1e-12)
    assert keypoint_sigmas(3).tolist() == pytest.approx([1 / 3] * 3)
    assert keypoint_sigmas((17, 3)) == pytest.approx(COCOeval(iouType="keypoints").params.kpt_oks_sigmas)


def test_keypoint_map_equals_a_direct_pycocotools_call() -> None:
    rng = np.random.default_rng(1)
    k, n = 17, 4
    boxes = rng.uniform(0, 30, (n, 2))
    boxes = np.column_stack([boxes, boxes + rng.uniform(15, 30, (n, 2))])
    kps = np.concatenate([rng.uniform(boxes[:, None, :2], boxes[:, None, 2:], (n, k, 2)),
                          rng.choice([0, 1, 2], (n, k, 1), p=[0.2, 0.3, 0.5])], axis=2)  # fmt: skip
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) * 0.53
    truth = DetectionSet(("a.png",), (boxes,), (np.zeros(n, np.int64),), ("person",), ((64, 64),), "x",
                         keypoints=(kps,), areas=(areas,))  # fmt: skip
    pred_kp = kps[:, :, :2] + rng.normal(0, 0.6, (n, k, 2))
    rows = np.column_stack([boxes + rng.normal(0, 1, boxes.shape), rng.uniform(size=n), np.zeros(n)])
    got = keypoint_map([np.concatenate([rows, pred_kp.reshape(n, -1)], axis=1)], truth)
    anns = [{"id": i + 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "area": float(areas[i]),
             "bbox": [*boxes[i, :2], *(boxes[i, 2:] - boxes[i, :2])], "keypoints": kps[i].ravel().tolist(),
             "num_keypoints": int((kps[i, :, 2] > 0).sum())} for i in range(n)]  # fmt: skip
    results = [{"image_id": 1, "category_id": 1, "score": float(rows[i, 4]),
                "keypoints": np.column_stack([pred_kp[i], np.ones(k)]).ravel().tolist()} for i in range(n)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": [{"id": 1, "height": 64, "width": 64}], "annotations": anns,
                      "categories": [{"id": 1, "name": "person"}]}  # fmt: skip
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(results), "keypoints")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert 0.05 < got.pose.map50_95 < 0.95
    assert got.pose.map50_95 == pytest.approx(ev.stats[0], abs=1e-12)
    assert got.pose.map50 == pytest.approx(ev.stats[1], abs=1e-12)


def test_pose_labels_yolo_and_coco_json(tmp_path) -> None:
    _picture(tmp_path / "set" / "images" / "a.png", 40, 60)
    (tmp_path / "set" / "labels").mkdir()
    (tmp_path / "set" / "labels" / "a.txt").write_text("0 0.5 0.5 0.5 0.5 0.25 0.5 2 0.5 0.25 0\n")
    (tmp_path / "set" / "data.yaml").write_text("val: images\nkpt_shape: [2, 3]\nnames: [p]\n")
    s = load_detection_set(tmp_path / "set", task="pose")
    np.testing.assert_allclose(s.keypoints[0], [[[15, 20, 2], [30, 10, 0]]])
    np.testing.assert_allclose(s.areas[0], [30 * 20 * 0.53])
    (tmp_path / "set" / "data.yaml").write_text("val: images\nnames: [p]\n")
    with pytest.raises(amdinfer.InputError, match="kpt_shape"):
        load_detection_set(tmp_path / "set", task="pose")
    (tmp_path / "set" / "labels" / "a.txt").write_text("0 0.5 0.5 0.5 0.5 0.25 0.5 -1 -1\n")  # D = 2
    s = load_detection_set(tmp_path / "set", task="pose", kpt_shape=(2, 2))
    np.testing.assert_allclose(s.keypoints[0][0, :, 2], [2, 0])  # a negative coordinate: not labelled
    doc = {"images": [{"id": 1, "file_name": "a.png", "height": 40, "width": 60}],
           "categories": [{"id": 1, "name": "p", "keypoints": ["a", "b"]}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [15, 10, 30, 20], "area": 400,
                            "keypoints": [15, 20, 2, 30, 10, 1], "num_keypoints": 2}]}  # fmt: skip
    (tmp_path / "coco.json").write_text(json.dumps(doc))
    c = load_detection_set(tmp_path / "coco.json", task="pose", images=tmp_path / "set" / "images")
    np.testing.assert_allclose(c.keypoints[0], [[[15, 20, 2], [30, 10, 1]]])
    assert c.areas[0].tolist() == [400]


# --------------------------------------------------------------------------------------------------- semantic
def test_segmentation_iou_hand_computed_confusion() -> None:
    truth = [np.array([[0, 0, 1, 1], [2, 2, 255, 255]]), np.array([[2, 2, 2, 2]])]
    pred = [np.array([[0, 1, 1, 1], [2, 0, 2, 1]]), np.array([[2, 2, 1, 2]])]
    m = segmentation_iou(pred, truth, num_classes=4, names=["a", "b", "c", "d"])
    # rows = label: a -> (a, b); b -> (b, b); c -> (c, a, c, c, b, c)
    assert m.confusion[:3, :3].tolist() == [[1, 1, 0], [0, 2, 0], [1, 1, 4]]
    iou = [1 / (2 + 2 - 1), 2 / (2 + 4 - 2), 4 / (6 + 4 - 4)]
    assert m.iou[:3] == pytest.approx(iou) and m.iou[3] is None  # d: neither labelled nor predicted
    assert m.miou == pytest.approx(np.mean(iou))
    assert m.pixel_accuracy == pytest.approx(7 / 10) and m.pixels == 10
    assert m.accuracy[:3] == pytest.approx([1 / 2, 1, 4 / 6])
    perfect = segmentation_iou([t.copy() for t in truth], truth, num_classes=3)
    assert perfect.miou == 1.0 and perfect.pixel_accuracy == 1.0
    with pytest.raises(amdinfer.InputError, match=r"labels\[0\]: labels: got class 255"):
        segmentation_iou(pred, truth, num_classes=3, ignore_index=None)
    with pytest.raises(amdinfer.InputError, match="expected the labels' shape"):
        segmentation_iou([np.zeros((2, 2), int)], truth[:1], num_classes=3)


def test_semantic_set_reads_palette_pngs(tmp_path) -> None:
    from PIL import Image

    _picture(tmp_path / "s" / "images" / "a.jpg", 4, 6)
    (tmp_path / "s" / "labels").mkdir()
    label = np.zeros((4, 6), np.uint8)
    label[:, 3:] = 1
    label[0, 0] = 255
    im = Image.fromarray(label, "P")
    im.putpalette([0, 0, 0, 128, 0, 0] + [0] * 762)
    im.save(tmp_path / "s" / "labels" / "a.png")
    s = load_semantic_set(tmp_path / "s")
    assert [Path(p).name for p in s.labels] == ["a.png"]
    m = segmentation_iou([np.zeros((4, 6), int)], s, num_classes=2)
    assert m.pixels == 23 and m.iou == pytest.approx([11 / 23, 0.0])
    Image.fromarray(np.zeros((4, 6, 3), np.uint8)).save(tmp_path / "s" / "labels" / "a.png")
    with pytest.raises(amdinfer.InputError, match="RGB picture"):
        segmentation_iou([np.zeros((4, 6), int)], s, num_classes=2)


# --------------------------------------------------------------------------------------------------- val
def _run_json(capsys, argv: list[str]) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json", *CPU]) == 0
    return json.loads(capsys.readouterr().out)


def test_val_segment_on_its_own_masks_is_one(tmp_path, capsys) -> None:
    from amdinfer.testing.models import yolov8_seg

    onnx.save(yolov8_seg(image_size=64, num_classes=3), tmp_path / "seg.onnx")
    images = sorted(str(p) for p in (SHAPES / "images").glob("*.png"))
    with amdinfer.yolo(tmp_path / "seg.onnx", conf=0.001, iou=0.7, max_det=300, providers=["cpu"]) as pipe:
        dets = pipe(images)
    doc = {"images": [], "annotations": [], "categories": [{"id": i + 1, "name": n} for i, n in enumerate("abc")]}
    for i, d in enumerate(dets):
        h, w = d.image_shape
        doc["images"].append({"id": i + 1, "file_name": Path(images[i]).name, "height": h, "width": w})
        for b, c, rle in zip(d.boxes.tolist(), d.classes.tolist(), d.masks.rle()):
            ann = {"id": len(doc["annotations"]) + 1, "image_id": i + 1, "category_id": c + 1, "segmentation": rle}
            doc["annotations"].append({**ann, "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]})
    assert sum(len(d) for d in dets) > 0
    (tmp_path / "own.json").write_text(json.dumps(doc))
    argv = ["val", "seg.onnx", "own.json", "--images", str(SHAPES / "images")]
    payload = _run_json(capsys, argv)  # --task auto: the model's metadata says segment
    assert payload["task"] == "segment"
    assert payload["mask"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)
    assert payload["box"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)
    assert payload["mAP50-95"] == payload["mask"]["mAP50-95"]
    assert main([*argv, *CPU]) == 0
    out = capsys.readouterr().out
    assert "Mask(mAP50" in out and "Box(mAP50" in out


def test_val_pose_on_its_own_keypoints_is_one(tmp_path, capsys) -> None:
    from amdinfer.testing.models import yolov8_pose

    onnx.save(yolov8_pose(image_size=64), tmp_path / "pose.onnx")
    (tmp_path / "set" / "labels").mkdir(parents=True)
    (tmp_path / "set" / "data.yaml").write_text("val: images\nnames: [person]\n")  # kpt_shape from the model
    import shutil

    shutil.copytree(SHAPES / "images", tmp_path / "set" / "images")
    images = sorted(str(p) for p in (tmp_path / "set" / "images").glob("*.png"))
    with amdinfer.yolo(tmp_path / "pose.onnx", conf=0.001, iou=0.7, max_det=300, providers=["cpu"]) as pipe:
        dets = pipe(images)
    for path, d in zip(images, dets):
        (h, w), lines = d.image_shape, []
        for b, c, kp in zip(d.boxes.astype(np.float64), d.classes, d.keypoints.data.astype(np.float64)):
            box = [(b[0] + b[2]) / 2 / w, (b[1] + b[3]) / 2 / h, (b[2] - b[0]) / w, (b[3] - b[1]) / h]
            pts = np.column_stack([kp[:, 0] / w, kp[:, 1] / h, np.full(len(kp), 2)]).ravel()
            lines.append(" ".join([str(int(c)), *(f"{v:.12f}" for v in [*box, *pts])]))
        (tmp_path / "set" / "labels" / (Path(path).stem + ".txt")).write_text("\n".join(lines) + "\n")
    assert sum(len(d) for d in dets) > 0
    payload = _run_json(capsys, ["val", "pose.onnx", "set"])
    assert payload["task"] == "pose"
    assert payload["pose"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)
    assert payload["box"]["mAP50-95"] == pytest.approx(1.0, abs=1e-9)


def test_val_semantic_on_its_own_maps_is_one(tmp_path, capsys) -> None:
    import shutil

    from PIL import Image

    from amdinfer.testing.models import unet

    onnx.save(unet(), tmp_path / "unet.onnx")
    shutil.copytree(SHAPES / "images", tmp_path / "sem" / "images")
    (tmp_path / "sem" / "labels").mkdir()
    images = sorted((tmp_path / "sem" / "images").glob("*.png"))
    with amdinfer.segment(tmp_path / "unet.onnx", providers=["cpu"]) as seg:
        maps = [seg(str(p)) for p in images]
    for p, m in zip(images, maps):
        Image.fromarray(m.classes.astype(np.uint8)).save(tmp_path / "sem" / "labels" / p.name)
    payload = _run_json(capsys, ["val", "unet.onnx", "sem"])  # auto: the model's semantic-segmentation metadata
    assert payload["task"] == "semantic"
    assert payload["mIoU"] == 1.0 and payload["pixel_accuracy"] == 1.0
    assert payload["pixels"] == sum(m.classes.size for m in maps)
    # one label flipped to another class on a whole image: that image's pixels are wrong, the rest right
    first = np.asarray(Image.open(tmp_path / "sem" / "labels" / images[0].name)).astype(np.int64)
    Image.fromarray(((first + 1) % 5).astype(np.uint8)).save(tmp_path / "sem" / "labels" / images[0].name)
    payload = _run_json(capsys, ["val", "unet.onnx", "sem", "--task", "semantic"])
    assert payload["pixel_accuracy"] == pytest.approx(1 - first.size / payload["pixels"])
    truth = [np.asarray(Image.open(tmp_path / "sem" / "labels" / p.name)) for p in images]
    expected = segmentation_iou([m.classes for m in maps], truth, num_classes=5)
    assert payload["mIoU"] == pytest.approx(expected.miou, abs=1e-12)


def test_val_refuses_a_classifier_and_names_labels(tmp_path, capsys) -> None:
    from amdinfer.testing.models import yolov8_pose

    onnx.save(yolov8_pose(image_size=64), tmp_path / "pose.onnx")
    assert main(["val", "pose.onnx", str(SHAPES), *CPU]) == 1  # box labels where pose labels are expected
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "img0.txt" in err and "17 keypoints" in err and "Traceback" not in err
