"""Postprocessing stages and result objects against hand-worked cases, OpenCV's NMS and synthetic YOLO outputs."""

from __future__ import annotations

import numpy as np
import pytest
from stage_contract import StageContract

from amdinfer.errors import InputError, OptionError, StageError
from amdinfer.postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode, detect_layout
from amdinfer.preprocess import CenterCrop, Letterbox, Resize
from amdinfer.results import Classification, Detections
from amdinfer.stages import Sample

try:
    import cv2
except ImportError:  # pragma: no cover - the peer is optional
    cv2 = None

needs_cv2 = pytest.mark.skipif(cv2 is None, reason="opencv-python-headless is not installed (NMS peer)")


def _random_boxes(n: int, seed: int, size: float = 200.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, size, (n, 2))
    wh = rng.uniform(5, size / 4, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float32)
    scores = rng.uniform(0.01, 1.0, n).astype(np.float32)
    classes = rng.integers(0, 3, n)
    return boxes, scores, classes


# ---------------------------------------------------------------------------------------------- classification
class TestSoftmax(StageContract):
    def stage(self) -> Softmax:
        return Softmax(output="logits")

    def test_matches_oracle(self) -> None:
        x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, 990.0]], np.float32)
        e0 = np.exp([1.0, 2.0, 3.0])
        want0 = e0 / e0.sum()
        e1 = np.exp([0.0, 0.0, -10.0])
        want1 = e1 / e1.sum()  # shifted by the max: no overflow at 1000
        out = Softmax()(x).data
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, [want0, want1], rtol=1e-6)
        np.testing.assert_allclose(Softmax(axis=0)(x[:, :1]).data, [[0.0], [1.0]], atol=1e-6)
        out = Softmax(output="b")({"a": np.zeros(2), "b": np.zeros(4)}).data
        np.testing.assert_allclose(out, [0.25] * 4)

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"axis: got 'last'"):
            Softmax("last")
        with pytest.raises(OptionError, match=r"output: got 3"):
            Softmax(output=3)

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"Softmax: got str"):
            Softmax()("x")
        with pytest.raises(StageError, match=r"Softmax: got 2 model outputs \['a', 'b'\], expected one"):
            Softmax()({"a": np.zeros(2), "b": np.zeros(2)})
        with pytest.raises(StageError, match=r"output 'c' not found; the model gave \['a'\]"):
            Softmax(output="c")({"a": np.zeros(2)})


class TestTopK(StageContract):
    def stage(self) -> TopK:
        return TopK(2, labels=["a", "b", "c"])

    def test_matches_oracle(self) -> None:
        scores = np.array([0.1, 0.3, 0.05, 0.3, 0.25], np.float32)
        out = TopK(3, labels=["v", "w", "x", "y", "z"])(scores).data
        assert isinstance(out, Classification)
        assert out.indices.tolist() == [1, 3, 4]  # the tie 1/3 goes to the lower index
        assert out.labels == ["w", "y", "z"]
        np.testing.assert_array_equal(out.scores, scores[[1, 3, 4]])
        assert TopK(1)(scores[None]).data.index == 1  # a batch axis of 1 is dropped
        assert TopK(2, labels={0: "p", 1: "q"})(np.array([0.0, 1.0])).data.labels == ["q", "p"]

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"k: got 0"):
            TopK(0)
        with pytest.raises(OptionError, match=r"labels: got str"):
            TopK(1, labels="cat")
        with pytest.raises(OptionError, match=r"keys are not 0..n-1"):
            TopK(1, labels={1: "a"})

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"TopK: k=4, but the scores have only 3 classes"):
            TopK(4)(np.zeros(3))
        with pytest.raises(InputError, match=r"got 3 class scores, but labels has 2 names"):
            TopK(1, labels=["a", "b"])(np.zeros(3))
        with pytest.raises(InputError, match=r"got a batch of 2"):
            TopK(1)(np.zeros((2, 3)))


# ---------------------------------------------------------------------------------------------- YOLO decoding
def _v8_output(boxes_cxcywh, class_scores, anchors: int = 50) -> np.ndarray:
    nc = len(class_scores[0])
    out = np.zeros((4 + nc, anchors), np.float32)
    for j, (box, cls) in enumerate(zip(boxes_cxcywh, class_scores)):
        out[:4, 3 * j + 1] = box
        out[4:, 3 * j + 1] = cls
    return out


BOXES = [(50, 40, 20, 10), (100, 100, 40, 40), (10, 10, 4, 8)]
XYXY = [[40, 35, 60, 45], [80, 80, 120, 120], [8, 6, 12, 14]]


