"""Workers the batcher drives: an engine (one per device) or a Pipeline, with request validation."""

from __future__ import annotations

import logging
import struct
import threading
import zlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..engines._buckets import bucket_rows, pad_rows
from ..engines._checks import check_symbol, tensors_only
from ..engines._staging import PinnedStaging
from ..engines.base import Engine
from ..errors import BackendUnavailableError, InputError, OptionError, StageError
from ..pipeline._source_images import takes_images
from ..results import SegmentationMap, batch_tensors
from ..types import TensorSpec
from ._answer_maps import map_tensors
from ._answers import result_tensors, row_tensor
from ._images import image_items
from ._shapes import warming

__all__ = [
    "EngineWorker",
    "PipelineWorker",
    "batch_axis",
    "check_request",
    "request_rows",
    "warm_sizes",
]

log = logging.getLogger(__name__)

Tensors = dict[str, np.ndarray]


def _fmt_shape(shape: Sequence[Any]) -> str:
    return (
        "(" + ", ".join(str(d) if isinstance(d, int) else "N" if i == 0 else str(d) for i, d in enumerate(shape)) + ")"
    )


def check_request(specs: Sequence[TensorSpec], feeds: Tensors) -> None:
    """Check one request's tensors against the model's inputs before it joins a batch.

    Everything ``Engine.run`` would check on this request alone is checked here, so that a bad request fails
    alone with a message that names the tensor, never the batch it would have joined: names, dtypes, ranks,
    fixed dimensions, and every symbolic dimension against the same symbol in the other inputs (``a`` with
    ``N = 2`` rows and ``b`` with ``N = 1`` is refused, whatever else is queued).

    Raises:
        InputError: a missing, unknown or repeated input, a wrong dtype, rank, fixed dimension, an empty axis,
            or a symbolic dimension that disagrees with another input's.

    Example:
        >>> spec = TensorSpec("x", np.dtype("float32"), ("N", 3))
        >>> check_request([spec], {"x": np.zeros((2, 4), np.float32)})
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': got shape (2, 4), expected (N, 3)
        >>> a, b = TensorSpec("a", np.dtype("float32"), ("N", 4)), TensorSpec("b", np.dtype("float32"), ("N", 4))
        >>> check_request([a, b], {"a": np.zeros((2, 4), np.float32), "b": np.zeros((1, 4), np.float32)})
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'b': axis 0 ('N') is 1, but input 'a' has 'N' = 2
    """
    names = [s.name for s in specs]
    unknown = sorted(set(feeds) - set(names))
    missing = [n for n in names if n not in feeds]
    if unknown or missing:
        raise InputError(
            f"inputs: got {sorted(feeds)}, expected {names}" + (f" (unknown: {unknown})" if unknown else "")
        )
    symbols: dict[str, tuple[int, str]] = {}
    for spec in specs:
        arr = feeds[spec.name]
        if not isinstance(arr, np.ndarray):
            raise InputError(f"input {spec.name!r}: got {type(arr).__name__}, expected a numpy array")
        if arr.dtype != spec.dtype:
            raise InputError(f"input {spec.name!r}: got dtype {arr.dtype}, expected {spec.dtype}")
        if arr.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, arr.shape)):
            raise InputError(f"input {spec.name!r}: got shape {arr.shape}, expected {_fmt_shape(spec.shape)}")
        if arr.ndim == 0 or 0 in arr.shape:
            axis = arr.shape.index(0) if arr.ndim else 0
            raise InputError(f"input {spec.name!r}: got shape {arr.shape}, expected at least one item on axis {axis}")
        for axis, (dim, size) in enumerate(zip(spec.shape, arr.shape)):
            if isinstance(dim, str):
                check_symbol(symbols, spec.name, axis, dim, size)  # Engine.run's own rule


