"""Text results: :class:`TextLines` (quadrilaterals, text and scores of one image; ``amdinfer.ocr``'s answer) and
its :class:`TextLine` records; re-exported by :mod:`amdinfer.results`.

Example:
    >>> from amdinfer.results import TextLines
    >>> lines = TextLines([[[0, 0], [8, 0], [8, 4], [0, 4]]], ["hi"], [0.9])
    >>> len(lines), lines.text
    (1, 'hi')
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from . import _draw
from ._base import _MAX_ROWS, _drawable, _image, _json_list, _shows_picture
from ._draw import PALETTE
from ._forms import ResultForms
from ._summaries import QUAD_COLUMNS, text_rows
from ._tensors import TensorResult, _bytes, _named, _strings

__all__ = ["TextLine", "TextLines"]


@dataclass(frozen=True)
class TextLine(TensorResult):
    """One line of :class:`TextLines`: its quadrilateral, text and score.

    Example:
        >>> TextLine(((0.0, 0.0), (4.0, 0.0), (4.0, 2.0), (0.0, 2.0)), "hi", 0.9).text
        'hi'
    """

    quad: tuple[tuple[float, float], ...]
    text: str | None
    score: float

    row_tensor = "quads"

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of a one-line :class:`TextLines` (``quads`` ``float32 (1, 4, 2)``, ...; see there).

        Example:
            >>> TextLine(((0.0, 0.0), (4.0, 0.0), (4.0, 2.0), (0.0, 2.0)), "hi", 0.5).to_tensors()["texts"]
            array([b'hi'], dtype=object)
        """
        return TextLines([self.quad], None if self.text is None else [self.text], [self.score]).to_tensors()

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any]) -> TextLine:
        """The :class:`TextLine` whose :meth:`to_tensors` gave ``tensors`` (exactly one line; a ``None`` text
        comes back as ``""``, as for :class:`TextLines`).

        Example:
            >>> line = TextLine(((0.0, 0.0), (4.0, 0.0), (4.0, 2.0), (0.0, 2.0)), "hi", 0.5)
            >>> TextLine.from_tensors(line.to_tensors()) == line
            True
        """
        lines = TextLines.from_tensors(tensors)
        if len(lines) != 1:
            raise InputError(f"TextLine.from_tensors: got {len(lines)} lines, expected 1 (TextLines: several)")
        return lines[0]


