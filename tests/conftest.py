"""Shared fixtures: engine kinds of the conformance suite, small builder models, the oracle, a quiet root logger."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from amdinfer.testing import conformance


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for name in conformance.selected_kinds():
        why = conformance.availability(name)
        lines.append(f"amdinfer engine {name}: " + ("available" if why is None else f"skipped ({why[:160]})"))
    return lines


@pytest.fixture(params=conformance.selected_kinds())
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Each engine kind the suite runs over; unavailable kinds skip with the backend's reason."""
    why = conformance.availability(request.param)
    if why is not None:
        pytest.skip(why)
    return request.param


def oracle(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnx's own ReferenceEvaluator: the independent truth for engine outputs."""
    ev = ReferenceEvaluator(model)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ev.run(None, feeds)))


@pytest.fixture
def quiet_root_logger() -> Iterator[None]:
    """Root logger at ERROR for the test: onnxruntime.quantization logs advice there; keep test output readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    yield
    root.setLevel(level)
