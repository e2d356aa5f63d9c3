"""Classifications: the answer of :func:`amdinfer.classify` (the top-k classes of one image)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from . import _draw
from ._base import _drawable, _image, _json_list, _labels, _shows_picture
from ._forms import ResultForms
from ._summaries import CLASS_COLUMNS, classification_rows
from ._tensors import TensorResult, _bytes, _named, _strings

__all__ = ["Classification"]


class Classification(ResultForms, TensorResult):
    """The top-k classes of one image.

    Attributes:
        indices: ``int64 (k,)`` class indices, best first.
        scores: ``float32 (k,)`` their scores (probabilities after ``Softmax``).
        labels: their names, or ``None``.
        image: the image classified (uint8 ``(H, W, 3)`` RGB), or ``None``; :func:`amdinfer.classify` keeps what
            it decoded or the array you passed (see :class:`Detections`).

    Every result's ``summary()`` (one row per class, best first), ``to_df()``, ``to_csv()``,
    ``to_json(orient="rows")``, ``show()`` and ``speed`` (:class:`~amdinfer.results._forms.ResultForms`).

    Tensors (:meth:`to_tensors`, the server's outputs): ``indices`` ``int64 (k,)``, ``scores`` ``float32 (k,)``
    and, with names, ``labels`` ``BYTES (k,)``; a batch stacks them (``(n, k)``).

    Example:
        >>> c = Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"])
        >>> c.index, c.label
        (3, 'cat')
    """

    __slots__ = ("image", "indices", "labels", "scores")

    def __init__(self, indices: Any, scores: Any, labels: Sequence[str] | None = None, *, image: Any = None) -> None:
        raw = np.asarray(indices)
        if raw.size and raw.dtype.kind in "fc" and not np.isfinite(raw).all():
            rows = np.flatnonzero(~np.isfinite(raw.reshape(-1))).tolist()[:10]
            raise InputError(f"Classification: indices: got non-finite values at rows {rows}, expected class indices")
        self.indices = raw.astype(np.int64).reshape(-1)
        self.scores = np.asarray(scores, dtype=np.float32).reshape(-1)
        if self.indices.shape != self.scores.shape:
            raise InputError(
                f"Classification: got {self.indices.size} indices and {self.scores.size} scores, "
                "expected the same count"
            )
        self.labels = _labels(labels, self.indices.size, "Classification")
        self.image = _image(image, None, "Classification")

    def __len__(self) -> int:
        return int(self.indices.size)

    @property
    def index(self) -> int:
        """The best class index.

        Example:
            >>> c = Classification([3, 1], [0.75, 0.25], labels=["cat", "dog"])
            >>> c.index, c.score, c.label  # and score, label
            (3, 0.75, 'cat')
        """
        return int(self.indices[0])

    @property
    def score(self) -> float:
        """The best class score. Example: see :attr:`index`."""
        return float(self.scores[0])

    @property
    def label(self) -> str | None:
        """The best class name, or ``None`` without labels. Example: see :attr:`index`."""
        return None if self.labels is None else self.labels[0]

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON; a NaN or infinite score is ``None``.

        Example:
            >>> Classification([2], [1.0]).to_dict()
            {'indices': [2], 'scores': [1.0], 'labels': None}
        """
        return {"indices": self.indices.tolist(), "scores": _json_list(self.scores), "labels": self.labels}

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of this result: ``indices`` ``int64 (k,)``, ``scores`` ``float32 (k,)`` and, when it has
        names, ``labels`` (``BYTES (k,)``: an object array of UTF-8 bytes); the image is not in them.

        Example:
            >>> Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"]).to_tensors()["labels"]
            array([b'cat', b'dog'], dtype=object)
        """
        out: dict[str, np.ndarray] = {"indices": self.indices, "scores": self.scores}
        if self.labels is not None:
            out["labels"] = _bytes(self.labels)
        return out

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any], *, image: Any = None) -> Classification:
        """The :class:`Classification` whose :meth:`to_tensors` gave ``tensors`` (``image``: the image to keep).

        Raises:
            InputError: a tensor missing or unknown, counts that differ, labels that are not UTF-8 text.

        Example:
            >>> c = Classification.from_tensors(Classification([3], [0.7], labels=["cat"]).to_tensors())
            >>> c.indices.tolist(), c.labels
            ([3], ['cat'])
        """
        t = _named(tensors, "Classification", {"indices": 1, "scores": 1}, {"labels": 1})
        labels = _strings(t["labels"], "Classification: labels") if "labels" in t else None
        return cls(t["indices"], t["scores"], labels, image=image)

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        return classification_rows(self, decimals)

    def _columns(self) -> list[str]:
        return list(CLASS_COLUMNS)

    def plot(self) -> np.ndarray:
        """The kept image with the top-k written in its top-left corner (``label score`` per line, best first;
        the index without labels): a new uint8 array. A class with a NaN or infinite score is left out, with
        one ``amdinfer.results`` warning that counts them.

        Raises:
            InputError: no image is kept.
            BackendUnavailableError: Pillow is missing.

        Example:
            >>> c = Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"], image=np.zeros((64, 96, 3), np.uint8))
            >>> out = c.plot()
            >>> out.shape, bool(out[:40, :60].any()), bool(out[48:].any())
            ((64, 96, 3), True, False)
        """
        image = _draw.require_image(self.image, "Classification.plot")
        names = self.labels if self.labels is not None else [str(int(i)) for i in self.indices]
        rows = np.flatnonzero(_drawable("Classification.plot", "classes", self.scores))
        lines = [f"{names[i]} {self.scores[i]:.2f}" for i in rows]
        return _draw.write_lines(image, lines, size=_draw.font_size(image.shape), what="Classification.plot")

    def save(self, path: str | Path) -> Path:
        """Write :meth:`plot` to ``path`` (PNG, JPEG, BMP, TIFF or WebP by its suffix), atomically.

        Raises:
            InputError: no image is kept.
            OptionError: an unknown suffix, a missing folder, a failed write.
            BackendUnavailableError: Pillow is missing.

        Example:
            >>> import tempfile, os
            >>> c = Classification([3], [0.7], image=np.zeros((32, 32, 3), np.uint8))
            >>> c.save(os.path.join(tempfile.mkdtemp(), "top.jpg")).suffix
            '.jpg'
        """
        return _draw.save(self.plot(), path)

    def _repr_png_(self) -> bytes | None:
        """:meth:`plot` as PNG, which Jupyter shows; ``None`` (the HTML table) without an image or Pillow."""
        return _draw.png_bytes(self.plot()) if _shows_picture(self.image) else None

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

    def _repr_html_(self) -> str | None:
        if _shows_picture(self.image):
            return None  # Jupyter shows _repr_png_'s picture instead
        cells = "".join(f"<tr><td>{i}</td><td>{html.escape(n)}</td><td>{s}</td></tr>" for i, n, s in self._rows())
        return (
            f"<p><b>Classification</b>: top-{len(self)}</p>"
            "<table><thead><tr><th>class</th><th>label</th><th>score</th></tr></thead>"
            f"<tbody>{cells}</tbody></table>"
        )
