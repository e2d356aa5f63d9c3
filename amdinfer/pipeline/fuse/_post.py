"""Post-processing stages as ONNX nodes: YOLO decode, NMS and box scaling; softmax and top-k."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from ...errors import OptionError
from ...postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode, detect_layout
from ._dense_nms import dense_nms
from ._graph import _MAX_CANDIDATES, _MAX_WH, _Graph


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
    max_candidates: int = _MAX_CANDIDATES,
) -> list[str]:
    """YOLO decode + class-aware NonMaxSuppression + max_det + rescale (or, with ``mode="host"``, decode and
    the confidence filter only: the candidates, in anchor order; with ``mode="dense"``, the NMS of
    :mod:`._dense_nms`); returns the output names."""
    class_offset = mode == "offset"
    cls, boxes = _decode_yolo(g, pred, pred_shape, decode, nms, input_hw)
    best = g.op("ArgMax", cls, axis=2, keepdims=1)  # (N, A, 1): the first best class, as np.argmax
    if mode == "host":
        return _host_candidates(g, cls, best, boxes, decode)
    if mode == "dense":
        scaling = None if scale is None else (scale, affine, orig)
        return _dense_post(g, cls, best, boxes, decode, nms, scaling, max_candidates)
    cls_t = g.op("Transpose", cls, perm=[0, 2, 1])  # (N, nc, A)
    nc = g.op("Squeeze", g.dims(cls_t, 1, 2), g.const([0], np.int64))
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
    b, score, box, klass = _keep_max_det(g, pred, nms.max_det, b, score, box, klass)
    if scale is not None:
        assert affine is not None and orig is not None
        box = _scale_back(g, box, b, affine, orig, scale.clip, zero)
    g.op("Identity", box, out="boxes")
    g.op("Identity", score, out="scores")
    g.op("Identity", klass, out="classes")
    g.op("Identity", b, out="batch_index")
    return ["boxes", "scores", "classes", "batch_index"]


def _dense_post(
    g: _Graph,
    cls: str,
    best: str,
    boxes: str,
    decode: YoloDecode,
    nms: Nms,
    scaling: tuple[ScaleBoxes, str | None, str | None] | None,
    max_candidates: int,
) -> list[str]:
    """``mode="dense"``: the confidence and class filters, :func:`._dense_nms.dense_nms`, the rescale."""
    best_score = g.reduce("ReduceMax", cls, [2], keepdims=0)  # (N, A)
    passed = g.op("Greater", best_score, g.const(decode.conf_threshold, np.float32))
    if nms.classes is not None:
        wanted = g.const(np.asarray(nms.classes, np.int64).reshape(1, 1, -1))
        hit = g.op("Cast", g.op("Equal", best, wanted), to=TensorProto.INT32)  # (N, A, k)
        passed = g.op("And", passed, g.op("Cast", g.reduce("ReduceMax", hit, [2], keepdims=0), to=TensorProto.BOOL))
    b, score, box, klass, count = dense_nms(g, best_score, best, boxes, passed, nms, max_candidates)
    if scaling is not None:
        scale, affine, orig = scaling
        assert affine is not None and orig is not None
        box = _scale_back(g, box, b, affine, orig, scale.clip, g.const(0.0, np.float32))
    for name, value in (("boxes", box), ("scores", score), ("classes", klass), ("batch_index", b)):
        g.op("Identity", value, out=name)
    g.op("Identity", count, out="candidates")
    return ["boxes", "scores", "classes", "batch_index", "candidates"]


def _decode_yolo(
    g: _Graph, pred: str, pred_shape: Sequence[Any], decode: YoloDecode, nms: Nms, input_hw: tuple[int, int] | None
) -> tuple[str, str]:
    """The class scores ``(N, A, nc)`` and corner boxes ``(N, A, 4)`` of a v8 or v5 YOLO output."""
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
    return cls, boxes


def _host_candidates(g: _Graph, cls: str, best: str, boxes: str, decode: YoloDecode) -> list[str]:
    """``nms_mode="host"``: every anchor's box, best score and class, and the mask of the candidates above the
    confidence threshold; :class:`FusedPipeline` takes the masked ones in anchor order (as ``YoloDecode`` gives
    them) and runs the pipeline's ``Nms``/``ScaleBoxes`` stages on them.

    Static shapes only (no ``NonZero``): MIGraphX pads data-dependent outputs to a fixed size with zeros.
    """
    best_score = g.reduce("ReduceMax", cls, [2], keepdims=0)  # (N, A)
    g.op("Greater", best_score, g.const(decode.conf_threshold, np.float32), out="candidate_mask")
    g.op("Identity", boxes, out="candidate_boxes")
    g.op("Identity", best_score, out="candidate_scores")
    g.op("Squeeze", best, g.const([2], np.int64), out="candidate_classes")
    return ["candidate_boxes", "candidate_scores", "candidate_classes", "candidate_mask"]


def _keep_max_det(
    g: _Graph, pred: str, max_det: int, b: str, score: str, box: str, klass: str
) -> tuple[str, str, str, str]:
    """The first ``max_det`` detections of each image (``b``: image index, sorted by image then score)."""
    # max_det per image: rank within the image = position - first position of the image.
    n = g.dims(pred, 0, 1)
    images = g.op("Range", g.const(0, np.int64), g.op("Squeeze", n, g.const([0], np.int64)), g.const(1, np.int64))
    before = g.op(
        "Less", g.op("Unsqueeze", b, g.const([1], np.int64)), g.op("Unsqueeze", images, g.const([0], np.int64))
    )
    starts = g.reduce("ReduceSum", g.op("Cast", before, to=TensorProto.INT64), [0], keepdims=0)  # (N,)
    k = g.op("Shape", b)
    position = g.op("Range", g.const(0, np.int64), g.op("Squeeze", k, g.const([0], np.int64)), g.const(1, np.int64))
    rank = g.op("Sub", position, g.op("Gather", starts, b, axis=0))
    keep = g.op("Reshape", g.op("NonZero", g.op("Less", rank, g.const(max_det, np.int64))), g.const([-1], np.int64))
    b, score, box, klass = (g.op("Gather", t, keep, axis=0) for t in (b, score, box, klass))
    return b, score, box, klass


def _scale_back(g: _Graph, box: str, b: str, affine: str, orig: str, clip: bool, zero: str) -> str:
    """Boxes mapped back to original-image pixels with each image's ``affine`` (clipped to ``orig`` shape)."""
    per = g.op("Gather", affine, b, axis=0)  # (K, 4): sx, sy, tx, ty
    s = g.op("Concat", g.slice(per, 0, 2, 1), g.slice(per, 0, 2, 1), axis=1)
    t = g.op("Concat", g.slice(per, 2, 4, 1), g.slice(per, 2, 4, 1), axis=1)
    box = g.op("Div", g.op("Sub", box, t), s)
    if clip:
        hw = g.op("Gather", orig, b, axis=0)  # (K, 2): height, width
        wh = g.op("Concat", g.slice(hw, 1, 2, 1), g.slice(hw, 0, 1, 1), axis=1)
        box = g.op("Min", g.op("Max", box, zero), g.op("Concat", wh, wh, axis=1))
    return box


def _classify_post(g: _Graph, logits: str, softmax: Softmax | None, topk: TopK) -> list[str]:
    x = g.op("Cast", logits, to=TensorProto.FLOAT)
    if softmax is not None:
        x = g.op("Softmax", x, axis=softmax.axis if softmax.axis < 0 else softmax.axis + 1)
    values, indices = g.op("TopK", x, g.const([topk.k], np.int64), outputs=2, axis=-1, largest=1, sorted=1)
    g.op("Identity", values, out="scores")
    g.op("Identity", indices, out="indices")
    return ["scores", "indices"]
