"""The numerical canary: a random sample of served requests re-run on a reference engine, off the hot path.

The batcher hands every answered request to :meth:`Canary.offer` (its own inputs and outputs, never a
batch-mate's). A random fraction ``rate`` of them is copied into a bounded queue; when the queue is full the
sample is dropped and counted, so serving never waits for the canary. One background thread runs each sample
on the reference engine (CPU fp32 ONNX Runtime, or the NumPy reference) and judges the served outputs with
:func:`amdinfer.verify.compare` and the default tolerances of the served precision.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engines.base import Engine
from ..errors import OptionError
from ._metrics import ServingMetrics

__all__ = ["REFERENCES", "Canary", "check_rate", "load_reference"]

logger = logging.getLogger("amdinfer.serve")

Tensors = dict[str, np.ndarray]

#: The reference engines a canary can build from a model: name -> ``amdinfer.load`` options.
REFERENCES: dict[str, dict[str, Any]] = {
    # One intra-op thread: the canary takes at most one core from the server it checks (ONNX Runtime's default,
    # a thread per core, cost the served rate a quarter at a 1 % sample on an H200 host); what one core cannot
    # check in time is dropped and counted.
    "ort": {"backend": "ort", "providers": ["cpu"], "precision": "fp32", "threads": 1},
    "numpy": {"backend": "reference", "precision": "fp32"},
}

#: What a canary counts (the ``amdinfer_canary_<event>_total`` counters).
EVENTS = ("sampled", "compared", "over_tolerance", "dropped", "failed")


def check_rate(rate: Any, what: str = "verify_sample") -> float:
    """``rate`` as a float in ``[0, 1]``: the fraction of served requests the canary re-runs.

    Raises:
        OptionError: not a number, NaN, or outside ``[0, 1]``.

    Example:
        >>> check_rate(0.01)
        0.01
        >>> check_rate(2)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: verify_sample: got 2, expected a fraction in [0, 1] (0.01: one request in 100)
    """
    ok = isinstance(rate, (int, float, np.integer, np.floating)) and not isinstance(rate, bool)
    if not ok or math.isnan(rate) or not 0 <= rate <= 1:
        raise OptionError(f"{what}: got {rate!r}, expected a fraction in [0, 1] (0.01: one request in 100)")
    return float(rate)


def load_reference(model: Any, reference: str = "ort") -> Engine:
    """The reference engine of a canary: ``"ort"`` (CPU fp32 ONNX Runtime) or ``"numpy"`` (the NumPy reference).

    Load it from the model as given (the path or proto), not from a served engine's own model: an fp16 or
    quantized engine runs a rewritten graph, and a reference built from that would share its errors.

    Raises:
        OptionError: an unknown ``reference``.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> ref = load_reference(tiny_cnn(), "numpy")
        >>> ref.info.backend, ref.info.precision
        ('reference', 'fp32')
        >>> ref.close()
    """
    from .._load import load

    if not isinstance(reference, str) or reference not in REFERENCES:
        raise OptionError(f"verify_reference: got {reference!r}, expected one of {list(REFERENCES)} or an Engine")
    return load(model, **REFERENCES[reference])


@dataclass
class _Sample:
    request_id: str | None
    feeds: Tensors
    outputs: Tensors


def _copy(tensors: Mapping[str, Any]) -> Tensors:
    # the request's buffers may be a client's shared memory or a reused batch slot: keep our own copy
    return {k: np.array(v, copy=True) for k, v in tensors.items()}


class Canary:
    """Re-runs a random sample of served requests on a reference engine in one background thread.

    :meth:`offer` is called for each answered request (by the batcher, before the answer leaves); it draws
    at random, and a sampled request's inputs and outputs are copied into a queue of ``queue_size``
    samples. A full queue drops the sample (counted ``dropped``): the serving path never blocks. The thread
    runs the inputs on ``reference`` and compares with :func:`amdinfer.verify.compare` at the default
    tolerances of ``precision`` (the served engine's; see :data:`amdinfer.verify.DEFAULT_TOLERANCES`),
    plus the top-1 agreement of every ``(N, C)`` float output. A comparison that fails is counted
    ``over_tolerance`` and logged as one WARNING line on ``amdinfer.serve`` with the request id and the
    worst output. Counts go to :attr:`counts` and to the Prometheus metrics of ``model``
    (``amdinfer_canary_*``, see :class:`~amdinfer.serve.ServingMetrics`).

    Args:
        reference: the engine whose answers count as right (see :func:`load_reference`); the canary owns
            it and closes it in :meth:`close`.
        rate: the fraction of requests re-run, in ``[0, 1]``.
        model: the served model's name (metrics label, log lines).
        precision: the served engine's precision (``engine.info.precision``); picks the tolerances.
        queue_size: samples waiting at most; more are dropped.
        seed: seed of the sampling draw (``None``: random).

    Raises:
        OptionError: a rate outside ``[0, 1]``, a ``queue_size`` below 1, an unknown precision, or a
            ``reference`` that is not an Engine.

    Example:
        >>> import amdinfer, numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> served = amdinfer.load(tiny_cnn(), providers=["cpu"])
        >>> canary = Canary(load_reference(tiny_cnn(), "numpy"), rate=1.0, model="doc")
        >>> canary.start()
        >>> x = np.ones((2, 3, 32, 32), np.float32)
        >>> canary.offer({"input": x}, served.run(x), "good")
        True
        >>> canary.offer({"input": x}, {"logits": served.run(x)["logits"] + 1.0}, "bad")  # a wrong answer
        True
        >>> canary.flush()
        >>> canary.counts["compared"], canary.counts["over_tolerance"]
        (2, 1)
        >>> canary.close(); served.close()
    """

    def __init__(
        self,
        reference: Engine,
        *,
        rate: float,
        model: str = "model",
        precision: str = "fp32",
        queue_size: int = 64,
        seed: int | None = None,
    ) -> None:
        from ..verify import default_tolerance

        if not isinstance(reference, Engine):
            raise OptionError(f"verify_reference: got {type(reference).__name__}, expected an amdinfer Engine")
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
            raise OptionError(f"queue_size: got {queue_size!r}, expected an int >= 1")
        self.reference = reference
        self.rate = check_rate(rate)
        self.model = model
        #: the tolerances applied (those of the served precision)
        self.tolerance = default_tolerance(precision)
        # fp32 leaves the choice to the arrays, as compare_engines does: float16 outputs get fp16 tolerances
        self._precision = None if self.tolerance == default_tolerance("fp32") else precision
        self._rng = random.Random(seed)
        self._queue: queue.Queue[_Sample | None] = queue.Queue(maxsize=queue_size)
        self._metrics = ServingMetrics(model)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: how many requests were sampled, compared, over tolerance, dropped (queue full) and failed (the
        #: reference raised)
        self.counts = dict.fromkeys(EVENTS, 0)

    def __repr__(self) -> str:
        return f"Canary(model={self.model!r}, rate={self.rate}, reference={self.reference.info.backend!r})"

    def _count(self, event: str) -> None:
        with self._lock:
            self.counts[event] += 1
        self._metrics.canary(event)

    def start(self) -> None:
        """Start the background thread (again after :meth:`stop`)."""
        if self.reference.closed:
            raise RuntimeError(f"canary of model {self.model!r}: closed; build a new one")
        if self._thread is None or not self._thread.is_alive():
            self._stopping.clear()
            self._thread = threading.Thread(target=self._loop, name=f"amdinfer-canary-{self.model}", daemon=True)
            self._thread.start()

    def offer(self, feeds: Mapping[str, Any], outputs: Mapping[str, Any], request_id: str | None = None) -> bool:
        """Sample one answered request: whether it was queued for comparison. Never blocks, never raises.

        Args:
            feeds: the request's own inputs.
            outputs: the outputs it was answered with.
            request_id: the request's id (the OIP ``id``); ``None``: one is generated if it is logged.
        """
        if self.rate < 1.0 and self._rng.random() >= self.rate:
            return False
        self._count("sampled")
        if self._stopping.is_set() or self._thread is None or self._queue.full():
            self._count("dropped")
            return False
        try:
            self._queue.put_nowait(_Sample(request_id, _copy(feeds), _copy(outputs)))
        except Exception:  # queue.Full from a race, or no memory for the copy: serving goes on
            self._count("dropped")
            return False
        return True

    def flush(self) -> None:
        """Wait until every queued sample has been compared (for tests and scripts)."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.join()

    def stop(self) -> None:
        """Stop the thread: the sample being compared finishes, those still queued are dropped (counted)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._queue.put(None)  # the thread drains the queue (dropping) and then sees this
        thread.join()
        self._thread = None

    def close(self) -> None:
        """:meth:`stop`, then close the reference engine."""
        self.stop()
        self.reference.close()

    def _loop(self) -> None:
        while True:
            sample = self._queue.get()
            try:
                if sample is None:
                    return
                if self._stopping.is_set():
                    self._count("dropped")
                    continue
                self._check(sample)
            finally:
                self._queue.task_done()

    def _check(self, sample: _Sample) -> None:
        from ..verify import ComparisonReport, compare, topk_agreement

        try:
            expected = self.reference.run(sample.feeds, outputs=list(sample.outputs))
            report = compare(sample.outputs, dict(expected), precision=self._precision)
            assert isinstance(report, ComparisonReport)  # dicts in, one report per output out
            top1 = [
                topk_agreement(a, expected[n], k=1)
                for n, a in sample.outputs.items()
                if a.ndim == 2 and a.shape[1] > 1 and a.dtype.kind in "fV"
            ]
        except Exception as exc:
            self._count("failed")
            logger.warning(
                "canary: model %r, request %s: the reference could not check it: %s: %s",
                self.model,
                sample.request_id or uuid.uuid4().hex,
                type(exc).__name__,
                exc,
            )
            return
        agreement = min(top1) if top1 else None
        self._count("compared")
        self._metrics.divergence(report.max_abs, report.max_rel, agreement)
        if report.passed:
            return
        self._count("over_tolerance")
        worst = max((report[n] for n in report.failed), key=lambda r: r.rms)
        logger.warning(
            "canary: model %r, request %s: outputs %s over the %s tolerance against the %s reference; worst %s%s",
            self.model,
            sample.request_id or uuid.uuid4().hex,
            report.failed,
            worst.precision,
            self.reference.info.backend,
            worst.summary(),
            "" if agreement is None else f"; top-1 agreement {agreement:.3f}",
        )
