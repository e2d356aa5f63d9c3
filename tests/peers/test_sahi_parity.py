"""Sliced inference against SAHI 0.12.8 itself (opt-in: ``nox -s sahi``; skipped where ``sahi`` is not installed).

* the tiles: :func:`amdinfer.reference.slice_boxes` against ``sahi.slicing.get_slice_bboxes``;
* the merge: :func:`amdinfer.reference.merge_predictions` against ``sahi.postprocess.combine``'s
  ``GreedyNMMPostprocess`` / ``NMSPostprocess`` on the same predictions (every metric, per class and agnostic);
* the whole path: :class:`amdinfer.pipeline.SlicedPipeline` against ``sahi.predict.get_sliced_prediction`` driving the
  same amdinfer detector (a SAHI ``DetectionModel`` around it), on the same images: the made test set of planted
  squares, and a random-weight YOLOv8 whose many overlapping boxes exercise the merge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

sahi = pytest.importorskip("sahi", reason="the sahi peer runs in `nox -s sahi` (pip install sahi==0.12.8)")

from sahi.models.base import DetectionModel  # noqa: E402
from sahi.postprocess.combine import GreedyNMMPostprocess, NMSPostprocess  # noqa: E402
from sahi.predict import get_sliced_prediction  # noqa: E402
from sahi.prediction import ObjectPrediction  # noqa: E402
from sahi.slicing import get_slice_bboxes  # noqa: E402

import amdinfer  # noqa: E402
from amdinfer.pipeline import MergeTiles, SlicedPipeline, Tiles  # noqa: E402
from amdinfer.reference import merge_predictions, slice_boxes  # noqa: E402
from amdinfer.testing.models import yolov8  # noqa: E402
from amdinfer.testing.squares import planted_squares, square_detector  # noqa: E402

CPU = {"providers": ["CPUExecutionProvider"]}
MERGES = [
    (t, m, th, a) for t in ("GREEDYNMM", "NMS") for m in ("IOS", "IOU") for th in (0.3, 0.5) for a in (False, True)
]


@pytest.mark.parametrize(
    ("h", "w", "sh", "sw", "rh", "rw"),
    [
        (4000, 6000, 640, 640, 0.2, 0.2),
        (2000, 3000, 512, 768, 0.25, 0.1),
        (777, 1234, 256, 256, 0.0, 0.5),
        (500, 400, 640, 640, 0.2, 0.2),
        (1000, 1000, 1000, 1000, 0.2, 0.2),
        (1001, 999, 100, 333, 0.33, 0.67),
    ],
)
def test_tiles_equal_sahi(h: int, w: int, sh: int, sw: int, rh: float, rw: float) -> None:
    want = get_slice_bboxes(h, w, sh, sw, False, rh, rw)
    assert slice_boxes(h, w, sh, sw, rh, rw).tolist() == want
    assert Tiles(sh, sw, overlap_height_ratio=rh, overlap_width_ratio=rw).boxes(h, w).tolist() == want


def _predictions(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> list[ObjectPrediction]:
    return [
        ObjectPrediction(bbox=b.tolist(), category_id=int(c), category_name=str(c), score=float(s))
        for b, s, c in zip(boxes, scores, classes)
    ]


def _sahi_answers(preds: list[ObjectPrediction]) -> list[tuple[list[float], float, int]]:
    return sorted((list(map(float, p.bbox.to_xyxy())), float(p.score.value), int(p.category.id)) for p in preds)


def _close(a: list[tuple[list[float], float, int]], b: list[tuple[list[float], float, int]], atol: float) -> bool:
    return len(a) == len(b) and all(
        np.allclose(x[0], y[0], atol=atol) and abs(x[1] - y[1]) <= 1e-6 and x[2] == y[2] for x, y in zip(a, b)
    )


@pytest.mark.parametrize(("kind", "metric", "threshold", "agnostic"), MERGES)
@pytest.mark.parametrize("seed", range(4))
def test_merge_equals_sahi_postprocess(kind: str, metric: str, threshold: float, agnostic: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 120
    xy = rng.integers(0, 300, (n, 2))
    wh = rng.integers(5, 60, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float64)  # whole pixels: both sides' sums are exact
    scores = rng.permutation(n) / n * 0.9 + 0.05  # distinct
    classes = rng.integers(0, 3, n)
    post = (GreedyNMMPostprocess if kind == "GREEDYNMM" else NMSPostprocess)(
        match_threshold=threshold, match_metric=metric, class_agnostic=agnostic
    )
    want = _sahi_answers(post(_predictions(boxes, scores, classes)))
    b, s, src = merge_predictions(
        boxes, scores, classes, postprocess_type=kind, match_metric=metric, match_threshold=threshold,
        class_agnostic=agnostic,
    )  # fmt: skip
    got = sorted((row.tolist(), float(v), int(classes[i])) for row, v, i in zip(b, s, src))
    assert got == want


class AmdinferDetection(DetectionModel):  # type: ignore[misc]
    """SAHI's model interface around an amdinfer detector: SAHI slices and merges, amdinfer answers each piece."""

    def __init__(self, detector: Any, names: dict[str, str]) -> None:
        super().__init__(model=detector, confidence_threshold=0.25, category_mapping=names, load_at_init=True)

    def check_dependencies(self, packages: Any = None) -> None:
        pass

    def set_model(self, model: Any, **kwargs: Any) -> None:
        self.model = model

    def perform_inference(self, image: np.ndarray) -> None:
        self._original_predictions = self.model(image)

    def _create_object_prediction_list_from_original_predictions(
        self, shift_amount_list: Any = None, full_shape_list: Any = None
    ) -> None:
        shift = shift_amount_list[0] if shift_amount_list and isinstance(shift_amount_list[0], list) else [0, 0]
        full = full_shape_list[0] if full_shape_list and isinstance(full_shape_list[0], list) else full_shape_list
        det = self._original_predictions
        self._object_prediction_list_per_image = [
            [
                ObjectPrediction(
                    bbox=b.tolist(),
                    category_id=int(c),
                    category_name=self.category_mapping[str(int(c))],
                    score=float(s),
                    shift_amount=list(shift),
                    full_shape=full,
                )
                for b, s, c in zip(det.boxes, det.scores, det.classes)
            ]
        ]


