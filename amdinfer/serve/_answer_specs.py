"""What a served model answers with, for its metadata and Triton configuration: a pipeline's outputs are those of
its results, known once it has answered (:func:`recipe_outputs`)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

__all__ = ["engine_of", "recipe_outputs"]

_PROBE_ROWS = 1  # a batch size warm-up runs (1 and the largest)


def engine_of(worker: Any) -> Any:
    """The engine of a worker (an engine worker's, or its pipeline's)."""
    return getattr(worker, "engine", None) or worker.pipeline.engine


async def recipe_outputs(model: Any) -> tuple[list[dict[str, Any]], bool]:
    """The outputs a pipeline model answers with (OIP metadata: name, datatype, shape with ``-1`` on axis 0) and
    whether they have one row per request item; an engine model's own outputs otherwise; ``[]`` for a pipeline
    that does not start with ``LoadImage``.

    A pipeline's tensors are those of its results (``Detections``: ``boxes``, ``scores``, ``classes``, ``labels``
    when it has names, ``boxes_batch_index``), known by answering once: the first call sends one request of
    one black picture through the model's batcher (as any request goes) and keeps what it answered. A segmenter's
    ``classes`` are ``[-1, -1, -1]`` (each request's images set ``H`` and ``W``).

    Example:
        >>> import asyncio, amdinfer
        >>> from amdinfer.serve import build_model
        >>> from amdinfer.testing.models import yolov8
        >>> model = build_model("det", amdinfer.yolo(yolov8(image_size=64), imgsz=64, providers=["cpu"]))
        >>> async def main():
        ...     await model.batcher.start()
        ...     try:
        ...         return await recipe_outputs(model)
        ...     finally:
        ...         await model.aclose()
        >>> outputs, rows = asyncio.run(main())
        >>> sorted((o["name"], o["datatype"], o["shape"]) for o in outputs)[:3], rows
        ([('boxes', 'FP32', [-1, 4]), ('boxes_batch_index', 'INT64', [-1]), ('classes', 'INT64', [-1])], False)
    """
    first: Any = model.batcher.workers[0]
    if not hasattr(first, "pipeline"):
        return model.get_output_types(), bool(first.batchable)
    if not first.takes_images:  # what it takes is not known (only a pipeline that starts with LoadImage is probed)
        return [], False
    cached = model.__dict__.get("_answer_outputs")
    if cached is not None:
        return cached
    lock = model.__dict__.setdefault("_answer_lock", asyncio.Lock())
    async with lock:
        if (cached := model.__dict__.get("_answer_outputs")) is not None:
            return cached
        height, width = first._picture_size(engine_of(first).inputs[0].shape)
        probe = np.zeros((_PROBE_ROWS, height, width, 3), np.uint8)
        outs = await model.batcher.submit({first.input_name: probe}, request_id="amdinfer-outputs")
        from kserve.utils.numpy_codec import from_np_dtype

        maps = "image_shapes" in outs  # serve --recipe segment: classes (N, H, W) of each request's images
        specs = [
            {"name": n, "datatype": from_np_dtype(a.dtype), "shape": [-1, *(-1 if maps and n == "classes" else int(d)
                                                                           for d in a.shape[1:])]}
            for n, a in outs.items()
        ]  # fmt: skip
        rows = all(a.shape[:1] == (_PROBE_ROWS,) for a in outs.values()) and not any(
            n.endswith("_batch_index") for n in outs
        )
        model.__dict__["_answer_outputs"] = (specs, rows)
        return specs, rows
