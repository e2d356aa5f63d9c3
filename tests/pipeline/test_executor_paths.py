"""The one executor (amdinfer.pipeline._executor) as every batching path uses it: windows grouped by shape, padding
to the engine's rows, per-item errors carrying the item's index, order kept, a bounded number of windows in flight,
and the thread-free path of ``workers=0``.

Truths: hand-computed values (the toy steps below double each item's numbers, so an item's answer is known from the
item alone), and for the pipelines, each item run alone through ``pipe(item)``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.errors import StageError
from amdinfer.pipeline import Pipeline
from amdinfer.pipeline._executor import ByShape, Executor
from amdinfer.preprocess import Cast, HwcToChw
from amdinfer.stages import Preprocessor
from amdinfer.testing import models

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"]}


def _threads(prefix: str = "amdinfer-") -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


class Toy:
    """Executor steps on items that are lists of numbers: each item is placed as a float32 row of its own length,
    a batch is doubled, and each result is ``(index, doubled values)``; every call's batch shape is recorded."""

    def __init__(self, fail_at: int | None = None, rows: Any = None) -> None:
        self.fail_at = fail_at
        self.calls: list[tuple[int, ...]] = []
        self.seen_rows: list[np.ndarray] = []
        self.ex: Executor[int, Any] = Executor(self.place, self.run, self.finish, rows=rows, name="amdinfer-toy")

    def place(self, index: int, item: list[int], slot: Any) -> int:
        if index == self.fail_at:
            raise ValueError(f"item {index}: bad")
        slot.put(np.asarray(item, np.float32))
        return index

    def run(self, batch: np.ndarray, metas: Any) -> dict[str, Any]:
        self.calls.append(batch.shape)
        self.seen_rows.append(batch.copy())
        return {"y": batch * 2}

    def finish(self, outputs: dict[str, Any], metas: Any) -> list[Any]:
        return [(i, outputs["y"][k].tolist()) for k, i in enumerate(metas)]


def _want(items: list[list[int]]) -> list[tuple[int, list[float]]]:
    return [(i, [2.0 * v for v in item]) for i, item in enumerate(items)]