@pytest.fixture(scope="module")
def squares() -> Iterator[Any]:
    det = amdinfer.yolo(square_detector(image_size=640), **CPU)
    yield det
    det.close()


@pytest.fixture(scope="module")
def random_yolo() -> Iterator[Any]:
    det = amdinfer.yolo(yolov8(image_size=256, num_classes=3, seed=0), conf=0.1, **CPU)
    yield det
    det.close()


def _both(detector: Any, image: np.ndarray, size: int, merge: MergeTiles, standard: bool, names: dict[str, str]):
    tiles = Tiles(size, size, overlap_height_ratio=0.2, overlap_width_ratio=0.2, perform_standard_pred=standard)
    ours = SlicedPipeline(detector, tiles=tiles, merge=merge)(image)
    theirs = get_sliced_prediction(
        image,
        AmdinferDetection(detector, names),
        slice_height=size,
        slice_width=size,
        overlap_height_ratio=0.2,
        overlap_width_ratio=0.2,
        perform_standard_pred=standard,
        postprocess_type=merge.postprocess_type,
        postprocess_match_metric=merge.postprocess_match_metric,
        postprocess_match_threshold=merge.postprocess_match_threshold,
        postprocess_class_agnostic=merge.postprocess_class_agnostic,
        verbose=0,
        force_postprocess_type=True,
    )
    got = sorted((row.tolist(), float(s), int(c)) for row, s, c in zip(ours.boxes, ours.scores, ours.classes))
    return got, _sahi_answers(theirs.object_prediction_list)


@pytest.mark.parametrize("kind", ["GREEDYNMM", "NMS"])
@pytest.mark.parametrize("standard", [True, False])
def test_sliced_squares_equal_sahi(squares: Any, kind: str, standard: bool) -> None:
    image, truth = planted_squares(2000, 3000, count=40, seed=1)
    image[1500:1575, 300:375] = 255  # a large square only the whole-image pass finds
    got, want = _both(squares, image, 640, MergeTiles(postprocess_type=kind), standard, {"0": "square"})
    assert _close(got, want, atol=1e-3)
    assert len(got) == len(truth) + (1 if standard else 0)


@pytest.mark.parametrize(("kind", "metric", "threshold", "agnostic"), MERGES[::3])
def test_sliced_random_yolo_equals_sahi(
    random_yolo: Any, kind: str, metric: str, threshold: float, agnostic: bool
) -> None:
    image = np.random.default_rng(5).integers(0, 256, (700, 900, 3), dtype=np.uint8)
    merge = MergeTiles(
        postprocess_type=kind,
        postprocess_match_metric=metric,
        postprocess_match_threshold=threshold,
        postprocess_class_agnostic=agnostic,
    )
    got, want = _both(random_yolo, image, 256, merge, True, {"0": "a", "1": "b", "2": "c"})
    assert len(want) > 5  # the merge had work to do
    assert _close(got, want, atol=1e-3)
