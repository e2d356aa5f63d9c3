"""Prometheus metrics of the server (requests, latency, batch sizes, queue time, the numerical canary), on the
default registry."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ServingMetrics", "relabelled"]

#: the labels of every metric: Triton's (``nv_inference_request_success{model="...",version="1"}``)
_LABELS = ["model", "version"]
_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {}
_VERSIONS: dict[str, str] = {}  # model -> its version label (for KServe's metrics, which know the name only)

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


class _Relabelled:
    """A collector of other collectors' samples with KServe's ``model_name`` label as ``model`` and ``version``."""

    def __init__(self, collectors: list[Any]) -> None:
        self._collectors = collectors

    def collect(self) -> Any:
        from prometheus_client.metrics_core import Metric

        for collector in self._collectors:
            for family in collector.collect():
                out = Metric(family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    labels = dict(sample.labels)
                    if "model_name" in labels:
                        model = labels.pop("model_name")
                        labels = {"model": model, "version": _VERSIONS.get(model, ""), **labels}
                    out.add_sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
                yield out


def relabelled(collector: Any) -> Any:
    """``collector`` (a registry's or ``MultiProcessCollector``'s samples) with KServe's ``model_name`` label as
    ``model`` and ``version``, the labels of amdinfer's own metrics.

    Example:
        >>> from prometheus_client import CollectorRegistry, Histogram, generate_latest
        >>> source, out = CollectorRegistry(), CollectorRegistry()
        >>> Histogram("request_predict_seconds", "predict", ["model_name"], registry=source).labels("m").observe(1)
        >>> out.register(relabelled(source))
        >>> 'request_predict_seconds_count{model="m",version=""} 1.0' in generate_latest(out).decode()
        True
    """
    return _Relabelled([collector])


def _relabel_kserve() -> None:
    """KServe's histograms on the default registry, labelled as amdinfer's (``model``, ``version``), when KServe is
    imported (a server imports it before it builds a model; nothing here imports it)."""
    import sys

    from prometheus_client import REGISTRY

    metrics = sys.modules.get("kserve.metrics")
    if metrics is None:
        return

    histograms = [metrics.PRE_HIST_TIME, metrics.POST_HIST_TIME, metrics.PREDICT_HIST_TIME, metrics.EXPLAIN_HIST_TIME]
    for h in histograms:
        REGISTRY.unregister(h)  # KServe's model code still observes them; they are collected through _Relabelled
    REGISTRY.register(_Relabelled(histograms))


def _collectors() -> dict[str, Any]:
    """The collectors, created once per process (a name can be registered only once)."""
    with _LOCK:
        if not _SHARED:
            from prometheus_client import Counter, Gauge, Histogram

            _relabel_kserve()

            _SHARED.update(
                requests=Counter(
                    "amdinfer_requests",
                    "Inference requests by outcome (ok, invalid, error)",
                    ["model", "version", "outcome"],
                ),
                latency=Histogram(
                    "amdinfer_request_latency_seconds",
                    "Time from a request's arrival at the model to its outputs (queue + inference)",
                    _LABELS,
                    buckets=_LATENCY_BUCKETS,
                ),
                depth=Gauge(
                    "amdinfer_queue_depth",
                    "Requests waiting in the batcher now",
                    _LABELS,
                    multiprocess_mode="livesum",
                ),
                queue=Histogram(
                    "amdinfer_queue_seconds",
                    "Time a request waited in the batcher before its batch started",
                    _LABELS,
                    buckets=_LATENCY_BUCKETS,
                ),
                batch=Histogram(
                    "amdinfer_batch_size",
                    "Items (batch rows) per engine call",
                    ["model", "version", "worker"],
                    buckets=_BATCH_BUCKETS,
                ),
                canary={
                    event: Counter(f"amdinfer_canary_{event}", text, _LABELS) for event, text in _CANARY_EVENTS.items()
                },
                canary_abs=Histogram(
                    "amdinfer_canary_max_abs_error",
                    "Largest |served - reference| over a compared request's outputs",
                    _LABELS,
                    buckets=_ERROR_BUCKETS,
                ),
                canary_rel=Histogram(
                    "amdinfer_canary_max_rel_error",
                    "Largest |served - reference| / |reference| over a compared request's outputs",
                    _LABELS,
                    buckets=_ERROR_BUCKETS,
                ),
                canary_top1=Histogram(
                    "amdinfer_canary_top1_agreement",
                    "Fraction of rows whose arg-max agrees with the reference, per compared request with (N, C) "
                    "outputs (the lowest over them)",
                    _LABELS,
                    buckets=_AGREEMENT_BUCKETS,
                ),
                inference=Histogram(
                    "amdinfer_inference_seconds",
                    "Time of one engine call (one batch) on a worker",
                    ["model", "version", "worker"],
                    buckets=_LATENCY_BUCKETS,
                ),
            )
        return _SHARED


class ServingMetrics:
    """The metrics of one served model; also the batcher's observer.

    Exposed at ``/metrics`` by the server (Prometheus text format) next to KServe's own, every one labelled
    ``model`` and ``version`` as Triton labels its metrics (``version`` is a Triton-layout model's version folder,
    empty for other models): ``amdinfer_requests_total{outcome}``, ``amdinfer_request_latency_seconds``,
    ``amdinfer_queue_seconds``, ``amdinfer_queue_depth``, ``amdinfer_batch_size{worker}`` and
    ``amdinfer_inference_seconds{worker}``; with the numerical canary on (see :class:`~amdinfer.serve.Canary`),
    ``amdinfer_canary_{sampled,compared,over_tolerance,dropped,failed}_total`` and the histograms
    ``amdinfer_canary_max_abs_error``, ``amdinfer_canary_max_rel_error`` and ``amdinfer_canary_top1_agreement``.
    KServe's ``request_{preprocess,predict,postprocess,explain}_seconds`` are exported with the same two labels
    (KServe names its label ``model_name``; :func:`relabelled`).

    Example:
        >>> m = ServingMetrics("demo")
        >>> m.batch("cpu", 4, 0.01)
        >>> from prometheus_client import REGISTRY
        >>> labels = {"model": "demo", "version": "", "worker": "cpu"}
        >>> REGISTRY.get_sample_value("amdinfer_batch_size_sum", labels) >= 4
        True
    """

    def __init__(self, model: str, version: str = "") -> None:
        self.model = model
        self._c = _collectors()
        self.version = version

    @property
    def version(self) -> str:
        """The ``version`` label (a Triton-layout model's version; KServe's metrics of the model get it too)."""
        return self._version

    @version.setter
    def version(self, value: str) -> None:
        self._version = str(value)
        _VERSIONS[self.model] = self._version

    def request(self, outcome: str, seconds: float | None = None) -> None:
        """Count a finished request (``ok``, ``invalid`` or ``error``) and observe its latency."""
        self._c["requests"].labels(model=self.model, version=self.version, outcome=outcome).inc()
        if seconds is not None:
            self._c["latency"].labels(model=self.model, version=self.version).observe(seconds)

    def queued(self, seconds: float) -> None:
        """Observe one request's time in the queue."""
        self._c["queue"].labels(model=self.model, version=self.version).observe(seconds)

    def depth(self, requests: int) -> None:
        """Set how many requests wait in the batcher now."""
        self._c["depth"].labels(model=self.model, version=self.version).set(requests)

    def batch(self, worker: str, rows: int, seconds: float) -> None:
        """Observe one engine call: its rows and its time."""
        self._c["batch"].labels(model=self.model, version=self.version, worker=worker).observe(rows)
        self._c["inference"].labels(model=self.model, version=self.version, worker=worker).observe(seconds)

    def canary(self, event: str) -> None:
        """Count one canary event: ``sampled``, ``compared``, ``over_tolerance``, ``dropped`` or ``failed``."""
        self._c["canary"][event].labels(model=self.model, version=self.version).inc()

    def divergence(self, max_abs: float, max_rel: float, top1: float | None = None) -> None:
        """Observe one canary comparison: the worst errors over the outputs and the top-1 agreement, if any."""
        self._c["canary_abs"].labels(model=self.model, version=self.version).observe(max_abs)
        self._c["canary_rel"].labels(model=self.model, version=self.version).observe(max_rel)
        if top1 is not None:
            self._c["canary_top1"].labels(model=self.model, version=self.version).observe(top1)
