"""SegmentationMap: its run-length encoding against pycocotools' (the COCO reference), the JSON and tensor round
trips, areas and summary rows against NumPy counts, the overlay's pixels by hand, and the errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amdinfer.errors import InputError, OptionError
from amdinfer.results import PALETTE, SegmentationMap
from amdinfer.results._segmap import rle_decode, rle_encode


def _classes(seed: int, shape: tuple[int, int] = (23, 31), k: int = 4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, k, (shape[0] // 4 + 1, shape[1] // 4 + 1))
    return np.kron(small, np.ones((4, 4), np.int64))[: shape[0], : shape[1]]


@pytest.mark.parametrize("seed", range(4))
def test_rle_is_cocos(seed: int) -> None:
    mask_utils = pytest.importorskip("pycocotools.mask")
    classes = _classes(seed)
    for c in range(4):
        mask = classes == c
        ours = rle_encode(mask)
        theirs = mask_utils.frPyObjects(ours, *ours["size"])  # COCO reads our uncompressed counts
        np.testing.assert_array_equal(mask_utils.decode(theirs).astype(bool), mask)
        assert int(mask_utils.area(theirs)) == int(mask.sum())
        np.testing.assert_array_equal(rle_decode(ours), mask)


def test_rle_edge_cases() -> None:
    assert rle_encode(np.ones((2, 2), bool))["counts"] == [0, 4]
    assert rle_encode(np.zeros((1, 3), bool))["counts"] == [3]
    with pytest.raises(InputError, match="H \\* W"):
        rle_decode({"size": [2, 2], "counts": [1, 1]})
    with pytest.raises(InputError, match="rle_decode"):
        rle_decode({"counts": [4]})


def test_json_and_tensor_round_trips() -> None:
    classes = _classes(1)
    probs = np.random.default_rng(0).random((4, *classes.shape)).astype(np.float32)
    seg = SegmentationMap(classes, probabilities=probs, labels=["a", "b", "c", "d"])
    back = SegmentationMap.from_dict(json.loads(seg.to_json(orient="columns")))
    np.testing.assert_array_equal(back.classes, classes)
    assert back.labels == seg.labels and back.num_classes == 4
    again = SegmentationMap.from_tensors(seg.to_tensors())
    np.testing.assert_array_equal(again.probabilities, probs)
    assert again.labels == seg.labels


def test_areas_counts_and_summary() -> None:
    classes = _classes(2)
    seg = SegmentationMap(classes, labels=["a", "b", "c", "d"])
    want = np.bincount(classes.ravel(), minlength=4)
    assert seg.counts.tolist() == want.tolist()
    assert seg.area("c") == want[2] and seg.area(2, normalize=True) == want[2] / classes.size
    rows = seg.summary(normalize=True, decimals=4)
    assert [r["class"] for r in rows] == [c for c in range(4) if want[c]]
    assert all(r["confidence"] is None for r in rows)
    assert abs(sum(r["area"] for r in rows) - 1) < 1e-3
    assert seg.to_csv().splitlines()[0] == "name,class,area,confidence"
    assert repr(seg).startswith("SegmentationMap(23x31, 4 classes: ")


def test_overlay_by_hand() -> None:
    image = np.full((2, 2, 3), 100, np.uint8)
    seg = SegmentationMap([[0, 1], [1, 0]], image=image)
    out = seg.plot(alpha=0.25)
    want = np.rint(0.25 * np.array(PALETTE[1], np.float32) + 0.75 * 100).astype(np.uint8)
    assert out[0, 1].tolist() == want.tolist()
    assert seg.colors()[1, 0].tolist() == list(PALETTE[1])
    with pytest.raises(OptionError, match="alpha"):
        seg.plot(alpha=2)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (([[0, 1]],), {"labels": ["a", "b"], "num_classes": 3}, "labels, probabilities and num_classes"),
        (([[0, 1]],), {"labels": ["a"]}, "expected < 1"),
        (([[0.5, 1]],), {}, "classes: got float"),
        (([0, 1],), {}, "expected integer \\(H, W\\)"),
        (([[0, -1]],), {}, "indices >= 0"),
        (([[0, 3]],), {"num_classes": 2}, "expected < 2"),
        (([[0, 1]],), {"probabilities": np.zeros((2, 1, 3))}, "probabilities: got shape"),
        (([[0, 1]],), {"image": np.zeros((2, 2, 3), np.uint8)}, "image: got size"),
    ],
)
def test_bad_values_are_input_errors(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        SegmentationMap(*args, **kwargs)


def test_masks_that_overlap_are_refused() -> None:
    data = SegmentationMap([[0, 1]]).to_dict()
    data["rle"]["1"] = {"size": [1, 2], "counts": [0, 2]}
    with pytest.raises(InputError, match="every pixel once"):
        SegmentationMap.from_dict(data)
    with pytest.raises(InputError, match="expected one of"):
        SegmentationMap([[0, 1]]).mask("cat")
