"""Pipeline: end to end on the builder models against the same steps by hand; batching; map; errors; threads."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer import reference as ref
from amdinfer.engines.ort import OrtEngine
from amdinfer.errors import OptionError, StageError
from amdinfer.pipeline import Pipeline
from amdinfer.postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode
from amdinfer.preprocess import Cast, CenterCrop, HwcToChw, Letterbox, Normalize, Resize
from amdinfer.quantize import QuantizationSpec
from amdinfer.results import Classification, Detections
from amdinfer.stages import Preprocessor
from amdinfer.testing import models

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _images(n: int, seed: int = 0, shape: tuple[int, int] = (32, 32)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for _ in range(n)]


_BEFORE: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _threads_before_the_test() -> None:
    """The threads alive when a test starts: a pool that an earlier test's pipeline still holds is not this one's."""
    _BEFORE.clear()
    _BEFORE.update(threading.enumerate())


def _map_threads() -> list[threading.Thread]:
    """The executor threads this test started that are still alive."""
    return [t for t in threading.enumerate() if t.name.startswith("amdinfer-map") and t not in _BEFORE]


@pytest.fixture(scope="module")
def tiny() -> onnx.ModelProto:
    return models.tiny_cnn()


@pytest.fixture()
def tiny_pipe(tiny: onnx.ModelProto) -> Pipeline:
    with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, **CPU) as pipe:
        yield pipe


class Fail(Preprocessor):
    """Raises on images whose first pixel equals ``value``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def process(self, data, meta):
        if int(data.flat[0]) == self.value:
            raise ValueError(f"pixel is {self.value}")
        return data


class Slow(Preprocessor):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def process(self, data, meta):
        time.sleep(self.seconds)
        return data


# ---------------------------------------------------------------------------------------------- end to end
class TestDetectionPipeline:
    """YOLOv8/v5-style models at 160: the pipeline equals letterbox -> engine -> NMS -> scale_boxes by hand."""

    @pytest.mark.parametrize("builder", [models.yolov8, models.yolov5])
    def test_matches_steps_by_hand(self, builder) -> None:
        model = builder(image_size=160, num_classes=80)
        rng = np.random.default_rng(3)
        images = [rng.integers(0, 256, (120, 200, 3), dtype=np.uint8), rng.integers(0, 256, (90, 70, 3), np.uint8)]
        engine = amdinfer.load(model, **CPU)
        pipe = Pipeline(
            preprocess=[Letterbox(160, backend="numpy"), Normalize(scale=1 / 255), HwcToChw()],
            engine=engine,
            postprocess=[YoloDecode(conf_threshold=0.05), Nms(iou_threshold=0.5), ScaleBoxes()],
        )
        got = pipe.run_batch(images)
        for image, det in zip(images, got):
            lb, ratio, pad = ref.letterbox(image, (160, 160))
            x = (lb.astype(np.float32) / np.float32(255)).transpose(2, 0, 1)[None]  # Normalize divides
            pred = engine.run({"images": np.ascontiguousarray(x)})["output0"]
            (want,) = ref.non_max_suppression(pred, conf_threshold=0.05, iou_threshold=0.5)
            # Ultralytics >= 8.4 scale_boxes: per-axis gains round(w * r) / w, round(h * r) / h
            h, w = image.shape[:2]
            gain = np.array([round(w * ratio[0]) / w, round(h * ratio[1]) / h] * 2)
            offset = np.array([round(pad[0] - 0.1), round(pad[1] - 0.1)] * 2, np.float64)
            boxes = ref.clip_boxes((want[:, :4] - offset) / gain, (h, w))
            assert isinstance(det, Detections)
            assert det.image_shape == image.shape[:2]
            assert len(det) == len(want) > 0
            np.testing.assert_allclose(det.boxes, boxes, rtol=0, atol=1e-3)
            np.testing.assert_allclose(det.scores, want[:, 4], rtol=1e-6)
            np.testing.assert_array_equal(det.classes, want[:, 5].astype(np.int64))
        assert pipe(images[0]).boxes.tolist() == got[0].boxes.tolist()
        engine.close()


