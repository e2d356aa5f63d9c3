"""The stages of :func:`amdinfer.embed`: :class:`Tokenize` (a text -> token ids and attention mask, padded to a
length bucket) and :class:`Pool` (token embeddings -> one sentence vector), with their kernels
:func:`bucket_sizes` and :func:`pool_tokens`, and :func:`load_tokenizer`.

Example:
    >>> import numpy as np
    >>> tokens = np.array([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]], np.float32)  # the last token is padding
    >>> pool_tokens(tokens, np.array([[1, 1, 0]]), normalize=False).tolist()
    [[0.5, 0.5]]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._support._install import pip_extra
from ..errors import BackendUnavailableError, InputError, OptionError
from ..stages import Postprocessor, Preprocessor

__all__ = ["DEFAULT_BUCKETS", "POOLINGS", "Pool", "Tokenize", "bucket_sizes", "load_tokenizer", "pool_tokens"]

#: Sequence lengths a text is padded up to (:func:`amdinfer.embed`'s default ``buckets``).
DEFAULT_BUCKETS: tuple[int, ...] = (16, 32, 64, 128, 256, 512)
#: What :class:`Pool` reduces the token embeddings with.
POOLINGS: tuple[str, ...] = ("mean", "cls")


def _text_problem(text: str) -> str | None:
    """What keeps a str from being tokenized, or ``None``: a surrogate code point (U+D800-U+DFFF; a str that
    ``surrogateescape`` or a UTF-16 split left) has no UTF-8 form, which the tokenizer needs.

    Example:
        >>> _text_problem("a" + chr(0xD800) + "b")
        'not valid Unicode (lone surrogate U+D800 at position 1); expected a str that encodes as UTF-8'
        >>> _text_problem("ok") is None
        True
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        i = exc.start
        pair = i + 1 < len(text) and "\ud800" <= text[i] <= "\udbff" and "\udc00" <= text[i + 1] <= "\udfff"
        hint = (
            " (a UTF-16 pair split in two: text.encode('utf-16', 'surrogatepass').decode('utf-16') joins it)"
            if pair
            else ""
        )
        what = "surrogate pair" if pair else "lone surrogate"
        where = f"{what} U+{ord(text[i]):04X} at position {i}"
        return f"not valid Unicode ({where}); expected a str that encodes as UTF-8{hint}"
    return None


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:
        raise BackendUnavailableError(
            f"tokenizer: reading a tokenizer.json needs the tokenizers library: {pip_extra('text')}"
        ) from exc
    return tokenizers


def load_tokenizer(tokenizer: Any) -> Any:
    """A private copy of ``tokenizer`` with its own padding and truncation turned off.

    A ``tokenizer.json`` often turns both on (sentence-transformers' MiniLM pads every text to 128 tokens);
    :class:`Tokenize` pads to its buckets and truncates only when asked, so the copy does neither. The tokenizer
    passed in is left unchanged.

    Args:
        tokenizer: the path of a ``tokenizer.json`` (Hugging Face ``tokenizers`` format) or a
            ``tokenizers.Tokenizer``.

    Returns:
        A ``tokenizers.Tokenizer``.

    Raises:
        BackendUnavailableError: the ``tokenizers`` library is missing (the ``text`` extra).
        InputError: the path is not a file, or the file is not a tokenizer.json.
        OptionError: ``tokenizer`` is neither a path nor a ``tokenizers.Tokenizer``.

    Example:
        >>> load_tokenizer("no/such/tokenizer.json")
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: tokenizer: 'no/such/tokenizer.json' is not a file, expected a tokenizer.json
    """
    tokenizers = _tokenizers()
    if isinstance(tokenizer, tokenizers.Tokenizer):
        copy = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    elif isinstance(tokenizer, (str, os.PathLike)):
        path = Path(tokenizer)
        if not path.is_file():
            raise InputError(f"tokenizer: {str(tokenizer)!r} is not a file, expected a tokenizer.json")
        try:
            copy = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exception with serde's message
            raise InputError(
                f"tokenizer: {str(path)!r} is not a tokenizer.json the tokenizers library reads: {exc}"
            ) from exc
    else:
        raise OptionError(
            f"tokenizer: got {type(tokenizer).__name__}, expected the path of a tokenizer.json or a "
            "tokenizers.Tokenizer"
        )
    copy.no_padding()
    copy.no_truncation()
    return copy


