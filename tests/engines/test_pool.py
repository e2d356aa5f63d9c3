"""EnginePool: one engine per worker, results in order, errors, closing.

Outputs are checked against a single ORT engine run directly. The concurrency checks use a small
counting engine (a real :class:`amdinfer.Engine` subclass, not a runtime stand-in) so they can assert how
many calls ran at once on each engine without relying on timing.
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pytest

import amdinfer
from amdinfer import EnginePool
from amdinfer.engines.base import Engine, EngineInfo
from amdinfer.testing import models
from amdinfer.types import TensorSpec


@pytest.fixture(scope="module")
def model():
    return models.tiny_cnn()


@pytest.fixture(scope="module")
def batches(model):
    return [models.random_inputs(model, batch=1 + i % 3, seed=i)["input"] for i in range(10)]


@pytest.fixture(scope="module")
def want(model, batches):
    with amdinfer.load(model, backend="ort", providers=["cpu"], threads=1) as engine:
        return [engine.run(b)["logits"] for b in batches]


def ort_factory(model):
    return functools.partial(amdinfer.load, model, backend="ort", providers=["cpu"], threads=1)


class CountingEngine(Engine):
    """Doubles its input; records how many calls overlap on this instance and across all instances."""

    backend_name = "counting"
    active_total = 0
    peak_total = 0
    guard = threading.Lock()

    def __init__(self, index: int = -1, pause: float = 0.005) -> None:
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])
        graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])
        self.index = index
        self.pause = pause
        self.active = 0
        self.peak = 0
        self.calls = 0
        super().__init__(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))

    def _load(self, source):
        spec = TensorSpec
        return (
            [spec("x", np.dtype("float32"), ("N", 2))],
            [spec("y", np.dtype("float32"), ("N", 2))],
            EngineInfo(backend="counting"),
        )

    def _run(self, feeds, outputs):
        cls = type(self)
        with cls.guard:
            self.active += 1
            cls.active_total += 1
            self.peak = max(self.peak, self.active)
            cls.peak_total = max(cls.peak_total, cls.active_total)
        try:
            time.sleep(self.pause)  # widens the window in which overlapping calls would show
            if np.isnan(feeds["x"]).any():
                raise ValueError("nan in x")
            self.calls += 1
            return {"y": feeds["x"] * 2}
        finally:
            with cls.guard:
                self.active -= 1
                cls.active_total -= 1


class TestWithOrt:
    def test_run_matches_a_single_engine(self, model, batches, want) -> None:
        with EnginePool(ort_factory(model), size=2) as pool:
            for b, w in zip(batches, want):
                np.testing.assert_allclose(pool.run(b)["logits"], w, rtol=1e-5, atol=1e-6)

    def test_map_keeps_input_order(self, model, batches, want) -> None:
        with EnginePool(ort_factory(model), size=2) as pool:
            got = list(pool.map(batches))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g["logits"].shape == w.shape
            np.testing.assert_allclose(g["logits"], w, rtol=1e-5, atol=1e-6)

    def test_threads_share_the_pool(self, model, batches, want) -> None:
        results: dict[int, np.ndarray] = {}
        with EnginePool(ort_factory(model), size=2) as pool:

            def work(i: int) -> None:
                results[i] = pool.run(batches[i])["logits"]

            threads = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for i, w in enumerate(want):
            np.testing.assert_allclose(results[i], w, rtol=1e-5, atol=1e-6)

    def test_input_error_propagates_and_engine_returns(self, model, batches, want) -> None:
        with EnginePool(ort_factory(model), size=1) as pool:
            with pytest.raises(amdinfer.InputError, match="got dtype float64"):
                pool.run(batches[0].astype(np.float64))
            np.testing.assert_allclose(pool.run(batches[0])["logits"], want[0], rtol=1e-5, atol=1e-6)

    def test_close(self, model, batches) -> None:
        pool = EnginePool(ort_factory(model), size=2)
        engines = pool.engines
        pool.close()
        pool.close()
        assert pool.closed and all(e.closed for e in engines)
        with pytest.raises(amdinfer.EngineClosedError, match="pool is closed"):
            pool.run(batches[0])
        with pytest.raises(amdinfer.EngineClosedError):
            list(pool.map(batches[:1]))

    def test_submit(self, model, batches, want) -> None:
        with EnginePool(ort_factory(model), size=2) as pool:
            futures = [pool.submit(b) for b in batches[:4]]
            for f, w in zip(futures, want):
                np.testing.assert_allclose(f.result()["logits"], w, rtol=1e-5, atol=1e-6)

    def test_info_and_repr(self, model) -> None:
        with EnginePool(ort_factory(model), size=2) as pool:
            assert pool.info.backend == "ort" and len(pool) == pool.size == 2
            assert "2 x OrtEngine, 2 of 2 free" in repr(pool)


class TestMechanics:
    def setup_method(self) -> None:
        CountingEngine.active_total = CountingEngine.peak_total = 0

    def test_one_call_per_engine_and_at_most_size_at_once(self) -> None:
        x = np.ones((1, 2), np.float32)
        with EnginePool(lambda: CountingEngine(), size=3) as pool:
            threads = [threading.Thread(target=lambda: [pool.run(x) for _ in range(5)]) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            engines = pool.engines
        assert all(e.peak == 1 for e in engines)  # an engine never ran two calls at once
        assert CountingEngine.peak_total <= 3
        assert sum(e.calls for e in engines) == 30

    def test_map_results_follow_inputs_even_when_they_finish_out_of_order(self) -> None:
        xs = [np.full((1, 2), v, np.float32) for v in range(12)]
        with EnginePool(lambda: CountingEngine(), size=4) as pool:
            got = [r["y"][0, 0] for r in pool.map(xs)]
        assert got == [2.0 * v for v in range(12)]

    def test_map_raises_at_the_failing_item(self) -> None:
        xs = [np.ones((1, 2), np.float32), np.full((1, 2), np.nan, np.float32), np.ones((1, 2), np.float32)]
        with EnginePool(lambda: CountingEngine(), size=2) as pool:
            it = pool.map(xs)
            assert next(it)["y"][0, 0] == 2.0
            with pytest.raises(ValueError, match="nan in x"):
                next(it)
            assert pool.run(xs[0])["y"][0, 0] == 2.0  # the failing engine is back in the pool

    def test_factory_receives_the_worker_index(self) -> None:
        with EnginePool(lambda i: CountingEngine(index=i), size=3) as pool:
            assert sorted(e.index for e in pool.engines) == [0, 1, 2]

    def test_factory_failure_closes_what_was_built(self) -> None:
        built: list[CountingEngine] = []

        def factory(i: int) -> CountingEngine:
            if i == 2:
                raise amdinfer.BackendUnavailableError("no GPU 2", backend="demo")
            built.append(CountingEngine(i))
            return built[-1]

        with pytest.raises(amdinfer.BackendUnavailableError, match="no GPU 2"):
            EnginePool(factory, size=3)
        assert len(built) == 2 and all(e.closed for e in built)

    def test_bad_arguments(self) -> None:
        with pytest.raises(amdinfer.OptionError, match="size: got 0"):
            EnginePool(lambda: CountingEngine(), size=0)
        with pytest.raises(amdinfer.OptionError, match="returned str, expected an amdinfer Engine"):
            EnginePool(lambda: "engine", size=1)
        with pytest.raises(amdinfer.OptionError, match="expected a callable"):
            EnginePool(CountingEngine(), size=1)

    def test_acquire_times_out_when_all_are_busy(self) -> None:
        with EnginePool(lambda: CountingEngine(), size=1) as pool:
            with pool.acquire():
                with pytest.raises(TimeoutError, match=r"no engine became free within 0\.05 s"):
                    pool.run(np.ones((1, 2), np.float32), timeout=0.05)
            assert pool.run(np.ones((1, 2), np.float32))["y"][0, 0] == 2.0

    def test_close_waits_for_running_calls(self) -> None:
        pool = EnginePool(lambda: CountingEngine(pause=0.2), size=1)
        done: list[float] = []
        t = threading.Thread(target=lambda: done.append(pool.run(np.ones((1, 2), np.float32))["y"][0, 0]))
        t.start()
        while CountingEngine.active_total == 0:
            time.sleep(0.001)
        pool.close()
        t.join()
        assert done == [2.0]  # the running call finished before its engine was closed
        assert pool.engines[0].closed
