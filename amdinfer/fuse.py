"""Fused pipelines: pre- and post-processing compiled into the model, one ONNX graph from uint8 images to answers.

:meth:`Pipeline.fuse() <amdinfer.Pipeline.fuse>` (or :func:`fuse_model`) turns the stages of a
:class:`~amdinfer.Pipeline` into ONNX nodes around the model, so one engine call takes a batch of uint8
``(N, H, W, C)`` images and returns final answers: detections (boxes in original-image pixels, scores,
classes) or the top-k classes. Every engine runs the fused graph (ORT on any execution provider, MIGraphX,
the NumPy reference engine), so it is checked like any model; on a GPU the host copies are uint8 images in
and kilobytes out.

How images enter (``image_size``):

* ``image_size=(H, W)``: a fixed-size stream. Geometry (``Letterbox``, ``Resize``, ``CenterCrop``) runs in the
  graph with its parameters fixed at fuse time. The resize reproduces ``cv2.resize(INTER_LINEAR)`` on uint8
  bit for bit (OpenCV's 11-bit weights and its SIMD vertical pass, in int32 arithmetic), so the fused graph
  sees the same pixels as the host stages with OpenCV installed.
* ``image_size=None``: mixed sizes. The geometric stages run on the host (OpenCV when installed) and put
  every image on one canvas; the graph takes the canvases plus two small inputs per image, ``affine``
  ``(N, 4)`` = ``(sx, sy, tx, ty)`` and ``orig_shape`` ``(N, 2)`` = ``(height, width)``, and does colour
  order, normalisation, layout, cast, the model and the post-processing.

Outputs of a fused detector: ``boxes`` ``float32 (K, 4)``, ``scores`` ``float32 (K,)``, ``classes`` ``int64
(K,)`` and ``batch_index`` ``int64 (K,)`` (the image each detection belongs to; best first within an image).
A fused classifier returns ``scores`` and ``indices`` of shape ``(N, k)``.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import Letterbox, Normalize, HwcToChw
    >>> from amdinfer.postprocess import YoloDecode, Nms, ScaleBoxes
    >>> from amdinfer.testing.models import yolov8
    >>> pipe = amdinfer.Pipeline(
    ...     preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
    ...     engine=yolov8(image_size=64, num_classes=3), backend="ort", providers=["CPUExecutionProvider"],
    ...     postprocess=[YoloDecode(conf_threshold=0.3), Nms(max_det=5), ScaleBoxes()],
    ... )
    >>> fused = pipe.fuse(image_size=(48, 80))
    >>> [i.name for i in fused.model.graph.input], [o.name for o in fused.model.graph.output]
    (['images'], ['boxes', 'scores', 'classes', 'batch_index'])
    >>> image = np.random.default_rng(0).integers(0, 255, (48, 80, 3), np.uint8)
    >>> a, b = fused(image), pipe(image)
    >>> a.classes.tolist() == b.classes.tolist() and bool(np.allclose(a.boxes, b.boxes, atol=0.5))
    True
    >>> fused.close(); pipe.close()
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import InputError, OptionError, StageError
from .postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode, detect_layout
from .preprocess import (
    BgrToRgb,
    Cast,
    CenterCrop,
    HwcToChw,
    Letterbox,
    Normalize,
    Resize,
    letterbox_geometry,
)
from .reference import linear_taps_fixed
from .results import Classification, Detections
from .stages import Postprocessor, Preprocessor, Sample

__all__ = ["FusedPipeline", "fuse_model"]

_PREFIX = "fuse/"
_MIN_OPSET = 13
_GEOMETRY = (Letterbox, Resize, CenterCrop)
_MAX_WH = 7680.0
_META_KEY = "amdinfer.fuse"
_NMS_MODES = ("per-class", "offset", "host")  # Ultralytics' class offset for class-aware NMS in one pass


# ---------------------------------------------------------------------------------------------- graph builder
class _Graph:
    """A tiny ONNX graph builder: every name it makes starts with ``fuse/``."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def _name(self, hint: str) -> str:
        self._n += 1
        return f"{_PREFIX}{hint}_{self._n}"

    def const(self, value: Any, dtype: Any = None, hint: str = "c") -> str:
        name = self._name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, outputs: int = 1, out: str | None = None, **attrs: Any) -> Any:
        names = [out] if out is not None else [self._name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=self._name(op_type + "_node"), **attrs))
        return names[0] if outputs == 1 else names

    def reduce(self, op_type: str, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        if self.opset >= 18 or op_type == "ReduceSum":
            return self.op(op_type, x, self.const(list(axes), np.int64), keepdims=keepdims)
        return self.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        c = self.const
        return self.op("Slice", x, c([start], np.int64), c([end], np.int64), c([axis], np.int64))

    def gather(self, x: str, index: Any, axis: int) -> str:
        return self.op("Gather", x, self.const(np.asarray(index, np.int64)), axis=axis)


# ---------------------------------------------------------------------------------------------- preprocessing
def _resize_cv2(g: _Graph, x: str, hw: tuple[int, int], new_hw: tuple[int, int]) -> str:
    """``cv2.resize(INTER_LINEAR)`` of an int32 NHWC tensor, bit-exact with OpenCV's uint8 SIMD path.

    Horizontal pass ``S = src[x0] * a0 + src[x1] * a1`` with 11-bit weights; vertical pass as OpenCV's
    ``VResizeLinearVec_32s8u``: ``((((S0 >> 4) * b0) >> 16) + (((S1 >> 4) * b1) >> 16) + 2) >> 2``.
    """
    (h, w), (nh, nw) = hw, new_hw
    if (h, w) == (nh, nw):
        return x
    x0, x1, a0, a1 = linear_taps_fixed(w, nw)
    y0, y1, b0, b1 = linear_taps_fixed(h, nh)
    c = g.const
    s = g.op(
        "Add",
        g.op("Mul", g.gather(x, x0, 2), c(a0.reshape(1, 1, -1, 1), np.int32)),
        g.op("Mul", g.gather(x, x1, 2), c(a1.reshape(1, 1, -1, 1), np.int32)),
    )
    sixteen, hi = c(16, np.int32), c(65536, np.int32)

    def half(index: np.ndarray, beta: np.ndarray) -> str:
        rows = g.op("Div", g.gather(s, index, 1), sixteen)
        return g.op("Div", g.op("Mul", rows, c(beta.reshape(1, -1, 1, 1), np.int32)), hi)

    total = g.op("Add", g.op("Add", half(y0, b0), half(y1, b1)), c(2, np.int32))
    return g.op("Div", total, c(4, np.int32))


class _Pre:
    """Compiles the preprocessing stages; tracks the layout (channel axis) and dtype of the running tensor."""

    def __init__(self, g: _Graph, x: str, hw: tuple[int, int] | None) -> None:
        self.g = g
        self.x = x
        self.hw = hw  # (H, W) while geometry is still in the graph; None once it is not known
        self.channel_axis = 3
        self.dtype: np.dtype[Any] = np.dtype(np.uint8)
        self.affine = (1.0, 1.0, 0.0, 0.0)
        self.orig_hw = hw
        self.pixels = True  # the values are still whole uint8 pixel values (in uint8, int32 or float32)

    def _int32(self) -> None:
        if self.dtype != np.int32:
            if not self.pixels:
                raise OptionError("fuse: geometric stages must come before Normalize/Cast to be fused")
            self.x = self.g.op("Cast", self.x, to=TensorProto.INT32)
            self.dtype = np.dtype(np.int32)

    def _float(self) -> None:
        self.pixels = False
        if self.dtype.kind != "f":
            self.x = self.g.op("Cast", self.x, to=TensorProto.FLOAT)
            self.dtype = np.dtype(np.float32)

    def _geometry(self, stage: Preprocessor) -> None:
        if self.hw is None:
            raise OptionError(
                f"fuse: {type(stage).__name__} after a non-geometric stage cannot run in the graph without "
                "image_size; pass image_size=(H, W) or move it first"
            )
        if self.channel_axis != 3:
            raise OptionError(f"fuse: {type(stage).__name__} after HwcToChw cannot be fused (it expects HWC)")
        self._int32()
        g, (h, w) = self.g, self.hw
        if isinstance(stage, Letterbox):
            geo = letterbox_geometry((h, w), stage)
            self.x = _resize_cv2(g, self.x, (h, w), geo.resized)
            if any(geo.pads):
                if len(set(stage.color)) != 1:
                    raise OptionError(f"fuse: Letterbox(color={stage.color}) must use one value for every channel")
                top, bottom, left, right = geo.pads
                pads = g.const([0, top, left, 0, 0, bottom, right, 0], np.int64)
                # Pad in float32 (whole numbers, exact): ORT's CUDA EP has no int32 Pad and would run it on the CPU.
                self.x = g.op("Cast", self.x, to=TensorProto.FLOAT)
                self.dtype = np.dtype(np.float32)
                fill = g.const(float(round(stage.color[0])), np.float32)
                self.x = g.op("Pad", self.x, pads, fill, mode="constant")
            sx, sy, tx, ty = geo.affine
            self.hw = geo.shape
        elif isinstance(stage, Resize):
            th, tw = stage.target(h, w)
            self.x = _resize_cv2(g, self.x, (h, w), (th, tw))
            sx, sy, tx, ty = tw / w, th / h, 0.0, 0.0
            self.hw = (th, tw)
        else:
            assert isinstance(stage, CenterCrop)
            th, tw = stage.size
            if th > h or tw > w:
                raise OptionError(f"fuse: CenterCrop{stage.size} is larger than the image {self.hw}")
            top, left = round((h - th) / 2.0), round((w - tw) / 2.0)
            c = g.const
            self.x = g.op(
                "Slice", self.x, c([top, left], np.int64), c([top + th, left + tw], np.int64), c([1, 2], np.int64)
            )
            sx, sy, tx, ty = 1.0, 1.0, -float(left), -float(top)
            self.hw = (th, tw)
        ax, ay, bx, by = self.affine
        self.affine = (ax * sx, ay * sy, bx * sx + tx, by * sy + ty)

    def add(self, stage: Preprocessor) -> None:
        g = self.g
        if isinstance(stage, _GEOMETRY):
            self._geometry(stage)
        elif isinstance(stage, BgrToRgb):
            self.x = g.gather(self.x, [2, 1, 0], self.channel_axis)
        elif isinstance(stage, HwcToChw):
            self.x = g.op("Transpose", self.x, perm=[0, 3, 1, 2])
            self.channel_axis = 1
        elif isinstance(stage, Normalize):
            self._float()
            if stage.dtype != np.float32:
                raise OptionError(f"fuse: Normalize(dtype={stage.dtype}) cannot be fused; use float32 and Cast")
            divisor = stage.divisor
            if divisor is not None:
                self.x = g.op("Div", self.x, g.const(divisor, np.float32))
            elif stage.scale != 1.0:
                self.x = g.op("Mul", self.x, g.const(stage.scale, np.float32))
            for values, op in ((stage.mean, "Sub"), (stage.std, "Div")):
                if values is None:
                    continue
                v = np.asarray(values, np.float32)
                if v.size > 1:
                    if stage.channel_axis not in (-1, 0):
                        raise OptionError(f"fuse: Normalize(channel_axis={stage.channel_axis}) cannot be fused")
                    shape = [1, 1, 1, 1]
                    shape[self.channel_axis] = v.size
                    v = v.reshape(shape)
                self.x = g.op(op, self.x, g.const(v))
        elif isinstance(stage, Cast):
            self.pixels = False
            to = helper.np_dtype_to_tensor_dtype(stage.dtype)
            self.x = g.op("Cast", self.x, to=to)
            self.dtype = stage.dtype
        else:
            raise OptionError(
                f"fuse: {type(stage).__name__} has no ONNX form; put it before the fusable stages (it then runs on "
                "the host) or use the stage-by-stage Pipeline"
            )

    def finish(self) -> None:
        if self.pixels and self.dtype != np.uint8:  # geometry only: the model takes what the host path gives
            self.x = self.g.op("Cast", self.x, to=TensorProto.UINT8)
            self.dtype = np.dtype(np.uint8)


# ---------------------------------------------------------------------------------------------- postprocessing
def _detect_post(
    g: _Graph,
    pred: str,
    pred_shape: Sequence[Any],
    decode: YoloDecode,
    nms: Nms,
    scale: ScaleBoxes | None,
    input_hw: tuple[int, int] | None,
    affine: str | None,
    orig: str | None,
    mode: str,
) -> list[str]:
    """YOLO decode + class-aware NonMaxSuppression + max_det + rescale (or, with ``mode="host"``, decode and
    the confidence filter only: the candidates, in anchor order); returns the output names."""
    class_offset = mode == "offset"
    rows, cols = pred_shape[-2], pred_shape[-1]
    if decode.layout != "auto":
        layout = decode.layout
    elif isinstance(rows, int) and isinstance(cols, int):
        layout = detect_layout((rows, cols), input_hw)
    else:
        raise OptionError("fuse: the YOLO output shape is dynamic; give YoloDecode(layout='v8' or 'v5')")
    if layout not in ("v8", "v5"):
        raise OptionError(f"fuse: YoloDecode layout {layout!r} cannot be fused (v8 and v5 can)")
    if nms.multi_label:
        raise OptionError("fuse: Nms(multi_label=True) cannot be fused; use the stage-by-stage Pipeline")
    p = g.op("Cast", pred, to=TensorProto.FLOAT)
    if layout == "v8":
        p = g.op("Transpose", p, perm=[0, 2, 1])  # (N, A, 4 + nc)
        cls = g.slice(p, 4, 1 << 30, 2)
    else:
        obj = g.slice(p, 4, 5, 2)
        cls = g.op("Mul", g.slice(p, 5, 1 << 30, 2), obj)
    xy, wh = g.slice(p, 0, 2, 2), g.slice(p, 2, 4, 2)
    half = g.op("Div", wh, g.const(2.0, np.float32))
    boxes = g.op("Concat", g.op("Sub", xy, half), g.op("Add", xy, half), axis=2)  # (N, A, 4)
    best = g.op("ArgMax", cls, axis=2, keepdims=1)  # (N, A, 1): the first best class, as np.argmax
    cls_t = g.op("Transpose", cls, perm=[0, 2, 1])  # (N, nc, A)
    nc = g.op("Squeeze", g.op("Shape", cls_t, start=1, end=2), g.const([0], np.int64))
    nc_range = g.op("Range", g.const(0, np.int64), nc, g.const(1, np.int64))
    onehot = g.op(
        "Equal", g.op("Unsqueeze", nc_range, g.const([0, 2], np.int64)), g.op("Transpose", best, perm=[0, 2, 1])
    )
    if nms.classes is not None:
        allowed = g.op("Unsqueeze", nc_range, g.const([0, 2, 3], np.int64))  # (1, nc, 1, 1)
        wanted = g.const(np.asarray(nms.classes, np.int64).reshape(1, 1, 1, -1))
        hit = g.op("Cast", g.op("Equal", allowed, wanted), to=TensorProto.INT32)  # (1, nc, 1, k)
        in_set = g.reduce("ReduceMax", hit, [3], keepdims=0)  # (1, nc, 1)
        onehot = g.op("And", onehot, g.op("Cast", in_set, to=TensorProto.BOOL))
    zero = g.const(0.0, np.float32)
    if mode == "host":
        # The candidates YoloDecode gives, in anchor order: NMS, max_det and the rescale run on the host with the
        # Nms/ScaleBoxes stages themselves (ORT's CUDA NonMaxSuppression costs ~0.5 ms per image).
        best_score = g.reduce("ReduceMax", cls, [2], keepdims=0)  # (N, A)
        passed = g.op("Greater", best_score, g.const(decode.conf_threshold, np.float32))
        idx = g.op("Transpose", g.op("NonZero", passed), perm=[1, 0])  # (K, 2): image, anchor
        b = g.op("Reshape", g.slice(idx, 0, 1, 1), g.const([-1], np.int64))
        flat_best = g.op("Reshape", g.op("Cast", best, to=TensorProto.INT64), g.op("Shape", best_score))
        g.op("Identity", g.op("GatherND", boxes, idx), out="boxes")
        g.op("Identity", g.op("GatherND", best_score, idx), out="scores")
        g.op("Identity", g.op("GatherND", flat_best, idx), out="classes")
        g.op("Identity", b, out="batch_index")
        return ["boxes", "scores", "classes", "batch_index"]
    # Class-aware NMS either per class (exact IoUs, as Nms computes them) or as Ultralytics does it: one
    # NonMaxSuppression over boxes shifted by class * 7680, so boxes of different classes never overlap (one NMS
    # class instead of nc: ORT's CUDA kernel runs each (image, class) pair in turn, with a host sync each; but
    # shifted float32 coordinates lose bits, so pairs right at the IoU threshold can go either way).
    per_class = g.op("Where", onehot, cls_t, zero)  # (N, nc, A): each anchor scores only its best class
    if class_offset or nms.agnostic:
        scores = g.reduce("ReduceMax", per_class, [1], keepdims=1)  # (N, 1, A)
    else:
        scores = per_class  # exact IoUs, one NMS class per class (what Nms computes)
    nms_boxes = boxes
    if class_offset and not nms.agnostic:
        shift = nms.class_offset if nms.class_offset is not None else _MAX_WH
        offset = g.op("Mul", g.op("Cast", best, to=TensorProto.FLOAT), g.const(shift, np.float32))  # (N, A, 1)
        nms_boxes = g.op("Add", boxes, offset)
    selected = g.op(
        "NonMaxSuppression",
        nms_boxes,
        scores,
        g.const([nms.max_det], np.int64),
        g.const([nms.iou_threshold], np.float32),
        g.const([decode.conf_threshold], np.float32),
    )  # (K, 3): batch, 0, anchor
    b = g.op("Reshape", g.slice(selected, 0, 1, 1), g.const([-1], np.int64))
    score = g.op("GatherND", scores, selected)
    ba = g.op("Concat", g.slice(selected, 0, 1, 1), g.slice(selected, 2, 3, 1), axis=1)
    box = g.op("GatherND", boxes, ba)  # (K, 4)
    klass = g.op("Reshape", g.op("GatherND", g.op("Cast", best, to=TensorProto.INT64), ba), g.const([-1], np.int64))
    # Order by image, then score (best first): one TopK over score - 2 * image (scores are in [0, 1]).
    key = g.op("Sub", score, g.op("Mul", g.op("Cast", b, to=TensorProto.FLOAT), g.const(2.0, np.float32)))
    _, order = g.op("TopK", key, g.op("Shape", key), outputs=2, axis=0, largest=1, sorted=1)
    b, score, box, klass = (g.op("Gather", t, order, axis=0) for t in (b, score, box, klass))
    # max_det per image: rank within the image = position - first position of the image.
    n = g.op("Shape", pred, start=0, end=1)
    images = g.op("Range", g.const(0, np.int64), g.op("Squeeze", n, g.const([0], np.int64)), g.const(1, np.int64))
    before = g.op(
        "Less", g.op("Unsqueeze", b, g.const([1], np.int64)), g.op("Unsqueeze", images, g.const([0], np.int64))
    )
    starts = g.reduce("ReduceSum", g.op("Cast", before, to=TensorProto.INT64), [0], keepdims=0)  # (N,)
    k = g.op("Shape", b)
    position = g.op("Range", g.const(0, np.int64), g.op("Squeeze", k, g.const([0], np.int64)), g.const(1, np.int64))
    rank = g.op("Sub", position, g.op("Gather", starts, b, axis=0))
    keep = g.op("Reshape", g.op("NonZero", g.op("Less", rank, g.const(nms.max_det, np.int64))), g.const([-1], np.int64))
    b, score, box, klass = (g.op("Gather", t, keep, axis=0) for t in (b, score, box, klass))
    if scale is not None:
        assert affine is not None and orig is not None
        per = g.op("Gather", affine, b, axis=0)  # (K, 4): sx, sy, tx, ty
        s = g.op("Concat", g.slice(per, 0, 2, 1), g.slice(per, 0, 2, 1), axis=1)
        t = g.op("Concat", g.slice(per, 2, 4, 1), g.slice(per, 2, 4, 1), axis=1)
        box = g.op("Div", g.op("Sub", box, t), s)
        if scale.clip:
            hw = g.op("Gather", orig, b, axis=0)  # (K, 2): height, width
            wh = g.op("Concat", g.slice(hw, 1, 2, 1), g.slice(hw, 0, 1, 1), axis=1)
            box = g.op("Min", g.op("Max", box, zero), g.op("Concat", wh, wh, axis=1))
    g.op("Identity", box, out="boxes")
    g.op("Identity", score, out="scores")
    g.op("Identity", klass, out="classes")
    g.op("Identity", b, out="batch_index")
    return ["boxes", "scores", "classes", "batch_index"]


def _classify_post(g: _Graph, logits: str, softmax: Softmax | None, topk: TopK) -> list[str]:
    x = g.op("Cast", logits, to=TensorProto.FLOAT)
    if softmax is not None:
        x = g.op("Softmax", x, axis=softmax.axis if softmax.axis < 0 else softmax.axis + 1)
    values, indices = g.op("TopK", x, g.const([topk.k], np.int64), outputs=2, axis=-1, largest=1, sorted=1)
    g.op("Identity", values, out="scores")
    g.op("Identity", indices, out="indices")
    return ["scores", "indices"]


# ---------------------------------------------------------------------------------------------- the fused model
def _dims(vi: onnx.ValueInfoProto) -> list[Any]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim]


