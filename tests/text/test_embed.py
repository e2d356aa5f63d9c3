"""``amdinfer.embed`` on the trained MiniLM: equal to the model's own in-graph pooling, padding-invariant on ONNX
Runtime and the reference engine, in input order across length buckets, and the shipped retrieval set ranked
right.

Truths: output ``461`` of the model (the masked mean of its token embeddings, computed inside the graph) on
each text alone and unpadded, normalised with NumPy; the token output's first row for ``"cls"``; the same
text embedded alone. Tolerance 1e-5 per element of the unit vectors (measured: 3e-8 against ``461`` on ORT
CPU; 0 between paddings on ORT CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _minilm import POOLED_OUT, TOKENIZER, TOKENS_OUT, needs_model, needs_tokenizers, sentences

import amdinfer
from amdinfer.text import EmbedPipeline, TextEmbedder

pytestmark = [needs_model, needs_tokenizers]

TOL = 1e-5
SENTENCES: list[str] = sentences()["sentences"]
LONG = SENTENCES[18]  # 88 tokens
SHORT = ["hello", "Why?", "The cat sits on the mat.", "Paris is the capital of France."]


def _tokenizer(max_length: int | None = None) -> Any:
    """The shipped tokenizer.json, read straight with the tokenizers library: its padding off (it pads to 128)."""
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    tok.no_truncation()
    if max_length is not None:
        tok.enable_truncation(max_length)
    return tok


def _unit(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float64)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def in_graph_pooled(engine: amdinfer.Engine, texts: list[str], output: str = POOLED_OUT, **tok: Any) -> np.ndarray:
    """Each text alone and unpadded through the model; its ``output`` (``461``: the model's own mean pooling)."""
    tokenizer = _tokenizer(**tok)
    rows = []
    for text in texts:
        ids = np.array([tokenizer.encode(text).ids], np.int64)
        out = engine.run({"input_ids": ids, "attention_mask": np.ones_like(ids)}, outputs=[output])[output][0]
        rows.append(out if output == POOLED_OUT else out[0])  # the token output: its first ([CLS]) row
    return _unit(np.array(rows))


def _spy(embedder: TextEmbedder, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the ids the engine is fed, one entry per engine call."""
    calls: list[tuple[int, ...]] = []
    pipe = embedder.pipeline
    real = EmbedPipeline.feeds

    def feeds(packed: np.ndarray) -> dict[str, np.ndarray]:
        out = real(pipe, packed)
        calls.append(out["input_ids"].shape)
        return out

    monkeypatch.setattr(pipe, "feeds", feeds)
    return calls


def test_embeddings_equal_the_models_in_graph_pooling_in_input_order(minilm_ort, monkeypatch) -> None:
    embedder = amdinfer.embed(minilm_ort, TOKENIZER)
    calls = _spy(embedder, monkeypatch)
    emb = embedder(SENTENCES)
    assert emb.vectors.dtype == np.float32 and emb.vectors.shape == (len(SENTENCES), 384)
    assert emb.texts == SENTENCES and emb.normalized
    np.testing.assert_allclose(emb.vectors, in_graph_pooled(minilm_ort, SENTENCES), rtol=0, atol=TOL)
    # the tokenizer's own padding to 128 is off: three buckets, one engine call each, in order of first use
    assert calls == [(22, 16), (1, 32), (1, 128)]
    assert embedder.max_length == 512  # the model's position embeddings
    assert embedder.buckets == (16, 32, 64, 128, 256, 512)


def test_cls_pooling_is_the_first_token(minilm_ort) -> None:
    embedder = amdinfer.embed(minilm_ort, TOKENIZER, pooling="cls", output=TOKENS_OUT)
    texts = [*SHORT, LONG]
    np.testing.assert_allclose(embedder(texts).vectors, in_graph_pooled(minilm_ort, texts, TOKENS_OUT), atol=TOL)


def _padding_cases(engine: amdinfer.Engine, short: list[str], long: list[str], buckets: tuple[int, ...], monkeypatch):
    """``short`` embedded each alone (default buckets), batched between ``long`` texts, and all in one engine
    call padded to ``buckets``; returns the three ``(len(short), d)`` arrays and the padded call's shapes."""
    alone = np.concatenate([amdinfer.embed(engine, TOKENIZER)([t]).vectors for t in short])
    mixed_texts = [x for pair in zip(long * len(short), short) for x in pair]
    mixed = amdinfer.embed(engine, TOKENIZER)(mixed_texts).vectors[1::2]
    wide = amdinfer.embed(engine, TOKENIZER, buckets=buckets)
    calls = _spy(wide, monkeypatch)
    padded = wide([*long, *short]).vectors[len(long) :]
    return alone, mixed, padded, calls


def test_padding_invariance_on_onnxruntime(minilm_ort, monkeypatch) -> None:
    alone, mixed, padded, calls = _padding_cases(minilm_ort, SHORT, [LONG, SENTENCES[12]], (512,), monkeypatch)
    assert calls == [(6, 512)]  # "hello" (3 tokens) shares a call with an 88-token text, padded to 512
    for other in (mixed, padded):
        np.testing.assert_allclose(other, alone, rtol=0, atol=TOL)
    np.testing.assert_allclose(alone, in_graph_pooled(minilm_ort, SHORT), rtol=0, atol=TOL)


def test_padding_invariance_on_the_reference_engine(minilm_reference, minilm_ort, monkeypatch) -> None:
    short = SHORT[:3]
    alone, mixed, padded, calls = _padding_cases(minilm_reference, short, [SENTENCES[12]], (32,), monkeypatch)
    assert calls == [(4, 32)]
    for other in (mixed, padded):
        np.testing.assert_allclose(other, alone, rtol=0, atol=TOL)
    np.testing.assert_allclose(alone, in_graph_pooled(minilm_ort, short), rtol=0, atol=TOL)  # the other engine


def test_map_and_run_batch_keep_input_order(minilm_ort) -> None:
    embedder = amdinfer.embed(minilm_ort, TOKENIZER, batch_size=3)
    texts = [LONG, *SENTENCES[:7], LONG, "hello"]
    want = in_graph_pooled(minilm_ort, texts)
    streamed = np.array(list(embedder.map(iter(texts), batch_size=4)))
    np.testing.assert_allclose(streamed, want, rtol=0, atol=TOL)
    np.testing.assert_allclose(np.array(embedder.pipeline.run_batch(texts)), want, rtol=0, atol=TOL)
    np.testing.assert_allclose(embedder.pipeline(texts[3]), want[3], rtol=0, atol=TOL)


def test_truncate_cuts_to_max_length_like_the_tokenizer(minilm_ort) -> None:
    with pytest.raises(amdinfer.InputError, match=r"texts\[1\]: text: 88 tokens, more than max_length=16"):
        amdinfer.embed(minilm_ort, TOKENIZER, max_length=16)(["hello", LONG])
    cut = amdinfer.embed(minilm_ort, TOKENIZER, max_length=16, truncate=True)
    assert cut.buckets == (16,)
    want = in_graph_pooled(minilm_ort, [LONG], max_length=16)  # 15 tokens and the closing [SEP]
    np.testing.assert_allclose(cut([LONG]).vectors, want, rtol=0, atol=TOL)


def test_retrieval_top1_is_the_relevant_document(minilm_ort) -> None:
    """A property of the trained model on the shipped set (pinned): every query finds its document first."""
    retrieval = sentences()["retrieval"]
    embedder = amdinfer.embed(minilm_ort, TOKENIZER)
    docs = embedder(retrieval["docs"])
    found = docs.search(embedder(retrieval["queries"]), k=3)
    assert found.top1.tolist() == retrieval["relevant"]
    sims = embedder(retrieval["queries"]).similarity(docs)  # the cosine matrix agrees with the search
    np.testing.assert_allclose(found.scores[:, 0], sims.max(axis=1), rtol=0, atol=1e-6)


def test_model_limits_are_enforced(minilm_ort) -> None:
    with pytest.raises(amdinfer.OptionError, match=r"max_length: got 1024, expected at most 512"):
        amdinfer.embed(minilm_ort, TOKENIZER, max_length=1024)
    with pytest.raises(amdinfer.OptionError, match=r"output: got 'nope', expected one of the model's outputs"):
        amdinfer.embed(minilm_ort, TOKENIZER, output="nope")
    with pytest.raises(amdinfer.OptionError, match=r"output: '461' has shape"):
        amdinfer.embed(minilm_ort, TOKENIZER, output=POOLED_OUT)
    with pytest.raises(amdinfer.OptionError, match=r"threads: an Engine instance was given"):
        amdinfer.embed(minilm_ort, TOKENIZER, threads=2)
