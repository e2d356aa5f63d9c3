"""Running a fused model: :class:`FusedPipeline`."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import onnx

from ...engines._buckets import bucket_rows
from ...engines._staging import PinnedStaging
from ...errors import InputError, OptionError, StageError
from ...preprocess import CenterCrop, Letterbox, Resize, check_image
from ...results import Classification, Detections
from ...results._forms import set_speed
from ...stages import Postprocessor, Preprocessor, Sample, _stage_error
from .._auto import auto_batch_size, device_free_memory, hint_fixed, on_accelerator, record, split_size
from .._executor import ByShape, Executor, Slot, default_threads
from .._map import PipelineMap, map_options
from .._source_images import attach, call, check_keep, preprocess
from ._graph import _GEOMETRY, _META_KEY
from ._model import check_fixed_buckets
from ._speed import SPEED, share, timed_stream

log = logging.getLogger("amdinfer")


# ---------------------------------------------------------------------------------------------- running it
def _labels(post: Sequence[Postprocessor]) -> tuple[str, ...] | None:
    for stage in post:
        labels = getattr(stage, "labels", None)
        if labels is not None:
            return tuple(labels)
    return None


class FusedPipeline:
    """A pipeline compiled into one ONNX graph: uint8 images in, final answers out, one engine call per batch.

    Built by :meth:`amdinfer.Pipeline.fuse`; see :mod:`amdinfer.pipeline.fuse` for how images of different sizes
    enter. Results are the same types as the stage-by-stage pipeline's: :class:`~amdinfer.results.Detections`
    per image for a detector, :class:`~amdinfer.results.Classification` for a classifier, the raw outputs
    otherwise.

    Args:
        model: the fused model (:func:`fuse_model`).
        engine: an engine running it.
        host: preprocessing stages that run on the host first (decoding; geometry when ``image_size`` is
            ``None``).
        image_size: ``(height, width)`` every image must have, or ``None`` (host geometry).
        labels: class names for the results.
        owns_engine: close the engine with the pipeline.
        host_post: the ``Nms`` (and ``ScaleBoxes``) stages a model fused with ``nms_mode="host"`` leaves to the
            host; they run per image on the decoded candidates.
        staging: make the batch buffers pinned (page-locked) when the engine runs on a GPU and PyTorch is
            installed (:class:`~amdinfer.engines._staging.PinnedStaging`): the copy to the device is then one
            DMA at bus speed, at no extra host cost (the images are written there anyway).
        keep_image: keep on each result the picture the first host stage, ``LoadImage``, decoded
            (``result.image``; see :class:`amdinfer.Pipeline`).
        threads: placement threads (decoding and geometry, see "The executor" in docs/pipeline.md); ``None``:
            the cores this process may use (a batch of n uses at most n).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
        >>> from amdinfer.postprocess import Softmax, TopK
        >>> from amdinfer.testing.models import tiny_cnn
        >>> pipe = amdinfer.Pipeline(preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
        ...                          engine=tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"],
        ...                          postprocess=[Softmax(), TopK(3)])
        >>> with pipe.fuse() as fused:  # mixed sizes: Resize runs on the host
        ...     [r.indices.tolist() == fused(x).indices.tolist() for r, x in
        ...      zip(fused.run_batch([np.zeros((40, 50, 3), np.uint8)] * 2), [np.zeros((40, 50, 3), np.uint8)] * 2)]
        [True, True]
        >>> pipe.close()
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        engine: Any,
        host: Sequence[Preprocessor],
        *,
        image_size: tuple[int, int] | None,
        labels: Sequence[str] | None = None,
        owns_engine: bool = True,
        staging: bool = True,
        host_post: Sequence[Postprocessor] = (),
        threads: int | None = None,
        keep_image: bool = False,
    ) -> None:
        self._keep_image = check_keep(keep_image)
        self._model = model
        self._host_post = tuple(host_post)
        raw = next((p.value for p in model.metadata_props if p.key == _META_KEY), None)
        self._fuse_info: dict[str, Any] = json.loads(raw) if raw else {}
        self._max_candidates: int | None = self._fuse_info.get("max_candidates")
        self._cap_warned = False
        if self._fuse_info.get("host_post") and not self._host_post:
            raise OptionError(
                f"host_post: the model leaves {self._fuse_info['host_post']} to the host; pass those stages"
            )
        gpu = on_accelerator(getattr(getattr(engine, "info", None), "device", "cpu"))
        self._gpu = gpu
        self._staging = PinnedStaging(depth=4, pinned=None if staging and gpu else False)
        self._engine = engine
        self._host = tuple(host)
        self._image_size = image_size
        self._labels = None if labels is None else tuple(labels)
        self._owns_engine = owns_engine
        self._inputs = [i.name for i in engine.inputs]
        images = next((i for i in engine.inputs if i.name == "images"), None)
        last = images.shape[-1] if images is not None and len(images.shape) == 4 else None
        self._channels = int(last) if isinstance(last, int) else None  # the graph's C of (N, H, W, C)
        self._outputs = [o.name for o in engine.outputs]
        self._kind = (
            "candidates"
            if "candidate_mask" in self._outputs
            else "detect"
            if "batch_index" in self._outputs
            else "classify"
            if self._outputs == ["scores", "indices"]
            else "raw"
        )
        # The last host stage writes straight into the batch buffer when it is geometry (Letterbox ...).
        last = self._host[-1] if self._host else None
        self._writer: Letterbox | Resize | CenterCrop | None = (
            last if image_size is None and isinstance(last, _GEOMETRY) else None
        )
        batch = self._fuse_info.get("batch")
        # the batch of the model inside (fuse_model's input axis is N, its Reshapes may still hold the 1)
        self._fixed_batch: int | None = int(batch) if isinstance(batch, int) and batch >= 1 else None
        try:  # an engine padding chunks of B rows up to a bucket would fail in the graph
            check_fixed_buckets(self._fixed_batch, getattr(engine, "batch_buckets", ()) or (), "the fused model")
        except OptionError:
            if owns_engine:
                engine.close()
            raise
        self._chunk_logged = False
        self._executor: Executor[dict[str, Any], Any] = Executor(
            self._place,
            self._run,
            self._split,
            canvas=self._canvas(),
            threads=threads,
            staging=self._staging,
            stream=self._run_stream,
            rows=self._rows,
            serial=not gpu,
        )

    @property
    def model(self) -> onnx.ModelProto:
        """The fused ONNX model."""
        return self._model

    @property
    def engine(self) -> Any:
        """The engine running the fused model."""
        return self._engine

    @property
    def image_size(self) -> tuple[int, int] | None:
        """``(height, width)`` the graph takes, or ``None`` when geometry runs on the host."""
        return self._image_size

    @property
    def threads(self) -> int:
        """Placement threads (settable; see the ``threads`` argument)."""
        return self._executor.threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise OptionError(f"threads: got {value!r}, expected an int >= 1 or None")
        self._executor.threads = value or default_threads()

    # ------------------------------------------------------------------ host side (the executor's steps)
    def _canvas(self) -> tuple[int, ...] | None:
        """The slot shape when every image gets the same one (fixed geometry and a known channel count)."""
        if self._channels is None:
            return None
        if self._image_size is not None:
            return (*self._image_size, self._channels)
        w, hw = self._writer, None
        if isinstance(w, Letterbox):
            hw = None if w.auto else w.new_shape
        elif isinstance(w, Resize):
            hw = w.size if isinstance(w.size, tuple) else None
        elif w is not None:  # CenterCrop
            hw = w.size
        return None if hw is None else (*hw, self._channels)

    def _stages(self, index: int, sample: Sample, stages: Sequence[Preprocessor]) -> Sample:
        # the leading stages of the pipeline's preprocess: the same k in errors
        return preprocess(index, sample, stages, keep_image=self._keep_image)

    def _check(self, index: int, data: Any) -> np.ndarray:
        """The image rule of the stage-by-stage geometric stages (check_image), with the graph's channel count."""
        channels = None if self._channels is None else (self._channels,)
        data = check_image(data, f"item {index}: input 'images'", channels=channels, grey=self._channels == 1)
        if data.ndim == 2:  # grey (H, W) for a graph of C = 1, as the stages take it
            data = data[..., None]
        if self._image_size is not None and data.shape[:2] != tuple(self._image_size):
            raise InputError(
                f"item {index}: got an image of {data.shape[:2]}, expected {tuple(self._image_size)} (the size the "
                "pipeline was fused for; fuse with image_size=None to letterbox mixed sizes on the host)"
            )
        return data

    def _place(self, index: int, item: Any, slot: Slot) -> dict[str, Any]:
        """Item ``index`` through the host stages into its slot of the batch buffer: the geometry stage writes
        there itself; otherwise the result is copied in. Its time is the item's ``speed["preprocess"]``."""
        start, writer = time.perf_counter(), self._writer
        sample = self._stages(index, Sample.wrap(item), self._host[:-1] if writer is not None else self._host)
        meta = dict(sample.meta)
        if writer is None:
            data = self._check(index, sample.data)
            slot.put(data)
        else:
            name = f"preprocess[{len(self._host) - 1}] {type(writer).__name__}"
            try:
                shape = writer.canvas(sample.data)
            except Exception as exc:
                raise _stage_error(index, name, exc) from exc
            self._check(index, np.broadcast_to(np.uint8(0), shape))  # the canvas against the graph's channels
            out = slot(shape if len(shape) == 3 else (*shape, 1))
            try:
                writer.write_into(sample.data, out if len(shape) == 3 else out[..., 0], meta)
            except Exception as exc:
                raise _stage_error(index, name, exc) from exc
            data = out
        meta.setdefault("orig_shape", (int(data.shape[0]), int(data.shape[1])))
        share([meta], start, "preprocess")
        return meta

    def _rows(self, n: int) -> int:
        """A fixed-batch model's ``B`` rows for every batch (the last one padded with copies of its last image)."""
        return bucket_rows((), n, fixed=self._fixed_batch)

    def _feed(self, batch: np.ndarray, metas: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
        feed = {"images": batch}
        if "affine" in self._inputs:
            metas = [*metas, *[metas[-1]] * (batch.shape[0] - len(metas))]  # the padding rows: the last image's
            feed["affine"] = np.asarray([m.get("affine", (1.0, 1.0, 0.0, 0.0)) for m in metas], np.float32)
            feed["orig_shape"] = np.asarray([m["orig_shape"] for m in metas], np.float32)
        return feed

    def _run(self, batch: np.ndarray, metas: Sequence[dict[str, Any]]) -> dict[str, Any]:
        start = time.perf_counter()
        outputs = self._engine.run(self._feed(batch, metas))
        share(metas, start, "inference")
        return outputs

    def _run_stream(self, batches: Iterator[tuple[np.ndarray, list[dict[str, Any]]]]) -> Iterator[dict[str, Any]]:
        """:meth:`map`'s engine side: ``run_many``, which on a GPU copies batch k+1 to the device (its own
        thread and stream) while batch k computes; one batch read ahead (the executor keeps three going). A
        batch's engine time is shared out among its items (:func:`~amdinfer.pipeline.fuse._speed.timed_stream`)."""
        return timed_stream(lambda feeds: self._engine.run_many(feeds, prefetch=1), self._feed, batches)

    def _split(self, outputs: dict[str, Any], metas: Sequence[dict[str, Any]]) -> list[Any]:
        start = time.perf_counter()
        results = self.results(outputs, [Sample(None, m) for m in metas])
        share(metas, start, "postprocess")
        return [set_speed(r, m[SPEED]) for r, m in zip(results, metas)]

    def feeds(self, images: Iterable[Any]) -> tuple[dict[str, np.ndarray], list[Sample]]:
        """The engine feed for a batch of images (host stages applied, in parallel, straight into the batch
        buffer, as :meth:`run_batch` makes it) and the per-image samples (each one's data a view of its slot).

        Example:
            >>> import numpy as np
            >>> from amdinfer.testing.models import tiny_cnn
            >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
            >>> from amdinfer.pipeline.fuse import fuse_model
            >>> m = fuse_model(tiny_cnn(), [Normalize(scale=1 / 255), HwcToChw()], [], image_size=(32, 32))
            >>> import amdinfer
            >>> f = FusedPipeline(m, amdinfer.load(m, providers=["CPUExecutionProvider"]), [], image_size=(32, 32))
            >>> feed, _ = f.feeds([np.zeros((32, 32, 3), np.uint8)] * 2)
            >>> {k: v.shape for k, v in feed.items()}
            {'images': (2, 32, 32, 3)}
            >>> f.close()
        """
        items = self._items(images)
        staging = self._staging
        allocate = staging.next if staging.pinned else np.empty
        batch, metas = self._executor.place_batch(items, allocate)
        return self._feed(batch, metas), [Sample(batch[i], m) for i, m in enumerate(metas)]

    @staticmethod
    def _items(images: Iterable[Any]) -> list[Any]:
        items = list(images)
        if not items:
            raise InputError("images: got no images, expected at least one")
        return items

    def results(self, outputs: dict[str, np.ndarray], samples: Sequence[Sample]) -> list[Any]:
        """Split the fused graph's outputs into one result per image (each with its kept picture, if any)."""
        return [attach(r, s.meta) for r, s in zip(self._results(outputs, samples), samples)]

    def _results(self, outputs: dict[str, np.ndarray], samples: Sequence[Sample]) -> list[Any]:
        n = len(samples)
        if self._kind == "classify":
            return [
                Classification(
                    outputs["indices"][i],
                    outputs["scores"][i],
                    None if self._labels is None else [self._labels[int(j)] for j in outputs["indices"][i]],
                )
                for i in range(n)
            ]
        if self._kind == "raw":
            return [
                {k: v[i] for k, v in outputs.items()} if len(outputs) > 1 else next(iter(outputs.values()))[i]
                for i in range(n)
            ]
        if self._kind == "candidates":
            return [self._finish_candidates(i, outputs, s.meta) for i, s in enumerate(samples)]
        self._check_candidates(outputs.get("candidates"))
        batch = outputs["batch_index"]
        order = np.argsort(batch, kind="stable")
        bounds = np.searchsorted(batch[order], np.arange(n + 1))
        out = []
        for i in range(n):
            idx = order[bounds[i] : bounds[i + 1]]
            classes = outputs["classes"][idx]
            labels = None if self._labels is None else [self._labels[int(c)] for c in classes]
            meta = samples[i].meta
            shape = tuple(meta["orig_shape"])
            out.append(Detections(outputs["boxes"][idx], outputs["scores"][idx], classes, labels, shape))
        return out

    def _finish_candidates(self, index: int, outputs: dict[str, Any], meta: dict[str, Any]) -> Detections:
        """``nms_mode="host"``: image ``index``'s candidates (the masked anchors, in anchor order) through the
        host post stages."""
        keep = np.flatnonzero(np.asarray(outputs["candidate_mask"][index]))
        classes = np.asarray(outputs["candidate_classes"][index])[keep]
        labels = None if self._labels is None else [self._labels[int(c)] for c in classes]
        boxes = np.asarray(outputs["candidate_boxes"][index])[keep]
        return self._finish(
            index, Detections(boxes, np.asarray(outputs["candidate_scores"][index])[keep], classes, labels), meta
        )

    def _check_candidates(self, counts: Any) -> None:
        """Log once when an image had more candidates than the dense NMS took (its best ones were kept)."""
        if counts is None or self._max_candidates is None or self._cap_warned or not len(counts):
            return
        most = int(np.max(counts))
        if most > self._max_candidates:
            self._cap_warned = True
            log.warning(
                "fused NMS: an image had %d candidates above the confidence threshold; only its best %d entered "
                "NMS (raise Pipeline.fuse(max_candidates=...) or the threshold; logged once per pipeline)",
                most,
                self._max_candidates,
            )

    def _finish(self, index: int, candidates: Detections, meta: dict[str, Any]) -> Detections:
        """Run the host post stages (``Nms``, ``ScaleBoxes``) on one image's decoded candidates."""
        meta = dict(meta)
        if self._image_size is not None:  # geometry ran in the graph: its mapping is fixed
            meta["affine"] = tuple(self._fuse_info["affine"])
            meta["input_shape"] = tuple(self._fuse_info["input_shape"])
        shape = meta.get("input_shape")
        det = Detections(candidates.boxes, candidates.scores, candidates.classes, candidates.labels, shape)
        sample = Sample(det, meta)
        for stage in self._host_post:
            try:
                sample = stage(sample)
            except Exception as exc:
                raise StageError(
                    f"item {index}: postprocess {type(stage).__name__}: {type(exc).__name__}: {exc}"
                ) from exc
        return sample.data

    # ------------------------------------------------------------------ running
    def __call__(self, image: Any) -> Any:
        """Run one image; a list, a glob or a folder of them gives a list of results in order (see
        :meth:`amdinfer.Pipeline.__call__`). Example: see :class:`FusedPipeline`."""
        return call(self.run_batch, image)

    def run_batch(self, images: Iterable[Any]) -> list[Any]:
        """Run a batch of images with one engine call; one result per image, in order.

        The host stages (decoding paths, bytes and Pillow images; the geometry) run on a pool of threads, each
        image written straight into its slot of the batch buffer the engine reads (see "The executor" in
        docs/pipeline.md). A model with a fixed batch ``B`` runs one call per ``B`` images (:attr:`fixed_batch`).

        Raises:
            InputError: an image is not uint8 ``(H, W, C)`` with the graph's channel count (the rule of
                :func:`~amdinfer.preprocess.check_image`; a host stage's ``InputError`` arrives as a
                :class:`StageError` that is also an ``InputError``), or not of ``image_size``, or the
                canvases differ. With several bad images, the first one's error.
        """
        items = self._items(images)
        self._log_chunks(len(items))
        sub = self._sub_batch(len(items))
        if sub is not None:  # an accelerator: sub-batches streamed, placing k+1 while the engine runs k
            results = self._executor.map(items, sub)
            try:
                return list(results)
            finally:
                close = getattr(results, "close", None)
                if close is not None:
                    close()
        size = self._fixed_batch or len(items)
        return [r for k in range(0, len(items), size) for r in self._executor.run_batch(items[k : k + size])]

    def _auto_batch(self) -> tuple[int, str]:
        """:func:`~amdinfer.pipeline._auto.auto_batch_size` for the fused engine: ``(size, why)``."""
        info = getattr(self._engine, "info", None)
        device = getattr(info, "device", "cpu")
        canvas = self._canvas()
        item = int(np.prod(canvas)) if canvas is not None else None  # uint8 pixels
        free = device_free_memory(device) if self._gpu else None
        buckets = getattr(self._engine, "batch_buckets", ())
        return auto_batch_size(device, getattr(info, "providers", []), buckets, self._fixed_batch, free, item)

    def _sub_batch(self, n: int) -> int | None:
        """The sub-batch of one call on ``n`` images (:func:`~amdinfer.pipeline._auto.split_size`; a fixed batch
        ``B``: ``B``), or ``None``: one batch (on the CPU, and for short lists), as before."""
        if not self._gpu:
            return None
        hint_fixed(getattr(self._engine, "info", None), self._fixed_batch)
        size, _ = self._auto_batch()
        sub = split_size(n, size, getattr(self._engine, "batch_buckets", ()), self._fixed_batch)
        if self._fixed_batch is not None and sub is not None:
            sub = self._fixed_batch  # a fused graph runs exactly B rows a call
        return sub

    @property
    def fixed_batch(self) -> int | None:
        """The batch size the model was exported with, when fixed (it then runs in chunks of it), else ``None``."""
        return self._fixed_batch

    def _log_chunks(self, n: int | None) -> None:
        """A model with a fixed batch ``B`` (e.g. a batch-1 Ultralytics export, whose Reshapes hold the 1) runs batches
        of exactly ``B``, the last one padded with copies of its last image whose results are dropped; logged once."""
        if self._fixed_batch is None or self._chunk_logged or n == self._fixed_batch:
            return
        self._chunk_logged = True
        log.info(
            "fused pipeline: the model has a fixed batch of %d; running chunks of %d (export it with a dynamic "
            "batch axis to batch more)",
            self._fixed_batch,
            self._fixed_batch,
        )

    def map(
        self, items: Iterable[Any], *, batch_size: int | str | None = "auto", workers: int | None = None
    ) -> PipelineMap:
        """Run a stream of images ``batch_size`` at a time; results in input order.

        ``batch_size="auto"`` (or ``None``): the size chosen for the device
        (:func:`~amdinfer.pipeline._auto.auto_batch_size`: 1 on the CPU, the engine's largest batch bucket or 64
        on an accelerator), recorded in ``engine.info.settings["map_batch_size"]``; when the images' canvases may
        differ (host geometry without a fixed size), an automatic size above 1 groups each batch by shape.

        The one ``map`` signature (:mod:`amdinfer.pipeline._map`). While batch k runs on the engine (its own
        thread), ``workers`` threads (default: :attr:`threads`) write the next batches into their buffers and split
        the last ones into results; a few batches are in flight. An error names the item's index in the stream;
        the results before it have been yielded. A model with a fixed batch runs batches of it (:attr:`fixed_batch`).

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> from amdinfer.preprocess import Normalize, HwcToChw
            >>> from amdinfer.pipeline.fuse import fuse_model
            >>> m = fuse_model(tiny_cnn(), [Normalize(scale=1 / 255), HwcToChw()], [], image_size=(32, 32))
            >>> f = FusedPipeline(m, amdinfer.load(m, providers=["CPUExecutionProvider"]), [], image_size=(32, 32))
            >>> [r.shape for r in f.map([np.zeros((32, 32, 3), np.uint8)] * 3, batch_size=2)]
            [(10,), (10,), (10,)]
            >>> f.close()
        """
        size, workers = map_options(items, batch_size, workers, what="images")
        group = None
        if size is None:
            size, why = self._auto_batch()
            record(getattr(self._engine, "info", None), size, why)
            if size > 1 and self._canvas() is None and self._fixed_batch is None:
                group = ByShape(size=size)  # batch 1 took any canvas; so must the automatic batch
        size = self._fixed_batch or size  # the model's own batch size wins (see fixed_batch)
        self._log_chunks(None)
        hint_fixed(getattr(self._engine, "info", None), self._fixed_batch)
        return PipelineMap(self._executor.map(items, size, group=group, workers=workers))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the engine (when the fused pipeline loaded it)."""
        self._executor.close()
        self._staging.clear()
        if self._owns_engine:
            self._engine.close()

    def __enter__(self) -> FusedPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        host = ", ".join(repr(s) for s in self._host) or "none"
        return (
            f"FusedPipeline(image_size={self._image_size}, host=[{host}], "
            f"{len(self._model.graph.node)} nodes, engine={self._engine!r})"
        )