def split_host_stages(
    preprocess: Sequence[Preprocessor], image_size: tuple[int, int] | None
) -> tuple[list[Preprocessor], list[Preprocessor]]:
    """Split preprocessing into ``(host, graph)`` stages: leading stages without an ONNX form (``LoadImage``,
    your own) always run on the host; geometry too when ``image_size`` is ``None``."""
    host: list[Preprocessor] = []
    rest = list(preprocess)
    fusable = (BgrToRgb, HwcToChw, Normalize, Cast) + (_GEOMETRY if image_size is not None else ())
    while rest and not isinstance(rest[0], fusable):
        host.append(rest.pop(0))
    if image_size is None and any(isinstance(s, _GEOMETRY) for s in rest):
        raise OptionError(
            "fuse: with image_size=None the geometric stages run on the host and must come first; "
            f"got {[type(s).__name__ for s in preprocess]}"
        )
    return host, rest


def fuse_model(
    model: onnx.ModelProto,
    preprocess: Sequence[Preprocessor],
    postprocess: Sequence[Postprocessor],
    *,
    image_size: tuple[int, int] | None = None,
    channels: int = 3,
    nms_mode: str = "per-class",
) -> onnx.ModelProto:
    """Build the fused ONNX graph: uint8 ``(N, H, W, C)`` images -> preprocessing -> ``model`` -> answers.

    Args:
        model: the model (one input).
        preprocess: the pipeline's preprocessing stages; leading host-only stages (``LoadImage``) are skipped
            (:class:`FusedPipeline` runs them), as are the geometric stages when ``image_size`` is ``None``.
        postprocess: ``YoloDecode, Nms[, ScaleBoxes]``, ``[Softmax,] TopK``, or nothing (the raw outputs).
        image_size: ``(height, width)`` of every input image: geometry runs in the graph. ``None``: the
            graph starts at the host-made canvas and takes ``affine``/``orig_shape`` inputs when boxes are
            scaled back.
        channels: channels of the input images.
        nms_mode: ``"per-class"``: one ``NonMaxSuppression`` class per object class, exact IoUs (the same
            answers as :class:`~amdinfer.postprocess.Nms`; fast on the CPU, slow on ORT's CUDA EP, which runs
            every (image, class) pair in turn); ``"offset"``: Ultralytics' trick, one NMS over boxes shifted
            by ``class * 7680`` (one pass; the shifted float32 coordinates lose bits, so a pair at the IoU
            threshold can flip); ``"host"``: the graph ends with the decoded candidates above the threshold
            and :class:`FusedPipeline` runs the pipeline's ``Nms`` and ``ScaleBoxes`` stages on them (the
            stage-by-stage answers exactly; for GPUs, where ORT's NMS kernel costs ~0.5 ms per image).

    Returns:
        The fused model, checked by ``onnx.checker``; opset raised to 13 when lower.

    Raises:
        OptionError: a stage or combination has no fused form (the message names it).

    Example:
        >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
        >>> from amdinfer.postprocess import Softmax, TopK
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = fuse_model(tiny_cnn(), [Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
        ...                [Softmax(), TopK(3)], image_size=(40, 50))
        >>> [(o.name, _dims(o)) for o in m.graph.output]
        [('scores', ['N', 3]), ('indices', ['N', 3])]
    """
    if nms_mode not in _NMS_MODES:
        raise OptionError(f"nms_mode: got {nms_mode!r}, expected one of {_NMS_MODES}")
    if (
        len(model.graph.input) - len({i.name for i in model.graph.initializer} & {i.name for i in model.graph.input})
        != 1
    ):
        raise OptionError("fuse: the model must have exactly one input")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < _MIN_OPSET:
        from onnx import version_converter

        model = version_converter.convert_version(model, _MIN_OPSET)
        opset = _MIN_OPSET
    model_input = next(i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    g = _Graph(opset)
    _, graph_stages = split_host_stages(preprocess, image_size)
    if image_size is not None:
        h, w = int(image_size[0]), int(image_size[1])
        inputs = [helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", h, w, channels])]
    else:
        inputs = [helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", "H", "W", channels])]
    pre = _Pre(g, "images", None if image_size is None else (int(image_size[0]), int(image_size[1])))
    for stage in graph_stages:
        pre.add(stage)
    pre.finish()
    want = helper.tensor_dtype_to_np_dtype(model_input.type.tensor_type.elem_type)
    if pre.dtype != want:
        raise OptionError(
            f"fuse: the preprocessing ends in {pre.dtype}, the model input {model_input.name!r} expects {want}; "
            "add Normalize/Cast so the stage-by-stage pipeline would feed the model too"
        )
    in_dims = _dims(model_input)
    if len(in_dims) == 4 and pre.hw is not None:
        model_hw = tuple(in_dims[2:4]) if pre.channel_axis == 1 else tuple(in_dims[1:3])
        if all(isinstance(d, int) for d in model_hw) and model_hw != pre.hw:
            raise OptionError(f"fuse: the preprocessing makes images of {pre.hw}, the model expects {model_hw}")
    body = onnx.GraphProto()
    body.CopyFrom(model.graph)
    pre_out = pre.x
    for node in body.node:
        for i, name in enumerate(node.input):
            if name == model_input.name:
                node.input[i] = pre_out
    outputs = list(body.output)
    post = list(postprocess)
    kinds = [type(s) for s in post]
    affine = orig = None
    host_post: list[str] = []
    if not post:
        out_names = [o.name for o in outputs]
    elif kinds in ([YoloDecode, Nms], [YoloDecode, Nms, ScaleBoxes]):
        decode, nms = cast(YoloDecode, post[0]), cast(Nms, post[1])
        scale = cast(ScaleBoxes, post[2]) if len(post) == 3 else None
        pred_vi = next((o for o in outputs if o.name == decode.output), outputs[0]) if decode.output else outputs[0]
        if decode.output is None and len(outputs) != 1:
            raise OptionError(f"fuse: the model has outputs {[o.name for o in outputs]}; give YoloDecode(output=...)")
        if scale is not None and nms_mode != "host":
            if image_size is not None:
                affine = g.const(np.asarray([pre.affine], np.float32), hint="affine")
                orig = g.const(np.asarray([image_size], np.float32), hint="orig_shape")
                affine = g.op(
                    "Expand",
                    affine,
                    g.op("Concat", g.op("Shape", "images", start=0, end=1), g.const([4], np.int64), axis=0),
                )
                orig = g.op(
                    "Expand",
                    orig,
                    g.op("Concat", g.op("Shape", "images", start=0, end=1), g.const([2], np.int64), axis=0),
                )
            else:
                inputs.append(helper.make_tensor_value_info("affine", TensorProto.FLOAT, ["N", 4]))
                inputs.append(helper.make_tensor_value_info("orig_shape", TensorProto.FLOAT, ["N", 2]))
                affine, orig = "affine", "orig_shape"
        if nms_mode == "host":
            affine = orig = None  # ScaleBoxes runs on the host
        out_names = _detect_post(
            g,
            pred_vi.name,
            _dims(pred_vi),
            decode,
            nms,
            None if nms_mode == "host" else scale,
            pre.hw,
            affine,
            orig,
            nms_mode,
        )
        host_post = [type(t).__name__ for t in post[1:]] if nms_mode == "host" else []
    elif kinds in ([TopK], [Softmax, TopK]):
        topk = cast(TopK, post[-1])
        softmax = cast(Softmax, post[0]) if len(post) == 2 else None
        chosen = topk.output or (softmax.output if softmax is not None else None)
        vi = next((o for o in outputs if o.name == chosen), None) if chosen else outputs[0]
        if vi is None or (chosen is None and len(outputs) != 1):
            raise OptionError(
                f"fuse: pick the class-score output with TopK(output=...); got {[o.name for o in outputs]}"
            )
        out_names = _classify_post(g, vi.name, softmax, topk)
    else:
        raise OptionError(
            f"fuse: postprocessing {[k.__name__ for k in kinds]} has no fused form; fusable: YoloDecode, Nms"
            "[, ScaleBoxes] or [Softmax,] TopK, or none"
        )
    nodes = _toposort(
        list(g.nodes[: _count_pre(g, pre_out)]) + list(body.node) + list(g.nodes[_count_pre(g, pre_out) :]),
        {i.name for i in inputs} | {t.name for t in body.initializer} | {t.name for t in g.inits},
    )
    outputs_vi = _output_infos(out_names, body, post[-1].k if post and isinstance(post[-1], TopK) else None)
    graph = helper.make_graph(
        nodes,
        f"{model.graph.name or 'model'}_fused",
        inputs,
        outputs_vi,
        initializer=list(body.initializer) + g.inits,
    )
    fused = helper.make_model(
        graph,
        opset_imports=[o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
        + [helper.make_opsetid("", opset)],
        ir_version=max(model.ir_version, 8),
        producer_name="amdinfer.fuse",
    )
    for prop in model.metadata_props:
        fused.metadata_props.append(prop)
    info = {"host_post": host_post, "affine": list(pre.affine), "input_shape": list(pre.hw) if pre.hw else None}
    fused.metadata_props.add(key=_META_KEY, value=json.dumps(info))
    onnx.checker.check_model(fused)
    return fused


def _toposort(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Nodes in an order where each comes after its inputs' producers (converters may append nodes)."""
    done = set(available) | {""}
    out: list[onnx.NodeProto] = []
    pending = nodes
    while pending:
        rest = []
        for node in pending:
            if all(i in done for i in node.input):
                out.append(node)
                done.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # subgraph-captured names or a cycle: keep the given order
            return out + rest
        pending = rest
    return out


def _count_pre(g: _Graph, pre_out: str) -> int:
    """How many builder nodes are preprocessing (those up to the one producing ``pre_out``)."""
    for i, node in enumerate(g.nodes):
        if pre_out in node.output:
            return i + 1
    return 0


def _output_infos(names: list[str], body: onnx.GraphProto, k: int | None) -> list[onnx.ValueInfoProto]:
    known = {o.name: o for o in body.output}
    specs: dict[str, tuple[int, list[Any] | None]] = {
        "boxes": (TensorProto.FLOAT, ["K", 4]),
        "scores": (TensorProto.FLOAT, None),
        "classes": (TensorProto.INT64, ["K"]),
        "batch_index": (TensorProto.INT64, ["K"]),
        "indices": (TensorProto.INT64, None),
    }
    out = []
    for name in names:
        if name in known:
            out.append(known[name])
            continue
        dtype, shape = specs[name]
        if shape is None:
            shape = ["K"] if "batch_index" in names else ["N", k]
        out.append(helper.make_tensor_value_info(name, dtype, shape))
    return out


# ---------------------------------------------------------------------------------------------- running it
def _labels(post: Sequence[Postprocessor]) -> tuple[str, ...] | None:
    for stage in post:
        labels = getattr(stage, "labels", None)
        if labels is not None:
            return tuple(labels)
    return None


class FusedPipeline:
    """A pipeline compiled into one ONNX graph: uint8 images in, final answers out, one engine call per batch.

    Built by :meth:`amdinfer.Pipeline.fuse`; see :mod:`amdinfer.fuse` for how images of different sizes
    enter. Results are the same types as the stage-by-stage pipeline's: :class:`~amdinfer.results.Detections`
    per image for a detector, :class:`~amdinfer.results.Classification` for a classifier, the raw outputs
    otherwise.

    Args:
        model: the fused model (:func:`fuse_model`).
        engine: an engine running it.
        host: preprocessing stages that run on the host first (decoding; geometry when ``image_size`` is
            ``None``).
        image_size: ``(height, width)`` every image must have, or ``None`` (host geometry).
        labels: class names for the results.
        owns_engine: close the engine with the pipeline.
        host_post: the ``Nms`` (and ``ScaleBoxes``) stages a model fused with ``nms_mode="host"`` leaves to the
            host; they run per image on the decoded candidates.
        staging: stack host batches into pinned (page-locked) buffers when the engine runs on a GPU and
            PyTorch is installed (:class:`~amdinfer.engines._staging.PinnedStaging`): the copy to the device
            is then one DMA at bus speed, at no extra host cost (the batch is stacked there anyway).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
        >>> from amdinfer.postprocess import Softmax, TopK
        >>> from amdinfer.testing.models import tiny_cnn
        >>> pipe = amdinfer.Pipeline(preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
        ...                          engine=tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"],
        ...                          postprocess=[Softmax(), TopK(3)])
        >>> with pipe.fuse() as fused:  # mixed sizes: Resize runs on the host
        ...     [r.indices.tolist() == fused(x).indices.tolist() for r, x in
        ...      zip(fused.run_batch([np.zeros((40, 50, 3), np.uint8)] * 2), [np.zeros((40, 50, 3), np.uint8)] * 2)]
        [True, True]
        >>> pipe.close()
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        engine: Any,
        host: Sequence[Preprocessor],
        *,
        image_size: tuple[int, int] | None,
        labels: Sequence[str] | None = None,
        owns_engine: bool = True,
        staging: bool = True,
        host_post: Sequence[Postprocessor] = (),
    ) -> None:
        self._model = model
        self._host_post = tuple(host_post)
        raw = next((p.value for p in model.metadata_props if p.key == _META_KEY), None)
        self._fuse_info: dict[str, Any] = json.loads(raw) if raw else {}
        if self._fuse_info.get("host_post") and not self._host_post:
            raise OptionError(
                f"host_post: the model leaves {self._fuse_info['host_post']} to the host; pass those stages"
            )
        self._staging = None
        if staging and getattr(getattr(engine, "info", None), "device", "cpu") != "cpu":
            from .engines._staging import PinnedStaging

            self._staging = PinnedStaging(depth=4)
        self._engine = engine
        self._host = tuple(host)
        self._image_size = image_size
        self._labels = None if labels is None else tuple(labels)
        self._owns_engine = owns_engine
        self._inputs = [i.name for i in engine.inputs]
        self._outputs = [o.name for o in engine.outputs]
        self._kind = (
            "detect"
            if "batch_index" in self._outputs
            else "classify"
            if self._outputs == ["scores", "indices"]
            else "raw"
        )

    @property
    def model(self) -> onnx.ModelProto:
        """The fused ONNX model."""
        return self._model

    @property
    def engine(self) -> Any:
        """The engine running the fused model."""
        return self._engine

    @property
    def image_size(self) -> tuple[int, int] | None:
        """``(height, width)`` the graph takes, or ``None`` when geometry runs on the host."""
        return self._image_size

    # ------------------------------------------------------------------ host side
    def _host_one(self, index: int, item: Any) -> Sample:
        sample = Sample.wrap(item)
        for stage in self._host:
            try:
                sample = stage(sample)
            except Exception as exc:
                raise StageError(
                    f"item {index}: preprocess {type(stage).__name__}: {type(exc).__name__}: {exc}"
                ) from exc
        data = sample.data
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 3:
            shown = f"{data.dtype}{data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
            raise InputError(f"item {index}: got {shown}, expected a uint8 (H, W, C) image for the fused graph")
        if self._image_size is not None and data.shape[:2] != tuple(self._image_size):
            raise InputError(
                f"item {index}: got an image of {data.shape[:2]}, expected {tuple(self._image_size)} (the size the "
                "pipeline was fused for; fuse with image_size=None to letterbox mixed sizes on the host)"
            )
        sample.meta.setdefault("orig_shape", (int(data.shape[0]), int(data.shape[1])))
        return sample

    def feeds(self, images: Iterable[Any]) -> tuple[dict[str, np.ndarray], list[Sample]]:
        """The engine feed for a batch of images (host stages applied) and the per-image samples.

        Example:
            >>> import numpy as np
            >>> from amdinfer.testing.models import tiny_cnn
            >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
            >>> m = fuse_model(tiny_cnn(), [Normalize(scale=1 / 255), HwcToChw()], [], image_size=(32, 32))
            >>> import amdinfer
            >>> f = FusedPipeline(m, amdinfer.load(m, providers=["CPUExecutionProvider"]), [], image_size=(32, 32))
            >>> feed, _ = f.feeds([np.zeros((32, 32, 3), np.uint8)] * 2)
            >>> {k: v.shape for k, v in feed.items()}
            {'images': (2, 32, 32, 3)}
            >>> f.close()
        """
        samples = [self._host_one(i, item) for i, item in enumerate(images)]
        if not samples:
            raise InputError("images: got no images, expected at least one")
        first = samples[0].data.shape
        for i, s in enumerate(samples):
            if s.data.shape != first:
                raise InputError(
                    f"item {i}: got a canvas of {s.data.shape}, item 0 has {first}; a batch needs one size "
                    "(use a fixed-size Letterbox/Resize)"
                )
        shape = (len(samples), *first)
        out = None if self._staging is None else self._staging.next(shape, np.uint8)
        feed = {"images": np.stack([s.data for s in samples], out=out)}
        if "affine" in self._inputs:
            feed["affine"] = np.asarray([s.meta.get("affine", (1.0, 1.0, 0.0, 0.0)) for s in samples], np.float32)
            feed["orig_shape"] = np.asarray([s.meta["orig_shape"] for s in samples], np.float32)
        return feed, samples

    def results(self, outputs: dict[str, np.ndarray], samples: Sequence[Sample]) -> list[Any]:
        """Split the fused graph's outputs into one result per image."""
        n = len(samples)
        if self._kind == "classify":
            return [
                Classification(
                    outputs["indices"][i],
                    outputs["scores"][i],
                    None if self._labels is None else [self._labels[int(j)] for j in outputs["indices"][i]],
                )
                for i in range(n)
            ]
        if self._kind == "raw":
            return [
                {k: v[i] for k, v in outputs.items()} if len(outputs) > 1 else next(iter(outputs.values()))[i]
                for i in range(n)
            ]
        batch = outputs["batch_index"]
        order = np.argsort(batch, kind="stable")
        bounds = np.searchsorted(batch[order], np.arange(n + 1))
        out = []
        for i in range(n):
            idx = order[bounds[i] : bounds[i + 1]]
            classes = outputs["classes"][idx]
            labels = None if self._labels is None else [self._labels[int(c)] for c in classes]
            meta = samples[i].meta
            if self._host_post:
                out.append(
                    self._finish(i, Detections(outputs["boxes"][idx], outputs["scores"][idx], classes, labels), meta)
                )
                continue
            shape = tuple(meta["orig_shape"])
            out.append(Detections(outputs["boxes"][idx], outputs["scores"][idx], classes, labels, shape))
        return out

    def _finish(self, index: int, candidates: Detections, meta: dict[str, Any]) -> Detections:
        """Run the host post stages (``Nms``, ``ScaleBoxes``) on one image's decoded candidates."""
        meta = dict(meta)
        if self._image_size is not None:  # geometry ran in the graph: its mapping is fixed
            meta["affine"] = tuple(self._fuse_info["affine"])
            meta["input_shape"] = tuple(self._fuse_info["input_shape"])
        shape = meta.get("input_shape")
        det = Detections(candidates.boxes, candidates.scores, candidates.classes, candidates.labels, shape)
        sample = Sample(det, meta)
        for stage in self._host_post:
            try:
                sample = stage(sample)
            except Exception as exc:
                raise StageError(
                    f"item {index}: postprocess {type(stage).__name__}: {type(exc).__name__}: {exc}"
                ) from exc
        return sample.data

    # ------------------------------------------------------------------ running
    def __call__(self, image: Any) -> Any:
        """Run one image. Example: see :class:`FusedPipeline`."""
        return self.run_batch([image])[0]

    def run_batch(self, images: Iterable[Any]) -> list[Any]:
        """Run a batch of images with one engine call; one result per image, in order.

        Raises:
            InputError: an image is not uint8 ``(H, W, C)``, or not of ``image_size``, or the canvases differ.
        """
        feed, samples = self.feeds(images)
        return self.results(self._engine.run(feed), samples)

    def map(self, items: Iterable[Any], *, batch_size: int = 1) -> Iterator[Any]:
        """Run a stream of images ``batch_size`` at a time through ``engine.run_many`` (which overlaps the
        host copies of the next batch with the current one on a GPU); results in input order.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> from amdinfer.preprocess import Normalize, HwcToChw
            >>> m = fuse_model(tiny_cnn(), [Normalize(scale=1 / 255), HwcToChw()], [], image_size=(32, 32))
            >>> f = FusedPipeline(m, amdinfer.load(m, providers=["CPUExecutionProvider"]), [], image_size=(32, 32))
            >>> [r.shape for r in f.map([np.zeros((32, 32, 3), np.uint8)] * 3, batch_size=2)]
            [(10,), (10,), (10,)]
            >>> f.close()
        """
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise OptionError(f"batch_size: got {batch_size!r}, expected an int >= 1")
        pending: list[list[Sample]] = []

        def batches() -> Iterator[dict[str, np.ndarray]]:
            chunk: list[Any] = []
            for item in items:
                chunk.append(item)
                if len(chunk) == batch_size:
                    feed, samples = self.feeds(chunk)
                    pending.append(samples)
                    yield feed
                    chunk = []
            if chunk:
                feed, samples = self.feeds(chunk)
                pending.append(samples)
                yield feed

        for out in self._engine.run_many(batches(), prefetch=2):
            yield from self.results(out, pending.pop(0))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Close the engine (when the fused pipeline loaded it)."""
        if self._staging is not None:
            self._staging.clear()
        if self._owns_engine:
            self._engine.close()

    def __enter__(self) -> FusedPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        host = ", ".join(repr(s) for s in self._host) or "none"
        return (
            f"FusedPipeline(image_size={self._image_size}, host=[{host}], "
            f"{len(self._model.graph.node)} nodes, engine={self._engine!r})"
        )
