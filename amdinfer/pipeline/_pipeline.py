"""The ``Pipeline`` class: its construction, the stage checks, and the choice of the fused form."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from ..engines._checks import tensors_only
from ..engines.base import Engine
from ..errors import ModelError, OptionError
from ..preprocess import _hw
from ..stages import Postprocessor, Preprocessor, Stage
from ._auto import hint_fixed
from ._executor import ByShape
from ._map import PipelineMap, map_options
from ._source_images import call, check_keep, takes_images
from ._steps import PipelineSteps
from .fuse._options import _auto_nms_mode, _auto_resize, _check_nms_backend, fused_load_options

__all__ = ["Pipeline"]

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


class Pipeline(PipelineSteps):
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
        >>> import numpy as np, amdinfer
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
            from .._load import load

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
        try:  # the executor stacks items into one batch and splits outputs by rows: tensors only
            tensors_only(inputs, self._engine.outputs, "a Pipeline (it stacks and splits tensors by rows)")
        except ModelError:
            if self._owns_engine:
                self._engine.close()
            raise
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
        of results in order (:func:`amdinfer.pipeline._sources.expand`); a glob or folder with no image is an
        :class:`~amdinfer.errors.InputError` naming it.

        Raises:
            StageError: a stage or the engine failed; the message names the stage and the item (0), and the
                original error is the ``__cause__``.

        Example:
            >>> import numpy as np, amdinfer
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

        The items run through the pipeline's executor: with the engine on the CPU (and for a short list) in the
        caller's thread, with no thread at all; on an accelerator a list of two automatic batches or more runs as
        such batches streamed through the executor's ``map`` (:func:`~amdinfer.pipeline._auto.split_size`), so
        that placing one overlaps the engine on the last; a shorter list is one call. Each item is
        preprocessed, the items (of each sub-batch) are grouped by shape and dtype (pages of
        different sizes, crops of different widths) and each group is stacked into one buffer for one engine call
        (groups in order of their first item), so items of different shapes never need a common canvas. A model
        with a dynamic batch axis gets a whole group at once; an engine with ``batch_buckets`` gets it padded to
        its bucket, a model with a fixed batch size ``B`` in chunks of ``B`` (the buffer padded to a multiple of
        ``B``; the padding rows are copies of the last item, their answers dropped). Every item gets the answer
        that ``pipe(item)`` gives it, and the first failing item's error is raised, on either path.

        Raises:
            StageError: a stage failed (naming the item's index in ``images`` and the stage) or the engine
                failed (naming the items of that engine call, e.g. a shape the model does not take).

        Example:
            >>> import numpy as np, amdinfer
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
        return self._run_call(images, ByShape(size=self._call_size()))

    def map(
        self, items: Iterable[Any], *, batch_size: int | str | None = "auto", workers: int | None = None
    ) -> PipelineMap:
        """Run a stream of inputs, overlapping preprocessing, inference and postprocessing in threads.

        Runs on the pipeline's executor (docs/pipeline.md, "The executor"): ``workers`` threads preprocess items,
        each written into its slot of a batch buffer, and postprocess results, while a thread of its own reads the
        input and streams the batches to ``engine.run_many``; at most a few batches are in flight. Results come
        back in input order. A batch is ``batch_size`` consecutive items of one preprocessed shape (an embedding
        pipeline groups a window of texts by length bucket instead).

        Args:
            items: any iterable (read lazily, on the engine thread).
            batch_size: items per engine call (the last batch may be smaller); ``"auto"`` (or ``None``): the size
                chosen for the device (:func:`~amdinfer.pipeline._auto.auto_batch_size`: 1 on the CPU; on an
                accelerator the engine's largest batch bucket, else 64; a fixed-batch model's ``B``), recorded in
                ``engine.info.settings["map_batch_size"]`` (an :class:`~amdinfer.text.EmbedPipeline`: its own
                ``batch_size``). An automatic size above 1 for a model whose dims after the batch axis are open
                groups each window of that many items by shape (pages of different sizes never share a call).
            workers: threads for pre- and postprocessing; ``0`` runs everything in the caller's thread, one
                batch at a time, with no thread at all; ``None``: the cores this process may use.

        Returns:
            A :class:`PipelineMap`: an iterator of results in input order, with ``close()`` and a context
            manager. The first failure (in input order) is raised as a :class:`StageError` naming the item's
            index and the stage, after the results of the items before it; all threads are then stopped.
            Leaving the loop early (``break``, ``close()``, garbage collection) stops them too.

        Example:
            >>> import numpy as np, amdinfer
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
        size, workers = map_options(items, batch_size, workers)
        auto = size is None
        size = size or self._default_batch_size()
        if not auto:
            hint_fixed(self._engine.info, self._fixed_batch())
        group = self._map_group(size)
        if group is None and auto and size > 1 and self._items_may_differ():
            group = ByShape(size=size)  # batch 1 took any shapes; so must the automatic batch
        window = size * self._map_window if group is not None else size
        return PipelineMap(self._executor.map(items, window, group=group, workers=workers))

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

        See :mod:`amdinfer.pipeline.fuse` for what fuses (``Letterbox``/``Resize``/``CenterCrop``, ``BgrToRgb``,
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
                :func:`amdinfer.pipeline.fuse.fuse_model`.
            resize: in-graph ``Letterbox``/``Resize`` (with ``image_size``): ``"exact"`` (bit-exact with
                ``cv2.resize``, int32 arithmetic), ``"fast"`` (one ONNX ``Resize``, within 1 of OpenCV), or
                ``"auto"``: on ONNX Runtime's CUDA/ROCm EPs, fast for resized images of 200,000 pixels and
                more (YOLO's 1024x768: 1.5x the exact form's rate on an H200), exact below (ResNet's 256-pixel
                side, where exact is faster); exact elsewhere. See :func:`amdinfer.pipeline.fuse.fuse_model`.
            max_candidates: ``nms_mode="dense"``: most candidates per image entering NMS (the IoU matrix is
                ``max_candidates**2`` per image); more are cut to the best ones, with a logged warning.
            **load_options: :func:`amdinfer.load` arguments for the fused model; by default the backend,
                providers and precision of this pipeline's engine plus the other load options the pipeline
                was built with (``device``, ``threads``, ...; not ``shapes``/``fp16_io``, which describe the
                unfused input). fp16 converts the model's own nodes only, before fusing (pre/post-processing
                stays float32); the fused engine's ``info.precision`` reads ``"fp16"``, from its weights.

        Returns:
            A :class:`~amdinfer.pipeline.fuse.FusedPipeline` with ``__call__``, ``run_batch``, ``map`` and ``close``;
            it owns its engine.

        Raises:
            OptionError: a stage has no fused form, or the stages do not fit the model.

        Example:
            >>> import numpy as np, amdinfer
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
        from .._load import load
        from .fuse import FusedPipeline, _labels, fuse_model, split_host_stages
        from .fuse._graph import fix_canvas, host_canvas

        size = None if image_size is None else _hw("image_size", image_size)
        host, _ = split_host_stages(self._preprocess, size)
        proto = self._engine.model.proto
        if not load_options:
            proto, load_options = fused_load_options(self._engine, self._quantizer, self._load_options, proto)
        nms_mode = _auto_nms_mode(load_options, self._postprocess) if nms_mode == "auto" else nms_mode
        _check_nms_backend(load_options, nms_mode, self._postprocess)
        resize = _auto_resize(load_options) if resize == "auto" else resize
        modes: dict[str, Any] = {"nms_mode": nms_mode, "max_candidates": max_candidates, "resize": resize}
        model = fuse_model(proto, self._preprocess, self._postprocess, image_size=size, **modes)
        model = fix_canvas(model, canvas) if size is None and (canvas := host_canvas(host)) else model  # one canvas
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
