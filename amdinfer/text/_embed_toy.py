"""A word-level tokenizer and a lookup-table "encoder" small enough for the docstring examples of
:func:`amdinfer.embed` (a trained one: tests/_minilm.py).

Example:
    >>> toy_encoder(8).graph.output[0].name
    'tokens'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["TOY_WORDS", "toy_encoder", "toy_tokenizer"]

TOY_WORDS: tuple[str, ...] = ("the", "cat", "dog", "sat", "ran", "on", "mat", "market", "stock", "fell")


def toy_tokenizer(words: Sequence[str] = TOY_WORDS) -> Any:
    """A ``tokenizers.Tokenizer``: lower-cased whitespace words, ``[CLS] ... [SEP]``, ids 0-3 special.

    Example:
        >>> toy_tokenizer().encode("The cat").tokens
        ['[CLS]', 'the', 'cat', '[SEP]']
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return tok


def toy_encoder(vocab_size: int = 4 + len(TOY_WORDS), dim: int = 8, seed: int = 0) -> onnx.ModelProto:
    """``input_ids``/``attention_mask`` int64 ``(batch, sequence)`` -> ``tokens`` float32 ``(batch, sequence,
    dim)``: a seeded embedding table looked up per token (no attention, so padding cannot reach a token).

    Example:
        >>> [i.name for i in toy_encoder().graph.input]
        ['input_ids', 'attention_mask']
    """
    table = np.random.default_rng(seed).standard_normal((vocab_size, dim)).astype(np.float32)
    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "input_ids"], ["gathered"]),
            helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["maskf", "axis"], ["mask3"]),
            helper.make_node("Mul", ["gathered", "mask3"], ["tokens"]),
        ],
        "toy_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, dims),
        ],
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [*dims, dim])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([-1], np.int64), "axis")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