# ------------------------------------------------------------------ grouping and order
class TestByShape:
    ITEMS: ClassVar[list[list[int]]] = [[1], [2, 3], [4], [5, 6], [7, 8, 9], [10], [11, 12]]

    def test_run_batch_one_call_per_shape_answers_in_order(self) -> None:
        toy = Toy()
        got = toy.ex.run_batch(self.ITEMS, group=ByShape(), workers=0)
        assert got == _want(self.ITEMS)
        assert toy.calls == [(3, 1), (3, 2), (1, 3)]  # groups in order of their first item

    def test_size_cuts_groups_and_tags_keep_them_apart(self) -> None:
        toy = Toy()
        assert toy.ex.run_batch(self.ITEMS, group=ByShape(size=2), workers=2) == _want(self.ITEMS)
        assert toy.calls == [(2, 1), (1, 1), (2, 2), (1, 2), (1, 3)]
        toy.ex.close()  # run_batch's pool is the executor's until then
        toy = Toy()
        tags = [0, 0, 0, 1, 1, 1, 1]  # items 0-2 and 3-6 never share a call
        assert toy.ex.run_batch(self.ITEMS, group=ByShape(tags=tags), workers=0) == _want(self.ITEMS)
        assert toy.calls == [(2, 1), (1, 2), (2, 2), (1, 3), (1, 1)]

    @pytest.mark.parametrize("workers", [0, 1, 3])
    def test_map_windows_of_mixed_shapes_keep_order(self, workers: int) -> None:
        rng = np.random.default_rng(0)
        items = [list(range(k, k + int(rng.integers(1, 4)))) for k in range(40)]
        toy = Toy()
        got = list(toy.ex.map(iter(items), batch_size=6, group=ByShape(size=2), workers=workers))
        assert got == _want(items)
        assert all(c[0] <= 2 for c in toy.calls)
        assert not _threads("amdinfer-toy")

    def test_pad_to_and_rows_pad_with_the_last_item(self) -> None:
        toy = Toy(rows=lambda n: -(-n // 4) * 4)  # an engine bucket of 4
        got = toy.ex.run_batch([[1, 2], [3, 4], [5, 6]], group=ByShape(), workers=0)
        assert got == _want([[1, 2], [3, 4], [5, 6]])
        np.testing.assert_array_equal(toy.seen_rows[0], [[1, 2], [3, 4], [5, 6], [5, 6]])
        toy = Toy()
        toy.ex.run_batch([[1], [2]], group=ByShape(pad_to=3), workers=0)
        np.testing.assert_array_equal(toy.seen_rows[0], [[1], [2], [2]])


# ------------------------------------------------------------------ errors carry the item's index
class TestErrors:
    @pytest.mark.parametrize("workers", [0, 2])
    @pytest.mark.parametrize("group", [None, ByShape(size=2)])
    def test_placement_error_after_the_results_before_it(self, workers: int, group: ByShape | None) -> None:
        items = [[i] for i in range(10)]
        toy = Toy(fail_at=6)
        got = []
        with pytest.raises(ValueError, match="item 6: bad"):
            for r in toy.ex.map(items, batch_size=4, group=group, workers=workers):
                got.append(r)
        assert got == _want(items)[:6]  # item 4 and 5 share a window with 6: it is cut short there
        assert not _threads("amdinfer-toy")

    def test_input_error_is_located_after_the_items_read(self) -> None:
        def items() -> Any:
            yield [1]
            yield [2]
            raise OSError("disk gone")

        ex: Executor[int, Any] = Executor(
            Toy().place,
            Toy().run,
            Toy().finish,
            locate=lambda step, exc, indices: RuntimeError(f"{step} {indices}: {exc}"),
        )
        for workers in (0, 2):
            got = []
            with pytest.raises(RuntimeError, match=r"^input \[2\]: disk gone$"):
                for r in ex.map(items(), batch_size=3, workers=workers):
                    got.append(r)
            assert got == _want([[1], [2]])

    def test_stream_that_ends_early_or_yields_too_much(self) -> None:
        toy = Toy()

        def short(batches: Any) -> Any:
            it = iter(batches)
            buffer, metas = next(it)
            yield toy.run(buffer, metas)
            next(it)  # reads a second batch, never yields its result

        def extra(batches: Any) -> Any:
            for buffer, metas in batches:
                yield toy.run(buffer, metas)
                yield toy.run(buffer, metas)

        for stream, pattern, n in (
            (short, r"run \[1\]: the engine stream ended before the results of every batch", 1),
            (extra, r"run \[1\]: the engine stream yielded more results than it was given batches", 1),
        ):
            ex: Executor[int, Any] = Executor(
                toy.place, toy.run, toy.finish, stream=stream, locate=lambda s, e, i: StageError(f"{s} {i}: {e}")
            )
            got = []
            with pytest.raises(StageError, match=pattern):
                for r in ex.map([[i] for i in range(4)], batch_size=1, workers=1):
                    got.append(r)
            assert len(got) == n

    def test_pipeline_map_grouped_error_names_the_item(self) -> None:
        """A stage-by-stage map whose windows group items by shape: the first failing item in input order is
        named, with its stage; every result before it equals the item run alone."""

        class Fail(Preprocessor):
            def process(self, data: Any, meta: dict[str, Any]) -> Any:
                if int(data.flat[0]) == 9:
                    raise ValueError("pixel is 9")
                return data

        class Grouped(Pipeline):
            _map_window = 4
            _map_by_shape = True

        model = _any_size(models.tiny_cnn())
        shapes = [(32, 32), (40, 24), (48, 48)]
        images = [np.full((*shapes[i % 3], 3), i, np.uint8) for i in range(12)]
        with Grouped(preprocess=[Fail(), HwcToChw(), Cast("float32")], engine=model, **CPU) as pipe:
            want = [pipe(im) for im in images[:9]]
            for workers in (0, 2):
                got = []
                with pytest.raises(StageError, match=r"item 9: preprocess\[0\] Fail: ValueError: pixel is 9") as e:
                    for r in pipe.map(images, batch_size=2, workers=workers):
                        got.append(r)
                assert e.value.index == 9 and len(got) == 9
                for g, w in zip(got, want):
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            # the answers really differ per item, so an order mix-up could not pass
            assert min(np.abs(want[i] - want[j]).max() for i in range(9) for j in range(i)) > 1e-5

    def test_run_batch_engine_error_names_a_shape_group(self) -> None:
        model = models.tiny_cnn()  # 32 x 32 only
        images = [np.zeros((32, 32, 3), np.uint8), np.zeros((40, 40, 3), np.uint8)] * 2
        with Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=model, **CPU) as pipe:
            with pytest.raises(StageError, match=r"items 1, 3 \(one batch\): engine OrtEngine") as e:
                pipe.run_batch(images)
        assert e.value.index == 1


# ------------------------------------------------------------------ bounded in flight, no threads for workers=0
class TestBounds:
    @pytest.mark.parametrize(("batch_size", "workers"), [(1, 2), (3, 1), (2, 4)])
    def test_items_read_ahead_of_the_caller_are_bounded(self, batch_size: int, workers: int) -> None:
        """However slowly the caller takes results, the input is read at most ``depth`` windows ahead of the
        result it was last given (``depth``: the executor's in-flight windows, more when ``workers`` need them)."""
        read = [0]

        def endless() -> Any:
            while True:
                read[0] += 1
                yield [read[0]]

        toy = Toy()
        depth = max(3, -(-2 * workers // batch_size))
        taken = 0
        most = 0
        results = toy.ex.map(endless(), batch_size=batch_size, workers=workers)
        for _ in results:
            taken += 1
            time.sleep(0.002)  # a slow consumer: the threads run as far ahead as they may
            most = max(most, read[0] - taken)
            if taken == 40:
                break
        results.close()  # type: ignore[attr-defined]
        assert most <= depth * batch_size
        assert not _threads("amdinfer-toy")

    def test_workers_0_starts_no_thread(self) -> None:
        toy = Toy()
        seen: set[str] = set()
        real = toy.place

        def place(i: int, item: Any, slot: Any) -> int:
            seen.add(threading.current_thread().name)
            return real(i, item, slot)

        ex: Executor[int, Any] = Executor(place, toy.run, toy.finish, name="amdinfer-toy")
        items = [[i, i] for i in range(7)]
        assert list(ex.map(items, batch_size=3, workers=0)) == _want(items)
        assert ex.run_batch(items, workers=0) == _want(items)
        assert seen == {threading.current_thread().name}
        assert not _threads("amdinfer-toy")

    def test_a_lone_item_is_the_batch_itself(self) -> None:
        """A batch of one item that needs no padding is fed as the item's own array: no copy."""
        kept: list[np.ndarray] = []
        fed: list[np.ndarray] = []

        def place(i: int, item: np.ndarray, slot: Any) -> int:
            kept.append(item)
            slot.put(item)
            return i

        ex: Executor[int, Any] = Executor(place, lambda b, m: fed.append(b) or {"y": b}, lambda o, m: list(o["y"]))
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        ex.run_batch([x], workers=0)
        assert np.shares_memory(fed[0], kept[0]) and fed[0].shape == (1, 2, 3)


def _any_size(model: onnx.ModelProto) -> onnx.ModelProto:
    for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], "hw"):
        d.dim_param = name
    return model


def test_embed_map_with_workers_equals_run_batch() -> None:
    pytest.importorskip("tokenizers")
    from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer

    texts = ["the cat", "the dog sat on the mat", "cat", "a mat", "the cat sat on the dog"] * 3
    with amdinfer.embed(toy_encoder(), toy_tokenizer(), buckets=(4, 8), batch_size=2, **CPU) as embedder:
        want = embedder.pipeline.run_batch(texts)
        for workers in (0, 2):
            got = list(embedder.map(iter(texts), workers=workers))
            np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-6, atol=1e-6)
