"""Masks, Keypoints and Detections carrying them: hand-made cases, pycocotools for the RLE, NumPy for the blend."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amdinfer.errors import InputError, OptionError
from amdinfer.results import Detections, Keypoints, Masks
from amdinfer.results._draw_masks import blend_masks, draw_keypoints
from amdinfer.results._masks import mask_polygons, rle_decode, rle_encode


def _det(k: int = 2, shape: tuple[int, int] = (6, 8)) -> Detections:
    masks = np.zeros((k, *shape), bool)
    for i in range(k):
        masks[i, i : i + 3, 2 * i : 2 * i + 3] = True
    kp = np.arange(k * 17 * 3, dtype=np.float32).reshape(k, 17, 3) % 5
    boxes = [[2 * i, i, 2 * i + 3, i + 3] for i in range(k)]
    return Detections(boxes, np.linspace(0.9, 0.5, k), list(range(k)), image_shape=shape, masks=masks, keypoints=kp)


class TestRle:
    def test_matches_pycocotools(self) -> None:
        mask_util = pytest.importorskip("pycocotools.mask")
        rng = np.random.default_rng(0)
        for shape in [(5, 7), (1, 1), (16, 3)]:
            m = rng.random(shape) > 0.5
            ours = rle_encode(m)
            theirs = mask_util.frPyObjects(ours, *shape)
            assert np.array_equal(mask_util.decode(theirs).astype(bool), m)
            assert np.array_equal(rle_decode(json.dumps(ours)), m)

    def test_starts_with_zeros_run(self) -> None:
        assert rle_encode(np.ones((2, 2), bool))["counts"] == [0, 4]
        assert rle_encode(np.zeros((2, 2), bool))["counts"] == [4]

    def test_broken_counts_name_the_sum(self) -> None:
        with pytest.raises(InputError, match="add up to 3, expected H \\* W = 4"):
            rle_decode({"size": [2, 2], "counts": [1, 2]})


class TestPolygons:
    def test_square_contour_corners(self) -> None:
        m = np.zeros((1, 6, 6), np.uint8)
        m[0, 1:5, 2:4] = 1
        assert mask_polygons(m)[0].tolist() == [[2, 1], [2, 4], [3, 4], [3, 1]]

    def test_empty_mask_gives_no_points_and_unknown_strategy_is_refused(self) -> None:
        assert mask_polygons(np.zeros((1, 3, 3)))[0].shape == (0, 2)
        with pytest.raises(OptionError, match="strategy"):
            mask_polygons(np.zeros((1, 3, 3)), "biggest")

    def test_two_parts_joined_visit_both(self) -> None:
        m = np.zeros((1, 8, 12), np.uint8)
        m[0, 1:3, 1:3] = 1
        m[0, 4:7, 7:10] = 1
        poly = mask_polygons(m, "all")[0]
        assert {tuple(p) for p in poly.tolist()} >= {(1, 1), (9, 6)}  # a corner of each part
        assert len(mask_polygons(m, "largest")[0]) == 4

    def test_xyn_by_width_and_height(self) -> None:
        m = Masks(np.ones((1, 4, 8), bool))
        assert m.xyn[0].max(0).tolist() == [7 / 8, 3 / 4]


class TestDetectionsWithInstances:
    def test_select_keeps_masks_keypoints_and_polygons(self) -> None:
        det = _det(3)
        polys = det.masks.xy
        sub = det[[2, 0]]
        assert np.array_equal(sub.masks.data, det.masks.data[[2, 0]])
        assert np.array_equal(sub.keypoints.data, det.keypoints.data[[2, 0]])
        assert [p.tolist() for p in sub.masks.xy] == [polys[2].tolist(), polys[0].tolist()]
        assert len(det[det.scores > 0.8].masks) == 1

    def test_json_round_trip(self) -> None:
        det = _det()
        back = Detections(**json.loads(det.to_json(orient="columns")))
        assert np.array_equal(back.masks.data, det.masks.data)
        assert np.allclose(back.keypoints.data, det.keypoints.data)
        assert [p.tolist() for p in back.masks.xy] == [p.tolist() for p in det.masks.xy]

    def test_tensors_round_trip_and_batch(self) -> None:
        from amdinfer.results import batch_tensors

        det = _det()
        t = det.to_tensors()
        assert t["masks"].dtype == object and t["keypoints"].shape == (2, 17, 3)
        back = Detections.from_tensors(t, image_shape=(6, 8))
        assert np.array_equal(back.masks.data, det.masks.data)
        items = Detections.from_batch(batch_tensors([t, _det(1).to_tensors()], "boxes"), 2)
        assert [len(d.masks) for d in items] == [2, 1]

    def test_summary_rows_carry_segments_and_keypoints(self) -> None:
        det = _det()
        row = det.summary(normalize=True)[1]
        xy = det.masks.xy[1]
        assert row["segments"]["x"] == pytest.approx((xy[:, 0] / 8).tolist(), abs=1e-5)
        assert row["keypoints"]["visible"] == pytest.approx(det.keypoints.conf[1].tolist())

    def test_tables_hold_the_boxes(self) -> None:
        det = _det()
        assert det.to_csv().splitlines()[0] == "name,class,confidence,x1,y1,x2,y2"
        assert len(det.to_csv().splitlines()) == 3

    def test_counts_and_sizes_are_checked(self) -> None:
        with pytest.raises(InputError, match="got 1 masks for 2 boxes"):
            Detections([[0, 0, 1, 1]] * 2, [0.5, 0.4], [0, 0], masks=np.zeros((1, 4, 4), bool))
        with pytest.raises(InputError, match="expected image_shape"):
            Detections([[0, 0, 1, 1]], [0.5], [0], image_shape=(5, 5), masks=np.zeros((1, 4, 4), bool))
        with pytest.raises(InputError, match="keypoints for 1 boxes, expected 2"):
            Detections([[0, 0, 1, 1]] * 2, [0.5, 0.4], [0, 0], keypoints=np.zeros((1, 17, 3)))
        with pytest.raises(InputError, match=r"expected \(k, K, 3\)"):
            Keypoints(np.zeros((1, 17, 4)))


class TestPictures:
    def test_blend_is_ultralytics_formula(self) -> None:
        rng = np.random.default_rng(1)
        image = rng.integers(0, 255, (5, 6, 3), dtype=np.uint8)
        masks = rng.random((2, 5, 6)) > 0.5
        colors = np.array([(255, 56, 56), (0, 194, 255)], np.float64)
        out = blend_masks(image, masks, colors)
        m = masks[..., None].astype(np.float64)
        keep = np.prod(1 - 0.5 * m, axis=0)
        top = np.max(m * colors[:, None, None] / 255 * 0.5, axis=0)
        want = ((image / 255 * keep + top) * 255).astype(np.uint8)
        assert np.abs(out.astype(int) - want).max() <= 1  # float32 against float64 truncation

    def test_plot_draws_masks_under_boxes_and_keypoints(self) -> None:
        det = _det(1, (20, 20))
        det = Detections(
            det.boxes,
            det.scores,
            det.classes,
            image_shape=(20, 20),
            masks=det.masks,
            image=np.zeros((20, 20, 3), np.uint8),
        )
        out = det.plot(text=False, thickness=1)
        assert out[1, 1].tolist() == [127, 28, 28]  # inside the mask, off the box lines: half of class 0's colour
        assert out[10, 10].tolist() == [0, 0, 0]

    def test_keypoints_below_conf_and_missing_are_not_drawn(self) -> None:
        kp = np.zeros((1, 3, 3))
        kp[0] = [[5, 5, 0.9], [15, 15, 0.1], [0, 0, 0.9]]
        out = draw_keypoints(np.zeros((20, 20, 3), np.uint8), kp, radius=1)
        assert out[5, 5].any() and not out[15, 15].any()
        two = draw_keypoints(np.zeros((20, 20, 3), np.uint8), kp[..., :2], radius=1)
        assert two[15, 15].any() and not two[0, 0].any()  # without visibility, (0, 0) means missing
