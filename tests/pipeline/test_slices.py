"""Sliced inference (amdinfer.pipeline._slices): Tiles, MergeTiles, SlicedPipeline and yolo(tiles=...).

The truth is a made test set: large synthetic images (2,000-4,000 px) with 16-pixel squares planted at known boxes
(amdinfer.testing.squares), and a detector that provably finds squares of that size at its input scale. Sliced
inference must recover every planted box exactly, where the whole image letterboxed to 640 finds none of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import amdinfer
from amdinfer.errors import InputError, OptionError, StageInputError
from amdinfer.pipeline import MergeTiles, Pipeline, SlicedPipeline, SubPipeline, Tiles
from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
from amdinfer.preprocess import HwcToChw, Letterbox, LoadImage, Normalize
from amdinfer.reference import box_iou
from amdinfer.results import Detections
from amdinfer.stages import Sample
from amdinfer.testing.squares import planted_squares, square_detector

CPU = {"providers": ["CPUExecutionProvider"]}


@pytest.fixture(scope="module")
def detector() -> Iterator[object]:
    det = amdinfer.yolo(square_detector(image_size=640), **CPU)
    yield det
    det.close()


@pytest.fixture(scope="module")
def images() -> list[tuple[np.ndarray, np.ndarray]]:
    """Three large images with 16-pixel squares, plus two 75-pixel squares in the first (16 px at the whole-image
    scale 640 / 3000, so only the downscaled whole image finds them)."""
    sets = [planted_squares(2000, 3000, count=40, seed=1), planted_squares(4000, 2400, count=30, seed=2)]
    sets.append(planted_squares(2100, 2100, count=25, seed=3))
    return sets


def _big(image: np.ndarray) -> np.ndarray:
    out = image.copy()
    for x, y in ((300, 1500), (2600, 1700)):
        out[y : y + 75, x : x + 75] = 255
    return out


def _recall(truth: np.ndarray, found: Detections, iou: float = 0.99) -> float:
    if not len(found):
        return 0.0
    return float((box_iou(truth, found.boxes).max(axis=1) >= iou).mean())


class TestTiles:
    def test_pieces_are_the_crops_and_the_whole_image_last(self) -> None:
        image = np.arange(100 * 120 * 3, dtype=np.uint32).reshape(100, 120, 3).astype(np.uint8)
        out = Tiles(64, 64)(image)
        items = out.data.items
        assert [p.meta["tile"] for p in items[:-1]] == [tuple(b) for b in Tiles(64, 64).boxes(100, 120).tolist()]
        for p in items[:-1]:
            x1, y1, x2, y2 = p.meta["tile"]
            assert np.array_equal(p.data, image[y1:y2, x1:x2])
        assert items[-1].data is image and items[-1].meta["tile"] == (0, 0, 120, 100)
        assert out.meta["slices"] == {"image_shape": (100, 120), "tiles": len(items) - 1, "whole": True}

    def test_no_whole_image_when_asked_or_when_one_tile(self) -> None:
        assert len(Tiles(64, 64, perform_standard_pred=False)(np.zeros((100, 120, 3), np.uint8)).data) == 6  # 3 x 2
        assert len(Tiles(64, 64)(np.zeros((40, 50, 3), np.uint8)).data) == 1  # one tile: SAHI skips the whole image

    def test_cascade_form_crops_the_kept_picture(self) -> None:
        det = Detections([[0, 0, 4, 4]], [0.9], [0])
        out = Tiles(32, 32)(Sample(det, {"source_image": np.zeros((40, 70, 3), np.uint8)}))
        assert out.data.parent is det and out.meta["slices"]["whole"]
        assert all(p.meta["tile"] != (0, 0, 70, 40) for p in out.data.items)  # the parent is the whole-image answer

    def test_errors(self) -> None:
        with pytest.raises(OptionError, match="overlap_width_ratio"):
            Tiles(64, 64, overlap_width_ratio=-0.1)
        with pytest.raises(OptionError, match="perform_standard_pred"):
            Tiles(64, 64, perform_standard_pred=1)  # type: ignore[arg-type]
        with pytest.raises(InputError, match="source_image"):
            Tiles(64, 64)(Detections(np.zeros((0, 4)), [], []))
        with pytest.raises(InputError, match=r"\(H, W\[, C\]\)"):
            Tiles(64, 64)(np.zeros(5, np.uint8))


class TestMergeTiles:
    def test_shift_back_and_merge_the_overlap(self) -> None:
        # one square at x 100..116 seen whole by tile (64, 0) and cut by tile (0, 0) (its part x 100..110, y 20..36)
        pieces = [Sample(None, {"tile": (0, 0, 110, 64)}), Sample(None, {"tile": (64, 0, 174, 64)})]
        answers = [
            Detections([[100, 20, 110, 36]], [0.7], [0], ["square"]),
            Detections([[36, 20, 52, 36]], [0.6], [0], ["square"]),
        ]
        out = MergeTiles().gather(None, answers, pieces, {"slices": {"image_shape": (64, 174)}})
        assert out.boxes.tolist() == [[100.0, 20.0, 116.0, 36.0]]  # IoS 1: the union, the better score
        assert out.scores.tolist() == [pytest.approx(0.7)] and out.labels == ["square"]
        assert out.image_shape == (64, 174)
        nms = MergeTiles(postprocess_type="NMS").gather(None, answers, pieces, {"slices": {"image_shape": (64, 174)}})
        assert nms.boxes.tolist() == [[100.0, 20.0, 110.0, 36.0]]  # NMS keeps the best box as it is

    def test_parent_joins_only_as_the_whole_image_prediction(self) -> None:
        parent = Detections([[0, 0, 50, 50]], [0.8], [1])
        pieces, answers = [Sample(None, {"tile": (60, 0, 100, 40)})], [Detections([[0, 0, 10, 10]], [0.9], [0])]
        joined = MergeTiles().gather(parent, answers, pieces, {"slices": {"image_shape": (80, 100), "whole": True}})
        assert joined.boxes.tolist() == [[60.0, 0.0, 70.0, 10.0], [0.0, 0.0, 50.0, 50.0]]
        alone = MergeTiles().gather(parent, answers, pieces, {"slices": {"image_shape": (80, 100), "whole": False}})
        assert len(alone) == 1

    def test_errors(self) -> None:
        with pytest.raises(OptionError, match="postprocess_type"):
            MergeTiles(postprocess_type="LSNMS")
        with pytest.raises(OptionError, match="postprocess_class_agnostic"):
            MergeTiles(postprocess_class_agnostic="yes")  # type: ignore[arg-type]
        with pytest.raises(InputError, match="piece 0"):
            MergeTiles().gather(None, [np.zeros(3)], [Sample(None, {"tile": (0, 0, 1, 1)})], {})


class TestMadeTestSet:
    """Recall of the planted squares against their known boxes: sliced finds them all, exactly; whole-image none."""

    def test_whole_image_letterbox_misses_the_small_squares(self, detector, images) -> None:
        for image, truth in images:
            assert _recall(truth, detector(image), iou=0.5) == 0.0

    @pytest.mark.parametrize("merge", ["GREEDYNMM", "NMS"])
    def test_sliced_recovers_every_square_exactly(self, detector, images, merge: str) -> None:
        sliced = SlicedPipeline(detector, tiles=Tiles(640, 640), merge=MergeTiles(postprocess_type=merge))
        for (image, truth), found in zip(images, sliced.run_batch([im for im, _ in images])):
            assert _recall(truth, found) == 1.0
            assert len(found) == len(truth)  # no duplicates across tiles, no false positives
            assert found.image_shape == image.shape[:2] and found.image is image

    def test_the_whole_image_pass_keeps_objects_larger_than_a_tile_sees(self, detector, images) -> None:
        image, truth = images[0]
        image = _big(image)
        big = np.array([[300, 1500, 375, 1575], [2600, 1700, 2675, 1775]], np.float32)
        with_whole = SlicedPipeline(detector, tiles=Tiles(640, 640))(image)
        tiles_only = SlicedPipeline(detector, tiles=Tiles(640, 640, perform_standard_pred=False))(image)
        assert _recall(truth, with_whole) == 1.0 and _recall(truth, tiles_only) == 1.0
        assert _recall(big, with_whole, iou=0.5) == 1.0 and _recall(big, tiles_only, iou=0.5) == 0.0
        assert len(with_whole) == len(truth) + 2 and len(tiles_only) == len(truth)

    def test_recipe_call_map_and_cascade_agree(self, images) -> None:
        image, truth = images[2]
        sliced = amdinfer.yolo(square_detector(image_size=640), tiles=(640, 640), tile_overlap=0.2, **CPU)
        try:
            one = sliced(image)
            (mapped,) = list(sliced.map([image], batch_size=4, workers=2))
        finally:
            sliced.close()
        stages = [LoadImage(), Letterbox((640, 640)), Normalize(scale=1 / 255), HwcToChw()]
        post = [YoloDecode(conf_threshold=0.25), Nms(iou_threshold=0.7, class_offset=7680), ScaleBoxes()]
        inner = Pipeline(preprocess=stages, engine=square_detector(image_size=640), postprocess=post, **CPU)
        outer = Pipeline(
            preprocess=stages,
            engine=square_detector(image_size=640),
            postprocess=[*post, SubPipeline(inner, fan_out=Tiles(640, 640), gather=MergeTiles(), batch_size=8)],
            keep_image=True,
            **CPU,
        )
        try:
            cascade = outer(image)
        finally:
            outer.close()
            inner.close()
        assert _recall(truth, one) == 1.0
        for other in (mapped, cascade):
            assert np.array_equal(other.boxes, one.boxes) and np.array_equal(other.scores, one.scores)

    def test_map_streams_many_images_in_order(self, detector, images) -> None:
        sliced = SlicedPipeline(detector, tiles=Tiles(640, 640))
        got = list(sliced.map([im for im, _ in images], batch_size=8, workers=2))
        assert [_recall(t, d) for (_, t), d in zip(images, got)] == [1.0, 1.0, 1.0]


class TestSlicedPipelineErrors:
    def test_bad_arguments(self, detector) -> None:
        with pytest.raises(OptionError, match="detector"):
            SlicedPipeline(object(), tiles=Tiles(64, 64))
        with pytest.raises(OptionError, match="tiles"):
            SlicedPipeline(detector, tiles=(64, 64))  # type: ignore[arg-type]
        with pytest.raises(OptionError, match="tiles"):
            amdinfer.yolo(square_detector(image_size=64), tiles="big", **CPU)
        with pytest.raises(OptionError, match="tile_merge"):
            amdinfer.yolo(square_detector(image_size=64), tiles=64, tile_merge=3, **CPU)
        with pytest.raises(OptionError, match="postprocess_type"):
            amdinfer.yolo(square_detector(image_size=64), tiles=64, tile_merge="NMM", **CPU)

    def test_a_bad_image_names_its_index(self, detector) -> None:
        sliced = SlicedPipeline(detector, tiles=Tiles(640, 640))
        with pytest.raises(StageInputError, match="item 1"):
            sliced.run_batch([np.zeros((700, 700, 3), np.uint8), np.zeros((5, 5, 7), np.uint8)])


class _Recorder:
    """A detector wrapper that records the shapes of the pieces it is given (and answers with the detector)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.shapes = inner, []
        self.preprocess = inner.preprocess  # type: ignore[attr-defined]
        self._keep_image = False

    def run_batch(self, items):
        items = list(items)
        self.shapes.extend(np.asarray(x).shape for x in items)
        return self.inner.run_batch(items)  # type: ignore[attr-defined]

    def map(self, items, **kw):
        def seen():
            for x in items:
                self.shapes.append(np.asarray(x).shape)
                yield x

        return self.inner.map(seen(), **kw)  # type: ignore[attr-defined]


