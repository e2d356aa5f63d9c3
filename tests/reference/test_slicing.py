"""amdinfer.reference._slicing: SAHI's tile geometry and merge rules, against hand-computed cases.

The peer comparison with ``sahi`` itself is tests/peers/test_sahi_parity.py (nox -s sahi).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from amdinfer.errors import InputError, OptionError
from amdinfer.reference import box_ios, greedy_nmm, match_nms, merge_predictions, slice_boxes


class TestSliceBoxes:
    def test_one_row_last_tile_shifted_back(self) -> None:
        # overlap int(0.2 * 100) = 20: starts 0, 80, 160 -> the third would end at 260 > 250, so it ends at 250
        assert slice_boxes(100, 250, 100, 100, 0.2, 0.2).tolist() == [
            [0, 0, 100, 100],
            [80, 0, 180, 100],
            [150, 0, 250, 100],
        ]

    def test_grid_row_major(self) -> None:
        # 1000 px, tiles 512, overlap int(102.4) = 102: starts 0, 410, then 820 + 512 > 1000 -> 488..1000
        got = slice_boxes(1000, 1000, 512, 512, 0.2, 0.2).tolist()
        xs = [(0, 512), (410, 922), (488, 1000)]
        assert got == [[x1, y1, x2, y2] for y1, y2 in xs for x1, x2 in xs]

    def test_exact_fit_without_overlap(self) -> None:
        assert slice_boxes(100, 200, 100, 100, 0.0, 0.0).tolist() == [[0, 0, 100, 100], [100, 0, 200, 100]]

    def test_axes_have_their_own_size_and_ratio(self) -> None:
        # height: tiles 60, overlap int(0.5 * 60) = 30 -> 0..60, 30..90, 60..120 (reaches 120); width: one tile of 80
        assert slice_boxes(120, 80, 60, 80, 0.5, 0.1).tolist() == [[0, 0, 80, 60], [0, 30, 80, 90], [0, 60, 80, 120]]

    def test_image_smaller_than_a_tile_is_one_tile(self) -> None:
        assert slice_boxes(50, 40, 64, 64).tolist() == [[0, 0, 40, 50]]
        assert slice_boxes(50, 400, 64, 64, 0.0, 0.0)[:, [1, 3]].tolist() == [[0, 50]] * 7

    @pytest.mark.parametrize(
        ("h", "w", "s", "r"), [(4000, 6000, 640, 0.2), (2000, 3000, 512, 0.25), (777, 1234, 256, 0.1)]
    )
    def test_tiles_cover_the_image_at_full_size(self, h: int, w: int, s: int, r: float) -> None:
        boxes = slice_boxes(h, w, s, s, r, r)
        assert ((boxes[:, 2] - boxes[:, 0]) == s).all() and ((boxes[:, 3] - boxes[:, 1]) == s).all()
        assert boxes.min() == 0 and boxes[:, 2].max() == w and boxes[:, 3].max() == h
        covered = np.zeros((h, w), bool)
        for x1, y1, x2, y2 in boxes:
            covered[y1:y2, x1:x2] = True
        assert covered.all()
        xs = sorted(set(boxes[:, 0].tolist()))
        assert all(b - a <= s - int(r * s) for a, b in itertools.pairwise(xs))  # overlaps >= int(r * s)

    def test_bad_arguments(self) -> None:
        with pytest.raises(OptionError, match="overlap_height_ratio"):
            slice_boxes(100, 100, 50, 50, 1.0, 0.2)
        with pytest.raises(OptionError, match="slice_width"):
            slice_boxes(100, 100, 50, 0)


class TestBoxIos:
    def test_hand_values(self) -> None:
        a = [[0, 0, 10, 10]]
        b = [[5, 0, 10, 10], [5, 5, 15, 15], [20, 20, 30, 30], [3, 3, 3, 8]]
        # inside: 50 / 50; corner: 25 / 100; apart: 0; no area: 0 (not nan)
        assert box_ios(a, b).tolist() == [[1.0, 0.25, 0.0, 0.0]]

    def test_bad_shape(self) -> None:
        with pytest.raises(InputError, match="expected"):
            box_ios([[0, 0, 1]], [[0, 0, 1, 1]])


BIG, INSIDE, APART = [0, 0, 20, 20], [2, 2, 8, 8], [50, 50, 60, 60]


class TestMatchNms:
    def test_ios_removes_a_box_inside_iou_keeps_it(self) -> None:
        # IoU(BIG, INSIDE) = 36 / 400 = 0.09; IoS = 36 / 36 = 1
        assert match_nms([BIG, INSIDE, APART], [0.9, 0.8, 0.7], match_metric="IOS") == [0, 2]
        assert match_nms([BIG, INSIDE, APART], [0.9, 0.8, 0.7], match_metric="IOU") == [0, 1, 2]

    def test_threshold_is_inclusive(self) -> None:
        # IoU([0,0,10,10], [0,0,10,5]) = 50 / 100 = 0.5 exactly: a match at 0.5
        assert match_nms([[0, 0, 10, 10], [0, 0, 10, 5]], [0.9, 0.8], match_threshold=0.5) == [0]
        assert match_nms([[0, 0, 10, 10], [0, 0, 10, 5]], [0.9, 0.8], match_threshold=0.51) == [0, 1]

    def test_score_ties_break_by_x1_then_y1(self) -> None:
        assert match_nms([[5, 0, 15, 10], [0, 0, 10, 10]], [0.5, 0.5], match_threshold=0.3) == [1]
        assert match_nms([[0, 5, 10, 15], [0, 0, 10, 10]], [0.5, 0.5], match_threshold=0.3) == [1]

    def test_bad_metric(self) -> None:
        with pytest.raises(OptionError, match="postprocess_match_metric"):
            match_nms([BIG], [1.0], match_metric="GIOU")


class TestGreedyNmm:
    def test_groups_are_not_transitive(self) -> None:
        # A~B (IoU 50/150 = 0.33), B~C (0.33), A and C apart: greedy NMM gives C its own group
        boxes = [[0, 0, 10, 10], [5, 0, 15, 10], [10, 0, 20, 10]]
        assert greedy_nmm(boxes, [0.9, 0.8, 0.7], match_metric="IOU", match_threshold=0.3) == {0: [1], 2: []}

    def test_merged_best_first(self) -> None:
        boxes = [[0, 0, 10, 10], [1, 0, 11, 10], [0, 1, 10, 11], [40, 0, 50, 10]]
        assert greedy_nmm(boxes, [0.5, 0.9, 0.7, 0.6], match_metric="IOS") == {1: [2, 0], 3: []}


class TestMergePredictions:
    def test_greedy_nmm_union_max_score_class_of_best(self) -> None:
        b, s, src = merge_predictions(
            [[0, 0, 10, 10], [4, 0, 14, 10], [30, 0, 40, 10]], [0.6, 0.9, 0.5], [1, 1, 0], match_metric="IOS"
        )
        assert sorted(zip(b.tolist(), s.tolist(), src.tolist())) == [
            ([0.0, 0.0, 14.0, 10.0], 0.9, 1),  # IoS 60 / 100 >= 0.5: the union, the higher score, its class
            ([30.0, 0.0, 40.0, 10.0], 0.5, 2),
        ]

    def test_a_grown_box_is_matched_again_and_may_drop_a_member(self) -> None:
        # A=[0,0,10,10] .9, B=[3,0,13,10] .8 (IoU 70/130 = .54), C=[-4,0,6,10] .7 (IoU with A 60/140 = .43):
        # both in A's group at 0.4; after B the box is [0,0,13,10] and IoU with C is 60/170 = .35 < .4: C is dropped
        b, s, src = merge_predictions(
            [[0, 0, 10, 10], [3, 0, 13, 10], [-4, 0, 6, 10]],
            [0.9, 0.8, 0.7],
            [0, 0, 0],
            match_metric="IOU",
            match_threshold=0.4,
        )
        assert b.tolist() == [[0.0, 0.0, 13.0, 10.0]] and s.tolist() == [0.9] and src.tolist() == [0]

    def test_class_aware_and_agnostic(self) -> None:
        boxes, scores = [[0, 0, 10, 10], [1, 0, 11, 10]], [0.9, 0.8]
        kept = merge_predictions(boxes, scores, [0, 1])
        assert kept[0].tolist() == [[0.0, 0.0, 10.0, 10.0], [1.0, 0.0, 11.0, 10.0]] and kept[2].tolist() == [0, 1]
        merged = merge_predictions(boxes, scores, [0, 1], class_agnostic=True)
        assert merged[0].tolist() == [[0.0, 0.0, 11.0, 10.0]] and merged[2].tolist() == [0]

    def test_equal_scores_take_the_merged_ones_class(self) -> None:
        # SAHI's get_merged_category: the kept box's class only when its score is strictly higher
        _, _, src = merge_predictions([[0, 0, 10, 10], [1, 0, 11, 10]], [0.5, 0.5], [3, 4], class_agnostic=True)
        assert src.tolist() == [1]

    def test_nms_class_aware_best_first(self) -> None:
        b, s, src = merge_predictions(
            [[0, 0, 10, 10], [1, 0, 11, 10], [50, 0, 60, 10], [51, 0, 61, 10]],
            [0.6, 0.5, 0.9, 0.95],
            [0, 0, 1, 1],
            postprocess_type="NMS",
        )
        assert src.tolist() == [3, 0] and s.tolist() == [0.95, 0.6] and b.tolist()[0] == [51.0, 0.0, 61.0, 10.0]

    def test_empty(self) -> None:
        b, s, src = merge_predictions(np.zeros((0, 4)), [], [])
        assert b.shape == (0, 4) and s.shape == (0,) and src.shape == (0,)

    def test_bad_arguments(self) -> None:
        with pytest.raises(OptionError, match="postprocess_type"):
            merge_predictions([BIG], [1.0], [0], postprocess_type="NMM")
        with pytest.raises(OptionError, match="postprocess_match_threshold"):
            merge_predictions([BIG], [1.0], [0], match_threshold=1.5)
        with pytest.raises(InputError, match="same count"):
            merge_predictions([BIG], [1.0, 0.5], [0])
