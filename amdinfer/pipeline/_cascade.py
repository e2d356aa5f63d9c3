"""``SubPipeline``: a cascade step that runs another pipeline on the pieces of an item, batched by shape.

Re-exported as :class:`amdinfer.pipeline.SubPipeline`; see its docstring.

Example:
    >>> from amdinfer.pipeline import SubPipeline as Public
    >>> Public is SubPipeline
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError, OptionError, StageError, StageInputError
from ..stages import FanOut, Gather, Postprocessor, Sample
from ._executor import ByShape
from ._steps import PipelineSteps, _positive_int

__all__ = ["SubPipeline"]

_ORDERS = ("shape", "aspect")


class SubPipeline(Postprocessor):
    """A cascade step: fan one item out into pieces, run another pipeline on them in batches, gather back.

    The :class:`~amdinfer.stages.FanOut` stage splits the item (e.g. crops a page's text lines); each piece runs
    through ``pipeline``'s preprocessing, then the pieces are batched for its engine and postprocessed, and the
    :class:`~amdinfer.stages.Gather` puts the answers, in piece order, back onto the item. Used as a
    postprocessing stage of the outer :class:`~amdinfer.Pipeline`, it runs wherever that pipeline's postprocessing runs
    (``__call__``, ``run_batch``, ``map``'s worker threads, the server), so the outer engine (e.g. the next
    page's detector) overlaps with this step in ``map``.

    Batching is bucketed by shape, so pieces of different sizes never need a common canvas:

    * ``order="shape"``: pieces are preprocessed, grouped by their shape, and each group runs in engine calls
      of up to ``batch_size``.
    * ``order="aspect"``: pieces are sorted by width/height (as PaddleOCR and RapidOCR sort text lines), cut
      into batches of ``batch_size``, and each piece's metadata gets ``"batch_aspect"``, its batch's widest
      ratio, before preprocessing (:class:`~amdinfer.text.TextResize` pads every line of a batch to it).

    Args:
        pipeline: the :class:`~amdinfer.Pipeline` run on the pieces (it stays yours: close it yourself).
        fan_out: the :class:`~amdinfer.stages.FanOut` stage.
        gather: the :class:`~amdinfer.stages.Gather`.
        batch_size: most pieces per engine call.
        order: ``"shape"`` or ``"aspect"`` (see above).
        pad_batch: pad every engine call to ``batch_size`` rows (the last piece repeated, its extra answers
            dropped), so that a GPU engine meets one batch size (:func:`~amdinfer.text.ocr`'s ``shape_buckets``).

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
        self,
        pipeline: PipelineSteps,
        *,
        fan_out: FanOut,
        gather: Gather,
        batch_size: int = 8,
        order: str = "shape",
        pad_batch: bool = False,
    ) -> None:
        if not isinstance(pipeline, PipelineSteps):
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
        if not isinstance(pad_batch, bool):
            raise OptionError(f"pad_batch: got {pad_batch!r}, expected True or False")
        self.pad_batch = pad_batch

    def __repr__(self) -> str:
        inner = type(self.pipeline._engine).__name__
        return (
            f"SubPipeline({inner}, fan_out={self.fan_out!r}, gather={self.gather!r}, "
            f"batch_size={self.batch_size}, order={self.order!r}, pad_batch={self.pad_batch})"
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
        n = len(items)
        if not n:
            return []
        order = list(range(n))
        tags: list[int] | None = None
        if self.order == "aspect":
            ratios = []
            for i, s in enumerate(items):
                shape = getattr(s.data, "shape", None)
                if shape is None or len(shape) < 2 or not shape[0] or not shape[1]:
                    raise StageInputError(f"piece {i}: got {_describe(s.data)}, expected an (H, W[, C]) image")
                ratios.append(shape[1] / float(shape[0]))
            # np.argsort's default sort, as PaddleOCR/RapidOCR order their text lines (ties included)
            order = [int(i) for i in np.argsort(np.array(ratios))]
            tags = [k // self.batch_size for k in range(n)]  # batches of the sorted order
            items = [Sample(s.data, dict(s.meta)) for s in items]
            for k in range(0, n, self.batch_size):
                batch = order[k : k + self.batch_size]
                widest = max(ratios[i] for i in batch)
                for i in batch:
                    items[i].meta["batch_aspect"] = widest
        # the pieces in their batching order: one engine call per (aspect batch and) shape, of batch_size at most
        group = ByShape(size=self.batch_size, pad_to=self.batch_size if self.pad_batch else 0, tags=tags)
        try:
            got = self.pipeline._run_items([items[i] for i in order], group)
        except StageError as exc:
            raise self._piece_error(exc, order) from exc.__cause__
        results: list[Any] = [None] * n
        for k, i in enumerate(order):
            results[i] = got[k]
        return results

    @staticmethod
    def _piece_error(exc: StageError, order: list[int]) -> StageError:
        """The inner pipeline's error, naming the piece (its place in the fan-out, not in the batching order; the
        outer pipeline adds the outer item's index)."""
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        stage = getattr(exc, "stage", None)
        index = getattr(exc, "index", None)
        piece = order[index] if isinstance(index, int) and 0 <= index < len(order) else index
        where = f"piece {piece}: {stage}: " if stage else f"piece {piece}: "
        kind = StageInputError if isinstance(cause, InputError) else StageError
        return kind(f"{where}{type(cause).__name__}: {cause}")


def _describe(value: Any) -> str:
    return f"array of shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
