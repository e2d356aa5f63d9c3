"""Results like Ultralytics' (issue 22, item 3): the kept image, ``plot()``/``save()``/``_repr_png_``, ``len``/
indexing/iteration/``to_json()``, and the recipes' ``__call__`` on lists, Pillow images, paths, globs and
folders.

Truths: box outlines computed by hand on a blank image, Pillow as the peer decoder of what is written, the
arrays themselves for indexing, and the array answers of the same pipeline for every other kind of source.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from _trained import DATA, PAGES, model_path, needs_model, page

import amdinfer
from amdinfer.errors import BackendUnavailableError, InputError, OptionError, StageInputError
from amdinfer.results import PALETTE, Classification, Detection, Detections, _draw
from amdinfer.testing.models import tiny_cnn, yolov8

Image = pytest.importorskip("PIL.Image")

CPU = {"providers": ["CPUExecutionProvider"]}


def _outline(shape: tuple[int, int], box: tuple[int, int, int, int], t: int) -> np.ndarray:
    """The pixels of a ``t``-wide rectangle outline, by hand: rows y1..y1+t-1 and y2-t+1..y2 over x1..x2,
    columns x1..x1+t-1 and x2-t+1..x2 over y1..y2."""
    x1, y1, x2, y2 = box
    mask = np.zeros(shape, bool)
    mask[y1 : y1 + t, x1 : x2 + 1] = True
    mask[y2 - t + 1 : y2 + 1, x1 : x2 + 1] = True
    mask[y1 : y2 + 1, x1 : x1 + t] = True
    mask[y1 : y2 + 1, x2 - t + 1 : x2 + 1] = True
    return mask


def _det(image: np.ndarray | None = None) -> Detections:
    return Detections(
        [[5, 6, 30, 20], [40, 25, 55, 38]], [0.9, 0.4], [0, 3], labels=["cat", "dog"], image_shape=(40, 60), image=image
    )


def _decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im)


# ---------------------------------------------------------------------------------------------- plot / save / png
class TestPlot:
    def test_boxes_land_exactly_on_their_edges(self) -> None:
        blank = np.zeros((40, 60, 3), np.uint8)
        out = _det(blank).plot(thickness=2, text=False)
        first, second = _outline((40, 60), (5, 6, 30, 20), 2), _outline((40, 60), (40, 25, 55, 38), 2)
        np.testing.assert_array_equal(out[first], np.tile(PALETTE[0], (first.sum(), 1)))
        np.testing.assert_array_equal(out[second], np.tile(PALETTE[3], (second.sum(), 1)))
        assert not out[~(first | second)].any()
        assert not blank.any()  # the kept image is left alone

    def test_default_width_is_ultralytics_rule(self) -> None:
        blank = np.zeros((1000, 1000, 3), np.uint8)  # max(round(1000 * 0.003), 2) = 3
        out = Detections([[100, 200, 500, 600]], [0.5], [1], image=blank).plot(text=False)
        mask = _outline((1000, 1000), (100, 200, 500, 600), 3)
        assert (out[mask] == PALETTE[1]).all() and not out[~mask].any()

    def test_labels_are_written_above_each_box(self) -> None:
        det = _det(np.zeros((40, 60, 3), np.uint8))
        boxes_only = det.plot(thickness=1, text=False)
        labelled = det.plot(thickness=1)
        changed = np.argwhere((labelled != boxes_only).any(axis=2))
        assert len(changed)
        for y, x in changed:  # every written pixel is in a label: at or right of a box's x1, above its y1 + text
            assert any(x >= bx1 and y <= by1 + 16 for bx1, by1 in ((5, 6), (40, 25))), (y, x)

    def test_classification_writes_topk_in_the_corner(self) -> None:
        blank = np.zeros((80, 120, 3), np.uint8)
        c = Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"], image=blank)
        out = c.plot()
        rows, cols = np.nonzero(out.any(axis=2))
        assert len(rows) and rows.max() < 45 and cols.min() >= 2 and not blank.any()
        one = Classification([3], [0.7], labels=["cat"], image=blank).plot()
        assert np.nonzero(one.any(axis=2))[0].max() < rows.max()  # one line is shorter than two

    def test_without_an_image_says_how_to_get_one(self, tmp_path: Path) -> None:
        for call in (_det().plot, lambda: _det().save(tmp_path / "x.png"), Classification([1], [1.0]).plot):
            with pytest.raises(InputError, match=r"keeps no image .*amdinfer\.yolo or amdinfer\.classify"):
                call()
        assert _det()._repr_png_() is None and "<table>" in (_det()._repr_html_() or "")

    def test_image_is_checked(self) -> None:
        with pytest.raises(InputError, match=r"image: got size \(10, 10\), expected \(40, 60\)"):
            _det(np.zeros((10, 10, 3), np.uint8))
        with pytest.raises(InputError, match=r"image: got float32 \(4, 4, 3\), expected a uint8"):
            Classification([1], [1.0], image=np.zeros((4, 4, 3), np.float32))
        assert Detections([[0, 0, 1, 1]], [1], [0], image=np.zeros((7, 9, 3), np.uint8)).image_shape == (7, 9)


class TestSave:
    def test_png_round_trips_to_plot(self, tmp_path: Path) -> None:
        det = _det(np.full((40, 60, 3), 90, np.uint8))
        path = det.save(tmp_path / "det.png")
        assert path == tmp_path / "det.png"
        np.testing.assert_array_equal(_decode(path.read_bytes()), det.plot())
        c = Classification([0], [1.0], image=np.full((32, 48, 3), 50, np.uint8))
        np.testing.assert_array_equal(_decode(c.save(tmp_path / "c.PNG").read_bytes()), c.plot())

    def test_zlib_png_without_pillow_decodes_the_same(self) -> None:
        rng = np.random.default_rng(0)
        for image in (rng.integers(0, 255, (17, 23, 3), dtype=np.uint8), rng.integers(0, 255, (5, 9), dtype=np.uint8)):
            np.testing.assert_array_equal(_decode(_draw.png_bytes(image, pillow=False)), image)

    def test_jpeg_with_pillow_and_with_opencv(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        yy, xx = np.mgrid[0:48, 0:64]
        base = np.stack([xx * 4, yy * 5, 255 - xx * 2], axis=2).astype(np.uint8)  # smooth: JPEG keeps it close
        det = Detections([[4, 4, 40, 30]], [0.8], [2], image=base)
        want = det.plot().astype(np.int16)
        got = _decode(det.save(tmp_path / "a.jpg").read_bytes()).astype(np.int16)
        assert got.shape == want.shape and np.abs(got - want)[36:].mean() < 3  # below the box: smooth, close
        peer = io.BytesIO()
        Image.fromarray(det.plot()).save(peer, format="JPEG", quality=95)
        assert (tmp_path / "a.jpg").read_bytes() == peer.getvalue()  # Pillow at quality 95
        pytest.importorskip("cv2")
        monkeypatch.setattr(_draw, "_have", lambda m: m != "PIL")  # OpenCV only
        data = _draw.encode(det.plot(), ".jpeg", "'b.jpeg'")
        assert np.abs(_decode(data).astype(np.int16) - want)[36:].mean() < 3  # RGB order kept through OpenCV

    def test_errors_name_the_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        det = _det(np.zeros((40, 60, 3), np.uint8))
        with pytest.raises(OptionError, match=r"path '.*det\.gif': got suffix '\.gif', expected one of \.png"):
            det.save(tmp_path / "det.gif")
        with pytest.raises(OptionError, match=r"path: cannot write '.*nowhere/det\.png'"):
            det.save(tmp_path / "nowhere" / "det.png")
        monkeypatch.setattr(_draw, "_have", lambda m: False)
        with pytest.raises(BackendUnavailableError, match=r"path '.*x\.jpg': writing JPEG needs Pillow or OpenCV"):
            _draw.encode(np.zeros((4, 4, 3), np.uint8), ".jpg", repr(str(tmp_path / "x.jpg")))
        assert not list(tmp_path.iterdir())  # nothing half-written


class TestNotebook:
    def test_png_repr_is_plot(self) -> None:
        det = _det(np.full((40, 60, 3), 200, np.uint8))
        np.testing.assert_array_equal(_decode(det._repr_png_() or b""), det.plot())
        assert det._repr_html_() is None  # Jupyter shows the picture, not the table
        c = Classification([2, 0], [0.6, 0.3], image=np.zeros((40, 60, 3), np.uint8))
        np.testing.assert_array_equal(_decode(c._repr_png_() or b""), c.plot())
        assert c._repr_html_() is None and "<table>" in (Classification([2], [0.6])._repr_html_() or "")


# ---------------------------------------------------------------------------------------------- sequence, json
class TestSequence:
    def test_len_index_iter_against_the_arrays(self) -> None:
        image = np.zeros((40, 60, 3), np.uint8)
        det = _det(image)
        assert len(det) == 2
        for i, d in enumerate(det):
            assert d == det[i] == det[i - 2]
            assert d.box == tuple(float(v) for v in det.boxes[i]) and d.score == float(det.scores[i])
            assert d.class_index == int(det.classes[i]) and d.label == det.labels[i]  # type: ignore[index]
        assert det[np.int64(1)] == Detection((40.0, 25.0, 55.0, 38.0), 0.4000000059604645, 3, "dog")
        with pytest.raises(IndexError, match=r"index 2 is out of range for 2 detections"):
            det[2]

    def test_masks_slices_and_indices_keep_the_image(self) -> None:
        image = np.zeros((40, 60, 3), np.uint8)
        det = _det(image)
        for key, rows in ((det.scores > 0.5, [0]), (slice(1, None), [1]), ([1, 0], [1, 0]), (slice(0, 0), [])):
            part = det[key]
            assert isinstance(part, Detections) and part.image is image and part.image_shape == (40, 60)
            np.testing.assert_array_equal(part.boxes, det.boxes[rows].reshape(-1, 4))
            assert part.labels == [det.labels[r] for r in rows]  # type: ignore[index]
        with pytest.raises(InputError, match=r"mask: got shape \(3,\), expected \(2,\)"):
            det[np.array([True, False, True])]
        with pytest.raises(InputError, match=r"index: got \[5\], expected values in \[-2, 2\)"):
            det[[5]]

    def test_to_json_round_trips(self) -> None:
        det = _det(np.zeros((40, 60, 3), np.uint8))
        data = json.loads(det.to_json(orient="columns"))
        assert data == {
            "boxes": [[5.0, 6.0, 30.0, 20.0], [40.0, 25.0, 55.0, 38.0]],
            "scores": [float(np.float32(0.9)), float(np.float32(0.4))],
            "classes": [0, 3],
            "labels": ["cat", "dog"],
            "image_shape": [40, 60],
        }
        again = Detections(**data)
        assert again.image is None and again.image_shape == (40, 60) and again.labels == det.labels
        np.testing.assert_array_equal(again.boxes, det.boxes)
        np.testing.assert_array_equal(again.scores, det.scores)
        c = Classification([4, 1], [0.75, 0.25], labels=["a", "b"])
        assert Classification(**json.loads(c.to_json(orient="columns"))).to_dict() == c.to_dict()


# ---------------------------------------------------------------------------------------------- odd values
def _strict(text: str) -> object:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (what strict JSON parsers do)."""

    def refuse(token: str) -> object:
        raise ValueError(f"not strict JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def _not_drawn(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "amdinfer.results" and r.levelno == 30]


class TestOddValues:
    """Issue 35: a row with a NaN or infinite number is left out of pictures with one warning that counts it, and
    JSON is strict (``null``). Truths: outlines by hand, the plot of a result built without the odd rows, and
    ``json.loads`` with a ``parse_constant`` that raises."""

    def test_strict_parser_refuses_what_json_dumps_writes_by_default(self) -> None:
        with pytest.raises(ValueError, match="not strict JSON: NaN"):
            _strict(json.dumps([float("nan")]))  # the check below can fail

    @pytest.mark.parametrize("odd", [np.nan, np.inf, -np.inf])
    def test_detections_plot_and_save_skip_odd_boxes_and_scores(
        self, odd: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        blank = np.zeros((40, 60, 3), np.uint8)
        boxes = [[5, 6, 30, 20], [odd, 1, 9, 9], [40, 25, 55, 38], [1, 1, 50, 30]]
        det = Detections(boxes, [0.9, 0.8, 0.4, odd], [0, 1, 3, 2], labels=["a", "b", "c", "d"], image=blank)
        with caplog.at_level("WARNING", logger="amdinfer.results"):
            out = det.plot(thickness=2, text=False)
        first, second = _outline((40, 60), (5, 6, 30, 20), 2), _outline((40, 60), (40, 25, 55, 38), 2)
        np.testing.assert_array_equal(out[first], np.tile(PALETTE[0], (first.sum(), 1)))
        np.testing.assert_array_equal(out[second], np.tile(PALETTE[3], (second.sum(), 1)))
        assert not out[~(first | second)].any()
        assert _not_drawn(caplog) == [
            "Detections.plot: 2 of 4 boxes not drawn: NaN or infinite coordinates or scores (rows 1, 3)"
        ]
        finite = Detections(
            [boxes[0], boxes[2]], [0.9, 0.4], [0, 3], labels=["a", "c"], image=blank
        )  # the same result without the odd rows
        np.testing.assert_array_equal(det.plot(), finite.plot())
        np.testing.assert_array_equal(det.draw(blank, text=True), finite.draw(blank, text=True))
        np.testing.assert_array_equal(_decode(det.save(tmp_path / "odd.png").read_bytes()), finite.plot())
        assert det._repr_png_() == finite._repr_png_()

    def test_huge_finite_boxes_are_cut_at_the_border(self) -> None:
        blank = np.zeros((40, 60, 3), np.uint8)
        det = Detections([[5, 6, 1e30, 20], [-3e38, -3e38, 3e38, 3e38]], [0.9, 0.5], [0, 0], image=blank)
        out = det.plot(thickness=1)  # the labels too: Pillow fails on coordinates this large
        mask = _outline((40, 60), (5, 6, 59, 20), 1) | _outline((40, 60), (0, 0, 59, 39), 1)
        assert (det.plot(thickness=1, text=False)[mask] == PALETTE[0]).all()
        assert not det.plot(thickness=1, text=False)[~mask].any()
        assert out.shape == blank.shape and (out != det.plot(thickness=1, text=False)).any()  # a label is written

    def test_detections_json_is_strict_and_reads_back(self) -> None:
        det = Detections([[0, 1, 2, np.inf], [np.nan, 1, 2, 3]], [-np.inf, 0.5], [1, 2], image_shape=(4, 5))
        data = _strict(det.to_json(orient="columns"))
        assert data == {
            "boxes": [[0.0, 1.0, 2.0, None], [None, 1.0, 2.0, 3.0]],
            "scores": [None, 0.5],
            "classes": [1, 2],
            "labels": None,
            "image_shape": [4, 5],
        }
        assert _strict(json.dumps(det.to_dict())) == data  # to_dict is strict too
        assert _strict(det.to_json(orient="columns", indent=2, allow_nan=True)) == data  # no way to ask for NaN back
        again = Detections(**data)  # type: ignore[arg-type]
        assert np.isnan(again.boxes[[0, 1], [3, 0]]).all() and np.isnan(again.scores[0])
        np.testing.assert_array_equal(again.boxes[:, 1:3], det.boxes[:, 1:3])

    def test_classification_plot_skips_odd_scores_and_json_is_strict(self, caplog: pytest.LogCaptureFixture) -> None:
        blank = np.zeros((80, 120, 3), np.uint8)
        c = Classification([3, 1, 4], [np.nan, 0.2, np.inf], labels=["cat", "dog", "fox"], image=blank)
        with caplog.at_level("WARNING", logger="amdinfer.results"):
            out = c.plot()
        np.testing.assert_array_equal(out, Classification([1], [0.2], labels=["dog"], image=blank).plot())
        assert _not_drawn(caplog) == [
            "Classification.plot: 2 of 3 classes not drawn: NaN or infinite coordinates or scores (rows 0, 2)"
        ]
        data = _strict(c.to_json(orient="columns"))
        assert data == {"indices": [3, 1, 4], "scores": [None, float(np.float32(0.2)), None], "labels": c.labels}
        assert np.isnan(Classification(**data).scores[[0, 2]]).all()  # type: ignore[arg-type]

    def test_classification_with_a_nan_index_is_refused(self) -> None:
        with pytest.raises(InputError, match=r"Classification: indices: got non-finite values at rows \[1\]"):
            Classification([2, np.nan], [0.5, 0.4])
        with pytest.raises(InputError, match=r"Detections: classes: got non-finite values at rows \[0\]"):
            Detections([[0, 0, 1, 1]], [0.5], [np.inf])

    def test_text_lines_skip_odd_quads_and_cut_huge_ones(self, caplog: pytest.LogCaptureFixture) -> None:
        from amdinfer.results import TextLines

        blank = np.zeros((10, 12, 3), np.uint8)
        quads = [
            [[1, 1], [1e30, 1], [1e30, 5], [1, 5]],  # runs off the right: cut at the border
            [[0, 0], [np.nan, 0], [4, 4], [0, 4]],
            [[2, 7], [6, 7], [6, 8], [2, 8]],  # a finite quad with a NaN score
        ]
        lines = TextLines(quads, ["a", "b", "c"], [0.9, 0.8, np.nan], image=blank)
        with caplog.at_level("WARNING", logger="amdinfer.results"):
            out = lines.plot(thickness=1, text=False)
        want = np.zeros((10, 12), bool)
        want[1, 1:], want[5, 1:], want[1:6, 1] = True, True, True  # top, bottom and left edges of the first quad
        np.testing.assert_array_equal(out.any(axis=2), want)
        assert (out[want] == PALETTE[0]).all()
        assert _not_drawn(caplog) == [
            "TextLines.plot: 2 of 3 lines not drawn: NaN or infinite coordinates or scores (rows 1, 2)"
        ]
        lines.plot()  # with the texts
        data = _strict(lines.to_json(orient="columns"))
        assert data["quads"][0][1] == [float(np.float32(1e30)), 1.0] and data["quads"][1][1] == [None, 0.0]  # type: ignore[index]
        assert data["scores"][2] is None  # type: ignore[index]

    def test_matches_json_is_strict(self) -> None:
        from amdinfer.text import Matches

        data = _strict(Matches([[0, 1]], [[np.nan, np.inf]]).to_json(orient="columns"))
        assert data["scores"] == [[None, None]]  # type: ignore[index]

    def test_write_labels_names_a_non_finite_anchor(self) -> None:
        with pytest.raises(InputError, match=r"plot: anchors\[1\]: got \(nan, 2.0\), expected finite"):
            _draw.write_labels(np.zeros((8, 8, 3), np.uint8), [(0, 0), (np.nan, 2.0)], ["a", "b"], [0, 0], what="plot")


# ---------------------------------------------------------------------------------------------- __call__ sources
def _same(a: Detections, b: Detections) -> None:
    np.testing.assert_array_equal(a.boxes, b.boxes)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.classes, b.classes)
    assert a.image_shape == b.image_shape


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    """Three lossless PNGs (c, a, b on disk: sorted order is a, b, c), a text file and a subfolder."""
    root = tmp_path_factory.mktemp("pages")
    rng = np.random.default_rng(7)
    images = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8) for h, w in ((48, 80), (64, 64), (40, 72))]
    for name, image in zip(("a.png", "b.PNG", "c.png"), images):
        Image.fromarray(image).save(root / name)
    (root / "notes.txt").write_text("not an image")
    (root / "sub").mkdir()
    Image.fromarray(images[0]).save(root / "sub" / "d.png")
    return root, images


