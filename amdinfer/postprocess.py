"""Postprocessing stages: YOLO decoding, NMS, mapping boxes back to the image, softmax and top-k.

Each stage checks its parameters when built and calls a NumPy kernel of :mod:`amdinfer.reference` on one
item's outputs. A detection chain is ``YoloDecode -> Nms -> ScaleBoxes``; each step passes a
:class:`~amdinfer.results.Detections` to the next, and reads what it needs (the letterbox, the confidence
threshold) from the sample's metadata. A classification chain is ``Softmax -> TopK``.

Example:
    >>> import numpy as np
    >>> from amdinfer.postprocess import Softmax, TopK
    >>> from amdinfer.stages import Sample
    >>> result = TopK(2, labels=["cat", "dog", "bird"])(Softmax()(np.array([1.0, 3.0, 2.0]))).data
    >>> result.labels, result.indices.tolist()
    (['dog', 'bird'], [1, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InputError, OptionError
from .results import Classification, Detections
from .stages import Postprocessor

__all__ = ["LAYOUTS", "Nms", "ScaleBoxes", "Softmax", "TopK", "YoloDecode", "detect_layout"]

#: YOLO output layouts :class:`YoloDecode` understands.
LAYOUTS = ("auto", "v5", "v8", "e2e")


def _number(name: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not lo <= float(value) <= hi:
        raise OptionError(f"{name}: got {value!r}, expected a number in [{lo}, {hi}]")
    return float(value)


def _output_name(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise OptionError(f"output: got {value!r}, expected an output name or None")
    return value


def _class_names(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, dict):
        keys = sorted(value)
        if keys != list(range(len(keys))):
            raise OptionError("labels: got a dict whose keys are not 0..n-1, expected class index -> name")
        value = [value[k] for k in keys]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise OptionError(f"labels: got {type(value).__name__}, expected a non-empty sequence of class names")
    return tuple(str(v) for v in value)


def _names_for(stage: Any, names: tuple[str, ...] | None, classes: np.ndarray) -> list[str] | None:
    if names is None:
        return None
    if classes.size and int(classes.max()) >= len(names):
        raise InputError(
            f"{type(stage).__name__}: class index {int(classes.max())} has no label; labels has {len(names)} names"
        )
    return [names[int(c)] for c in classes]


def _squeeze_batch(stage: Any, x: np.ndarray, rank: int) -> np.ndarray:
    """Drop a leading batch axis of 1 (an engine output passed by hand); refuse a real batch."""
    if x.ndim == rank + 1:
        if x.shape[0] != 1:
            raise InputError(
                f"{type(stage).__name__}: got a batch of {x.shape[0]} (shape {x.shape}), expected one item; "
                "use Pipeline.run_batch, or call the stage per item"
            )
        return x[0]
    return x


# ---------------------------------------------------------------------------------------------- classification
class Softmax(Postprocessor):
    """Softmax over ``axis`` in float32 (the numerically stable form).

    Args:
        axis: the class axis of one item's output.
        output: which model output to use when the model has several.

    Example:
        >>> Softmax()(np.log(np.array([1.0, 3.0]))).data.tolist()
        [0.25, 0.75]
    """

    output_type = np.ndarray
    output_description = "a numpy array"

    def __init__(self, axis: int = -1, *, output: str | None = None) -> None:
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise OptionError(f"axis: got {axis!r}, expected an int")
        self.axis = int(axis)
        self.output = _output_name(output)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        x = self._select_output(self, data, self.output)
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu" or x.ndim == 0:
            shown = f"array {x.dtype}{x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
            raise InputError(f"Softmax: got {shown}, expected a numeric array of scores")
        if not -x.ndim <= self.axis < x.ndim:
            raise InputError(f"Softmax: axis={self.axis} is out of range for shape {x.shape}")
        x = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))
        return e / e.sum(axis=self.axis, keepdims=True)


class TopK(Postprocessor):
    """The ``k`` best classes of one item's scores, best first (ties: lower index first).

    Args:
        k: how many classes to keep; at most the number of classes.
        labels: class names, a sequence or a ``{index: name}`` dict covering every class.
        output: which model output to use when the model has several.

    Example:
        >>> TopK(2)(np.array([0.1, 0.5, 0.4])).data.indices.tolist()
        [1, 2]
    """

    output_type = Classification
    output_description = "a Classification"

    def __init__(
        self, k: int = 5, labels: Sequence[str] | dict[int, str] | None = None, *, output: str | None = None
    ) -> None:
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise OptionError(f"k: got {k!r}, expected an int >= 1")
        self.k = int(k)
        self.labels = _class_names(labels)
        self.output = _output_name(output)

    def process(self, data: Any, meta: dict[str, Any]) -> Classification:
        x = self._select_output(self, data, self.output)
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "fiu":
            raise InputError(f"TopK: got {type(x).__name__}, expected a numeric array of class scores")
        x = _squeeze_batch(self, x, 1)
        if x.ndim != 1:
            raise InputError(f"TopK: got scores of shape {x.shape}, expected (num_classes,) for one item")
        if self.k > x.shape[0]:
            raise InputError(f"TopK: k={self.k}, but the scores have only {x.shape[0]} classes")
        if self.labels is not None and len(self.labels) != x.shape[0]:
            raise InputError(f"TopK: got {x.shape[0]} class scores, but labels has {len(self.labels)} names")
        order = np.argsort(-x, kind="stable")[: self.k]
        labels = None if self.labels is None else [self.labels[int(i)] for i in order]
        return Classification(order, x[order], labels)


# ---------------------------------------------------------------------------------------------- detection
def _anchor_count(input_shape: tuple[int, int]) -> int:
    """YOLO's anchor count for an ``(height, width)`` input: one per cell of the stride-8, 16 and 32 grids."""
    h, w = input_shape
    return sum(-(-h // s) * -(-w // s) for s in (8, 16, 32))


def detect_layout(shape: tuple[int, ...], input_shape: tuple[int, int] | None = None) -> str:
    """Tell a YOLO output layout from one item's output shape.

    With the model input size (``input_shape``, recorded by the geometric stages) the anchor count
    ``A = sum(ceil(h / s) * ceil(w / s) for s in (8, 16, 32))`` decides first: ``(4 + nc, A)`` is ``"v8"``
    and ``(3 * A, 5 + nc)`` is ``"v5"``, which also settles tiny inputs (fewer anchors than channels) and
    one-class v5 models. Otherwise :func:`amdinfer.reference.resolve_layout` decides as Ultralytics does: a
    last axis of 6 is ``"e2e"``, else the shorter axis holds the channels.

    Args:
        shape: one item's output shape (2-D).
        input_shape: ``(height, width)`` of the model input, if known.

    Returns:
        ``"v5"``, ``"v8"`` or ``"e2e"``.

    Raises:
        InputError: the shape is not 2-D.

    Example:
        >>> detect_layout((84, 8400)), detect_layout((25200, 85)), detect_layout((300, 6))
        ('v8', 'v5', 'e2e')
        >>> detect_layout((84, 21), input_shape=(32, 32)), detect_layout((63, 6), input_shape=(32, 32))
        ('v8', 'v5')
    """
    from .reference import resolve_layout

    if len(shape) != 2:
        raise InputError(f"YoloDecode: got an output of shape {tuple(shape)}, expected 2-D per item")
    rows, cols = shape
    if input_shape is not None:
        anchors = _anchor_count(input_shape)
        if cols == anchors and rows > 4:
            return "v8"
        if rows == 3 * anchors and cols > 5:
            return "v5"
    return resolve_layout(np.empty((1, rows, cols), np.float32))


class YoloDecode(Postprocessor):
    """Turn one item's raw YOLO output into candidate :class:`~amdinfer.results.Detections` (before NMS).

    Calls :func:`amdinfer.reference.yolo_decode`. Layouts: ``"v5"`` ``(anchors, 5 + nc)`` rows
    ``cx, cy, w, h, objectness, class scores`` (score = objectness x class score, the objectness must pass the
    threshold too); ``"v8"`` ``(4 + nc, anchors)`` without objectness; ``"e2e"`` ``(k, 6)`` rows
    ``x1, y1, x2, y2, score, class`` of models exported with NMS inside. ``"auto"`` tells them apart with
    :func:`detect_layout`. Each box keeps its best class when that score is above ``conf_threshold``
    (strictly, as Ultralytics); boxes are in model-input pixels. Records ``"yolo"`` (the item's prediction,
    layout, threshold and labels, which ``Nms(multi_label=True)`` decodes again) in the metadata.

    Args:
        layout: ``"auto"``, ``"v5"``, ``"v8"`` or ``"e2e"``.
        conf_threshold: minimum score, in ``[0, 1]``.
        labels: class names (a sequence or ``{index: name}``), attached to the detections.
        output: which model output holds the predictions when the model has several (e.g. ``"output0"`` of a
            segmentation model).

    Raises:
        OptionError: a parameter has the wrong type or range.

    Example:
        >>> pred = np.zeros((6, 3), np.float32)  # v8 layout: 4 + 2 classes, 3 anchors
        >>> pred[:4, 1] = [50, 40, 20, 10]; pred[5, 1] = 0.9
        >>> det = YoloDecode("v8")(pred).data
        >>> det.boxes.tolist(), det.scores.tolist(), det.classes.tolist()
        ([[40.0, 35.0, 60.0, 45.0]], [0.8999999761581421], [1])
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(
        self,
        layout: str = "auto",
        conf_threshold: float = 0.25,
        *,
        labels: Sequence[str] | dict[int, str] | None = None,
        output: str | None = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise OptionError(f"layout: got {layout!r}, expected one of {LAYOUTS}")
        self.layout = layout
        self.conf_threshold = _number("conf_threshold", conf_threshold, 0.0, 1.0)
        self.labels = _class_names(labels)
        self.output = _output_name(output)

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        from .reference import yolo_decode

        x = self._select_output(self, data, self.output)
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
            shown = f"array of {x.dtype}" if isinstance(x, np.ndarray) else type(x).__name__
            raise InputError(f"YoloDecode: got {shown}, expected a floating-point YOLO output")
        x = _squeeze_batch(self, x, 2)
        layout = self.layout if self.layout != "auto" else detect_layout(x.shape, meta.get("input_shape"))
        if layout == "e2e" and x.shape[-1] != 6:
            raise InputError(f"YoloDecode(layout='e2e'): got shape {x.shape}, expected (k, 6)")
        ((boxes, scores, classes),) = yolo_decode(x[None], layout, self.conf_threshold)  # type: ignore[arg-type]
        meta["yolo"] = {"prediction": x, "layout": layout, "conf_threshold": self.conf_threshold, "labels": self.labels}
        return Detections(boxes, scores, classes, _names_for(self, self.labels, classes), meta.get("input_shape"))


class Nms(Postprocessor):
    """Non-maximum suppression of :class:`~amdinfer.results.Detections`, class-aware unless ``agnostic``.

    The steps of Ultralytics' ``non_max_suppression`` after decoding: optional multi-label candidates, class
    filter, the ``max_nms`` best candidates, greedy NMS (:func:`amdinfer.reference.batched_nms`, exact IoUs per
    class, or :func:`amdinfer.reference.nms` when agnostic), then the ``max_det`` best kept boxes, best first.
    Outputs of ``"e2e"`` models were suppressed inside the model, so they only get the filter and ``max_det``.

    Args:
        iou_threshold: boxes overlapping a kept box (of the same class unless ``agnostic``) with IoU above
            this are dropped.
        max_det: most detections kept per image.
        agnostic: suppress across classes.
        multi_label: a box may be kept once for each class scoring above the decode threshold. The other
            classes' scores are not in the detections, so this decodes the prediction ``YoloDecode`` recorded
            again with :func:`amdinfer.reference.yolo_decode` ``(multi_label=True)``; it needs ``YoloDecode``
            right before it.
        classes: keep only these class indices (``None``: all).
        max_nms: most candidates that enter NMS, by score.
        class_offset: ``None`` (default): exact per-class IoUs. A number (Ultralytics uses ``7680``): NMS runs
            once over the boxes shifted by ``class * class_offset`` in float32, Ultralytics' arithmetic exactly
            (the shifted coordinates lose bits, so a pair at the IoU threshold may go the other way than the
            exact IoU says; use it to reproduce Ultralytics bit for bit). :func:`amdinfer.yolo` sets 7680.

    Raises:
        OptionError: a parameter has the wrong type or range.

    Example:
        >>> from amdinfer.results import Detections
        >>> det = Detections([[0, 0, 10, 10], [1, 1, 10, 10], [1, 1, 10, 10]], [0.9, 0.8, 0.7], [0, 0, 1])
        >>> Nms(iou_threshold=0.5)(det).data.scores.tolist()  # the 0.8 box overlaps the 0.9 box of its class
        [0.8999999761581421, 0.699999988079071]
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(
        self,
        iou_threshold: float = 0.45,
        max_det: int = 300,
        agnostic: bool = False,
        *,
        multi_label: bool = False,
        classes: Sequence[int] | None = None,
        max_nms: int = 30000,
        class_offset: float | None = None,
    ) -> None:
        if class_offset is not None:
            class_offset = _number("class_offset", class_offset, 1.0, 1e6)
        self.class_offset = class_offset
        self.iou_threshold = _number("iou_threshold", iou_threshold, 0.0, 1.0)
        for name, value in (("max_det", max_det), ("max_nms", max_nms)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise OptionError(f"{name}: got {value!r}, expected an int >= 1")
        self.max_det = int(max_det)
        self.max_nms = int(max_nms)
        for name, value in (("agnostic", agnostic), ("multi_label", multi_label)):
            if not isinstance(value, (bool, np.bool_)):
                raise OptionError(f"{name}: got {value!r}, expected True or False")
        self.agnostic = bool(agnostic)
        self.multi_label = bool(multi_label)
        if classes is not None:
            if isinstance(classes, (int, np.integer)) and not isinstance(classes, bool):
                classes = [classes]  # type: ignore[list-item]
            if (
                isinstance(classes, (str, bytes))
                or not isinstance(classes, Sequence)
                or not all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 0 for c in classes)
            ):
                raise OptionError(f"classes: got {classes!r}, expected a list of class indices >= 0")
            classes = tuple(int(c) for c in classes)
        self.classes = classes

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        from .reference import batched_nms, nms, yolo_decode

        if not isinstance(data, Detections):
            raise InputError(f"Nms: got {type(data).__name__}, expected Detections (put YoloDecode before Nms)")
        det = data
        record = meta.get("yolo")
        if self.multi_label:
            if record is None:
                raise InputError("Nms(multi_label=True): the sample has no YOLO prediction; put YoloDecode before it")
            ((boxes, scores, classes),) = yolo_decode(
                record["prediction"][None], record["layout"], record["conf_threshold"], multi_label=True
            )
            det = Detections(boxes, scores, classes, _names_for(self, record["labels"], classes), det.image_shape)
        if self.classes is not None:
            det = det.select(np.isin(det.classes, self.classes))
        if record is not None and record["layout"] == "e2e":
            return det.select(np.arange(min(len(det), self.max_det)))
        if len(det) > self.max_nms:
            det = det.select(np.argsort(-det.scores, kind="stable")[: self.max_nms])
        if self.agnostic:
            keep = nms(det.boxes, det.scores, self.iou_threshold)
        elif self.class_offset is not None:
            shift = (det.classes.astype(np.float32) * np.float32(self.class_offset))[:, None]
            keep = nms(det.boxes.astype(np.float32) + shift, det.scores, self.iou_threshold)
        else:
            keep = batched_nms(det.boxes, det.scores, det.classes, self.iou_threshold)
        return det.select(keep[: self.max_det])


class ScaleBoxes(Postprocessor):
    """Map boxes from model-input pixels back to the original image, undoing Letterbox/Resize/CenterCrop.

    Uses the ``"affine"`` and ``"orig_shape"`` metadata recorded by the geometric stages (for a letterbox:
    subtract the left/top padding, divide by the per-axis gains ``round(w * r) / w`` and ``round(h * r) / h``,
    as Ultralytics >= 8.4 ``scale_boxes`` does; chains such as ``Resize -> CenterCrop`` are inverted as a whole), then
    clips the boxes to the image (:func:`amdinfer.reference.clip_boxes`).

    Args:
        clip: clip boxes to ``[0, width] x [0, height]`` of the original image.

    Raises:
        OptionError: ``clip`` is not a bool.

    Example:
        >>> from amdinfer.preprocess import Letterbox
        >>> from amdinfer.results import Detections
        >>> from amdinfer.stages import Sample
        >>> meta = Letterbox(64)(np.zeros((32, 48, 3), np.uint8)).meta  # 48x32 -> 64x43, content from row 10
        >>> det = Detections([[0, 10, 32, 53]], [0.9], [0])
        >>> ScaleBoxes()(Sample(det, meta)).data.boxes.tolist()  # per-axis gains 64/48 and 43/32
        [[0.0, 0.0, 24.0, 32.0]]
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(self, *, clip: bool = True) -> None:
        if not isinstance(clip, (bool, np.bool_)):
            raise OptionError(f"clip: got {clip!r}, expected True or False")
        self.clip = bool(clip)

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        from .reference import clip_boxes

        if not isinstance(data, Detections):
            raise InputError(f"ScaleBoxes: got {type(data).__name__}, expected Detections")
        if "orig_shape" not in meta:
            raise InputError(
                "ScaleBoxes: the sample has no 'orig_shape' metadata; put a geometric stage (Letterbox, Resize, "
                "CenterCrop) or LoadImage in the preprocessing, or pass a Sample with meta"
            )
        sx, sy, tx, ty = meta.get("affine", (1.0, 1.0, 0.0, 0.0))
        orig = tuple(meta["orig_shape"])
        # The inverse of the composed geometry; for a lone Letterbox this is exactly reference.scale_boxes.
        boxes = (data.boxes - np.array([tx, ty, tx, ty], np.float64)) / np.array([sx, sy, sx, sy], np.float64)
        if self.clip:
            boxes = clip_boxes(boxes, orig)
        meta["affine"] = (1.0, 1.0, 0.0, 0.0)  # a second ScaleBoxes changes nothing
        meta["input_shape"] = orig
        return Detections(boxes, data.scores, data.classes, data.labels, orig)