class TestClassificationPipeline:
    """ResNet-50 at 64: the pipeline equals resize -> crop -> normalize -> engine -> softmax -> top-5 by hand."""

    def test_matches_steps_by_hand(self) -> None:
        model = models.resnet50(image_size=64, batchnorm=False)
        labels = [f"class{i}" for i in range(1000)]
        pipe = Pipeline(
            preprocess=[Resize(72, backend="numpy"), CenterCrop(64), Normalize(MEAN, STD, scale=1 / 255), HwcToChw()],
            engine=model,
            postprocess=[Softmax(), TopK(5, labels=labels)],
            **CPU,
        )
        images = _images(3, seed=5, shape=(80, 100))
        got = pipe.run_batch(images)
        for image, res in zip(images, got):
            small = ref.resize_bilinear(image, (90, 72))  # OpenCV order (w, h)
            crop = small[4:68, 13:77].astype(np.float64) / 255
            x = ((crop - np.array(MEAN)) / np.array(STD)).transpose(2, 0, 1)[None].astype(np.float32)
            logits = pipe.engine.run({"input": x})["logits"][0].astype(np.float64)
            prob = np.exp(logits - logits.max())
            prob /= prob.sum()
            top = np.argsort(-prob, kind="stable")[:5]
            assert isinstance(res, Classification)
            np.testing.assert_array_equal(res.indices, top)
            np.testing.assert_allclose(res.scores, prob[top], rtol=1e-4)
            assert res.labels == [labels[i] for i in top]
        pipe.close()
        assert pipe.engine.closed  # the pipeline loaded it, so it closes it


# ---------------------------------------------------------------------------------------------- construction
class TestConstruction:
    def test_rejects_non_stages(self, tiny: onnx.ModelProto) -> None:
        with pytest.raises(OptionError, match=r"preprocess\[1\]: got function"):
            Pipeline(preprocess=[HwcToChw(), lambda x: x], engine=tiny, **CPU)
        with pytest.raises(OptionError, match=r"postprocess\[0\]: got HwcToChw, expected a Postprocessor"):
            Pipeline(postprocess=[HwcToChw()], engine=tiny, **CPU)

    def test_engine_instance_refuses_load_options(self, tiny: onnx.ModelProto) -> None:
        engine = amdinfer.load(tiny, **CPU)
        with pytest.raises(OptionError, match=r"quantizer.*Engine instance"):
            Pipeline(engine=engine, quantizer=object())
        with pytest.raises(OptionError, match=r"precision"):
            Pipeline(engine=engine, precision="fp16")
        pipe = Pipeline(engine=engine)
        pipe.close()
        assert not engine.closed  # not the pipeline's to close
        engine.close()

    def test_quantizer_goes_to_load(self, tiny: onnx.ModelProto) -> None:
        seen = []

        class Recorder:
            precision = "fp32"

            def quantize(self, model: onnx.ModelProto) -> onnx.ModelProto:
                seen.append(model.graph.name)
                return model

            def describe(self) -> QuantizationSpec:  # the rest of the Quantizer protocol
                return QuantizationSpec("fp16")

            def calibration_feeds(self, model: onnx.ModelProto) -> list:
                return []

            def settings(self) -> dict:
                return {"kind": "recorder"}

        q = Recorder()
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, quantizer=q, **CPU) as pipe:
            assert pipe.quantizer is q
            assert pipe(np.zeros((32, 32, 3), np.uint8)).shape == (10,)
            assert "quantizer=" in repr(pipe)
        assert len(seen) == 1

    def test_repr_one_stage_per_line(self, tiny_pipe: Pipeline) -> None:
        lines = repr(tiny_pipe).splitlines()
        assert lines[0] == "Pipeline("
        assert "        HwcToChw()," in lines
        assert "        Cast(dtype='float32')," in lines
        assert any(line.startswith("    engine=<OrtEngine") for line in lines)
        assert "    postprocess=[]," in lines

    def test_stages_pickle(self) -> None:
        stages = [
            Letterbox(320, auto=True),
            Resize((10, 20)),
            CenterCrop(8),
            Normalize(MEAN, STD, 1 / 255),
            Cast("float16"),
            YoloDecode("v8", conf_threshold=0.3, labels=["a", "b"]),
            Nms(iou_threshold=0.6, agnostic=True, classes=[1]),
            ScaleBoxes(),
            TopK(3, labels=["a", "b", "c"]),
        ]
        for stage in stages:
            copy = pickle.loads(pickle.dumps(stage))
            assert copy == stage and repr(copy) == repr(stage)

    def test_multi_input_model_refused(self) -> None:
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 2])
        y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 2])
        z = onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, ["N", 2])
        graph = onnx.helper.make_graph([onnx.helper.make_node("Add", ["x", "y"], ["z"])], "add", [x, y], [z])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
        with pytest.raises(OptionError, match=r"inputs \['x', 'y'\], expected exactly one"):
            Pipeline(engine=model, **CPU)


