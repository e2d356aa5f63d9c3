"""``engine.prepare`` on an IO-bound ONNX Runtime engine: the slot found once, graph outputs handed out as is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._dlpack import DeviceArray
from .._prepared import BoundFeeds
from ._capture import CAPTURE_RUNS


def prepared_call(
    runner: Any, feeds: Mapping[str, Any], outputs: Sequence[str] | None, outputs_on: str
) -> Callable[[], dict[str, Any]]:
    """A callable repeating ``runner.run(feeds, outputs, outputs_on)``.

    The slot (device buffers, IOBinding, graph id) is looked up once. Once the slot's CUDA/HIP graph is
    captured, device outputs are the slot's own output buffers (no copy: the next replay overwrites them,
    as :class:`~amdinfer.engines.PreparedRun` documents); before that, and for host outputs, the calls are
    :meth:`IoBindingRunner.run`'s. A NumPy feed resized in place since (``x.resize(...)``) is an
    :class:`~amdinfer.errors.InputError` naming the input and both shapes, not ONNX Runtime's size mismatch.
    """
    slot, names, on_device = runner._slot_of(feeds, outputs, outputs_on)
    own: dict[str, Any] = {}
    bound = BoundFeeds(feeds)  # the slot's buffers have the shapes of prepare time

    def call() -> dict[str, Any]:
        bound.check()
        with slot.lock:
            graph = runner._uses_graph(slot, feeds)
            with runner._section(graph and slot.outputs is not None and slot.graph_runs < CAPTURE_RUNS):
                runner._load(slot, feeds)
                runner._execute(slot, graph)
                if not (on_device and graph and slot.outputs is not None and slot.graph_runs > CAPTURE_RUNS):
                    return runner._fetch(slot, names, on_device, graph)
                slot.fresh_outputs = False
                if not own:
                    own.update((n, DeviceArray(slot.outputs[n])) for n in names)
                return dict(own)

    return call
