"""The picture a result answers, and the many-images forms of ``__call__``, for image pipelines.

A pipeline whose first stage is :class:`~amdinfer.preprocess.LoadImage` (every recipe's, and any
:class:`~amdinfer.Pipeline` built so) answers lists, globs and folders in ``__call__``
(:func:`amdinfer.pipeline._sources.expand`), and with ``keep_image=True`` (the recipes' default) keeps on each
:class:`~amdinfer.results.Detections` / :class:`~amdinfer.results.Classification` the picture it answers
(``result.image``): what ``LoadImage`` decoded from a path, bytes or a Pillow image, or the array the caller passed
(no copy); a BGR pipeline keeps its RGB view. The picture travels in the sample's metadata (key
``"source_image"``) through every way of running (``__call__``, ``run_batch``, ``map``, both forms).

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import yolov8
    >>> det = amdinfer.yolo(yolov8(image_size=64, num_classes=2), providers=["CPUExecutionProvider"])
    >>> image = np.zeros((48, 80, 3), np.uint8)
    >>> det(image).image is image, [r.image_shape for r in det([image, image[:40]])]
    (True, [(48, 80), (40, 80)])
    >>> det.close()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import OptionError
from ..preprocess import LoadImage
from ..results import Classification, Detections
from ..results._base import _image
from ..stages import Preprocessor, Sample, _stage_error
from ._sources import expand

__all__ = ["KEY", "attach", "call", "check_keep", "preprocess", "remember", "takes_images"]

KEY = "source_image"


def check_keep(value: Any) -> bool:
    """``keep_image=``: a bool, else an :class:`~amdinfer.errors.OptionError`."""
    if not isinstance(value, bool):
        raise OptionError(f"keep_image: got {value!r}, expected True or False")
    return value


def takes_images(stages: Sequence[Preprocessor]) -> bool:
    """Whether a pipeline of ``stages`` starts by decoding images (so its ``__call__`` expands lists)."""
    return bool(stages) and isinstance(stages[0], LoadImage)


def call(run_batch: Callable[[list[Any]], list[Any]], source: Any) -> Any:
    """One result for one image; a list of results, in order, for a list, a glob or a folder."""
    items, many = expand(source)
    if many:
        return run_batch(items) if items else []
    return run_batch(items)[0]


def remember(sample: Sample, stage: Preprocessor) -> None:
    """After the first stage: when it is ``LoadImage`` (colour), keep its picture (RGB) in ``sample``'s metadata."""
    if isinstance(stage, LoadImage) and stage.mode != "L":
        sample.meta[KEY] = sample.data[..., ::-1] if stage.mode == "BGR" else sample.data


def preprocess(index: int, sample: Sample, stages: Sequence[Preprocessor], *, keep_image: bool) -> Sample:
    """Item ``index`` through the host ``stages`` in order; a failing stage becomes a ``StageError`` naming the
    item and ``preprocess[k]``, and the first stage's picture is kept when ``keep_image``."""
    for k, stage in enumerate(stages):
        try:
            sample = stage(sample)
        except Exception as exc:
            raise _stage_error(index, f"preprocess[{k}] {type(stage).__name__}", exc) from exc
        if k == 0 and keep_image:
            remember(sample, stage)
    return sample


def attach(result: Any, meta: dict[str, Any]) -> Any:
    """``result`` with the kept picture of ``meta`` set on it (Detections and Classification only)."""
    image = meta.get(KEY)
    if image is not None and isinstance(result, Detections):
        result.image = _image(image, result.image_shape, "Detections")
    elif image is not None and isinstance(result, Classification):
        result.image = _image(image, None, "Classification")
    return result