# ---------------------------------------------------------------------------------------------- batching
def _spy(engine: amdinfer.Engine) -> list[tuple[int, ...]]:
    calls: list[tuple[int, ...]] = []
    run = engine.run

    def spy(feeds, **kw):
        calls.append((feeds if isinstance(feeds, np.ndarray) else next(iter(feeds.values()))).shape)
        return run(feeds, **kw)

    engine.run = spy  # type: ignore[method-assign]
    return calls


def _static_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = batch
    return model


def _any_size(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with symbolic height and width (tiny_cnn ends in a global pool, so it takes any size)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], "hw"):
        d.dim_param = name
    return model


class TestRunBatch:
    def test_one_engine_call_per_batch(self, tiny: onnx.ModelProto) -> None:
        images = _images(5)
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, **CPU) as pipe:
            calls = _spy(pipe.engine)
            got = pipe.run_batch(images)
            assert calls == [(5, 3, 32, 32)]
            want = pipe.engine.run(np.stack([im.transpose(2, 0, 1) for im in images]).astype(np.float32))["logits"]
        np.testing.assert_allclose(np.stack(got), want, rtol=1e-5, atol=1e-6)

    def test_batch_buckets(self, tiny: onnx.ModelProto) -> None:
        images = _images(3)
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, batch_buckets=[4], **CPU) as pipe:
            got = pipe.run_batch(images)
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, **CPU) as plain:
            want = [plain(im) for im in images]
        assert len(got) == 3
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)

    def test_static_batch_chunks(self, tiny: onnx.ModelProto) -> None:
        images = _images(5)
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=_static_batch(tiny, 2), **CPU) as pipe:
            calls = _spy(pipe.engine)
            got = pipe.run_batch(images)
        assert calls == [(2, 3, 32, 32)] * 3
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, **CPU) as plain:
            want = plain.run_batch(images)
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)

    def test_errors_name_item_and_stage(self, tiny_pipe: Pipeline, tiny: onnx.ModelProto) -> None:
        with pytest.raises(StageError, match=r"item 1: preprocess\[0\] HwcToChw: InputError") as info:
            tiny_pipe.run_batch([np.zeros((32, 32, 3), np.uint8), "not an image"])
        assert info.value.index == 1 and "HwcToChw" in info.value.stage
        # items of two shapes run as two engine calls; the 32x32 model refuses the other one, naming its items
        mixed = [np.zeros((32, 32, 3), np.uint8), np.zeros((40, 40, 3), np.uint8)] * 2
        with pytest.raises(StageError, match=r"items 1, 3 \(one batch\): engine OrtEngine: InputError") as info:
            tiny_pipe.run_batch(mixed)
        assert info.value.index == 1
        with Pipeline(preprocess=[HwcToChw()], engine=tiny, **CPU) as no_cast:
            with pytest.raises(StageError, match=r"item 0: engine OrtEngine: InputError: .*dtype uint8"):
                no_cast(np.zeros((32, 32, 3), np.uint8))

    @pytest.mark.parametrize("fixed", [None, 2])
    def test_mixed_shapes_one_call_per_shape(self, tiny: onnx.ModelProto, fixed: int | None) -> None:
        model = _any_size(tiny if fixed is None else _static_batch(tiny, fixed))
        shapes = [(32, 32), (40, 24), (32, 32), (40, 24), (48, 48), (32, 32), (40, 24)]
        images = [_images(1, seed=i, shape=hw)[0] for i, hw in enumerate(shapes)]
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=model, **CPU) as pipe:
            want = [pipe(im) for im in images]  # one item per call: the per-item truth
            calls = _spy(pipe.engine)
            got = pipe.run_batch(images)
        if fixed is None:  # groups in order of their first item, each one call
            assert calls == [(3, 3, 32, 32), (3, 3, 40, 24), (1, 3, 48, 48)]
        else:  # each group in chunks of 2, the last one padded
            assert calls == [(2, 3, 32, 32)] * 2 + [(2, 3, 40, 24)] * 2 + [(2, 3, 48, 48)]
        assert len(got) == len(images)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        # the answers really differ per item, so an order mix-up could not pass
        assert min(np.abs(got[i] - got[j]).max() for i in range(7) for j in range(i)) > 1e-4

    def test_empty(self, tiny_pipe: Pipeline) -> None:
        assert tiny_pipe.run_batch([]) == []


