"""Latency statistics and measured throughput of an engine, the same way everywhere.

:func:`benchmark` times one engine on one set of feeds: the first call on its own (one-time work:
allocation, algorithm search, lazy compilation), ``warmup`` more untimed calls, then ``iterations``
timed calls (or as many as fit in ``duration`` seconds) from ``concurrency`` threads. Throughput is
**measured**: items processed divided by the wall time of the timed phase. After the timed phase it reads
the process's resident memory (now and peak; Linux ``/proc/self/status`` ``VmRSS``/``VmHWM``). :func:`sweep`
repeats that for several batch sizes, and :func:`plot_sweep` draws latency and throughput against batch.

Example:
    >>> import amdinfer
    >>> from amdinfer.bench import benchmark
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"])
    >>> result = benchmark(engine, random_inputs(tiny_cnn(), batch=4), iterations=5, warmup=1)
    >>> result.batch, len(result.latencies_ms), result.items
    (4, 5, 20)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._support._memory import host_memory
from ._support._progress import progress_bar
from .errors import OptionError

__all__ = ["SPREAD_WARNING_CV", "BenchResult", "benchmark", "plot_sweep", "sweep", "time_calls"]

#: A run whose latencies have a coefficient of variation (std / mean) above this gets a spread warning.
SPREAD_WARNING_CV = 0.10


@dataclass
class BenchResult:
    """Timings of repeated runs.

    Attributes:
        latencies_ms: every timed call, in milliseconds, in the order they finished.
        batch: items per call (axis 0 of the first input).
        wall_seconds: wall time of the timed phase (``None``: the calls ran back to back, so the sum
            of the latencies).
        concurrency: threads calling the engine at once.
        first_run_ms: the first call, timed on its own (not in ``latencies_ms``).
        load_seconds, compile_seconds: from the engine's info.
        host_rss_bytes: the process's resident memory right after the timed phase (``None``: not measured, or
            the platform does not say); see :mod:`amdinfer._support._memory` for the source.
        host_rss_peak_bytes: the process's peak resident memory so far (Linux ``VmHWM``: since the process
            started, so it includes imports and the load, not only this batch).
        extra: anything the caller wants in :meth:`to_dict`.

    Example:
        >>> r = BenchResult([1.0, 2.0, 3.0], batch=2)
        >>> r.p50_ms, r.mean_ms, r.throughput
        (2.0, 2.0, 1000.0)
    """

    latencies_ms: list[float]
    batch: int = 1
    wall_seconds: float | None = None
    concurrency: int = 1
    first_run_ms: float | None = None
    load_seconds: float = 0.0
    compile_seconds: float = 0.0
    host_rss_bytes: int | None = None
    host_rss_peak_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.latencies_ms:
            raise OptionError("latencies_ms: got an empty list, expected at least one timed call")

    def percentile(self, q: float) -> float:
        """Latency percentile in ms (linear interpolation, NumPy's default)."""
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
    def p95_ms(self) -> float:
        """95th percentile latency."""
        return self.percentile(95)

    @property
    def p99_ms(self) -> float:
        """99th percentile latency."""
        return self.percentile(99)

    @property
    def mean_ms(self) -> float:
        """Mean latency."""
        return float(np.mean(self.latencies_ms))

    @property
    def std_ms(self) -> float:
        """Standard deviation of the latencies (population, ``ddof=0``)."""
        return float(np.std(self.latencies_ms))

    @property
    def min_ms(self) -> float:
        """Fastest call."""
        return float(min(self.latencies_ms))

    @property
    def max_ms(self) -> float:
        """Slowest call."""
        return float(max(self.latencies_ms))

    @property
    def items(self) -> int:
        """Items processed in the timed phase (calls x batch)."""
        return len(self.latencies_ms) * self.batch

    @property
    def wall_s(self) -> float:
        """Wall time of the timed phase in seconds."""
        if self.wall_seconds is not None:
            return self.wall_seconds
        return sum(self.latencies_ms) / 1000.0

    @property
    def throughput(self) -> float:
        """Measured items per second: :attr:`items` / :attr:`wall_s`."""
        return self.items / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def warnings(self) -> list[str]:
        """What makes these numbers doubtful: a wide spread, or too few calls for the tail percentiles."""
        out = []
        cv = self.std_ms / self.mean_ms if self.mean_ms > 0 else 0.0
        if cv > SPREAD_WARNING_CV:
            out.append(
                f"latency spread is high (std/mean {cv:.0%}, p99/p50 {self.p99_ms / self.p50_ms:.2f}): "
                "other work on this machine, frequency scaling or too few iterations; treat the numbers as rough"
            )
        if len(self.latencies_ms) < 100:
            out.append(f"{len(self.latencies_ms)} timed calls: p99 is an interpolation, not a measured tail")
        return out

    def to_dict(self, *, latencies: bool = False) -> dict[str, Any]:
        """Summary numbers (units in the key names); with ``latencies=True`` also every timed call.

        ``latencies_ms`` is the list of :attr:`latencies_ms` (one float per timed call, in the order the calls
        finished): about 20 bytes of JSON per call, so a ``duration`` run of a fast model can make it long.

        Example:
            >>> d = BenchResult([1.0, 2.0], batch=1).to_dict(latencies=True)
            >>> d["latencies_ms"], d["mean_ms"]
            ([1.0, 2.0], 1.5)
        """
        out = {
            "batch": self.batch,
            "concurrency": self.concurrency,
            "iterations": len(self.latencies_ms),
            "items": self.items,
            "wall_s": self.wall_s,
            "throughput_per_s": self.throughput,
            "mean_ms": self.mean_ms,
            "std_ms": self.std_ms,
            "min_ms": self.min_ms,
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "first_run_ms": self.first_run_ms,
            "load_s": self.load_seconds,
            "compile_s": self.compile_seconds,
            "host_rss_bytes": self.host_rss_bytes,
            "host_rss_peak_bytes": self.host_rss_peak_bytes,
            "warnings": self.warnings,
            **self.extra,
        }
        if latencies:
            out["latencies_ms"] = list(self.latencies_ms)
        return out

    def __repr__(self) -> str:
        return (
            f"BenchResult(batch={self.batch}, n={len(self.latencies_ms)}, mean={self.mean_ms:.3f} ms, "
            f"p50={self.p50_ms:.3f} ms, p99={self.p99_ms:.3f} ms, {self.throughput:.1f} items/s)"
        )


def time_calls(fn: Callable[[], Any], *, iterations: int, warmup: int = 1) -> list[float]:
    """Call ``fn`` ``warmup`` times, then time ``iterations`` calls; milliseconds.

    Example:
        >>> len(time_calls(lambda: None, iterations=3))
        3
    """
    _check_counts(iterations, warmup)
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def _check_counts(iterations: Any, warmup: Any) -> None:
    ok = isinstance(iterations, int) and not isinstance(iterations, bool) and iterations >= 1
    ok = ok and isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0
    if not ok:
        raise OptionError(f"iterations/warmup: got {iterations!r}/{warmup!r}, expected iterations >= 1, warmup >= 0")


def _batch_of(feeds: Any) -> int:
    first = next(iter(feeds.values())) if isinstance(feeds, Mapping) else feeds
    return int(first.shape[0]) if getattr(first, "ndim", 0) else 1


def benchmark(
    engine: Any,
    feeds: Mapping[str, Any] | Any,
    *,
    iterations: int = 50,
    warmup: int = 5,
    duration: float | None = None,
    concurrency: int = 1,
    progress: bool | None = False,
) -> BenchResult:
    """Time ``engine.run(feeds)``.

    Args:
        engine: an amdinfer engine, or anything with ``run(feeds)`` and ``info`` (an
            :class:`~amdinfer.EnginePool` for engines that are not thread-safe).
        feeds: what ``engine.run`` takes.
        iterations: timed calls (ignored when ``duration`` is given).
        warmup: untimed calls after the first one (caches, clocks, allocator).
        duration: time calls for this many seconds instead of a fixed count (at least one call).
        concurrency: threads calling the engine at once; each call is timed, and throughput is items
            over the wall time of the whole phase.
        progress: ``True`` draws a tqdm bar on stderr (also into a pipe), ``None`` only when stderr is a terminal,
            ``False`` (default) none.

    Raises:
        OptionError: a count or duration out of range.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"])
        >>> r = benchmark(engine, random_inputs(tiny_cnn()), iterations=3, concurrency=2)
        >>> r.batch, len(r.latencies_ms), r.concurrency
        (1, 3, 2)
    """
    _check_counts(iterations, warmup)
    if duration is not None and not (isinstance(duration, (int, float)) and duration > 0):
        raise OptionError(f"duration: got {duration!r}, expected seconds > 0")
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise OptionError(f"concurrency: got {concurrency!r}, expected an int >= 1")
    batch = _batch_of(feeds)
    t0 = time.perf_counter()
    engine.run(feeds)
    first_ms = (time.perf_counter() - t0) * 1000.0
    for _ in range(warmup):
        engine.run(feeds)

    total = None if duration is not None else iterations
    bar_total = duration if duration is not None else iterations
    unit = "s" if duration is not None else "call"
    with progress_bar(f"amdinfer bench: batch {batch}", total=bar_total, unit=unit, enabled=progress) as bar:
        latencies, wall = _timed_phase(engine, feeds, total=total, duration=duration, concurrency=concurrency, bar=bar)
    info = getattr(engine, "info", None)
    memory = host_memory()
    return BenchResult(
        latencies,
        batch=batch,
        wall_seconds=wall,
        concurrency=concurrency,
        first_run_ms=first_ms,
        load_seconds=getattr(info, "load_seconds", 0.0),
        compile_seconds=getattr(info, "compile_seconds", 0.0),
        host_rss_bytes=memory.rss_bytes,
        host_rss_peak_bytes=memory.peak_bytes,
    )


def _timed_phase(
    engine: Any, feeds: Any, *, total: int | None, duration: float | None, concurrency: int, bar: Any
) -> tuple[list[float], float]:
    """Run ``engine.run(feeds)`` ``total`` times (or for ``duration`` seconds) on ``concurrency`` threads.

    Returns each call's latency in ms and the wall time of the whole phase in seconds.
    """
    lock = threading.Lock()
    latencies: list[float] = []
    started = 0
    start = time.perf_counter()
    deadline = start + duration if duration is not None else None

    def worker() -> None:
        nonlocal started
        while True:
            with lock:
                if total is not None and started >= total:
                    return
                if deadline is not None and started > 0 and time.perf_counter() >= deadline:
                    return
                started += 1
            c0 = time.perf_counter()
            engine.run(feeds)
            ms = (time.perf_counter() - c0) * 1000.0
            with lock:
                latencies.append(ms)
                if total is not None:
                    bar.update(1)
                else:  # the bar counts seconds of the duration
                    bar.update(min(time.perf_counter() - start, duration or 0.0) - bar.count)

    if concurrency == 1:
        worker()
    else:
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return latencies, time.perf_counter() - start


def sweep(engine: Any, feeds_for: Callable[[int], Any], batches: Sequence[int], **options: Any) -> list[BenchResult]:
    """:func:`benchmark` at each batch size; ``feeds_for(batch)`` builds the feeds.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"])
        >>> rs = sweep(engine, lambda b: random_inputs(tiny_cnn(), batch=b), [1, 2], iterations=2, warmup=0)
        >>> [r.batch for r in rs]
        [1, 2]
    """
    if not batches or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in batches):
        raise OptionError(f"batches: got {list(batches)!r}, expected positive ints")
    return [benchmark(engine, feeds_for(b), **options) for b in batches]