def test_whole_image_piece_is_letterboxed_to_the_tiles_size_and_answers_as_the_image() -> None:
    """The whole-image piece reaches the detector at its input size (as the tiles: one batch shape), and its
    boxes, mapped back through the canvas's geometry, are the detector's own answer on the image (the truth: the
    detector run on the whole image directly)."""
    from amdinfer.testing.models import yolov8

    det = amdinfer.yolo(yolov8(image_size=128, num_classes=3, seed=0), conf=0.01, **CPU)
    try:
        image = np.random.default_rng(5).integers(0, 255, (300, 500, 3), dtype=np.uint8)
        rec = _Recorder(det)
        sliced = SlicedPipeline(rec, tiles=Tiles(128, 128))
        sliced.run_batch([image])
        assert set(rec.shapes) == {(128, 128, 3)}  # tiles and the whole image alike
        rec.shapes.clear()
        list(sliced.map([image, image], batch_size=8))
        assert set(rec.shapes) == {(128, 128, 3)}
        direct = det(image)
        _, pieces = sliced._split(0, image)
        answers = det.run_batch([p.data for p in pieces.items])
        mapped = ScaleBoxes()(Sample(answers[-1], dict(pieces.items[-1].meta["whole_letterbox"]))).data
        assert len(direct) > 0 and len(mapped) == len(direct)
        np.testing.assert_allclose(mapped.boxes, direct.boxes, rtol=0, atol=1e-3)
        np.testing.assert_array_equal(mapped.classes, direct.classes)
        np.testing.assert_allclose(mapped.scores, direct.scores, rtol=0, atol=1e-6)
    finally:
        det.close()


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[object, object]]:
    """A square detector fused with ``image_size=(320, 320)``, and the pipeline it was fused from."""
    pipe = amdinfer.yolo(square_detector(image_size=320), fuse=False, **CPU)
    fused = pipe.fuse(image_size=(320, 320))
    assert fused.image_size == (320, 320) and not any(isinstance(s, Letterbox) for s in fused._host)
    yield fused, pipe
    fused.close()
    pipe.close()


