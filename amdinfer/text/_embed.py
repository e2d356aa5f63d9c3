"""The text-embedding recipe: :func:`embed` builds tokenizer -> engine -> masked pooling -> normalised vectors as a
:class:`~amdinfer.Pipeline` (:class:`EmbedPipeline`) batched by length bucket, wrapped in a :class:`TextEmbedder`.

Example:
    >>> import amdinfer
    >>> callable(amdinfer.embed)
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from ..engines.base import Engine
from ..errors import InputError, ModelError, OptionError, StageInputError
from ..pipeline import Pipeline, PipelineMap
from ..pipeline._steps import _positive_int
from ..results._embed import Embedding, Embeddings
from ..types import TensorSpec
from ._embed_stages import DEFAULT_BUCKETS, Pool, Tokenize, _text_problem, load_tokenizer

__all__ = ["EmbedPipeline", "TextEmbedder", "embed"]

#: The model inputs :func:`embed` feeds, by name: ids and mask from :class:`Tokenize`, token types all zero.
FEEDS: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
_INT_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))
#: Without a limit the model states, the longest text :func:`embed` pads (BERT's position embeddings).
_DEFAULT_LIMIT = 512


def _feeds(engine: Engine) -> tuple[tuple[str, np.dtype], ...]:
    """The model's text inputs ``(name, dtype)``, checked: ``input_ids`` and ``attention_mask`` (without a mask
    padding would change the answer), optionally ``token_type_ids``; int64 or int32, rank 2."""
    names = [s.name for s in engine.inputs]
    out = []
    for spec in engine.inputs:
        if spec.name not in FEEDS:
            raise ModelError(
                f"model: input {spec.name!r} is not one that embed feeds; got inputs {names}, expected input_ids, "
                "attention_mask and optionally token_type_ids"
            )
        if spec.dtype not in _INT_DTYPES or len(spec.shape) != 2:
            raise ModelError(
                f"model: input {spec.name!r}: got {spec.dtype} {tuple(spec.shape)}, expected int64 or int32 "
                "(batch, sequence)"
            )
        out.append((spec.name, spec.dtype))
    missing = [n for n in FEEDS[:2] if n not in names]
    if missing:
        raise ModelError(
            f"model: no {' or '.join(missing)} input (got {names}); embed needs the token ids and the attention "
            "mask, so that the padding of a length bucket cannot change an embedding"
        )
    return tuple(out)


def _token_output(engine: Engine, output: str | None) -> TensorSpec:
    """The token-embedding output ``(batch, sequence, hidden)``: ``output`` by name, else the one float output
    of rank 3."""
    outs = engine.outputs
    if output is not None:
        if not isinstance(output, str):
            raise OptionError(f"output: got {type(output).__name__}, expected an output name (str)")
        spec = next((s for s in outs if s.name == output), None)
        if spec is None:
            raise OptionError(f"output: got {output!r}, expected one of the model's outputs {[s.name for s in outs]}")
        if len(spec.shape) != 3:
            raise OptionError(
                f"output: {output!r} has shape {tuple(spec.shape)}, expected token embeddings (batch, sequence, "
                "hidden) to pool"
            )
        return spec
    found = [s for s in outs if len(s.shape) == 3 and np.issubdtype(s.dtype, np.floating)]
    if len(found) != 1:
        shapes = {s.name: tuple(s.shape) for s in outs}
        what = "no float output" if not found else f"{len(found)} float outputs"
        raise OptionError(
            f"output: the model has {what} of rank 3 (batch, sequence, hidden) among {shapes}, expected one; "
            "pass output=<name> of the token embeddings"
        )
    return found[0]


def _model_limit(engine: Engine) -> int | None:
    """The most tokens the model takes, where it says: a fixed sequence axis, the ``shapes=`` bounds it was
    loaded with, or the rows of a BERT-style ``position_embeddings`` table."""
    spec = next(s for s in engine.inputs if s.name == "input_ids")
    if isinstance(spec.shape[1], int):
        return spec.shape[1]
    bounds = engine.shape_bounds.get("input_ids")
    if bounds is not None:
        return int(bounds.max[1])
    for init in engine.model.proto.graph.initializer:
        if "position_embeddings" in init.name and len(init.dims) == 2:
            return int(init.dims[0])
    return None


class EmbedPipeline(Pipeline):
    """What :func:`embed` runs: a :class:`~amdinfer.Pipeline` whose items are texts, for models with several
    inputs (ids, mask, token types).

    :class:`~amdinfer.text.Tokenize` turns a text into one ``int64 (2, L)`` array (ids and mask, ``L`` its
    length bucket); the engine step splits the stacked batch into the model's named inputs (cast to the dtypes
    it declares; ``token_type_ids`` zeros), asks for the token-embedding output only, at most ``batch_size``
    texts a call, and :class:`~amdinfer.text.Pool` pools each text. ``run_batch`` groups texts of one bucket into
    one call and answers in input order; ``map`` (the one signature of :meth:`amdinfer.Pipeline.map`) does so a
    window of 8 x ``batch_size`` texts at a time, on the pipeline's executor like every other pipeline.

    Example:
        >>> from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer
        >>> pipe = embed(toy_encoder(), toy_tokenizer(), buckets=(4, 8), providers=["CPUExecutionProvider"]).pipeline
        >>> isinstance(pipe, Pipeline), len(pipe.run_batch(["the cat", "the dog sat on the mat", "cat"]))
        (True, 3)
        >>> print(pipe)  # doctest: +ELLIPSIS
        Pipeline(
            preprocess=[
                Tokenize(vocab=14, buckets=(4, 8, 512), max_length=512),
            ],
            engine=<OrtEngine ...>,
            postprocess=[
                Pool(),
            ],
        )
        >>> pipe.close()
    """

    def __init__(
        self, *, engine: Engine, tokenize: Tokenize, pool: Pool, output: str | None = None, batch_size: int = 32
    ) -> None:
        if not isinstance(engine, Engine):
            raise OptionError(f"engine: got {type(engine).__name__}, expected an amdinfer Engine (amdinfer.load)")
        self._feed_specs = _feeds(engine)
        self._token_spec = _token_output(engine, output)
        self._batch_size = _positive_int("batch_size", batch_size)
        self._keep_image = False
        self._preprocess = (tokenize,)
        self._postprocess = (pool,)
        self._engine = engine
        self._owns_engine = False
        self._load_options: dict[str, Any] = {}
        self._quantizer = None
        ids = next(s for s in engine.inputs if s.name == "input_ids")
        self._input = TensorSpec(
            "+".join(n for n, _ in self._feed_specs[:2]), np.dtype(np.int64), (ids.shape[0], 2, ids.shape[1])
        )
        self._output_names = [self._token_spec.name]

    @property
    def output(self) -> str:
        """The name of the token-embedding output that is pooled."""
        return self._token_spec.name

    @property
    def batch_size(self) -> int:
        """The most texts in one engine call."""
        return self._batch_size

    def feeds(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """The model's inputs for a stacked batch ``(b, 2, L)`` of :class:`~amdinfer.text.Tokenize` items.

        Example:
            >>> from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer
            >>> pipe = embed(toy_encoder(), toy_tokenizer(), providers=["CPUExecutionProvider"]).pipeline
            >>> {name: v.shape for name, v in pipe.feeds(np.zeros((4, 2, 16), np.int64)).items()}
            {'input_ids': (4, 16), 'attention_mask': (4, 16)}
            >>> pipe.close()
        """
        rows = {"input_ids": packed[:, 0], "attention_mask": packed[:, 1]}
        return {
            name: np.ascontiguousarray(rows[name], dtype=dtype) if name in rows else np.zeros(packed[:, 0].shape, dtype)
            for name, dtype in self._feed_specs
        }

    # the executor's hooks (amdinfer.pipeline._steps): one call feeds the model's named inputs, asks for the
    # token output, takes at most batch_size texts; map groups windows of 8 x batch_size texts by length bucket
    _map_window = 8
    _map_by_shape = True

    def _engine_feed(self, chunk: np.ndarray, real: int) -> dict[str, Any]:
        return self.feeds(chunk)

    def _engine_outputs(self) -> list[str] | None:
        return [self._token_spec.name]

    def _call_size(self) -> int | None:
        return self._batch_size

    def _default_batch_size(self) -> int:
        return self._batch_size

    def fuse(self, **_: Any) -> Any:
        """Not for text: the tokenizer has no ONNX form here.

        Example:
            >>> EmbedPipeline.fuse(None)
            Traceback (most recent call last):
            ...
            amdinfer.errors.OptionError: fuse: a text pipeline's Tokenize stage has no fused form
        """
        raise OptionError("fuse: a text pipeline's Tokenize stage has no fused form")


class TextEmbedder:
    """What :func:`embed` returns: call it on a list of texts for :class:`~amdinfer.text.Embeddings` ``(n, d)``, on
    one text for one :class:`~amdinfer.results.Embedding` (a 1-D ``(d,)`` vector).

    Attributes:
        pipeline: the :class:`EmbedPipeline` (``run_batch``, ``map``); ``engine``: its engine.

    Example:
        >>> from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer
        >>> embedder = embed(toy_encoder(), toy_tokenizer(), buckets=(4, 8), providers=["CPUExecutionProvider"])
        >>> emb = embedder(["the cat sat", "the stock market fell on the mat", "dog"])
        >>> emb.vectors.shape, embedder.buckets
        ((3, 8), (4, 8, 512))
        >>> one = embedder("the cat sat")  # one str: one 1-D vector
        >>> one.shape, bool(abs(one.vector - emb[0].vector).max() < 1e-6)  # alone or batched
        ((8,), True)
        >>> [v.shape for v in embedder.map(["the cat", "the dog"])]
        [(8,), (8,)]
        >>> embedder.close()
    """

    def __init__(self, pipeline: EmbedPipeline) -> None:
        self.pipeline = pipeline
        tokenize, pool = pipeline.preprocess[0], pipeline.postprocess[0]
        assert isinstance(tokenize, Tokenize) and isinstance(pool, Pool)
        self.tokenize = tokenize
        self.pool = pool

    @property
    def engine(self) -> Engine:
        """The engine."""
        return self.pipeline.engine

    @property
    def dim(self) -> int | None:
        """The embedding size (the token output's last axis), or ``None`` when the model leaves it open."""
        last = self.pipeline._token_spec.shape[-1]
        return last if isinstance(last, int) else None

    @property
    def max_length(self) -> int:
        """The most tokens of one text."""
        return self.tokenize.max_length

    @property
    def buckets(self) -> tuple[int, ...]:
        """The padded lengths."""
        return self.tokenize.buckets

    @overload
    def __call__(self, texts: str) -> Embedding: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, texts: Iterable[str]) -> Embeddings: ...
    def __call__(self, texts: str | Iterable[str]) -> Embeddings | Embedding:
        """Embed ``texts``: a list (any iterable) of str gives :class:`~amdinfer.text.Embeddings` ``(n, d)``, in
        order; one str gives one :class:`~amdinfer.results.Embedding` whose vector is 1-D ``(d,)``, as
        sentence-transformers' ``encode("text")`` (``np.asarray(embedder("hi")).shape == (d,)``).

        Raises:
            InputError: ``texts`` is not a str or an iterable of str; ``texts[i]`` is not a str, is not valid
                Unicode (a lone surrogate such as ``"\\ud800"``: no UTF-8 form), or is longer than ``max_length``
                tokens without ``truncate=True`` (the message names ``i`` and the count). Types and Unicode are
                checked for every text before the model runs.
        """
        if isinstance(texts, str):
            items = [texts]
        elif isinstance(texts, bytes) or not isinstance(texts, Iterable):
            raise InputError(f"texts: got {type(texts).__name__}, expected a str or a list of str")
        else:
            items = list(texts)
        for i, item in enumerate(items):
            problem = _text_problem(item) if isinstance(item, str) else f"got {type(item).__name__}, expected a str"
            if problem:
                raise InputError(f"texts[{i}]: text: {problem}")
        vectors = list(self._vectors(self.pipeline.map(items, workers=0)))  # a call, not a stream: no threads
        if isinstance(texts, str):
            return Embedding(texts, vectors[0])
        if not vectors:
            return Embeddings(np.zeros((0, self.dim or 0), np.float32), [], normalized=self.pool.normalize)
        return Embeddings(np.stack(vectors), items, normalized=self.pool.normalize)

    def map(self, texts: Iterable[str], *, batch_size: int | None = None, workers: int | None = None) -> PipelineMap:
        """Embed a stream of texts lazily: one ``float32 (d,)`` vector per text, in order (the one ``map``
        signature: at most ``batch_size`` texts per engine call, ``workers`` tokenizing and pooling threads; see
        :meth:`amdinfer.Pipeline.map`).

        Example:
            >>> from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer
            >>> with embed(toy_encoder(), toy_tokenizer(), providers=["CPUExecutionProvider"]) as embedder:
            ...     print([v.shape for v in embedder.map(["the cat"] * 3)])
            [(8,), (8,), (8,)]
        """
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise InputError(f"texts: got {type(texts).__name__}, expected an iterable of str")
        return PipelineMap(self._vectors(self.pipeline.map(texts, batch_size=batch_size, workers=workers)))

    @staticmethod
    def _vectors(results: PipelineMap) -> Iterator[np.ndarray]:
        """The pipeline's vectors; a text the tokenizer step refuses is an InputError naming ``texts[i]``."""
        with results:
            try:
                yield from results
            except StageInputError as exc:
                cause, stage = exc.__cause__, str(getattr(exc, "stage", ""))
                if isinstance(cause, InputError) and stage.startswith("preprocess"):
                    raise InputError(f"texts[{getattr(exc, 'index', '?')}]: {cause}") from cause
                raise

    def close(self) -> None:
        """Close the engine (when :func:`embed` loaded it)."""
        self.pipeline.close()

    def __enter__(self) -> TextEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"TextEmbedder(\n    {self.tokenize!r},\n    engine={self.engine!r},\n"
            f"    output={self.pipeline.output!r}, batch_size={self.pipeline.batch_size},\n    {self.pool!r},\n)"
        )


