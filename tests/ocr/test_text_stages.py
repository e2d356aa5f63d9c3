"""The text stages, the fan-out/gather model and TextLines, against hand-computed values and independent code."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.errors import InputError, ModelError, OptionError, StageInputError
from amdinfer.pipeline import SubPipeline
from amdinfer.postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode
from amdinfer.preprocess import HwcToChw, Letterbox, LoadImage, Normalize, PadWidth, Resize
from amdinfer.results import TextLines
from amdinfer.stages import BoxCrop, FanOut, Gather, Pieces, Relabel, Sample
from amdinfer.testing.models import tiny_cnn, yolov8
from amdinfer.text import (
    AttachText,
    ClsRotate,
    CtcDecode,
    DbPostprocess,
    DetResize,
    QuadCrop,
    TextResize,
    charset_from_model,
    ctc_greedy,
    db_boxes,
    fuse_ctc,
    quad_crop,
    reading_order,
)
from amdinfer.text._clipper import offset_round

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}


# ---------------------------------------------------------------- polygon offset (Clipper, round joins)
def test_offset_of_a_rectangle_grows_each_side_by_delta():
    rect = np.array([[10, 10], [50, 10], [50, 30], [10, 30]], np.float32)
    out = offset_round(rect, 4.0)
    assert out.min(axis=0).tolist() == [6, 6] and out.max(axis=0).tolist() == [54, 34]
    # every point lies about delta from the rectangle (rounded to whole pixels)
    dx = np.maximum(np.maximum(10 - out[:, 0], out[:, 0] - 50), 0)
    dy = np.maximum(np.maximum(10 - out[:, 1], out[:, 1] - 30), 0)
    assert np.all(np.abs(np.hypot(dx, dy) - 4.0) <= 0.75)


def test_offset_matches_pyclipper_when_installed():
    pyclipper = pytest.importorskip("pyclipper")
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    for _ in range(500):
        c, w, h, a = rng.uniform(0, 800, 2), rng.uniform(3, 300), rng.uniform(3, 60), rng.uniform(-90, 90)
        box = cv2.boxPoints(((c[0], c[1]), (w, h), a)).astype(np.float32)
        d = float(rng.uniform(1.2, 40))
        off = pyclipper.PyclipperOffset()
        off.AddPath(box, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
        assert np.array(off.Execute(d)).reshape(-1, 2).tolist() == offset_round(box, d).tolist()


# ---------------------------------------------------------------- DB post-processing, order, crop
def test_db_boxes_finds_a_rectangle_and_scales_it():
    prob = np.zeros((64, 64), np.float32)
    prob[20:30, 10:50] = 0.9
    quads, scores = db_boxes(prob, (128, 256))
    # the 2x2 dilation grows the mask one pixel right and down: the rectangle spans 41 x 11 pixels, 40 x 10 of 0.9
    assert quads.shape == (1, 4, 2) and scores[0] == pytest.approx(0.9 * 400 / 451, abs=1e-6)
    (x1, y1), (x2, y2) = quads[0].min(0), quads[0].max(0)
    # the region (10..49 x 20..29) grows by area*1.6/perimeter = 40*10*1.6/100 = 6.4 px, then scales 4x, 2x
    assert x1 < 10 * 4 < 50 * 4 < x2 and y1 < 20 * 2 < 30 * 2 < y2
    assert abs(x1 - (10 - 6.4) * 4) <= 8 and abs(y2 - (30 + 6.4) * 2) <= 4


def test_db_boxes_drops_weak_and_tiny_regions():
    prob = np.zeros((64, 64), np.float32)
    prob[5:15, 5:40] = 0.4  # above thresh, mean below box_thresh 0.5
    prob[40:42, 40:42] = 0.9  # too small
    assert db_boxes(prob, (64, 64))[0].shape == (0, 4, 2)


def test_dbpostprocess_refuses_a_wrong_map():
    with pytest.raises(InputError, match=r"probability map: got shape \(2, 4, 4\)"):
        DbPostprocess()(Sample(np.zeros((2, 4, 4), np.float32), {}))


def test_reading_order_rows_then_columns():
    tops = [(300, 50), (10, 52), (10, 100), (200, 5)]
    quads = np.array([[[x, y]] * 4 for x, y in tops], np.float32)
    assert reading_order(quads).tolist() == [3, 1, 0, 2]


def test_det_resize_is_pp_ocr_arithmetic():
    assert DetResize(736).target(400, 640) == (736, 1184)  # 640*1.84 = 1177.6 -> 1177 -> 37*32
    assert DetResize(736).target(800, 1000) == (800, 992)  # no scaling, rounding only
    assert DetResize(960, "max").target(500, 2000) == (256, 960)


def test_quad_crop_of_an_axis_aligned_box_is_the_slice():
    img = np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8)
    quad = np.array([[5, 4], [25, 4], [25, 12], [5, 12]], np.float32)
    np.testing.assert_array_equal(quad_crop(img, quad), img[4:12, 5:25])


def test_quad_crop_turns_tall_crops():
    img = np.zeros((40, 20, 3), np.uint8)
    assert quad_crop(img, np.array([[2, 2], [10, 2], [10, 32], [2, 32]], np.float32)).shape == (8, 30, 3)


# ---------------------------------------------------------------- text lines in, text out
def test_text_resize_rounds_the_width_up():
    assert TextResize(48, 320)(np.zeros((20, 46, 3), np.uint8)).data.shape == (48, math.ceil(48 * 46 / 20), 3)
    s = TextResize(48, 192)(np.zeros((10, 100, 3), np.uint8))  # 480 wide -> squeezed to 192
    assert s.data.shape == (48, 192, 3) and s.meta["pad_width"] == 192


def test_text_resize_grows_to_the_batch_aspect():
    s = TextResize(48, 320, grow=True)(Sample(np.zeros((20, 40, 3), np.uint8), {"batch_aspect": 10.0}))
    assert s.data.shape == (48, 96, 3) and s.meta["pad_width"] == 480


def test_pad_width_pads_after_normalising_and_names_the_missing_key():
    x = np.ones((3, 2, 4), np.float32) * -1
    out = PadWidth()(Sample(x, {"pad_width": 6})).data
    assert out.shape == (3, 2, 6) and out[..., 4:].tolist() == np.zeros((3, 2, 2)).tolist() and out[..., :4].min() == -1
    with pytest.raises(InputError, match="no 'pad_width'"):
        PadWidth()(x)
    with pytest.raises(InputError, match="8 wide"):
        PadWidth(4)(np.zeros((1, 1, 8), np.float32))


def test_ctc_greedy_by_hand():
    # steps: a a blank a b b blank -> "aab"; kept probabilities 0.9, 0.8, 0.7 -> mean 0.8
    steps = [(1, 0.9), (1, 0.95), (0, 0.99), (1, 0.8), (2, 0.7), (2, 0.6), (0, 0.9)]
    p = np.zeros((len(steps), 3), np.float32)
    for t, (k, v) in enumerate(steps):
        p[t, k] = v
    assert ctc_greedy(p, ["a", "b"]) == ("aab", pytest.approx(0.8, abs=1e-5))
    with pytest.raises(InputError, match="3 classes, the character set 1"):
        ctc_greedy(p, ["a"])


def test_charset_from_metadata_or_file(tmp_path):
    m = onnx.ModelProto()
    with pytest.raises(ModelError, match="no 'character'"):
        charset_from_model(m)
    m.metadata_props.add(key="character", value="x\ny")
    assert charset_from_model(m) == ["x", "y", " "]
    (tmp_path / "d.txt").write_text("x\ny\n", encoding="utf-8")
    assert CtcDecode(str(tmp_path / "d.txt")).charset == ["x", "y", " "]
    with pytest.raises(OptionError, match="is not a file"):
        CtcDecode(str(tmp_path / "missing.txt"))


def test_cls_rotate_turns_only_confident_180():
    crops = [np.arange(6, dtype=np.uint8).reshape(1, 2, 3)] * 3
    meta: dict = {}
    lines = TextLines(np.zeros((3, 4, 2)), None, [1, 1, 1])
    ClsRotate(0.9).gather(
        lines, [np.array([0.1, 0.95]), np.array([0.2, 0.8]), np.array([0.9, 0.1])], [Sample(c) for c in crops], meta
    )
    got = meta["ocr_crops"]
    np.testing.assert_array_equal(got[0], crops[0][::-1, ::-1])
    np.testing.assert_array_equal(got[1], crops[1])
    np.testing.assert_array_equal(got[2], crops[2])


def test_attach_text_filters_blank_and_low_scores():
    lines = TextLines(np.arange(24).reshape(3, 4, 2), None, [1, 1, 1])
    out = AttachText(0.5).gather(lines, [("a", 0.9), ("  ", 0.99), ("c", 0.4)], [], {})
    assert out.texts == ["a"] and out.quads.tolist() == lines.quads[:1].tolist()


# ---------------------------------------------------------------- TextLines
def test_textlines_roundtrip_and_errors():
    lines = TextLines(
        [[[0, 0], [4, 0], [4, 2], [0, 2]], [[1, 5], [6, 5], [6, 8], [1, 8]]],
        ["a", "é"],
        [0.5, 0.9],
        image_shape=(10, 10),
    )
    again = TextLines(**json.loads(lines.to_json(orient="columns")))
    assert again.texts == ["a", "é"] and again.quads.tolist() == lines.quads.tolist()
    assert lines[-1].text == "é" and len(lines[1:]) == 1 and lines.boxes[1].tolist() == [1, 5, 6, 8]
    with pytest.raises(InputError, match=r"quads: got shape \(2, 4\)"):
        TextLines(np.zeros((2, 4)), None, [1, 1])
    with pytest.raises(InputError, match="2 quads and 1 texts"):
        TextLines(np.zeros((2, 4, 2)), ["a"], [1, 1])
    with pytest.raises(IndexError):
        lines[2]


# ---------------------------------------------------------------- the fan-out / gather model
@pytest.fixture()
def classify():
    p = amdinfer.Pipeline(
        preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
        engine=tiny_cnn(),
        postprocess=[Softmax(), TopK(1)],
        **CPU,
    )
    yield p
    p.close()


def _detector(classify, **kw):
    return amdinfer.Pipeline(
        preprocess=[LoadImage(), Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(image_size=64, num_classes=2),
        keep_image=True,
        **CPU,
        postprocess=[
            YoloDecode(conf_threshold=0.0),
            Nms(max_det=5),
            ScaleBoxes(),
            SubPipeline(classify, fan_out=BoxCrop(), gather=Relabel(score="classifier"), **kw),
        ],
    )


def test_detector_then_classifier_matches_classifying_the_crops_by_hand(classify):
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (48 + 8 * i, 80, 3), dtype=np.uint8) for i in range(3)]
    plain = amdinfer.Pipeline(
        preprocess=[LoadImage(), Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(image_size=64, num_classes=2),
        **CPU,
        postprocess=[YoloDecode(conf_threshold=0.0), Nms(max_det=5), ScaleBoxes()],
    )
    with _detector(classify, batch_size=2) as pipe:
        results = [pipe(im) for im in images]
        with pipe.map(images, batch_size=2) as streamed:
            assert [r.classes.tolist() for r in streamed] == [r.classes.tolist() for r in results]
    for im, det in zip(images, results):
        boxes = plain(im)
        assert len(boxes) == len(det) > 0
        np.testing.assert_array_equal(det.boxes, boxes.boxes)
        for k, b in enumerate(boxes.boxes):
            x1, y1, x2, y2 = (round(float(v)) for v in b)
            x1, y1, x2, y2 = (
                max(0, x1),
                max(0, y1),
                max(min(x2, im.shape[1]), x1 + 1),
                max(min(y2, im.shape[0]), y1 + 1),
            )
            want = classify(np.ascontiguousarray(im[y1:y2, x1:x2]))
            assert det.classes[k] == want.index and det.scores[k] == pytest.approx(want.score, abs=1e-6)
    plain.close()


def test_pieces_batch_by_shape_and_come_back_in_order(classify):
    calls = []
    step = SubPipeline(classify, fan_out=BoxCrop(), gather=Relabel(), batch_size=3)
    real = classify.engine.run

    def run(feeds, **kw):  # the batches the engine is fed: one list of item shapes per call
        batch = next(iter(feeds.values()))
        calls.append([batch.shape[1:]] * batch.shape[0])
        return real(feeds, **kw)

    classify.engine.run = run  # type: ignore[method-assign]
    pieces = [Sample(np.full((4 + (i % 2), 6, 3), i * 20, np.uint8)) for i in range(7)]
    out = step.run_pieces(pieces)
    assert [len(c) for c in calls] == [3, 3, 1] and all(len(set(c)) == 1 for c in calls)
    for p, r in zip(pieces, out):
        assert r.index == classify(p.data).index


def test_a_failing_piece_is_named(classify):
    class Bad(FanOut):
        def process(self, data, meta):
            return Pieces(data, [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.float32)])

    class Keep(Gather):
        def gather(self, parent, results, pieces, meta):
            return parent

    pipe = amdinfer.Pipeline(
        preprocess=[HwcToChw(), Normalize()],
        engine=tiny_cnn(),
        **CPU,
        postprocess=[SubPipeline(classify, fan_out=Bad(), gather=Keep())],
    )
    with pytest.raises(
        StageInputError, match=r"item 0: postprocess\[0\] SubPipeline: .*piece 1: preprocess\[0\] Resize"
    ):
        pipe(np.zeros((32, 32, 3), np.uint8))
    pipe.close()


def test_fan_out_errors_name_the_stage(classify):
    step = SubPipeline(classify, fan_out=BoxCrop(), gather=Relabel())
    with pytest.raises(InputError, match="BoxCrop: got ndarray, expected Detections"):
        step(np.zeros(3))
    with pytest.raises(InputError, match="no 'source_image'"):
        QuadCrop()(Sample(TextLines(np.zeros((1, 4, 2)), None, [1]), {}))
    with pytest.raises(OptionError, match="order: got 'size'"):
        SubPipeline(classify, fan_out=BoxCrop(), gather=Relabel(), order="size")
    with pytest.raises(OptionError, match="fan_out: got Resize"):
        SubPipeline(classify, fan_out=Resize(3), gather=Relabel())  # type: ignore[arg-type]


def test_fuse_keeps_the_threads_of_an_engine_passed_in():
    engine = amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"], threads=1)
    pipe = amdinfer.Pipeline(preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()], engine=engine)
    fused = pipe.fuse(image_size=(32, 32))
    try:
        assert fused.engine.info.settings["session"]["intra_op_num_threads"] == 1
    finally:
        fused.close()
        engine.close()


# ---------------------------------------------------------------- greedy CTC in the recogniser's graph
def _softmax_model(classes: int = 7) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", classes])
    y = helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", "T", classes])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["probs"], axis=2)], "rec", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_fuse_ctc_decodes_like_ctc_greedy_on_the_probabilities(opset):
    model = _softmax_model()
    model.opset_import[0].version = opset
    rng = np.random.default_rng(0)
    logits = rng.integers(-3, 3, (4, 30, 7)).astype(np.float32)  # integers: equal maxima in many steps
    logits[0, :5] = 0.0  # a whole step tied: the first class wins, as in NumPy
    charset = list("abcdef")
    with amdinfer.load(model, **CPU) as plain, amdinfer.load(fuse_ctc(model), **CPU) as fused:
        probs = plain.run(logits)["probs"]
        out = fused.run(logits)
    assert out["ctc_index"].dtype == np.int64 and out["ctc_index"].shape == (4, 30)
    decode = CtcDecode(charset)
    for row in range(4):
        got = decode(Sample({"ctc_index": out["ctc_index"][row], "ctc_best": out["ctc_best"][row]})).data
        assert got == ctc_greedy(probs[row], charset)


def test_fuse_ctc_refuses_other_outputs_and_decode_checks_the_charset():
    from onnx import TensorProto, helper

    two = _softmax_model()
    two.graph.output.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 7]))
    with pytest.raises(ModelError, match=r"fuse_ctc: got outputs \['probs', 'x'\], expected one \(N, T, classes\)"):
        fuse_ctc(two)
    decode = CtcDecode(["a"])
    with pytest.raises(InputError, match=r"ctc: class 5 decoded, the character set has 1 \(\+ blank\)"):
        decode(Sample({"ctc_index": np.array([5]), "ctc_best": np.array([0.9], np.float32)}))


def test_ocr_keeps_the_probabilities_of_a_recogniser_fuse_ctc_does_not_know():
    from onnx import TensorProto, helper

    two = _softmax_model()
    two.graph.output.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "T", 7]))
    with amdinfer.ocr(tiny_cnn(), two, charset=list("abcdef"), **CPU) as pipe:
        assert not pipe.ctc_in_graph
    with amdinfer.ocr(tiny_cnn(), _softmax_model(), charset=list("abcdef"), **CPU) as pipe:
        assert pipe.ctc_in_graph
        assert [o.name for o in pipe.steps[-1].engine.outputs] == ["ctc_index", "ctc_best"]
