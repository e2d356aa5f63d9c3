"""The YOLO recipe's tasks beyond boxes: which task a model answers, and the post-processing of segmentation and
pose models (:mod:`amdinfer.tasks`), host-side (``fuse`` does not compile masks or keypoints into the graph)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import OptionError
from ..model import ModelLike, ModelSource

__all__ = ["resolve_task", "task_postprocess"]


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
    post = {"task": name, "retina_masks": bool(retina_masks)}
    if name == "detect":
        return source, post, fuse
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


def task_postprocess(task: str, proto: Any, conf: float, nms: Any, names: Any, retina_masks: bool) -> list[Any]:
    """The post-processing stages of ``task`` (``segment`` or ``pose``) around the recipe's ``nms`` stage."""
    from ..tasks import PoseDecode, ScaleKeypoints, SegmentDecode, SegmentMasks, kpt_shape

    if task == "segment":
        return [SegmentDecode(conf, labels=names), nms, SegmentMasks(retina_masks=retina_masks)]
    return [PoseDecode(kpt_shape(proto) or (17, 3), conf, labels=names), nms, ScaleKeypoints()]
