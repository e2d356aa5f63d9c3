"""amdinfer.segment: per-pixel classes against hand-made images whose classes are known, the whole-image answer
against the model run by onnx.reference on the padded image, patch blending against the whole image where the
receptive field allows, one engine for many sizes, and the errors for bad arguments."""

from __future__ import annotations

import numpy as np
import onnx.reference
import pytest

import amdinfer
from amdinfer.errors import AmdinferError, InputError, OptionError
from amdinfer.recipes._segment_plan import plan_image
from amdinfer.results import SegmentationMap
from amdinfer.testing.models import UNET_CLASSES, tiny_cnn, unet

CPU = {"providers": ["CPUExecutionProvider"]}
#: pure colours (RGB) and the class unet's colour rule gives them
COLOURS = {"dark": (0, 0, 0), "bright": (255, 255, 255), "red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}


def _made(h: int, w: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """An image of random rectangles of the five colours (noise of +-12 grey levels) and its true classes."""
    rng = np.random.default_rng(seed)
    truth = np.full((h, w), rng.integers(0, 5), np.int64)
    for _ in range(6):
        y0, x0 = rng.integers(0, h), rng.integers(0, w)
        y1, x1 = y0 + rng.integers(1, h // 2 + 2), x0 + rng.integers(1, w // 2 + 2)
        truth[y0:y1, x0:x1] = rng.integers(0, 5)
    palette = np.array([COLOURS[n] for n in UNET_CLASSES], np.int64)
    noise = rng.integers(-12, 13, (h, w, 3))
    image = np.clip(palette[truth] + noise, 0, 255).astype(np.uint8)
    return image, truth


def _reference_logits(model: onnx.ModelProto, image: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
    """The model on ``image`` padded (edge) to ``canvas`` by onnx.reference, cut back: (C, h, w)."""
    h, w = image.shape[:2]
    padded = np.pad(image, [(0, canvas[0] - h), (0, canvas[1] - w), (0, 0)], mode="edge")
    x = (padded.astype(np.float32) / 255).transpose(2, 0, 1)[None]
    out = onnx.reference.ReferenceEvaluator(model).run(None, {"images": x})[0][0]
    return out[:, :h, :w]


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return unet(seed=3, depth=2)


def _receptive_radius(model: onnx.ModelProto) -> int:
    """How far (pixels, per side) an input pixel moves the logits: one pixel changed on a 96x96 image, at each
    position modulo the stride (4), the largest reach."""
    run = onnx.reference.ReferenceEvaluator(model)
    x = np.full((1, 3, 96, 96), 0.5, np.float32)
    base = run.run(None, {"images": x})[0]
    reach = 0
    for k in range(4):
        c = 46 + k
        moved = x.copy()
        moved[0, :, c, c] = 1.0
        ys, xs = np.nonzero(np.abs(run.run(None, {"images": moved})[0] - base).max(axis=(0, 1)) > 0)
        reach = max(reach, c - ys.min(), ys.max() - c, c - xs.min(), xs.max() - c)
    return int(reach)


class TestHandMadeImages:
    @pytest.mark.parametrize("size", [(37, 53), (64, 64), (100, 30), (5, 7)])
    def test_every_pixel_has_its_colours_class(self, model: onnx.ModelProto, size: tuple[int, int]) -> None:
        image, truth = _made(*size, seed=sum(size))
        with amdinfer.segment(model, **CPU) as seg:
            result = seg(image)
        assert result.image_shape == size
        assert result.labels == list(UNET_CLASSES)
        np.testing.assert_array_equal(result.classes, truth)
        assert result.counts.tolist() == np.bincount(truth.ravel(), minlength=5).tolist()

    def test_bgr_arrays_are_read_as_bgr(self, model: onnx.ModelProto) -> None:
        image = np.zeros((16, 24, 3), np.uint8)
        image[:, :12, 2] = 255  # red in BGR order
        with amdinfer.segment(model, channels="BGR", **CPU) as seg:
            result = seg(image)
        assert result.labels[result.classes[0, 0]] == "red" and result.labels[result.classes[0, 20]] == "dark"
        assert result.image is not None and result.image[0, 0].tolist() == [255, 0, 0]  # kept as RGB

    @pytest.mark.parametrize("blend", ["linear", "gaussian", "mean"])
    def test_patches_give_the_same_classes(self, model: onnx.ModelProto, blend: str) -> None:
        image, truth = _made(150, 210, seed=7)
        with amdinfer.segment(model, patch=(48, 64), patch_overlap=0.25, blend=blend, **CPU) as seg:
            assert seg.plan(image.shape[:2]).patched
            np.testing.assert_array_equal(seg(image).classes, truth)

    def test_images_over_the_bound_run_in_patches(self, model: onnx.ModelProto) -> None:
        image, truth = _made(130, 170, seed=11)
        with amdinfer.segment(model, max_size=64, **CPU) as seg:
            plan = seg.plan(image.shape[:2])
            result = seg(image)
        assert plan.patched and all(y1 - y0 == 64 and x1 - x0 == 64 for y0, x0, y1, x1 in plan.windows)
        np.testing.assert_array_equal(result.classes, truth)

    def test_a_fixed_size_model_runs_every_image_at_its_size(self) -> None:
        image, truth = _made(70, 45, seed=5)
        with amdinfer.segment(unet(depth=2, image_size=32), **CPU) as seg:
            assert seg.bound == (32, 32)
            result = seg([image, image[:20, :20]])
            shapes = seg.engine.info.settings["segment"]["shapes"]
        np.testing.assert_array_equal(result[0].classes, truth)
        np.testing.assert_array_equal(result[1].classes, truth[:20, :20])
        assert set(shapes) == {"32x32"}


class TestAgainstTheModel:
    @pytest.mark.parametrize("size", [(37, 53), (64, 80)])
    def test_whole_image_equals_the_model_on_the_padded_image(self, model: onnx.ModelProto, size: tuple) -> None:
        rng = np.random.default_rng(1)
        image = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        with amdinfer.segment(model, size_step=16, probabilities=True, **CPU) as seg:
            canvas = seg.plan(size).canvas
            result = seg(image)
        assert canvas == (-(-size[0] // 16) * 16, -(-size[1] // 16) * 16)
        want = _softmax(_reference_logits(model, image, canvas))
        assert result.probabilities is not None
        np.testing.assert_allclose(result.probabilities, want, atol=2e-5)
        top2 = np.sort(want, axis=0)[-2:]
        clear = top2[1] - top2[0] > 1e-3
        np.testing.assert_array_equal(result.classes[clear], want.argmax(0)[clear])

    def test_ort_and_the_reference_engine_agree(self, model: onnx.ModelProto) -> None:
        image = np.random.default_rng(2).integers(0, 256, (40, 60, 3), dtype=np.uint8)
        got = []
        for options in (CPU, {"backend": "reference"}):
            with amdinfer.segment(model, patch=32, probabilities=True, **options) as seg:
                got.append(seg(image).probabilities)
        np.testing.assert_allclose(got[0], got[1], atol=2e-5)


class TestPatchBlending:
    """Property: patch origins lie on the stride, so a patch's pooling grid is the image's; a pixel whose receptive
    field (radius R) lies inside every patch that covers it (R or more from each patch's inner edges) gets, from
    each, the whole image's logits, and any weighted average of equal values is that value."""

    @pytest.mark.parametrize("blend", ["linear", "gaussian", "mean"])
    def test_blend_equals_the_whole_image_where_the_receptive_field_fits(
        self, model: onnx.ModelProto, blend: str
    ) -> None:
        radius = _receptive_radius(model)
        assert radius == 4 * 2**2 - 3  # depth 2 (the builder's docstring)
        image = np.random.default_rng(3).integers(0, 256, (150, 203, 3), dtype=np.uint8)
        with amdinfer.segment(model, probabilities=True, **CPU) as seg:
            whole = seg(image).probabilities
        with amdinfer.segment(model, patch=(64, 96), patch_overlap=0.5, blend=blend, probabilities=True, **CPU) as seg:
            plan = seg.plan(image.shape[:2])
            patched = seg(image).probabilities
        assert whole is not None and patched is not None
        fits = _inside_every_patch(plan, radius)[:150, :203]
        assert fits.mean() > 0.3, fits.mean()  # a property of many pixels, not a few
        np.testing.assert_allclose(patched[:, fits], whole[:, fits], atol=2e-5)
        assert np.abs(patched - whole).max() > 1e-4  # elsewhere the patches' own edges do show

    def test_linear_weights_ramp_over_the_overlap_and_sum_to_one_after_normalising(self) -> None:
        plan = plan_image(64, 160, stride=4, size_step=4, bound=None, patch=(64, 64), overlap=0.25)
        from amdinfer.recipes._segment_plan import blend_weights

        total = np.zeros(plan.canvas)
        for i, (y0, x0, y1, x1) in enumerate(plan.windows):
            w = blend_weights(plan, i, "linear")
            assert w.shape == (y1 - y0, x1 - x0) and w.min() > 0 and w.max() == 1
            total[y0:y1, x0:x1] += w
        assert [x0 for _, x0, _, _ in plan.windows] == [0, 48, 96]
        np.testing.assert_allclose(total[:, :48], 1)  # only the first patch there
        np.testing.assert_allclose(total[:, 48:64], 1, atol=1e-6)  # two ramps that add up to one


def _inside_every_patch(plan, radius: int) -> np.ndarray:
    """Pixels at ``radius`` or more from the inner edges (not the canvas's) of every window covering them."""
    h, w = plan.canvas
    ok = np.ones((h, w), bool)
    ys, xs = np.arange(h)[:, None], np.arange(w)[None, :]
    for y0, x0, y1, x1 in plan.windows:
        cover = (ys >= y0) & (ys < y1) & (xs >= x0) & (xs < x1)
        far = np.ones((h, w), bool)
        if y0 > 0:
            far &= ys - y0 >= radius
        if y1 < h:
            far &= y1 - 1 - ys >= radius
        if x0 > 0:
            far &= xs - x0 >= radius
        if x1 < w:
            far &= x1 - 1 - xs >= radius
        ok &= ~cover | far
    return ok


class TestOneEngineManySizes:
    def test_sizes_share_bucket_shapes_on_one_engine(self, model: onnx.ModelProto) -> None:
        sizes = [(30, 50), (60, 70), (64, 64), (33, 40), (100, 120)]
        with amdinfer.segment(model, size_step=32, **CPU) as seg:
            engine = seg.engine
            for h, w in sizes:
                image, truth = _made(h, w, seed=h + w)
                np.testing.assert_array_equal(seg(image).classes, truth)
            record = engine.info.settings["segment"]
        assert seg.engine is engine
        assert record["stride"] == 4 and record["size_step"] == 32
        assert record["shapes"] == {"32x64": 1, "64x96": 1, "64x64": 2, "128x128": 1}

    def test_segmenters_share_an_engine_passed_as_backend(self, model: onnx.ModelProto) -> None:
        image, truth = _made(90, 100, seed=4)
        engine = amdinfer.load(model, **CPU)
        with engine:
            with (
                amdinfer.segment(model, backend=engine) as whole,
                amdinfer.segment(model, backend=engine, patch=32) as tiles,
            ):
                np.testing.assert_array_equal(whole(image).classes, truth)
                np.testing.assert_array_equal(tiles(image).classes, truth)
            assert not engine.closed  # the caller's engine stays open
            shapes = engine.info.settings["segment"]["shapes"]
        assert shapes["92x100"] == 1 and shapes["32x32"] == len(tiles.plan((90, 100)).windows)

    def test_warmed_shapes_serve_every_size_of_their_buckets_under_on_new_shape_error(
        self, model: onnx.ModelProto
    ) -> None:
        engine = amdinfer.load(model, on_new_shape="error", batch_buckets=[1, 4], **CPU)
        with engine:
            whole = amdinfer.segment(model, backend=engine, size_step=64, max_size=128, batch_size=4)
            ran = whole.warm([(128, 128), (64, 128), (64, 64), (200, 300)])
            assert sorted({(h, w) for _, h, w in ran}) == [(64, 64), (64, 128), (128, 128)]
            for h, w in [(40, 50), (64, 64), (30, 100), (100, 128), (127, 100), (150, 250), (300, 200)]:
                image, truth = _made(h, w, seed=h * w)
                np.testing.assert_array_equal(whole(image).classes, truth)  # patches of 128 over the bound
            with pytest.raises(InputError, match="not a prepared shape"):
                amdinfer.segment(model, backend=engine, size_step=32)(np.zeros((32, 32, 3), np.uint8))
            assert not engine.info.settings.get("new_shapes", {}).get("compiled")

    def test_auto_step_is_the_stride_on_the_cpu(self, model: onnx.ModelProto) -> None:
        with amdinfer.segment(model, **CPU) as seg:
            assert (seg.stride, seg.size_step, seg.bound, seg.patch) == (4, 4, None, None)

    def test_the_engines_shape_bound_is_the_whole_image_bound(self, model: onnx.ModelProto) -> None:
        shapes = {"images": [(1, 3, 16, 16), (8, 3, 64, 96)]}
        with amdinfer.segment(model, shapes=shapes, **CPU) as seg:
            assert seg.bound == (64, 96)
            assert not seg.plan((60, 90)).patched and seg.plan((65, 90)).patched
            assert seg.plan((8, 8)).canvas == (16, 16)  # the lower bound pads small images up


class TestErrors:
    @pytest.mark.parametrize(
        ("options", "named"),
        [
            ({"patch": 30}, "patch"),
            ({"patch": 2}, "patch"),
            ({"patch": (64, 64), "max_size": 32}, "patch"),
            ({"patch_overlap": 1.0}, "patch_overlap"),
            ({"blend": "cubic"}, "blend"),
            ({"size_step": 6}, "size_step"),
            ({"stride": 0}, "stride"),
            ({"batch_size": 0}, "batch_size"),
            ({"labels": ["a", "b"]}, "labels"),
            ({"channels": "RGBA"}, "channels"),
            ({"probabilities": 1}, "probabilities"),
            ({"max_size": (64,)}, "max_size"),
        ],
    )
    def test_bad_arguments_name_themselves(self, model: onnx.ModelProto, options: dict, named: str) -> None:
        with pytest.raises(OptionError, match=named) as info:
            amdinfer.segment(model, **options, **CPU)
        assert isinstance(info.value, AmdinferError) and str(info.value).startswith(named)

    def test_sizes_outside_the_engines_bounds_are_refused(self, model: onnx.ModelProto) -> None:
        shapes = {"images": [(1, 3, 32, 32), (8, 3, 64, 64)]}
        with pytest.raises(OptionError, match=r"^max_size: got \(128, 128\), expected at most \(64, 64\)"):
            amdinfer.segment(model, shapes=shapes, max_size=128, **CPU)
        with pytest.raises(OptionError, match=r"^patch: got \(16, 16\), expected at least \(32, 32\)"):
            amdinfer.segment(model, shapes=shapes, patch=16, **CPU)
        with pytest.raises(OptionError, match=r"^max_size: .* at most \(32, 32\)"):
            amdinfer.segment(unet(depth=2, image_size=32), max_size=64, **CPU)

    def test_a_batch_over_the_engines_batch_bound_is_refused_when_built(self, model: onnx.ModelProto) -> None:
        shapes = {"images": [(1, 3, 16, 16), (4, 3, 64, 64)]}
        with pytest.raises(OptionError, match=r"^batch_size: got 8, expected at most 4 .*'images'.*batch_size=4"):
            amdinfer.segment(model, shapes=shapes, **CPU)  # the default batch_size, 8
        image = np.zeros((100, 120, 3), np.uint8)
        image[:, 60:, 2] = 255
        with amdinfer.segment(model, **CPU) as free, amdinfer.segment(model, shapes=shapes, batch_size=4, **CPU) as seg:
            assert seg.plan(image.shape[:2]).patched  # 100 x 120 exceeds the 64 x 64 bound: patches, 4 per call
            got, unbounded = seg(image), free(image)
            assert got.image_shape == (100, 120) and got.counts.sum() == 100 * 120
            assert np.array_equal(got.classes[:, :50], unbounded.classes[:, :50])  # away from the seams' blend

    def test_a_classifier_is_not_a_segmenter(self) -> None:
        with pytest.raises(OptionError, match=r"model: .*\(N, 3, H, W\) -> \(N, C, H, W\)"):
            amdinfer.segment(tiny_cnn(), **CPU)

    def test_a_bad_image_is_an_input_error(self, model: onnx.ModelProto) -> None:
        with amdinfer.segment(model, **CPU) as seg, pytest.raises(InputError):
            seg(np.zeros((8, 8, 4), np.float32))


def test_results_round_trip_through_json_and_tensors(model: onnx.ModelProto) -> None:
    image, truth = _made(40, 56, seed=9)
    with amdinfer.segment(model, probabilities=True, **CPU) as seg:
        result = seg(image)
    back = SegmentationMap.from_dict(__import__("json").loads(result.to_json(orient="columns")))
    np.testing.assert_array_equal(back.classes, truth)
    again = SegmentationMap.from_tensors(result.to_tensors())
    np.testing.assert_array_equal(again.probabilities, result.probabilities)
    rows = result.summary()
    assert sum(r["area"] for r in rows) == 40 * 56
    assert all(0.2 < r["confidence"] <= 1 for r in rows)
    overlay = result.plot(alpha=1.0)
    assert overlay.shape == (40, 56, 3) and overlay[truth == 2].tolist() == [[255, 112, 31]] * int((truth == 2).sum())
