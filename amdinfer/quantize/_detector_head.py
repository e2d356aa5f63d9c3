"""Find a YOLO detector's decode head, the part static int8 must leave in float.

YOLOv5/v8/v11 exports end in a decode subgraph: the last convolution of each branch, then reshapes, a
``Sigmoid`` on the class scores, the box decode (v8/v11: the DFL ``Softmax`` and its fixed ``arange`` 1x1
convolution, then ``Slice``/``Sub``/``Add``/``Div``/``Mul`` against the anchor grid; v5: ``Split`` and
``Mul``/``Add``/``Pow`` against the grid and anchors) and one ``Concat`` that puts box coordinates (0 to the
image size) next to class scores (0 to 1) in one tensor: v8/v11 ``(1, 4 + nc, N)``, v5 ``(1, N, 5 + nc)``.
Quantized, that tensor gets one int8 scale (``1024 / 255`` for a 1024 input) and every score rounds to 0:
the int8 model finds no box. :func:`detector_head` walks back from the output to the branches' last
convolutions and names the nodes between, which :class:`~amdinfer.quantize.Int8Quantizer` keeps in float.

Example:
    >>> from amdinfer.testing.models import tiny_cnn, yolov8
    >>> head = detector_head(yolov8(image_size=64, num_classes=2))
    >>> head.layout, head.output, len(head.convs)
    ('v8', 'output0', 6)
    >>> detector_head(tiny_cnn()) is None  # a classifier: its output comes straight from a Gemm
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["DECODE_OPS", "DetectorHead", "detector_head"]

#: Op types a YOLO decode is made of (beyond them the walk is not in a YOLO head and gives up).
DECODE_OPS: frozenset[str] = frozenset(
    {
        "Add",
        "Cast",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Div",
        "Expand",
        "Flatten",
        "Gather",
        "Identity",
        "Mul",
        "Pow",
        "Range",
        "Reshape",
        "Shape",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Split",
        "Squeeze",
        "Sub",
        "Tile",
        "Transpose",
        "Unsqueeze",
    }
)
_WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class DetectorHead:
    """A YOLO decode head found in a model.

    Attributes:
        layout: ``"v8"`` (output ``(1, 4 + nc, N)``, v8 and v11) or ``"v5"`` (``(1, N, 5 + nc)``).
        output: the graph output the head writes.
        decode: the decode nodes between the branches' last convolutions and the output, in graph order
            (the DFL convolution of v8/v11 included).
        convs: the last convolution of each branch (boxes and scores per scale), in graph order.

    Example:
        >>> from amdinfer.testing.models import yolov5
        >>> head = detector_head(yolov5(image_size=64, num_classes=2))
        >>> head.layout, head.float_nodes == head.convs + head.decode
        ('v5', True)
    """

    layout: str
    output: str
    decode: tuple[str, ...]
    convs: tuple[str, ...]

    @property
    def float_nodes(self) -> tuple[str, ...]:
        """What int8 keeps in float: the branches' last convolutions, then the decode."""
        return self.convs + self.decode

    def summary(self) -> str:
        """One line for logs and notes.

        Example:
            >>> DetectorHead("v8", "output0", ("a", "b"), ("c",)).summary()
            "YOLO v8 head of output 'output0' kept in float: 1 branch conv + 2 decode nodes"
        """
        return (
            f"YOLO {self.layout} head of output {self.output!r} kept in float: {len(self.convs)} branch "
            f"conv{'s' if len(self.convs) != 1 else ''} + {len(self.decode)} decode nodes"
        )


def _is_dfl(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> bool:
    """A fixed ``arange(C)`` 1x1 convolution to one channel: the DFL expectation of v8/v11 (no learnt weight)."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in inits:
        return False
    w = numpy_helper.to_array(inits[node.input[1]])
    if w.ndim != 4 or w.shape[0] != 1 or w.shape[2:] != (1, 1):
        return False
    return bool(np.allclose(w.reshape(-1), np.arange(w.shape[1])))


def _static_shape(proto: onnx.ModelProto, name: str) -> tuple[int | None, ...] | None:
    for vi in list(proto.graph.output) + list(proto.graph.value_info):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return tuple(d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim)
    return None


def _layout(proto: onnx.ModelProto, output: str, concat: onnx.NodeProto) -> str | None:
    shape = _static_shape(proto, output)
    if shape is not None and len(shape) != 3:
        return None
    if shape is not None and shape[1] is not None and shape[2] is not None:
        return "v8" if shape[1] < shape[2] else "v5"
    axis = next((a.i for a in concat.attribute if a.name == "axis"), 0)
    return "v8" if axis in (1, -2) else "v5"


def _walk(
    proto: onnx.ModelProto, output: str, producers: dict[str, onnx.NodeProto], inits: dict[str, onnx.TensorProto]
) -> tuple[list[str], list[str]] | None:
    """``(decode, convs)`` behind ``output``, or ``None`` when the walk leaves the ops a decode is made of."""
    decode: set[str] = set()
    convs: set[str] = set()
    stack = [output]
    seen: set[str] = set()
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        node = producers.get(tensor)
        if node is None:  # a graph input or an initializer
            continue
        if node.op_type in _WEIGHTED and not _is_dfl(node, inits):
            convs.add(node.name)
            continue
        if node.op_type not in DECODE_OPS and not _is_dfl(node, inits):
            return None
        decode.add(node.name)
        if node.op_type == "Shape":  # reads only the shape: what produced the tensor is not part of the decode
            continue
        stack.extend(i for i in node.input if i)
    order = [n.name for n in proto.graph.node]
    return [n for n in order if n in decode], [n for n in order if n in convs]


def detector_head(proto: onnx.ModelProto, outputs: Sequence[str] | None = None) -> DetectorHead | None:
    """The YOLO v5/v8/v11 decode head of ``proto``, or ``None`` when the model has none.

    A head is found when an output (rank 3) comes from a ``Concat`` and the nodes behind it, back to the
    last weighted layers (``Conv``, ``Gemm``, ``MatMul``; the fixed DFL convolution does not count), are
    all decode ops (:data:`DECODE_OPS`) and include a ``Sigmoid`` (the class scores). The first output that
    has one is taken.

    Args:
        proto: the model (best after :func:`~amdinfer.quantize.prepare_model`, whose node names the head uses).
        outputs: the outputs to look behind (default: all).

    Returns:
        A :class:`DetectorHead`, or ``None``.

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> head = detector_head(yolov8(image_size=64, num_classes=2))
        >>> head.decode[-2:]  # the class scores' Sigmoid, then the Concat that meets the boxes
        ('model.22.cls_sigmoid', 'model.22.output')
    """
    producers = {o: n for n in proto.graph.node for o in n.output if o}
    inits = {t.name: t for t in proto.graph.initializer}
    by_name = {n.name: n for n in proto.graph.node}
    for output in outputs if outputs is not None else [o.name for o in proto.graph.output]:
        last = producers.get(output)
        if last is None or last.op_type != "Concat":
            continue
        layout = _layout(proto, output, last)
        if layout is None:
            continue
        found = _walk(proto, output, producers, inits)
        if found is None:
            continue
        decode, convs = found
        if not convs or not any(by_name[n].op_type == "Sigmoid" for n in decode):
            continue
        return DetectorHead(layout=layout, output=output, decode=tuple(decode), convs=tuple(convs))
    return None