class TestYoloDecode(StageContract):
    def stage(self) -> YoloDecode:
        return YoloDecode("v5", conf_threshold=0.4, labels=["a", "b"])

    def test_matches_oracle(self) -> None:
        # v8: best class per box, kept when its score is above the threshold (0.25 is not above 0.25).
        pred = _v8_output(BOXES, [(0.1, 0.9, 0.0), (0.25, 0.0, 0.2), (0.0, 0.3, 0.6)])
        det = YoloDecode("v8", conf_threshold=0.25, labels=["a", "b", "c"])(pred).data
        order = np.argsort(-det.scores)
        np.testing.assert_allclose(det.boxes[order], [XYXY[0], XYXY[2]])
        np.testing.assert_allclose(det.scores[order], [0.9, 0.6])
        assert det.classes[order].tolist() == [1, 2] and [det.labels[i] for i in order] == ["b", "c"]
        # v5: score = objectness x class score; objectness must pass the threshold too.
        v5 = np.zeros((30, 7), np.float32)
        v5[3] = [50, 40, 20, 10, 0.8, 0.5, 0.9]  # score 0.72, class 1
        v5[7] = [100, 100, 40, 40, 0.2, 1.0, 0.0]  # objectness below threshold
        v5[9] = [10, 10, 4, 8, 0.5, 0.4, 0.0]  # score 0.2 below threshold
        det = YoloDecode("v5", conf_threshold=0.25)(v5).data
        np.testing.assert_allclose(det.boxes, [XYXY[0]])
        np.testing.assert_allclose(det.scores, [0.72], rtol=1e-6)
        assert det.classes.tolist() == [1]
        # end-to-end: rows already xyxy, score, class.
        e2e = np.array([[1, 2, 3, 4, 0.9, 7], [5, 6, 7, 8, 0.1, 2], [0, 0, 9, 9, 0.5, 1]], np.float32)
        det = YoloDecode("e2e", conf_threshold=0.25)(e2e).data
        np.testing.assert_allclose(det.boxes, [[1, 2, 3, 4], [0, 0, 9, 9]])
        assert det.classes.tolist() == [7, 1]

    def test_layout_detection(self) -> None:
        assert detect_layout((84, 8400)) == "v8"
        assert detect_layout((25200, 85)) == "v5"
        assert detect_layout((300, 6)) == "e2e"
        # At tiny inputs v8 has fewer anchors than channels; the input size settles it.
        assert detect_layout((84, 21), input_shape=(32, 32)) == "v8"
        assert detect_layout((63, 6), input_shape=(32, 32)) == "v5"
        pred = _v8_output(BOXES, [(0.9,), (0.8,), (0.7,)], anchors=21)  # (5, 21)
        assert YoloDecode()(Sample(pred, {"input_shape": (32, 32)})).meta["yolo"]["layout"] == "v8"
        assert len(YoloDecode()(pred[None]).data) == 3  # a batch axis of 1 is dropped

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"layout: got 'v11'"):
            YoloDecode("v11")
        with pytest.raises(OptionError, match=r"conf_threshold: got 1.5, expected a number in \[0.0, 1.0\]"):
            YoloDecode(conf_threshold=1.5)

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"got a batch of 2"):
            YoloDecode()(np.zeros((2, 84, 100), np.float32))
        with pytest.raises(InputError, match=r"expected a floating-point YOLO output"):
            YoloDecode()(np.zeros((84, 100), np.int32))
        with pytest.raises(InputError, match=r"class index 2 has no label"):
            YoloDecode("v8", labels=["a"])(_v8_output(BOXES[:1], [(0.0, 0.0, 0.9)]))


