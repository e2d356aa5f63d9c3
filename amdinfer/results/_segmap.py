"""Semantic segmentation maps: the answer of :func:`amdinfer.segment` (one class per pixel of one image), and the
run-length encoding its JSON uses (:func:`rle_encode`, :func:`rle_decode`)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from . import _draw
from ._base import _image, _shows_picture
from ._forms import ResultForms, rounded
from ._tensors import TensorResult, _bytes, _named, _strings

__all__ = ["SegmentationMap", "rle_decode", "rle_encode"]

_COLUMNS = ("name", "class", "area", "confidence")


def rle_encode(mask: Any) -> dict[str, Any]:
    """A boolean ``(H, W)`` mask as COCO's uncompressed run-length encoding: ``{"size": [H, W], "counts": [...]}``,
    runs over the pixels in column-major order (down each column, then the next), the first run counting
    ``False`` pixels (0 when the first pixel is set); what ``pycocotools.mask.frPyObjects`` reads.

    Example:
        >>> rle_encode(np.array([[0, 1], [0, 1]], bool))
        {'size': [2, 2], 'counts': [2, 2]}
    """
    m = np.asarray(mask)
    if m.ndim != 2:
        raise InputError(f"rle_encode: mask: got shape {m.shape}, expected (H, W)")
    flat = m.astype(bool).ravel(order="F")
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]
    return {"size": [int(m.shape[0]), int(m.shape[1])], "counts": [int(c) for c in counts]}


def rle_decode(rle: Mapping[str, Any]) -> np.ndarray:
    """The boolean ``(H, W)`` mask of :func:`rle_encode`'s ``{"size", "counts"}``.

    Raises:
        InputError: not such a dict, or counts that do not add up to ``H * W``.

    Example:
        >>> rle_decode({"size": [2, 2], "counts": [2, 2]}).astype(int).tolist()
        [[0, 1], [0, 1]]
    """
    try:
        h, w = (int(v) for v in rle["size"])
        counts = np.asarray(rle["counts"], np.int64).reshape(-1)
    except (KeyError, TypeError, ValueError):
        raise InputError(f"rle_decode: got {str(rle)[:80]}, expected {{'size': [H, W], 'counts': [...]}}") from None
    if (counts < 0).any() or int(counts.sum()) != h * w:
        raise InputError(f"rle_decode: counts add up to {int(counts.sum())}, expected H * W = {h * w} (size {h}x{w})")
    values = np.arange(counts.size) % 2 == 1
    return np.repeat(values, counts).reshape((h, w), order="F")


class SegmentationMap(ResultForms, TensorResult):
    """The class of every pixel of one image, in the image's own pixels.

    Attributes:
        classes: ``(H, W)`` class index per pixel (``uint8`` for up to 256 classes, else ``int32``).
        probabilities: ``float32 (C, H, W)`` per-class probabilities (softmax of the logits), or ``None`` (the
            recipe keeps them with ``probabilities=True``).
        labels: the class names (``C`` of them), or ``None``.
        num_classes: ``C``: the labels' count, else the probabilities', else ``classes.max() + 1``.
        image: the image segmented (uint8 ``(H, W, 3)`` RGB), or ``None``.

    ``summary()`` has one row per class present: ``name``, ``class``, ``area`` (pixels; with ``normalize``, the
    fraction of the image) and ``confidence`` (the class's mean probability over its pixels, with
    probabilities; else ``None``); ``to_json()`` gives those rows. ``to_dict()`` (``to_json(orient="columns")``):
    the size, labels, per-class pixel counts and each present class's mask as COCO run-length encoding
    (:func:`rle_encode`); :meth:`from_dict` reads it back.

    Tensors (:meth:`to_tensors`): ``classes`` ``(H, W)``, with probabilities ``probabilities`` ``float32
    (C, H, W)``, with names ``labels`` ``BYTES (C,)``.

    Example:
        >>> seg = SegmentationMap([[0, 0, 1], [2, 1, 1]], labels=["sky", "road", "car"])
        >>> seg.image_shape, seg.counts.tolist(), seg.area("road")
        ((2, 3), [2, 3, 1], 3)
    """

    __slots__ = ("classes", "image", "labels", "num_classes", "probabilities")

    def __init__(
        self,
        classes: Any,
        *,
        probabilities: Any = None,
        labels: Sequence[str] | None = None,
        image: Any = None,
        num_classes: int | None = None,
    ) -> None:
        raw = np.asarray(classes)
        if raw.ndim != 2 or not raw.size or raw.dtype.kind not in "iub":
            raise InputError(f"SegmentationMap: classes: got {raw.dtype} {raw.shape}, expected integer (H, W)")
        if raw.min() < 0:
            raise InputError(f"SegmentationMap: classes: got a class {int(raw.min())}, expected indices >= 0")
        self.labels = None if labels is None else [str(v) for v in labels]
        probs = None if probabilities is None else np.asarray(probabilities, np.float32)
        if probs is not None and (probs.ndim != 3 or probs.shape[1:] != raw.shape):
            raise InputError(
                f"SegmentationMap: probabilities: got shape {probs.shape}, expected (C, {raw.shape[0]}, {raw.shape[1]})"
            )
        found = [len(self.labels)] if self.labels is not None else []
        found += [probs.shape[0]] if probs is not None else []
        found += [int(num_classes)] if num_classes is not None else []
        if len(set(found)) > 1:
            raise InputError(
                f"SegmentationMap: labels, probabilities and num_classes give {found} classes, expected one"
            )
        self.num_classes = found[0] if found else int(raw.max()) + 1
        if int(raw.max()) >= self.num_classes:
            raise InputError(
                f"SegmentationMap: classes: got class {int(raw.max())}, expected < {self.num_classes} (known classes)"
            )
        self.classes = raw.astype(np.uint8 if self.num_classes <= 256 else np.int32, copy=False)
        self.probabilities = probs
        self.image = _image(image, self.image_shape, "SegmentationMap")

    @property
    def image_shape(self) -> tuple[int, int]:
        """``(H, W)``: the segmented image's size."""
        return (int(self.classes.shape[0]), int(self.classes.shape[1]))

    @property
    def counts(self) -> np.ndarray:
        """``int64 (C,)``: pixels per class."""
        return np.bincount(self.classes.ravel(), minlength=self.num_classes).astype(np.int64)

    def _index(self, cls: int | str) -> int:
        if isinstance(cls, str):
            if self.labels is None or cls not in self.labels:
                raise InputError(f"SegmentationMap: class {cls!r}: expected one of {self.labels} (or an index)")
            return self.labels.index(cls)
        if isinstance(cls, bool) or not isinstance(cls, (int, np.integer)) or not 0 <= cls < self.num_classes:
            raise InputError(f"SegmentationMap: class {cls!r}: expected an index in [0, {self.num_classes}) or a name")
        return int(cls)

    def mask(self, cls: int | str) -> np.ndarray:
        """``bool (H, W)``: the pixels of class ``cls`` (an index or a name).

        Example:
            >>> SegmentationMap([[0, 1]], labels=["a", "b"]).mask("b").tolist()
            [[False, True]]
        """
        return self.classes == self._index(cls)

    def area(self, cls: int | str, *, normalize: bool = False) -> float | int:
        """Pixels of class ``cls`` (an index or a name); with ``normalize``, the fraction of the image.

        Example:
            >>> SegmentationMap([[0, 1, 1, 1]]).area(1, normalize=True)
            0.75
        """
        n = int(self.counts[self._index(cls)])
        return n / self.classes.size if normalize else n

    def _names(self) -> list[str]:
        return self.labels if self.labels is not None else [str(i) for i in range(self.num_classes)]

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON: ``image_shape``, ``labels``, ``counts`` (pixels per class) and ``rle``: each
        present class's mask (:func:`rle_encode`), keyed by its index as text. Probabilities are left out
        (:meth:`to_tensors` carries them).

        Example:
            >>> SegmentationMap([[0, 1], [0, 1]]).to_dict()["rle"]
            {'0': {'size': [2, 2], 'counts': [0, 2, 2]}, '1': {'size': [2, 2], 'counts': [2, 2]}}
        """
        counts = self.counts
        rle = {str(c): rle_encode(self.classes == c) for c in np.flatnonzero(counts).tolist()}
        return {"image_shape": list(self.image_shape), "labels": self.labels, "counts": counts.tolist(), "rle": rle}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, image: Any = None) -> SegmentationMap:
        """The map whose :meth:`to_dict` (or ``json.loads(to_json(orient="columns"))``) gave ``data``.

        Raises:
            InputError: masks that overlap, leave pixels out, or do not match ``image_shape``.

        Example:
            >>> seg = SegmentationMap([[0, 2], [1, 2]], labels=["a", "b", "c"])
            >>> SegmentationMap.from_dict(seg.to_dict()).classes.tolist()
            [[0, 2], [1, 2]]
        """
        try:
            h, w = (int(v) for v in data["image_shape"])
            rles = dict(data["rle"])
            n = len(data["counts"])
        except (KeyError, TypeError, ValueError):
            raise InputError(
                "SegmentationMap.from_dict: expected image_shape, counts and rle (to_dict's keys)"
            ) from None
        classes = np.zeros((h, w), np.int32)
        covered = np.zeros((h, w), np.int32)
        for key, rle in rles.items():
            m = rle_decode(rle)
            if m.shape != (h, w):
                raise InputError(f"SegmentationMap.from_dict: rle[{key!r}]: got size {m.shape}, expected {(h, w)}")
            classes[m] = int(key)
            covered += m
        if (covered != 1).any():
            raise InputError("SegmentationMap.from_dict: the masks must cover every pixel once; got overlaps or gaps")
        return cls(classes, labels=data.get("labels"), image=image, num_classes=n)

    def to_tensors(self) -> dict[str, np.ndarray]:
        """``classes`` ``(H, W)``, ``probabilities`` ``float32 (C, H, W)`` when kept, ``labels`` ``BYTES (C,)``
        when named; the image is not in them.

        Example:
            >>> sorted(SegmentationMap([[0, 1]], labels=["a", "b"]).to_tensors())
            ['classes', 'labels']
        """
        out: dict[str, np.ndarray] = {"classes": self.classes}
        if self.probabilities is not None:
            out["probabilities"] = self.probabilities
        if self.labels is not None:
            out["labels"] = _bytes(self.labels)
        return out

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any], *, image: Any = None) -> SegmentationMap:
        """The map whose :meth:`to_tensors` gave ``tensors``.

        Raises:
            InputError: a tensor missing, unknown or of the wrong rank.

        Example:
            >>> SegmentationMap.from_tensors({"classes": np.array([[1, 0]])}).counts.tolist()
            [1, 1]
        """
        t = _named(tensors, "SegmentationMap", {"classes": 2}, {"probabilities": 3, "labels": 1})
        labels = _strings(t["labels"], "SegmentationMap: labels") if "labels" in t else None
        return cls(t["classes"], probabilities=t.get("probabilities"), labels=labels, image=image)

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        counts, names, rows = self.counts, self._names(), []
        for c in np.flatnonzero(counts).tolist():
            area: Any = rounded(counts[c] / self.classes.size, decimals) if normalize else int(counts[c])
            conf = None
            if self.probabilities is not None:
                conf = rounded(self.probabilities[c][self.classes == c].mean(), decimals)
            rows.append({"name": names[c], "class": c, "area": area, "confidence": conf})
        return rows

    def _columns(self) -> list[str]:
        return list(_COLUMNS)

    def colors(self) -> np.ndarray:
        """The map in colours: uint8 ``(H, W, 3)``, class ``c`` in ``PALETTE[c % len(PALETTE)]``.

        Example:
            >>> SegmentationMap([[0, 1]]).colors()[0].tolist()
            [[255, 56, 56], [255, 157, 151]]
        """
        palette = np.array(_draw.PALETTE, np.uint8)
        return palette[self.classes.astype(np.int64) % len(palette)]

    def plot(self, *, alpha: float = 0.5) -> np.ndarray:
        """The kept image with the classes' colours laid over it (``alpha`` of the colour, ``1 - alpha`` of
        the picture); without an image, :meth:`colors`. A new uint8 ``(H, W, 3)`` array.

        Raises:
            OptionError: ``alpha`` is not a number in [0, 1].

        Example:
            >>> seg = SegmentationMap([[0, 1]], image=np.zeros((1, 2, 3), np.uint8))
            >>> seg.plot(alpha=1.0)[0, 1].tolist(), int(seg.plot(alpha=0.0).max())
            ([255, 157, 151], 0)
        """
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
            raise OptionError(f"SegmentationMap.plot: alpha: got {alpha!r}, expected a number in [0, 1]")
        colors = self.colors()
        if self.image is None:
            return colors
        base = self.image if self.image.ndim == 3 else np.repeat(self.image[..., None], 3, axis=2)
        mixed = alpha * colors.astype(np.float32) + (1 - alpha) * base.astype(np.float32)
        return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)

    def save(self, path: str | Path) -> Path:
        """Write :meth:`plot` to ``path`` (PNG always; JPEG, BMP, TIFF, WebP with Pillow), atomically.

        Example:
            >>> import tempfile, os
            >>> SegmentationMap([[0, 1]]).save(os.path.join(tempfile.mkdtemp(), "seg.png")).suffix
            '.png'
        """
        return _draw.save(self.plot(), path)

    def _repr_png_(self) -> bytes | None:
        return _draw.png_bytes(self.plot()) if _shows_picture(self.image) else None

    def __repr__(self) -> str:
        h, w = self.image_shape
        names, counts = self._names(), self.counts
        order = np.argsort(-counts, kind="stable")
        parts = [f"{names[c]} {100 * counts[c] / self.classes.size:.1f}%" for c in order if counts[c]]
        return f"SegmentationMap({h}x{w}, {self.num_classes} classes: " + ", ".join(parts) + ")"

    def _repr_html_(self) -> str | None:
        if _shows_picture(self.image):
            return None
        cells = "".join(
            f"<tr><td>{r['class']}</td><td>{html.escape(str(r['name']))}</td><td>{r['area']}</td></tr>"
            for r in self.summary()
        )
        h, w = self.image_shape
        return (
            f"<p><b>SegmentationMap</b>: {h}x{w}</p><table><thead><tr><th>class</th><th>label</th>"
            f"<th>pixels</th></tr></thead><tbody>{cells}</tbody></table>"
        )
