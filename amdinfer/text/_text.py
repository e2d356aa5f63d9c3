"""Text-line stages: :class:`QuadCrop` (fan-out), :class:`TextResize`, :class:`CtcDecode`, and the gathers
:class:`ClsRotate` and :class:`AttachText`.

Example:
    >>> import numpy as np
    >>> from amdinfer.text import TextResize
    >>> s = TextResize(48, 192)(np.zeros((20, 100, 3), np.uint8))
    >>> s.data.shape, s.meta["pad_width"]
    ((48, 192, 3), 192)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import InputError, ModelError, OptionError
from ..results import TextLines
from ..stages import FanOut, Gather, Pieces, Postprocessor, Preprocessor, Sample
from ._cv import cv2
from ._det import PAGE, page_to_original

__all__ = [
    "AttachText",
    "ClsRotate",
    "CtcDecode",
    "QuadCrop",
    "TextResize",
    "charset_from_model",
    "ctc_greedy",
    "ctc_steps",
    "fuse_ctc",
    "quad_crop",
]

#: Metadata key of the text-line crops a :class:`ClsRotate` leaves (turned upright) for the next cascade step.
CROPS = "ocr_crops"


def quad_crop(image: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Warp the quadrilateral ``quad`` (corners clockwise from top-left) of ``image`` to an upright rectangle.

    The rectangle is as wide as the longer of the top and bottom edges and as tall as the longer side edge
    (bicubic, edges replicated); a result at least 1.5 times as tall as wide is turned 90 degrees
    counter-clockwise (vertical text), as PaddleOCR does.

    Example:
        >>> img = np.arange(10 * 12 * 3, dtype=np.uint8).reshape(10, 12, 3)
        >>> quad_crop(img, np.array([[2, 1], [8, 1], [8, 5], [2, 5]], np.float32)).shape
        (4, 6, 3)
    """
    cv = cv2("quad_crop")
    points = np.asarray(quad, np.float32).reshape(4, 2)
    width = int(max(np.linalg.norm(points[0] - points[1]), np.linalg.norm(points[2] - points[3])))
    height = int(max(np.linalg.norm(points[0] - points[3]), np.linalg.norm(points[1] - points[2])))
    if width < 1 or height < 1:
        raise InputError(f"quad_crop: quad {points.tolist()} is {width}x{height} pixels, expected at least 1x1")
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
    matrix = cv.getPerspectiveTransform(points, target)
    out = cv.warpPerspective(image, matrix, (width, height), borderMode=cv.BORDER_REPLICATE, flags=cv.INTER_CUBIC)
    if out.shape[0] * 1.0 / out.shape[1] >= 1.5:
        out = np.rot90(out)
    return np.ascontiguousarray(out)


class QuadCrop(FanOut):
    """Fan a page's :class:`~amdinfer.results.TextLines` out into one upright crop per line (:func:`quad_crop`).

    Crops come from the page the pipeline kept (``keep_image=True``, ``meta["source_image"]``), or the page
    :class:`~amdinfer.text.PageFit` made (``meta["ocr_page"]``, which the quads are in), or, after a
    :class:`ClsRotate` step, its turned crops (``meta["ocr_crops"]``). Each piece's metadata has ``"line"``.

    Example:
        >>> from amdinfer.results import TextLines
        >>> lines = TextLines([[[2, 1], [8, 1], [8, 5], [2, 5]]], None, [0.9])
        >>> out = QuadCrop()(Sample(lines, {"source_image": np.zeros((10, 12, 3), np.uint8)}))
        >>> [p.data.shape for p in out.data.items]
        [(4, 6, 3)]
    """

    def __init__(self) -> None:
        pass

    def process(self, data: Any, meta: dict[str, Any]) -> Pieces:
        if not isinstance(data, TextLines):
            raise InputError(f"QuadCrop: got {type(data).__name__}, expected TextLines (after DbPostprocess)")
        crops = meta.get(CROPS)
        if crops is None:
            image = meta.get(PAGE)
            if image is None:
                image = meta.get("source_image")
            if not isinstance(image, np.ndarray):
                raise InputError(
                    "QuadCrop: the item's metadata has no 'source_image' to crop from; start the pipeline with "
                    "LoadImage and build it with keep_image=True (amdinfer.ocr does)"
                )
            crops = [quad_crop(image, q) for q in data.quads]
        elif len(crops) != len(data):
            raise InputError(f"QuadCrop: meta['{CROPS}'] has {len(crops)} crops for {len(data)} lines")
        return Pieces(data, [Sample(c, {"line": i}) for i, c in enumerate(crops)])


