"""Result objects returned by pipelines: :class:`Detections` and :class:`Classification`.

Both are small typed containers with a readable ``repr`` and an HTML table for Jupyter.

Example:
    >>> import numpy as np
    >>> from amdinfer.results import Detections
    >>> det = Detections([[10, 20, 50, 80]], [0.9], [0], labels=["cat"], image_shape=(100, 120))
    >>> det.boxes.dtype, len(det), det.labels
    (dtype('float32'), 1, ['cat'])
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import BackendUnavailableError, InputError

__all__ = ["Classification", "Detections", "PALETTE"]

_MAX_ROWS = 10

#: Colours (RGB) that :meth:`Detections.draw` cycles through by class index (Ultralytics' palette).
PALETTE: tuple[tuple[int, int, int], ...] = (
    (255, 56, 56),
    (255, 157, 151),
    (255, 112, 31),
    (255, 178, 29),
    (207, 210, 49),
    (72, 249, 10),
    (146, 204, 23),
    (61, 219, 134),
    (26, 147, 52),
    (0, 212, 187),
    (44, 153, 168),
    (0, 194, 255),
    (52, 69, 147),
    (100, 115, 255),
    (0, 24, 236),
    (132, 56, 255),
    (82, 0, 133),
    (203, 56, 255),
    (255, 149, 200),
    (255, 55, 199),
)


def _labels(labels: Sequence[str] | None, n: int, what: str) -> list[str] | None:
    if labels is None:
        return None
    out = [str(v) for v in labels]
    if len(out) != n:
        raise InputError(f"{what}: got {len(out)} labels, expected {n} (one per entry)")
    return out


class Detections:
    """Boxes found in one image.

    Attributes:
        boxes: ``float32 (k, 4)`` boxes ``x1, y1, x2, y2`` in pixels of ``image_shape`` (the original image
            after ``ScaleBoxes``; the model input before it).
        scores: ``float32 (k,)`` confidences.
        classes: ``int64 (k,)`` class indices.
        labels: class names, one per box, or ``None``.
        image_shape: ``(height, width)`` of the image the boxes refer to, or ``None`` when unknown.

    Example:
        >>> det = Detections(np.zeros((0, 4)), [], [])
        >>> det
        Detections(0 boxes)
    """

    __slots__ = ("boxes", "classes", "image_shape", "labels", "scores")

    def __init__(
        self,
        boxes: Any,
        scores: Any,
        classes: Any,
        labels: Sequence[str] | None = None,
        image_shape: tuple[int, int] | None = None,
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
            raise InputError("Detections: classes: got non-finite values, expected class indices")
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

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    def select(self, index: Any) -> Detections:
        """A new :class:`Detections` with the rows picked by ``index`` (indices or a boolean mask).

        Example:
            >>> det = Detections([[0, 0, 1, 1], [0, 0, 2, 2]], [0.5, 0.9], [1, 2])
            >>> det.select([1]).scores.tolist()
            [0.8999999761581421]
        """
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        labels = None if self.labels is None else [self.labels[int(i)] for i in index]
        return Detections(self.boxes[index], self.scores[index], self.classes[index], labels, self.image_shape)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON.

        Example:
            >>> Detections([[0, 0, 1, 1]], [0.5], [3]).to_dict()["classes"]
            [3]
        """
        return {
            "boxes": self.boxes.tolist(),
            "scores": self.scores.tolist(),
            "classes": self.classes.tolist(),
            "labels": self.labels,
            "image_shape": self.image_shape,
        }

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

    def _repr_html_(self) -> str:
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
            The annotated copy, same shape and dtype.

        Raises:
            InputError: the image is not 2-D/3-D, or its size differs from ``image_shape``.
            BackendUnavailableError: ``text=True`` without Pillow installed.

        Example:
            >>> det = Detections([[1, 1, 6, 6]], [0.9], [0])
            >>> out = det.draw(np.zeros((8, 8, 3), np.uint8), thickness=1)
            >>> out[1, 1].tolist(), out[3, 3].tolist()
            ([255, 56, 56], [0, 0, 0])
        """
        image = np.asarray(image)
        if image.ndim not in (2, 3):
            raise InputError(f"Detections.draw: image: got shape {image.shape}, expected (H, W, 3) or (H, W)")
        if self.image_shape is not None and tuple(image.shape[:2]) != self.image_shape:
            raise InputError(
                f"Detections.draw: image: got size {image.shape[:2]}, expected {self.image_shape} (the size the "
                "boxes refer to; use ScaleBoxes to map boxes to the original image)"
            )
        if not isinstance(thickness, (int, np.integer)) or thickness < 1:
            raise InputError(f"Detections.draw: thickness: got {thickness!r}, expected an int >= 1")
        out = image.copy()
        h, w = out.shape[:2]
        for i in range(len(self)):
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
        if text and len(self):
            out = self._draw_text(out)
        return out

    def _draw_text(self, image: np.ndarray) -> np.ndarray:
        try:
            from PIL import Image, ImageDraw
        except ImportError as exc:
            raise BackendUnavailableError(
                "Detections.draw(text=True) needs Pillow: pip install pillow", backend="pillow", cause=str(exc)
            ) from exc
        pil = Image.fromarray(image)
        canvas = ImageDraw.Draw(pil)
        for i in range(len(self)):
            name = self.labels[i] if self.labels is not None else str(int(self.classes[i]))
            color = PALETTE[int(self.classes[i]) % len(PALETTE)]
            if image.ndim == 2:
                color = int(np.mean(color))  # type: ignore[assignment]
            x1, y1 = float(self.boxes[i, 0]), float(self.boxes[i, 1])
            label = f"{name} {self.scores[i]:.2f}"
            left, top, right, bottom = canvas.textbbox((x1, y1), label)
            th = bottom - top
            y = y1 - th - 2 if y1 - th - 2 >= 0 else y1
            canvas.rectangle((x1, y, x1 + (right - left) + 2, y + th + 2), fill=color)
            canvas.text((x1 + 1, y), label, fill=(255, 255, 255) if image.ndim == 3 else 255)
        return np.asarray(pil, dtype=image.dtype).copy()


class Classification:
    """The top-k classes of one image.

    Attributes:
        indices: ``int64 (k,)`` class indices, best first.
        scores: ``float32 (k,)`` their scores (probabilities after ``Softmax``).
        labels: their names, or ``None``.

    Example:
        >>> c = Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"])
        >>> c.index, c.label
        (3, 'cat')
    """

    __slots__ = ("indices", "labels", "scores")

    def __init__(self, indices: Any, scores: Any, labels: Sequence[str] | None = None) -> None:
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        self.scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        if self.indices.shape != self.scores.shape:
            raise InputError(
                f"Classification: got {self.indices.size} indices and {self.scores.size} scores, "
                "expected the same count"
            )
        self.labels = _labels(labels, self.indices.size, "Classification")

    def __len__(self) -> int:
        return int(self.indices.size)

    @property
    def index(self) -> int:
        """The best class index."""
        return int(self.indices[0])

    @property
    def score(self) -> float:
        """The best class score."""
        return float(self.scores[0])

    @property
    def label(self) -> str | None:
        """The best class name, or ``None`` without labels."""
        return None if self.labels is None else self.labels[0]

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON.

        Example:
            >>> Classification([2], [1.0]).to_dict()
            {'indices': [2], 'scores': [1.0], 'labels': None}
        """
        return {"indices": self.indices.tolist(), "scores": self.scores.tolist(), "labels": self.labels}

    def _rows(self) -> list[tuple[str, str, str]]:
        names = self.labels if self.labels is not None else [""] * len(self)
        return [(str(int(i)), name, f"{s:.4f}") for i, name, s in zip(self.indices, names, self.scores)]

    def __repr__(self) -> str:
        if not len(self):
            return "Classification(top-0)"
        rows = self._rows()
        wi = max(len(r[0]) for r in rows)
        wn = max(len(r[1]) for r in rows)
        lines = [f"  {i:>{wi}}  {n:<{wn}}  {s}" if wn else f"  {i:>{wi}}  {s}" for i, n, s in rows]
        return f"Classification(top-{len(self)}:\n" + "\n".join(lines) + "\n)"

    def _repr_html_(self) -> str:
        cells = "".join(f"<tr><td>{i}</td><td>{html.escape(n)}</td><td>{s}</td></tr>" for i, n, s in self._rows())
        return (
            f"<p><b>Classification</b>: top-{len(self)}</p>"
            "<table><thead><tr><th>class</th><th>label</th><th>score</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
        )
