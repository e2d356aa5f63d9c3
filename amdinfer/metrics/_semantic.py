"""Semantic segmentation metrics: mean IoU, per-class IoU and pixel accuracy of class maps against label PNGs.

One confusion matrix is accumulated over the whole set (``np.bincount`` of ``truth * C + prediction`` over the
pixels whose label is not ``ignore_index``), and the metrics are read from it as mmsegmentation's ``IoUMetric``
and torchvision's reference ``ConfusionMatrix`` read theirs: ``IoU_c = TP / (TP + FP + FN)``, a class that is
neither in the labels nor predicted has no IoU and is left out of the mean; pixel accuracy is the diagonal over
the labelled pixels. Labels follow the VOC convention: one class index per pixel (PNG, mode ``L``, ``P`` or
``I``), 255 for "ignore" (object borders, void).

Example:
    >>> import numpy as np
    >>> truth = [np.array([[0, 0, 1, 1]])]
    >>> m = segmentation_iou([np.array([[0, 1, 1, 1]])], truth, num_classes=2)
    >>> round(m.miou, 4), [round(v, 4) for v in m.iou], m.pixel_accuracy
    (0.5833, [0.5, 0.6667], 0.75)
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["SegmentationMetrics", "SemanticSet", "confusion_matrix", "load_semantic_set", "segmentation_iou"]

_IMAGE_SUFFIXES = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class SemanticSet:
    """A labelled semantic segmentation set: image paths and their label PNGs.

    Attributes:
        images: the image paths; labels: the label PNG of each, in order.
        names: the class names (``()`` when the set names none).
        source: the folder or file it was read from.

    Example:
        >>> SemanticSet(("a.jpg",), ("a.png",), ("sky", "road"), "x").names
        ('sky', 'road')
    """

    images: tuple[str, ...]
    labels: tuple[str, ...]
    names: tuple[str, ...]
    source: str

    def __len__(self) -> int:
        return len(self.images)


@dataclass(frozen=True)
class SegmentationMetrics:
    """What :func:`segmentation_iou` measured.

    Attributes:
        miou: the mean of :attr:`iou` over the classes that have one.
        iou: per class ``TP / (TP + FP + FN)``, ``None`` for a class neither labelled nor predicted.
        accuracy: per class ``TP / (TP + FN)`` (recall), ``None`` for a class with no labelled pixel.
        pixel_accuracy: correct pixels over labelled pixels (``ignore_index`` left out).
        confusion: ``int64 (C, C)``: row = label, column = prediction.
        names: the class names (``class i`` when the set names none).
        images, pixels: images and labelled pixels counted.
        seconds: wall time of the segmenter over the set (``None`` for given predictions).
        ignore_index: the label value left out.

    Example:
        >>> m = segmentation_iou([np.array([[1, 1]])], [np.array([[1, 255]])], num_classes=2)
        >>> m.iou, m.miou, m.pixels
        ([None, 1.0], 1.0, 1)
    """

    miou: float
    iou: list[float | None]
    accuracy: list[float | None]
    pixel_accuracy: float
    confusion: np.ndarray
    names: tuple[str, ...]
    images: int
    pixels: int
    seconds: float | None = None
    ignore_index: int | None = 255
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def mean_accuracy(self) -> float:
        """The mean of :attr:`accuracy` over the classes that have one (mmseg's ``mAcc``)."""
        valid = [a for a in self.accuracy if a is not None]
        return float(np.mean(valid)) if valid else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for JSON (``mIoU``, ``pixel_accuracy``, ``mean_accuracy``, ``per_class``, ...).

        Example:
            >>> segmentation_iou([np.array([[0, 1]])], [np.array([[0, 1]])]).to_dict()["mIoU"]
            1.0
        """
        rows = [{"class": k, "name": n, "pixels": int(self.confusion[k].sum()), "IoU": self.iou[k],
                 "accuracy": self.accuracy[k]} for k, n in enumerate(self.names)]  # fmt: skip
        speed = None
        if self.seconds:
            speed = {"seconds": self.seconds, "images_per_second": self.images / self.seconds,
                     "ms_per_image": 1000 * self.seconds / max(self.images, 1), **self.stages}  # fmt: skip
        return {"task": "semantic", "mIoU": self.miou, "pixel_accuracy": self.pixel_accuracy,
                "mean_accuracy": self.mean_accuracy, "images": self.images, "pixels": self.pixels,
                "ignore_index": self.ignore_index, "per_class": rows, "confusion": self.confusion.tolist(),
                "speed": speed}  # fmt: skip

    def summary(self) -> str:
        """One line for all classes, then one per class with an IoU.

        Example:
            >>> print(segmentation_iou([np.array([[0, 1]])], [np.array([[0, 1]])], names=["a", "b"]).summary())
                           Class     Pixels        IoU   Accuracy
                             all          2      1.000      1.000
                               a          1      1.000      1.000
                               b          1      1.000      1.000
        """
        lines = [f"{'Class':>20} {'Pixels':>10} {'IoU':>10} {'Accuracy':>10}"]
        lines.append(f"{'all':>20} {self.pixels:>10} {self.miou:>10.3f} {self.mean_accuracy:>10.3f}")
        for k, name in enumerate(self.names):
            iou, acc = self.iou[k], self.accuracy[k]
            if iou is not None:
                acc_text = f"{acc:>10.3f}" if acc is not None else f"{'-':>10}"
                lines.append(f"{name[:20]:>20} {int(self.confusion[k].sum()):>10} {iou:>10.3f} {acc_text}")
        return "\n".join(lines)


def confusion_matrix(prediction: Any, truth: Any, num_classes: int, ignore_index: int | None = 255) -> np.ndarray:
    """The ``int64 (C, C)`` confusion matrix of one class map against its labels (row: label, column: prediction),
    the pixels labelled ``ignore_index`` left out: ``np.bincount(C * truth + prediction)``.

    Raises:
        InputError: the shapes differ, or a label or a prediction outside ``0..C-1`` (other than the ignore
            index).

    Example:
        >>> confusion_matrix(np.array([[0, 1, 1]]), np.array([[0, 0, 1]]), 2).tolist()
        [[1, 1], [0, 1]]
    """
    p, t = np.asarray(prediction), np.asarray(truth)
    if p.shape != t.shape:
        raise InputError(f"prediction: got shape {p.shape}, expected the labels' shape {t.shape}")
    keep = t != ignore_index if ignore_index is not None else np.ones(t.shape, bool)
    p, t = p[keep].astype(np.int64), t[keep].astype(np.int64)
    for what, a in (("labels", t), ("prediction", p)):
        if a.size and (a.min() < 0 or a.max() >= num_classes):
            bad = int(a.max()) if a.max() >= num_classes else int(a.min())
            raise InputError(f"{what}: got class {bad}, expected 0..{num_classes - 1}"
                             f"{f' or the ignore index {ignore_index}' if what == 'labels' else ''}")  # fmt: skip
    return np.bincount(num_classes * t + p, minlength=num_classes**2).reshape(num_classes, num_classes)


def load_semantic_set(
    data: str | os.PathLike[str], *, split: str = "val", labels: str | os.PathLike[str] | None = None
) -> SemanticSet:
    """Read a semantic segmentation set: images and one label PNG per image (class index per pixel).

    * A folder (or a ``data.yaml`` in it) with ``images/`` and ``labels/``, Ultralytics' layout with PNG labels:
      for ``.../images/x.jpg`` the labels are ``.../labels/x.png``. A ``data.yaml`` gives ``names`` and, as for
      detection, the ``split`` entry (a folder of images, relative to its ``path``); without one, every image in
      ``images/`` (or ``images/<split>/`` when it exists) counts and the set names no class.
    * ``labels``: a folder of label PNGs matched by file stem to the images of ``data`` (a folder of images).

    Raises:
        InputError: a missing folder, an image without its label PNG, or no image.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> load_semantic_set(d)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: data: no image in ...
    """
    from ._dataset import _image_files, read_data_yaml

    p = Path(data)
    if not p.exists():
        raise InputError(f"data: {str(p)!r} does not exist, expected a folder with images/ and labels/ (PNG)")
    yaml = p if p.is_file() else next((q for q in (p / "data.yaml", p / "data.yml") if q.is_file()), None)
    root = p if p.is_dir() else p.parent
    names: tuple[str, ...] = ()
    if labels is not None:
        files = sorted(f for f in root.rglob("*") if f.suffix.lower() in _IMAGE_SUFFIXES and f.is_file())
        label_of = {f: Path(labels) / (f.stem + ".png") for f in files}
    else:
        if yaml is not None:
            cfg = read_data_yaml(yaml)
            names = tuple(cfg.get("names") or ())
            root = yaml.parent / str(cfg.get("path") or ".")
            entry = cfg.get(split) or "images"
            files = _image_files(root, entry, str(yaml))
        else:
            folder = root / "images" / split if (root / "images" / split).is_dir() else root / "images"
            files = sorted(f for f in folder.rglob("*") if f.suffix.lower() in _IMAGE_SUFFIXES and f.is_file())
        label_of = {f: _png_label(f) for f in files}
    if not files:
        raise InputError(f"data: no image in {str(root)!r}, expected images/ (and labels/ with one PNG per image)")
    missing = [str(q) for q in label_of.values() if not q.is_file()]
    if missing:
        raise InputError(f"data: {len(missing)} images have no label PNG, e.g. {missing[0]!r}, expected one class "
                         "index PNG per image (images/x.jpg -> labels/x.png)")  # fmt: skip
    return SemanticSet(tuple(map(str, files)), tuple(str(label_of[f]) for f in files), names, str(p))


def _png_label(image: Path) -> Path:
    from ._dataset import _label_path

    return _label_path(image).with_suffix(".png")


def read_label(path: str | os.PathLike[str]) -> np.ndarray:
    """The class index per pixel of a label PNG (mode ``L``, ``P``: the palette's indices, or ``I``/``I;16``).

    Raises:
        InputError: the file cannot be read, or it is a colour picture.
    """
    from PIL import Image

    try:
        with Image.open(path) as im:
            if im.mode not in ("L", "P", "I", "I;16", "1"):
                raise InputError(f"labels: {str(path)!r} is a {im.mode} picture, expected a single-channel class "
                                 "index PNG (mode L, P or I: one class per pixel, 255 ignored)")  # fmt: skip
            return np.asarray(im).astype(np.int64)
    except OSError as exc:
        raise InputError(f"labels: {str(path)!r} cannot be read ({exc}), expected a label PNG") from None


def segmentation_iou(
    segmenter_or_predictions: Any,
    data: SemanticSet | Sequence[Any] | str | os.PathLike[str],
    *,
    num_classes: int | None = None,
    names: Sequence[str] | None = None,
    ignore_index: int | None = 255,
    split: str = "val",
    batch_size: int | str | None = "auto",
    progress: bool | None = False,
) -> SegmentationMetrics:
    """Mean IoU, per-class IoU and pixel accuracy of a semantic segmenter (or its class maps) on a labelled set.

    Args:
        segmenter_or_predictions: :func:`amdinfer.segment`'s segmenter (run through ``map``, timed), or one
            prediction per image: :class:`~amdinfer.results.SegmentationMap` or an integer ``(H, W)`` array.
        data: a :class:`SemanticSet`, what :func:`load_semantic_set` reads, or the labels themselves (a list of
            ``(H, W)`` arrays or label PNG paths; then predictions must be given).
        num_classes: ``C`` (default: the set's names, else the segmenter's or the maps' ``num_classes``, else the
            largest class seen + 1).
        names: the class names (default: the set's, else the maps' ``labels``, else ``class i``).
        ignore_index: the label value left out (VOC's 255; ``None``: none).

    Returns:
        A :class:`SegmentationMetrics`.

    Raises:
        InputError: predictions of another count than the labels, a map of another size than its labels, a class
            outside ``0..C-1``.

    Example:
        >>> truth = [np.array([[0, 0], [1, 1]]), np.array([[1, 1], [255, 255]])]
        >>> pred = [np.array([[0, 1], [1, 1]]), np.array([[1, 0], [0, 0]])]
        >>> m = segmentation_iou(pred, truth)  # two ignored pixels; IoU 1 / (2 + 2 - 1) and 3 / (4 + 4 - 3)
        >>> m.confusion.tolist(), round(m.miou, 6), round(m.pixel_accuracy, 6)
        ([[1, 1], [1, 3]], 0.466667, 0.666667)
    """
    if isinstance(data, (str, os.PathLike)):
        data = load_semantic_set(data, split=split)
    labels = list(data.labels) if isinstance(data, SemanticSet) else list(data)
    seconds, stages = None, {}
    if hasattr(segmenter_or_predictions, "map") and callable(segmenter_or_predictions):
        if not isinstance(data, SemanticSet):
            raise InputError("data: got labels without images, expected a SemanticSet (or its folder) to run on")
        from ._map import _run, mean_stages

        t0 = time.perf_counter()
        predictions = _run(segmenter_or_predictions, data, batch_size, progress)  # type: ignore[arg-type]
        seconds = time.perf_counter() - t0
        stages = mean_stages(predictions)
    else:
        predictions = list(segmenter_or_predictions)
    if len(predictions) != len(labels):
        raise InputError(f"predictions: got {len(predictions)}, expected one per label map ({len(labels)})")
    truths = [read_label(t) if isinstance(t, (str, os.PathLike)) else np.asarray(t) for t in labels]
    maps = [np.asarray(getattr(p, "classes", p)) for p in predictions]
    set_names = tuple(data.names) if isinstance(data, SemanticSet) else ()
    given = tuple(names) if names is not None else set_names
    first = predictions[0] if predictions else None
    c = num_classes or len(given) or getattr(first, "num_classes", None) or _largest(maps, truths, ignore_index) + 1
    total = np.zeros((c, c), np.int64)
    for i, (p, t) in enumerate(zip(maps, truths)):
        try:
            total += confusion_matrix(p, t, c, ignore_index)
        except InputError as exc:
            where = labels[i] if isinstance(labels[i], (str, os.PathLike)) else f"labels[{i}]"
            raise InputError(f"{where}: {exc}") from None
    if not given:
        given = tuple(getattr(first, "labels", None) or (f"class {k}" for k in range(c)))
    return _metrics(total, given[:c], len(maps), seconds, ignore_index, stages)


def _largest(maps: list[np.ndarray], truths: list[np.ndarray], ignore_index: int | None) -> int:
    top = 0
    for p, t in zip(maps, truths):
        keep = t[t != ignore_index] if ignore_index is not None else t
        top = max(top, int(p.max()) if p.size else 0, int(keep.max()) if keep.size else 0)
    return top


def _metrics(total: np.ndarray, names: tuple[str, ...], images: int, seconds: Any, ignore: Any, stages: Any) -> Any:
    tp = np.diag(total).astype(np.float64)
    union = total.sum(0) + total.sum(1) - tp
    labelled = total.sum(1)
    iou = [float(tp[k] / union[k]) if union[k] else None for k in range(len(tp))]
    acc = [float(tp[k] / labelled[k]) if labelled[k] else None for k in range(len(tp))]
    valid = [v for v in iou if v is not None]
    pixels = int(total.sum())
    if not pixels:
        raise InputError("labels: no labelled pixel (every one is the ignore index), expected at least one")
    names = names + tuple(f"class {k}" for k in range(len(names), len(tp)))
    return SegmentationMetrics(float(np.mean(valid)), iou, acc, float(tp.sum() / pixels), total, names, images,
                               pixels, seconds, ignore, dict(stages))  # fmt: skip
