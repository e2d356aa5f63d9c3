"""The ``classify``, ``embed``, ``ocr`` and ``generic`` tasks, and the channel groups of mixed-scale outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ._task_base import TaskMetric, _cosines, _float_outputs, _pick_output, _rows

__all__ = [
    "ClassifyTask",
    "EmbedTask",
    "GenericTask",
    "GroupError",
    "OcrTask",
    "character_error_rate",
    "group_errors",
    "group_views",
    "scale_groups",
]

#: Channels whose magnitudes span more than this factor are judged in groups (see :func:`scale_groups`).
SCALE_SPREAD = 100.0
#: A mixed-scale output splits at its widest gap between sorted channel magnitudes when it exceeds this factor.
SCALE_GAP = 10.0


def _ranges(idx: np.ndarray) -> str:
    runs, start, prev = [], int(idx[0]), int(idx[0])
    for i in idx[1:]:
        if int(i) != prev + 1:
            runs.append((start, prev))
            start = int(i)
        prev = int(i)
    runs.append((start, prev))
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def scale_groups(reference: np.ndarray) -> list[tuple[str, int, np.ndarray]]:
    """Channel groups of one output that each get judged on their own scale: ``[(label, axis, channels)]``.

    Only outputs of 3 or more dimensions (channels at each position: detection heads, maps) are grouped; a
    2-D ``(N, features)`` output (logits, an embedding) is one kind of value, however its ranges differ. The
    channel axis is the shortest non-batch axis (YOLOv8's ``(N, 4 + nc, A)``: axis 1; YOLOv5's
    ``(N, A, 5 + nc)``: axis 2). When the channels' magnitudes (``max |x|`` over the other axes) span more
    than :data:`SCALE_SPREAD`, they split in two at the widest gap between sorted magnitudes (if it is wider
    than :data:`SCALE_GAP`): box coordinates (0-1024) and class scores (0-1) become two groups, while a
    class that rarely fires stays with the other scores. Otherwise the whole output is one group, labelled
    ``""``.

    Example:
        >>> x = np.zeros((1, 7, 100)); x[0, :4] = 500.0; x[0, 4:] = 0.5; x[0, 6] = 0.01
        >>> [(label, axis, ch.tolist()) for label, axis, ch in scale_groups(x)]
        [('ch 0-3', 1, [0, 1, 2, 3]), ('ch 4-6', 1, [4, 5, 6])]
    """
    a = np.asarray(reference)
    whole = [("", 0, np.arange(0))]
    if a.ndim < 3 or a.dtype.kind != "f" or a.size == 0:
        return whole
    axis = 1 + int(np.argmin(a.shape[1:]))
    if a.shape[axis] < 2 or a.shape[axis] > 4096:
        return whole
    moved = np.moveaxis(np.abs(np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)), axis, 0)
    mag = moved.reshape(moved.shape[0], -1).max(axis=1)
    live = np.sort(mag[mag > 0])[::-1]
    if live.size < 2 or live[0] / live[-1] <= SCALE_SPREAD:
        return whole
    gaps = live[:-1] / live[1:]
    cut = int(np.argmax(gaps))
    if gaps[cut] <= SCALE_GAP:
        return whole
    high = np.nonzero(mag >= live[cut])[0]
    low = np.nonzero(mag < live[cut])[0]  # channels that are all zero join the small-scale group
    return sorted(((f"ch {_ranges(g)}", axis, g) for g in (high, low)), key=lambda t: int(t[2][0]))


def group_views(q: np.ndarray, r: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``[(label, quantized rows, reference rows)]`` for each scale group of the reference (rows: batch items)."""
    out: list[tuple[str, np.ndarray, np.ndarray]] = []
    for label, axis, idx in scale_groups(r):
        if not label:
            out.append((label, q, r))
        else:
            out.append((label, np.take(q, idx, axis=axis), np.take(r, idx, axis=axis)))
    return out


# ---------------------------------------------------------------------------------------------- classify
def _ranked(row: np.ndarray) -> np.ndarray:
    x = np.nan_to_num(np.asarray(row, np.float64).ravel(), nan=-np.inf)
    return np.argsort(-x, kind="stable")  # ties go to the lower index, NaN ranks lowest