class TextLines(ResultForms, TensorResult):
    """Text lines found in one image: quadrilaterals (corners clockwise from top-left), text and scores.

    Attributes:
        quads: ``float32 (k, 4, 2)`` corners ``(x, y)`` in pixels of ``image_shape``.
        texts: one string per line, or ``None`` before recognition (detection only).
        scores: ``float32 (k,)``: the recogniser's score per line (the detector's box score before it).
        image_shape: ``(height, width)`` of the image, or ``None``.
        image: the image (uint8 RGB), or ``None``; as :class:`Detections`.

    ``len(lines)``, ``lines[i]`` (a :class:`TextLine`), ``lines[mask]``/``lines[a:b]`` (a :class:`TextLines`),
    iteration in reading order, :attr:`boxes` (axis-aligned ``x1, y1, x2, y2``), :attr:`text` (the lines joined
    by newlines), ``to_dict()``/``to_json()``, ``draw()``/``plot()``/``save()``, and every result's
    ``summary()`` (text, confidence, the four corners), ``to_df()``, ``to_csv()``, ``to_json(orient="rows")``,
    ``show()`` and ``speed`` (:class:`~amdinfer.results._forms.ResultForms`).

    Odd values (as :class:`~amdinfer.results.Detections`): a line with a NaN or infinite corner or score is left
    out of pictures (one ``amdinfer.results`` warning counts them); JSON writes ``null`` for such a number.

    Tensors (:meth:`to_tensors`, the server's outputs): ``quads`` ``float32 (k, 4, 2)``, ``scores``
    ``float32 (k,)``, ``texts`` ``BYTES (k,)``; a batch concatenates them with ``quads_batch_index``.

    Example:
        >>> lines = TextLines([[[0, 0], [8, 0], [8, 4], [0, 4]]], ["hello"], [0.98], image_shape=(10, 10))
        >>> len(lines), lines[0].text, lines.boxes.tolist(), lines.text
        (1, 'hello', [[0.0, 0.0, 8.0, 4.0]], 'hello')
    """

    __slots__ = ("image", "image_shape", "quads", "scores", "texts")

    row_tensor = "quads"

    def __init__(
        self,
        quads: Any,
        texts: Sequence[str] | None,
        scores: Any,
        image_shape: tuple[int, int] | None = None,
        *,
        image: Any = None,
    ) -> None:
        quads = np.asarray(quads, dtype=np.float32)
        if quads.size == 0:
            quads = quads.reshape(0, 4, 2)
        if quads.ndim != 3 or quads.shape[1:] != (4, 2):
            raise InputError(f"TextLines: quads: got shape {quads.shape}, expected (k, 4, 2) corners x, y")
        k = quads.shape[0]
        scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        if scores.shape != (k,):
            raise InputError(f"TextLines: got {k} quads and {scores.shape[0]} scores, expected the same count")
        if texts is not None:
            if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
                raise InputError("TextLines: texts: expected a sequence of str (one per line) or None")
            texts = list(texts)
            if len(texts) != k:
                raise InputError(f"TextLines: got {k} quads and {len(texts)} texts, expected the same count")
        self.quads = np.ascontiguousarray(quads)
        self.texts = texts
        self.scores = scores
        self.image_shape = None if image_shape is None else (int(image_shape[0]), int(image_shape[1]))
        self.image = _image(image, self.image_shape, "TextLines")
        if self.image is not None and self.image_shape is None:
            self.image_shape = (int(self.image.shape[0]), int(self.image.shape[1]))

    @property
    def boxes(self) -> np.ndarray:
        """``float32 (k, 4)`` axis-aligned boxes ``x1, y1, x2, y2`` around the quads.

        Example:
            >>> TextLines([[[1, 2], [5, 1], [6, 4], [2, 5]]], None, [1.0]).boxes.tolist()
            [[1.0, 1.0, 6.0, 5.0]]
        """
        if not len(self):
            return np.zeros((0, 4), np.float32)
        return np.concatenate([self.quads.min(axis=1), self.quads.max(axis=1)], axis=1)

    @property
    def text(self) -> str:
        """The lines' texts joined by newlines, in order (``""`` before recognition).

        Example:
            >>> TextLines(np.zeros((2, 4, 2)), ["a", "b"], [1, 1]).text
            'a\\nb'
        """
        return "\n".join(self.texts or ())

    def __len__(self) -> int:
        return int(self.quads.shape[0])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            n, i = len(self), int(key)
            if not -n <= i < n:
                raise IndexError(f"TextLines: index {i} is out of range for {n} line{'s' * (n != 1)}")
            i %= n
            quad = tuple((float(x), float(y)) for x, y in self.quads[i])
            return TextLine(quad, None if self.texts is None else self.texts[i], float(self.scores[i]))
        if isinstance(key, slice):
            key = np.arange(len(self))[key]
        return self.select(key)

    def __iter__(self) -> Iterator[TextLine]:
        return (self[i] for i in range(len(self)))

    def select(self, index: Any) -> TextLines:
        """A new :class:`TextLines` with the lines picked by ``index`` (indices or a bool mask), keeping the image.

        Raises:
            InputError: a mask of another length, an index out of range, or neither ints nor bools.

        Example:
            >>> TextLines(np.zeros((2, 4, 2)), ["a", "b"], [0.2, 0.9]).select([1]).texts
            ['b']
        """
        index = np.asarray(index)
        n = len(self)
        if index.dtype == bool:
            if index.shape != (n,):
                raise InputError(f"TextLines: mask: got shape {index.shape}, expected ({n},) (one bool per line)")
            index = np.flatnonzero(index)
        elif index.size and index.dtype.kind not in "iu":
            raise InputError(f"TextLines: index: got {index.dtype} values, expected ints, a bool mask or a slice")
        index = index.astype(np.int64).reshape(-1)
        if index.size and not (-n <= index.min() and index.max() < n):
            raise InputError(f"TextLines: index: got {index.tolist()}, expected values in [{-n}, {n})")
        texts = None if self.texts is None else [self.texts[int(i)] for i in index]
        return TextLines(self.quads[index], texts, self.scores[index], self.image_shape, image=self.image)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON; ``TextLines(**d)`` rebuilds it. A NaN or infinite corner or score is ``None``.

        Example:
            >>> TextLines([[[0, 0], [2, 0], [2, 1], [0, 1]]], ["a"], [0.5]).to_dict()["texts"]
            ['a']
        """
        return {
            "quads": _json_list(self.quads),
            "texts": self.texts,
            "scores": _json_list(self.scores),
            "image_shape": self.image_shape,
        }

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of this result: ``quads`` ``float32 (k, 4, 2)`` (corners in the page's pixels), ``scores``
        ``float32 (k,)`` and ``texts`` (``BYTES (k,)``: an object array of UTF-8 bytes; ``b""`` for each line
        before recognition, when ``texts`` is ``None``), in reading order. The image is not in them.

        Example:
            >>> t = TextLines(np.zeros((2, 4, 2)), ["a", "bc"], [0.9, 0.8]).to_tensors()
            >>> {k: (v.dtype.name, v.shape) for k, v in t.items()}
            {'quads': ('float32', (2, 4, 2)), 'scores': ('float32', (2,)), 'texts': ('object', (2,))}
        """
        texts = self.texts if self.texts is not None else [""] * len(self)
        return {"quads": self.quads, "scores": self.scores, "texts": _bytes(texts)}

    @classmethod
    def from_tensors(
        cls, tensors: Mapping[str, Any], *, image_shape: tuple[int, int] | None = None, image: Any = None
    ) -> TextLines:
        """The :class:`TextLines` whose :meth:`to_tensors` gave ``tensors``; ``image_shape`` and ``image`` as in
        the constructor. The tensors have no "not recognised" mark: lines without text come back as ``""``.

        Raises:
            InputError: a tensor missing or unknown, a shape or count that differs, texts that are not UTF-8.

        Example:
            >>> lines = TextLines.from_tensors(TextLines(np.ones((1, 4, 2)), ["hé"], [0.9]).to_tensors())
            >>> lines.texts, lines.quads.shape
            (['hé'], (1, 4, 2))
        """
        t = _named(tensors, "TextLines", {"quads": 3, "scores": 1, "texts": 1}, {})
        texts = _strings(t["texts"], "TextLines: texts")
        return cls(t["quads"], texts, t["scores"], image_shape, image=image)

    _ensure_ascii = False  # texts as they read

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        return text_rows(self, normalize, decimals)

    def _columns(self) -> list[str]:
        return list(QUAD_COLUMNS)

    def _rows(self) -> list[tuple[str, str, str]]:
        rows = []
        for i in range(min(len(self), _MAX_ROWS)):
            text = repr(self.texts[i]) if self.texts is not None else "-"
            box = ", ".join(f"{v:.0f}" for v in self.boxes[i])
            rows.append((text, f"{self.scores[i]:.3f}", f"[{box}]"))
        return rows

    def __repr__(self) -> str:
        where = f" in a {self.image_shape[1]}x{self.image_shape[0]} image" if self.image_shape else ""
        head = f"TextLines({len(self)} line{'s' if len(self) != 1 else ''}{where}"
        if not len(self):
            return head + ")"
        lines = [f"  {score}  {box}  {text}" for text, score, box in self._rows()]
        if len(self) > _MAX_ROWS:
            lines.append(f"  ... {len(self) - _MAX_ROWS} more")
        return head + ":\n" + "\n".join(lines) + "\n)"

    def _repr_html_(self) -> str | None:
        if _shows_picture(self.image):
            return None
        cells = "".join(
            f"<tr><td>{html.escape(t)}</td><td>{s}</td><td><code>{b}</code></td></tr>" for t, s, b in self._rows()
        )
        return (
            f"<p><b>TextLines</b>: {len(self)} lines</p><table><thead><tr><th>text</th><th>score</th>"
            f"<th>box x1, y1, x2, y2</th></tr></thead><tbody>{cells}</tbody></table>"
        )

    def draw(self, image: np.ndarray, *, thickness: int = 2, text: bool = False) -> np.ndarray:
        """Return a copy of ``image`` with each quadrilateral's outline drawn (one colour per line).

        Args:
            image: ``uint8`` ``(H, W, 3)`` or ``(H, W)`` in the coordinates of the quads.
            thickness: line width in pixels.
            text: also write each line's text above it (needs Pillow).

        A line with a NaN or infinite corner or score is not drawn (one ``amdinfer.results`` warning counts
        them); an edge that runs far outside the image is cut at its border first.

        Raises:
            InputError: the image is not 2-D/3-D, is of another size than ``image_shape``, or ``thickness`` < 1.

        Example:
            >>> lines = TextLines([[[1, 1], [6, 1], [6, 5], [1, 5]]], ["a"], [0.9])
            >>> out = lines.draw(np.zeros((8, 8, 3), np.uint8), thickness=1)
            >>> out[1, 3].tolist() != [0, 0, 0], out[3, 3].tolist()
            (True, [0, 0, 0])
        """
        return self._render(image, thickness, text, None, "TextLines.draw")

    def _render(self, image: Any, thickness: int, text: bool, size: int | None, what: str) -> np.ndarray:
        """What :meth:`draw` and :meth:`plot` draw: the finite lines' outlines and, with ``text``, their texts."""
        image = np.asarray(image)
        if image.ndim not in (2, 3):
            raise InputError(f"{what}: image: got shape {image.shape}, expected (H, W, 3) or (H, W)")
        if self.image_shape is not None and tuple(image.shape[:2]) != self.image_shape:
            raise InputError(f"{what}: image: got size {image.shape[:2]}, expected {self.image_shape}")
        if not isinstance(thickness, (int, np.integer)) or thickness < 1:
            raise InputError(f"{what}: thickness: got {thickness!r}, expected an int >= 1")
        out = image.copy()
        h, w = out.shape[:2]
        r = (int(thickness) - 1) / 2
        rows = np.flatnonzero(_drawable(what, "lines", self.quads, self.scores))
        for i in rows:
            quad = self.quads[i].astype(np.float64)
            color = np.array(PALETTE[i % len(PALETTE)], dtype=np.float64)
            value = np.asarray(color.mean() if out.ndim == 2 else color[: out.shape[2]]).astype(out.dtype)
            for a0, b0 in zip(quad, np.roll(quad, -1, axis=0)):
                seg = _clip_segment(a0, b0, (-r - 1, -r - 1), (w + r, h + r))
                if seg is None:
                    continue
                a, b = seg
                steps = int(max(abs(b - a).max(), 1)) * 2 + 1
                pts = a + (b - a) * np.linspace(0, 1, steps)[:, None]
                for dx in np.arange(-r, r + 1):
                    for dy in np.arange(-r, r + 1):
                        xs = np.clip(np.round(pts[:, 0] + dx).astype(int), 0, w - 1)
                        ys = np.clip(np.round(pts[:, 1] + dy).astype(int), 0, h - 1)
                        out[ys, xs] = value
        if text and len(rows) and self.texts is not None:
            out = self._draw_text(out, rows, size, what)
        return out

    def _draw_text(self, image: np.ndarray, rows: np.ndarray, size: int | None, what: str) -> np.ndarray:
        colors: list[Any] = [PALETTE[i % len(PALETTE)] for i in rows]
        if image.ndim == 2:
            colors = [int(np.mean(c)) for c in colors]
        boxes = self.boxes
        anchors = [(float(boxes[i, 0]), float(boxes[i, 1])) for i in rows]
        texts = [(self.texts or [])[i] for i in rows]
        return _draw.write_labels(image, anchors, texts, colors, size=size, what=what)

    def plot(self, *, thickness: int | None = None, text: bool = True) -> np.ndarray:
        """The kept image with the quadrilaterals drawn and, with ``text``, each line's text above it.

        A line with a NaN or infinite corner or score is left out (as :meth:`draw`).

        Raises:
            InputError: no image is kept.
            BackendUnavailableError: ``text=True`` without Pillow.

        Example:
            >>> page = np.zeros((8, 8, 3), np.uint8)
            >>> lines = TextLines([[[1, 1], [6, 1], [6, 5], [1, 5]]], ["a"], [0.9], image=page)
            >>> lines.plot(thickness=1, text=False).shape
            (8, 8, 3)
        """
        image = _draw.require_image(self.image, "TextLines.plot")
        width = _draw.line_width(image.shape) if thickness is None else thickness
        return self._render(image, width, text, _draw.font_size(image.shape), "TextLines.plot")

    def save(self, path: str | Path) -> Path:
        """Write :meth:`plot` to ``path`` (format by suffix), atomically.

        Example:
            >>> import tempfile, os
            >>> page = np.zeros((8, 8, 3), np.uint8)
            >>> lines = TextLines([[[1, 1], [6, 1], [6, 5], [1, 5]]], ["a"], [0.9], image=page)
            >>> lines.save(os.path.join(tempfile.mkdtemp(), "lines.png")).suffix
            '.png'
        """
        return _draw.save(self.plot(), path)

    def _repr_png_(self) -> bytes | None:
        return _draw.png_bytes(self.plot()) if _shows_picture(self.image) else None


