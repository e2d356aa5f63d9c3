"""``Pipeline``: preprocessing stages -> engine -> postprocessing stages, one item, a batch, or a stream.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
    >>> from amdinfer.postprocess import Softmax, TopK
    >>> from amdinfer.testing.models import tiny_cnn
    >>> pipe = amdinfer.Pipeline(
    ...     preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
    ...     engine=tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"],
    ...     postprocess=[Softmax(), TopK(3)],
    ... )
    >>> result = pipe(np.zeros((48, 64, 3), np.uint8))
    >>> len(result.indices)
    3
    >>> [len(r) for r in pipe.map([np.zeros((40, 40, 3), np.uint8)] * 3, batch_size=2)]
    [3, 3, 3]
    >>> pipe.close()
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ._fuse_options import _auto_nms_mode, _auto_resize, _check_nms_backend, fused_load_options
from ._pipeline_map import MapSteps, PipelineMap
from ._source_images import attach, call, check_keep, remember, takes_images
from .engines.base import Engine
from .errors import InputError, OptionError, StageError, StageInputError
from .preprocess import stack
from .stages import FanOut, Gather, Postprocessor, Preprocessor, Sample, Stage, _stage_error

__all__ = ["Pipeline", "PipelineMap", "SubPipeline"]

log = logging.getLogger("amdinfer.pipeline")


def _check_stages(name: str, stages: Any, kind: type[Stage]) -> tuple[Any, ...]:
    if isinstance(stages, Stage):
        stages = [stages]
    if stages is None:
        return ()
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Iterable):
        raise OptionError(f"{name}: got {type(stages).__name__}, expected a list of {kind.__name__} objects")
    out = tuple(stages)
    for i, stage in enumerate(out):
        if not isinstance(stage, kind):
            raise OptionError(
                f"{name}[{i}]: got {type(stage).__name__}, expected a {kind.__name__} (subclass "
                f"amdinfer.stages.{kind.__name__} to wrap your own function)"
            )
    return out


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise OptionError(f"{name}: got {value!r}, expected an int >= {minimum}")
    return int(value)


class Pipeline:
    """Preprocessing stages, an engine, and postprocessing stages, run as one.

    Args:
        preprocess: :class:`~amdinfer.stages.Preprocessor` objects applied to each input in order; the last
            one must produce the model input of one item (without the batch axis).
        engine: an :class:`~amdinfer.Engine`, or a model (path, bytes, ``onnx.ModelProto``) that is loaded
            with :func:`amdinfer.load` and the load options below. The model must have one input.
        postprocess: :class:`~amdinfer.stages.Postprocessor` objects applied to each item's outputs: the
            single output without its batch axis, or a ``{name: array}`` dict for several outputs.
        quantizer: handed to :func:`amdinfer.load` (an object with ``.quantize(model)``); only with a model.
        keep_image: keep on each result (:class:`~amdinfer.results.Detections`,
            :class:`~amdinfer.results.Classification`) the picture the first stage, ``LoadImage``, decoded
            (``result.image``, for ``plot()``/``save()``); the recipes turn it on. Kept by :meth:`fuse` too.
        backend: ``amdinfer.load``'s backend (``"auto"``, ``"ort"``, ``"migraphx"``, ``"reference"``); only
            with a model.
        **load_options: other :func:`amdinfer.load` arguments (``providers=``, ``precision=``,
            ``batch_buckets=``, ``shapes=``, ...); only with a model.

    Raises:
        OptionError: a stage is not a stage object, load options come with an Engine instance, or the model
            has more than one input.

    Example:
        >>> import amdinfer
        >>> from amdinfer.preprocess import Letterbox, HwcToChw, Normalize
        >>> from amdinfer.postprocess import YoloDecode, Nms, ScaleBoxes
        >>> from amdinfer.testing.models import yolov8
        >>> pipe = amdinfer.Pipeline(
        ...     preprocess=[Letterbox(160), Normalize(scale=1 / 255), HwcToChw()],
        ...     engine=yolov8(image_size=160), backend="ort", providers=["CPUExecutionProvider"],
        ...     postprocess=[YoloDecode(), Nms(), ScaleBoxes()],
        ... )
        >>> det = pipe(np.zeros((120, 200, 3), np.uint8))
        >>> det.boxes.dtype, det.image_shape
        (dtype('float32'), (120, 200))
        >>> pipe.close()
    """

    def __init__(
        self,
        *,
        preprocess: Sequence[Preprocessor] = (),
        engine: Any,
        postprocess: Sequence[Postprocessor] = (),
        quantizer: Any = None,
        backend: str = "auto",
        keep_image: bool = False,
        **load_options: Any,
    ) -> None:
        self._keep_image = check_keep(keep_image)
        self._preprocess = _check_stages("preprocess", preprocess, Preprocessor)  # type: ignore[type-abstract]
        self._postprocess = _check_stages("postprocess", postprocess, Postprocessor)  # type: ignore[type-abstract]
        if isinstance(engine, Engine):
            given = sorted(load_options) + (["quantizer"] if quantizer is not None else [])
            given += ["backend"] if backend != "auto" else []
            if given:
                raise OptionError(
                    f"{', '.join(given)}: an Engine instance was given, so load options cannot apply to it; "
                    "pass the model instead (engine='model.onnx', ...) or build the engine with amdinfer.load(...)"
                )
            self._engine = engine
            self._owns_engine = False
            self._load_options: dict[str, Any] = {}
        elif engine is None:
            raise OptionError("engine: got None, expected an amdinfer Engine or a model to load")
        else:
            from ._load import load

            self._load_options = dict(load_options)  # fuse() loads the fused model with them too
            if quantizer is not None:
                load_options["quantizer"] = quantizer
            self._engine = load(engine, backend=backend, **load_options)
            self._owns_engine = True
        self._quantizer = quantizer
        inputs = self._engine.inputs
        if len(inputs) != 1:
            if self._owns_engine:
                self._engine.close()
            raise OptionError(
                f"engine: the model has inputs {[s.name for s in inputs]}, expected exactly one "
                "(a Pipeline feeds one preprocessed array per item)"
            )
        self._input = inputs[0]
        self._output_names = [s.name for s in self._engine.outputs]

    # ------------------------------------------------------------------ properties
    @property
    def preprocess(self) -> tuple[Preprocessor, ...]:
        """The preprocessing stages, in order."""
        return self._preprocess

    @property
    def postprocess(self) -> tuple[Postprocessor, ...]:
        """The postprocessing stages, in order."""
        return self._postprocess

    @property
    def engine(self) -> Engine:
        """The engine the pipeline runs."""
        return self._engine

    @property
    def quantizer(self) -> Any:
        """The quantizer handed to :func:`amdinfer.load`, or ``None``."""
        return self._quantizer

    # ------------------------------------------------------------------ running
    def __call__(self, image: Any) -> Any:
        """Run one input (an image array, or whatever the first stage takes) and return its result.

        A pipeline that starts with :class:`~amdinfer.preprocess.LoadImage` also takes a list (of arrays, Pillow
        images, bytes, paths), a glob (``"pages/*.jpg"``) or a folder (its image files, sorted) and returns a list
        of results in order (:func:`amdinfer._sources.expand`); a glob or folder with no image is an
        :class:`~amdinfer.errors.InputError` naming it.

        Raises:
            StageError: a stage or the engine failed; the message names the stage and the item (0), and the
                original error is the ``__cause__``.

        Example:
            >>> import amdinfer
            >>> from amdinfer.preprocess import HwcToChw, Cast
            >>> from amdinfer.testing.models import tiny_cnn
            >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
            ...                          backend="ort", providers=["CPUExecutionProvider"])
            >>> pipe(np.zeros((32, 32, 3), np.uint8)).shape  # no postprocess: the output of the item
            (10,)
        """
        if takes_images(self._preprocess):
            return call(self.run_batch, image)
        return self.run_batch([image])[0]

    def run_batch(self, images: Iterable[Any]) -> list[Any]:
        """Run many inputs, one engine call per preprocessed shape, and return their results in order.

        The preprocessed items are grouped by shape and dtype (pages of different sizes, crops of different
        widths); each group is one engine call (groups in order of their first item), so items of different
        shapes never need a common canvas. A model with a dynamic batch axis (or an engine with
        ``batch_buckets``) gets a whole group at once; a model with a fixed batch size ``B`` is run in chunks
        of ``B`` (the last one padded). Every item gets the answer that ``pipe(item)`` gives it.

        Raises:
            StageError: a stage failed (naming the item's index in ``images`` and the stage) or the engine
                failed (naming the items of that engine call, e.g. a shape the model does not take).

        Example:
            >>> import amdinfer
            >>> from amdinfer.preprocess import HwcToChw, Cast
            >>> from amdinfer.testing.models import tiny_cnn
            >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
            ...                          backend="ort", providers=["CPUExecutionProvider"])
            >>> len(pipe.run_batch([np.zeros((32, 32, 3), np.uint8)] * 4))
            4
            >>> model = tiny_cnn()  # any height and width: two shapes, two engine calls
            >>> for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], "hw"): d.dim_param = name
            >>> any_size = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=model,
            ...                              backend="ort", providers=["CPUExecutionProvider"])
            >>> pages = [np.zeros((32, 32, 3), np.uint8), np.zeros((40, 24, 3), np.uint8)]
            >>> [r.shape for r in any_size.run_batch(pages)]
            [(10,), (10,)]
            >>> pipe.close(); any_size.close()
        """
        samples = [self._preprocess_one(i, item) for i, item in enumerate(images)]
        outputs: list[Sample] = [None] * len(samples)  # type: ignore[list-item]
        for group in _shape_groups(samples):
            outs = self._infer_group(group, [samples[i] for i in group])
            for i, out in zip(group, outs):
                outputs[i] = out
        return [self._postprocess_one(i, s) for i, s in enumerate(outputs)]

    def map(self, items: Iterable[Any], *, batch_size: int = 1, workers: int = 2) -> PipelineMap:
        """Run a stream of inputs, overlapping preprocessing, inference and postprocessing in threads.

        Preprocessing and postprocessing run on ``workers`` threads while one thread batches the
        preprocessed items and calls the engine; queues between them are bounded, so at most a few batches
        are in flight. Results come back in input order.

        Args:
            items: any iterable (read lazily, on a thread of its own).
            batch_size: items per engine call (the last batch may be smaller).
            workers: threads for pre- and postprocessing; ``0`` runs everything in the caller's thread, one
                batch at a time, with no overlap.

        Returns:
            A :class:`PipelineMap`: an iterator of results in input order, with ``close()`` and a context
            manager. The first failure (in input order) is raised as a :class:`StageError` naming the item's
            index and the stage, after the results of the items before it; all threads are then stopped.
            Leaving the loop early (``break``, ``close()``, garbage collection) stops them too.

        Example:
            >>> import amdinfer
            >>> from amdinfer.preprocess import HwcToChw, Cast
            >>> from amdinfer.testing.models import tiny_cnn
            >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
            ...                          backend="ort", providers=["CPUExecutionProvider"])
            >>> images = (np.full((32, 32, 3), i, np.uint8) for i in range(5))
            >>> with pipe.map(images, batch_size=2) as results:
            ...     shapes = [r.shape for r in results]
            >>> shapes
            [(10,), (10,), (10,), (10,), (10,)]
        """
        batch_size = _positive_int("batch_size", batch_size)
        workers = _positive_int("workers", workers, minimum=0)
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise OptionError(f"items: got {type(items).__name__}, expected an iterable of inputs")
        return PipelineMap(self._map_steps(), items, batch_size, workers)

    # ------------------------------------------------------------------ steps (each names what failed)
    def _map_steps(self) -> MapSteps:
        """What the streaming executor needs from this pipeline (it sees nothing else of it)."""
        return MapSteps(
            engine=self._engine,
            input_name=self._input.name,
            preprocess_one=self._preprocess_one,
            postprocess_one=self._postprocess_one,
            infer_samples=self._infer_samples,
            chunks=self._chunks,
            cut=self._cut,
            split=self._split,
        )

    def _preprocess_one(self, index: int, item: Any) -> Sample:
        sample = Sample.wrap(item)
        for k, stage in enumerate(self._preprocess):
            try:
                sample = stage(sample)
            except Exception as exc:
                raise _stage_error(index, f"preprocess[{k}] {type(stage).__name__}", exc) from exc
            if k == 0 and self._keep_image:
                remember(sample, stage)
        if not isinstance(sample.data, np.ndarray):
            exc = TypeError(f"got {type(sample.data).__name__}, expected a numpy array for the engine")  # type: ignore[misc]
            raise _stage_error(index, "preprocess (result)", exc)  # type: ignore[misc]
        return sample

    def _postprocess_one(self, index: int, sample: Sample) -> Any:
        for k, stage in enumerate(self._postprocess):
            try:
                sample = stage(sample)
            except Exception as exc:
                raise _stage_error(index, f"postprocess[{k}] {type(stage).__name__}", exc) from exc
        return attach(sample.data, sample.meta)

    def _infer_samples(self, first: int, samples: list[Sample]) -> list[Sample]:
        """Stack, run the engine, split per item; errors name the batch's items."""
        try:
            batch, metas = stack(samples)
        except Exception as exc:
            raise _stage_error(first, "stack", exc, count=len(samples)) from exc
        try:
            outputs = self._infer(batch)
        except Exception as exc:
            raise _stage_error(first, f"engine {type(self._engine).__name__}", exc, count=len(samples)) from exc
        return [Sample(out, meta) for out, meta in zip(outputs, metas)]

    def _infer_group(self, indices: list[int], samples: list[Sample]) -> list[Sample]:
        """:meth:`_infer_samples` for items of one shape that need not be neighbours in the input; an error
        names them all."""
        if indices == list(range(indices[0], indices[0] + len(indices))):
            return self._infer_samples(indices[0], samples)
        try:
            return self._infer_samples(indices[0], samples)
        except StageError as exc:
            stage = getattr(exc, "stage", "")
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            kind = StageInputError if isinstance(cause, InputError) else StageError
            err = kind(f"items {', '.join(map(str, indices))} (one batch): {stage}: {type(cause).__name__}: {cause}")
            err.index = indices[0]  # type: ignore[attr-defined]
            err.stage = stage  # type: ignore[attr-defined]
            raise err from cause

    def _infer(self, batch: np.ndarray) -> list[Any]:
        parts = []
        for chunk, size in self._chunks(batch):
            parts.append(self._cut(self._engine.run({self._input.name: chunk}), chunk, size))
        return self._split(parts, batch.shape[0])

    def _chunks(self, batch: np.ndarray) -> list[tuple[np.ndarray, int]]:
        """The engine calls for one stacked batch: ``(feed, real items)``; a fixed batch size ``B`` gives
        chunks of ``B``, the last one padded by repeating its last item."""
        n = batch.shape[0]
        fixed = self._input.shape[0] if self._input.shape else None
        if not isinstance(fixed, int) or fixed == n or self._engine.batch_buckets:
            return [(batch, n)]
        out = []
        for start in range(0, n, fixed):
            chunk = batch[start : start + fixed]
            size = chunk.shape[0]
            if size < fixed:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], fixed - size, axis=0)])
            out.append((chunk, size))
        return out

    @staticmethod
    def _cut(result: dict[str, Any], chunk: np.ndarray, size: int) -> dict[str, Any]:
        """Drop the padding rows of a padded chunk's outputs."""
        if size == chunk.shape[0]:
            return result
        return {k: v[:size] for k, v in result.items()}

    def _split(self, parts: list[dict[str, Any]], n: int) -> list[Any]:
        """Join a batch's chunk outputs, check each has the batch axis, and split them per item."""
        if len(parts) == 1:
            result = parts[0]
        else:
            result = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        for name, value in result.items():
            if getattr(value, "ndim", 0) < 1 or value.shape[0] != n:
                raise StageError(
                    f"output {name!r}: got shape {getattr(value, 'shape', None)}, expected a batch axis of {n} "
                    "(a Pipeline splits outputs per item along axis 0)"
                )
        if len(result) == 1:
            (value,) = result.values()
            return list(value)
        return [{k: v[i] for k, v in result.items()} for i in range(n)]

    # ------------------------------------------------------------------ fusing
    def fuse(
        self,
        *,
        image_size: int | tuple[int, int] | None = None,
        nms_mode: str = "auto",
        max_candidates: int = 2048,
        resize: str = "auto",
        **load_options: Any,
    ) -> Any:
        """Compile the stages into the model: one ONNX graph from uint8 ``(N, H, W, C)`` images to answers.

        See :mod:`amdinfer.fuse` for what fuses (``Letterbox``/``Resize``/``CenterCrop``, ``BgrToRgb``,
        ``Normalize``, ``HwcToChw``, ``Cast`` before the model; ``YoloDecode`` + ``Nms`` [+ ``ScaleBoxes``] or
        [``Softmax`` +] ``TopK`` after it) and how images of different sizes enter.

        Args:
            image_size: ``(height, width)`` (or one int) of every image: geometry runs in the graph,
                bit-exact with ``cv2.resize``. ``None``: geometry runs on the host (OpenCV when installed) and
                the graph starts at the canvas, with per-image ``affine``/``orig_shape`` inputs.
            nms_mode: ``"per-class"`` (exact IoUs), ``"offset"`` (Ultralytics' one-pass class offsets),
                ``"dense"`` (the whole batch's greedy NMS as tensor ops, with the ``Nms`` stage's arithmetic:
                no per-image host syncs), ``"host"`` (the graph ends at the decoded candidates; the
                pipeline's ``Nms``/``ScaleBoxes`` stages finish on the host), or ``"auto"``: on the CPU or the
                reference engine, offset when the pipeline's ``Nms`` has a ``class_offset`` (the same
                arithmetic) else per-class; on ONNX Runtime's CUDA or ROCm EP, dense (ORT's CUDA
                ``NonMaxSuppression`` syncs with the host per image and class); on MIGraphX, host (it pads
                data-dependent outputs; in-graph NMS is refused there); elsewhere offset. All modes
                give the stage-by-stage answers (offset: with the ``class_offset`` arithmetic). See
                :func:`amdinfer.fuse.fuse_model`.
            resize: in-graph ``Letterbox``/``Resize`` (with ``image_size``): ``"exact"`` (bit-exact with
                ``cv2.resize``, int32 arithmetic), ``"fast"`` (one ONNX ``Resize``, within 1 of OpenCV), or
                ``"auto"``: on ONNX Runtime's CUDA/ROCm EPs, fast for resized images of 200,000 pixels and
                more (YOLO's 1024x768: 1.5x the exact form's rate on an H200), exact below (ResNet's 256-pixel
                side, where exact is faster); exact elsewhere. See :func:`amdinfer.fuse.fuse_model`.
            max_candidates: ``nms_mode="dense"``: most candidates per image entering NMS (the IoU matrix is
                ``max_candidates**2`` per image); more are cut to the best ones, with a logged warning.
            **load_options: :func:`amdinfer.load` arguments for the fused model; by default the backend,
                providers and precision of this pipeline's engine plus the other load options the pipeline
                was built with (``device``, ``threads``, ...; not ``shapes``/``fp16_io``, which describe the
                unfused input). fp16 converts the model's own nodes only, before fusing (pre/post-processing
                stays float32); the fused engine's ``info.precision`` reads ``"fp16"``, from its weights.

        Returns:
            A :class:`~amdinfer.fuse.FusedPipeline` with ``__call__``, ``run_batch``, ``map`` and ``close``;
            it owns its engine.

        Raises:
            OptionError: a stage has no fused form, or the stages do not fit the model.

        Example:
            >>> import amdinfer
            >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
            >>> from amdinfer.postprocess import Softmax, TopK
            >>> from amdinfer.testing.models import tiny_cnn
            >>> pipe = amdinfer.Pipeline(preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
            ...                          engine=tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"],
            ...                          postprocess=[Softmax(), TopK(3)])
            >>> fused = pipe.fuse(image_size=(48, 64))
            >>> image = np.full((48, 64, 3), 7, np.uint8)
            >>> fused(image).indices.tolist() == pipe(image).indices.tolist()
            True
            >>> fused.close(); pipe.close()
        """
        from ._load import load
        from .fuse import FusedPipeline, _labels, fuse_model, split_host_stages

        size = None
        if image_size is not None:
            from .preprocess import _hw

            size = _hw("image_size", image_size)
        host, _ = split_host_stages(self._preprocess, size)
        proto = self._engine.model.proto
        if not load_options:
            proto, load_options = fused_load_options(self._engine, self._quantizer, self._load_options, proto)
        nms_mode = _auto_nms_mode(load_options, self._postprocess) if nms_mode == "auto" else nms_mode
        _check_nms_backend(load_options, nms_mode, self._postprocess)
        resize = _auto_resize(load_options) if resize == "auto" else resize
        modes: dict[str, Any] = {"nms_mode": nms_mode, "max_candidates": max_candidates, "resize": resize}
        model = fuse_model(proto, self._preprocess, self._postprocess, image_size=size, **modes)
        engine = load(model, **load_options)
        post: dict[str, Any] = {
            "labels": _labels(self._postprocess),
            "host_post": self._postprocess[1:] if nms_mode == "host" else (),
        }
        return FusedPipeline(model, engine, host, image_size=size, keep_image=self._keep_image, **post)

    # ------------------------------------------------------------------ lifecycle and display
    def close(self) -> None:
        """Close the engine if this pipeline loaded it (an Engine you passed in stays open)."""
        if self._owns_engine:
            self._engine.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        def block(name: str, stages: tuple[Stage, ...]) -> list[str]:
            if not stages:
                return [f"    {name}=[],"]
            return [f"    {name}=["] + [f"        {s!r}," for s in stages] + ["    ],"]

        lines = ["Pipeline("]
        lines += block("preprocess", self._preprocess)
        lines.append(f"    engine={self._engine!r},")
        if self._quantizer is not None:
            lines.append(f"    quantizer={self._quantizer!r},")
        lines += block("postprocess", self._postprocess)
        lines.append(")")
        return "\n".join(lines)


