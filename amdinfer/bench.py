"""Latency percentiles and throughput of an engine, measured the same way everywhere.

Example:
    >>> import amdinfer
    >>> from amdinfer.bench import benchmark
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"])
    >>> result = benchmark(engine, random_inputs(tiny_cnn(), batch=4), iterations=5, warmup=1)
    >>> result.batch, len(result.latencies_ms)
    (4, 5)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .engines.base import Engine
from .errors import OptionError

__all__ = ["BenchResult", "benchmark", "time_calls"]


@dataclass
class BenchResult:
    """Timings of repeated runs.

    Attributes:
        latencies_ms: every measured call, in milliseconds.
        batch: samples per call (axis 0 of the first input).
        load_seconds, compile_seconds: from the engine's info.

    Example:
        >>> r = BenchResult([1.0, 2.0, 3.0], batch=2)
        >>> r.p50_ms, r.throughput
        (2.0, 1000.0)
    """

    latencies_ms: list[float]
    batch: int = 1
    load_seconds: float = 0.0
    compile_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def percentile(self, q: float) -> float:
        """Latency percentile in ms."""
        return float(np.percentile(self.latencies_ms, q))

    @property
    def p50_ms(self) -> float:
        """Median latency."""
        return self.percentile(50)

    @property
    def p90_ms(self) -> float:
        """90th percentile latency."""
        return self.percentile(90)

    @property
    def p99_ms(self) -> float:
        """99th percentile latency."""
        return self.percentile(99)

    @property
    def throughput(self) -> float:
        """Samples per second at the median latency."""
        return self.batch * 1000.0 / self.p50_ms

    def to_dict(self) -> dict[str, Any]:
        """Summary numbers."""
        return {
            "batch": self.batch,
            "iterations": len(self.latencies_ms),
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
            "p99_ms": self.p99_ms,
            "min_ms": min(self.latencies_ms),
            "throughput_per_s": self.throughput,
            "load_seconds": self.load_seconds,
            "compile_seconds": self.compile_seconds,
            **self.extra,
        }

    def __repr__(self) -> str:
        return (
            f"BenchResult(batch={self.batch}, n={len(self.latencies_ms)}, p50={self.p50_ms:.3f} ms, "
            f"p90={self.p90_ms:.3f} ms, p99={self.p99_ms:.3f} ms, {self.throughput:.1f}/s)"
        )


def time_calls(fn: Callable[[], Any], *, iterations: int, warmup: int = 1) -> list[float]:
    """Call ``fn`` ``warmup`` times, then time ``iterations`` calls; milliseconds.

    Example:
        >>> len(time_calls(lambda: None, iterations=3))
        3
    """
    if iterations < 1 or warmup < 0:
        raise OptionError(f"iterations/warmup: got {iterations}/{warmup}, expected iterations >= 1, warmup >= 0")
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def benchmark(engine: Engine, feeds: Mapping[str, Any] | Any, *, iterations: int = 50, warmup: int = 5) -> BenchResult:
    """Time ``engine.run(feeds)``.

    Args:
        engine: any amdinfer engine.
        feeds: what ``engine.run`` takes.
        iterations: timed calls.
        warmup: untimed calls first (compilation, algorithm search, caches).

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"])
        >>> benchmark(engine, random_inputs(tiny_cnn()), iterations=3).batch
        1
    """
    first = next(iter(feeds.values())) if isinstance(feeds, Mapping) else feeds
    batch = int(first.shape[0]) if getattr(first, "ndim", 0) else 1
    lat = time_calls(lambda: engine.run(feeds), iterations=iterations, warmup=warmup)
    return BenchResult(
        lat, batch=batch, load_seconds=engine.info.load_seconds, compile_seconds=engine.info.compile_seconds
    )
