"""Text-embedding results: :class:`Embeddings` (what :func:`amdinfer.embed`'s embedder returns; rows are
:class:`Embedding` records) and :class:`Matches` (what :meth:`Embeddings.search` finds; rows of :class:`Match`).

Example:
    >>> docs = Embeddings([[1.0, 0.0], [0.0, 1.0]], ["cats", "stocks"])
    >>> docs.search(Embeddings([[0.9, 0.1]], ["kittens"]), k=1)[0][0].text
    'cats'
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ._base import _MAX_ROWS, _json_list
from ._forms import ResultForms
from ._summaries import MATCH_COLUMNS, embedding_columns, embedding_rows, match_rows
from ._tensors import TensorResult, _bytes, _named, _strings

__all__ = ["Embedding", "Embeddings", "Match", "Matches"]


def _short(text: str | None, width: int = 48) -> str:
    if text is None:
        return ""
    return text if len(text) <= width else text[: width - 3] + "..."


def _unit_rows(vectors: np.ndarray, what: str) -> np.ndarray:
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    if (norms == 0).any():
        raise InputError(f"{what}: rows {np.flatnonzero(norms[:, 0] == 0).tolist()} are zero, cosine is undefined")
    return vectors.astype(np.float64) / norms


@dataclass(frozen=True, eq=False)
class Embedding(ResultForms, TensorResult):
    """One text's embedding: its text and vector (``float32 (d,)``). What an embedder gives for one str
    (``embedder("hi")``, 1-D as sentence-transformers' ``encode("hi")``) and what ``emb[i]`` gives.

    ``np.asarray(e)`` is the vector (``shape`` ``(d,)``); :meth:`Embeddings.search` takes it as a query; and every
    result's ``summary()``, ``to_df()``, ``to_csv()``, ``to_json()``, ``show()`` and ``speed``.

    Example:
        >>> e = Embeddings([[0.6, 0.8]], ["hi"])[0]
        >>> e.text, e.shape, np.asarray(e).tolist() == e.vector.tolist()
        ('hi', (2,), True)
    """

    text: str | None
    vector: np.ndarray

    row_tensor = "vectors"
    _pictured = False

    def __post_init__(self) -> None:
        v = np.asarray(self.vector, dtype=np.float32)
        if v.ndim != 1:
            raise InputError(f"Embedding: vector: got shape {v.shape}, expected (d,)")
        object.__setattr__(self, "vector", v)

    @property
    def shape(self) -> tuple[int]:
        """``(d,)``: the vector's shape.

        Example:
            >>> e = Embeddings([[0.6, 0.8]], ["hi"])
            >>> e[0].shape, e[0].dim, e.dim  # and dim, Embeddings.dim
            ((2,), 2, 2)
        """
        return (int(self.vector.shape[0]),)

    @property
    def dim(self) -> int:
        """The vector size ``d``. Example: see :attr:`shape`."""
        return int(self.vector.shape[0])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.vector if dtype is None else self.vector.astype(dtype)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON; ``Embedding(**e.to_dict())`` gives it back.

        Example:
            >>> Embedding("hi", np.array([0.5, 0.25], np.float32)).to_dict()
            {'text': 'hi', 'vector': [0.5, 0.25]}
        """
        return {"text": self.text, "vector": self.vector.tolist()}

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        return embedding_rows(self.vector[None], None if self.text is None else [self.text], normalize, decimals)

    def _columns(self) -> list[str]:
        return embedding_columns(self.dim)

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of a one-row :class:`Embeddings` (``vectors`` ``float32 (1, d)``, ...; see there).

        Example:
            >>> Embedding("hi", np.array([0.6, 0.8], np.float32)).to_tensors()["vectors"]
            array([[0.6, 0.8]], dtype=float32)
        """
        return Embeddings([self.vector], None if self.text is None else [self.text]).to_tensors()

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any]) -> Embedding:
        """The :class:`Embedding` whose :meth:`to_tensors` gave ``tensors`` (exactly one row).

        Example:
            >>> e = Embedding.from_tensors(Embedding("hi", np.array([0.6, 0.8], np.float32)).to_tensors())
            >>> e.text, e.vector.tolist() == np.float32([0.6, 0.8]).tolist()
            ('hi', True)
        """
        emb = Embeddings.from_tensors(tensors)
        if len(emb) != 1:
            raise InputError(f"Embedding.from_tensors: got {len(emb)} rows, expected 1 (Embeddings: several)")
        return emb[0]


class Embeddings(ResultForms, TensorResult):
    """Sentence embeddings: ``float32 (n, d)`` vectors, one per text, in the order the texts came.

    Attributes:
        vectors: ``float32 (n, d)``; ``np.asarray(emb)`` gives it too.
        texts: the texts, one per row, or ``None``.
        normalized: whether the rows were L2-normalised (``embed(normalize=True)``: cosine is then a dot product).

    ``len(emb)``, ``emb[i]`` (an :class:`Embedding`), ``emb[a:b]``/``emb[mask]`` (an :class:`Embeddings`),
    iteration, :meth:`similarity`, :meth:`search`, ``to_dict()``/``to_json()``, and every result's ``summary()``
    (text, embedding), ``to_df()``/``to_csv()`` (``embedding_0`` ... columns), ``show()`` and ``speed``.

    Tensors (:meth:`to_tensors`): ``vectors`` ``float32 (n, d)`` and, with texts, ``texts`` ``BYTES (n,)``; a
    batch concatenates them with ``vectors_batch_index``.

    Example:
        >>> emb = Embeddings([[0.6, 0.8], [1.0, 0.0]], ["a", "b"], normalized=True)
        >>> len(emb), emb.dim, emb.similarity().astype(float).round(2).tolist()
        (2, 2, [[1.0, 0.6], [0.6, 1.0]])
    """

    __slots__ = ("normalized", "texts", "vectors")

    row_tensor = "vectors"

    def __init__(self, vectors: Any, texts: Sequence[str] | None = None, *, normalized: bool = False) -> None:
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2:
            raise InputError(f"Embeddings: vectors: got shape {v.shape}, expected (n, d)")
        if not np.isfinite(v).all():
            raise InputError("Embeddings: vectors: got non-finite values, expected finite floats")
        if texts is not None:
            if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
                raise InputError("Embeddings: texts: expected a sequence of str (one per row) or None")
            texts = list(texts)
            if len(texts) != v.shape[0]:
                raise InputError(
                    f"Embeddings: got {v.shape[0]} vectors and {len(texts)} texts, expected the same count"
                )
        if not isinstance(normalized, bool):
            raise InputError(f"Embeddings: normalized: got {normalized!r}, expected True or False")
        self.vectors = np.ascontiguousarray(v)
        self.texts = texts
        self.normalized = normalized

    @property
    def dim(self) -> int:
        """The vector size ``d``. Example: see :attr:`Embedding.shape`."""
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.vectors if dtype is None else self.vectors.astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            n, i = len(self), int(key)
            if not -n <= i < n:
                raise IndexError(f"Embeddings: index {i} is out of range for {n} row{'s' * (n != 1)}")
            i %= n
            return Embedding(None if self.texts is None else self.texts[i], self.vectors[i].copy())
        if isinstance(key, slice):
            key = np.arange(len(self))[key]
        index = np.asarray(key)
        n = len(self)
        if index.dtype == bool:
            if index.shape != (n,):
                raise InputError(f"Embeddings: mask: got shape {index.shape}, expected ({n},)")
            index = np.flatnonzero(index)
        if index.size and not np.issubdtype(index.dtype, np.integer):
            raise InputError(f"Embeddings: index: got {index.dtype}, expected ints, a slice or a bool mask")
        index = index.astype(np.int64).reshape(-1)
        if index.size and not (-n <= index.min() and index.max() < n):
            raise InputError(f"Embeddings: index: got {index.tolist()}, expected values in [{-n}, {n})")
        texts = None if self.texts is None else [self.texts[int(i)] for i in index]
        return Embeddings(self.vectors[index], texts, normalized=self.normalized)

    def __iter__(self) -> Iterator[Embedding]:
        return (self[i] for i in range(len(self)))

    @staticmethod
    def _matrix(other: Any, dim: int, what: str) -> np.ndarray:
        if isinstance(other, str) or (isinstance(other, (list, tuple)) and any(isinstance(t, str) for t in other)):
            shown = repr(other) if len(repr(other)) <= 40 else repr(other)[:37] + "..."
            raise InputError(
                f"{what}: got text {shown}, expected an Embedding/Embeddings or vectors (m, {dim}): embed the "
                'text first with the corpus\'s embedder, e.g. docs.search(embedder("text"))'
            )
        v = other.vectors if isinstance(other, Embeddings) else np.asarray(other, dtype=np.float32)
        if v.ndim == 1:
            v = v[None]
        if v.ndim != 2 or v.shape[1] != dim:
            raise InputError(f"{what}: got shape {v.shape}, expected (m, {dim}) or ({dim},) vectors")
        return v

    def similarity(self, other: Any = None) -> np.ndarray:
        """Cosine similarity ``float32 (n, m)`` of these rows against ``other``'s (an :class:`Embeddings`, or
        vectors ``(m, d)``/``(d,)``); ``None``: against themselves. Computed in float64 from unit rows, so it is
        the cosine whether or not the rows were normalised.

        Raises:
            InputError: a vector size that differs, or a zero row.

        Example:
            >>> Embeddings([[1.0, 0.0]]).similarity([[1.0, 1.0], [0.0, 2.0]]).astype(float).round(3).tolist()
            [[0.707, 0.0]]
        """
        rows = self.vectors if other is None else self._matrix(other, self.dim, "similarity: other")
        return (_unit_rows(self.vectors, "similarity") @ _unit_rows(rows, "similarity: other").T).astype(np.float32)

    def search(self, queries: Any, k: int = 5) -> Matches:
        """The ``k`` rows of this corpus most similar (cosine) to each query, best first.

        Args:
            queries: an :class:`Embeddings` or an :class:`Embedding` (their texts label the matches), or
                vectors ``(q, d)``/``(d,)``. A str is refused: embed it first (``docs.search(embedder("text"))``).
            k: matches per query; at most ``len(self)`` come back. Ties keep the corpus order.

        Returns:
            A :class:`Matches` with one row per query.

        Raises:
            InputError: a str or a list of str (embed them first), a vector size that differs, a zero row.

        Example:
            >>> docs = Embeddings([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], ["x", "diagonal", "y"])
            >>> m = docs.search([[0.0, 1.0]], k=2)
            >>> m.indices.tolist(), m.scores.astype(float).round(2).tolist()
            ([[2, 1]], [[1.0, 0.8]])
        """
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise InputError(f"k: got {k!r}, expected an int >= 1")
        sims = Embeddings(self._matrix(queries, self.dim, "search: queries")).similarity(self.vectors)
        order = np.argsort(-sims, axis=1, kind="stable")[:, : min(int(k), len(self))]
        texts = queries.texts if isinstance(queries, Embeddings) else None
        if isinstance(queries, Embedding) and queries.text is not None:
            texts = [queries.text]
        return Matches(order, np.take_along_axis(sims, order, axis=1), queries=texts, docs=self.texts)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON; ``Embeddings(**emb.to_dict())`` gives it back.

        Example:
            >>> Embeddings([[0.5, 0.25]], ["hi"]).to_dict()
            {'vectors': [[0.5, 0.25]], 'texts': ['hi'], 'normalized': False}
        """
        return {"vectors": self.vectors.tolist(), "texts": self.texts, "normalized": self.normalized}

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of this result: ``vectors`` ``float32 (n, d)`` and, when it has texts, ``texts``
        (``BYTES (n,)``: an object array of UTF-8 bytes). ``normalized`` is not in them.

        Example:
            >>> {k: v.shape for k, v in Embeddings([[0.6, 0.8]], ["hi"]).to_tensors().items()}
            {'vectors': (1, 2), 'texts': (1,)}
        """
        out: dict[str, np.ndarray] = {"vectors": self.vectors}
        if self.texts is not None:
            out["texts"] = _bytes(self.texts)
        return out

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any], *, normalized: bool = False) -> Embeddings:
        """The :class:`Embeddings` whose :meth:`to_tensors` gave ``tensors``; ``normalized`` as in the constructor.

        Raises:
            InputError: a tensor missing or unknown, a shape or count that differs, texts that are not UTF-8.

        Example:
            >>> emb = Embeddings.from_tensors(Embeddings([[0.6, 0.8]], ["hi"]).to_tensors(), normalized=True)
            >>> emb.texts, emb.dim, emb.normalized
            (['hi'], 2, True)
        """
        t = _named(tensors, "Embeddings", {"vectors": 2}, {"texts": 1})
        texts = _strings(t["texts"], "Embeddings: texts") if "texts" in t else None
        return cls(t["vectors"], texts, normalized=normalized)

    _pictured = False

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        return embedding_rows(self.vectors, self.texts, normalize, decimals)

    def _columns(self) -> list[str]:
        return embedding_columns(self.dim)

    def _rows(self) -> list[tuple[str, str, str]]:
        rows = []
        for i in range(min(len(self), _MAX_ROWS)):
            head = ", ".join(f"{x:+.3f}" for x in self.vectors[i, :3]) + (", ..." if self.dim > 3 else "")
            rows.append((str(i), f"[{head}]", _short(None if self.texts is None else self.texts[i])))
        return rows

    def __repr__(self) -> str:
        head = f"Embeddings({len(self)} x {self.dim}{', normalized' if self.normalized else ''}"
        if not len(self):
            return head + ")"
        rows = self._rows()
        wi = max(len(r[0]) for r in rows)
        lines = [f"  {i:>{wi}}  {v}  {t!r}" if t else f"  {i:>{wi}}  {v}" for i, v, t in rows]
        if len(self) > _MAX_ROWS:
            lines.append(f"  ... {len(self) - _MAX_ROWS} more")
        return head + ":\n" + "\n".join(lines) + "\n)"

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td>{i}</td><td><code>{v}</code></td><td>{html.escape(t)}</td></tr>" for i, v, t in self._rows()
        )
        more = f"<tr><td colspan='3'>&hellip; {len(self) - _MAX_ROWS} more</td></tr>" if len(self) > _MAX_ROWS else ""
        return (
            f"<p><b>Embeddings</b>: {len(self)} &times; {self.dim}</p>"
            "<table><thead><tr><th>#</th><th>vector</th><th>text</th></tr></thead>"
            f"<tbody>{cells}{more}</tbody></table>"
        )


@dataclass(frozen=True)
class Match(TensorResult):
    """One match of :meth:`Embeddings.search`: the corpus row, its cosine similarity and its text.

    Example:
        >>> Embeddings([[1.0, 0.0]], ["x"]).search([[1.0, 0.0]])[0][0]
        Match(index=0, score=1.0, text='x')
    """

    index: int
    score: float
    text: str | None

    row_tensor = "indices"

    def to_tensors(self) -> dict[str, np.ndarray]:
        """``indices`` ``int64 (1,)``, ``scores`` ``float32 (1,)`` and, with a text, ``texts`` ``BYTES (1,)``.

        Example:
            >>> sorted(Match(0, 1.0, "x").to_tensors())
            ['indices', 'scores', 'texts']
        """
        out: dict[str, np.ndarray] = {
            "indices": np.array([self.index], np.int64),
            "scores": np.array([self.score], np.float32),
        }
        if self.text is not None:
            out["texts"] = _bytes([self.text])
        return out

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any]) -> Match:
        """The :class:`Match` whose :meth:`to_tensors` gave ``tensors``.

        Raises:
            InputError: a tensor missing or unknown, or not one row each.

        Example:
            >>> Match.from_tensors(Match(4, 0.5, "x").to_tensors())
            Match(index=4, score=0.5, text='x')
        """
        t = _named(tensors, "Match", {"indices": 1, "scores": 1}, {"texts": 1})
        rows = {k: v.shape[0] for k, v in t.items()}
        if set(rows.values()) != {1}:
            raise InputError(f"Match.from_tensors: got rows {rows}, expected 1 each (Matches: several)")
        text = _strings(t["texts"], "Match: texts")[0] if "texts" in t else None
        return cls(int(t["indices"][0]), float(np.float32(t["scores"][0])), text)


class Matches(ResultForms, TensorResult):
    """What :meth:`Embeddings.search` finds: per query, the best corpus rows.

    Attributes:
        indices: ``int64 (q, k)`` corpus rows, best first.
        scores: ``float32 (q, k)`` their cosine similarities.
        queries: the queries' texts, or ``None``.
        docs: the corpus texts, or ``None``.

    ``len(m)`` (queries), ``m[i]`` (a list of :class:`Match`), :attr:`top1`, ``to_dict()``/``to_json()``, and
    every result's ``summary()`` (query, rank, index, text, score), ``to_df()``, ``to_csv()``, ``show()``.

    Tensors (:meth:`to_tensors`): ``indices`` ``int64 (q, k)``, ``scores`` ``float32 (q, k)`` and, with query
    texts, ``queries`` ``BYTES (q,)``; a batch concatenates them with ``indices_batch_index``.

    Example:
        >>> m = Matches([[1, 0]], [[0.9, 0.2]], queries=["q"], docs=["a", "b"])
        >>> m.top1.tolist(), m[0][0].text
        ([1], 'b')
    """

    __slots__ = ("docs", "indices", "queries", "scores")

    row_tensor = "indices"

    def __init__(
        self, indices: Any, scores: Any, *, queries: Sequence[str] | None = None, docs: Sequence[str] | None = None
    ) -> None:
        self.indices = np.asarray(indices, dtype=np.int64)
        self.scores = np.asarray(scores, dtype=np.float32)
        if self.indices.ndim != 2 or self.scores.shape != self.indices.shape:
            raise InputError(
                f"Matches: got indices {self.indices.shape} and scores {self.scores.shape}, expected (q, k)"
            )
        if queries is not None and len(queries) != self.indices.shape[0]:
            raise InputError(f"Matches: got {len(queries)} query texts for {self.indices.shape[0]} queries")
        if (
            docs is not None
            and self.indices.size
            and not 0 <= int(self.indices.min()) <= int(self.indices.max()) < len(docs)
        ):
            raise InputError(f"Matches: indices outside the {len(docs)} docs")
        self.queries = None if queries is None else list(queries)
        self.docs = None if docs is None else list(docs)

    @property
    def top1(self) -> np.ndarray:
        """``int64 (q,)``: each query's best corpus row.

        Example:
            >>> Matches([[1, 0], [0, 1]], [[0.9, 0.2], [0.8, 0.1]]).top1.tolist()
            [1, 0]
        """
        return self.indices[:, 0]

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def __getitem__(self, i: int) -> list[Match]:
        if not -(n := len(self)) <= int(i) < n:
            raise IndexError(f"Matches: index {i} is out of range for {n} quer{'ies' if n != 1 else 'y'}")
        row = range(n)[i]
        texts = self.docs
        return [
            Match(int(j), float(s), None if texts is None else texts[int(j)])
            for j, s in zip(self.indices[row], self.scores[row])
        ]

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON; a NaN or infinite score is ``None``.

        Example:
            >>> Matches([[0]], [[1.0]]).to_dict()
            {'indices': [[0]], 'scores': [[1.0]], 'queries': None, 'docs': None}
        """
        return {
            "indices": self.indices.tolist(),
            "scores": _json_list(self.scores),
            "queries": self.queries,
            "docs": self.docs,
        }

    def to_tensors(self) -> dict[str, np.ndarray]:
        """The tensors of this result: ``indices`` ``int64 (q, k)``, ``scores`` ``float32 (q, k)`` and, with
        query texts, ``queries`` (``BYTES (q,)``). The corpus texts (``docs``) are not in them.

        Example:
            >>> {k: v.shape for k, v in Matches([[1, 0]], [[0.9, 0.2]], queries=["q"]).to_tensors().items()}
            {'indices': (1, 2), 'scores': (1, 2), 'queries': (1,)}
        """
        out: dict[str, np.ndarray] = {"indices": self.indices, "scores": self.scores}
        if self.queries is not None:
            out["queries"] = _bytes(self.queries)
        return out

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, Any], *, docs: Sequence[str] | None = None) -> Matches:
        """The :class:`Matches` whose :meth:`to_tensors` gave ``tensors``; ``docs`` (the corpus texts) as in the
        constructor.

        Raises:
            InputError: a tensor missing or unknown, a shape that differs, texts that are not UTF-8.

        Example:
            >>> m = Matches.from_tensors(Matches([[1, 0]], [[0.9, 0.2]]).to_tensors(), docs=["a", "b"])
            >>> m[0][0]
            Match(index=1, score=0.8999999761581421, text='b')
        """
        t = _named(tensors, "Matches", {"indices": 2, "scores": 2}, {"queries": 1})
        queries = _strings(t["queries"], "Matches: queries") if "queries" in t else None
        return cls(t["indices"], t["scores"], queries=queries, docs=docs)

    _pictured = False

    def _summary_rows(self, normalize: bool, decimals: int) -> list[dict[str, Any]]:
        return match_rows(self, decimals)

    def _columns(self) -> list[str]:
        return list(MATCH_COLUMNS)

    def __repr__(self) -> str:
        lines = [f"Matches({len(self)} quer{'ies' if len(self) != 1 else 'y'}, top-{self.indices.shape[1]}"]
        for q in range(min(len(self), _MAX_ROWS)):
            name = _short(self.queries[q]) if self.queries is not None else f"query {q}"
            lines.append(f"  {name!r}:" if self.queries is not None else f"  {name}:")
            lines += [f"    {m.score:6.3f}  {m.index:>3}  {_short(m.text)!r}" for m in self[q]]
        if len(self) > _MAX_ROWS:
            lines.append(f"  ... {len(self) - _MAX_ROWS} more")
        return "\n".join(lines) + ("\n)" if len(lines) > 1 else ")")