def request_rows(feeds: Tensors) -> int:
    """How many rows (items on axis 0) a request carries; every input must carry the same number.

    Requests are batched on axis 0 and the outputs split back by these counts, so inputs that disagree on
    their row count cannot share a batch.

    Raises:
        InputError: an input with no axis 0, or inputs with different row counts.

    Example:
        >>> request_rows({"a": np.zeros((3, 4)), "b": np.zeros((3,))})
        3
        >>> request_rows({"a": np.zeros((2, 4)), "b": np.zeros((1, 4))})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'b': got 1 rows on axis 0, but input 'a' has 2; ...
    """
    first: tuple[str, int] | None = None
    for name, arr in feeds.items():
        if np.ndim(arr) == 0:
            raise InputError(f"input {name!r}: got a scalar, expected items on axis 0")
        n = int(arr.shape[0])
        if first is None:
            first = (name, n)
        elif n != first[1]:
            raise InputError(
                f"input {name!r}: got {n} rows on axis 0, but input {first[0]!r} has {first[1]}; requests are "
                "batched on axis 0, so every input needs the same number of rows"
            )
    if first is None:
        raise InputError("inputs: got none, expected at least one tensor")
    return first[1]


def batch_axis(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str | None:
    """Why requests to this model cannot share an engine call, or ``None`` when they can.

    Stacking requests on axis 0 and splitting the outputs back by rows is only right when axis 0 of every
    input and every output is the same symbolic dimension (the batch): an output whose axis 0 is another
    symbol (``K`` detections, an ``unk__`` name) or unnamed would be split at the wrong rows.

    Example:
        >>> x = TensorSpec("x", np.dtype("float32"), ("N", 3))
        >>> batch_axis([x], [TensorSpec("y", np.dtype("float32"), ("N", 10))]) is None
        True
        >>> batch_axis([x], [TensorSpec("idx", np.dtype("int64"), ("K", 3))])
        "output 'idx': axis 0 is 'K', not the inputs' batch axis 'N'"
    """
    specs = [("input", s) for s in inputs] + [("output", s) for s in outputs]
    if not inputs:
        return "the model has no inputs"
    batch = inputs[0].shape[0] if inputs[0].shape else None
    if not isinstance(batch, str):
        return f"input {inputs[0].name!r}: axis 0 is {batch!r}, not a named dynamic (batch) dimension"
    for kind, s in specs:
        dim = s.shape[0] if s.shape else None
        if dim != batch:
            return f"{kind} {s.name!r}: axis 0 is {dim!r}, not the inputs' batch axis {batch!r}"
    return None


def warm_sizes(buckets: Sequence[int], max_rows: int, fixed: int | None = None) -> list[int]:
    """The engine batch sizes that batches of 1..``max_rows`` rows reach: the ``batch_buckets`` they are padded
    to, else the model's fixed batch size (a pipeline runs chunks of it), else 1 and ``max_rows``.

    Example:
        >>> warm_sizes((), 8), warm_sizes((1, 4, 16, 32), 8), warm_sizes((), 8, fixed=1)
        ([1, 8], [1, 4, 16], [1])
    """
    if buckets:  # what a batch of 1..max_rows rows is padded to (beyond the largest bucket: chunks of it)
        return sorted({bucket_rows(buckets, min(n, buckets[-1])) for n in range(1, max_rows + 1)})
    return [fixed] if fixed else sorted({1, max_rows})


def _png(height: int, width: int) -> bytes:
    """A PNG file (RGB, 8 bits) of a smooth synthetic picture, written with the standard library only."""
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([x * 255 // max(width, 1), y * 255 // max(height, 1), (x + y) % 256], -1).astype(np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in img)  # filter type 0 on every scanline

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


class EngineWorker:
    """Runs several requests as one engine call (one device) and splits the outputs per request.

    Requests are stacked on axis 0 when axis 0 of every input and output is the same named dynamic
    dimension (see :func:`batch_axis`); otherwise each request is its own engine call (``batchable`` is
    ``False`` and ``unbatchable_reason`` says why). The batch is assembled without ``np.concatenate``: each
    request's rows are copied into their slot of a reused batch buffer (page-locked when the engine runs on
    a GPU, see :class:`~amdinfer.engines._staging.PinnedStaging`, so the copy to the device is one DMA),
    already padded to the engine's batch bucket by repeating the last row as ``Engine.run`` would. A batch
    whose outputs do not have one row per input row raises, and the batcher then runs its requests one by
    one: a request never gets another's rows.

    Args:
        engine: the engine of this worker's device.
        name: a label for metrics and thread names (default: the engine's device).

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"])
        >>> worker = EngineWorker(engine)
        >>> x = np.zeros((2, 3, 32, 32), np.float32)
        >>> [o["logits"].shape for o in worker.run([{"input": x}, {"input": x[:1]}])]
        [(2, 10), (1, 10)]
        >>> engine.close()
    """

    def __init__(self, engine: Engine, name: str | None = None) -> None:
        if not isinstance(engine, Engine):
            raise OptionError(f"engine: got {type(engine).__name__}, expected an amdinfer Engine")
        self.engine = engine
        self.name = name or str(engine.info.device or "engine")
        self.inputs = list(engine.inputs)
        self.outputs = list(engine.outputs)
        tensors_only(self.inputs, self.outputs, f"the server (OIP v2 carries tensors; model {engine.model.name})")
        #: why requests cannot share an engine call (``None``: they can)
        self.unbatchable_reason = batch_axis(self.inputs, self.outputs)
        self.batchable = self.unbatchable_reason is None
        gpu = str(engine.info.device or "cpu") != "cpu"
        # batch buffers, leased per engine call and given back after it (one worker thread: one in flight)
        self._staging = PinnedStaging(depth=2, pinned=None if gpu else False)
        #: counts each engine call's requests (the shape log, :mod:`._shapes`; set by ``build_model``)
        self.shape_log: Callable[[Sequence[Tensors]], None] | None = None

    def check(self, feeds: Tensors) -> None:
        """:func:`check_request` against this engine's inputs, and equal row counts when requests are batched."""
        check_request(self.inputs, feeds)
        if self.batchable:
            request_rows(feeds)

    def warmup(self, max_rows: int, runs: int = 3) -> list[int]:
        """Run zeros of each batch size a batch can reach, ``runs`` times, before serving.

        The first runs of an input shape are the slow ones on a GPU (algorithm search, graph capture): with
        ``batch_buckets`` the engine only ever sees the bucket sizes, so those are warmed up (up to
        ``max_rows``); without, only 1 and ``max_rows``. Models with other dynamic axes are not warmed up.

        Returns:
            The batch sizes run.
        """
        if not self.batchable or any(not isinstance(d, int) for s in self.inputs for d in s.shape[1:]):
            return []
        sizes = warm_sizes(self.engine.batch_buckets, max_rows)
        with warming(self.engine):  # these are the engine's prepared shapes (on_new_shape)
            for n in sizes:
                feeds = {
                    s.name: np.zeros((n, *(d for d in s.shape[1:] if isinstance(d, int))), s.dtype) for s in self.inputs
                }
                for _ in range(runs):
                    self.engine.run(feeds)
        return sizes

    def key(self, feeds: Tensors) -> Hashable:
        if not self.batchable:
            return object()  # never shares a call
        return tuple((n, a.shape[1:], a.dtype.str) for n, a in sorted(feeds.items()))

    def rows(self, feeds: Tensors) -> int:
        return request_rows(feeds) if self.batchable else int(np.shape(next(iter(feeds.values())))[0])

    def run(self, requests: Sequence[Tensors]) -> list[Tensors]:
        if self.shape_log is not None:
            self.shape_log(requests)
        if len(requests) == 1:
            return [dict(self.engine.run(requests[0]))]
        if not self.batchable:
            raise RuntimeError(f"{len(requests)} requests in one call, but {self.unbatchable_reason}")
        counts = [request_rows(r) for r in requests]
        total = sum(counts)
        buffers = self._assemble(requests, total)
        try:
            out = self.engine.run(buffers)
            size = next(iter(buffers.values())).shape[0]  # total, or the bucket it was padded to
            results: dict[str, np.ndarray] = {}
            for k, v in out.items():
                if np.ndim(v) == 0 or np.shape(v)[0] != size:
                    raise RuntimeError(
                        f"output {k!r}: got shape {np.shape(v)} for a batch of {total} rows, expected {total} on axis 0"
                    )
                v = np.asarray(v)[:total]
                if any(np.may_share_memory(v, b) for b in buffers.values()):
                    v = v.copy()  # an output that views the batch buffer (Identity): the buffer is reused
                results[k] = v
        finally:
            for b in buffers.values():
                self._staging.release(b)
        bounds = np.cumsum([0, *counts])
        return [{k: v[bounds[i] : bounds[i + 1]] for k, v in results.items()} for i in range(len(requests))]

    def _assemble(self, requests: Sequence[Tensors], total: int) -> Tensors:
        """One leased buffer per input with every request's rows in its slot, padded to the batch bucket.

        A request whose tensor does not fit its slot exactly (another dtype or row shape: the batcher's key
        keeps those apart, so this is a bug) raises, and the batcher runs the requests one by one.
        """
        # padded here as Engine.run would (the engine's bucket helper), so the engine gets one full bucket, no copy
        size = bucket_rows(self.engine.batch_buckets, total)
        buffers: Tensors = {}
        try:
            for spec in self.inputs:
                first = requests[0][spec.name]
                buf = buffers[spec.name] = self._staging.lease((size, *first.shape[1:]), first.dtype)
                start = 0
                for r in requests:
                    part = r[spec.name]
                    if part.shape[1:] != buf.shape[1:]:  # copyto would broadcast it
                        raise InputError(
                            f"input {spec.name!r}: got rows of shape {part.shape[1:]}, but the batch it joined has "
                            f"{buf.shape[1:]}"
                        )
                    np.copyto(buf[start : start + len(part)], part, casting="no")
                    start += len(part)
                pad_rows(buf, total)
        except BaseException:
            for b in buffers.values():
                self._staging.release(b)
            raise
        return buffers


class PipelineWorker:
    """Runs the items of several requests through ``run_batch`` of a :class:`~amdinfer.Pipeline` or a
    :class:`~amdinfer.pipeline.fuse.FusedPipeline` (one engine call per batch; a fused pipeline places the items with
    its executor's thread pool straight into the batch buffer), a :class:`~amdinfer.pipeline.SlicedPipeline`
    (``amdinfer.yolo(..., tiles=...)``: every tile of the batch's images in one detector ``run_batch``) or a
    :class:`~amdinfer.recipes.Segmenter` (``amdinfer.segment``: class maps, :mod:`amdinfer.serve._answer_maps`).

    Every request carries one input tensor with its items on axis 0 (e.g. ``uint8 (n, H, W, 3)`` images).
    A pipeline whose first stage is :class:`~amdinfer.preprocess.LoadImage` (:func:`amdinfer.yolo`,
    :func:`amdinfer.classify`) also takes encoded images: a ``BYTES`` tensor of shape ``(n,)`` or ``(n, 1)``,
    one JPEG/PNG file per element, decoded by ``run_batch`` (in the executor's threads); see
    :mod:`amdinfer.serve._images` for the layout. Outputs of the items are stacked per request
    (``Classification``: ``indices (n, k)``, ``scores (n, k)``, ``labels (n, k)``). ``Detections`` (a
    different box count per item) are concatenated instead: ``boxes (K, 4)``, ``scores (K,)``, ``classes (K,)``,
    ``labels (K,)`` and ``boxes_batch_index (K,)`` saying which item each box belongs to (the layout of ONNX
    ``NonMaxSuppression``); ``TextLines`` (:func:`amdinfer.ocr`) likewise: ``quads (K, 4, 2)``, ``scores (K,)``,
    ``texts (K,)`` and ``quads_batch_index (K,)``; so are other outputs whose shapes differ between items, each
    with its own ``<name>_batch_index`` (:mod:`amdinfer.serve._answers`). An item that fails (not an image, a
    truncated file) fails its request only, with an :class:`~amdinfer.errors.InputError` naming the tensor and
    the item.

    Args:
        pipeline: the :class:`~amdinfer.Pipeline` or :class:`~amdinfer.pipeline.fuse.FusedPipeline`.
        input_name: the request tensor's name (default: the pipeline's engine input).
        name: a label for metrics and thread names.

    Example:
        >>> import amdinfer
        >>> from amdinfer.preprocess import HwcToChw, Cast
        >>> from amdinfer.testing.models import tiny_cnn
        >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
        ...                          backend="ort", providers=["CPUExecutionProvider"])
        >>> worker = PipelineWorker(pipe, input_name="images")
        >>> worker.run([{"images": np.zeros((3, 32, 32, 3), np.uint8)}])[0]["output"].shape
        (3, 10)
        >>> pipe.close()
    """

    batchable = True

    def __init__(self, pipeline: Any, input_name: str | None = None, name: str | None = None) -> None:
        stages = _host_stages(pipeline)
        self.pipeline = pipeline
        self.input_name = input_name or pipeline.engine.inputs[0].name
        self.name = name or str(pipeline.engine.info.device or "pipeline")
        #: whether requests may send encoded images (``BYTES``): the pipeline starts with ``LoadImage``
        self.takes_images = takes_images(stages)
        self._load_image = stages[0] if self.takes_images else None
        # any dtype/shape: the first stage checks its items; BYTES (N,) advertised when it decodes images
        self.inputs: list[TensorSpec] = (
            [TensorSpec(self.input_name, np.dtype(object), ("N",))] if self.takes_images else []
        )
        self.outputs: list[TensorSpec] = []  # known once a result is seen
        self._lock = threading.Lock()

    def check(self, feeds: Tensors) -> None:
        if list(feeds) != [self.input_name]:
            raise InputError(f"inputs: got {sorted(feeds)}, expected [{self.input_name!r}]")
        arr = feeds[self.input_name]
        if arr.dtype == object and self.takes_images:  # headers checked here: a bomb never meets other requests
            image_items(self.input_name, arr, max_pixels=getattr(self._load_image, "max_pixels", None))
            return
        if arr.ndim < 1 or arr.shape[0] == 0:
            raise InputError(f"input {self.input_name!r}: got shape {arr.shape}, expected items on axis 0")
        if arr.dtype.kind not in "biuf":
            also = " or BYTES (encoded images)" if self.takes_images else ""
            why = "" if self.takes_images else " (this pipeline does not start with LoadImage: no encoded images)"
            raise InputError(f"input {self.input_name!r}: got dtype {arr.dtype}, expected a numeric tensor{also}{why}")

    def warmup(self, max_rows: int, runs: int = 3) -> list[int]:
        """Run synthetic images through the whole pipeline at each engine batch size, ``runs`` times, before serving.

        Only a pipeline that starts with ``LoadImage`` is warmed up (what other pipelines take is not known): each
        item is a PNG file (encoded here once, of the model's input size when it is fixed, else 64x64), so decoding,
        the geometry and the engine all run. The batch sizes are those of :func:`warm_sizes`: the engine's
        ``batch_buckets`` up to ``max_rows``, else the model's fixed batch size, else 1 and ``max_rows``. Without
        a decoder installed, the items are uint8 arrays instead (logged).

        Returns:
            The engine batch sizes run (``[]``: not warmed up).

        Example:
            >>> import amdinfer
            >>> from amdinfer.testing.models import yolov8
            >>> worker = PipelineWorker(amdinfer.yolo(yolov8(image_size=64), imgsz=64,
            ...                                       providers=["CPUExecutionProvider"]))
            >>> worker.warmup(8, runs=1)
            [1, 8]
            >>> worker.pipeline.close()
        """
        if self._load_image is None:
            return []
        engine = self.pipeline.engine
        spec = engine.inputs[0]
        fixed = getattr(self.pipeline, "fixed_batch", None)  # a fused graph's axis 0 is N even then
        fixed = fixed or (spec.shape[0] if spec.shape and isinstance(spec.shape[0], int) else None)
        sizes = warm_sizes(engine.batch_buckets, max_rows, fixed)
        height, width = self._picture_size(spec.shape)
        item: Any = _png(height, width)
        try:
            self._load_image(item)  # decodes it: no engine run
        except BackendUnavailableError as exc:  # no decoder: requests can only send arrays, so warm with those
            log.info("%s: warming up with uint8 arrays, not PNG files (%s)", self.name, exc)
            item = np.zeros((height, width, 3), np.uint8)
        with warming(engine):  # these are the engine's prepared shapes (on_new_shape)
            for n in sizes:
                for _ in range(runs):
                    self.pipeline.run_batch([item] * n)
        return sizes

    def _picture_size(self, shape: Sequence[Any]) -> tuple[int, int]:
        """``(H, W)`` the engine takes when fixed (a fused graph's ``image_size``, or an ``(N, C, H, W)`` /
        ``(N, H, W, C)`` input), else 64x64 (the geometry stages then resize it)."""
        size = getattr(self.pipeline, "image_size", None)
        if size is not None:
            return int(size[0]), int(size[1])
        if len(shape) == 4 and all(isinstance(d, int) for d in shape[1:]):
            return (shape[2], shape[3]) if shape[1] in (1, 3, 4) else (shape[1], shape[2])
        return 64, 64

    def key(self, feeds: Tensors) -> Hashable:
        return "items"  # preprocessing makes items alike: any requests may share a call

    def rows(self, feeds: Tensors) -> int:
        return int(feeds[self.input_name].shape[0])  # BYTES (N, 1): N images too

    def _items(self, feeds: Tensors) -> list[Any]:
        arr = feeds[self.input_name]
        if arr.dtype == object:  # encoded images: bytes, never str (LoadImage would read a str as a path)
            return image_items(self.input_name, arr)
        return list(arr)

    def run(self, requests: Sequence[Tensors]) -> list[Tensors]:
        items = [item for r in requests for item in self._items(r)]
        try:
            raw = self.pipeline.run_batch(items)
        except StageError as exc:
            if len(requests) == 1 and isinstance(exc, InputError):
                # alone (the batcher retries a failed batch request by request), "item i" is this request's
                raise InputError(f"input {self.input_name!r}: {exc}") from exc
            raise
        if len(raw) != len(items):
            raise RuntimeError(f"pipeline: got {len(raw)} results for {len(items)} items, expected one per item")
        out, start = [], 0
        if raw and isinstance(raw[0], SegmentationMap):  # padded maps, one row per image (._answer_maps)
            for r in requests:
                n = self.rows(r)
                out.append(map_tensors(raw[start : start + n]))
                start += n
            return out
        rows = row_tensor(raw[0]) if raw else None
        results = [result_tensors(r) for r in raw]
        for r in requests:
            n = self.rows(r)
            out.append(batch_tensors(results[start : start + n], rows))
            start += n
        return out


def _host_stages(pipeline: Any) -> Sequence[Any]:
    """The host stages a served pipeline starts with (its first says whether it decodes images): a Pipeline's
    ``preprocess``, a fused one's host stages, a :class:`~amdinfer.pipeline.SlicedPipeline`'s or a
    :class:`~amdinfer.recipes.Segmenter`'s decoder (both decode each image once, before tiling or padding it).

    Raises:
        OptionError: any other object, named.
    """
    from ..pipeline import Pipeline
    from ..pipeline._slices import SlicedPipeline
    from ..pipeline.fuse import FusedPipeline
    from ..recipes import Segmenter

    if isinstance(pipeline, Pipeline):
        return list(pipeline.preprocess)
    if isinstance(pipeline, FusedPipeline):
        return list(pipeline._host)
    if isinstance(pipeline, (SlicedPipeline, Segmenter)):
        return [] if pipeline._load is None else [pipeline._load]
    raise OptionError(
        f"pipeline: got {type(pipeline).__name__}, expected an amdinfer Pipeline or FusedPipeline, a "
        "SlicedPipeline (amdinfer.yolo(..., tiles=...)) or a Segmenter (amdinfer.segment)"
    )