# ---------------------------------------------------------------------------------------------- map
class TestMap:
    @pytest.mark.parametrize(("batch_size", "workers"), [(1, 1), (3, 2), (4, 0)])
    def test_order_matches_run_batch(self, tiny_pipe: Pipeline, batch_size: int, workers: int) -> None:
        images = _images(11, seed=batch_size)
        want = tiny_pipe.run_batch(images)
        got = list(tiny_pipe.map(iter(images), batch_size=batch_size, workers=workers))
        assert len(got) == len(want)
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)
        assert not _map_threads()

    def test_order_kept_with_uneven_work(self, tiny: onnx.ModelProto) -> None:
        # Items take different times to preprocess, so workers finish out of order.
        class Jitter(Preprocessor):
            def process(self, data, meta):
                time.sleep(0.002 * (int(data.flat[0]) % 5))
                return data

        images = [np.full((32, 32, 3), i, np.uint8) for i in range(20)]
        with Pipeline(preprocess=[Jitter(), HwcToChw(), Cast("float32")], engine=tiny, **CPU) as pipe:
            want = [pipe(im) for im in images]
            got = list(pipe.map(images, batch_size=3, workers=4))
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("workers", [0, 2])
    def test_first_error_has_index_and_stage(self, tiny: onnx.ModelProto, workers: int) -> None:
        images = [np.full((32, 32, 3), i, np.uint8) for i in range(12)]
        with Pipeline(preprocess=[Fail(7), HwcToChw(), Cast("float32")], engine=tiny, **CPU) as pipe:
            got = []
            with pytest.raises(StageError, match=r"item 7: preprocess\[0\] Fail: ValueError: pixel is 7") as info:
                for r in pipe.map(images, batch_size=2, workers=workers):
                    got.append(r)
        assert info.value.index == 7
        assert isinstance(info.value.__cause__, ValueError)
        assert len(got) == 7  # items 0..6 (6 shares a batch with 7, but the batch is cut short for it)
        assert not _map_threads()

    def test_error_in_input_iterable(self, tiny_pipe: Pipeline) -> None:
        def items():
            yield np.zeros((32, 32, 3), np.uint8)
            raise OSError("disk gone")

        with pytest.raises(StageError, match=r"item 1: input iterable: OSError: disk gone"):
            list(tiny_pipe.map(items()))
        assert not _map_threads()

    def test_postprocess_error(self, tiny: onnx.ModelProto) -> None:
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, postprocess=[TopK(11)], **CPU) as pipe:
            with pytest.raises(StageError, match=r"item 0: postprocess\[0\] TopK: InputError: TopK: k=11"):
                next(pipe.map(_images(3)))
        assert not _map_threads()

    def test_early_stop_leaves_no_threads(self, tiny: onnx.ModelProto) -> None:
        endless = (np.full((32, 32, 3), i % 256, np.uint8) for i in range(10**9))
        with Pipeline(preprocess=[Slow(0.001), HwcToChw(), Cast("float32")], engine=tiny, **CPU) as pipe:
            for i, _ in enumerate(pipe.map(endless, batch_size=2, workers=3)):
                if i == 4:
                    break
            # Leaving the for loop drops the iterator; CPython collects it at once and its close() joins.
            assert not _map_threads()
            results = pipe.map(_images(50), batch_size=4)
            next(results)
            assert _map_threads()
            results.close()
            assert not _map_threads()
            assert list(results) == []

    def test_bad_arguments(self, tiny_pipe: Pipeline) -> None:
        with pytest.raises(OptionError, match=r"batch_size: got 0"):
            tiny_pipe.map([], batch_size=0)
        with pytest.raises(OptionError, match=r"workers: got -1"):
            tiny_pipe.map([], workers=-1)
        with pytest.raises(OptionError, match=r"items: got int"):
            tiny_pipe.map(3)


