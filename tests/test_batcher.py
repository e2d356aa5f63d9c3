"""The dynamic batcher and the serving workers (no KServe needed): batches, grouping, spreading, errors, drain."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

import amdinfer
from amdinfer.errors import InputError, OptionError
from amdinfer.serve import DynamicBatcher, EngineWorker, PipelineWorker, check_request, result_tensors
from amdinfer.testing.models import tiny_cnn
from amdinfer.types import TensorSpec

CPU = ["CPUExecutionProvider"]


class Recorder:
    """A worker that doubles ``x`` and records each call's request row counts; ``gate`` can hold calls."""

    def __init__(self, name: str = "w", fail: bool = False) -> None:
        self.name = name
        self.calls: list[list[int]] = []
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()
        self.threads: set[str] = set()

    def key(self, feeds):
        return feeds["x"].shape[1:]

    def rows(self, feeds):
        return len(feeds["x"])

    def run(self, requests: Sequence[dict]) -> list[dict]:
        self.gate.wait(30)
        self.threads.add(threading.current_thread().name)
        self.calls.append([len(r["x"]) for r in requests])
        if self.fail:
            raise InputError("input 'x': refused by the worker")
        return [{"y": r["x"] * 2} for r in requests]


async def settle() -> None:
    """Let every task created so far run to its first real wait (requests queued, batches taken)."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


class TestDynamicBatcher:
    def test_concurrent_requests_share_calls_up_to_max_batch_size(self):
        worker = Recorder()
        worker.gate.clear()  # hold the first call so the others queue up behind it

        async def main():
            async with DynamicBatcher([worker], max_batch_size=4, max_delay_ms=50) as b:
                tasks = [asyncio.create_task(b.submit({"x": np.full((1, 2), i)})) for i in range(9)]
                await settle()
                worker.gate.set()
                return await asyncio.gather(*tasks)

        outs = run(main())
        assert [o["y"].tolist() for o in outs] == [[[2 * i, 2 * i]] for i in range(9)]
        assert sum(map(sum, worker.calls)) == 9
        assert all(sum(c) <= 4 for c in worker.calls)
        assert max(sum(c) for c in worker.calls) == 4  # batches filled to the limit

    def test_rows_count_not_requests_and_oversized_request_runs_alone(self):
        worker = Recorder()
        worker.gate.clear()

        async def main():
            async with DynamicBatcher([worker], max_batch_size=4, max_delay_ms=50) as b:
                sizes = [3, 2, 6, 1]
                tasks = [asyncio.create_task(b.submit({"x": np.ones((n, 2))})) for n in sizes]
                await settle()
                worker.gate.set()
                outs = await asyncio.gather(*tasks)
                return [len(o["y"]) for o in outs]

        assert run(main()) == [3, 2, 6, 1]
        assert [6] in worker.calls  # larger than max_batch_size: alone
        assert all(sum(c) <= 4 for c in worker.calls if c != [6])

    def test_requests_with_other_shapes_do_not_join(self):
        worker = Recorder()
        worker.gate.clear()

        async def main():
            async with DynamicBatcher([worker], max_batch_size=8, max_delay_ms=50) as b:
                shapes = [(1, 2), (1, 3), (1, 2), (1, 3)]
                tasks = [asyncio.create_task(b.submit({"x": np.ones(s)})) for s in shapes]
                await settle()
                worker.gate.set()
                return [o["y"].shape for o in await asyncio.gather(*tasks)]

        assert run(main()) == [(1, 2), (1, 3), (1, 2), (1, 3)]
        assert sorted(worker.calls) == [[1, 1], [1, 1]]

    def test_a_lone_request_leaves_after_the_delay(self):
        worker = Recorder()

        async def main():
            async with DynamicBatcher([worker], max_batch_size=64, max_delay_ms=1) as b:
                return await b.submit({"x": np.ones((1, 2))})

        assert run(main())["y"].tolist() == [[2.0, 2.0]]
        assert worker.calls == [[1]]

    def test_max_batch_size_one_never_batches(self):
        worker = Recorder()
        worker.gate.clear()

        async def main():
            async with DynamicBatcher([worker], max_batch_size=1, max_delay_ms=50) as b:
                tasks = [asyncio.create_task(b.submit({"x": np.ones((1, 2))})) for _ in range(5)]
                await settle()
                worker.gate.set()
                await asyncio.gather(*tasks)

        run(main())
        assert worker.calls == [[1]] * 5

    def test_two_workers_both_take_batches_on_their_own_threads(self):
        a, b_ = Recorder("a"), Recorder("b")
        a.gate.clear()
        b_.gate.clear()  # each worker holds the batch it took: a busy worker takes no other

        async def main():
            async with DynamicBatcher([a, b_], max_batch_size=1, max_delay_ms=0) as b:
                tasks = [asyncio.create_task(b.submit({"x": np.ones((1, 2))})) for _ in range(2)]
                while b.queued:
                    await asyncio.sleep(0.001)
                a.gate.set()
                b_.gate.set()
                await asyncio.gather(*tasks)

        run(main())
        assert a.calls == [[1]] and b_.calls == [[1]]  # the second request went to the free worker
        assert a.threads.isdisjoint(b_.threads)

    def test_a_worker_error_reaches_every_request_of_its_batch_only(self):
        bad = Recorder(fail=True)

        async def main():
            async with DynamicBatcher([bad], max_batch_size=8, max_delay_ms=5) as b:
                results = await asyncio.gather(
                    *(b.submit({"x": np.ones((1, 2))}) for _ in range(3)), return_exceptions=True
                )
                bad.fail = False
                after = await b.submit({"x": np.ones((1, 2))})
                return results, after

        results, after = run(main())
        assert all(isinstance(r, InputError) and "refused by the worker" in str(r) for r in results)
        assert after["y"].tolist() == [[2.0, 2.0]]  # the batcher keeps serving

    def test_stop_finishes_queued_requests(self):
        worker = Recorder()

        async def main():
            b = DynamicBatcher([worker], max_batch_size=64, max_delay_ms=10_000)
            await b.start()
            tasks = [asyncio.create_task(b.submit({"x": np.ones((1, 2))})) for _ in range(3)]
            while b.queued < 3:
                await asyncio.sleep(0.001)
            await b.stop()  # must not wait 10 s: stopping flushes the queue now
            outs = await asyncio.gather(*tasks)
            with pytest.raises(RuntimeError, match="not running"):
                await b.submit({"x": np.ones((1, 2))})
            return outs

        assert len(run(main())) == 3
        assert worker.calls == [[1, 1, 1]]

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"max_batch_size": 0}, "max_batch_size: got 0"),
            ({"max_batch_size": 2.5}, "max_batch_size: got 2.5"),
            ({"max_delay_ms": -1}, "max_delay_ms: got -1"),
        ],
    )
    def test_bad_options(self, kwargs, message):
        with pytest.raises(OptionError, match=message):
            DynamicBatcher([Recorder()], **kwargs)
        with pytest.raises(OptionError, match="workers"):
            DynamicBatcher([])


@pytest.fixture(scope="module")
def engine():
    with amdinfer.load(tiny_cnn(seed=2), providers=CPU) as e:
        yield e


def _detector() -> amdinfer.Pipeline:
    """A small YOLOv8-style detection pipeline on the CPU (a few boxes per 40x56 image)."""
    from amdinfer.postprocess import Nms, ScaleBoxes, YoloDecode
    from amdinfer.preprocess import HwcToChw, Letterbox, Normalize
    from amdinfer.testing.models import yolov8

    return amdinfer.Pipeline(
        preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        engine=yolov8(seed=1, image_size=64, num_classes=4),
        backend="ort",
        providers=CPU,
        postprocess=[YoloDecode(conf_threshold=0.0185), Nms(), ScaleBoxes()],
    )


class TestWorkers:
    def test_engine_worker_splits_a_batch_back_into_requests(self, engine):
        rng = np.random.default_rng(0)
        xs = [rng.random((n, 3, 32, 32), dtype=np.float32) for n in (1, 3, 2)]
        outs = EngineWorker(engine).run([{"input": x} for x in xs])
        for x, out in zip(xs, outs):
            np.testing.assert_allclose(out["logits"], engine.run(x)["logits"], rtol=1e-5, atol=1e-6)

    def test_engine_worker_keys_and_fixed_batch_models(self, engine):
        worker = EngineWorker(engine)
        assert worker.batchable
        x = np.zeros((2, 3, 32, 32), np.float32)
        assert worker.key({"input": x}) == worker.key({"input": x[:1]}) and worker.rows({"input": x}) == 2
        with amdinfer.load(tiny_cnn(), providers=CPU, shapes={"input": (1, 3, 32, 32)}) as fixed:
            if isinstance(fixed.inputs[0].shape[0], int):
                w = EngineWorker(fixed)
                assert not w.batchable and w.key({"input": x[:1]}) != w.key({"input": x[:1]})

    @pytest.mark.parametrize(
        ("feeds", "message"),
        [
            ({"input": np.zeros((1, 3, 32, 32), np.float64)}, "input 'input': got dtype float64, expected float32"),
            ({"input": np.zeros((1, 3, 32, 31), np.float32)}, r"input 'input': got shape \(1, 3, 32, 31\), expected"),
            ({"input": np.zeros((3, 32, 32), np.float32)}, r"got shape \(3, 32, 32\)"),
            ({"input": np.zeros((0, 3, 32, 32), np.float32)}, "at least one item on axis 0"),
            ({"images": np.zeros((1, 3, 32, 32), np.float32)}, r"inputs: got \['images'\], expected \['input'\]"),
        ],
    )
    def test_check_request_names_the_tensor(self, engine, feeds, message):
        with pytest.raises(InputError, match=message):
            check_request(engine.inputs, feeds)

    def test_pipeline_worker_detections_with_batch_index(self):
        pipe = _detector()
        with pipe:
            rng = np.random.default_rng(2)
            requests = [{"images": rng.integers(0, 255, (n, 40, 56, 3), dtype=np.uint8)} for n in (2, 1)]
            outs = PipelineWorker(pipe, input_name="images").run(requests)
            for request, out in zip(requests, outs):
                want = pipe.run_batch(list(request["images"]))
                assert out["boxes_batch_index"].tolist() == [i for i, d in enumerate(want) for _ in range(len(d))]
                np.testing.assert_allclose(out["boxes"], np.concatenate([d.boxes for d in want]), atol=1e-4)
                np.testing.assert_array_equal(out["classes"], np.concatenate([d.classes for d in want]))
                assert "scores_batch_index" not in out

    def test_pipeline_worker_runs_a_fused_pipeline(self):
        pipe = _detector()
        with pipe, pipe.fuse() as fused:
            worker = PipelineWorker(fused)
            assert worker.input_name == "images"
            rng = np.random.default_rng(3)
            requests = [{"images": rng.integers(0, 255, (n, 40 + n, 56, 3), dtype=np.uint8)} for n in (2, 3)]
            outs = worker.run(requests)
            for request, out in zip(requests, outs):
                want = pipe.run_batch(list(request["images"]))  # stage by stage: the reference
                assert sum(len(d) for d in want) > 0
                assert out["boxes_batch_index"].tolist() == [i for i, d in enumerate(want) for _ in range(len(d))]
                np.testing.assert_allclose(out["boxes"], np.concatenate([d.boxes for d in want]), atol=1e-3)
                np.testing.assert_array_equal(out["classes"], np.concatenate([d.classes for d in want]))
        with pytest.raises(OptionError, match="expected an amdinfer Pipeline or FusedPipeline"):
            PipelineWorker(object())

    def test_result_tensors_refuses_unknown_results(self):
        with pytest.raises(InputError, match="pipeline result: got object"):
            result_tensors(object())
        assert result_tensors(np.ones(3))["output"].shape == (3,)


def test_check_request_with_fixed_dims_only():
    spec = [TensorSpec("x", np.dtype("uint8"), ("N", 4, "W"))]
    check_request(spec, {"x": np.zeros((2, 4, 9), np.uint8)})  # symbolic W: any size
    with pytest.raises(InputError, match=r"expected \(N, 4, W\)"):
        check_request(spec, {"x": np.zeros((2, 5, 9), np.uint8)})


class Poisoned(Recorder):
    """Adds ``x`` to ``b``; a batch holding a request with a negative ``x`` fails as a whole (like an engine)."""

    def key(self, feeds):
        return "all"

    def run(self, requests: Sequence[dict]) -> list[dict]:
        self.calls.append([len(r["x"]) for r in requests])
        if any((r["x"] < 0).any() for r in requests):
            raise InputError("input 'x': negative")
        return [{"y": r["x"] + r["b"]} for r in requests]


class TestIsolation:
    """A request's data and errors never reach another request (issue 20)."""

    def test_a_failed_batch_is_rerun_request_by_request(self):
        worker = Poisoned()
        feeds = [{"x": np.full((1, 2), float(i)), "b": np.full((1, 2), 10.0 * i)} for i in range(4)]
        feeds[2]["x"] = -feeds[2]["x"]

        async def main():
            async with DynamicBatcher([worker], max_batch_size=8, max_delay_ms=50) as b:
                return await asyncio.gather(*(b.submit(f) for f in feeds), return_exceptions=True)

        results = run(main())
        assert worker.calls == [[1, 1, 1, 1], [1], [1], [1], [1]]  # one batch, then each request alone
        for i in (0, 1, 3):
            assert results[i]["y"].tolist() == [[11.0 * i] * 2]  # its own x + b, nobody else's
        assert isinstance(results[2], InputError) and "negative" in str(results[2])

    def test_a_worker_answering_with_the_wrong_count_is_rerun_alone(self):
        class Short(Recorder):
            def run(self, requests):
                self.calls.append([len(r["x"]) for r in requests])
                outs = [{"y": r["x"] * 2} for r in requests]
                return outs[:1] if len(requests) > 1 else outs

        from amdinfer.serve import run_isolated

        worker = Short()
        outs = run_isolated(worker, [{"x": np.ones((1, 2)) * k} for k in (1, 2, 3)])
        assert [o["y"].tolist() for o in outs] == [[[2.0, 2.0]], [[4.0, 4.0]], [[6.0, 6.0]]]
        assert worker.calls == [[1, 1, 1], [1], [1], [1]]

    def test_check_request_compares_symbols_across_inputs(self):
        a, b = (TensorSpec(n, np.dtype("float32"), ("N", 4)) for n in "ab")
        with pytest.raises(InputError, match=r"input 'b': axis 0 \('N'\) is 1, but input 'a' has 'N' = 2"):
            check_request([a, b], {"a": np.zeros((2, 4), np.float32), "b": np.zeros((1, 4), np.float32)})
        check_request([a, b], {"a": np.zeros((3, 4), np.float32), "b": np.zeros((3, 4), np.float32)})

    def test_request_rows_counts_every_input(self):
        from amdinfer.serve import request_rows

        assert request_rows({"a": np.zeros((3, 4)), "b": np.zeros((3, 1))}) == 3
        with pytest.raises(InputError, match="input 'b': got 1 rows on axis 0, but input 'a' has 2"):
            request_rows({"a": np.zeros((2, 4)), "b": np.zeros((1, 4))})

    @pytest.mark.parametrize(
        ("outputs", "reason"),
        [
            ([("y", ("N", 4))], None),
            ([("y", ("N", 4)), ("idx", ("K", 3))], "output 'idx': axis 0 is 'K', not the inputs' batch axis 'N'"),
            ([("y", (None, 4))], "output 'y': axis 0 is None, not the inputs' batch axis 'N'"),
        ],
    )
    def test_batching_needs_one_batch_symbol_on_every_tensor(self, outputs, reason):
        from amdinfer.serve import batch_axis

        ins = [TensorSpec("a", np.dtype("float32"), ("N", 4)), TensorSpec("b", np.dtype("float32"), ("N", 4))]
        outs = [TensorSpec(n, np.dtype("float32"), shape) for n, shape in outputs]
        assert batch_axis(ins, outs) == reason

    def test_engine_worker_refuses_outputs_that_do_not_split_by_rows(self, engine):
        class Collapsing:
            """An engine stand-in whose output has one row per call: splitting it would hand rows around."""

            def __init__(self, inner):
                self.inner = inner

            def __getattr__(self, name):
                return getattr(self.inner, name)

            def run(self, feeds):
                return {"logits": self.inner.run(feeds)["logits"][:1]}

        worker = EngineWorker(engine)
        worker.engine = Collapsing(engine)  # type: ignore[assignment]
        x = np.zeros((1, 3, 32, 32), np.float32)
        with pytest.raises(RuntimeError, match=r"output 'logits': got shape \(1, 10\) for a batch of 3 rows"):
            worker.run([{"input": x}, {"input": np.concatenate([x, x])}])
