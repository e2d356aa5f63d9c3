"""``amdinfer.embed``'s surface without the trained model: the stages and kernels against hand-computed values,
the result objects, typed errors naming the argument, and the optional ``tokenizers`` import.

The encoder is :func:`amdinfer.text._embed_toy.toy_encoder` (a seeded lookup table: token ``i`` -> row ``i``),
so every expected vector is a mean of known rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from _minilm import needs_tokenizers

import amdinfer
from amdinfer._support._install import pip_extra
from amdinfer.text import Embeddings, Matches, Pool, Tokenize, bucket_sizes, embed, pool_tokens
from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer

CPU = {"providers": ["CPUExecutionProvider"]}


def _table() -> np.ndarray:
    init = toy_encoder().graph.initializer
    return onnx.numpy_helper.to_array(next(t for t in init if t.name == "table")).astype(np.float64)


# ---------------------------------------------------------------------------------------------- kernels and stages
def test_pool_tokens_by_hand() -> None:
    tokens = np.array([[[1.0, 2.0], [3.0, 6.0], [100.0, 100.0]], [[0.0, 5.0], [9.0, 9.0], [9.0, 9.0]]])
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    assert pool_tokens(tokens, mask, normalize=False).tolist() == [[2.0, 4.0], [0.0, 5.0]]
    assert pool_tokens(tokens, mask, "cls", normalize=False).tolist() == [[1.0, 2.0], [0.0, 5.0]]
    unit = pool_tokens(tokens, mask)
    np.testing.assert_allclose(unit, [[1 / 5**0.5, 2 / 5**0.5], [0.0, 1.0]], rtol=1e-6)
    with pytest.raises(amdinfer.InputError, match=r"mask: rows \[1\] are all zero"):
        pool_tokens(tokens, [[1, 0, 0], [0, 0, 0]])
    with pytest.raises(amdinfer.InputError, match=r"expected \(b, s, d\) and \(b, s\)"):
        pool_tokens(tokens, [[1, 1]])
    with pytest.raises(amdinfer.OptionError, match="pooling: got 'max'"):
        pool_tokens(tokens, mask, "max")


def test_bucket_sizes() -> None:
    assert bucket_sizes((16, 32, 64), 40) == (16, 32, 40)
    assert bucket_sizes((16, 32), 32) == (16, 32)
    for bad in ((32, 16), (16, 16), (0,), (), "16", (16.0,)):
        with pytest.raises(amdinfer.OptionError, match="buckets: got"):
            bucket_sizes(bad, 64)  # type: ignore[arg-type]
    with pytest.raises(amdinfer.OptionError, match="max_length: got 0"):
        bucket_sizes((16,), 0)


@needs_tokenizers
def test_tokenize_pads_to_the_smallest_bucket_with_mask_zero() -> None:
    tok = toy_tokenizer()
    stage = Tokenize(tok, buckets=(4, 8), max_length=10)
    assert stage.buckets == (4, 8, 10)
    out = stage("The cat")  # [CLS] the cat [SEP]: exactly 4
    assert out.data.tolist() == [[2, 4, 5, 3], [1, 1, 1, 1]] and out.meta["tokens"] == 4
    out = stage("the cat sat")  # 5 tokens -> bucket 8, padded with [PAD] (0) and mask 0
    assert out.data.tolist() == [[2, 4, 5, 7, 3, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]]
    assert out.meta["attention_mask"].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert stage("the " * 8).data.shape == (2, 10)
    with pytest.raises(amdinfer.InputError, match="text: 11 tokens, more than max_length=10"):
        stage("the " * 9)
    with pytest.raises(amdinfer.InputError, match="text: got bytes, expected a str"):
        stage(b"the cat")
    tok.enable_padding(length=64)
    Tokenize(tok, buckets=(4,))("the")  # the tokenizer's own padding is off in the stage's copy ...
    assert tok.padding is not None and tok.padding["length"] == 64  # ... and the caller's tokenizer untouched
    assert Tokenize(tok, buckets=(4,))("the").data.shape == (2, 4)
    assert repr(stage) == "Tokenize(vocab=14, buckets=(4, 8, 10), max_length=10)"


def test_pool_stage_uses_the_tokenize_mask() -> None:
    from amdinfer.stages import Sample

    out = Pool(normalize=False)(Sample(np.array([[1.0, 1.0], [3.0, 5.0], [50.0, 50.0]]), {"attention_mask": [1, 1, 0]}))
    assert out.data.dtype == np.float32 and out.data.tolist() == [2.0, 3.0]
    with pytest.raises(amdinfer.InputError, match="no attention_mask"):
        Pool()(np.zeros((3, 2)))
    with pytest.raises(amdinfer.OptionError, match="normalize: got 1"):
        Pool(normalize=1)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- the recipe
@needs_tokenizers
def test_embed_is_the_masked_mean_of_the_token_rows() -> None:
    table = _table()
    with embed(toy_encoder(), toy_tokenizer(), buckets=(4, 8), normalize=False, **CPU) as embedder:
        emb = embedder(["the cat", "the stock market fell", "dog"])
        assert embedder.dim == 8 and emb.texts == ["the cat", "the stock market fell", "dog"]
    want = [table[[2, 4, 5, 3]].mean(0), table[[2, 4, 12, 11, 13, 3]].mean(0), table[[2, 6, 3]].mean(0)]
    np.testing.assert_allclose(emb.vectors, want, rtol=1e-6, atol=1e-6)
    assert not emb.normalized
    assert embedder.engine.closed  # embed loaded it, close() closed it


@needs_tokenizers
def test_embed_input_errors_name_the_text() -> None:
    with embed(toy_encoder(), toy_tokenizer(), max_length=4, **CPU) as embedder:
        with pytest.raises(amdinfer.InputError, match=r"texts\[1\]: text: got int, expected a str"):
            embedder(["the", 3])
        with pytest.raises(amdinfer.InputError, match=r"texts\[2\]: text: 5 tokens, more than max_length=4"):
            embedder(["the", "cat", "the cat sat"])
        with pytest.raises(amdinfer.InputError, match="texts: got int, expected a str or a list of str"):
            embedder(3)  # type: ignore[arg-type]
        lone = r"not valid Unicode \(lone surrogate U\+D800 at position 1\); expected a str that encodes as UTF-8"
        with pytest.raises(amdinfer.InputError, match=r"^texts\[0\]: text: " + lone + "$"):
            embedder("a\ud800b")  # a str, but no UTF-8 form: the tokenizer said "TextInputSequence must be str"
        with pytest.raises(amdinfer.InputError, match=r"^texts\[1\]: text: " + lone):
            embedder(["the cat sat the cat", "a\ud800b"])  # checked up front, before texts[0] is found too long
        with pytest.raises(amdinfer.InputError, match=r"^texts\[1\]: text: " + lone):
            list(embedder.map(["the", "a\ud800b"]))  # lazily: the Tokenize stage's check
        with pytest.raises(amdinfer.InputError, match=r"texts\[0\]: text: .*surrogate pair U\+D83D at position 2.*"):
            embedder(["ok\ud83d\ude00"])  # a UTF-16 pair split in two, with the fix
        joined = "ok\ud83d\ude00".encode("utf-16", "surrogatepass").decode("utf-16")  # the fix the message gives
        assert joined == "ok\U0001f600" and embedder(joined).shape == (8,)
        empty = embedder([])
        assert empty.vectors.shape == (0, 8) and empty.texts == [] and len(empty) == 0
        assert embedder("the").shape == (8,)  # one str, one 1-D vector (sentence-transformers)
        with pytest.raises(amdinfer.OptionError, match="workers: got -1, expected an int >= 0"):
            embedder.pipeline.map(["the"], workers=-1)  # the one map signature: any workers >= 0


@needs_tokenizers
def test_embed_option_and_model_errors(tmp_path: Path) -> None:
    tok = toy_tokenizer()
    cases = [
        ({"pooling": "max"}, amdinfer.OptionError, "pooling: got 'max'"),
        ({"batch_size": 0}, amdinfer.OptionError, "batch_size: got 0"),
        ({"buckets": (8, 4)}, amdinfer.OptionError, "buckets: got"),
        (
            {"output": "logits"},
            amdinfer.OptionError,
            r"output: got 'logits', expected one of the model's outputs \['tokens'\]",
        ),
        ({"truncate": "yes"}, amdinfer.OptionError, "truncate: got 'yes'"),
        ({"normalize": None}, amdinfer.OptionError, "normalize: got None"),
    ]
    for options, kind, message in cases:
        with pytest.raises(kind, match=message):
            embed(toy_encoder(), tok, **options, **CPU)
    with pytest.raises(amdinfer.InputError, match=r"tokenizer: '.*missing.json' is not a file"):
        embed(toy_encoder(), tmp_path / "missing.json", **CPU)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(amdinfer.InputError, match=r"tokenizer: '.*bad.json' is not a tokenizer.json"):
        embed(toy_encoder(), tmp_path / "bad.json", **CPU)
    with pytest.raises(amdinfer.OptionError, match="tokenizer: got dict"):
        embed(toy_encoder(), {}, **CPU)
    no_mask = toy_encoder()
    no_mask.graph.input.pop()  # attention_mask: the Cast reading it now reads a missing tensor
    no_mask.graph.node[1].input[0] = "input_ids"
    with pytest.raises(amdinfer.ModelError, match="no attention_mask input"):
        embed(no_mask, tok, **CPU)
    from amdinfer.testing.models import tiny_cnn

    with pytest.raises(amdinfer.ModelError, match="input 'input' is not one that embed feeds"):
        embed(tiny_cnn(), tok, **CPU)


@needs_tokenizers
def test_an_engine_instance_stays_open_and_takes_no_load_options() -> None:
    engine = amdinfer.load(toy_encoder(), **CPU)
    with embed(engine, toy_tokenizer()) as embedder:
        assert embedder.engine is engine
    assert not engine.closed
    with pytest.raises(amdinfer.OptionError, match="backend, precision: an Engine instance was given"):
        embed(engine, toy_tokenizer(), backend="ort", precision="fp16")
    engine.close()


def test_import_amdinfer_does_not_import_tokenizers() -> None:
    code = "import sys, amdinfer; amdinfer.embed; print('tokenizers' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_missing_tokenizers_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    with pytest.raises(amdinfer.BackendUnavailableError, match="tokenizers library") as info:
        embed(toy_encoder(), "tokenizer.json", **CPU)
    assert pip_extra("text") in str(info.value)


# ---------------------------------------------------------------------------------------------- results
def test_embeddings_similarity_search_and_json() -> None:
    emb = Embeddings([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]], ["a", "b", "c"])
    np.testing.assert_allclose(emb.similarity(), [[1, 0.6, 0.8], [0.6, 1, 0], [0.8, 0, 1]], atol=1e-7)
    np.testing.assert_allclose(emb.similarity([1.0, 1.0]), [[0.7 / 0.5**0.5 / 1], [0.5**0.5], [0.5**0.5]], atol=1e-6)
    found = emb.search(Embeddings([[0.0, 1.0], [1.0, 0.1]], ["up", "right"]), k=2)
    assert isinstance(found, Matches) and len(found) == 2
    assert found.indices.tolist() == [[2, 0], [1, 0]] and found.top1.tolist() == [2, 1]
    assert [m.text for m in found[1]] == ["b", "a"]
    assert emb.search([1.0, 0.0], k=10).indices.shape == (1, 3)  # at most len(corpus)
    tie = Embeddings([[1.0, 0.0], [2.0, 0.0]]).search([1.0, 0.0], k=2)
    assert tie.indices.tolist() == [[0, 1]]  # ties keep the corpus order
    back = Embeddings(**json.loads(emb.to_json(orient="columns")))
    assert back.texts == emb.texts and np.array_equal(back.vectors, emb.vectors)
    assert json.loads(found.to_json(orient="columns"))["indices"] == [[2, 0], [1, 0]]
    assert "up" in repr(found) and "Embeddings(3 x 2" in repr(emb)


def test_embeddings_indexing_and_errors() -> None:
    emb = Embeddings(np.eye(3, dtype=np.float32), ["a", "b", "c"], normalized=True)
    assert emb[-1].text == "c" and emb[-1].vector.tolist() == [0, 0, 1]
    assert emb[1:].texts == ["b", "c"] and emb[np.array([True, False, True])].texts == ["a", "c"]
    assert emb[[2, 0]].normalized and [e.text for e in emb] == ["a", "b", "c"]
    assert np.asarray(emb).shape == (3, 3)
    with pytest.raises(IndexError, match="index 3 is out of range for 3 rows"):
        emb[3]
    with pytest.raises(amdinfer.InputError, match="got 2 vectors and 1 texts"):
        Embeddings(np.eye(2), ["a"])
    with pytest.raises(amdinfer.InputError, match=r"vectors: got shape \(3,\), expected \(n, d\)"):
        Embeddings([1.0, 2.0, 3.0])
    with pytest.raises(amdinfer.InputError, match=r"similarity: other: got shape \(1, 2\), expected \(m, 3\)"):
        emb.similarity([[1.0, 0.0]])
    with pytest.raises(amdinfer.InputError, match=r"rows \[0\] are zero"):
        Embeddings([[0.0, 0.0]]).similarity()
    with pytest.raises(amdinfer.InputError, match="k: got 0"):
        emb.search(emb, k=0)


@needs_tokenizers
def test_model_limits_a_fixed_sequence_axis_is_the_one_bucket() -> None:
    with embed(toy_encoder(), toy_tokenizer(), **CPU) as embedder:
        assert embedder.max_length == 512 and embedder.buckets[-1] == 512  # the model states no limit
    fixed = toy_encoder()
    for value in (*fixed.graph.input, *fixed.graph.output):
        value.type.tensor_type.shape.dim[1].dim_value = 6  # sequence fixed at 6
    with embed(fixed, toy_tokenizer(), **CPU) as embedder:
        assert embedder.buckets == (6,) and embedder.max_length == 6
        assert embedder(["the cat", "dog"]).vectors.shape == (2, 8)
        with pytest.raises(amdinfer.InputError, match=r"texts\[0\]: text: 7 tokens, more than max_length=6"):
            embedder(["the cat sat on the"])
    with pytest.raises(amdinfer.OptionError, match="max_length: got 4, but the model's sequence axis is fixed at 6"):
        embed(fixed, toy_tokenizer(), max_length=4, **CPU)


@needs_tokenizers
def test_map_checks_its_options_when_called() -> None:
    with embed(toy_encoder(), toy_tokenizer(), **CPU) as embedder:
        with pytest.raises(amdinfer.OptionError, match="batch_size: got 0"):
            embedder.map(["the"], batch_size=0)  # not at the first next()
        with pytest.raises(amdinfer.InputError, match="texts: got str, expected an iterable of str"):
            embedder.map("the cat")
        stream = embedder.map(iter(["the", "cat", 7]), batch_size=1)
        assert next(stream).shape == (8,) and next(stream).shape == (8,)
        with pytest.raises(amdinfer.InputError, match=r"texts\[2\]: text: got int"):
            next(stream)  # the texts before a bad one still come out
