"""The YOLO recipe's tasks beyond boxes: which task a model answers, and the post-processing of segmentation and
pose models (:mod:`amdinfer.tasks`), host-side (``fuse`` does not compile masks or keypoints into the graph)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..model import ModelLike, ModelSource
from ..results import Detections
from ..stages import Postprocessor

__all__ = ["BoxesOnly", "resolve_task", "task_postprocess"]


def resolve_task(
    model: ModelLike, task: Any, fuse: Any, retina_masks: Any, tiles: Any = None
) -> tuple[ModelSource, dict[str, Any], Any]:
    """``model`` read once, what the post-processing needs (its task: :func:`amdinfer.tasks.detect_task`, and
    ``retina_masks``), and the ``fuse`` to use: a segmentation or pose model runs its post-processing stage by stage
    (``fuse="auto"`` becomes ``False``; ``True`` is refused), and not sliced (``tiles`` is refused: the tile merge
    keeps boxes, and would drop the masks and keypoints)."""
    from ..tasks import detect_task

    source = model if isinstance(model, ModelSource) else ModelSource.from_any(model)
    name = detect_task(source.proto, task)
    if not isinstance(retina_masks, (bool, np.bool_)):
        raise OptionError(f"retina_masks: got {retina_masks!r}, expected True or False")
    post = {"task": name, "retina_masks": bool(retina_masks), "heads": _heads(source.proto, name)}
    if name == "detect" and post["heads"] == "detect":
        return source, post, fuse
    if name == "detect":  # the boxes of a segmentation or pose model: its own decoder, on the host
        if fuse is True:
            raise OptionError(
                f"fuse: got True with task='detect' on a {post['heads']} model (outputs "
                f"{[o.name for o in source.proto.graph.output]}), expected 'auto' or False: its boxes are decoded "
                f"on the host by the {post['heads']} decoder, without the mask coefficients or keypoints"
            )
        return source, post, False if isinstance(fuse, str) and fuse == "auto" else fuse
    if tiles is not None:
        raise OptionError(
            f"tiles: got {tiles!r} for a {name} model, expected None: sliced inference merges boxes only, and would "
            "drop the masks and keypoints (task='detect' slices its boxes)"
        )
    if fuse is True:
        raise OptionError(
            f"fuse: got True for a {name} model, expected 'auto' or False: masks and keypoints are made on the host "
            "(docs/pipeline.md#instance-segmentation)"
        )
    return source, post, False if isinstance(fuse, str) and fuse == "auto" else fuse


def _heads(proto: Any, task: str) -> str:
    """The task the model's outputs answer (``task`` unless it is ``"detect"``: then what ``"auto"`` reads, so
    that ``task="detect"`` on a segmentation or pose model decodes its boxes past the mask coefficients or
    keypoints; a model whose metadata names a task amdinfer does not build reads as ``"detect"``, as before)."""
    from ..errors import ModelError
    from ..tasks import detect_task

    if task != "detect":
        return task
    try:
        return detect_task(proto, "auto")
    except ModelError:
        return "detect"


class BoxesOnly(Postprocessor):
    """The boxes, scores, classes and labels of :class:`~amdinfer.results.Detections`, without the mask
    coefficients or keypoints a task's decoder attached (``amdinfer.yolo(model, task="detect")`` on a
    segmentation or pose model: the boxes go through ``Nms`` and ``ScaleBoxes`` as a detector's do).

    Example:
        >>> from amdinfer.results import Detections
        >>> det = Detections([[0, 0, 4, 4]], [0.9], [0], coefficients=[[1.0, 2.0]])
        >>> out = BoxesOnly()(det).data
        >>> out.boxes.tolist(), out.coefficients, out.keypoints
        ([[0.0, 0.0, 4.0, 4.0]], None, None)
    """

    output_type = Detections
    output_description = "a Detections"

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        if not isinstance(data, Detections):
            raise InputError(f"BoxesOnly: got {type(data).__name__}, expected Detections (put a decoder first)")
        return Detections(data.boxes, data.scores, data.classes, data.labels, data.image_shape, image=data.image)


def task_postprocess(post: dict[str, Any], proto: Any, conf: float, nms: Any, names: Any) -> list[Any]:
    """The post-processing stages of ``post["task"]`` (``segment`` or ``pose``) around the recipe's ``nms`` stage;
    ``detect`` on a model whose outputs are a segmentation's or a pose's (``post["heads"]``): that task's decoder,
    the boxes alone (:class:`BoxesOnly`), ``nms`` and ``ScaleBoxes``."""
    from ..postprocess import ScaleBoxes
    from ..tasks import PoseDecode, ScaleKeypoints, SegmentDecode, SegmentMasks, kpt_shape

    decode: Postprocessor
    if post["heads"] == "segment":
        decode = SegmentDecode(conf, labels=names)
    else:
        decode = PoseDecode(kpt_shape(proto) or (17, 3), conf, labels=names)
    if post["task"] == "detect":
        return [decode, BoxesOnly(), nms, ScaleBoxes()]
    if post["task"] == "segment":
        return [decode, nms, SegmentMasks(retina_masks=post["retina_masks"])]
    return [decode, nms, ScaleKeypoints()]