# ---------------------------------------------------------------------------------------------- NMS
class TestNms(StageContract):
    def stage(self) -> Nms:
        return Nms(0.6, 100, agnostic=True, classes=[0, 2])

    def test_matches_oracle(self) -> None:
        # Hand-worked: IoU(a, b) = 81 / 100 > 0.5, so b goes for its class; c (another class) stays.
        det = Detections(
            [[0, 0, 10, 10], [1, 1, 10, 10], [1, 1, 10, 10], [50, 50, 60, 60]], [0.9, 0.8, 0.7, 0.6], [0, 0, 1, 0]
        )
        assert Nms(0.5)(det).data.scores.tolist() == pytest.approx([0.9, 0.7, 0.6])
        assert Nms(0.5, agnostic=True)(det).data.scores.tolist() == pytest.approx([0.9, 0.6])
        assert Nms(0.85)(det).data.scores.tolist() == pytest.approx([0.9, 0.8, 0.7, 0.6])  # 0.81 is not above
        assert Nms(0.5, max_det=2)(det).data.scores.tolist() == pytest.approx([0.9, 0.7])
        assert Nms(0.5, classes=[1])(det).data.classes.tolist() == [1]

    @needs_cv2
    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_same_kept_set_as_opencv(self, seed: int) -> None:
        boxes, scores, classes = _random_boxes(400, seed)
        det = Detections(boxes, scores, classes)
        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1).astype(np.float64)
        for iou in (0.3, 0.5, 0.7):
            want = cv2.dnn.NMSBoxesBatched(xywh.tolist(), scores.tolist(), classes.tolist(), 0.0, iou)
            got = Nms(iou, max_det=10_000)(det).data
            kept = {tuple(b) for b in boxes[np.asarray(want).reshape(-1)].tolist()}
            assert {tuple(b) for b in got.boxes.tolist()} == kept
            want = cv2.dnn.NMSBoxes(xywh.tolist(), scores.tolist(), 0.0, iou)
            got = Nms(iou, max_det=10_000, agnostic=True)(det).data
            assert {tuple(b) for b in got.boxes.tolist()} == {
                tuple(b) for b in boxes[np.asarray(want).reshape(-1)].tolist()
            }
            assert np.all(np.diff(got.scores) <= 0)  # best first

    def test_multi_label(self) -> None:
        # One box scoring 0.9 for class 0 and 0.6 for class 2: kept twice with multi_label.
        pred = _v8_output([(50, 40, 20, 10)], [(0.9, 0.1, 0.6)])
        single = Nms()(YoloDecode("v8")(pred)).data
        multi = Nms(multi_label=True)(YoloDecode("v8", labels=["a", "b", "c"])(pred)).data
        assert single.classes.tolist() == [0]
        assert multi.classes.tolist() == [0, 2] and multi.labels == ["a", "c"]
        np.testing.assert_allclose(multi.scores, [0.9, 0.6])

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"iou_threshold: got -0.1"):
            Nms(-0.1)
        with pytest.raises(OptionError, match=r"max_det: got 0"):
            Nms(max_det=0)
        with pytest.raises(OptionError, match=r"agnostic: got 1"):
            Nms(agnostic=1)
        with pytest.raises(OptionError, match=r"classes: got"):
            Nms(classes=["person"])

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"Nms: got ndarray, expected Detections"):
            Nms()(np.zeros((3, 6)))
        with pytest.raises(InputError, match=r"multi_label=True.*put YoloDecode before it"):
            Nms(multi_label=True)(Detections([[0, 0, 1, 1]], [0.5], [0]))


# ---------------------------------------------------------------------------------------------- ScaleBoxes
class TestScaleBoxes(StageContract):
    def stage(self) -> ScaleBoxes:
        return ScaleBoxes(clip=False)

    @pytest.mark.parametrize(
        "stages",
        [
            [Letterbox(640)],
            [Letterbox((320, 480), center=False)],
            [Letterbox(256, auto=True)],
            [Letterbox((200, 300), scale_fill=True)],
            [Resize(300), CenterCrop(256)],
        ],
    )
    def test_matches_oracle(self, stages) -> None:
        # Round trip: map known boxes forward with the stage geometry, then back with ScaleBoxes.
        h0, w0 = 375, 500
        sample = Sample(np.zeros((h0, w0, 3), np.uint8))
        for stage in stages:
            sample = stage(sample)
        sx, sy, tx, ty = sample.meta["affine"]
        rng = np.random.default_rng(0)
        xy = rng.uniform(0, 300, (20, 2))
        orig = np.concatenate([xy, xy + rng.uniform(1, 70, (20, 2))], axis=1)
        fwd = orig * [sx, sy, sx, sy] + [tx, ty, tx, ty]
        det = Detections(fwd, np.ones(20), np.zeros(20), image_shape=sample.meta["input_shape"])
        back = ScaleBoxes(clip=False)(Sample(det, sample.meta)).data
        np.testing.assert_allclose(back.boxes, orig, atol=1e-3)
        assert back.image_shape == (h0, w0)

    def test_letterbox_round_trip_on_pixels(self) -> None:
        # A white rectangle in the original image, found again in the letterboxed image and mapped back.
        image = np.zeros((300, 451, 3), np.uint8)
        image[60:181, 100:321] = 255  # x1, y1, x2, y2 = 100, 60, 321, 181 (pixel edges)
        sample = Letterbox(640)(image)
        ys, xs = np.nonzero(sample.data[..., 0] > 127)
        found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        det = Detections([found], [1.0], [0])
        back = ScaleBoxes()(Sample(det, sample.meta)).data
        r = 640 / 451
        np.testing.assert_allclose(back.boxes[0], [100, 60, 321, 181], atol=1.0 / r + 1e-6)

    def test_clips_to_the_image(self) -> None:
        meta = Letterbox(64)(np.zeros((32, 48, 3), np.uint8)).meta  # pad top 11
        det = Detections([[-5, 0, 70, 64]], [1.0], [0])
        out = ScaleBoxes()(Sample(det, meta)).data
        np.testing.assert_allclose(out.boxes, [[0, 0, 48, 32]])
        twice = ScaleBoxes()(ScaleBoxes()(Sample(det, meta)))
        np.testing.assert_allclose(twice.data.boxes, out.boxes)

    def test_rejects_bad_params(self) -> None:
        with pytest.raises(OptionError, match=r"clip: got 'yes'"):
            ScaleBoxes(clip="yes")

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"no 'orig_shape' metadata"):
            ScaleBoxes()(Detections([[0, 0, 1, 1]], [1.0], [0]))
        with pytest.raises(InputError, match=r"ScaleBoxes: got ndarray, expected Detections"):
            ScaleBoxes()(Sample(np.zeros((1, 4)), {"orig_shape": (2, 2)}))


