"""Greedy NMS for a whole batch as dense tensor ops (``nms_mode="dense"``): exact, and no per-image host syncs.

ONNX Runtime's CUDA ``NonMaxSuppression`` runs each (image, class) pair in turn with a host synchronisation
each (~31 ms per batch of 64 on an H200). This form keeps the whole batch on the device instead:

1. per image, the candidates above the confidence threshold, best first (``TopK``; ties: lower anchor first,
   as the stable sort of :class:`~amdinfer.postprocess.Nms`), at most ``k = min(max over the batch of the
   candidate count, Nms.max_nms, max_candidates)`` of them;
2. ``S[n, j, i]``: candidate ``j`` ranks before ``i``, may suppress it (same class unless agnostic) and their
   IoU is above the threshold, with :func:`amdinfer.reference.nms`'s float32 arithmetic (the class-offset
   boxes when ``Nms(class_offset=...)``);
3. the greedy result is the unique ``keep`` with ``keep[i] = valid[i] and no kept j suppresses i``. A ``Loop``
   iterates ``keep <- valid and not (keep @ S)`` from ``keep = valid`` until it stops changing: after ``t``
   rounds every candidate whose chain of possible suppressors is shorter than ``t`` is final, and a fixed
   point is the greedy answer (it satisfies the recursion, whose solution is unique). Chains are short in
   practice (a few rounds); ``k + 1`` rounds bound it;
4. the first ``max_det`` kept per image, in score order.

The IoU matrix is ``k x k`` per image, so ``k`` is capped by ``max_candidates``: an image with more candidates
than that above the threshold keeps only its best ``max_candidates`` (the graph reports each image's candidate
count in ``candidates`` and :class:`~amdinfer.pipeline.fuse.FusedPipeline` logs a warning when the cap bit).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from ...postprocess import Nms
from ...reference._nms import _threshold_below
from ._graph import _Graph


def dense_nms(
    g: _Graph,
    best_score: str,
    best: str,
    boxes: str,
    passed: str,
    nms: Nms,
    max_candidates: int,
) -> tuple[str, str, str, str, str]:
    """Greedy class-aware NMS + ``max_det`` over a batch.

    Args:
        g: the graph builder.
        best_score: ``(N, A)`` float32 best class score per anchor.
        best: ``(N, A, 1)`` int64 best class per anchor.
        boxes: ``(N, A, 4)`` float32 corner boxes.
        passed: ``(N, A)`` bool, the candidates (above the threshold, in the class filter).
        nms: the pipeline's ``Nms`` stage (threshold, ``max_det``, ``max_nms``, class arithmetic).
        max_candidates: most candidates per image that enter the IoU matrix.

    Returns:
        ``batch_index (K,)``, ``scores (K,)``, ``boxes (K, 4)``, ``classes (K,)``, sorted by image then score,
        and ``candidates (N,)``, each image's candidate count.
    """
    i64 = np.int64
    count = g.reduce("ReduceSum", g.op("Cast", passed, to=TensorProto.INT64), [1], keepdims=0)  # (N,)
    k = g.op("Min", g.reduce("ReduceMax", count, [0], keepdims=1), g.const([min(nms.max_nms, max_candidates)], i64))
    k = g.op("Max", k, g.const([1], i64))  # TopK needs k >= 1; an empty batch keeps nothing below
    masked = g.op("Where", passed, best_score, g.const(-1.0, np.float32))
    score, idx = g.op("TopK", masked, k, outputs=2, axis=1, largest=1, sorted=1)  # (N, k): best first
    # GatherND with batch_dims=1 rather than GatherElements, whose onnx.reference kernel breaks past 64 anchors
    at = g.op("Unsqueeze", idx, g.const([2], i64))  # (N, k, 1)
    valid = g.op("GatherND", passed, at, batch_dims=1)  # (N, k) bool
    klass = g.op("GatherND", g.op("Squeeze", best, g.const([2], i64)), at, batch_dims=1)  # (N, k) int64
    box = g.op("GatherND", boxes, at, batch_dims=1)  # (N, k, 4)
    nms_box = box
    if nms.class_offset is not None and not nms.agnostic:
        shift = g.op("Mul", g.op("Cast", klass, to=TensorProto.FLOAT), g.const(nms.class_offset, np.float32))
        nms_box = g.op("Add", box, g.op("Unsqueeze", shift, g.const([2], i64)))
    over = _iou_above(g, nms_box, float(_threshold_below(nms.iou_threshold, np.dtype(np.float32))))
    positions = g.op("Range", g.const(0, i64), g.op("Squeeze", k, g.const([0], i64)), g.const(1, i64))
    rows, cols = (g.op("Unsqueeze", positions, g.const([axis], i64)) for axis in (1, 0))
    before = g.op("Less", rows, cols)  # (k, k): position j (rows) before position i (columns)
    sup = g.op("And", over, g.op("Unsqueeze", before, g.const([0], i64)))  # (N, k, k): j (rows) may suppress i
    if nms.class_offset is None and not nms.agnostic:
        same = g.op("Equal", g.op("Unsqueeze", klass, g.const([2], i64)), g.op("Unsqueeze", klass, g.const([1], i64)))
        sup = g.op("And", sup, same)
    keep = _fixed_point(g, g.op("Cast", sup, to=TensorProto.FLOAT), g.op("Cast", valid, to=TensorProto.FLOAT), k)
    kept = g.op("Cast", keep, to=TensorProto.BOOL)
    rank = g.op("CumSum", g.op("Cast", kept, to=TensorProto.INT64), g.const(1, i64))
    kept = g.op("And", kept, g.op("LessOrEqual", rank, g.const(nms.max_det, i64)))
    sel = g.op("Transpose", g.op("NonZero", kept), perm=[1, 0])  # (K, 2): image, position; image then score order
    b = g.op("Reshape", g.slice(sel, 0, 1, 1), g.const([-1], i64))
    return b, g.op("GatherND", score, sel), g.op("GatherND", box, sel), g.op("GatherND", klass, sel), count


def _iou_above(g: _Graph, box: str, threshold: float) -> str:
    """``(N, k, k)`` bool: IoU of boxes ``j`` (rows) and ``i`` (columns) above ``threshold``, computed as
    :func:`amdinfer.reference.nms` does (``min - max`` edges, clamped, ``inter / (area_j + area_i - inter)``)."""
    rows = [g.slice(box, c, c + 1, 2) for c in range(4)]  # (N, k, 1): x1, y1, x2, y2 of j
    cols = [g.op("Transpose", r, perm=[0, 2, 1]) for r in rows]  # (N, 1, k): of i
    zero = g.const(0.0, np.float32)
    w = g.op("Max", g.op("Sub", g.op("Min", rows[2], cols[2]), g.op("Max", rows[0], cols[0])), zero)
    h = g.op("Max", g.op("Sub", g.op("Min", rows[3], cols[3]), g.op("Max", rows[1], cols[1])), zero)
    inter = g.op("Mul", w, h)
    area = g.op("Mul", g.op("Sub", rows[2], rows[0]), g.op("Sub", rows[3], rows[1]))  # (N, k, 1)
    union = g.op("Sub", g.op("Add", area, g.op("Transpose", area, perm=[0, 2, 1])), inter)
    return g.op("Greater", g.op("Div", inter, union), g.const(threshold, np.float32))  # 0/0 = nan: never above


def _fixed_point(g: _Graph, sup: str, valid: str, k: str) -> str:
    """The ``Loop`` of step 3: ``keep <- valid * (keep @ sup == 0)`` until unchanged (at most ``k + 1`` rounds)."""
    body = _Graph(g.opset, prefix=f"{g.prefix}nms_loop/")
    it, cond_in, keep_in = (body._name(n) for n in ("iter", "cond", "keep"))
    hits = body.op("MatMul", body.op("Unsqueeze", keep_in, body.const([1], np.int64)), sup)  # (N, 1, k)
    hit = body.op("Squeeze", hits, body.const([1], np.int64))
    keep = body.op("Where", body.op("Greater", hit, body.const(0.0, np.float32)), body.const(0.0, np.float32), valid)
    changed = body.reduce("ReduceMax", body.op("Abs", body.op("Sub", keep, keep_in)), [0, 1], keepdims=0)
    body.op("Greater", changed, body.const(0.0, np.float32), out=f"{body.prefix}cond_out")
    body.op("Identity", keep, out=f"{body.prefix}keep_out")
    graph = helper.make_graph(
        body.nodes,
        f"{body.prefix}body",
        [
            helper.make_tensor_value_info(it, TensorProto.INT64, []),
            helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
            helper.make_tensor_value_info(keep_in, TensorProto.FLOAT, ["N", "k"]),
        ],
        [
            helper.make_tensor_value_info(f"{body.prefix}cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info(f"{body.prefix}keep_out", TensorProto.FLOAT, ["N", "k"]),
        ],
        initializer=body.inits,
    )
    rounds = g.op("Add", g.op("Squeeze", k, g.const([0], np.int64)), g.const(1, np.int64))
    return g.op("Loop", rounds, g.const(True, np.bool_), valid, body=graph)