# ---------------------------------------------------------------------------------------------- map -> run_many
class BadDtype(Preprocessor):
    """Makes images whose first pixel is in ``values`` float64, which the float32 model refuses."""

    def __init__(self, values: tuple[int, ...]) -> None:
        self.values = values

    def process(self, data, meta):
        return data.astype(np.float64) if int(data.flat[0]) in self.values else data


class ReadAhead(OrtEngine):
    """An engine whose ``run_many`` reads every batch before it yields the first result (the most any
    overriding ``run_many`` may read ahead), counting its calls."""

    def run_many(self, batches, *, outputs=None, prefetch=2):
        self.calls = [*getattr(self, "calls", []), prefetch]
        read = list(batches)
        self.shapes = [next(iter(b.values())).shape for b in read]
        return (self.run(b, outputs=outputs) for b in read)


def _numbered(n: int) -> list[np.ndarray]:
    return [np.full((32, 32, 3), i, np.uint8) for i in range(n)]


def _plain(tiny: onnx.ModelProto, images: list[np.ndarray]) -> list[np.ndarray]:
    """The results of plain ``pipe(image)`` calls, one engine call per image: the truth for map."""
    with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny, **CPU) as plain:
        return [plain(im) for im in images]


def _run_threads() -> list[threading.Thread]:
    """The executor and engine threads this test started that are still alive (see ``_threads_before_the_test``)."""
    names = ("amdinfer-map", "amdinfer-run")
    return [t for t in threading.enumerate() if t.name.startswith(names) and t not in _BEFORE]


@pytest.fixture(params=["plain", "io_binding", "io_binding_overlap"])
def bound(request, tiny: onnx.ModelProto) -> OrtEngine:
    """A CPU ORT engine: plain session.run, the IOBinding runner, and the runner's overlapped path (threads
    that read batches ahead; on a GPU it takes batches of >= 64 MiB, here every batch)."""
    engine = OrtEngine(tiny, providers=["cpu"], io_binding=request.param != "plain")
    if request.param == "io_binding_overlap":
        engine._runner.overlap_bytes = 0
    yield engine
    engine.close()