def embed(
    model: Any,
    tokenizer: Any,
    *,
    pooling: str = "mean",
    normalize: bool = True,
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    max_length: int | None = None,
    truncate: bool = False,
    batch_size: int = 32,
    output: str | None = None,
    calibration: Iterable[str] | None = None,
    backend: str = "auto",
    precision: str = "fp32",
    **load_options: Any,
) -> TextEmbedder:
    """Sentence embeddings from a BERT-style encoder: tokenizer -> engine -> masked pooling -> L2 normalisation.

    Each text is tokenized (the tokenizer's own padding and truncation off), padded with attention mask 0 to
    the smallest bucket that holds it, and texts of one bucket share an engine call; since padded positions
    are masked in the attention and left out of the mean, an embedding does not depend on the bucket or on the
    texts it is batched with (docs/text.md states the tolerance measured).

    Args:
        model: the encoder (path, bytes, ``onnx.ModelProto``) with inputs ``input_ids`` and ``attention_mask``
            (and optionally ``token_type_ids``, fed zeros), int64 or int32 ``(batch, sequence)``; or an
            :class:`~amdinfer.Engine` of one, used as is (no load options then; ``close()`` leaves it open).
        tokenizer: a ``tokenizer.json`` path or a ``tokenizers.Tokenizer`` (the ``text`` extra).
        pooling: ``"mean"`` (over the unmasked tokens) or ``"cls"`` (the first token).
        normalize: L2-normalise each embedding.
        buckets: padded lengths, capped by ``max_length`` (which is always the last one); a model with a fixed
            sequence axis ``L`` has the one bucket ``L``.
        max_length: the most tokens of a text; default the model's limit where it states one (a fixed sequence
            axis, ``shapes=`` bounds, the rows of its ``position_embeddings``), else 512. More than that limit is
            refused.
        truncate: cut longer texts to ``max_length``; ``False``: they are an InputError naming the text.
        batch_size: the most texts in one engine call.
        output: the token-embedding output ``(batch, sequence, hidden)`` to pool; default the model's one
            float output of rank 3.
        calibration: with ``precision="int8"``: texts that this embedder's own tokenizer and length buckets
            turn into int8 calibration samples for an :class:`~amdinfer.quantize.Int8Quantizer` with its
            defaults (a Transformer: only ``MatMul``/``Gemm`` quantized); pass ``quantizer=`` for other
            settings (not both). Only with a model.
        backend, precision, **load_options: :func:`amdinfer.load`'s, with a model only (``providers=``, ``threads=``).

    Returns:
        A :class:`TextEmbedder`: ``embedder(["a", "b"])`` -> :class:`~amdinfer.text.Embeddings` ``(2, d)``;
        ``embedder("a")`` -> an :class:`~amdinfer.results.Embedding` ``(d,)``.

    Raises:
        OptionError: bad options, an unknown ``output``, ``max_length`` above the model's limit. ModelError: the
            model lacks ``input_ids``/``attention_mask`` or has other inputs. InputError: the tokenizer file is
            missing or unreadable. BackendUnavailableError: ``tokenizers`` is not installed.

    Example:
        >>> from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer
        >>> docs = ["the cat sat on the mat", "the stock market fell"]
        >>> with embed(toy_encoder(), toy_tokenizer(), providers=["CPUExecutionProvider"]) as embedder:
        ...     found = embedder(docs).search(embedder(["cat on a mat"]), k=1)
        >>> found[0][0].text
        'the cat sat on the mat'
        >>> from amdinfer.testing.models import tiny_cnn
        >>> embed(tiny_cnn(), "tokenizer.json", pooling="max")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: pooling: got 'max', expected one of mean, cls
    """
    pool = Pool(pooling, normalize=normalize)  # cheap checks (pooling, normalize, ...) before the model loads
    batch_size = _positive_int("batch_size", batch_size)
    max_length = None if max_length is None else _positive_int("max_length", max_length)
    tokenizer = load_tokenizer(tokenizer)
    if calibration is not None:
        sizes = (buckets, max_length, truncate)
        model, load_options = _calibrated(model, tokenizer, calibration, sizes, backend, precision, load_options)
    engine, owns = _engine(model, backend, precision, load_options)
    try:
        tokenize = _tokenize(engine, tokenizer, buckets, max_length, truncate)
        pipe = EmbedPipeline(engine=engine, tokenize=tokenize, pool=pool, output=output, batch_size=batch_size)
    except BaseException:
        if owns:
            engine.close()
        raise
    pipe._owns_engine = owns
    return TextEmbedder(pipe)


