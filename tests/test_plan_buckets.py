"""``plan_buckets``: the buckets that minimise padding waste for a histogram of shapes, against hand-computed
answers. Cost: sum over fed shapes of count x (elements of the bucket it runs in - its own elements)."""

from __future__ import annotations

import itertools
import math

import pytest

from amdinfer.engines._plan import plan_buckets
from amdinfer.errors import OptionError


def test_batch_sizes_1_1_3_7_8_with_two_buckets() -> None:
    # 8 must be a bucket (only it holds 8); by hand, for the other one:
    #   {1, 8}: 3->8 (5) + 7->8 (1) = 6;  {3, 8}: 1->3 twice (4) + 7->8 (1) = 5;
    #   {7, 8}: 1->7 twice (12) + 3->7 (4) = 16
    plan = plan_buckets([1, 1, 3, 7, 8], max_buckets=2)
    assert plan.shapes == ((3,), (8,)) and plan.batch_sizes == (3, 8)
    assert plan.waste == 5 and plan.fed == 20 and plan.overhead == 0.25


def test_one_bucket_is_the_largest_and_enough_buckets_waste_nothing() -> None:
    assert plan_buckets([1, 1, 3, 7, 8], max_buckets=1).shapes == ((8,),)
    assert plan_buckets([1, 1, 3, 7, 8], max_buckets=1).waste == 7 + 7 + 5 + 1
    full = plan_buckets([1, 1, 3, 7, 8], max_buckets=9)
    assert full.shapes == ((1,), (3,), (7,), (8,)) and full.waste == 0  # no more buckets than sizes


def test_counts_weigh_and_other_axes_multiply_the_waste() -> None:
    # rows of 3x32 = 96 elements: {2,16}: 10 x 1 row = 960; {1,16}: 1 x 14 rows = 1344
    plan = plan_buckets({(1, 3, 32): 10, (2, 3, 32): 1, (16, 3, 32): 1}, max_buckets=2)
    assert plan.shapes == ((2, 3, 32), (16, 3, 32)) and plan.waste == 960


def test_matches_an_exhaustive_search_on_the_batch_axis() -> None:
    hist = {1: 50, 2: 7, 3: 9, 5: 4, 6: 1, 9: 3, 12: 8, 13: 1, 31: 2, 32: 6}
    sizes = sorted(hist)
    for k in (2, 3, 4):
        best = min(
            sum(n * (min(b for b in (*combo, 32) if b >= s) - s) for s, n in hist.items())
            for combo in itertools.combinations(sizes[:-1], k - 1)
        )
        assert plan_buckets(hist, max_buckets=k).waste == best


def test_shapes_that_differ_on_an_unbucketed_axis_get_their_own_buckets() -> None:
    # group W=5: {2}: 3 rows x 5 = 15, or {1,2}: 0. group W=7: {4}: 2 x 3 rows x 7 = 42, or {1,4}: 0
    # 3 buckets: give the second to W=7 (saves 42), not W=5 (saves 15)
    plan = plan_buckets({(1, 5): 3, (2, 5): 1, (1, 7): 2, (4, 7): 1}, max_buckets=3)
    assert plan.shapes == ((1, 7), (2, 5), (4, 7)) and plan.waste == 15
    with pytest.raises(OptionError, match="2 groups that differ on axes that are not bucketed"):
        plan_buckets({(1, 5): 3, (1, 7): 2}, max_buckets=1)


def test_spatial_axes_when_asked() -> None:
    # (8,8) x2, (8,16), (16,16) with 2 buckets over axes 2,3; (16,16) must be one of them
    shapes = [(1, 3, 8, 8), (1, 3, 8, 8), (1, 3, 8, 16), (1, 3, 16, 16)]
    plan = plan_buckets(shapes, max_buckets=2, axes=(2, 3))
    # {(8,8), (16,16)}: (8,16)->(16,16) = 3*(256-128) = 384; {(8,16),(16,16)}: two (8,8)->(8,16) = 2*3*64 = 384;
    # both tie at 384 (and a single bucket wastes 2*3*192 + 3*128 = 1536)
    assert plan.waste == 384 and plan.shapes[-1] == (1, 3, 16, 16)
    assert plan.fed == 3 * (64 + 64 + 128 + 256) and math.isclose(plan.overhead, 0.25)


@pytest.mark.parametrize(
    ("observed", "kwargs", "match"),
    [
        ([], {}, "got none"),
        ([(1, 2), (1, 2, 3)], {}, "ranks"),
        ([1, 2], {"max_buckets": 0}, "max_buckets"),
        ([(1, 2)], {"axes": (2,)}, "axes"),
        ([(0, 2)], {}, "dims >= 1"),
    ],
)
def test_bad_input_is_an_option_error(observed, kwargs, match) -> None:
    with pytest.raises(OptionError, match=match):
        plan_buckets(observed, **kwargs)