def _outside(p: np.ndarray, lo: tuple[float, float], hi: tuple[float, float]) -> int:
    """Cohen-Sutherland's code of ``p``: bit ``2 * axis`` below ``lo``, bit ``2 * axis + 1`` above ``hi``."""
    return sum((1 << 2 * k) * bool(p[k] < lo[k]) + (2 << 2 * k) * bool(p[k] > hi[k]) for k in (0, 1))


def _clip_segment(
    a: np.ndarray, b: np.ndarray, lo: tuple[float, float], hi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The part of segment ``a``-``b`` inside the box ``lo``-``hi`` (Cohen-Sutherland), or ``None`` when it
    misses: an edge that runs far outside the picture is sampled only where it can be seen. Each crossing is
    computed from the other end, so a far end (``1e30``) does not swamp the near one.

    Example:
        >>> a, b = _clip_segment(np.array([-1e30, 2.0]), np.array([5.0, 2.0]), (0, 0), (8, 8))
        >>> a.tolist(), b.tolist()
        ([0.0, 2.0], [5.0, 2.0])
        >>> _clip_segment(np.array([-3.0, 9.0]), np.array([-1.0, 20.0]), (0, 0), (8, 8)) is None
        True
    """
    a, b = np.array(a, np.float64), np.array(b, np.float64)
    for _ in range(8):  # each pass puts one end on one border line: at most 4 per end
        code_a, code_b = _outside(a, lo, hi), _outside(b, lo, hi)
        if not code_a | code_b:
            return a, b
        if code_a & code_b:
            return None  # both ends beyond the same border
        p, q = (a, b) if code_a else (b, a)
        code = code_a or code_b
        k = 0 if code & 3 else 1  # the axis whose border p is beyond
        edge = lo[k] if code & (1 << 2 * k) else hi[k]
        other = 1 - k
        p[other] = q[other] + (edge - q[k]) * (p[other] - q[other]) / (p[k] - q[k])
        p[k] = edge
    return (a, b) if not _outside(a, lo, hi) | _outside(b, lo, hi) else None