def plot_sweep(results: Sequence[BenchResult], path: str | Path, *, title: str = "") -> Path:
    """Latency (p50 with p90/p99) and measured throughput against batch size, written as an image.

    Uses matplotlib's Agg backend (no display needed).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'amdinfer-onnx[quant]'``).

    Example:
        >>> import tempfile, os
        >>> rs = [BenchResult([1.0, 1.2], batch=1), BenchResult([5.0, 5.5], batch=8)]
        >>> out = plot_sweep(rs, os.path.join(tempfile.mkdtemp(), "bench.png"))
        >>> out.suffix
        '.png'
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is in the test extras
        from ._support._install import pip_extra

        raise ImportError(f"--plot needs matplotlib: {pip_extra('quant')} (or pip install matplotlib)") from exc
    rs = sorted(results, key=lambda r: r.batch)
    xs = [r.batch for r in rs]
    fig = Figure(figsize=(9, 3.6))  # a bare Figure renders with Agg and never touches pyplot's global state
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(xs, [r.p50_ms for r in rs], marker="o", label="p50")
    ax1.plot(xs, [r.p90_ms for r in rs], marker=".", linestyle="--", label="p90")
    ax1.plot(xs, [r.p99_ms for r in rs], marker=".", linestyle=":", label="p99")
    ax1.set_xlabel("batch")
    ax1.set_ylabel("latency per call (ms)")
    ax1.legend()
    ax2.plot(xs, [r.throughput for r in rs], marker="o", color="tab:green")
    ax2.set_xlabel("batch")
    ax2.set_ylabel("measured throughput (items/s)")
    for ax in (ax1, ax2):
        if len(xs) > 1 and xs[-1] / xs[0] >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    from ._support._files import write_atomic

    out = Path(path)
    # through a temporary file beside it: a symbolic link planted at ``path`` is replaced, never written through
    fmt = out.suffix.lstrip(".").lower() or "png"
    return write_atomic(out, lambda f: fig.savefig(f, format=fmt, dpi=100), argument="path")