class TestMapRunMany:
    """The engine stage of map feeds the stacked batches to ``engine.run_many`` and keeps map's guarantees."""

    def test_engine_run_many_defaults(self, tiny: onnx.ModelProto) -> None:
        engine = amdinfer.load(tiny, backend="reference")
        assert type(engine).run_many is amdinfer.Engine.run_many
        batches = [np.full((n, 3, 32, 32), n, np.float32) for n in (1, 3, 2)]
        read = []

        def lazy():
            for b in batches:
                read.append(b.shape[0])
                yield b

        results = engine.run_many(lazy())
        assert read == []  # nothing read before a result is asked for
        first = next(results)
        assert read == [1]
        got = [first, *results]
        with amdinfer.load(tiny, **CPU) as ort:
            for out, b in zip(got, batches):
                np.testing.assert_allclose(out["logits"], ort.run(b)["logits"], rtol=1e-4, atol=1e-5)
        with pytest.raises(OptionError, match=r"prefetch: got 0, expected an int >= 1"):
            engine.run_many(batches, prefetch=0)
        assert [list(out) for out in engine.run_many(batches[:1], outputs=["logits"])] == [["logits"]]
        engine.close()
        with pytest.raises(amdinfer.errors.EngineClosedError):
            engine.run_many(batches)  # at the call, not at the first result

    def test_ort_run_many_signature_agrees(self) -> None:
        import inspect

        base = inspect.signature(amdinfer.Engine.run_many).parameters
        ort = inspect.signature(OrtEngine.run_many).parameters
        assert [(p.name, p.kind, p.default) for p in base.values()] == [
            (p.name, p.kind, p.default) for p in ort.values()
        ]

    @pytest.mark.parametrize(("batch_size", "fixed", "want_shapes"), [(3, None, [3, 3, 1]), (3, 2, [2, 2, 2, 2, 2])])
    def test_map_calls_run_many(self, tiny: onnx.ModelProto, batch_size, fixed, want_shapes) -> None:
        images = _images(7, seed=4)
        model = tiny if fixed is None else _static_batch(tiny, fixed)
        engine = ReadAhead(model, providers=["cpu"])
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=engine) as pipe:
            run_calls = _spy(engine)
            got = list(pipe.map(images, batch_size=batch_size, workers=2))
        assert engine.calls == [2]  # one run_many per map, prefetch=2
        assert [s[0] for s in engine.shapes] == want_shapes  # a fixed batch of 2: chunks, the last ones padded
        assert len(run_calls) == len(want_shapes)
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images)), rtol=1e-5, atol=1e-6)
        assert not _run_threads()
        engine.close()

    @pytest.mark.parametrize("batch_size", [1, 4])
    def test_ort_engine_paths_match_plain_calls(self, tiny: onnx.ModelProto, bound: OrtEngine, batch_size) -> None:
        images = _images(10, seed=batch_size)
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=bound) as pipe:
            got = list(pipe.map(images, batch_size=batch_size, workers=2))
        assert len(got) == 10
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images)), rtol=1e-5, atol=1e-6)
        assert not _run_threads()

    def test_preprocess_error_after_read_ahead(self, tiny: onnx.ModelProto) -> None:
        # run_many has read every batch before the failing item's; their results still come first.
        engine = ReadAhead(tiny, providers=["cpu"])
        images = _numbered(12)
        with Pipeline(preprocess=[Fail(7), HwcToChw(), Cast("float32")], engine=engine) as pipe:
            got = []
            with pytest.raises(StageError, match=r"item 7: preprocess\[0\] Fail: ValueError: pixel is 7") as info:
                for r in pipe.map(images, batch_size=2, workers=2):
                    got.append(r)
        assert info.value.index == 7 and info.value.stage == "preprocess[0] Fail"
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images[:7])), rtol=1e-5, atol=1e-6)
        assert not _run_threads()
        engine.close()

    def test_preprocess_error_through_overlap(self, tiny: onnx.ModelProto, bound: OrtEngine) -> None:
        images = _numbered(12)
        with Pipeline(preprocess=[Fail(5), HwcToChw(), Cast("float32")], engine=bound) as pipe:
            got = []
            with pytest.raises(StageError, match=r"item 5: preprocess\[0\] Fail") as info:
                for r in pipe.map(images, batch_size=1, workers=3):
                    got.append(r)
        assert info.value.index == 5
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images[:5])), rtol=1e-5, atol=1e-6)
        assert not _run_threads()

    def test_engine_error_names_its_batch(self, tiny: onnx.ModelProto, bound: OrtEngine) -> None:
        images = _numbered(9)
        with Pipeline(preprocess=[HwcToChw(), BadDtype((5,)), Cast("float32")], engine=bound) as ok:
            assert len(list(ok.map(images))) == 9  # Cast after BadDtype: nothing fails
        with Pipeline(preprocess=[HwcToChw(), Cast("float32"), BadDtype((5,))], engine=bound) as pipe:
            got = []
            with pytest.raises(
                StageError, match=r"item 5: engine OrtEngine: InputError: input 'input': got dtype float64"
            ):
                for r in pipe.map(images, batch_size=1, workers=2):
                    got.append(r)
        assert len(got) == 5
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images[:5])), rtol=1e-5, atol=1e-6)
        assert not _run_threads()

    def test_engine_error_in_a_chunk_names_the_whole_batch(self, tiny: onnx.ModelProto) -> None:
        images = _numbered(9)
        stages = [HwcToChw(), Cast("float32"), BadDtype((3, 4, 5))]
        engine = OrtEngine(_static_batch(tiny, 2), providers=["cpu"], io_binding=True)
        engine._runner.overlap_bytes = 0
        with Pipeline(preprocess=stages, engine=engine) as pipe:
            got = []
            with pytest.raises(StageError, match=r"items 3\.\.5 \(one batch\): engine OrtEngine: InputError") as info:
                for r in pipe.map(images, batch_size=3, workers=2):
                    got.append(r)
        assert info.value.index == 3
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images[:3])), rtol=1e-5, atol=1e-6)
        assert not _run_threads()
        engine.close()

    def test_stack_error_after_read_ahead(self, tiny: onnx.ModelProto) -> None:
        images = _images(8)
        images[5] = images[5][:16]
        engine = ReadAhead(tiny, providers=["cpu"])
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=engine) as pipe:
            got = []
            with pytest.raises(StageError, match=r"items 4\.\.5 \(one batch\): stack: StageError"):
                for r in pipe.map(images, batch_size=2, workers=2):
                    got.append(r)
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images[:4])), rtol=1e-5, atol=1e-6)
        engine.close()

    def test_run_many_that_fails_or_drops_results(self, tiny: onnx.ModelProto) -> None:
        class Broken(OrtEngine):
            def run_many(self, batches, *, outputs=None, prefetch=2):
                raise RuntimeError("no stream today")

        class Short(OrtEngine):
            def run_many(self, batches, *, outputs=None, prefetch=2):
                it = iter(batches)
                yield self.run(next(it))
                next(it)  # reads a second batch, never yields its result

        for cls, pattern, n in (
            (Broken, r"item 0: engine Broken: RuntimeError: no stream today", 0),
            (Short, r"item 1: engine Short: StageError: Short.run_many ended before the results of every batch", 1),
        ):
            engine = cls(tiny, providers=["cpu"])
            with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=engine) as pipe:
                got = []
                with pytest.raises(StageError, match=pattern):
                    for r in pipe.map(_images(4), workers=2):
                        got.append(r)
            assert len(got) == n
            assert not _run_threads()
            engine.close()

    def test_closed_engine(self, tiny: onnx.ModelProto) -> None:
        engine = amdinfer.load(tiny, **CPU)
        pipe = Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=engine)
        engine.close()
        with pytest.raises(StageError, match=r"item 0: engine OrtEngine: EngineClosedError"):
            list(pipe.map(_images(3)))
        assert not _run_threads()

    def test_early_close_with_read_ahead(self, tiny: onnx.ModelProto, bound: OrtEngine) -> None:
        endless = (np.full((32, 32, 3), i % 256, np.uint8) for i in range(10**9))
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=bound) as pipe:
            results = pipe.map(endless, batch_size=2, workers=2)
            want = _plain(tiny, _numbered(6))
            for i, r in enumerate(results):
                np.testing.assert_allclose(r, want[i], rtol=1e-5, atol=1e-6)
                if i == 5:
                    break
            results.close()
            assert not _run_threads()


