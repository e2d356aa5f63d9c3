"""A short, bounded soak (RSS and open file descriptors stay flat) and thread consistency.

Bounded by a number of runs, never by time; no timing is asserted.
"""

from __future__ import annotations

import gc
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import amdinfer
from amdinfer.preprocess import Cast, HwcToChw
from amdinfer.testing import conformance
from amdinfer.testing.models import tiny_cnn

RUNS = 2000
THREADS = 8


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc for RSS and fds")


def _batches(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.random((1 + i % 3, 3, 8, 8), dtype=np.float32) for i in range(n)]


def _settle() -> tuple[int, int]:
    gc.collect()
    return _rss_bytes(), _fds()


def test_soak_rss_and_fds_stay_flat() -> None:
    """engine.run, EnginePool.map and Pipeline.map, RUNS each, after a warm-up: RSS within 16 MB, fds equal."""
    model = tiny_cnn(image_size=8)
    engine = amdinfer.load(model, backend="ort", providers=["CPUExecutionProvider"], threads=1)
    pool = amdinfer.EnginePool(lambda: amdinfer.load(model, backend="reference"), size=2)
    pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=engine)
    images = [np.full((8, 8, 3), i % 255, np.uint8) for i in range(RUNS)]
    batches = _batches(RUNS)

    def one_round(n: int) -> None:
        for b in batches[:n]:
            engine.run(b)
        for _ in pool.map(batches[:n]):
            pass
        with pipe.map(images[:n], batch_size=4, workers=2) as results:
            for _ in results:
                pass

    one_round(50)  # warm-up: arenas, thread pools, lazy imports
    rss0, fds0 = _settle()
    one_round(RUNS)
    rss1, fds1 = _settle()
    pool.close()
    engine.close()
    assert fds1 == fds0, f"open file descriptors {fds0} -> {fds1}"
    assert rss1 - rss0 < 16 << 20, f"RSS grew {(rss1 - rss0) / 2**20:.1f} MB over {RUNS} runs of each kind"


def _kinds() -> list[str]:
    return [k for k in conformance.selected_kinds() if conformance.availability(k) is None]


@pytest.mark.parametrize("kind", _kinds())
def test_threads_through_one_engine_match_sequential(kind: str) -> None:
    engine = conformance.make_engine(kind, tiny_cnn(image_size=8))
    batches = _batches(48)
    sequential = [engine.run(b)["logits"] for b in batches]
    with ThreadPoolExecutor(THREADS) as ex:
        threaded = list(ex.map(lambda b: engine.run(b)["logits"], batches))
    engine.close()
    for s, t in zip(sequential, threaded):
        assert np.array_equal(s, t)


@pytest.mark.parametrize("kind", _kinds())
def test_engine_pool_matches_sequential(kind: str) -> None:
    model = tiny_cnn(image_size=8)
    batches = _batches(48)
    with conformance.make_engine(kind, model) as one:
        sequential = [one.run(b)["logits"] for b in batches]
    with amdinfer.EnginePool(lambda: conformance.make_engine(kind, model), size=3) as pool:
        mapped = [r["logits"] for r in pool.map(batches)]
        with ThreadPoolExecutor(THREADS) as ex:
            threaded = list(ex.map(lambda b: pool.run(b)["logits"], batches))
    for s, m, t in zip(sequential, mapped, threaded):
        assert np.array_equal(s, m) and np.array_equal(s, t)
