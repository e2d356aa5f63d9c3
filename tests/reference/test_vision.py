"""Letterbox, resizing, boxes, NMS and YOLO decoding: hand-worked cases, plus OpenCV where it is installed."""

from __future__ import annotations

import numpy as np
import pytest

from amdinfer.reference import (
    batched_nms,
    box_iou,
    clip_boxes,
    letterbox,
    nms,
    non_max_suppression,
    resize_bilinear,
    resize_nearest,
    resolve_layout,
    scale_boxes,
    xywh2xyxy,
    xyxy2xywh,
    yolo_decode,
)


def _clustered(n: int, seed: int, image: float = 640.0, n_classes: int = 5) -> tuple[np.ndarray, ...]:
    """Detector-like boxes: jittered copies of a few objects, uniform scores."""
    rng = np.random.default_rng(seed)
    k = max(1, n // 20)
    centers = rng.uniform(0, image, (k, 2))
    sizes = np.exp(rng.uniform(np.log(8), np.log(200), (k, 2)))
    owner = rng.integers(0, k, n)
    c = centers[owner] + rng.normal(0, 0.15, (n, 2)) * sizes[owner]
    s = sizes[owner] * np.exp(rng.normal(0, 0.2, (n, 2)))
    boxes = np.concatenate([c - s / 2, c + s / 2], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, n).astype(np.float32)
    classes = rng.integers(0, n_classes, k)[owner]
    return boxes, scores, classes


def _greedy_oracle(boxes: np.ndarray, scores: np.ndarray, thr: float, classes: np.ndarray | None = None) -> list[int]:
    """One box at a time, in float32 like torchvision's CPU kernel."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    for i in order:
        ok = True
        for j in keep:
            if classes is not None and classes[i] != classes[j]:
                continue
            w = max(np.float32(0), min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            h = max(np.float32(0), min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            inter = w * h
            if float(inter / (area[j] + area[i] - inter)) > thr:
                ok = False
                break
        if ok:
            keep.append(int(i))
    return keep


# --------------------------------------------------------------------------------------------------- letterbox


class TestLetterbox:
    def test_landscape_to_square_pads_top_and_bottom(self) -> None:
        image = np.full((480, 640, 3), 7, np.uint8)
        out, ratio, pad = letterbox(image, 640)
        assert out.shape == (640, 640, 3)
        assert ratio == (1.0, 1.0) and pad == (0.0, 80.0)
        assert (out[:80] == 114).all() and (out[560:] == 114).all() and (out[80:560] == 7).all()

    def test_odd_padding_follows_the_minus_plus_point_one_rule(self) -> None:
        # 100x201 -> 640: r = 640/201, content 318x640, dh = 322 / 2 = 161 -> top 161, bottom 161.
        # 100x203 -> (640, 640): r = 640/203, content round(315.27)=315 high, dh = 325/2 = 162.5 -> 162 / 163.
        out, ratio, pad = letterbox(np.zeros((100, 203, 3), np.uint8), 640)
        assert ratio == (640 / 203, 640 / 203)
        assert pad == (0.0, 162.5)
        assert out.shape == (640, 640, 3)
        column = out[:, 320, 0]
        assert (column[:162] == 114).all() and (column[162:477] == 0).all() and (column[477:] == 114).all()

    def test_odd_width_padding_goes_right(self) -> None:
        out, _, pad = letterbox(np.zeros((64, 63, 3), np.uint8), (64, 64))
        assert pad == (0.5, 0.0)
        assert (out[:, 63] == 114).all() and (out[:, 0] == 0).all()

    def test_auto_pads_to_stride_multiple(self) -> None:
        out, ratio, pad = letterbox(np.zeros((480, 640, 3), np.uint8), 640, auto=True, stride=32)
        assert out.shape == (480, 640, 3) and pad == (0.0, 0.0) and ratio == (1.0, 1.0)
        out, _, pad = letterbox(np.zeros((470, 640, 3), np.uint8), 640, auto=True, stride=32)
        assert out.shape == (480, 640, 3) and pad == (0.0, 5.0)

    def test_scaleup_false_only_shrinks(self) -> None:
        out, ratio, pad = letterbox(np.zeros((100, 200, 3), np.uint8), 640, scaleup=False)
        assert ratio == (1.0, 1.0) and pad == (220.0, 270.0) and out.shape == (640, 640, 3)
        _, ratio, _ = letterbox(np.zeros((1280, 960, 3), np.uint8), 640, scaleup=False)
        assert ratio == (0.5, 0.5)

    def test_scale_fill_stretches_with_per_axis_ratio(self) -> None:
        out, ratio, pad = letterbox(np.zeros((100, 200, 3), np.uint8), (64, 32), scale_fill=True)
        assert out.shape == (64, 32, 3) and ratio == (32 / 200, 64 / 100) and pad == (0.0, 0.0)

    def test_not_centred_pads_bottom_right(self) -> None:
        image = np.full((480, 640, 3), 9, np.uint8)
        out, _, pad = letterbox(image, 640, center=False)
        assert pad == (0.0, 0.0) and (out[:480] == 9).all() and (out[480:] == 114).all()

    def test_grey_and_float_images(self) -> None:
        out, _, _ = letterbox(np.ones((10, 20), np.float32), 40, color=0)
        assert out.shape == (40, 40) and out.dtype == np.float32 and out[0, 0] == 0 and out[20, 20] == 1

    def test_scale_boxes_round_trip(self) -> None:
        rng = np.random.default_rng(0)
        for shape in [(480, 640), (100, 203), (333, 517), (640, 480)]:
            _, ratio, pad = letterbox(np.zeros((*shape, 3), np.uint8), 640)
            xy = rng.uniform(0, 1, (20, 2)) * np.array(shape[::-1])
            wh = rng.uniform(1, 50, (20, 2))
            boxes = clip_boxes(np.concatenate([xy, xy + wh], axis=1), shape)
            left, top = round(pad[0] - 0.1), round(pad[1] - 0.1)
            forward = boxes * np.array([ratio[0], ratio[1]] * 2) + np.array([left, top] * 2)
            np.testing.assert_allclose(scale_boxes(forward, ratio, pad, shape), boxes, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------------------------------ resize


class TestResize:
    def test_bilinear_2x2_to_4x4_by_hand(self) -> None:
        image = np.array([[0.0, 4.0], [8.0, 12.0]], np.float32)
        # Source coordinates of the 4 outputs: -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
        row = np.array([0.0, 1.0, 3.0, 4.0])
        expected = np.array([row, row + 2, row + 6, row + 8], np.float32)
        np.testing.assert_allclose(resize_bilinear(image, (4, 4)), expected, rtol=0, atol=1e-6)

    def test_bilinear_keeps_channels_and_uint8(self) -> None:
        image = np.arange(2 * 2 * 3, dtype=np.uint8).reshape(2, 2, 3) * 20
        out = resize_bilinear(image, (4, 4))
        assert out.shape == (4, 4, 3) and out.dtype == np.uint8
        assert (out[0, 0] == image[0, 0]).all() and (out[-1, -1] == image[-1, -1]).all()

    def test_nearest_by_hand(self) -> None:
        image = np.array([[1, 2, 3]], np.uint8)
        np.testing.assert_array_equal(resize_nearest(image, (6, 2)), [[1, 1, 2, 2, 3, 3]] * 2)
        np.testing.assert_array_equal(resize_nearest(image, (2, 1)), [[1, 2]])

    @pytest.mark.parametrize("dtype", [np.uint8, np.float32])
    @pytest.mark.parametrize("size", [(640, 480), (50, 30), (7, 11), (1, 1), (333, 217), (64, 48)])
    def test_matches_opencv(self, dtype: type, size: tuple[int, int]) -> None:
        cv2 = pytest.importorskip("cv2")
        rng = np.random.default_rng(1)
        image = rng.integers(0, 256, (48, 64, 3)).astype(dtype)
        got = resize_bilinear(image, size)
        expected = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
        if dtype == np.uint8:
            assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-3)
        np.testing.assert_array_equal(
            resize_nearest(image, size), cv2.resize(image, size, interpolation=cv2.INTER_NEAREST)
        )

    def test_letterbox_matches_opencv_pipeline(self) -> None:
        cv2 = pytest.importorskip("cv2")
        image = np.random.default_rng(2).integers(0, 256, (375, 500, 3)).astype(np.uint8)
        out, ratio, pad = letterbox(image, 640)
        resized = cv2.resize(image, (640, 480), interpolation=cv2.INTER_LINEAR)
        expected = cv2.copyMakeBorder(resized, 80, 80, 0, 0, cv2.BORDER_CONSTANT, value=(114, 114, 114))
        assert ratio == (1.28, 1.28) and pad == (0.0, 80.0)
        assert np.abs(out.astype(int) - expected.astype(int)).max() <= 1


# ------------------------------------------------------------------------------------------------------- boxes


class TestBoxes:
    def test_conversions_round_trip(self) -> None:
        xywh = np.array([[10.0, 20.0, 4.0, 6.0], [0.0, 0.0, 1.0, 1.0]])
        np.testing.assert_allclose(xywh2xyxy(xywh), [[8, 17, 12, 23], [-0.5, -0.5, 0.5, 0.5]])
        np.testing.assert_allclose(xyxy2xywh(xywh2xyxy(xywh)), xywh)
        assert xywh2xyxy(xywh.astype(np.float32)).dtype == np.float32

    def test_box_iou(self) -> None:
        a = np.array([[0.0, 0, 10, 10], [0, 0, 0, 0]])
        b = np.array([[5.0, 0, 15, 10], [0, 0, 10, 10], [20, 20, 30, 30]])
        np.testing.assert_allclose(box_iou(a, b), [[50 / 150, 1, 0], [0, 0, 0]])

    def test_clip(self) -> None:
        np.testing.assert_array_equal(clip_boxes(np.array([[-1.0, -2, 50, 60]]), (40, 30)), [[0, 0, 30, 40]])


# --------------------------------------------------------------------------------------------------------- NMS


class TestNms:
    def test_overlapping_boxes(self) -> None:
        boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [21, 21, 31, 31]], np.float32)
        scores = np.array([0.9, 0.8, 0.7, 0.95], np.float32)
        np.testing.assert_array_equal(nms(boxes, scores, 0.5), [3, 0])
        assert nms(boxes, scores, 0.5).dtype == np.int64

    def test_iou_exactly_at_threshold_is_kept(self) -> None:
        boxes = np.array([[0, 0, 10, 10], [5, 0, 15, 10]], np.float32)  # IoU = 50 / 150
        scores = np.array([0.9, 0.8], np.float32)
        np.testing.assert_array_equal(nms(boxes, scores, 0.34), [0, 1])
        np.testing.assert_array_equal(nms(boxes, scores, 0.33), [0])
        # float32(1/3) rounds up, above the float64 threshold 1/3: suppressed, as in torchvision.
        np.testing.assert_array_equal(nms(boxes, scores, 1 / 3), [0])
        quarter = np.array([[0, 0, 10, 10], [0, 0, 10, 2.5]], np.float32)  # IoU = 0.25 exactly
        np.testing.assert_array_equal(nms(quarter, scores, 0.25), [0, 1])
        half = np.array([[0, 0, 10, 10], [0, 0, 10, 5]], np.float32)  # IoU = 0.5 exactly
        np.testing.assert_array_equal(nms(half, scores, 0.5), [0, 1])

    def test_ties_keep_lower_index_first(self) -> None:
        boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60], [50, 50, 60, 60]], np.float32)
        scores = np.array([0.5, 0.5, 0.5, 0.5], np.float32)
        np.testing.assert_array_equal(nms(boxes, scores, 0.5), [0, 2])

    def test_empty_and_single(self) -> None:
        assert nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), 0.5).shape == (0,)
        assert batched_nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), 0.5).shape == (0,)
        np.testing.assert_array_equal(nms(np.array([[0, 0, 1, 1]], np.float32), np.array([0.1]), 0.5), [0])

    def test_zero_area_boxes_never_suppress(self) -> None:
        boxes = np.array([[0, 0, 0, 0], [0, 0, 0, 0]], np.float32)
        np.testing.assert_array_equal(nms(boxes, np.array([0.9, 0.8]), 0.5), [0, 1])

    def test_extreme_thresholds_and_coordinates(self) -> None:
        boxes, scores, _ = _clustered(200, 21)
        # A negative threshold: even disjoint boxes (IoU 0) exceed it.
        np.testing.assert_array_equal(nms(boxes, scores, -0.1), _greedy_oracle(boxes, scores, -0.1))
        assert len(nms(boxes, scores, 1.0)) == 200
        # Tiny boxes far apart: the coarse integer pre-test must still let the real overlaps through.
        far = boxes * np.float32(1e-3) + np.where(np.arange(200) % 2, 1e5, -1e5)[:, None].astype(np.float32)
        np.testing.assert_array_equal(nms(far, scores, 0.45), _greedy_oracle(far, scores, 0.45))
        weird = boxes.copy()
        weird[:5] = [[np.nan, 0, 1, 1], [0, 0, np.inf, 1], [-np.inf, 0, 1, 1], [5, 5, 1, 1], [0, 0, 0, 0]]
        with np.errstate(invalid="ignore", over="ignore"):
            np.testing.assert_array_equal(nms(weird, scores, 0.45), _greedy_oracle(weird, scores, 0.45))

    def test_rejects_bad_shapes(self) -> None:
        with pytest.raises(ValueError, match="boxes"):
            nms(np.zeros((3, 5)), np.zeros(3), 0.5)
        with pytest.raises(ValueError, match="scores"):
            nms(np.zeros((3, 4)), np.zeros(2), 0.5)

    @pytest.mark.parametrize("seed", range(6))
    @pytest.mark.parametrize("n", [1, 7, 80, 300])
    def test_matches_one_box_at_a_time_oracle(self, n: int, seed: int) -> None:
        boxes, scores, classes = _clustered(n, seed)
        thr = [0.3, 0.45, 0.5, 0.7, 0.0, 0.9][seed]
        np.testing.assert_array_equal(nms(boxes, scores, thr), _greedy_oracle(boxes, scores, thr))
        got = batched_nms(boxes, scores, classes, thr)
        expected = _greedy_oracle(boxes, scores, thr, classes)
        assert sorted(got.tolist()) == sorted(expected)
        assert (np.diff(scores[got]) <= 0).all()

    def test_float64_boxes(self) -> None:
        boxes, scores, _ = _clustered(300, 11)
        b64 = boxes.astype(np.float64)
        expected = _greedy_oracle(b64, scores.astype(np.float64), 0.5)
        np.testing.assert_array_equal(nms(b64, scores, 0.5), expected)

    def test_batched_classes_never_suppress_each_other(self) -> None:
        boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]], np.float32)
        scores = np.array([0.7, 0.9, 0.8], np.float32)
        np.testing.assert_array_equal(batched_nms(boxes, scores, np.array([0, 1, 0]), 0.5), [1, 2])

    @pytest.mark.parametrize("n", [50, 1000, 3000])
    def test_matches_opencv(self, n: int) -> None:
        cv2 = pytest.importorskip("cv2")
        boxes, scores, classes = _clustered(n, n)
        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1).astype(np.float64)
        expected = np.asarray(cv2.dnn.NMSBoxes(xywh, scores.astype(np.float64), 0.0, 0.45)).ravel()
        assert sorted(nms(boxes, scores, 0.45).tolist()) == sorted(expected.tolist())
        expected = np.asarray(
            cv2.dnn.NMSBoxesBatched(xywh, scores.astype(np.float64), classes.astype(np.int32), 0.0, 0.45)
        ).ravel()
        assert sorted(batched_nms(boxes, scores, classes, 0.45).tolist()) == sorted(expected.tolist())


# -------------------------------------------------------------------------------------------------------- YOLO


def _v8_output(n_anchors: int = 50, nc: int = 3) -> tuple[np.ndarray, list[tuple[list[float], int, float]]]:
    """A (1, 4 + nc, A) output with three known objects, each seen by two anchors, and noise below 0.1."""
    rng = np.random.default_rng(5)
    out = np.zeros((1, 4 + nc, n_anchors), np.float32)
    out[0, :4] = rng.uniform(10, 20, (4, n_anchors))
    out[0, 4:] = rng.uniform(0, 0.1, (nc, n_anchors))
    objects = [
        ([100.0, 100.0, 40.0, 20.0], 0, 0.9),
        ([300.0, 200.0, 50.0, 50.0], 2, 0.8),
        ([100.0, 101.0, 40.0, 20.0], 1, 0.7),
    ]
    for k, (xywh, cls, score) in enumerate(objects):
        for dup, jitter in enumerate([0.0, 1.0]):
            a = 2 * k + dup
            out[0, :4, a] = [xywh[0] + jitter, xywh[1], xywh[2], xywh[3]]
            out[0, 4 + cls, a] = score - 0.05 * dup
    return out, objects


class TestYolo:
    def test_resolve_layout(self) -> None:
        assert resolve_layout(np.zeros((1, 84, 8400))) == "v8"
        assert resolve_layout(np.zeros((1, 25200, 85))) == "v5"
        assert resolve_layout(np.zeros((1, 300, 6))) == "e2e"
        assert resolve_layout(np.zeros((1, 300, 6)), "v5") == "v5"
        with pytest.raises(ValueError, match="layout"):
            resolve_layout(np.zeros((1, 84, 8400)), "v7")  # type: ignore[arg-type]

    def test_v8_decode_finds_known_boxes(self) -> None:
        out, _objects = _v8_output()
        boxes, scores, classes = yolo_decode(out, conf_threshold=0.25)[0]
        assert len(boxes) == 6
        np.testing.assert_allclose(boxes[0], [80, 90, 120, 110])
        np.testing.assert_allclose(scores, [0.9, 0.85, 0.8, 0.75, 0.7, 0.65], rtol=1e-6)
        np.testing.assert_array_equal(classes, [0, 0, 2, 2, 1, 1])
        _, _, classes = yolo_decode(out, conf_threshold=0.25, classes=[2])[0]
        np.testing.assert_array_equal(classes, [2, 2])

    def test_v8_multi_label(self) -> None:
        out = np.zeros((1, 6, 8), np.float32)
        out[0, :, 0] = [50, 50, 10, 10, 0.6, 0.5]
        _boxes, scores, classes = yolo_decode(out, conf_threshold=0.25, multi_label=True)[0]
        np.testing.assert_allclose(scores, [0.6, 0.5])
        np.testing.assert_array_equal(classes, [0, 1])
        _, scores, _ = yolo_decode(out, conf_threshold=0.25)[0]
        np.testing.assert_allclose(scores, [0.6])

    def test_v5_score_is_objectness_times_class(self) -> None:
        out = np.zeros((1, 10, 7), np.float32)
        out[0, 0] = [50, 50, 10, 10, 0.8, 0.5, 0.9]  # 0.8 * 0.9 = 0.72, class 1
        out[0, 1] = [90, 90, 10, 10, 0.2, 0.9, 0.9]  # objectness below the threshold
        out[0, 2] = [20, 20, 10, 10, 0.5, 0.4, 0.1]  # 0.5 * 0.4 = 0.2 < 0.25
        boxes, scores, classes = yolo_decode(out, "v5", conf_threshold=0.25)[0]
        np.testing.assert_allclose(boxes, [[45, 45, 55, 55]])
        np.testing.assert_allclose(scores, [0.72], rtol=1e-6)
        np.testing.assert_array_equal(classes, [1])

    def test_e2e(self) -> None:
        out = np.array([[[1, 2, 3, 4, 0.9, 2], [5, 6, 7, 8, 0.1, 0], [0, 0, 1, 1, 0.5, 1]]], np.float32)
        boxes, _scores, classes = yolo_decode(out, conf_threshold=0.25)[0]
        np.testing.assert_allclose(boxes, [[1, 2, 3, 4], [0, 0, 1, 1]])
        np.testing.assert_array_equal(classes, [2, 1])
        dets = non_max_suppression(out, 0.25, max_det=1)[0]
        np.testing.assert_allclose(dets, [[1, 2, 3, 4, 0.9, 2]])

    def test_non_max_suppression_v8(self) -> None:
        out, _ = _v8_output()
        dets = non_max_suppression(out, 0.25, 0.45)[0]
        # The jittered duplicates go; object 2 (class 1) overlaps object 0 but is another class.
        np.testing.assert_allclose(dets[:, 4], [0.9, 0.8, 0.7], rtol=1e-6)
        np.testing.assert_array_equal(dets[:, 5], [0, 2, 1])
        np.testing.assert_allclose(dets[0, :4], [80, 90, 120, 110])
        agnostic = non_max_suppression(out, 0.25, 0.45, agnostic=True)[0]
        np.testing.assert_array_equal(agnostic[:, 5], [0, 2])
        assert len(non_max_suppression(out, 0.25, 0.45, max_det=2)[0]) == 2
        assert non_max_suppression(out, 0.95)[0].shape == (0, 6)

    def test_non_max_suppression_v5_matches_v8_equivalent(self) -> None:
        out, _ = _v8_output()
        v5 = np.concatenate([out[:, :4], np.ones((1, 1, out.shape[2]), np.float32), out[:, 4:]], axis=1)
        v5 = v5.transpose(0, 2, 1)
        np.testing.assert_allclose(non_max_suppression(v5, layout="v5")[0], non_max_suppression(out)[0])

    def test_batch_of_images(self) -> None:
        out, _ = _v8_output()
        batch = np.concatenate([out, np.zeros_like(out)])
        results = non_max_suppression(batch)
        assert len(results) == 2 and len(results[0]) == 3 and results[1].shape == (0, 6)