def bucket_sizes(buckets: Sequence[int], max_length: int) -> tuple[int, ...]:
    """The sequence lengths texts are padded to: ``buckets`` below ``max_length``, then ``max_length`` itself.

    Example:
        >>> bucket_sizes((16, 32, 64, 128), 100)
        (16, 32, 64, 100)
        >>> bucket_sizes((16, 32), 512)
        (16, 32, 512)
    """
    if not isinstance(max_length, (int, np.integer)) or isinstance(max_length, bool) or max_length < 1:
        raise OptionError(f"max_length: got {max_length!r}, expected an int >= 1")
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence) or not buckets:
        raise OptionError(f"buckets: got {buckets!r}, expected a non-empty sequence of increasing ints >= 1")
    sizes = list(buckets)
    bad = [b for b in sizes if not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1]
    if bad or sizes != sorted(set(sizes)):
        raise OptionError(f"buckets: got {tuple(buckets)!r}, expected increasing ints >= 1")
    return (*(int(b) for b in sizes if b < max_length), int(max_length))


class Tokenize(Preprocessor):
    """A text -> ``int64 (2, L)``: its token ids and attention mask, padded with mask 0 to the smallest bucket
    ``L`` that holds it (the item :func:`amdinfer.embed`'s pipeline feeds its engine; ``meta["attention_mask"]``
    keeps the mask for pooling and ``meta["tokens"]`` the count).

    Args:
        tokenizer: a ``tokenizer.json`` path or a ``tokenizers.Tokenizer`` (:func:`load_tokenizer`: a copy
            with its own padding and truncation off).
        buckets: the padded lengths (:func:`bucket_sizes`: capped by ``max_length``, which is always one).
        max_length: the most tokens a text may have (special tokens included).
        truncate: cut longer texts to ``max_length`` tokens (the tokenizer's truncation, which keeps the
            closing special token); ``False``: a longer text is an :class:`~amdinfer.errors.InputError`.

    Example:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
        >>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> out = Tokenize(tok, buckets=(4, 8))("a b a")
        >>> out.data.tolist(), out.meta["tokens"]
        ([[1, 2, 1, 0], [1, 1, 1, 0]], 3)
        >>> Tokenize(tok, buckets=(4,), max_length=4)("a b a b a").data
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: text: 5 tokens, more than max_length=4; pass truncate=True to cut it to 4 tokens
    """

    def __init__(
        self, tokenizer: Any, *, buckets: Sequence[int] = DEFAULT_BUCKETS, max_length: int = 512, truncate: bool = False
    ) -> None:
        self.buckets = bucket_sizes(buckets, max_length)
        self.max_length = int(max_length)
        if not isinstance(truncate, bool):
            raise OptionError(f"truncate: got {truncate!r}, expected True or False")
        self.truncate = truncate
        self.tokenizer = load_tokenizer(tokenizer)
        if truncate:
            self.tokenizer.enable_truncation(self.max_length)
        self.pad_id = self._pad_id(tokenizer)

    @staticmethod
    def _pad_id(tokenizer: Any) -> int:
        """The id the tokenizer pads with (its padding settings, or a ``[PAD]`` token), else 0; masked out
        either way, so it only keeps the feeds tidy."""
        padding = getattr(tokenizer, "padding", None)
        if padding:
            return int(padding["pad_id"])
        found = getattr(tokenizer, "token_to_id", lambda _: None)("[PAD]")
        return 0 if found is None else int(found)

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if not isinstance(data, str):
            raise InputError(f"text: got {type(data).__name__}, expected a str")
        problem = _text_problem(data)
        if problem:
            raise InputError(f"text: {problem}")
        enc = self.tokenizer.encode(data)
        n = len(enc.ids)
        if n > self.max_length:
            raise InputError(
                f"text: {n} tokens, more than max_length={self.max_length}; pass truncate=True to cut it to "
                f"{self.max_length} tokens"
            )
        if n == 0:
            raise InputError(f"text: {data!r} gives no token, expected at least one to pool")
        size = next(b for b in self.buckets if b >= n)
        packed = np.zeros((2, size), np.int64)
        packed[0] = self.pad_id
        packed[0, :n] = enc.ids
        packed[1, :n] = enc.attention_mask
        meta["tokens"] = n
        meta["attention_mask"] = packed[1].copy()
        return packed

    def __repr__(self) -> str:
        extra = ", truncate=True" if self.truncate else ""
        vocab = self.tokenizer.get_vocab_size()
        return f"Tokenize(vocab={vocab}, buckets={self.buckets}, max_length={self.max_length}{extra})"


