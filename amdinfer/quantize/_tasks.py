"""Task metrics: a precision change judged in the model's own metric, against the float model's answers.

One small seam serves :func:`~amdinfer.quantize.evaluate`, the int8 accuracy guard, :class:`AutoMixedPrecision`
and anything that reads a budget such as ``"map50>=0.98"``: a :class:`TaskMetric` turns raw outputs into
answers (:meth:`TaskMetric.answers`), computes named metrics of the quantized answers with the float model's
answers as the truth (:meth:`TaskMetric.compute`), and judges them against :class:`Bound`\\ s
(:meth:`TaskMetric.judge`) into a :class:`TaskVerdict`: ``PASS``, ``FAIL`` or ``NOT JUDGED``.

============  ==========================================================================  ====================
task          metrics (float answers are the truth)                                        not judged below
============  ==========================================================================  ====================
``detect``    ``map50`` (COCO AP at IoU 0.5), ``f1``, ``precision``, ``recall``             8 images, 20 boxes
``classify``  ``top1`` (same top class), ``top5`` (float top class in the quantized top 5)  8 items
``ocr``       ``cer`` (character error rate), ``lines`` (lines read identically)            8 items, 20 lines
``embed``     ``cosine`` (mean row cosine), ``retrieval_top1`` (same nearest neighbour)     8 items
``generic``   ``cosine``, ``rms``: each output, or each channel group of one, on its scale   8 items
============  ==========================================================================  ====================

A detector or OCR model that gives far fewer answers than the float model (fewer than half, once the float
model gave at least :data:`COLLAPSE_MIN` answers) is a ``FAIL`` whatever else it measures, even on too few
items for a verdict: 0 boxes where the float model found 9 is a failure, not a lack of evidence.

Example:
    >>> import numpy as np
    >>> float_boxes = [np.array([[0, 0, 10, 10, 0.9, 1]])] * 10    # 10 images, 1 box each (x1 y1 x2 y2 score class)
    >>> verdict = DetectTask().judge([np.zeros((0, 6))] * 10, float_boxes, precision="int8")
    >>> verdict.verdict, verdict.metrics["recall"], verdict.reasons[0]
    ('FAIL', 0.0, 'collapsed: 0 boxes where the float model gave 10 (fewer than half)')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .._support._recipes import get_recipe
from ..errors import OptionError
from ._task_base import (
    COLLAPSE_MIN,
    FAIL,
    METRICS,
    NOT_JUDGED,
    PASS,
    TASKS,
    Bound,
    TaskMetric,
    TaskVerdict,
    _float_outputs,
)
from ._task_detect import DetectTask, average_precision50, box_agreement
from ._task_kinds import (
    ClassifyTask,
    EmbedTask,
    GenericTask,
    GroupError,
    OcrTask,
    character_error_rate,
    group_errors,
    group_views,
    scale_groups,
)

__all__ = [
    "COLLAPSE_MIN",
    "FAIL",
    "METRICS",
    "NOT_JUDGED",
    "PASS",
    "TASKS",
    "Bound",
    "ClassifyTask",
    "DetectTask",
    "EmbedTask",
    "GenericTask",
    "GroupError",
    "OcrTask",
    "TaskMetric",
    "TaskVerdict",
    "METRIC_TASKS",
    "average_precision50",
    "box_agreement",
    "character_error_rate",
    "group_errors",
    "group_views",
    "make_task",
    "metric_error",
    "scale_groups",
    "task_from_model",
]


_TASK_CLASSES: dict[str, type[TaskMetric]] = {
    "detect": DetectTask,
    "classify": ClassifyTask,
    "ocr": OcrTask,
    "embed": EmbedTask,
    "generic": GenericTask,
}
#: Ultralytics' ``task`` metadata -> the task that judges it (segment, pose and obb heads carry more than
#: boxes in their first output: they are judged as tensors until they have a metric of their own).
_ULTRALYTICS = {"detect": "detect", "classify": "classify"}


def make_task(task: str | TaskMetric, **options: Any) -> TaskMetric:
    """The :class:`TaskMetric` of a task name (``options`` go to its constructor), or ``task`` itself.

    Example:
        >>> make_task("detect", iou=0.6)
        DetectTask(iou=0.6)
    """
    if isinstance(task, TaskMetric):
        if options:
            raise OptionError(f"task: got a TaskMetric ({task!r}) together with {sorted(options)}; pass one")
        return task
    if task not in _TASK_CLASSES:
        raise OptionError(f"task: got {task!r}, expected one of {['auto', *TASKS]} or a TaskMetric")
    return _TASK_CLASSES[task](**options)


def _input_hw(feeds: Sequence[Mapping[str, np.ndarray]]) -> tuple[int, int] | None:
    for v in feeds[0].values() if feeds else ():
        a = np.asarray(v)
        if a.ndim == 4 and a.dtype.kind == "f":
            return int(a.shape[2]), int(a.shape[3])
    return None


def task_from_model(
    proto: onnx.ModelProto | None,
    outputs: Sequence[Mapping[str, np.ndarray]] = (),
    feeds: Sequence[Mapping[str, np.ndarray]] = (),
    *,
    recipe: str | None = None,
) -> tuple[str, str]:
    """The task a model's answers are judged in, and why: ``(task, reason)``.

    In order: the recipe that built the pipeline (``yolo`` -> detect, ...); Ultralytics' ``task`` metadata
    (``detect``, ``classify``); the first output's layout: a YOLO head (v8/v11 ``(N, 4 + nc, A)`` or v5
    ``(N, 3A, 5 + nc)`` with ``A`` the anchors of the input size at strides 8/16/32); one 2-D float output
    of several columns -> classify; else generic. Embedding and OCR models are named (``task="embed"``).

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> out = [{"output0": np.zeros((1, 6, 84), np.float32)}]
        >>> task_from_model(None, out, [{"images": np.zeros((1, 3, 64, 64), np.float32)}])
        ('detect', 'output0 is a YOLO v8 head (1, 6, 84)')
    """
    if recipe is not None:
        return get_recipe(recipe).task, f"the {recipe} recipe"
    meta = {p.key: p.value for p in proto.metadata_props} if proto is not None else {}
    if meta.get("task") in _ULTRALYTICS:
        return _ULTRALYTICS[meta["task"]], f"metadata task: {meta['task']}"
    if not outputs:
        return "generic", "no outputs to look at"
    first = outputs[0]
    floats = _float_outputs(first)
    if floats:
        name = floats[0]
        a = np.asarray(first[name])
        hw = _input_hw(feeds)
        if a.ndim == 3 and hw is not None:
            from ..postprocess import _anchor_count, detect_layout

            layout = detect_layout(a.shape[1:], hw)
            anchors = _anchor_count(hw)
            if (layout == "v8" and a.shape[2] == anchors) or (layout == "v5" and a.shape[1] == 3 * anchors):
                return "detect", f"{name} is a YOLO {layout} head {a.shape}"
    if len(first) == 1 and floats:
        a = np.asarray(first[floats[0]])
        if a.ndim == 2 and a.shape[1] >= 2:
            return "classify", f"one 2-D float output {floats[0]} {a.shape}"
    return "generic", "no task metadata or known output layout"


#: The task whose metric a name means when ``task="auto"`` (``cosine`` and ``rms``: every output, on its scale).
METRIC_TASKS = {
    "map50": "detect",
    "f1": "detect",
    "precision": "detect",
    "recall": "detect",
    "top1": "classify",
    "top5": "classify",
    "cer": "ocr",
    "lines": "ocr",
    "retrieval_top1": "embed",
    "cosine": "generic",
    "rms": "generic",
}

Outputs = Sequence[Mapping[str, np.ndarray]]


class _MetricError:
    """:func:`metric_error`'s callable; the reference's answers are decoded once."""

    def __init__(self, task: TaskMetric, metric: str) -> None:
        if metric not in task.metrics:
            raise OptionError(f"metric: got {metric!r}, which task {task.name!r} has not; it has {list(task.metrics)}")
        self.task, self.metric = task, metric
        self.__name__ = f"1 - {metric}" if METRICS[metric] == ">=" else metric
        self._ref: tuple[int, list[Any]] | None = None

    def __call__(self, q: Outputs, r: Outputs) -> float:
        if self._ref is None or self._ref[0] != id(r):
            self._ref = (id(r), self.task.answers(r))
        value = self.task.compute(self.task.answers(q), self._ref[1]).get(self.metric)
        if value is None:
            raise OptionError(f"metric {self.metric!r}: task {self.task.name!r} cannot compute it on this data")
        return 1.0 - value if METRICS[self.metric] == ">=" else float(value)


def metric_error(task: TaskMetric, metric: str) -> Callable[[Outputs, Outputs], float]:
    """``error(quantized_outputs, reference_outputs)`` of one metric of ``task`` over lists of output dicts,
    lower is better: ``1 - value`` for metrics where higher is better (``map50``, ``f1``, ``top1``,
    ``cosine``...), the value for ``cer`` and ``rms`` (what :class:`AutoMixedPrecision` minimises).

    Raises:
        OptionError: ``task`` has no such metric.

    Example:
        >>> err = metric_error(make_task("classify"), "top1")
        >>> err([{"y": np.array([[0.0, 1.0]])}], [{"y": np.array([[1.0, 0.0]])}])
        1.0
    """
    return _MetricError(task, metric)