class TestFixedSizeFusedDetector:
    """A detector fused with ``image_size`` (its letterbox inside the graph) takes pictures of that size only: the
    whole image, and the tiles of an image smaller than a tile, are letterboxed to it on the host (issue 41). The
    truths: the planted squares, and the same model sliced stage by stage (its host ``Letterbox``)."""

    def test_answers_the_planted_squares_and_the_stage_by_stage_slicing(self, pair) -> None:
        fused, pipe = pair
        planted = [planted_squares(700, 900, count=5, seed=1), planted_squares(500, 640, count=3, seed=2)]
        small = planted_squares(200, 250, count=2, seed=3)[0]  # one tile, smaller than the detector's 320
        wide = planted_squares(200, 900, count=3, seed=4)[0]  # tiles 200 pixels high
        images = [image for image, _ in planted] + [small, wide]
        sliced = SlicedPipeline(fused, tiles=Tiles(320, 320))
        want = SlicedPipeline(pipe, tiles=Tiles(320, 320)).run_batch(images)
        for got in (sliced.run_batch(images), list(sliced.map(images, batch_size=4))):
            for (_, boxes), g in zip(planted, got):
                assert sorted(g.boxes.tolist()) == sorted(boxes.tolist())  # every planted square, exact
            for g, w in zip(got, want):
                assert g.image_shape == w.image_shape
                np.testing.assert_allclose(g.boxes, w.boxes, rtol=0, atol=1e-3)
                np.testing.assert_array_equal(g.classes, w.classes)
        assert len(want[3]) > 0  # the 200-pixel-high tiles find squares: compared above, not vacuously

    def test_tiles_of_another_size_and_a_bad_letterbox_are_refused(self, pair) -> None:
        fused, _ = pair
        with pytest.raises(OptionError, match=r"^tiles: got 256x256 for a FusedPipeline fused with image_size="
                                              r"\(320, 320\), expected tiles of that size"):  # fmt: skip
            SlicedPipeline(fused, tiles=Tiles(256, 256))
        with pytest.raises(OptionError, match=r"^letterbox: got Resize, expected an amdinfer.preprocess.Letterbox"):
            from amdinfer.preprocess import Resize

            SlicedPipeline(fused, tiles=Tiles(320, 320), letterbox=Resize((320, 320)))