# ---------------------------------------------------------------------------------------------- results
class TestDetections:
    def test_fields_and_repr(self) -> None:
        det = Detections(
            [[10, 20, 50, 80], [0, 0, 5, 5]], [0.9, 0.4], [0, 3], labels=["cat", "dog"], image_shape=(100, 120)
        )
        assert det.boxes.dtype == np.float32 and det.boxes.shape == (2, 4)
        assert det.classes.dtype == np.int64 and det.scores.dtype == np.float32
        assert repr(det).splitlines() == [
            "Detections(2 boxes in a 120x100 image:",
            "  cat  0.900  [10.0, 20.0, 50.0, 80.0]",
            "  dog  0.400  [0.0, 0.0, 5.0, 5.0]",
            ")",
        ]
        html = det._repr_html_()
        assert html.count("<tr>") == 3 and "cat" in html and "120&times;100" in html
        assert det.to_dict()["labels"] == ["cat", "dog"]
        many = Detections(np.tile([[0, 0, 1, 1]], (12, 1)), np.ones(12), np.zeros(12))
        assert repr(many).splitlines()[-2] == "  ... 2 more"

    def test_draw(self) -> None:
        image = np.zeros((20, 30, 3), np.uint8)
        det = Detections([[2, 3, 12, 15]], [0.9], [1], image_shape=(20, 30))
        out = det.draw(image, thickness=1)
        assert image.sum() == 0  # the input is left alone
        color = [255, 157, 151]  # PALETTE[1]
        mask = np.zeros((20, 30), bool)
        mask[3, 2:13] = mask[15, 2:13] = mask[3:16, 2] = mask[3:16, 12] = True
        np.testing.assert_array_equal(out[mask], np.tile(color, (mask.sum(), 1)))
        assert out[~mask].sum() == 0
        with pytest.raises(InputError, match=r"got size \(10, 10\), expected \(20, 30\)"):
            det.draw(np.zeros((10, 10, 3), np.uint8))
        pytest.importorskip("PIL")
        with_text = det.draw(image, text=True)
        assert with_text.shape == image.shape and (with_text != out).any()  # the label is written too

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(InputError, match=r"boxes: got shape \(2, 3\)"):
            Detections(np.zeros((2, 3)), [0, 0], [0, 0])
        with pytest.raises(InputError, match=r"got 1 boxes, 2 scores and 1 classes"):
            Detections([[0, 0, 1, 1]], [0.1, 0.2], [0])
        with pytest.raises(InputError, match=r"got 2 labels, expected 1"):
            Detections([[0, 0, 1, 1]], [0.1], [0], labels=["a", "b"])


class TestClassification:
    def test_fields_and_repr(self) -> None:
        c = Classification([3, 10], [0.75, 0.125], labels=["cat", "tabby"])
        assert (c.index, c.label, c.score) == (3, "cat", 0.75)
        assert repr(c).splitlines() == ["Classification(top-2:", "   3  cat    0.7500", "  10  tabby  0.1250", ")"]
        assert repr(Classification([1], [1.0])).splitlines()[1] == "  1  1.0000"
        assert c._repr_html_().count("<tr>") == 3
        with pytest.raises(InputError, match=r"2 indices and 1 scores"):
            Classification([1, 2], [0.5])
