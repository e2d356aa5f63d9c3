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

from .errors import InputError, OptionError, StageError
from .results import Classification, Detections
from .stages import Postprocessor

__all__ = ["LAYOUTS", "Nms", "ScaleBoxes", "Softmax", "TopK", "YoloDecode", "detect_layout"]

#: YOLO output layouts :class:`YoloDecode` understands.
LAYOUTS = ("auto", "v5", "v8", "end2end")


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

    def __init__(self, k: int = 5, labels: Sequence[str] | dict[int, str] | None = None, *, output: str | None = None) -> None:
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
def detect_layout(shape: tuple[int, ...], input_shape: tuple[int, int] | None = None) -> str:
    """Tell a YOLO output layout from one item's output shape.

    With the model input size (``input_shape``, recorded by the geometric stages) the anchor count
    ``A = sum(ceil(h / s) * ceil(w / s) for s in (8, 16, 32))`` decides: ``(4 + nc, A)`` is ``"v8"`` and
    ``(3 * A, 5 + nc)`` is ``"v5"``. Otherwise (or when neither matches): channels first
    (``shape[0] < shape[1]``) is ``"v8"``; channels last with 6 or 7 columns and fewer rows than
    channels-last v5 outputs have is ``"end2end"`` (``x1, y1, x2, y2, score, class``); other channels-last
    outputs are ``"v5"``. State the layout when your model breaks these rules (e.g. a one-class v5 model
    without ``input_shape``).

    Args:
        shape: one item's output shape (2-D).
        input_shape: ``(height, width)`` of the model input, if known.

    Returns:
        ``"v5"``, ``"v8"`` or ``"end2end"``.

    Raises:
        InputError: the shape is not 2-D.

    Example:
        >>> detect_layout((84, 8400)), detect_layout((25200, 85)), detect_layout((300, 6))
        ('v8', 'v5', 'end2end')
        >>> detect_layout((84, 21), input_shape=(32, 32))
        'v8'
    """
    if len(shape) != 2:
        raise InputError(f"YoloDecode: got an output of shape {tuple(shape)}, expected 2-D per item")
    rows, cols = shape
    if input_shape is not None:
        h, w = input_shape
        anchors = sum(-(-h // s) * -(-w // s) for s in (8, 16, 32))
        if cols == anchors and rows > 4:
            return "v8"
        if rows == 3 * anchors and cols > 5:
            return "v5"
    if rows < cols:
        return "v8"
    if cols in (6, 7) and rows <= 1000:
        return "end2end"
    return "v5"