class TestSpinWait:
    """``OrtEngine(spin_wait=)``, which docs/pipeline.md recommends for map on a CPU engine."""

    def test_reaches_the_session_and_info(self, tiny: onnx.ModelProto) -> None:
        for value, entry in ((False, "0"), (True, "1")):
            with amdinfer.load(tiny, spin_wait=value, **CPU) as engine:
                options = engine.session.get_session_options()
                assert options.get_session_config_entry("session.intra_op.allow_spinning") == entry
                assert engine.info.settings["session"]["intra_op_allow_spinning"] is value
        with amdinfer.load(tiny, **CPU) as engine:  # None: ONNX Runtime's own default, no entry set
            assert engine.info.settings["session"]["intra_op_allow_spinning"] is None
            with pytest.raises(RuntimeError, match="allow_spinning"):
                engine.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
        with pytest.raises(OptionError, match=r"spin_wait: got 'no', expected True, False or None"):
            amdinfer.load(tiny, spin_wait="no", **CPU)

    def test_map_results_unchanged(self, tiny: onnx.ModelProto) -> None:
        images = _images(6, seed=8)
        stages = [HwcToChw(), Cast("float32")]
        with Pipeline(preprocess=stages, engine=tiny, spin_wait=False, **CPU) as pipe:
            got = list(pipe.map(images, batch_size=2))
        np.testing.assert_allclose(np.stack(got), np.stack(_plain(tiny, images)), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------- the notebook
class TestQuickstartNotebook:
    def test_runs_top_to_bottom(self) -> None:
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        pytest.importorskip("ipykernel")
        pytest.importorskip("skimage")
        from pathlib import Path

        path = Path(__file__).parents[2] / "examples" / "quickstart.ipynb"
        nb = nbformat.read(path, as_version=4)
        nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors
        text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
        assert "item 1: preprocess[0] Resize: InputError" in text  # the error cell shows a located error
