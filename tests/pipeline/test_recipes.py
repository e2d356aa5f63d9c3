"""The one-call recipes: ``fuse="auto"`` (fused on an accelerator, stage by stage on the CPU) and
:func:`amdinfer.classify` against a hand-built pipeline, a NumPy computation and its fused form."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import amdinfer
from amdinfer import recipes
from amdinfer.errors import ModelError, OptionError
from amdinfer.pipeline.fuse import FusedPipeline
from amdinfer.postprocess import Softmax, TopK
from amdinfer.preprocess import BgrToRgb, CenterCrop, HwcToChw, LoadImage, Normalize, Resize
from amdinfer.reference import resize_bilinear
from amdinfer.testing.models import resnet50, tiny_cnn, yolov8

CPU = {"providers": ["CPUExecutionProvider"]}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _images(seed: int = 0) -> list[np.ndarray]:
    """Photos-like random images of mixed sizes (smooth, so bilinear resizes stay close across kernels)."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in ((73, 100), (120, 90), (96, 96), (80, 150)):
        base = rng.integers(0, 255, (h // 8 + 2, w // 8 + 2, 3)).astype(np.uint8)
        out.append(resize_bilinear(base, (w, h)))
    return out


@pytest.fixture(scope="module")
def resnet() -> onnx.ModelProto:
    model = resnet50(seed=3, num_classes=12, image_size=64)
    names = {i: f"class{i}" for i in range(12)}
    model.metadata_props.add(key="names", value=repr(names))
    return model


def _ultralytics_like(dynamic: bool = True) -> onnx.ModelProto:
    """tiny_cnn ending in a Softmax, with the metadata an Ultralytics classify export writes."""
    model = tiny_cnn(seed=1, num_classes=4)
    out = model.graph.output[0]
    model.graph.node.append(helper.make_node("Softmax", [out.name], ["probs"], axis=1))
    probs = helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, ["N", 4])
    model.graph.output.pop()
    model.graph.output.append(probs)
    if dynamic:
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_param, dims[3].dim_param = "H", "W"
    for key, value in {
        "author": "Ultralytics",
        "task": "classify",
        "imgsz": "[48, 48]",
        "names": "{0: 'a', 1: 'b', 2: 'c', 3: 'd'}",
    }.items():
        model.metadata_props.add(key=key, value=value)
    return model


# ---------------------------------------------------------------------------------------------- fuse="auto"
class TestFuseAuto:
    def test_cpu_default_runs_stage_by_stage(self, resnet) -> None:
        with amdinfer.yolo(yolov8(image_size=64, num_classes=2), **CPU) as det:
            assert isinstance(det, amdinfer.Pipeline)
        with amdinfer.classify(resnet, **CPU) as clf:
            assert isinstance(clf, amdinfer.Pipeline)

    def test_accelerator_engine_gets_the_fused_form(self) -> None:
        """The decision reads engine.info.device: an engine reporting a GPU gets the fused graph (loaded here on
        the providers that engine really uses, the CPU EP), a CPU one keeps its stages."""
        pipe = amdinfer.Pipeline(
            preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
            engine=tiny_cnn(),
            postprocess=[Softmax(), TopK(3)],
            threads=1,
            **CPU,
        )
        pipe.engine.info.device = "cuda:0"
        fused = recipes._build._finish(pipe, "auto", {"threads": 1})
        try:
            assert isinstance(fused, FusedPipeline)
            assert pipe.engine.closed  # the stage-by-stage engine is given back
            assert fused.engine.info.providers == ["CPUExecutionProvider"]
            # the caller's load options travel to the fused engine
            assert fused.engine.info.settings["session"]["intra_op_num_threads"] == 1
        finally:
            fused.close()
        cpu = amdinfer.Pipeline(preprocess=[HwcToChw()], engine=tiny_cnn(), **CPU)
        assert recipes._build._finish(cpu, "auto", {}) is cpu
        cpu.engine.info.device = "rocm:0"
        assert recipes._build._finish(cpu, False, {}) is cpu
        cpu.close()

    def test_fused_load_options_carry_the_pipelines_own(self) -> None:
        from amdinfer.pipeline.fuse._options import fused_load_options

        engine = amdinfer.load(tiny_cnn(), threads=1, **CPU)
        try:
            given = {"threads": 1, "shapes": {"input": [1, 3, 32, 32]}, "fp16_io": False, "providers": ["cpu"]}
            _, options = fused_load_options(engine, None, given, engine.model.proto)
            assert options == {"threads": 1, "backend": "ort", "providers": ["CPUExecutionProvider"]}
            engine.info.device = "cuda:1"  # an Engine passed in on the second GPU: the fused one goes there too
            assert fused_load_options(engine, None, {}, engine.model.proto)[1]["device"] == 1
            assert fused_load_options(engine, None, {"device": 0}, engine.model.proto)[1]["device"] == 0
        finally:
            engine.close()

    def test_fuse_true_and_false_force(self) -> None:
        model = yolov8(image_size=64, num_classes=2)
        image = np.random.default_rng(1).integers(0, 255, (48, 80, 3), np.uint8)
        with (
            amdinfer.yolo(model, fuse=True, conf=0.01, **CPU) as fused,
            amdinfer.yolo(model, conf=0.01, **CPU) as staged,
        ):
            assert isinstance(fused, FusedPipeline) and isinstance(staged, amdinfer.Pipeline)
            a, b = fused(image), staged(image)
            assert len(b) > 0 and a.classes.tolist() == b.classes.tolist()
            np.testing.assert_allclose(a.boxes, b.boxes, atol=0.5)

    @pytest.mark.parametrize("value", ["yes", 1, None, "AUTO"])
    def test_bad_fuse_value(self, value) -> None:
        with pytest.raises(OptionError, match="fuse: got"):
            amdinfer.yolo(yolov8(image_size=64, num_classes=2), fuse=value, **CPU)
        with pytest.raises(OptionError, match="fuse: got"):
            amdinfer.classify(tiny_cnn(), fuse=value, **CPU)


# ---------------------------------------------------------------------------------------------- classify
def _numpy_classify(model: onnx.ModelProto, image: np.ndarray, size: int, crop: int, k: int, resize=resize_bilinear):
    """torchvision's recipe in NumPy with the reference resize (or ``resize``): shorter side to ``size``,
    centre crop, /255, ImageNet mean/std, CHW; the model through a plain ONNX Runtime session; softmax;
    top-k (ties: lower index first)."""
    h, w = image.shape[:2]
    th, tw = (size, int(size * w / h)) if h <= w else (int(size * h / w), size)
    resized = image if (th, tw) == (h, w) else resize(image, (tw, th))
    top, left = round((th - crop) / 2), round((tw - crop) / 2)
    x = resized[top : top + crop, left : left + crop].astype(np.float32) / np.float32(255)
    x = (x - np.float32(IMAGENET_MEAN)) / np.float32(IMAGENET_STD)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"input": x.transpose(2, 0, 1)[None].astype(np.float32)})
    e = np.exp(logits[0].astype(np.float64) - logits[0].max())
    p = e / e.sum()
    order = np.argsort(-p, kind="stable")[:k]
    return order, p[order]


