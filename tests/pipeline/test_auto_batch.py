"""Batch sizes chosen for the device (amdinfer.pipeline._auto) and one call on a list split into sub-batches on an
accelerator.

Truths: the rule's cases are hand-computed from its documented arithmetic; the pipelines' answers are those of the
thread-free path (``map(batch_size=1, workers=0)``, ``run_batch`` with the engine on the CPU, each item alone),
which the splitting must reproduce exactly and in order. The accelerator is faked: an ONNX Runtime CPU engine whose
``info.device`` reads ``"cuda:0"``, which is all the pipelines read to decide (the engine itself still computes on
the CPU, so its answers are the CPU's).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.errors import OptionError, StageError
from amdinfer.pipeline import Pipeline
from amdinfer.pipeline._auto import (
    ACCELERATOR_BATCH,
    MEMORY_PER_ITEM,
    auto_batch_size,
    export_hint,
    split_size,
)
from amdinfer.pipeline._map import map_options
from amdinfer.preprocess import Cast, HwcToChw, Normalize, Resize
from amdinfer.stages import Preprocessor
from amdinfer.testing import models

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}
GPU = "cuda:0"


def _images(n: int, shape: tuple[int, int] = (32, 32), seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*shape, 3), dtype=np.uint8) for _ in range(n)]


def _static_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = batch
    return model


def _any_size(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], "hw"):
        d.dim_param = name
    return model


class Spied:
    """An ORT CPU engine made to look like an accelerator, recording the rows of every batch it runs (its CPU
    ``run_many`` runs each batch through ``run``)."""

    def __init__(self, model: onnx.ModelProto, device: str = GPU, **load: Any) -> None:
        self.engine = amdinfer.load(model, **CPU, **load)
        self.engine.info.device = device
        self.rows: list[int] = []
        run = self.engine.run  # run_many on the CPU runs each batch through run

        def spy_run(feeds: Any, **kw: Any) -> Any:
            self.rows.append(next(iter(feeds.values())).shape[0])
            return run(feeds, **kw)

        self.engine.run = spy_run  # type: ignore[method-assign]


def _equal(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _stages() -> list[Preprocessor]:
    return [HwcToChw(), Cast("float32")]


# ------------------------------------------------------------------ the pure rule
class TestRule:
    def test_cpu_is_one_and_says_why(self) -> None:
        size, why = auto_batch_size("cpu", ["CPUExecutionProvider"], (), None)
        assert size == 1 and "CPU" in why
        assert auto_batch_size(None)[0] == 1  # no device: the CPU
        assert auto_batch_size("cpu", batch_buckets=(8, 32))[0] == 1  # buckets do not change the CPU's choice

    def test_accelerator_dynamic_batch(self) -> None:
        size, why = auto_batch_size(GPU, ["CUDAExecutionProvider"], (), None)
        assert size == ACCELERATOR_BATCH == 64
        assert "cuda:0 (CUDAExecutionProvider)" in why and "dynamic" in why
        assert auto_batch_size("rocm:0", [], (), None)[0] == 64  # MIGraphX names no provider

    def test_buckets_give_the_largest(self) -> None:
        size, why = auto_batch_size(GPU, ["CUDAExecutionProvider"], (16, 4, 32), None)
        assert size == 32 and "(4, 16, 32)" in why

    @pytest.mark.parametrize("device", ["cpu", GPU])
    def test_fixed_batch_is_its_batch(self, device: str) -> None:
        size, why = auto_batch_size(device, [], (), 4)
        assert size == 4 and "fixed at 4" in why

    def test_memory_cap(self) -> None:
        item = 3 * 640 * 640 * 4  # one float32 YOLO input
        free = 40 * MEMORY_PER_ITEM * item + 5  # room for 40 such items
        size, why = auto_batch_size(GPU, [], (), None, free_memory_bytes=free, item_bytes=item)
        assert size == 40 and "capped to 40" in why
        # with buckets: the largest bucket that fits
        assert auto_batch_size(GPU, [], (8, 32, 64), None, free_memory_bytes=free, item_bytes=item)[0] == 32
        # none fits: the cap itself, and never below 1
        assert auto_batch_size(GPU, [], (64,), None, free_memory_bytes=free, item_bytes=item)[0] == 40
        assert auto_batch_size(GPU, [], (), None, free_memory_bytes=10, item_bytes=item)[0] == 1
        # plenty of memory, or an unknown side of it: no cap
        assert auto_batch_size(GPU, [], (), None, free_memory_bytes=2**40, item_bytes=item)[0] == 64
        assert auto_batch_size(GPU, [], (), None, free_memory_bytes=10, item_bytes=None)[0] == 64

    def test_split_size(self) -> None:
        # the automatic batch, split only into two sub-batches or more (a call of 64 on a GPU stays one batch)
        assert [split_size(n, 64) for n in (8, 15, 16, 64, 100, 127, 128, 1024)] == [None] * 6 + [64, 64]
        assert split_size(64, 64, (8, 32)) == 32  # at most the largest bucket
        assert split_size(64, 64, (8, 12)) == 12
        assert split_size(64, 4) == 4 and split_size(7, 4) is None
        assert split_size(3, 1, fixed_batch=1) == 1 and split_size(1, 1, fixed_batch=1) is None

    def test_map_options_take_auto(self) -> None:
        assert map_options([], "auto", None) == (None, None)
        assert map_options([], None, 2) == (None, 2)
        with pytest.raises(OptionError, match=r'batch_size: got \'AUTO\', expected an int >= 1, "auto" or None'):
            map_options([], "AUTO", None)

    def test_export_hint_names_the_ways(self) -> None:
        hint = export_hint(1)
        assert "dynamic=True" in hint and 'dynamic_axes={"images": {0: "batch"}}' in hint
        assert "batch_buckets" in hint


# ------------------------------------------------------------------ map's default on the CPU
class TestCpuDefault:
    def test_map_default_equals_batch_one_and_is_recorded(self) -> None:
        images = _images(9, seed=1)
        with Pipeline(preprocess=_stages(), engine=models.tiny_cnn(), **CPU) as pipe:
            want = list(pipe.map(images, batch_size=1, workers=0))
            _equal(list(pipe.map(images)), want)
            _equal(list(pipe.map(images, batch_size=None, workers=0)), want)
            _equal(pipe.run_batch(images), want)
            chosen = pipe.engine.info.settings["map_batch_size"]
        assert chosen["size"] == 1 and "CPU" in chosen["why"]
        # the answers really differ per item, so an order mix-up could not pass
        assert min(np.abs(want[i] - want[j]).max() for i in range(9) for j in range(i)) > 1e-5

    def test_fused_map_default_equals_batch_one(self) -> None:
        images = _images(7, (40, 48), seed=2)
        stages = [Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()]
        with Pipeline(preprocess=stages, engine=models.tiny_cnn(), **CPU) as pipe, pipe.fuse() as fused:
            want = list(fused.map(images, batch_size=1, workers=0))
            _equal(list(fused.map(images)), want)
            assert fused.engine.info.settings["map_batch_size"]["size"] == 1

    def test_embed_keeps_its_batch_size(self) -> None:
        pytest.importorskip("tokenizers")
        from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer

        texts = ["the cat", "the dog sat on the mat", "cat", "a mat"] * 3
        with amdinfer.embed(toy_encoder(), toy_tokenizer(), buckets=(4, 8), batch_size=2, **CPU) as embedder:
            assert embedder.pipeline._default_batch_size() == 2
            want = embedder.pipeline.run_batch(texts)
            got = list(embedder.map(iter(texts), batch_size="auto"))
        np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ on an accelerator (faked)
class TestAccelerator:
    def test_map_default_is_64_on_an_accelerator(self) -> None:
        spied = Spied(models.tiny_cnn())
        images = _images(70, seed=3)
        with Pipeline(preprocess=_stages(), engine=spied.engine) as pipe:
            got = list(pipe.map(images))
        assert spied.rows == [64, 6]
        assert spied.engine.info.settings["map_batch_size"]["size"] == 64
        with Pipeline(preprocess=_stages(), engine=models.tiny_cnn(), **CPU) as cpu:
            _equal(got, list(cpu.map(images, batch_size=1, workers=0)))

    def test_map_default_takes_the_largest_bucket(self) -> None:
        spied = Spied(models.tiny_cnn(), batch_buckets=(4, 16))
        with Pipeline(preprocess=_stages(), engine=spied.engine) as pipe:
            assert len(list(pipe.map(_images(20, seed=4)))) == 20
        assert spied.rows == [16, 4]
        assert spied.engine.info.settings["map_batch_size"]["size"] == 16

    def test_run_batch_of_64_is_split_with_the_serial_answers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(amdinfer.pipeline._auto, "ACCELERATOR_BATCH", 16)  # 64 items: four automatic batches
        images = _images(64, seed=5)
        with Pipeline(preprocess=_stages(), engine=models.tiny_cnn(), **CPU) as cpu:
            want = cpu.run_batch(images)  # the engine on the CPU: one call, in the caller's thread
        spied = Spied(models.tiny_cnn())
        with Pipeline(preprocess=_stages(), engine=spied.engine) as pipe:
            got = pipe.run_batch(images)
            assert len(spied.rows) >= 2 and sum(spied.rows) == 64  # several engine calls, no padding
            assert spied.rows == [16] * 4
            spied.rows.clear()
            _equal(pipe.run_batch(images[:10]), want[:10])
            assert spied.rows == [10]  # a short list stays one call
        _equal(got, want)

    def test_run_batch_groups_by_shape_within_sub_batches(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(amdinfer.pipeline._auto, "ACCELERATOR_BATCH", 12)  # 48 items: four automatic batches
        shapes = [(32, 32), (40, 24), (48, 48)]
        images = [_images(1, shapes[i % 3], seed=i)[0] for i in range(48)]
        model = _any_size(models.tiny_cnn())
        with Pipeline(preprocess=_stages(), engine=model, **CPU) as cpu:
            want = [cpu(im) for im in images]
        spied = Spied(model)
        with Pipeline(preprocess=_stages(), engine=spied.engine) as pipe:
            got = pipe.run_batch(images)
            assert sorted(spied.rows) == [4] * 12  # windows of 12, one call per shape in each
            spied.rows.clear()
            mapped = list(pipe.map(images))  # the automatic map batch groups its window by shape too
            assert sorted(spied.rows) == [4] * 12
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        _equal(mapped, got)

    def test_failing_item_in_the_middle_is_named(self) -> None:
        class Fail(Preprocessor):
            def process(self, data: Any, meta: dict[str, Any]) -> Any:
                if int(data.flat[0]) == 255 and int(data.flat[1]) == 255:
                    raise ValueError("marked")
                return data

        images = _images(64, seed=6)
        for i in (37, 50):
            images[i][0, 0] = 255
        messages = []
        for device in ("cpu", GPU):
            spied = Spied(models.tiny_cnn(), device=device)
            with Pipeline(preprocess=[Fail(), *_stages()], engine=spied.engine) as pipe:
                with pytest.raises(StageError, match=r"item 37: preprocess\[0\] Fail: ValueError: marked") as e:
                    pipe.run_batch(images)
            assert e.value.index == 37
            messages.append(str(e.value))
        assert messages[0] == messages[1]

    def test_fused_run_batch_is_split_with_the_same_answers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(amdinfer.pipeline._auto, "ACCELERATOR_BATCH", 16)
        images = _images(64, (40, 48), seed=7)
        stages = [Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()]
        with Pipeline(preprocess=stages, engine=models.tiny_cnn(), **CPU) as pipe, pipe.fuse() as fused:
            want = fused.run_batch(images)
            spied = Spied(fused.model)
            gpu = amdinfer.pipeline.FusedPipeline(fused.model, spied.engine, fused._host, image_size=None)
            got = gpu.run_batch(images)
            assert spied.rows == [16] * 4
            gpu.close()
        _equal(got, want)

    def test_fixed_batch_hint_logged_once(self, caplog: pytest.LogCaptureFixture) -> None:
        images = _images(6, seed=8)
        model = _static_batch(models.tiny_cnn(), 1)
        with Pipeline(preprocess=_stages(), engine=model, **CPU) as cpu:
            want = [cpu(im) for im in images]
        spied = Spied(model)
        with caplog.at_level(logging.INFO, logger="amdinfer.pipeline"):
            with Pipeline(preprocess=_stages(), engine=spied.engine) as pipe:
                got = list(pipe.map(images))
                again = pipe.run_batch(images)
                list(pipe.map(images, batch_size=4))
            with Pipeline(preprocess=_stages(), engine=amdinfer.load(model, **CPU)) as on_cpu:
                list(on_cpu.map(images))  # the CPU: not logged
        hints = [r for r in caplog.records if r.name == "amdinfer.pipeline" and "dynamic=True" in r.getMessage()]
        assert len(hints) == 1 and hints[0].levelno == logging.INFO
        assert spied.engine.info.settings["map_batch_size"]["size"] == 1
        assert any("dynamic=True" in n for n in spied.engine.info.notes)
        assert set(spied.rows) == {1}  # batch 1 every call
        _equal(got, want)
        _equal(again, want)

    def test_batch_one_places_ahead_of_the_engine(self) -> None:
        """A fixed-batch-1 model on an accelerator: while the engine runs item 0, the pool has placed several
        items after it (the executor keeps 2 x workers windows in flight at batch 1)."""
        import threading

        placed: list[int] = []
        ahead = threading.Event()

        class Count(Preprocessor):
            def process(self, data: Any, meta: dict[str, Any]) -> Any:
                placed.append(1)
                if len(placed) >= 4:
                    ahead.set()
                return data

        model = _static_batch(models.tiny_cnn(), 1)
        spied = Spied(model)
        run = spied.engine.run
        seen: list[bool] = []

        def first_waits(feeds: Any, **kw: Any) -> Any:
            if not seen:
                seen.append(ahead.wait(30))  # a deadlock guard, not a timing: placement must get there
            return run(feeds, **kw)

        spied.engine.run = first_waits  # type: ignore[method-assign]
        images = _images(12, seed=9)
        with Pipeline(preprocess=[Count(), *_stages()], engine=spied.engine) as pipe:
            got = list(pipe.map(images, workers=2))
        assert seen == [True]
        with Pipeline(preprocess=_stages(), engine=model, **CPU) as cpu:
            _equal(got, [cpu(im) for im in images])

    def test_fused_map_of_mixed_canvases_groups_by_shape(self) -> None:
        """A fused graph that takes any size (no geometry stage): the automatic batch groups each window by
        shape, so mixed sizes run as they did at batch 1, with the same answers."""
        shapes = [(32, 32), (40, 24)]
        images = [_images(1, shapes[i % 2], seed=20 + i)[0] for i in range(10)]
        stages = [Normalize(scale=1 / 255), HwcToChw()]
        with Pipeline(preprocess=stages, engine=_any_size(models.tiny_cnn()), **CPU) as pipe, pipe.fuse() as fused:
            want = list(fused.map(images, batch_size=1, workers=0))
            spied = Spied(fused.model)
            gpu = amdinfer.pipeline.FusedPipeline(fused.model, spied.engine, fused._host, image_size=None)
            got = list(gpu.map(images))
            gpu.close()
        assert sorted(spied.rows) == [5, 5]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
