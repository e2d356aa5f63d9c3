"""The metrics behind :func:`~amdinfer.quantize.evaluate`: output errors, top-k and box-set agreement, verdicts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..reference import box_iou
from ..verify import max_abs_error, rms_error, topk_agreement
from ._report import AccuracyTolerance, LayerError, OutputError

__all__ = ["box_agreement"]

#: What a detector's ``boxes=`` callable returns for one image: ``(K, 4)`` xyxy boxes (one class),
#: ``(K, 6+)`` rows ``x1, y1, x2, y2, score, class`` (the Ultralytics NMS layout), or ``(boxes, classes)``.
BoxSet = Any


def _split_boxes(item: BoxSet, what: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(item, tuple) and len(item) == 2:
        boxes = np.asarray(item[0], np.float64).reshape(-1, 4)
        classes = np.asarray(item[1]).reshape(-1)
    else:
        arr = np.asarray(item, np.float64)
        if arr.size == 0:
            return np.zeros((0, 4)), np.zeros(0)
        if arr.ndim != 2 or (arr.shape[1] not in (4,) and arr.shape[1] < 6):
            raise InputError(f"{what}: got boxes of shape {arr.shape}, expected (K, 4), (K, 6+) or (boxes, classes)")
        boxes = arr[:, :4]
        classes = arr[:, 5] if arr.shape[1] >= 6 else np.zeros(len(arr))
    if len(boxes) != len(classes):
        raise InputError(f"{what}: {len(boxes)} boxes but {len(classes)} classes")
    return boxes, classes


def box_agreement(
    quantized: Sequence[BoxSet], reference: Sequence[BoxSet], iou: float = 0.5
) -> tuple[float, float, float, int]:
    """Precision, recall and F1 of the quantized box sets against the reference ones, and the reference count.

    Boxes match one to one when they have the same class and IoU >= ``iou``, greedily by IoU. Counts are
    summed over images (micro average). Two empty sets agree fully.

    Example:
        >>> q = [np.array([[0, 0, 10, 10], [20, 20, 30, 30]])]
        >>> r = [np.array([[1, 1, 10, 10]])]
        >>> box_agreement(q, r)
        (0.5, 1.0, 0.6666666666666666, 1)
    """
    if len(quantized) != len(reference):
        raise InputError(f"box_agreement: {len(quantized)} quantized images but {len(reference)} reference images")
    matched = n_q = n_r = 0
    for i, (q, r) in enumerate(zip(quantized, reference)):
        qb, qc = _split_boxes(q, f"quantized boxes[{i}]")
        rb, rc = _split_boxes(r, f"reference boxes[{i}]")
        n_q += len(qb)
        n_r += len(rb)
        if not len(qb) or not len(rb):
            continue
        m = box_iou(qb, rb).astype(np.float64)
        m[qc[:, None] != rc[None, :]] = 0.0
        qi, ri = np.nonzero(m >= iou)
        order = np.argsort(-m[qi, ri], kind="stable")
        used_q: set[int] = set()
        used_r: set[int] = set()
        for k in order:
            a, b = int(qi[k]), int(ri[k])
            if a not in used_q and b not in used_r:
                used_q.add(a)
                used_r.add(b)
        matched += len(used_q)
    if n_q == 0 and n_r == 0:
        return 1.0, 1.0, 1.0, 0
    precision = matched / n_q if n_q else 0.0
    recall = matched / n_r if n_r else 0.0
    f1 = 2 * precision * recall / (precision + recall) if matched else 0.0
    return precision, recall, f1, n_r


def _concat(outs: Sequence[Mapping[str, np.ndarray]], name: str) -> np.ndarray:
    arrays = [np.asarray(o[name]) for o in outs]
    try:
        return np.concatenate([a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1) for a in arrays], axis=0)
    except ValueError:  # dynamic shapes that differ between samples
        return np.concatenate([a.ravel() for a in arrays])


def _detect_task(outputs: Sequence[Mapping[str, np.ndarray]], boxes: Any) -> str:
    if boxes is not None:
        return "detector"
    first = outputs[0]
    if len(first) == 1:
        arr = np.asarray(next(iter(first.values())))
        if arr.ndim == 2 and arr.shape[1] >= 2 and arr.dtype.kind == "f":
            return "classifier"
    return "generic"


def _output_errors(
    q: Sequence[Mapping[str, np.ndarray]], r: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, OutputError]:
    errors = {}
    for name in r[0]:
        a, b = _concat(q, name), _concat(r, name)
        if a.shape != b.shape:
            raise InputError(f"output {name!r}: quantized shape {a.shape} differs from the reference's {b.shape}")
        af, bf = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
        nonfinite = int(np.count_nonzero(~np.isfinite(af) & np.isfinite(bf)))
        errors[name] = OutputError(name=name, rms=rms_error(a, b), max_abs=max_abs_error(a, b), nonfinite=nonfinite)
    return errors


def _classifier_scores(outs: Sequence[Mapping[str, np.ndarray]]) -> np.ndarray:
    name = next(iter(outs[0]))
    return np.concatenate([np.asarray(o[name]).reshape(np.asarray(o[name]).shape[0], -1) for o in outs], axis=0)


def _collect_boxes(
    outs: Sequence[Mapping[str, np.ndarray]], boxes: Callable[[dict[str, np.ndarray]], Any]
) -> list[Any]:
    found: list[Any] = []
    for i, o in enumerate(outs):
        res = boxes(dict(o))
        if isinstance(res, np.ndarray) and res.ndim == 2:
            res = [res]  # one image per batch
        try:
            found.extend(list(res))
        except TypeError:
            raise InputError(f"boxes(outputs[{i}]): got {type(res).__name__}, expected one box set per image") from None
    return found


def _task_metrics(
    task: str,
    q: Sequence[Mapping[str, np.ndarray]],
    r: Sequence[Mapping[str, np.ndarray]],
    boxes: Any,
    iou: float,
) -> dict[str, Any]:
    if task == "classifier":
        a, b = _classifier_scores(q), _classifier_scores(r)
        return {
            "top1": topk_agreement(a, b, k=1),
            "top5": topk_agreement(a, b, k=5) if a.shape[-1] >= 5 else None,
        }
    if task == "detector":
        p, rc, f1, n = box_agreement(_collect_boxes(q, boxes), _collect_boxes(r, boxes), iou=iou)
        return {"box_precision": p, "box_recall": rc, "box_f1": f1, "boxes_reference": n}
    return {}


def _verdict(metrics: Mapping[str, Any], outputs: Mapping[str, OutputError], tol: AccuracyTolerance) -> list[str]:
    failures = []
    for key, label in (("top1", "top-1 agreement"), ("top5", "top-5 overlap"), ("box_f1", "box F1")):
        bound = getattr(tol, key)
        value = metrics.get(key)
        if bound is not None and value is not None and value < bound:
            failures.append(f"{label} {value:.4f} < {bound:.4f}")
    for name, e in outputs.items():
        if tol.rms is not None and not e.rms <= tol.rms:
            failures.append(f"output {name!r}: rms {e.rms:.3g} > {tol.rms:.3g}")
        if e.nonfinite:
            failures.append(f"output {name!r}: {e.nonfinite} NaN/Inf values where the float model is finite")
    return failures


def _layer_errors(q_engine: Any, r_engine: Any, feed: Mapping[str, np.ndarray]) -> list[LayerError]:
    for e, what in ((q_engine, "quantized"), (r_engine, "reference")):
        if not getattr(e, "supports_all_outputs", False):
            raise OptionError(
                f"per_layer=True: the {what} engine ({type(e).__name__}) cannot return intermediate tensors; "
                "use the ORT or reference backend"
            )
    q_all = q_engine.run(dict(feed), outputs="all")
    r_all = r_engine.run(dict(feed), outputs="all")
    out = []
    for node in r_engine.model.proto.graph.node:
        for t in node.output:
            if not t or t not in q_all or t not in r_all:
                continue
            a, b = np.asarray(q_all[t]), np.asarray(r_all[t])
            if a.shape != b.shape or a.dtype.kind not in "fiu" or b.dtype.kind != "f":
                continue
            out.append(LayerError(tensor=t, node=node.name, op_type=node.op_type, rms=rms_error(a, b)))
    return out
