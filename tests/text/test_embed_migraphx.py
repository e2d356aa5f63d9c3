"""The MiniLM on MIGraphX's own engine (issue 28, item 1): one dynamic ``[batch, sequence]`` program and per-shape
programs agree with ONNX Runtime's CPU, and ``amdinfer.embed`` keeps its embeddings independent of padding.

Runs where ``import migraphx`` works (a ROCm machine, or the CPU-only ``ref`` build of
``../shared/tools/build-migraphx-ref``, on ``target="ref"``); skipped elsewhere, CI included. Proven on the ``ref``
build of MIGraphX f729a52 (docs/text.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from _minilm import POOLED_OUT, TOKENIZER, checked_model_path, needs_model, needs_tokenizers, sentences

import amdinfer
from amdinfer.engines.migraphx import probe

MIGRAPHX_PROBLEM = probe()
pytestmark = [
    needs_model,
    needs_tokenizers,
    pytest.mark.skipif(MIGRAPHX_PROBLEM is not None, reason=f"migraphx not importable: {MIGRAPHX_PROBLEM}"),
]
#: The CPU-only build has only the reference target; a GPU build runs on the GPU.
TARGET = {"target": "ref"}


def _feeds(texts: list[str], length: int) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    tok.no_truncation()
    ids = np.zeros((len(texts), length), np.int64)
    mask = np.zeros_like(ids)
    for row, enc in enumerate(tok.encode_batch(texts)):
        ids[row, : len(enc.ids)] = enc.ids
        mask[row, : len(enc.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def ort_cpu():
    with amdinfer.load(checked_model_path(), providers=["CPUExecutionProvider"]) as engine:
        yield engine


def test_one_dynamic_program_serves_several_shapes(ort_cpu) -> None:
    bounds = {"input_ids": [(1, 1), (2, 16)], "attention_mask": [(1, 1), (2, 16)]}
    with amdinfer.load(checked_model_path(), backend="migraphx", shapes=bounds, **TARGET) as engine:
        for texts, length in ((["hello world"], 7), (["Why?", "Paris is the capital of France."], 12)):
            feeds = _feeds(texts, length)
            assert np.abs(engine.run(feeds)[POOLED_OUT] - ort_cpu.run(feeds)[POOLED_OUT]).max() < 1e-5
        alone, padded = _feeds(["Why?"], 5), _feeds(["Why?"], 16)
        assert np.abs(engine.run(alone)[POOLED_OUT] - engine.run(padded)[POOLED_OUT]).max() < 1e-5


def test_embed_on_migraphx_equals_ort_and_ignores_padding() -> None:
    texts = sentences()["sentences"][:6]
    with amdinfer.embed(checked_model_path(), TOKENIZER, backend="ort", providers=["CPUExecutionProvider"]) as cpu:
        want = cpu(texts).vectors
    with amdinfer.embed(checked_model_path(), TOKENIZER, backend="migraphx", max_length=32, **TARGET) as mgx:
        got = mgx(texts).vectors
        alone = np.stack([mgx(t).vector for t in texts])
    assert np.abs(got - want).max() < 1e-5
    assert np.abs(alone - got).max() < 1e-5