@pytest.fixture(scope="module", params=[False, True], ids=["stages", "fused"])
def detector(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    with amdinfer.yolo(yolov8(image_size=64, num_classes=3, seed=2), conf=0.01, fuse=request.param, **CPU) as det:
        yield det


class TestCallSources:
    def test_every_kind_of_source_answers_as_the_array(self, detector, pictures) -> None:  # type: ignore[no-untyped-def]
        root, images = pictures
        want = [detector(image) for image in images]
        assert all(len(w) for w in want)  # boxes to compare (conf=0.01 on random weights)
        for w, image in zip(want, images):
            assert w.image is image  # the array passed, not a copy
        single = [detector(root / "a.png"), detector(str(root / "a.png")), detector(Image.fromarray(images[0]))]
        for got in single:
            _same(got, want[0])
            np.testing.assert_array_equal(got.image, images[0])
        mixed = detector([root / "a.png", Image.fromarray(images[1]), images[2]])
        by_glob = detector(str(root / "[ab].*"))  # a.png, b.PNG
        by_folder = detector(root)  # a.png, b.PNG, c.png; not notes.txt, not sub/
        assert len(mixed) == 3 and len(by_glob) == 2 and len(by_folder) == 3
        for got, w, image in zip(mixed + by_glob + by_folder, want + want[:2] + want, images + images[:2] + images):
            _same(got, w)
            np.testing.assert_array_equal(got.image, image)
        assert detector([]) == [] and len(detector(str(root / "**" / "*.png"))) == 3  # ** recurses: a, c, sub/d

    def test_map_and_run_batch_keep_images(self, detector, pictures) -> None:  # type: ignore[no-untyped-def]
        root, images = pictures
        paths = sorted(root.glob("*.png"))  # a.png, c.png
        for got, image in zip(detector.map(paths, batch_size=2), (images[0], images[2])):
            np.testing.assert_array_equal(got.image, image)
        assert [r.image is image for r, image in zip(detector.run_batch(images), images)] == [True] * 3

    def test_nothing_to_read_is_an_input_error(self, detector, pictures, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
        root, _ = pictures
        with pytest.raises(InputError, match=r"source: the glob '.*\*\.jpg' matched no file"):
            detector(str(root / "*.jpg"))
        with pytest.raises(InputError, match=r"source: the folder '.*' holds no image file \(1 entries"):
            (tmp_path / "x.txt").write_text("")
            detector(tmp_path)
        with pytest.raises(InputError, match=r"source\[1\]: got a list inside a list"):
            detector([root / "a.png", [root / "b.PNG"]])
        with pytest.raises(StageInputError, match=r"item 0: preprocess\[0\] LoadImage: .*missing\.png"):
            detector(root / "missing.png")


class TestRecipeImages:
    def test_bgr_keeps_the_rgb_view(self, pictures) -> None:  # type: ignore[no-untyped-def]
        _, images = pictures
        with amdinfer.yolo(yolov8(image_size=64, num_classes=3, seed=2), conf=0.01, channels="BGR", **CPU) as det:
            bgr = images[0][..., ::-1].copy()
            got = det(bgr)
            np.testing.assert_array_equal(got.image, images[0])
            assert np.shares_memory(got.image, bgr)  # a view, not a copy

    def test_keep_image_false(self, pictures) -> None:  # type: ignore[no-untyped-def]
        root, images = pictures
        with amdinfer.yolo(yolov8(image_size=64, num_classes=3), keep_image=False, **CPU) as det:
            assert det(images[0]).image is None and det(root)[0].image is None
        with pytest.raises(OptionError, match=r"keep_image: got 'yes', expected True or False"):
            amdinfer.yolo(yolov8(image_size=64, num_classes=3), keep_image="yes", **CPU)

    @pytest.mark.parametrize("fuse", [False, True])
    def test_classify_takes_lists_and_keeps_images(self, pictures, fuse: bool) -> None:  # type: ignore[no-untyped-def]
        root, images = pictures
        with amdinfer.classify(tiny_cnn(num_classes=4), crop=32, topk=2, fuse=fuse, **CPU) as clf:
            want = [clf(image) for image in images]
            for got, w, image in zip(clf(root), want, images):
                assert got.indices.tolist() == w.indices.tolist()
                np.testing.assert_array_equal(got.scores, w.scores)
                np.testing.assert_array_equal(got.image, image)
            assert clf(images[1]).plot().shape == images[1].shape


@needs_model
def test_trained_yolov8n_pages_by_glob_and_plot(tmp_path: Path) -> None:
    """The trained detector on two shipped pages: a glob gives the array answers; plot() is the page with each
    box's outline (Ultralytics' width) in its class colour, later boxes over earlier ones, computed by hand; the
    saved PNG decodes to plot()."""
    with amdinfer.yolo(str(model_path()), **CPU) as det:
        pages = [page(name) for name in PAGES[:2]]
        for name in PAGES[:2]:
            (tmp_path / name).symlink_to(DATA / name)
        got = det(str(tmp_path / "doclayout_page*.png"))
        assert len(got) == 2
        for g, image in zip(got, pages):
            _same(g, det(image))
            assert len(g) > 5
        first, image = got[0], pages[0]
        h, w = image.shape[:2]
        t = max(round((h + w) / 2 * 0.003), 2)
        want = image.copy()
        for box, cls in zip(first.boxes, first.classes):
            x1, y1, x2, y2 = (round(float(v)) for v in box)
            x1, x2, y1, y2 = (
                min(max(x1, 0), w - 1),
                min(max(x2, 0), w - 1),
                min(max(y1, 0), h - 1),
                min(max(y2, 0), h - 1),
            )
            want[_outline((h, w), (x1, y1, x2, y2), t)] = PALETTE[int(cls) % len(PALETTE)]
        np.testing.assert_array_equal(first.plot(text=False), want)
        out = first.save(tmp_path / "out.png")
        np.testing.assert_array_equal(_decode(out.read_bytes()), first.plot())
