"""The trained MiniLM, loaded once for the text tests (ONNX Runtime CPU and the reference engine)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _minilm import checked_model_path

import amdinfer


@pytest.fixture(scope="session")
def minilm_ort() -> Iterator[amdinfer.Engine]:
    """The MiniLM on ONNX Runtime's CPU provider (shared: the embedders built on it leave it open)."""
    engine = amdinfer.load(checked_model_path(), providers=["CPUExecutionProvider"], threads=2)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def minilm_reference() -> Iterator[amdinfer.Engine]:
    """The MiniLM on the NumPy reference engine (slow: a few short sentences only)."""
    engine = amdinfer.load(checked_model_path(), backend="reference")
    yield engine
    engine.close()