class TestClassify:
    def test_matches_a_hand_built_pipeline(self, resnet) -> None:
        from amdinfer.preprocess import opencv_available

        hand = amdinfer.Pipeline(
            preprocess=[
                LoadImage("RGB", backend="opencv" if opencv_available() else "auto"),  # the recipes' decoder
                Resize(73),  # int(64 / 0.875)
                CenterCrop(64),
                Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD, scale=1 / 255),
                HwcToChw(),
            ],
            engine=resnet,
            postprocess=[Softmax(), TopK(5, labels=[f"class{i}" for i in range(12)])],
            **CPU,
        )
        with hand, amdinfer.classify(resnet, **CPU) as clf:
            assert [repr(s) for s in clf.preprocess] == [repr(s) for s in hand.preprocess]
            for got, want in zip(clf.run_batch(_images()), hand.run_batch(_images())):
                assert got.indices.tolist() == want.indices.tolist()
                assert got.labels == want.labels and got.labels[0] == f"class{got.indices[0]}"
                np.testing.assert_array_equal(got.scores, want.scores)

    def test_matches_numpy(self, resnet) -> None:
        images = _images()
        with amdinfer.classify(resnet, topk=3, **CPU) as clf:
            results = clf.run_batch(images)
        for image, got in zip(images, results):
            order, probs = _numpy_classify(resnet, image, 73, 64, 3)
            assert got.indices.tolist() == order.tolist()
            if image.shape[:2] == (73, 100):  # no resize: the same pixels, float32 rounding only
                np.testing.assert_allclose(got.scores, probs, rtol=1e-4, atol=1e-6)
            else:  # OpenCV's resize vs the reference kernel: within 1 per pixel (random weights amplify it)
                np.testing.assert_allclose(got.scores, probs, atol=1e-2)

    def test_matches_numpy_with_opencv_resize(self, resnet) -> None:
        """With OpenCV as the resize peer (what the Resize stage runs when it is installed) the rest of the
        arithmetic agrees to float32 rounding."""
        cv2 = pytest.importorskip("cv2")
        images = _images(7)
        with amdinfer.classify(resnet, topk=3, **CPU) as clf:
            results = clf.run_batch(images)
        for image, got in zip(images, results):
            order, probs = _numpy_classify(
                resnet, image, 73, 64, 3, lambda im, wh: cv2.resize(im, wh, interpolation=cv2.INTER_LINEAR)
            )
            assert got.indices.tolist() == order.tolist()
            np.testing.assert_allclose(got.scores, probs, rtol=1e-4, atol=1e-6)

    def test_fused_gives_the_same_top_k(self, resnet) -> None:
        images = _images(5)
        with (
            amdinfer.classify(resnet, fuse=True, **CPU) as fused,
            amdinfer.classify(resnet, fuse=False, **CPU) as staged,
        ):
            assert isinstance(fused, FusedPipeline)
            for a, b in zip(fused.run_batch(images), staged.run_batch(images)):
                assert a.indices.tolist() == b.indices.tolist() and a.labels == b.labels
                np.testing.assert_allclose(a.scores, b.scores, atol=1e-5)

    def test_arguments_win(self, resnet) -> None:
        options = {"mean": 0.5, "std": [0.25, 0.5, 1.0], "labels": list("abcdefghijkl"), "softmax": False}
        with amdinfer.classify(resnet, size=(70, 90), topk=2, channels="BGR", **options, **CPU) as clf:
            assert clf.preprocess[1].size == (70, 90) and clf.preprocess[2].size == (64, 64)
            assert isinstance(clf.preprocess[3], BgrToRgb)
            assert clf.preprocess[4].mean == (0.5,) and clf.preprocess[4].std == (0.25, 0.5, 1.0)
            assert [type(s) for s in clf.postprocess] == [TopK]
            result = clf(np.zeros((80, 100, 3), np.uint8))
            assert len(result) == 2 and result.labels[0] == "abcdefghijkl"[result.indices[0]]

    def test_bgr_input_gives_the_rgb_answer(self, resnet) -> None:
        image = _images()[1]
        with amdinfer.classify(resnet, **CPU) as rgb, amdinfer.classify(resnet, channels="BGR", **CPU) as bgr:
            a, b = rgb(image), bgr(np.ascontiguousarray(image[..., ::-1]))
        assert a.indices.tolist() == b.indices.tolist()
        np.testing.assert_array_equal(a.scores, b.scores)

    def test_ultralytics_metadata(self) -> None:
        """Ultralytics' classify transforms: resize to the crop (crop fraction 1), pixels / 255 only; the
        graph already ends in a Softmax, so the recipe adds none; names from the metadata."""
        model = _ultralytics_like()
        with amdinfer.classify(model, **CPU) as clf:  # topk=5 on 4 classes: all 4, as Ultralytics' top5
            resize, crop, normalize = clf.preprocess[1:4]
            assert (resize.size, crop.size) == (48, (48, 48))
            assert normalize.mean is None and normalize.std is None and normalize.scale == pytest.approx(1 / 255)
            assert [type(s) for s in clf.postprocess] == [TopK]
            image = _images()[2]
            result = clf(image)
            x = (resize_bilinear(image, (48, 48)).astype(np.float32) / 255).transpose(2, 0, 1)[None]
            session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            (probs,) = session.run(None, {"input": x})
        assert len(result) == 4 and result.labels == [list("abcd")[i] for i in result.indices]
        np.testing.assert_allclose(np.sort(result.scores), np.sort(probs[0]), atol=2e-3)
        assert result.scores.sum() == pytest.approx(1.0, abs=1e-5)

    def test_timm_style_metadata(self) -> None:
        model = tiny_cnn(num_classes=3)
        for key, value in {"mean": "[0.5, 0.5, 0.5]", "std": "(0.25, 0.25, 0.25)", "crop_pct": "0.8"}.items():
            model.metadata_props.add(key=key, value=value)
        with amdinfer.classify(model, topk=3, **CPU) as clf:
            assert clf.preprocess[1].size == 40  # int(32 / 0.8)
            assert clf.preprocess[3].mean == (0.5, 0.5, 0.5) and clf.preprocess[3].std == (0.25, 0.25, 0.25)
            assert isinstance(clf.postprocess[0], Softmax)

    def test_dynamic_model_without_metadata_gets_224(self) -> None:
        model = tiny_cnn()
        dims = model.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_param, dims[3].dim_param = "H", "W"
        with amdinfer.classify(model, **CPU) as clf:
            assert clf.preprocess[1].size == 256 and clf.preprocess[2].size == (224, 224)
        with amdinfer.classify(model, crop=(40, 60), **CPU) as clf:
            assert clf.preprocess[1].size == 68 and clf.preprocess[2].size == (40, 60)  # int(60 / 0.875)
            assert clf(np.zeros((50, 200, 3), np.uint8)).indices.shape == (5,)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"crop": 48}, r"crop: got \(48, 48\), expected the model's fixed input size \(32, 32\)"),
            ({"size": 30}, "size: got 30, expected at least 32"),
            ({"size": (40, 20)}, r"size: got \(40, 20\), expected at least the crop"),
            ({"mean": [123.675, 116.28, 103.53]}, r"mean: got .*fractions of 255"),
            ({"std": [0.0, 0.1, 0.1]}, r"std: got"),
            ({"mean": "red"}, "mean: got 'red'"),
            ({"topk": 0}, "k: got 0"),
            ({"labels": ["a", "b"]}, "labels: got 2 names, expected 10"),
            ({"softmax": "no"}, "softmax: got 'no'"),
            ({"channels": "GBR"}, "channels: got 'GBR'"),
        ],
    )
    def test_bad_arguments(self, kwargs, match) -> None:
        with pytest.raises(OptionError, match=match):
            amdinfer.classify(tiny_cnn(), **kwargs, **CPU)

    @pytest.mark.parametrize(("key", "value"), [("mean", "not a list"), ("std", "[2.0, 2.0, 2.0]")])
    def test_bad_metadata(self, key, value) -> None:
        model = tiny_cnn()
        model.metadata_props.add(key=key, value=value)
        with pytest.raises(ModelError, match=f"metadata {key}: got"):
            amdinfer.classify(model, **CPU)

    def test_not_a_classifier(self) -> None:
        with pytest.raises(OptionError, match=r"output 'output0': got shape .*expected \(N, classes\)"):
            amdinfer.classify(yolov8(image_size=64, num_classes=2), **CPU)

    def test_exported(self) -> None:
        assert amdinfer.classify is recipes.classify and "classify" in recipes.__all__

    def test_parses_its_model_once(self, tmp_path, monkeypatch) -> None:
        """A path is read and parsed once, from the entry point to the metadata and the names (lesson 22)."""
        path = tmp_path / "clf.onnx"
        onnx.save(_ultralytics_like(), path)
        parses: list[int] = []
        parse = onnx.ModelProto.ParseFromString

        def counting(self, data):
            parses.append(1)
            return parse(self, data)

        monkeypatch.setattr(onnx.ModelProto, "ParseFromString", counting)
        clf = amdinfer.classify(path, cache=False, **CPU)
        try:
            assert clf.postprocess[0].labels == ("a", "b", "c", "d") and clf.preprocess[1].size == 48
        finally:
            clf.close()
        assert len(parses) == 1


class TestDecoder:
    """``decoder=``: how the recipes decode paths and bytes (``LoadImage``'s backend)."""

    def test_named_decoders_reach_load_image(self) -> None:
        from amdinfer.testing.models import yolov8

        with amdinfer.yolo(yolov8(image_size=64, num_classes=2), decoder="pillow", **CPU) as det:
            assert det.preprocess[0].backend == "pillow"
        with pytest.raises(amdinfer.OptionError, match=r"decoder: got 'turbo', expected one of \('auto', "):
            amdinfer.yolo(yolov8(image_size=64, num_classes=2), decoder="turbo", **CPU)

    def test_nvjpeg_without_a_cuda_torch_says_what_is_missing(self) -> None:
        from amdinfer.preprocess import LoadImage

        try:
            import torch

            if torch.cuda.is_available():
                pytest.skip("a CUDA GPU is here: tests/engines/test_gpu.py checks the nvJPEG decoder")
        except ImportError:
            pass
        with pytest.raises(
            amdinfer.BackendUnavailableError, match=r"LoadImage\(backend='nvjpeg'\): .*backend='opencv'"
        ):
            LoadImage(backend="nvjpeg")