def _calibrated(
    model: Any,
    tokenizer: Any,
    texts: Iterable[str],
    sizes: tuple[Any, ...],
    backend: str,
    precision: str,
    options: dict[str, Any],
) -> tuple[Any, dict[str, Any]]:
    """``(model source, options + an Int8Quantizer)``: ``texts`` (checked: :func:`check_calibration`) tokenized
    and bucketed as the float embedder feeds them."""
    from ..model import ModelSource
    from ..quantize import Int8Quantizer
    from ..quantize._data import check_calibration

    check_calibration(texts, {**options, "precision": precision}, items="texts")
    if isinstance(model, Engine):
        raise OptionError("calibration: an Engine instance was given; pass the model to calibrate its int8 form")
    source = ModelSource.from_any(model)
    text_list = list(texts)
    if not text_list or not all(isinstance(t, str) for t in text_list):
        raise OptionError(f"calibration: got {len(text_list)} items, expected a non-empty list of texts (str)")
    engine = _engine(source, backend, "fp32", options)[0]
    try:
        pipe = EmbedPipeline(engine=engine, tokenize=_tokenize(engine, tokenizer, *sizes), pool=Pool("mean"))
        samples = [pipe.feeds(pipe._preprocess_one(i, t).data[None]) for i, t in enumerate(text_list)]
    finally:
        engine.close()
    return source, {**options, "quantizer": Int8Quantizer(calibration=samples, progress=False)}