def pool_tokens(tokens: Any, mask: Any, mode: str = "mean", *, normalize: bool = True) -> np.ndarray:
    """Token embeddings ``(b, s, d)`` -> sentence embeddings ``float32 (b, d)``.

    ``"mean"``: the mean over the tokens whose ``mask`` is non-zero (padding never enters it); ``"cls"``: the
    first token's vector. Accumulated in float64. ``normalize``: each row divided by its L2 norm.

    Raises:
        InputError: shapes that do not fit, a row whose mask is all zero (nothing to average), a row of norm 0
            with ``normalize``, or non-finite token embeddings.

    Example:
        >>> t = np.array([[[3.0, 4.0], [1.0, 1.0]]])
        >>> pool_tokens(t, [[1, 0]]).astype(float).round(3).tolist()
        [[0.6, 0.8]]
        >>> pool_tokens(t, [[1, 1]], "cls", normalize=False).tolist()
        [[3.0, 4.0]]
    """
    if mode not in POOLINGS:
        raise OptionError(f"pooling: got {mode!r}, expected one of {', '.join(POOLINGS)}")
    t = np.asarray(tokens)
    m = np.asarray(mask)
    if t.ndim != 3 or m.shape != t.shape[:2]:
        raise InputError(f"pool_tokens: got tokens {t.shape} and mask {m.shape}, expected (b, s, d) and (b, s)")
    if not np.issubdtype(t.dtype, np.floating) or not np.isfinite(t).all():
        raise InputError(f"pool_tokens: tokens: got {t.dtype} with non-finite or non-float values, expected floats")
    weights = (m != 0).astype(np.float64)
    counts = weights.sum(axis=1)
    if (counts == 0).any():
        raise InputError(
            f"pool_tokens: mask: rows {np.flatnonzero(counts == 0).tolist()} are all zero, expected a token"
        )
    if mode == "mean":
        out = np.einsum("bsd,bs->bd", t.astype(np.float64), weights) / counts[:, None]
    else:
        out = t[:, 0].astype(np.float64)
    if normalize:
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        if (norms == 0).any():
            raise InputError(
                f"pool_tokens: rows {np.flatnonzero(norms[:, 0] == 0).tolist()} are zero, cannot normalize"
            )
        out = out / norms
    return out.astype(np.float32)


class Pool(Postprocessor):
    """One item's token embeddings ``(s, d)`` -> its sentence vector ``float32 (d,)`` (:func:`pool_tokens` with
    the mask :class:`Tokenize` left in ``meta["attention_mask"]``).

    Args:
        mode: ``"mean"`` (masked mean) or ``"cls"`` (the first token).
        normalize: divide by the L2 norm (cosine similarity is then a dot product).

    Example:
        >>> from amdinfer.stages import Sample
        >>> out = Pool()(Sample(np.array([[3.0, 4.0], [7.0, 7.0]]), {"attention_mask": np.array([1, 0])}))
        >>> out.data.dtype, out.data.astype(float).round(3).tolist()  # the padded token left out
        (dtype('float32'), [0.6, 0.8])
    """

    output_type = np.ndarray
    output_description = "a numpy array"

    def __init__(self, mode: str = "mean", *, normalize: bool = True) -> None:
        if mode not in POOLINGS:
            raise OptionError(f"pooling: got {mode!r}, expected one of {', '.join(POOLINGS)}")
        if not isinstance(normalize, bool):
            raise OptionError(f"normalize: got {normalize!r}, expected True or False")
        self.mode = mode
        self.normalize = normalize

    def process(self, data: Any, meta: dict[str, Any]) -> np.ndarray:
        if "attention_mask" not in meta:
            raise InputError("Pool: no attention_mask in the item's metadata, expected the Tokenize stage before it")
        tokens = np.asarray(data)
        mask = np.asarray(meta["attention_mask"])
        if tokens.ndim != 2 or tokens.shape[0] != mask.shape[0]:
            raise InputError(
                f"Pool: got token embeddings {tokens.shape} for a mask of {mask.shape[0]} tokens, expected "
                f"({mask.shape[0]}, hidden)"
            )
        return pool_tokens(tokens[None], mask[None], self.mode, normalize=self.normalize)[0]