class _RowsTask(TaskMetric):
    """A task whose answers are the rows of one 2-D output (``output=``, else the only float one)."""

    def __init__(self, *, output: str | None = None) -> None:
        self.output = output

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        name = _pick_output(outputs, self.output, self.name, 2)
        return [row for o in outputs for row in _rows(o[name])]


class ClassifyTask(_RowsTask):
    """Class scores, the float model's top class the truth: ``top1`` (the quantized top class is the same)
    and ``top5`` (the float top class is among the quantized five best; ``None`` below 5 classes).

    Args:
        output: the class-score output (default: the first 2-D float output).

    Example:
        >>> q = [np.array([0.1, 0.7, 0.2]), np.array([0.5, 0.4, 0.1])]
        >>> f = [np.array([0.1, 0.8, 0.1]), np.array([0.3, 0.6, 0.1])]
        >>> ClassifyTask().compute(q, f)
        {'top1': 0.5, 'top5': None}
    """

    name = "classify"
    metrics = ("top1", "top5")

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        if not reference:
            return {"top1": 1.0, "top5": None}
        top1 = top5 = 0
        classes = min(np.asarray(r).size for r in reference)
        for q, r in zip(quantized, reference):
            truth = _ranked(r)[0]
            ranked = _ranked(q)
            top1 += int(ranked[0] == truth)
            top5 += int(truth in ranked[:5])
        n = len(reference)
        return {"top1": top1 / n, "top5": top5 / n if classes >= 5 else None}


# ---------------------------------------------------------------------------------------------- embed
class EmbedTask(_RowsTask):
    """Embeddings: ``cosine`` (mean row cosine with the float embedding) and ``retrieval_top1`` (each item's
    nearest other item, by cosine among the quantized embeddings, is the one the float embeddings give).

    Args:
        output: the embedding output (default: the first 2-D float output, else the first float output with
            each item flattened).

    Example:
        >>> f = [np.array([1.0, 0.0]), np.array([0.9, 0.1]), np.array([0.0, 1.0])]
        >>> q = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), np.array([0.1, 0.9])]
        >>> {k: round(v, 3) for k, v in EmbedTask().compute(q, f).items()}
        {'cosine': 0.701, 'retrieval_top1': 0.333}
    """

    name = "embed"
    metrics = ("cosine", "retrieval_top1")

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        if not reference:
            return {"cosine": 1.0, "retrieval_top1": None}
        q = np.stack([np.asarray(a, np.float64).ravel() for a in quantized])
        f = np.stack([np.asarray(a, np.float64).ravel() for a in reference])
        cosine = float(_cosines(q, f).mean())
        if len(f) < 3:
            return {"cosine": cosine, "retrieval_top1": None}
        return {"cosine": cosine, "retrieval_top1": float(np.mean(_nearest(q) == _nearest(f)))}


def _nearest(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.nan_to_num(x / np.where(norm == 0, 1.0, norm))
    sim = u @ u.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1)


# ---------------------------------------------------------------------------------------------- ocr
def _edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def character_error_rate(quantized: Sequence[Sequence[Any]], reference: Sequence[Sequence[Any]]) -> float:
    """Levenshtein edits (insertions, deletions, substitutions) over the reference's characters, summed over
    lines. Lines are strings or sequences of token ids; two empty sets give 0.

    Example:
        >>> character_error_rate(["hallo", "world"], ["hello", "world"])
        0.1
    """
    edits = sum(_edit_distance(q, r) for q, r in zip(quantized, reference))
    chars = sum(len(r) for r in reference)
    if chars == 0:
        return 0.0 if edits == 0 else 1.0
    return edits / chars


def _is_page(answer: Any) -> bool:
    return hasattr(answer, "texts") and hasattr(answer, "boxes")


def _ctc(row: np.ndarray) -> tuple[int, ...]:
    ids = np.argmax(np.asarray(row), axis=-1) if np.asarray(row).ndim == 2 else np.asarray(row).ravel()
    out, prev = [], -1
    for i in ids.tolist():
        if i != prev and i != 0:
            out.append(int(i))
        prev = i
    return tuple(out)