def _engine(model: Any, backend: str, precision: str, load_options: dict[str, Any]) -> tuple[Engine, bool]:
    """:func:`embed`'s engine and whether it owns it: ``model`` loaded, or an Engine instance as is."""
    from .._load import load

    if not isinstance(model, Engine):
        return load(model, backend=backend, precision=precision, **load_options), True
    given = sorted(load_options) + ["backend"] * (backend != "auto") + ["precision"] * (precision != "fp32")
    if given:
        raise OptionError(
            f"{', '.join(given)}: an Engine instance was given, so load options cannot apply to it; pass the "
            "model instead or build the engine with amdinfer.load(...)"
        )
    return model, False


def _tokenize(
    engine: Engine, tokenizer: Any, buckets: Sequence[int], max_length: int | None, truncate: bool
) -> Tokenize:
    """The :class:`Tokenize` stage for ``engine``'s model: ``max_length`` checked against the model's limit
    (:func:`_model_limit`); a fixed sequence axis is the one bucket."""
    _feeds(engine)
    limit = _model_limit(engine)
    if max_length is not None and limit is not None and max_length > limit:
        raise OptionError(f"max_length: got {max_length}, expected at most {limit} (the model's limit)")
    fixed = next(s for s in engine.inputs if s.name == "input_ids").shape[1]
    if isinstance(fixed, int):  # a static sequence axis: every text is padded to it
        if max_length not in (None, fixed):
            raise OptionError(f"max_length: got {max_length}, but the model's sequence axis is fixed at {fixed}")
        buckets, max_length = (fixed,), fixed
    length = max_length or limit or _DEFAULT_LIMIT
    return Tokenize(tokenizer, buckets=buckets, max_length=length, truncate=truncate)
