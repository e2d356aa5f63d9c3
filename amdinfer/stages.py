"""Stage base classes: a :class:`Sample` (data + metadata) goes in, a :class:`Sample` comes out.

A stage is a small object whose parameters are checked in ``__init__`` and whose :meth:`Stage.process`
does the NumPy work. The base class wraps raw inputs into a :class:`Sample`, gives ``process`` a copy of
the metadata to add to, and checks what ``process`` returns, naming the stage's class when it is wrong.
Metadata is how later stages learn what earlier ones did: ``Letterbox`` records its ratio and padding,
``ScaleBoxes`` reads them back, with no wiring by the user.

Metadata keys written by the built-in stages:

========================  ====================================================================
``"orig_shape"``          ``(height, width)`` of the image before any geometric stage.
``"input_shape"``         ``(height, width)`` after the last geometric stage (what the model sees).
``"affine"``              ``(sx, sy, tx, ty)``: a point ``(x, y)`` of the original image lands at
                          ``(x * sx + tx, y * sy + ty)`` of the model input.
``"letterbox"``           ``{"ratio": (rw, rh), "pad": (pad_w, pad_h)}`` as returned by the kernel.
``"conf_threshold"``      the confidence threshold ``YoloDecode`` applied (``Nms`` reuses it).
``"source_image"``        the picture ``LoadImage`` decoded (RGB), with ``keep_image=True``; the
                          crops of a :class:`FanOut` come from it.
``"batch_aspect"``        (a piece of a cascade, ``order="aspect"``) the widest width/height ratio
                          of the engine batch the piece joins (``TextResize`` pads to it).
``"pad_width"``           the width ``PadWidth`` pads to (written by ``TextResize``).
========================  ====================================================================

Cascades: a :class:`FanOut` stage turns one item into :class:`Pieces` (crops, with their geometry in each
piece's metadata), :class:`~amdinfer.pipeline.SubPipeline` runs another pipeline on them, and a
:class:`Gather` puts the answers back onto the item, in order.

Example:
    >>> import numpy as np
    >>> from amdinfer.stages import Preprocessor, Sample
    >>> class Double(Preprocessor):
    ...     def process(self, data, meta):
    ...         meta["doubled"] = True
    ...         return data * 2
    >>> out = Double()(np.ones(3))
    >>> out.data.tolist(), out.meta
    ([2.0, 2.0, 2.0], {'doubled': True})
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .errors import InputError, OptionError, StageError, StageInputError

__all__ = [
    "BoxCrop",
    "FanOut",
    "Gather",
    "Pieces",
    "Postprocessor",
    "Preprocessor",
    "Relabel",
    "Sample",
    "Stage",
    "compose_affine",
]


@dataclass
class Sample:
    """One item travelling through a pipeline: its data and the metadata stages leave for later ones.

    Attributes:
        data: an image or tensor (``np.ndarray``), the engine outputs of one item, or a result object.
        meta: what earlier stages recorded (see the table in :mod:`amdinfer.stages`).

    Example:
        >>> s = Sample(np.zeros((4, 6, 3), np.uint8), {"orig_shape": (4, 6)})
        >>> s.meta["orig_shape"]
        (4, 6)
    """

    data: Any
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def wrap(cls, value: Any) -> Sample:
        """Return ``value`` if it is a :class:`Sample`, else a new one with empty metadata.

        Example:
            >>> Sample.wrap(3).meta
            {}
        """
        return value if isinstance(value, Sample) else cls(value, {})

    def __repr__(self) -> str:
        data = self.data
        shown = f"array{data.shape} {data.dtype}" if isinstance(data, np.ndarray) else type(data).__name__
        return f"Sample({shown}, meta={sorted(self.meta)})"


def compose_affine(
    meta: dict[str, Any], sx: float, sy: float, tx: float, ty: float
) -> tuple[float, float, float, float]:
    """Append a geometric step ``x' = x * sx + tx`` (same for y) to ``meta["affine"]`` and return the result.

    Geometric stages call this so that ``ScaleBoxes`` can map boxes back through any chain of them.

    Example:
        >>> meta = {}
        >>> compose_affine(meta, 0.5, 0.5, 0.0, 0.0)
        (0.5, 0.5, 0.0, 0.0)
        >>> compose_affine(meta, 1.0, 1.0, 10.0, 0.0)
        (0.5, 0.5, 10.0, 0.0)
    """
    ax, ay, bx, by = meta.get("affine", (1.0, 1.0, 0.0, 0.0))
    out = (ax * sx, ay * sy, bx * sx + tx, by * sy + ty)
    meta["affine"] = tuple(float(v) for v in out)
    return meta["affine"]


class Stage(abc.ABC):
    """Base of every pre- and post-processing stage.

    Subclasses store each ``__init__`` parameter under an attribute of the same name (that is what
    :meth:`__repr__` shows) and implement :meth:`process`. ``output_type`` says what ``process`` must
    return; the base class checks it. Stages hold only plain parameters, so they pickle.

    Example:
        >>> from amdinfer.preprocess import HwcToChw
        >>> HwcToChw()(np.zeros((2, 3, 3), np.uint8)).data.shape
        (3, 2, 3)
    """

    #: What :meth:`process` must return (checked by :meth:`__call__`).
    output_type: ClassVar[type | tuple[type, ...]] = object
    #: Words used in the error when the output is wrong, e.g. ``"a numpy array"``.
    output_description: ClassVar[str] = "an object"

    def __call__(self, sample: Any) -> Sample:
        """Run the stage on a :class:`Sample` (or a raw value, which gets empty metadata).

        Returns:
            A new :class:`Sample`; the input sample and its metadata are left unchanged.

        Raises:
            StageError: :meth:`process` returned something other than ``output_type``.
        """
        sample = Sample.wrap(sample)
        meta = dict(sample.meta)
        out = self.process(sample.data, meta)
        if not isinstance(out, self.output_type):
            raise StageError(
                f"{type(self).__name__}.process: returned {type(out).__name__}, expected {self.output_description}"
            )
        return Sample(out, meta)

    @abc.abstractmethod
    def process(self, data: Any, meta: dict[str, Any]) -> Any:
        """Transform ``data``; add what later stages need to ``meta`` (a private copy)."""

    def _params(self) -> dict[str, Any]:
        params = {}
        for name, p in inspect.signature(type(self).__init__).parameters.items():
            if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            params[name] = getattr(self, name, p.default)
        return params

    def __repr__(self) -> str:
        parts = []
        defaults = {
            name: p.default
            for name, p in inspect.signature(type(self).__init__).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        for name, value in self._params().items():
            if name in defaults and _is_default(value, defaults[name]):
                continue
            if isinstance(value, np.dtype):
                value = value.name
            if isinstance(value, (list, tuple)) and len(value) > 6:
                shown = f"[{len(value)} items]"
            elif isinstance(value, np.ndarray):
                shown = np.array2string(value, precision=4, separator=", ")
            else:
                shown = repr(value)
            parts.append(f"{name}={shown}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        a, b = self._params(), other._params()  # type: ignore[attr-defined]
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)

    __hash__ = None  # type: ignore[assignment]


def _is_default(value: Any, default: Any) -> bool:
    """Whether a stored (normalized) parameter still equals its signature default."""
    try:
        if isinstance(value, np.dtype) and default is not None:
            return value == np.dtype(default)
        if isinstance(value, tuple) and isinstance(default, (int, float)) and not isinstance(default, bool):
            return all(v == default for v in value)
        if isinstance(value, tuple) and isinstance(default, list):
            return value == tuple(default)
        return _same(value, default)
    except (TypeError, ValueError):
        return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)


class Preprocessor(Stage):
    """A stage that turns one image (or tensor) into another, before the engine.

    ``process`` receives one item, not a batch; :class:`~amdinfer.Pipeline` stacks the results.

    Example:
        >>> from amdinfer.preprocess import Cast
        >>> Cast("float32")(np.arange(3, dtype=np.uint8)).data.dtype
        dtype('float32')
    """

    output_type = np.ndarray
    output_description = "a numpy array"


class Postprocessor(Stage):
    """A stage that turns the engine outputs of one item into an answer, after the engine.

    The first postprocessor receives, per item, the model's single output without its batch axis, or a
    ``{name: array}`` dict when the model has several outputs.

    Example:
        >>> from amdinfer.postprocess import Softmax
        >>> Softmax()(np.zeros(4, np.float32)).data.tolist()
        [0.25, 0.25, 0.25, 0.25]
    """

    @staticmethod
    def _select_output(stage: Stage, data: Any, output: str | None) -> Any:
        """Pick one tensor out of a multi-output dict (``output`` names it), or return ``data`` as is."""
        if isinstance(data, Mapping):
            if output is not None:
                if output not in data:
                    raise StageError(
                        f"{type(stage).__name__}: output {output!r} not found; the model gave {list(data)}"
                    )
                return data[output]
            if len(data) != 1:
                raise StageError(
                    f"{type(stage).__name__}: got {len(data)} model outputs {list(data)}, expected one; "
                    "pass output=<name> to pick one"
                )
            return next(iter(data.values()))
        if output is not None and not isinstance(data, np.ndarray):
            raise StageError(f"{type(stage).__name__}: output={output!r} given, but the input is not a dict of outputs")
        return data


def _stage_error(index: int, stage: str, exc: BaseException, *, count: int = 1) -> StageError:
    """A :class:`StageError` naming the item (or batch) and the stage, with ``exc`` as its cause (also an
    :class:`InputError` when ``exc`` is one)."""
    if isinstance(exc, StageError) and getattr(exc, "index", None) is not None:
        return exc  # already located
    where = f"item {index}" if count == 1 else f"items {index}..{index + count - 1} (one batch)"
    kind = StageInputError if isinstance(exc, InputError) else StageError
    err = kind(f"{where}: {stage}: {type(exc).__name__}: {exc}")
    err.index = index  # type: ignore[attr-defined]
    err.stage = stage  # type: ignore[attr-defined]
    err.__cause__ = exc
    return err


@dataclass
class Pieces:
    """What a :class:`FanOut` splits one item into: the item's answer so far and its pieces, in order.

    Attributes:
        parent: the item's data before the split (e.g. :class:`~amdinfer.results.Detections`); the
            :class:`Gather` receives it back.
        items: one :class:`Sample` per piece (a crop and what its metadata says about it).

    Example:
        >>> p = Pieces("page", [Sample(np.zeros((2, 3, 3), np.uint8), {"box": 0})])
        >>> len(p), p.items[0].meta
        (1, {'box': 0})
    """

    parent: Any
    items: list[Sample]

    def __len__(self) -> int:
        return len(self.items)


class FanOut(Postprocessor):
    """A stage that turns one item into many pieces (:class:`Pieces`): the first half of a cascade.

    Subclasses implement :meth:`process` and return :class:`Pieces`; raw arrays in ``items`` are wrapped
    into samples with empty metadata. Used by :class:`~amdinfer.pipeline.SubPipeline`, which runs another
    pipeline on the pieces and hands the answers to a :class:`Gather`.

    Example:
        >>> class Halves(FanOut):
        ...     def process(self, data, meta):
        ...         return Pieces(data, [data[:, : data.shape[1] // 2], data[:, data.shape[1] // 2 :]])
        >>> [s.data.shape for s in Halves()(np.zeros((2, 4))).data.items]
        [(2, 2), (2, 2)]
    """

    output_type = Pieces
    output_description = "a Pieces object (the parent and a list of pieces)"

    def __call__(self, sample: Any) -> Sample:
        out = super().__call__(sample)
        pieces = out.data
        if not isinstance(pieces.items, list):
            raise StageError(
                f"{type(self).__name__}.process: Pieces.items is {type(pieces.items).__name__}, expected a list"
            )
        pieces.items = [Sample.wrap(p) for p in pieces.items]
        return out


class Gather(abc.ABC):
    """Puts the answers of a cascade's pieces back onto their item: the second half of a cascade.

    :meth:`gather` receives the parent (``Pieces.parent``), the answers in piece order, the pieces and the
    item's metadata (a private copy it may add to, for later stages); it returns the item's new data.

    Example:
        >>> class Count(Gather):
        ...     def gather(self, parent, results, pieces, meta):
        ...         return len(results)
        >>> Count().gather(None, [1, 2], [], {})
        2
    """

    @abc.abstractmethod
    def gather(self, parent: Any, results: list[Any], pieces: list[Sample], meta: dict[str, Any]) -> Any:
        """Combine ``results`` (one per piece, in order) with ``parent``; return the item's data."""

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def _source(meta: dict[str, Any], who: str) -> np.ndarray:
    image = meta.get("source_image")
    if not isinstance(image, np.ndarray):
        raise InputError(
            f"{who}: the item's metadata has no 'source_image' to crop from; start the pipeline with LoadImage "
            "and build it with keep_image=True (the recipes do)"
        )
    return image


class BoxCrop(FanOut):
    """Crop each box of a :class:`~amdinfer.results.Detections` out of the item's picture: one piece per box.

    Boxes are rounded to whole pixels and clipped to the picture; each piece's metadata has ``"box"`` (its
    index) and ``"source_box"`` (the clipped ``x1, y1, x2, y2``). The picture is the one ``LoadImage`` kept
    (``keep_image=True``). An empty box becomes a 1x1 crop of its clipped corner.

    Args:
        min_size: boxes narrower or shorter than this (pixels) are padded out to it around their centre.

    Example:
        >>> from amdinfer.results import Detections
        >>> det = Detections([[1, 1, 4, 3]], [0.9], [0])
        >>> s = BoxCrop()(Sample(det, {"source_image": np.zeros((8, 8, 3), np.uint8)}))
        >>> s.data.items[0].data.shape, s.data.items[0].meta["source_box"]
        ((2, 3, 3), (1, 1, 4, 3))
    """

    def __init__(self, *, min_size: int = 1) -> None:
        if not isinstance(min_size, int) or isinstance(min_size, bool) or min_size < 1:
            raise OptionError(f"min_size: got {min_size!r}, expected an int >= 1")
        self.min_size = min_size

    def process(self, data: Any, meta: dict[str, Any]) -> Pieces:
        from .results import Detections

        if not isinstance(data, Detections):
            raise InputError(f"BoxCrop: got {type(data).__name__}, expected Detections (after Nms/ScaleBoxes)")
        image = _source(meta, "BoxCrop")
        h, w = image.shape[:2]
        items = []
        for i, box in enumerate(data.boxes):
            x1, y1, x2, y2 = (round(float(v)) for v in box)
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            if x2 - x1 < self.min_size:
                x1, x2 = int(cx - self.min_size / 2), int(cx - self.min_size / 2) + self.min_size
            if y2 - y1 < self.min_size:
                y1, y2 = int(cy - self.min_size / 2), int(cy - self.min_size / 2) + self.min_size
            x1, x2 = max(0, min(x1, w - 1)), max(1, min(x2, w))
            y1, y2 = max(0, min(y1, h - 1)), max(1, min(y2, h))
            x2, y2 = max(x2, x1 + 1), max(y2, y1 + 1)
            items.append(Sample(np.ascontiguousarray(image[y1:y2, x1:x2]), {"box": i, "source_box": (x1, y1, x2, y2)}))
        return Pieces(data, items)


class Relabel(Gather):
    """Gather a classifier's answers onto detections: each box takes its crop's top class, label and score.

    Args:
        score: ``"product"`` (detection score times the class score), ``"classifier"`` or ``"detector"``.

    Example:
        >>> from amdinfer.results import Classification, Detections
        >>> det = Detections([[0, 0, 2, 2]], [0.5], [0])
        >>> out = Relabel().gather(det, [Classification([3], [0.8], labels=["cat"])], [], {})
        >>> out.classes.tolist(), out.labels, round(float(out.scores[0]), 2)
        ([3], ['cat'], 0.4)
    """

    def __init__(self, *, score: str = "product") -> None:
        if score not in ("product", "classifier", "detector"):
            raise OptionError(f"score: got {score!r}, expected 'product', 'classifier' or 'detector'")
        self.score = score

    def gather(self, parent: Any, results: list[Any], pieces: list[Sample], meta: dict[str, Any]) -> Any:
        from .results import Classification, Detections

        if not isinstance(parent, Detections):
            raise InputError(f"Relabel: parent is {type(parent).__name__}, expected Detections")
        classes, scores, labels = [], [], []
        for i, r in enumerate(results):
            if not isinstance(r, Classification) or not len(r):
                raise InputError(
                    f"Relabel: piece {i}: got {type(r).__name__}, expected a Classification (end the sub-pipeline "
                    "with Softmax() and TopK(k))"
                )
            classes.append(r.index)
            scores.append(r.score)
            labels.append(r.label if r.label is not None else str(r.index))
        det_scores = parent.scores.astype(np.float64)
        cls_scores = np.asarray(scores, np.float64).reshape(-1)
        new = {"product": det_scores * cls_scores, "classifier": cls_scores, "detector": det_scores}[self.score]
        has_labels = all(r.label is not None for r in results)
        return Detections(
            parent.boxes,
            new,
            classes,
            labels if has_labels else None,
            parent.image_shape,
            image=parent.image,
        )