class OcrTask(TaskMetric):
    """Text: ``cer`` (character error rate against the float text) and ``lines`` (share of float lines read
    identically).

    Answers are either one text line per item (a string or a token sequence; from a recogniser's raw
    ``(N, T, classes)`` output, greedy CTC: argmax, repeats merged, blank 0 dropped) or one page per item (a
    :class:`~amdinfer.results.TextLines` of :func:`amdinfer.ocr`). Pages: the lines match one to one by box
    IoU >= ``iou`` (greedily); a float line without a match counts all its characters as errors, a quantized
    line without one all of its own.

    Args:
        output: the recogniser output (default: the first 3-D float output).
        iou: the box IoU at which lines of two pages match.

    Example:
        >>> OcrTask().compute(["hallo", "world"], ["hello", "world"])
        {'cer': 0.1, 'lines': 0.5}
    """

    name = "ocr"
    metrics = ("cer", "lines")
    unit = "lines"
    min_answers = 20
    collapses = True

    def __init__(self, *, output: str | None = None, iou: float = 0.5) -> None:
        if not isinstance(iou, (int, float)) or isinstance(iou, bool) or not 0.0 < iou <= 1.0:
            raise OptionError(f"iou: got {iou!r}, expected a float in (0, 1]")
        self.output, self.iou = output, float(iou)

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        name = _pick_output(outputs, self.output, self.name, 3)
        found: list[Any] = []
        for o in outputs:
            x = np.asarray(o[name])
            if x.ndim != 3:
                raise OptionError(
                    f"task 'ocr': output {name!r} of shape {x.shape} is not a recogniser's (N, T, classes); "
                    "judge the cascade's pages (OcrTask().judge(quantized_pages, float_pages))"
                )
            found.extend(_ctc(row) for row in x)
        return found

    def count(self, answers: Sequence[Any]) -> int:
        return sum(len(a.texts) if _is_page(a) else int(len(a) > 0) for a in answers)

    def _pairs(self, quantized: Sequence[Any], reference: Sequence[Any]) -> tuple[list[Any], list[Any], int]:
        """Matched (quantized, float) texts, unmatched ones paired with an empty line, and the float line count."""
        qs: list[Any] = []
        rs: list[Any] = []
        n_float = 0
        for q, r in zip(quantized, reference):
            if not _is_page(r):
                qs.append(q)
                rs.append(r)
                n_float += 1
                continue
            qt, rt = [t or "" for t in (q.texts or [])], [t or "" for t in (r.texts or [])]
            n_float += len(rt)
            pairs = _match_lines(np.asarray(q.boxes).reshape(-1, 4), np.asarray(r.boxes).reshape(-1, 4), self.iou)
            for a, b in pairs:
                qs.append(qt[a])
                rs.append(rt[b])
            for b in sorted(set(range(len(rt))) - {b for _, b in pairs}):
                qs.append("")
                rs.append(rt[b])
            for a in sorted(set(range(len(qt))) - {a for a, _ in pairs}):
                qs.append(qt[a])
                rs.append("")
        return qs, rs, n_float

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        qs, rs, n_float = self._pairs(quantized, reference)
        edits = sum(_edit_distance(q, r) for q, r in zip(qs, rs))
        chars = sum(len(r) for r in rs)
        cer = (0.0 if edits == 0 else 1.0) if chars == 0 else edits / chars
        same = sum(1 for q, r in zip(qs, rs) if len(r) and tuple(q) == tuple(r))
        float_lines = sum(1 for r in rs if len(r)) if n_float else 0
        return {"cer": cer, "lines": same / float_lines if float_lines else 1.0}


