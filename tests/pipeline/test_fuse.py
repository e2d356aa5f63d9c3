"""Fused pipelines (amdinfer.pipeline.fuse) against the stage-by-stage pipeline, the NumPy kernels and ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.errors import InputError, OptionError, StageError
from amdinfer.pipeline.fuse import fuse_model
from amdinfer.postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode
from amdinfer.preprocess import BgrToRgb, CenterCrop, HwcToChw, Letterbox, Normalize, Resize, check_image
from amdinfer.reference import letterbox, resize_bilinear
from amdinfer.testing.models import tiny_cnn

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}


def _identity_uint8(h: int | str = "H", w: int | str = "W") -> onnx.ModelProto:
    """A model that returns its uint8 NHWC input: the fused graph's output is then the preprocessing alone."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", h, w, 3])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", h, w, 3])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _yolo_head(size: int, nc: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A v8-layout detector whose raw output depends on the image: ``C + mean(x) * D`` with random C, D.

    Boxes cluster (many overlaps, several classes), scores spread over [0, 1]: a hard case for NMS and
    ``max_det``, with different predictions per image.
    """
    rng = np.random.default_rng(seed)
    a = 64
    cxcy = rng.uniform(0, size, (2, a))
    wh = rng.uniform(4, size / 2, (2, a))
    scores = rng.uniform(0, 1, (nc, a)) ** 2
    c = np.concatenate([cxcy, wh, scores]).astype(np.float32)[None]
    d = np.concatenate([rng.normal(0, 5, (4, a)), rng.normal(0, 0.3, (nc, a))]).astype(np.float32)[None]
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])
    y = helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + nc, a])
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["m"], axes=[1, 2, 3], keepdims=1),  # (N, 1, 1, 1)
        helper.make_node("Reshape", ["m", "shape"], ["m2"]),
        helper.make_node("Mul", ["m2", "D"], ["md"]),
        helper.make_node("Add", ["md", "C"], ["raw"]),
        helper.make_node("Clip", ["raw", "lo", ""], ["output0"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "shape"),
        numpy_helper.from_array(d, "D"),
        numpy_helper.from_array(c, "C"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
    ]
    graph = helper.make_graph(nodes, "head", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _images(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*s, 3), np.uint8) for s in shapes]


def _same_detections(fused, staged, box_tol=0.5, score_tol=1e-3):
    assert len(fused) == len(staged)
    for a, b in zip(fused, staged):
        assert a.image_shape == b.image_shape
        # identical kept sets: same (class, rounded box) multiset, best first
        assert sorted(a.classes.tolist()) == sorted(b.classes.tolist())
        order_a = np.lexsort((a.boxes[:, 0], a.classes))
        order_b = np.lexsort((b.boxes[:, 0], b.classes))
        np.testing.assert_allclose(a.boxes[order_a], b.boxes[order_b], atol=box_tol)
        np.testing.assert_allclose(a.scores[order_a], b.scores[order_b], atol=score_tol)
        assert np.all(np.diff(a.scores) <= 0)  # best first


class TestGeometry:
    """The in-graph resize is OpenCV's uint8 SIMD arithmetic; checked against the NumPy kernel."""

    @pytest.mark.parametrize(
        ("hw", "new"),
        [((48, 80), 64), ((75, 50), 32), ((30, 40), 96), ((20000, 3), 64), ((1001, 7), 64), ((640, 3), 64)],
    )
    def test_letterbox_matches_kernel(self, hw, new) -> None:
        model = fuse_model(_identity_uint8(new, new), [Letterbox(new)], [], image_size=hw)
        engine = amdinfer.load(model, **CPU)
        (image,) = _images([hw])
        got = engine.run({"images": image[None]})["y"][0]
        h, w = hw
        r = min(new / h, new / w)
        nh, nw = max(1, round(h * r)), max(1, round(w * r))  # a side that rounds to 0 keeps one pixel
        want, _, _ = letterbox(image, new)
        content = resize_bilinear(image, (nw, nh), rounding="simd")
        top, left = round((new - nh) / 2 - 0.1), round((new - nw) / 2 - 0.1)
        want[top : top + nh, left : left + nw] = content
        np.testing.assert_array_equal(got, want)
        engine.close()

    def test_simd_kernel_matches_opencv_when_shrinking(self) -> None:
        cv2 = pytest.importorskip("cv2")
        (image,) = _images([(97, 131)])
        for size in ((64, 48), (40, 40), (131 // 2, 97 // 2)):
            want = cv2.resize(image, size, interpolation=cv2.INTER_LINEAR)
            np.testing.assert_array_equal(resize_bilinear(image, size, rounding="simd"), want)

    def test_resize_crop_flip_chain(self) -> None:
        pre = [Resize(40), CenterCrop(32), BgrToRgb()]
        model = fuse_model(_identity_uint8(32, 32), pre, [], image_size=(50, 70))
        engine = amdinfer.load(model, **CPU)
        (image,) = _images([(50, 70)])
        got = engine.run({"images": image[None]})["y"][0]
        resized = resize_bilinear(image, (56, 40), rounding="simd")
        top, left = round((40 - 32) / 2), round((56 - 32) / 2)
        np.testing.assert_array_equal(got, resized[top : top + 32, left : left + 32, ::-1])
        engine.close()


class TestDetector:
    def _pipe(self, **nms):
        return amdinfer.Pipeline(
            preprocess=[Letterbox(64, backend="numpy"), BgrToRgb(), Normalize(scale=1 / 255), HwcToChw()],
            engine=_yolo_head(64),
            postprocess=[YoloDecode(conf_threshold=0.25), Nms(iou_threshold=0.5, **nms), ScaleBoxes()],
            **CPU,
        )

    @pytest.mark.parametrize(
        "nms",
        [{"max_det": 300}, {"max_det": 5}, {"agnostic": True}, {"classes": [1, 3]}, {"class_offset": 7680}],
    )
    def test_host_geometry_matches_stages(self, nms) -> None:
        pipe = self._pipe(**nms)
        images = _images([(48, 80), (90, 40), (64, 64)])
        with pipe.fuse() as fused:
            assert [i.name for i in fused.model.graph.input] == ["images", "affine", "orig_shape"]
            got = [fused(im) for im in images]  # mixed sizes: one call each, canvases differ in content only
            batch = fused.run_batch(images)
        want = pipe.run_batch(images)
        assert sum(len(d) for d in want) > 10
        _same_detections(got, want)
        _same_detections(batch, want)
        pipe.close()

    def test_graph_geometry_batched(self) -> None:
        pipe = self._pipe()
        images = _images([(48, 80)] * 3, seed=3)
        with pipe.fuse(image_size=(48, 80)) as fused:
            got = fused.run_batch(images)
            assert list(fused.map(images, batch_size=2))[2].scores.tolist() == got[2].scores.tolist()
        _same_detections(got, pipe.run_batch(images))
        pipe.close()

    def test_class_offset_nms(self) -> None:
        pipe = self._pipe()
        images = _images([(48, 80)] * 2, seed=7)
        with pipe.fuse(image_size=(48, 80), nms_mode="offset") as fused:
            nms = [n for n in fused.model.graph.node if n.op_type == "NonMaxSuppression"]
            assert len(nms) == 1
            got = fused.run_batch(images)
        _same_detections(got, pipe.run_batch(images))
        with pytest.raises(OptionError, match="nms_mode"):
            fuse_model(_yolo_head(64), pipe.preprocess, pipe.postprocess, nms_mode="fast")
        pipe.close()

    @pytest.mark.parametrize("image_size", [None, (48, 80)])
    def test_host_nms_is_the_stages_exactly(self, image_size) -> None:
        pipe = self._pipe(max_det=9, class_offset=7680)
        images = _images([(48, 80)] * 3, seed=9)
        with pipe.fuse(image_size=image_size, nms_mode="host") as fused:
            assert not any(n.op_type == "NonMaxSuppression" for n in fused.model.graph.node)
            got = fused.run_batch(images)
        want = pipe.run_batch(images)
        for a, b in zip(got, want):
            assert a.classes.tolist() == b.classes.tolist() and a.image_shape == b.image_shape
            tol = 1e-3 if image_size is None else 0.5  # float rounding; in-graph resize: OpenCV rounding vs NumPy
            np.testing.assert_allclose(a.boxes, b.boxes, atol=tol)
        pipe.close()

    def test_reference_engine_runs_the_fused_graph(self) -> None:
        pipe = self._pipe(max_det=7)
        images = _images([(48, 80), (48, 80)], seed=5)
        with pipe.fuse(image_size=(48, 80), backend="reference") as fused:
            assert fused.engine.info.backend == "reference"
            got = fused.run_batch(images)
        _same_detections(got, pipe.run_batch(images))
        pipe.close()

    def test_checked_and_opset(self) -> None:
        pipe = self._pipe()
        with pipe.fuse() as fused:
            onnx.checker.check_model(fused.model, full_check=True)
            assert any(n.op_type == "NonMaxSuppression" for n in fused.model.graph.node)
        pipe.close()

    def test_wrong_size_and_unfusable(self) -> None:
        pipe = self._pipe()
        with pipe.fuse(image_size=(48, 80)) as fused:
            with pytest.raises(InputError, match=r"item 0: got an image of \(40, 80\), expected \(48, 80\)"):
                fused(np.zeros((40, 80, 3), np.uint8))
        bad = amdinfer.Pipeline(
            preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
            engine=_yolo_head(64),
            postprocess=[YoloDecode(), Nms(multi_label=True)],
            **CPU,
        )
        with pytest.raises(OptionError, match="multi_label"):
            bad.fuse()
        pipe.close()
        bad.close()


class TestClassifier:
    def test_matches_stages(self) -> None:
        pipe = amdinfer.Pipeline(
            preprocess=[
                Resize((32, 32), backend="numpy"),
                Normalize([0.4, 0.5, 0.6], [0.2, 0.3, 0.25], 1 / 255),
                HwcToChw(),
            ],
            engine=tiny_cnn(),
            postprocess=[Softmax(), TopK(4, labels=[f"c{i}" for i in range(10)])],
            **CPU,
        )
        images = _images([(40, 50), (40, 50)])
        want = pipe.run_batch(images)
        with pipe.fuse() as fused:
            got = fused.run_batch(images)
        for a, b in zip(got, want):
            assert a.indices.tolist() == b.indices.tolist() and a.labels == b.labels
            np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-7)
        pipe.close()


class TestHostStages:
    def test_normalize_divides(self) -> None:
        x = np.arange(256, dtype=np.uint8)
        got = Normalize(scale=1 / 255)(x).data
        np.testing.assert_array_equal(got, x.astype(np.float32) / np.float32(255))

    def test_bgr_flip_is_a_view(self) -> None:
        (image,) = _images([(4, 5)])
        out = BgrToRgb()(image).data
        assert np.shares_memory(out, image)
        np.testing.assert_array_equal(out, image[..., ::-1])

    def test_per_axis_gains(self) -> None:
        # Ultralytics >= 8.4 scale_boxes: gain_x = round(w * r) / w, gain_y = round(h * r) / h
        meta = Letterbox(320)(np.zeros((427, 640, 3), np.uint8)).meta
        r = 320 / 640
        assert meta["affine"][:2] == (round(640 * r) / 640, round(427 * r) / 427)

    def test_opencv_backend_within_one_of_the_kernel(self) -> None:
        pytest.importorskip("cv2")
        (image,) = _images([(97, 131)])
        a = Letterbox(64, backend="opencv")(image).data.astype(int)
        b = Letterbox(64, backend="numpy")(image).data.astype(int)
        assert np.abs(a - b).max() <= 1

    def test_class_names_and_yolo_helper(self) -> None:
        model = _yolo_head(64)
        model.metadata_props.add(key="names", value="{0: 'a', 1: 'b', 2: 'c', 3: 'd'}")
        det = amdinfer.yolo(model, conf=0.25, iou=0.5, channels="BGR", **CPU)
        assert [type(s).__name__ for s in det.preprocess] == [
            "LoadImage",
            "Letterbox",
            "BgrToRgb",
            "Normalize",
            "HwcToChw",
        ]
        (image,) = _images([(48, 80)])
        out = det(image)
        assert set(out.labels) <= {"a", "b", "c", "d"} and len(out) > 0
        det.close()
        with pytest.raises(OptionError, match="channels"):
            amdinfer.yolo(model, channels="rgb", **CPU)


def test_nms_class_offset_is_ultralytics_arithmetic() -> None:
    # Independent truth: reference.non_max_suppression, a transcription of Ultralytics' function (offset trick).
    from amdinfer import reference as ref
    from amdinfer.stages import Sample

    rng = np.random.default_rng(11)
    a, nc = 400, 6
    pred = np.zeros((1, 4 + nc, a), np.float32)
    pred[0, :2] = rng.uniform(0, 320, (2, a))
    pred[0, 2:4] = rng.uniform(20, 120, (2, a))
    pred[0, 4:] = rng.uniform(0, 1, (nc, a)) ** 3
    (want,) = ref.non_max_suppression(pred, conf_threshold=0.25, iou_threshold=0.45, max_det=300)
    sample = YoloDecode("v8", 0.25)(Sample(pred[0], {}))
    got = Nms(iou_threshold=0.45, class_offset=7680)(sample).data
    np.testing.assert_array_equal(got.boxes, want[:, :4])
    np.testing.assert_array_equal(got.classes, want[:, 5].astype(np.int64))


def test_yolo_helper_rectangular_for_dynamic_models() -> None:
    model = _yolo_head(64)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "H", "W"  # a dynamic export
    model.metadata_props.add(key="stride", value="32")
    det = amdinfer.yolo(model, imgsz=96, **CPU)
    letterbox = det.preprocess[1]
    assert (letterbox.new_shape, letterbox.auto, letterbox.stride) == ((96, 96), True, 32)
    (image,) = _images([(60, 120)])
    assert det.preprocess[1](image).data.shape == (64, 96, 3)  # Ultralytics: 96x48 content, padded to 64 rows
    det.close()


class TestElongated:
    """Images whose short side letterboxes to under half a pixel (issue 20: ZeroDivisionError in the fused
    graph's taps, an OpenCV assertion stage by stage): one row or column, the same on both paths."""

    @pytest.mark.parametrize("hw", [(20000, 3), (1001, 7), (640, 3), (3, 640)])
    def test_fused_is_the_opencv_stage(self, hw) -> None:
        pytest.importorskip("cv2")
        model = fuse_model(_identity_uint8(64, 64), [Letterbox(64)], [], image_size=hw)
        (image,) = _images([hw], seed=hw[1])
        with amdinfer.load(model, **CPU) as engine:
            got = engine.run({"images": image[None]})["y"][0]
        staged = Letterbox(64, backend="opencv")(image).data
        np.testing.assert_array_equal(got, staged)  # both are cv2.resize's SIMD arithmetic
        want, _, _ = letterbox(image, 64)  # the NumPy reference rounds where OpenCV truncates
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1

    @pytest.mark.parametrize("image_size", [None, (1001, 7)])
    def test_detector_answers_the_same(self, image_size) -> None:
        pipe = TestDetector()._pipe()
        (image,) = _images([(1001, 7)], seed=3)
        staged = pipe(image)
        with pipe.fuse(image_size=image_size) as fused:
            _same_detections([fused(image)], [staged], box_tol=1.0, score_tol=2e-3)
        assert staged.image_shape == (1001, 7)
        pipe.close()


#: Images outside the rule, per issue 20 (the stage-by-stage YOLO pipeline answered them, the fused refused).
_BAD = {
    "uint16": np.full((48, 80, 3), 100 * 257, np.uint16),
    "float01": np.full((48, 80, 3), 0.4, np.float32),
    "int8": np.zeros((48, 80, 3), np.int8),
    "bool": np.ones((48, 80, 3), bool),
    "rgba": np.zeros((48, 80, 4), np.uint8),
    "grey": np.zeros((48, 80), np.uint8),
}


def _body(image: np.ndarray) -> str:
    """What check_image says about ``image`` for an RGB input, without the where."""
    try:
        check_image(image, "X", channels=(3,), grey=False)
    except InputError as exc:
        return str(exc)[len("X: ") :]
    raise AssertionError("accepted")


class TestImageRule:
    """Stage by stage and fused refuse the same images with the same words (``check_image``)."""

    @pytest.mark.parametrize("kind", sorted(_BAD))
    def test_yolo_both_paths(self, kind) -> None:
        image = _BAD[kind]
        det = amdinfer.yolo(_yolo_head(64), **CPU)
        with det.fuse() as fused, det.fuse(image_size=(48, 80)) as fixed:
            for run in (det, fused, fixed):
                with pytest.raises(InputError) as info:
                    run(image)
                # LoadImage (a host stage of both fused forms) checks the array first, located by the item.
                assert isinstance(info.value, StageError) and isinstance(info.value, ValueError)
                assert str(info.value).startswith("item 0: preprocess"), info.value
                assert f"LoadImage: {_body(image)}" in str(info.value), info.value
            good = np.zeros((48, 80, 3), np.uint8)
            assert det(good).image_shape == fused(good).image_shape == (48, 80)  # nothing left behind
        det.close()

    @pytest.mark.parametrize("kind", sorted(_BAD))
    def test_hand_built_both_paths(self, kind) -> None:
        """Letterbox first (no LoadImage): the stage checks; the fused graph's input check says the same."""
        image = _BAD[kind]
        pipe = amdinfer.Pipeline(
            preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()], engine=_yolo_head(64), **CPU
        )
        with pipe.fuse(image_size=(48, 80)) as fused:
            with pytest.raises(InputError) as graph:
                fused(image)
        assert str(graph.value) == f"item 0: input 'images': {_body(image)}"
        if kind == "grey":  # Letterbox pads grey like Ultralytics; the model then refuses one channel
            with pytest.raises(InputError, match=r"item 0: engine .* expected \(N, 3, 64, 64\)"):
                pipe(image)
        else:
            with pytest.raises(InputError) as staged:
                pipe(image)
            said = str(staged.value)
            assert said.startswith("item 0: preprocess[0] Letterbox: InputError: Letterbox: got "), said
            # The same words, but Letterbox also takes (H, W) grey images.
            before, after = _body(image).split(", expected uint8 (H, W, 3)")
            assert before in said and said.endswith(after), said
        pipe.close()