_ORDERS = ("shape", "aspect")


class SubPipeline(Postprocessor):
    """A cascade step: fan one item out into pieces, run another pipeline on them in batches, gather back.

    The :class:`~amdinfer.stages.FanOut` stage splits the item (e.g. crops a page's text lines); each piece runs
    through ``pipeline``'s preprocessing, then the pieces are batched for its engine and postprocessed, and the
    :class:`~amdinfer.stages.Gather` puts the answers, in piece order, back onto the item. Used as a
    postprocessing stage of the outer :class:`Pipeline`, it runs wherever that pipeline's postprocessing runs
    (``__call__``, ``run_batch``, ``map``'s worker threads, the server), so the outer engine (e.g. the next
    page's detector) overlaps with this step in ``map``.

    Batching is bucketed by shape, so pieces of different sizes never need a common canvas:

    * ``order="shape"``: pieces are preprocessed, grouped by their shape, and each group runs in engine calls
      of up to ``batch_size``.
    * ``order="aspect"``: pieces are sorted by width/height (as PaddleOCR and RapidOCR sort text lines), cut
      into batches of ``batch_size``, and each piece's metadata gets ``"batch_aspect"``, its batch's widest
      ratio, before preprocessing (:class:`~amdinfer.text.TextResize` pads every line of a batch to it).

    Args:
        pipeline: the :class:`Pipeline` run on the pieces (it stays yours: close it yourself).
        fan_out: the :class:`~amdinfer.stages.FanOut` stage.
        gather: the :class:`~amdinfer.stages.Gather`.
        batch_size: most pieces per engine call.
        order: ``"shape"`` or ``"aspect"`` (see above).

    Raises:
        OptionError: bad arguments.
        StageError: (when called) a piece failed; the message names the piece and the inner stage (an
            :class:`~amdinfer.errors.StageInputError` when the cause is bad input).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.preprocess import LoadImage, Letterbox, Resize, Normalize, HwcToChw
        >>> from amdinfer.postprocess import YoloDecode, Nms, ScaleBoxes, Softmax, TopK
        >>> from amdinfer.stages import BoxCrop, Relabel
        >>> from amdinfer.testing.models import tiny_cnn, yolov8
        >>> cpu = {"backend": "ort", "providers": ["CPUExecutionProvider"]}
        >>> classify = amdinfer.Pipeline(preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
        ...                              engine=tiny_cnn(), postprocess=[Softmax(), TopK(1)], **cpu)
        >>> detect = amdinfer.Pipeline(
        ...     preprocess=[LoadImage(), Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
        ...     engine=yolov8(image_size=64, num_classes=2), keep_image=True, **cpu,
        ...     postprocess=[YoloDecode(conf_threshold=0.0), Nms(max_det=3), ScaleBoxes(),
        ...                  SubPipeline(classify, fan_out=BoxCrop(), gather=Relabel(), batch_size=4)])
        >>> det = detect(np.random.default_rng(0).integers(0, 255, (48, 80, 3), dtype=np.uint8))
        >>> len(det) <= 3 and all(0 <= c < 10 for c in det.classes)
        True
        >>> detect.close(); classify.close()
    """

    def __init__(
        self, pipeline: Pipeline, *, fan_out: FanOut, gather: Gather, batch_size: int = 8, order: str = "shape"
    ) -> None:
        if not isinstance(pipeline, Pipeline):
            raise OptionError(f"pipeline: got {type(pipeline).__name__}, expected an amdinfer.Pipeline")
        if not isinstance(fan_out, FanOut):
            raise OptionError(f"fan_out: got {type(fan_out).__name__}, expected an amdinfer.stages.FanOut")
        if not isinstance(gather, Gather):
            raise OptionError(f"gather: got {type(gather).__name__}, expected an amdinfer.stages.Gather")
        if order not in _ORDERS:
            raise OptionError(f"order: got {order!r}, expected one of {list(_ORDERS)}")
        self.pipeline = pipeline
        self.fan_out = fan_out
        self.gather = gather
        self.batch_size = _positive_int("batch_size", batch_size)
        self.order = order

    def __repr__(self) -> str:
        inner = type(self.pipeline.engine).__name__
        return (
            f"SubPipeline({inner}, fan_out={self.fan_out!r}, gather={self.gather!r}, "
            f"batch_size={self.batch_size}, order={self.order!r})"
        )

    def process(self, data: Any, meta: dict[str, Any]) -> Any:
        split = self.fan_out(Sample(data, meta))
        meta.update(split.meta)
        pieces = split.data
        results = self.run_pieces(pieces.items)
        return self.gather.gather(pieces.parent, results, pieces.items, meta)

    def run_pieces(self, items: list[Sample]) -> list[Any]:
        """Run the inner pipeline on ``items`` (samples) with this step's batching; answers in order.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
            >>> from amdinfer.stages import BoxCrop, Relabel, Sample
            >>> from amdinfer.testing.models import tiny_cnn
            >>> inner = amdinfer.Pipeline(preprocess=[Resize((32, 32)), Normalize(), HwcToChw()], engine=tiny_cnn(),
            ...                           backend="ort", providers=["CPUExecutionProvider"])
            >>> step = SubPipeline(inner, fan_out=BoxCrop(), gather=Relabel(), batch_size=2)
            >>> [r.shape for r in step.run_pieces([Sample(np.zeros((8, 9 + i, 3), np.uint8)) for i in range(3)])]
            [(10,), (10,), (10,)]
            >>> inner.close()
        """
        sub = self.pipeline
        n = len(items)
        if not n:
            return []
        order = list(range(n))
        batches: list[list[int]]
        if self.order == "aspect":
            ratios = []
            for i, s in enumerate(items):
                shape = getattr(s.data, "shape", None)
                if shape is None or len(shape) < 2 or not shape[0] or not shape[1]:
                    raise StageInputError(f"piece {i}: got {_describe(s.data)}, expected an (H, W[, C]) image")
                ratios.append(shape[1] / float(shape[0]))
            # np.argsort's default sort, as PaddleOCR/RapidOCR order their text lines (ties included)
            order = [int(i) for i in np.argsort(np.array(ratios))]
            batches = [order[k : k + self.batch_size] for k in range(0, n, self.batch_size)]
            items = [Sample(s.data, dict(s.meta)) for s in items]
            for batch in batches:
                widest = max(ratios[i] for i in batch)
                for i in batch:
                    items[i].meta["batch_aspect"] = widest
        prepared: list[Sample] = [None] * n  # type: ignore[list-item]
        for i in order:
            prepared[i] = self._step(i, lambda i=i: sub._preprocess_one(i, items[i]))
        if self.order == "shape":
            groups: dict[Any, list[int]] = {}
            for i in order:
                groups.setdefault((prepared[i].data.shape, prepared[i].data.dtype.str), []).append(i)
            batches = [g[k : k + self.batch_size] for g in groups.values() for k in range(0, len(g), self.batch_size)]
        engine_calls: list[list[int]] = []
        for batch in batches:  # a batch of one aspect group still splits by shape if its stages differ
            by_shape: dict[Any, list[int]] = {}
            for i in batch:
                by_shape.setdefault((prepared[i].data.shape, prepared[i].data.dtype.str), []).append(i)
            engine_calls.extend(by_shape.values())
        results: list[Any] = [None] * n
        for group in engine_calls:
            outs = self._step(group[0], lambda g=group: sub._infer_samples(g[0], [prepared[i] for i in g]))
            for i, out in zip(group, outs):
                results[i] = self._step(i, lambda i=i, out=out: sub._postprocess_one(i, out))
        return results

    @staticmethod
    def _step(index: int, fn: Any) -> Any:
        """Run one inner step; a failure becomes an error naming the piece (not the outer item, whose index
        the outer pipeline adds)."""
        try:
            return fn()
        except Exception as exc:
            cause = exc.__cause__ if isinstance(exc, StageError) and exc.__cause__ is not None else exc
            stage = getattr(exc, "stage", None)
            where = f"piece {index}: {stage}: " if stage else f"piece {index}: "
            kind = StageInputError if isinstance(cause, InputError) else StageError
            raise kind(f"{where}{type(cause).__name__}: {cause}") from cause


def _shape_groups(samples: list[Sample]) -> list[list[int]]:
    """The indices of ``samples`` grouped by their data's shape and dtype, groups in order of first item."""
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault((s.data.shape, s.data.dtype.str), []).append(i)
    return list(groups.values())


def _describe(value: Any) -> str:
    return f"array of shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