class TextResize(Preprocessor):
    """Resize a text-line crop to ``height`` keeping its aspect (width rounded **up**, as PP-OCR does), and
    record the width to pad to in ``meta["pad_width"]`` for :class:`~amdinfer.preprocess.PadWidth`.

    * ``grow=False`` (the direction classifier): the width is ``min(width, ceil(height * w / h))``; pad to
      ``width``.
    * ``grow=True`` (the recogniser): the line pads to ``int(height * r)``, ``r`` the larger of ``width /
      height`` and ``meta["batch_aspect"]`` (the widest line of its batch, set by
      :class:`~amdinfer.pipeline.SubPipeline` with ``order="aspect"``) or, without it, the line's own ratio;
      lines wider than that are squeezed to it.

    ``width_step`` rounds the padded width up to a multiple of it (the line itself is resized as without it),
    so that a GPU engine meets a few widths instead of one per batch (:func:`~amdinfer.text.ocr`'s
    ``shape_buckets``).

    Args:
        height: the model's input height (48 for PP-OCR).
        width: the fixed width (``grow=False``) or the smallest padded width (``grow=True``).
        grow: see above.
        width_step: ``None`` (pad to the width above) or an int >= 1 the padded width is rounded up to.

    Example:
        >>> s = TextResize(48, 320, grow=True)(np.zeros((20, 400, 3), np.uint8))
        >>> s.data.shape, s.meta["pad_width"]
        ((48, 960, 3), 960)
        >>> TextResize(48, 320, grow=True, width_step=160)(np.zeros((20, 430, 3), np.uint8)).meta["pad_width"]
        1120
    """

    def __init__(
        self, height: int = 48, width: int = 320, *, grow: bool = False, width_step: int | None = None
    ) -> None:
        for name, v in (("height", height), ("width", width)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise OptionError(f"{name}: got {v!r}, expected an int >= 1")
        if not isinstance(grow, bool):
            raise OptionError(f"grow: got {grow!r}, expected True or False")
        self.height = int(height)
        self.width = int(width)
        self.grow = grow
        if width_step is not None and (
            not isinstance(width_step, int) or isinstance(width_step, bool) or width_step < 1
        ):
            raise OptionError(f"width_step: got {width_step!r}, expected None or an int >= 1")
        self.width_step = width_step

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if not isinstance(data, np.ndarray) or data.ndim not in (2, 3) or data.dtype != np.uint8 or not data.size:
            shown = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
            raise InputError(f"TextResize: got {shown}, expected a uint8 (H, W, C) or (H, W) text-line crop")
        h, w = data.shape[:2]
        ratio = w / float(h)
        if self.grow:
            widest = meta.get("batch_aspect", ratio)
            pad = int(self.height * max(self.width / self.height, widest))
        else:
            pad = self.width
        new_w = pad if math.ceil(self.height * ratio) > pad else math.ceil(self.height * ratio)
        out = np.asarray(cv2("TextResize").resize(data, (new_w, self.height)))
        step = self.width_step
        meta["pad_width"] = pad if step is None else -(-pad // step) * step
        return out.reshape(self.height, new_w, *data.shape[2:])


def ctc_greedy(probs: np.ndarray, charset: Sequence[str]) -> tuple[str, float]:
    """Greedy CTC decoding of one line: best class per step, repeats merged, blanks (class 0) dropped.

    ``charset`` maps class ``k`` to ``charset[k - 1]``; the score is the mean best probability of the kept
    steps (each rounded to 5 decimals, as RapidOCR does; 0 when nothing is kept).

    Example:
        >>> p = np.eye(3, dtype=np.float32)[[1, 1, 0, 2, 2]]
        >>> ctc_greedy(p, ["a", "b"])
        ('ab', 1.0)
    """
    probs = np.asarray(probs)
    if probs.ndim != 2:
        raise InputError(f"ctc_greedy: got shape {probs.shape}, expected (T, classes)")
    if probs.shape[1] > len(charset) + 1:
        raise InputError(
            f"ctc_greedy: the model has {probs.shape[1]} classes, the character set {len(charset)} (+ blank); "
            "pass the dictionary the model was trained with"
        )
    return ctc_steps(probs.argmax(axis=1), probs.max(axis=1), charset)


def ctc_steps(idx: np.ndarray, best: np.ndarray, charset: Sequence[str]) -> tuple[str, float]:
    """:func:`ctc_greedy` from each step's best class and its probability (what :func:`fuse_ctc`'s graph gives).

    Example:
        >>> ctc_steps(np.array([1, 1, 0, 2]), np.array([0.9, 0.8, 1.0, 0.7]), ["a", "b"])
        ('ab', 0.8)
    """
    idx, best = np.asarray(idx).reshape(-1), np.asarray(best).reshape(-1)
    if idx.size and int(idx.max()) > len(charset):
        raise InputError(
            f"ctc: class {int(idx.max())} decoded, the character set has {len(charset)} (+ blank); pass the "
            "dictionary the model was trained with"
        )
    keep = np.ones(len(idx), bool)
    keep[1:] = idx[1:] != idx[:-1]
    keep &= idx != 0
    text = "".join(charset[int(i) - 1] for i in idx[keep])
    conf = [round(c, 5) for c in best[keep].tolist()] or [0]
    return text, float(np.mean(conf).round(5))


def charset_from_model(model: Any, key: str = "character") -> list[str]:
    """The recogniser's character set from its ONNX metadata (PP-OCR exports keep it under ``"character"``),
    with the space that PaddleOCR appends (``use_space_char``).

    Args:
        model: a path, bytes, ``onnx.ModelProto``, an :class:`~amdinfer.Engine` or a :class:`~amdinfer.Pipeline`.
        key: the metadata key.

    Raises:
        ModelError: the model has no such metadata (pass ``charset=`` a dictionary file instead).

    Example:
        >>> import onnx
        >>> m = onnx.ModelProto(); _ = m.metadata_props.add(key="character", value="a\\nb")
        >>> charset_from_model(m)
        ['a', 'b', ' ']
    """
    import onnx

    proto = model
    if hasattr(proto, "engine"):
        proto = proto.engine
    if hasattr(proto, "model") and hasattr(proto.model, "proto"):
        proto = proto.model.proto
    if isinstance(proto, (str, Path)):
        proto = onnx.load(str(proto), load_external_data=False)
    elif isinstance(proto, bytes):
        proto = onnx.load_from_string(proto)
    if not isinstance(proto, onnx.ModelProto):
        raise OptionError(f"model: got {type(model).__name__}, expected a path, bytes, ModelProto or Engine")
    meta = {p.key: p.value for p in proto.metadata_props}
    if key not in meta:
        raise ModelError(
            f"model: no {key!r} in its metadata (keys: {sorted(meta)}); pass charset= the dictionary file the "
            "recogniser was trained with"
        )
    return [*meta[key].splitlines(), " "]


def _charset_file(path: str | Path) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise OptionError(f"charset: {str(p)!r} is not a file")
    return [line.strip("\n").strip("\r\n") for line in p.read_bytes().decode("utf-8").splitlines()] + [" "]


class CtcDecode(Postprocessor):
    """A recogniser's ``(T, classes)`` output -> ``(text, score)`` by greedy CTC (:func:`ctc_greedy`).

    Args:
        charset: the characters, class 1 onwards (a list), or a dictionary file (one per line; a space is
            appended as PaddleOCR does). :func:`charset_from_model` reads it from the model's metadata.
        output: which model output to read, for a model with several.

    Example:
        >>> CtcDecode(["a", "b"])(np.eye(3, dtype=np.float32)[[2, 0, 1]]).data
        ('ba', 1.0)
    """

    def __init__(self, charset: Sequence[str] | str | Path, *, output: str | None = None) -> None:
        if isinstance(charset, (str, Path)):
            chars = _charset_file(charset)
        elif isinstance(charset, Sequence) and all(isinstance(c, str) for c in charset) and len(charset):
            chars = list(charset)
        else:
            raise OptionError(f"charset: got {type(charset).__name__}, expected a list of str or a dictionary file")
        self.charset = chars
        self.output = output

    def process(self, data: Any, meta: dict[str, Any]) -> tuple[str, float]:
        if isinstance(data, dict) and CTC_INDEX in data and CTC_BEST in data and self.output is None:
            return ctc_steps(data[CTC_INDEX], data[CTC_BEST], self.charset)  # a fuse_ctc graph's outputs
        probs = self._select_output(self, data, self.output)
        return ctc_greedy(probs, self.charset)


#: the outputs of a recogniser after :func:`fuse_ctc`: each step's best class (int64) and its probability
CTC_INDEX, CTC_BEST = "ctc_index", "ctc_best"


def fuse_ctc(model: Any) -> onnx.ModelProto:
    """The recogniser with greedy CTC's per-step work in its graph: ``ArgMax`` and ``ReduceMax`` over the classes
    of its ``(N, T, classes)`` output, which it replaces by ``ctc_index`` (int64 ``(N, T)``) and ``ctc_best``
    (``(N, T)``). :class:`CtcDecode` reads them and gives what it gives on the probabilities (ONNX ``ArgMax``
    takes the first of equal maxima, as NumPy does), while the engine hands back ``T`` values per line instead of
    ``T x classes`` (6,625 for PP-OCR): on a GPU, a copy 3,000 times smaller and no host pass over it.

    Args:
        model: the recogniser (path, bytes, ``onnx.ModelProto``), one ``(N, T, classes)`` output.

    Raises:
        ModelError: the model does not have exactly one output of rank 3.

    Example:
        >>> from onnx import TensorProto, helper
        >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 3])
        >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, 3])
        >>> m = helper.make_model(helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "g", [x], [y]))
        >>> [o.name for o in fuse_ctc(m).graph.output]
        ['ctc_index', 'ctc_best']
    """
    from onnx import TensorProto, helper

    from ..model import ModelSource, ai_onnx_opset

    proto = onnx.ModelProto()
    proto.CopyFrom(ModelSource.from_any(model).proto)
    outputs = list(proto.graph.output)
    dims = outputs[0].type.tensor_type.shape.dim if len(outputs) == 1 else []
    if len(dims) != 3:
        raise ModelError(f"fuse_ctc: got outputs {[o.name for o in outputs]}, expected one (N, T, classes) output")
    probs, opset = outputs[0].name, ai_onnx_opset(proto)
    steps = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims[:2]]
    reduce_max = (
        helper.make_node("ReduceMax", [probs], [CTC_BEST], axes=[2], keepdims=0, name="amdinfer_ctc_max")
        if opset < 18
        else helper.make_node(
            "ReduceMax", [probs, "amdinfer_ctc_axes"], [CTC_BEST], keepdims=0, name="amdinfer_ctc_max"
        )
    )
    argmax = helper.make_node("ArgMax", [probs], [CTC_INDEX], axis=2, keepdims=0, name="amdinfer_ctc_argmax")
    proto.graph.node.extend([argmax, reduce_max])
    if opset >= 18:
        proto.graph.initializer.append(helper.make_tensor("amdinfer_ctc_axes", TensorProto.INT64, [1], [2]))
    del proto.graph.output[:]
    proto.graph.output.extend(
        [
            helper.make_tensor_value_info(CTC_INDEX, TensorProto.INT64, steps),
            helper.make_tensor_value_info(CTC_BEST, outputs[0].type.tensor_type.elem_type, steps),
        ]
    )
    return proto


class ClsRotate(Gather):
    """Gather the direction classifier's answers: turn a crop by 180 degrees where class 1 ("180") wins with a
    score above ``threshold``, and leave the turned crops in ``meta["ocr_crops"]`` for the recogniser's step.

    The answers are the classifier's raw ``(2,)`` outputs (no postprocessing). The lines themselves are passed
    on unchanged.

    Example:
        >>> from amdinfer.results import TextLines
        >>> lines = TextLines(np.zeros((1, 4, 2)), None, [1.0])
        >>> crop = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
        >>> meta = {}
        >>> _ = ClsRotate().gather(lines, [np.array([0.02, 0.98])], [Sample(crop)], meta)
        >>> meta["ocr_crops"][0][0, 0].tolist()
        [3, 4, 5]
    """

    def __init__(self, threshold: float = 0.9) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
            raise OptionError(f"threshold: got {threshold!r}, expected a number in [0, 1]")
        self.threshold = float(threshold)

    def gather(self, parent: Any, results: list[Any], pieces: list[Sample], meta: dict[str, Any]) -> Any:
        crops = []
        for i, (r, piece) in enumerate(zip(results, pieces)):
            r = np.asarray(r).reshape(-1)
            if r.size < 2:
                raise InputError(f"ClsRotate: piece {i}: got {r.size} scores, expected 2 (0 and 180 degrees)")
            label = int(r.argmax())
            crop = piece.data
            if label == 1 and r[label] > self.threshold:
                crop = np.ascontiguousarray(crop[::-1, ::-1])
            crops.append(crop)
        meta[CROPS] = crops
        return parent


class AttachText(Gather):
    """Gather the recogniser's ``(text, score)`` answers onto the page's lines, dropping lines whose text is
    blank or whose score is below ``min_score`` (RapidOCR's ``text_score``); with ``keep_image`` the page
    (``meta["source_image"]``) goes onto the result for ``plot()``. Quads found in a
    :class:`~amdinfer.text.PageFit` page are mapped back to the original (:func:`~amdinfer.text._det.page_to_original`).

    Example:
        >>> from amdinfer.results import TextLines
        >>> lines = TextLines(np.zeros((2, 4, 2)), None, [1.0, 1.0])
        >>> AttachText(0.5).gather(lines, [("hi", 0.9), ("x", 0.1)], [], {}).texts
        ['hi']
    """

    def __init__(self, min_score: float = 0.5, *, keep_image: bool = True) -> None:
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not 0 <= min_score <= 1:
            raise OptionError(f"min_score: got {min_score!r}, expected a number in [0, 1]")
        if not isinstance(keep_image, bool):
            raise OptionError(f"keep_image: got {keep_image!r}, expected True or False")
        self.min_score = float(min_score)
        self.keep_image = keep_image

    def gather(self, parent: Any, results: list[Any], pieces: list[Sample], meta: dict[str, Any]) -> Any:
        if not isinstance(parent, TextLines):
            raise InputError(f"AttachText: parent is {type(parent).__name__}, expected TextLines")
        keep, texts, scores = [], [], []
        for i, r in enumerate(results):
            if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], str)):
                raise InputError(f"AttachText: piece {i}: got {type(r).__name__}, expected (text, score) (CtcDecode)")
            if r[0].strip() and r[1] >= self.min_score:
                keep.append(i)
                texts.append(r[0])
                scores.append(r[1])
        image = meta.get("source_image") if self.keep_image else None
        sel = parent.select(np.asarray(keep, np.int64))
        quads, shape = page_to_original(sel.quads, meta, parent.image_shape)
        return TextLines(quads, texts, scores, shape, image=image)
