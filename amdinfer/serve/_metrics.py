"""Prometheus metrics of the server (requests, latency, batch sizes, queue time, the numerical canary), on the
default registry."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ServingMetrics"]

_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {}

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# divergence from the reference: 0 (bit-equal), then decades from below float32 rounding to "wrong"
_ERROR_BUCKETS = (0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
_AGREEMENT_BUCKETS = (0.0, 0.5, 0.9, 0.99, 1.0)
_CANARY_EVENTS = {
    "sampled": "Served requests drawn for a re-run on the reference engine",
    "compared": "Sampled requests compared with the reference",
    "over_tolerance": "Compared requests whose outputs were over the tolerance of the served precision",
    "dropped": "Sampled requests dropped: the canary's queue was full (or the server was stopping)",
    "failed": "Sampled requests the reference engine could not run",
}


def _collectors() -> dict[str, Any]:
    """The collectors, created once per process (a name can be registered only once)."""
    with _LOCK:
        if not _SHARED:
            from prometheus_client import Counter, Gauge, Histogram

            _SHARED.update(
                requests=Counter(
                    "amdinfer_requests", "Inference requests by outcome (ok, invalid, error)", ["model", "outcome"]
                ),
                latency=Histogram(
                    "amdinfer_request_latency_seconds",
                    "Time from a request's arrival at the model to its outputs (queue + inference)",
                    ["model"],
                    buckets=_LATENCY_BUCKETS,
                ),
                depth=Gauge(
                    "amdinfer_queue_depth",
                    "Requests waiting in the batcher now",
                    ["model"],
                    multiprocess_mode="livesum",
                ),
                queue=Histogram(
                    "amdinfer_queue_seconds",
                    "Time a request waited in the batcher before its batch started",
                    ["model"],
                    buckets=_LATENCY_BUCKETS,
                ),
                batch=Histogram(
                    "amdinfer_batch_size",
                    "Items (batch rows) per engine call",
                    ["model", "worker"],
                    buckets=_BATCH_BUCKETS,
                ),
                canary={
                    event: Counter(f"amdinfer_canary_{event}", text, ["model"])
                    for event, text in _CANARY_EVENTS.items()
                },
                canary_abs=Histogram(
                    "amdinfer_canary_max_abs_error",
                    "Largest |served - reference| over a compared request's outputs",
                    ["model"],
                    buckets=_ERROR_BUCKETS,
                ),
                canary_rel=Histogram(
                    "amdinfer_canary_max_rel_error",
                    "Largest |served - reference| / |reference| over a compared request's outputs",
                    ["model"],
                    buckets=_ERROR_BUCKETS,
                ),
                canary_top1=Histogram(
                    "amdinfer_canary_top1_agreement",
                    "Fraction of rows whose arg-max agrees with the reference, per compared request with (N, C) "
                    "outputs (the lowest over them)",
                    ["model"],
                    buckets=_AGREEMENT_BUCKETS,
                ),
                inference=Histogram(
                    "amdinfer_inference_seconds",
                    "Time of one engine call (one batch) on a worker",
                    ["model", "worker"],
                    buckets=_LATENCY_BUCKETS,
                ),
            )
        return _SHARED


class ServingMetrics:
    """The metrics of one served model; also the batcher's observer.

    Exposed at ``/metrics`` by the server (Prometheus text format) next to KServe's own:
    ``amdinfer_requests_total{model,outcome}``, ``amdinfer_request_latency_seconds{model}``,
    ``amdinfer_queue_seconds{model}``, ``amdinfer_queue_depth{model}``, ``amdinfer_batch_size{model,worker}`` and
    ``amdinfer_inference_seconds{model,worker}``; with the numerical canary on (see
    :class:`~amdinfer.serve.Canary`), ``amdinfer_canary_{sampled,compared,over_tolerance,dropped,failed}_total{model}``
    and the histograms ``amdinfer_canary_max_abs_error{model}``, ``amdinfer_canary_max_rel_error{model}`` and
    ``amdinfer_canary_top1_agreement{model}``.

    Example:
        >>> m = ServingMetrics("demo")
        >>> m.batch("cpu", 4, 0.01)
        >>> from prometheus_client import REGISTRY
        >>> REGISTRY.get_sample_value("amdinfer_batch_size_sum", {"model": "demo", "worker": "cpu"}) >= 4
        True
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self._c = _collectors()

    def request(self, outcome: str, seconds: float | None = None) -> None:
        """Count a finished request (``ok``, ``invalid`` or ``error``) and observe its latency."""
        self._c["requests"].labels(model=self.model, outcome=outcome).inc()
        if seconds is not None:
            self._c["latency"].labels(model=self.model).observe(seconds)

    def queued(self, seconds: float) -> None:
        """Observe one request's time in the queue."""
        self._c["queue"].labels(model=self.model).observe(seconds)

    def depth(self, requests: int) -> None:
        """Set how many requests wait in the batcher now."""
        self._c["depth"].labels(model=self.model).set(requests)

    def batch(self, worker: str, rows: int, seconds: float) -> None:
        """Observe one engine call: its rows and its time."""
        self._c["batch"].labels(model=self.model, worker=worker).observe(rows)
        self._c["inference"].labels(model=self.model, worker=worker).observe(seconds)

    def canary(self, event: str) -> None:
        """Count one canary event: ``sampled``, ``compared``, ``over_tolerance``, ``dropped`` or ``failed``."""
        self._c["canary"][event].labels(model=self.model).inc()

    def divergence(self, max_abs: float, max_rel: float, top1: float | None = None) -> None:
        """Observe one canary comparison: the worst errors over the outputs and the top-1 agreement, if any."""
        self._c["canary_abs"].labels(model=self.model).observe(max_abs)
        self._c["canary_rel"].labels(model=self.model).observe(max_rel)
        if top1 is not None:
            self._c["canary_top1"].labels(model=self.model).observe(top1)