def _match_lines(qb: np.ndarray, rb: np.ndarray, iou: float) -> list[tuple[int, int]]:
    from ..reference import box_iou

    if not len(qb) or not len(rb):
        return []
    m = box_iou(qb.astype(np.float64), rb.astype(np.float64))
    qi, ri = np.nonzero(m >= iou)
    order = np.argsort(-m[qi, ri], kind="stable")
    used_q: set[int] = set()
    used_r: set[int] = set()
    pairs = []
    for k in order:
        a, b = int(qi[k]), int(ri[k])
        if a not in used_q and b not in used_r:
            used_q.add(a)
            used_r.add(b)
            pairs.append((a, b))
    return pairs


# ---------------------------------------------------------------------------------------------- generic
@dataclass(frozen=True)
class GroupError:
    """One output, or one channel group of it (``group`` names the channels), judged on its own scale.

    Example:
        >>> GroupError("output0", "ch 4-14", 0.02, 0.0).label
        'output0[ch 4-14]'
    """

    output: str
    group: str
    rms: float
    cosine: float
    rows: int = 0

    @property
    def label(self) -> str:
        """``name`` or ``name[ch a-b]``."""
        return f"{self.output}[{self.group}]" if self.group else self.output


def group_errors(
    quantized: Sequence[Mapping[str, np.ndarray]], reference: Sequence[Mapping[str, np.ndarray]]
) -> list[GroupError]:
    """Each float output's (or channel group's, :func:`scale_groups`) RMS on its own range and mean row cosine.

    Samples are stacked along axis 0 (one row per batch item); where their shapes differ (dynamic axes),
    each item is one row and the output is one group.

    Raises:
        InputError: a quantized output's shape differs from the float one's.
    """
    from ..reference import rms_error

    found = []
    for name in _float_outputs(reference[0]):
        qa = [np.asarray(q[name]) for q in quantized]
        ra = [np.asarray(r[name]) for r in reference]
        for i, (a, b) in enumerate(zip(qa, ra)):
            if a.shape != b.shape:
                raise InputError(
                    f"output {name!r}, sample {i}: quantized shape {a.shape} differs from the float model's {b.shape}"
                )
        try:
            q_all = np.concatenate([a if a.ndim else a.reshape(1) for a in qa], axis=0)
            r_all = np.concatenate([b if b.ndim else b.reshape(1) for b in ra], axis=0)
        except ValueError:  # dynamic shapes that differ between samples
            cos = np.concatenate([_cosines(_rows(a), _rows(b)) for a, b in zip(qa, ra)])
            rms = rms_error(np.concatenate([a.ravel() for a in qa]), np.concatenate([b.ravel() for b in ra]))
            found.append(GroupError(name, "", rms, float(cos.mean()), int(cos.size)))
            continue
        for label, a, b in group_views(q_all, r_all):
            cos = _cosines(_rows(a), _rows(b))
            found.append(GroupError(name, label, rms_error(a, b), float(cos.mean()), int(cos.size)))
    return found


class GenericTask(TaskMetric):
    """Tensors: each float output, or each channel group of an output whose channels have very different
    ranges (:func:`scale_groups`), judged on its own scale; ``cosine`` is the worst mean row cosine and
    ``rms`` the worst RMS (:func:`amdinfer.verify.rms_error`, scale-free) over them.

    Example:
        >>> q = [{"y": np.ones((8, 4))}]; f = [{"y": np.ones((8, 4))}]
        >>> GenericTask().judge(GenericTask().answers(q), GenericTask().answers(f)).verdict
        'PASS'
    """

    name = "generic"
    metrics = ("cosine", "rms")

    def answers(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        return [dict(o) for o in outputs]

    def count(self, answers: Sequence[Any]) -> int:
        return self.items(answers)

    def items(self, answers: Sequence[Any]) -> int:
        return sum(_items(a) for a in answers)  # batch rows, not batches

    def compute(self, quantized: Sequence[Any], reference: Sequence[Any]) -> dict[str, float | None]:
        errors = group_errors(quantized, reference)
        if not errors:
            return {"cosine": None, "rms": None}
        return {"cosine": min(e.cosine for e in errors), "rms": max(e.rms for e in errors)}


def _items(out: Mapping[str, np.ndarray]) -> int:
    first = next(iter(out.values()), None)
    a = np.asarray(first) if first is not None else np.zeros(0)
    return int(a.shape[0]) if a.ndim else 1
