"""Detections: the answer of :func:`amdinfer.yolo` (boxes found in one image) and its :class:`Detection` rows."""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from . import _draw, _draw_masks, _instances
from ._base import _MAX_ROWS, _drawable, _image, _json_list, _labels, _shows_picture
from ._draw import PALETTE
from ._forms import ResultForms
from ._instances import instance_dict, instance_rows, instance_tensors, instances, instances_from_tensors
from ._summaries import BOX_COLUMNS, detection_rows, scale
from ._tensors import TensorResult, _bytes, _named, _strings

__all__ = ["Detection", "Detections"]

_OPTIONAL = {"labels": 1, "masks": 1, "keypoints": 3}  # the tensors Detections may have besides boxes


@dataclass(frozen=True)
class Detection(TensorResult):
    """One detection: what ``det[i]`` and ``for d in det`` give.

    Attributes:
        box: ``(x1, y1, x2, y2)`` in pixels of the image the :class:`Detections` refer to.
        score: the confidence.
        class_index: the class index.
        label: the class name, or ``None`` without names.

    Example:
        >>> d = Detections([[1, 2, 3, 4]], [0.5], [7], labels=["cat"])[0]
        >>> d
        Detection(box=(1.0, 2.0, 3.0, 4.0), score=0.5, class_index=7, label='cat')
    """

    box: tuple[float, float, float, float]
    score: float
    class_index: int
    label: str | None

    row_tensor = "boxes"

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of a one-box :class:`Detections` (``boxes`` ``float32 (1, 4)``, ...; see there).

        Example:
            >>> Detection((1.0, 2.0, 3.0, 4.0), 0.5, 7, None).to_tensors()["boxes"]
            array([[1., 2., 3., 4.]], dtype=float32)
        """
        labels = None if self.label is None else [self.label]
        return Detections([self.box], [self.score], [self.class_index], labels).to_tensors()

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any]) -> Detection:
        """The :class:`Detection` whose :meth:`to_tensors` gave ``tensors`` (exactly one box).

        Example:
            >>> d = Detection((1.0, 2.0, 3.0, 4.0), 0.5, 7, "cat")
            >>> Detection.from_tensors(d.to_tensors()) == d
            True
        """
        det = Detections.from_tensors(tensors)
        if len(det) != 1:
            raise InputError(f"Detection.from_tensors: got {len(det)} boxes, expected 1 (Detections: several)")
        return det[0]


class Detections(ResultForms, TensorResult):
    """Boxes found in one image.

    Attributes:
        boxes: ``float32 (k, 4)`` boxes ``x1, y1, x2, y2`` in pixels of ``image_shape`` (the original image
            after ``ScaleBoxes``; the model input before it).
        scores: ``float32 (k,)`` confidences.
        classes: ``int64 (k,)`` class indices.
        labels: class names, one per box, or ``None``.
        image_shape: ``(height, width)`` of the image the boxes refer to, or ``None`` when unknown.
        image: the image they were found in (uint8 ``(H, W, 3)`` RGB), or ``None``. :func:`amdinfer.yolo` keeps
            what it decoded, or the array you passed (not a copy: change it and ``plot()`` changes; a BGR
            array is kept as its RGB view). Sets ``image_shape`` when that is not given.
        masks, keypoints: a segmentation model's :class:`~amdinfer.results.Masks` (one per box, in pixels of
            ``image_shape``; also a ``bool (k, H, W)`` array or ``to_dict()``'s RLE dicts, ``polygons=`` their
            ``xy``), a pose model's :class:`~amdinfer.results.Keypoints` (``(k, K, 3)``), or ``None``.
        coefficients: ``float32 (k, nm)`` mask coefficients between the decode and mask stages of :mod:`amdinfer.tasks`.

    Ultralytics' forms (its ``Boxes``): :attr:`xyxy`, :attr:`xywh`, :attr:`xyxyn`, :attr:`xywhn`, :attr:`conf`,
    :attr:`cls`; and every result's ``summary()``, ``to_df()``, ``to_csv()``, ``to_json(orient="rows")``,
    ``show()`` and ``speed`` (:class:`~amdinfer.results._forms.ResultForms`).

    ``len(det)``, ``det[i]`` (a :class:`Detection`; negative ``i`` counts from the end, out of range is an
    ``IndexError``), ``det[mask]``, ``det[indices]`` and ``det[a:b]`` (a :class:`Detections`, keeping the
    image), and ``for d in det`` (:class:`Detection` records, best first as the pipeline sorted them).

    Tensors (:meth:`to_tensors`, the server's outputs): ``boxes`` ``float32 (k, 4)``, ``scores`` ``float32 (k,)``,
    ``classes`` ``int64 (k,)`` and, with names, ``labels`` ``BYTES (k,)``; a batch concatenates them with
    ``boxes_batch_index`` ``int64 (K,)`` (the item of each box; ``row_tensor`` is ``"boxes"``).

    Example:
        >>> det = Detections(np.zeros((0, 4)), [], [])
        >>> det
        Detections(0 boxes)
        >>> det = Detections([[0, 0, 4, 4], [2, 2, 6, 6]], [0.9, 0.4], [0, 1], labels=["cat", "dog"])
        >>> len(det), det[-1].label, [d.score > 0.5 for d in det], len(det[det.scores > 0.5])
        (2, 'dog', [True, False], 1)
    """

    __slots__ = ("boxes", "classes", "coefficients", "image", "image_shape", "keypoints", "labels", "masks", "scores")

    row_tensor = "boxes"

    def __init__(
        self,
        boxes: Any,
        scores: Any,
        classes: Any,
        labels: Sequence[str] | None = None,
        image_shape: tuple[int, int] | None = None,
        *,
        image: Any = None,
        masks: Any = None,
        keypoints: Any = None,
        polygons: Any = None,
        coefficients: Any = None,
    ) -> None:
        boxes = np.asarray(boxes, dtype=np.float32)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise InputError(f"Detections: boxes: got shape {boxes.shape}, expected (k, 4) x1, y1, x2, y2")
        k = boxes.shape[0]
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        classes_arr = np.asarray(classes)
        if classes_arr.size and not np.all(np.isfinite(classes_arr.astype(np.float64))):
            rows = np.flatnonzero(~np.isfinite(classes_arr.astype(np.float64).reshape(-1))).tolist()[:10]
            raise InputError(f"Detections: classes: got non-finite values at rows {rows}, expected class indices")
        classes_arr = classes_arr.astype(np.int64).reshape(-1)
        if scores.shape != (k,) or classes_arr.shape != (k,):
            raise InputError(
                f"Detections: got {k} boxes, {scores.shape[0]} scores and {classes_arr.shape[0]} classes, "
                "expected the same count"
            )
        self.boxes = np.ascontiguousarray(boxes)
        self.scores = scores
        self.classes = classes_arr
        self.labels = _labels(labels, k, "Detections")
        self.image_shape = None if image_shape is None else (int(image_shape[0]), int(image_shape[1]))
        self.image = _image(image, self.image_shape, "Detections")
        if self.image is not None and self.image_shape is None:
            self.image_shape = (int(self.image.shape[0]), int(self.image.shape[1]))
        self.masks, self.keypoints, self.coefficients = instances(
            k, masks, keypoints, coefficients, "Detections", polygons=polygons, image_shape=self.image_shape
        )

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            n, i = len(self), int(key)
            if not -n <= i < n:
                raise IndexError(f"Detections: index {i} is out of range for {n} detection{'s' * (n != 1)}")
            i %= n
            x1, y1, x2, y2 = (float(v) for v in self.boxes[i])
            label = None if self.labels is None else self.labels[i]
            return Detection((x1, y1, x2, y2), float(self.scores[i]), int(self.classes[i]), label)
        if isinstance(key, slice):
            key = np.arange(len(self))[key]
        return self.select(key)

    def __iter__(self) -> Iterator[Detection]:
        return (self[i] for i in range(len(self)))

    @property
    def xyxy(self) -> np.ndarray:
        """``float32 (k, 4)`` ``x1, y1, x2, y2`` in pixels: :attr:`boxes` (Ultralytics' ``Boxes.xyxy``).

        Example:
            >>> det = Detections([[1, 2, 3, 4]], [0.5], [7])
            >>> det.xyxy.tolist(), det.conf.tolist(), det.cls.tolist()  # and conf, cls
            ([[1.0, 2.0, 3.0, 4.0]], [0.5], [7])
        """
        return self.boxes

    @property
    def conf(self) -> np.ndarray:
        """``float32 (k,)`` confidences: :attr:`scores` (Ultralytics' ``Boxes.conf``). Example: see :attr:`xyxy`."""
        return self.scores

    @property
    def cls(self) -> np.ndarray:
        """``int64 (k,)`` class indices: :attr:`classes` (Ultralytics' ``Boxes.cls``, which holds them as floats).

        Example: see :attr:`xyxy`."""
        return self.classes

    @property
    def xywh(self) -> np.ndarray:
        """``float32 (k, 4)`` boxes as centre ``x, y``, width, height in pixels (Ultralytics' ``Boxes.xywh``).

        Example:
            >>> Detections([[100, 50, 150, 100]], [0.9], [0]).xywh.tolist()
            [[125.0, 75.0, 50.0, 50.0]]
        """
        b = self.boxes.astype(np.float64)
        out = np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2, b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)
        return out.astype(np.float32).reshape(-1, 4)

    def _normalized(self, boxes: np.ndarray, what: str) -> np.ndarray:
        try:
            w, h = scale(self.image_shape, True, "Detections")
        except InputError:
            raise InputError(
                f"Detections.{what}: got image_shape None, expected the (height, width) the boxes refer to (pass "
                "image_shape= or image= when you build the result)"
            ) from None
        return (boxes.astype(np.float64) / np.array([w, h, w, h])).astype(np.float32).reshape(-1, 4)

    @property
    def xyxyn(self) -> np.ndarray:
        """``float32 (k, 4)`` :attr:`xyxy` divided by the width (x) and height (y) of ``image_shape``, the
        original image after ``ScaleBoxes`` (Ultralytics' ``Boxes.xyxyn``, by ``orig_shape``).

        Raises:
            InputError: ``image_shape`` is unknown.

        Example:
            >>> det = Detections([[100, 50, 300, 400]], [0.9], [0], image_shape=(480, 640))
            >>> det.xyxyn.astype(float).round(4).tolist()
            [[0.1562, 0.1042, 0.4688, 0.8333]]
        """
        return self._normalized(self.boxes, "xyxyn")

    @property
    def xywhn(self) -> np.ndarray:
        """``float32 (k, 4)`` :attr:`xywh` divided by the width (x, w) and height (y, h) of ``image_shape``
        (Ultralytics' ``Boxes.xywhn``; the form of a YOLO label file's ``class x y w h`` line).

        Raises:
            InputError: ``image_shape`` is unknown.

        Example:
            >>> det = Detections([[100, 50, 150, 100]], [0.9], [0], image_shape=(480, 640))
            >>> det.xywhn.astype(float).round(4).tolist()
            [[0.1953, 0.1562, 0.0781, 0.1042]]
        """
        return self._normalized(self.xywh, "xywhn")

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        return instance_rows(self, detection_rows(self, normalize, decimals), normalize, decimals)

    def _columns(self) -> list[str]:
        return list(BOX_COLUMNS)

    def _boxes_only(self) -> Detections:
        return Detections(self.boxes, self.scores, self.classes, self.labels, self.image_shape)

    def to_df(self, normalize: bool = False, decimals: int = 5) -> Any:
        """The boxes' table (:meth:`ResultForms.to_df`); masks and keypoints are in :meth:`summary` and the JSON."""
        return ResultForms.to_df(self._boxes_only(), normalize, decimals)

    def to_csv(self, normalize: bool = False, decimals: int = 5) -> str:
        """The boxes' CSV (:meth:`ResultForms.to_csv`); masks and keypoints are in :meth:`summary` and the JSON."""
        return ResultForms.to_csv(self._boxes_only(), normalize, decimals)

    def select(self, index: Any) -> Detections:
        """A new :class:`Detections` with the rows picked by ``index`` (indices or a boolean mask), keeping the image.

        Raises:
            InputError: a mask of another length, an index out of range, or neither ints nor bools.

        Example:
            >>> det = Detections([[0, 0, 1, 1], [0, 0, 2, 2]], [0.5, 0.9], [1, 2])
            >>> det.select([1]).scores.tolist()
            [0.8999999761581421]
        """
        index = np.asarray(index)
        n = len(self)
        if index.dtype == bool:
            if index.shape != (n,):
                raise InputError(f"Detections: mask: got shape {index.shape}, expected ({n},) (one bool per box)")
            index = np.flatnonzero(index)
        elif index.size and index.dtype.kind not in "iu":
            raise InputError(f"Detections: index: got {index.dtype} values, expected ints, a bool mask or a slice")
        index = index.astype(np.int64).reshape(-1)
        if index.size and not (-n <= index.min() and index.max() < n):
            raise InputError(f"Detections: index: got {index.tolist()}, expected values in [{-n}, {n})")
        index %= max(n, 1)
        labels = None if self.labels is None else [self.labels[int(i)] for i in index]
        kept = _instances.select_instances(self, index)
        return Detections(
            self.boxes[index],
            self.scores[index],
            self.classes[index],
            labels,
            self.image_shape,
            image=self.image,
            **kept,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON; a NaN or infinite box coordinate or score is ``None``.

        Example:
            >>> Detections([[0, 0, 1, 1]], [0.5], [3]).to_dict()["classes"]
            [3]
            >>> Detections([[0, 0, 1, np.inf]], [np.nan], [3]).to_dict()["boxes"]
            [[0.0, 0.0, 1.0, None]]
        """
        return {
            "boxes": _json_list(self.boxes),
            "scores": _json_list(self.scores),
            "classes": self.classes.tolist(),
            "labels": self.labels,
            "image_shape": self.image_shape,
            **instance_dict(self),
        }

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of this result: ``boxes`` ``float32 (k, 4)``, ``scores`` ``float32 (k,)``, ``classes``
        ``int64 (k,)`` and, when it has names, ``labels`` (``BYTES (k,)``: an object array of UTF-8 bytes). The
        image and ``image_shape`` are not in them; NaN and infinite numbers travel as they are.

        Example:
            >>> t = Detections([[0, 0, 4, 4]], [0.9], [2], labels=["cat"]).to_tensors()
            >>> [(k, v.dtype.name, v.shape) for k, v in t.items()]  # doctest: +NORMALIZE_WHITESPACE
            [('boxes', 'float32', (1, 4)), ('scores', 'float32', (1,)), ('classes', 'int64', (1,)),
             ('labels', 'object', (1,))]
        """
        out: dict[str, np.ndarray] = {"boxes": self.boxes, "scores": self.scores, "classes": self.classes}
        if self.labels is not None:
            out["labels"] = _bytes(self.labels)
        return {**out, **instance_tensors(self)}

    @classmethod
    def from_tensors(
        cls, tensors: Mapping[str, Any], *, image_shape: tuple[int, int] | None = None, image: Any = None
    ) -> Detections:
        """The :class:`Detections` whose :meth:`to_tensors` gave ``tensors``; ``image_shape`` and ``image`` (which
        the tensors do not carry) as in the constructor. A served request's answer (several images, with
        ``boxes_batch_index``): :meth:`from_batch`.

        Raises:
            InputError: a tensor missing or unknown, a shape or count that differs, labels that are not UTF-8.

        Example:
            >>> det = Detections.from_tensors(Detections([[0, 0, 4, 4]], [0.9], [2], labels=["cat"]).to_tensors())
            >>> det.boxes.tolist(), det.classes.tolist(), det.labels
            ([[0.0, 0.0, 4.0, 4.0]], [2], ['cat'])
            >>> answer = {"boxes": np.ones((2, 4)), "scores": [0.9, 0.8], "classes": [0, 1]}
            >>> answer["boxes_batch_index"] = np.array([2, 0])
            >>> [len(d) for d in Detections.from_batch(answer, 3)]
            [1, 0, 1]
        """
        t = _named(tensors, "Detections", {"boxes": 2, "scores": 1, "classes": 1}, _OPTIONAL)
        labels = _strings(t["labels"], "Detections: labels") if "labels" in t else None
        extra = instances_from_tensors(t, image_shape)
        return cls(t["boxes"], t["scores"], t["classes"], labels, image_shape, image=image, **extra)

    def _rows(self) -> list[tuple[str, str, str]]:
        rows = []
        for i in range(min(len(self), _MAX_ROWS)):
            name = self.labels[i] if self.labels is not None else f"class {self.classes[i]}"
            box = ", ".join(f"{v:.1f}" for v in self.boxes[i])
            rows.append((name, f"{self.scores[i]:.3f}", f"[{box}]"))
        return rows

    def __repr__(self) -> str:
        where = f" in a {self.image_shape[1]}x{self.image_shape[0]} image" if self.image_shape else ""
        head = f"Detections({len(self)} box{'es' if len(self) != 1 else ''}{where}"
        if not len(self):
            return head + ")"
        rows = self._rows()
        width = max(len(r[0]) for r in rows)
        lines = [f"  {name:<{width}}  {score}  {box}" for name, score, box in rows]
        if len(self) > _MAX_ROWS:
            lines.append(f"  ... {len(self) - _MAX_ROWS} more")
        return head + ":\n" + "\n".join(lines) + "\n)"

    def _repr_html_(self) -> str | None:
        if _shows_picture(self.image):
            return None  # Jupyter shows _repr_png_'s picture instead
        where = f" in a {self.image_shape[1]}&times;{self.image_shape[0]} image" if self.image_shape else ""
        cells = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{s}</td><td><code>{b}</code></td></tr>" for n, s, b in self._rows()
        )
        more = f"<tr><td colspan='3'>&hellip; {len(self) - _MAX_ROWS} more</td></tr>" if len(self) > _MAX_ROWS else ""
        return (
            f"<p><b>Detections</b>: {len(self)} boxes{where}</p>"
            "<table><thead><tr><th>label</th><th>score</th><th>box x1, y1, x2, y2</th></tr></thead>"
            f"<tbody>{cells}{more}</tbody></table>"
        )

    def draw(self, image: np.ndarray, *, thickness: int = 2, text: bool = False) -> np.ndarray:
        """Return a copy of ``image`` with the boxes drawn (colour by class), the input left unchanged.

        Args:
            image: ``uint8`` ``(H, W, 3)`` RGB (or ``(H, W)`` grey, drawn in grey levels) in the coordinates of
                the boxes, normally the original image.
            thickness: line width in pixels.
            text: also write ``label score`` above each box; needs Pillow.

        Returns:
            The annotated copy, same shape and dtype. A box with a NaN or infinite coordinate or score is not
            drawn (one ``amdinfer.results`` warning counts them).

        Raises:
            InputError: the image is not 2-D/3-D, or its size differs from ``image_shape``.
            BackendUnavailableError: ``text=True`` without Pillow installed.

        Example:
            >>> det = Detections([[1, 1, 6, 6]], [0.9], [0])
            >>> out = det.draw(np.zeros((8, 8, 3), np.uint8), thickness=1)
            >>> out[1, 1].tolist(), out[3, 3].tolist()
            ([255, 56, 56], [0, 0, 0])
        """
        return self._render(image, thickness, text, None, "Detections.draw")

    def _render(self, image: Any, thickness: int, text: bool, size: int | None, what: str) -> np.ndarray:
        """What :meth:`draw` and :meth:`plot` draw: the finite rows' boxes and, with ``text``, their labels."""
        image = np.asarray(image)
        if image.ndim not in (2, 3):
            raise InputError(f"{what}: image: got shape {image.shape}, expected (H, W, 3) or (H, W)")
        if self.image_shape is not None and tuple(image.shape[:2]) != self.image_shape:
            raise InputError(
                f"{what}: image: got size {image.shape[:2]}, expected {self.image_shape} (the size the "
                "boxes refer to; use ScaleBoxes to map boxes to the original image)"
            )
        if not isinstance(thickness, (int, np.integer)) or thickness < 1:
            raise InputError(f"{what}: thickness: got {thickness!r}, expected an int >= 1")
        out = image.copy()
        h, w = out.shape[:2]
        rows = np.flatnonzero(_drawable(what, "boxes", self.boxes, self.scores))
        if self.masks is not None and len(rows):
            colors = [PALETTE[int(self.classes[i]) % len(PALETTE)] for i in rows]
            out = _draw_masks.blend_masks(out, self.masks.data[rows], colors)
        for i in rows:
            color = np.array(PALETTE[int(self.classes[i]) % len(PALETTE)], dtype=np.float64)
            if out.ndim == 2:
                value: Any = color.mean()
            elif out.shape[2] == 3:
                value = color
            else:
                value = np.concatenate([color, np.full(out.shape[2] - 3, 255.0)])[: out.shape[2]]
            value = np.asarray(value).astype(out.dtype)
            x1, y1, x2, y2 = (round(float(v)) for v in self.boxes[i])
            x1, x2 = max(0, min(x1, w - 1)), max(0, min(x2, w - 1))
            y1, y2 = max(0, min(y1, h - 1)), max(0, min(y2, h - 1))
            if x2 < x1 or y2 < y1:
                continue
            t = int(thickness)
            out[y1 : min(y1 + t, y2 + 1), x1 : x2 + 1] = value
            out[max(y2 - t + 1, y1) : y2 + 1, x1 : x2 + 1] = value
            out[y1 : y2 + 1, x1 : min(x1 + t, x2 + 1)] = value
            out[y1 : y2 + 1, max(x2 - t + 1, x1) : x2 + 1] = value
        if text and len(rows):
            out = self._draw_text(out, rows, size, what)
        if self.keypoints is not None and len(rows):
            out = _draw_masks.draw_keypoints(out, self.keypoints.data[rows], line_width=int(thickness))
        return out

    def _draw_text(self, image: np.ndarray, rows: np.ndarray, size: int | None, what: str) -> np.ndarray:
        colors: list[Any] = [PALETTE[int(self.classes[i]) % len(PALETTE)] for i in rows]
        if image.ndim == 2:
            colors = [int(np.mean(c)) for c in colors]
        names = [self.labels[i] if self.labels is not None else str(int(self.classes[i])) for i in rows]
        texts = [f"{name} {self.scores[i]:.2f}" for name, i in zip(names, rows)]
        anchors = [(float(self.boxes[i, 0]), float(self.boxes[i, 1])) for i in rows]
        return _draw.write_labels(image, anchors, texts, colors, size=size, what=what)

    def plot(self, *, thickness: int | None = None, text: bool = True) -> np.ndarray:
        """The kept image with the boxes drawn (colour by class) and, with ``text``, ``label score`` above each:
        a new uint8 array, the kept image left unchanged.

        Args:
            thickness: line width in pixels; ``None``: Ultralytics' ``max(round((H + W) / 2 * 0.003), 2)``.
            text: write the labels (needs Pillow; letters scale with the image).

        A box with a NaN or infinite coordinate or score is left out, with one ``amdinfer.results`` warning
        that counts them (as :meth:`draw` and :meth:`save`).

        Raises:
            InputError: no image is kept (see ``image``).
            BackendUnavailableError: ``text=True`` without Pillow.

        Example:
            >>> det = Detections([[1, 1, 6, 6]], [0.9], [0], image=np.zeros((8, 8, 3), np.uint8))
            >>> out = det.plot(thickness=1, text=False)
            >>> out[1, 1].tolist(), out[3, 3].tolist(), int(det.image.sum())
            ([255, 56, 56], [0, 0, 0], 0)
        """
        image = _draw.require_image(self.image, "Detections.plot")
        width = _draw.line_width(image.shape) if thickness is None else thickness
        return self._render(image, width, text, _draw.font_size(image.shape), "Detections.plot")

    def save(self, path: str | Path) -> Path:
        """Write :meth:`plot` to ``path`` (PNG, JPEG, BMP, TIFF or WebP by its suffix), atomically.

        Raises:
            InputError: no image is kept.
            OptionError: an unknown suffix, a missing folder, a failed write.
            BackendUnavailableError: Pillow is missing (the labels; formats other than PNG without OpenCV).

        Example:
            >>> import tempfile, os
            >>> det = Detections([[1, 1, 6, 6]], [0.9], [0], labels=["cat"], image=np.zeros((8, 8, 3), np.uint8))
            >>> det.save(os.path.join(tempfile.mkdtemp(), "det.png")).suffix
            '.png'
        """
        return _draw.save(self.plot(), path)

    def _repr_png_(self) -> bytes | None:
        """:meth:`plot` as PNG, which Jupyter shows; ``None`` (the HTML table) without an image or Pillow."""
        return _draw.png_bytes(self.plot()) if _shows_picture(self.image) else None
