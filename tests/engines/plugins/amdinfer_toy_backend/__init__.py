"""A third-party backend in ten lines of engine: onnx.reference behind amdinfer's public Engine contract.

Installed by ``tests/engines/test_plugins.py`` as a package with an ``amdinfer.backends`` entry point
(``toy = amdinfer_toy_backend:backend``); it imports nothing private from amdinfer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from amdinfer import Engine, EngineInfo
from amdinfer.engines.registry import BackendEntry, ConformanceKind, Diagnosis


class ToyEngine(Engine):
    """Runs the model with onnx.reference (float32, CPU)."""

    backend_name = "toy"

    def _load(self, source: Any) -> tuple[list[Any], list[Any], EngineInfo]:
        self._evaluator = ReferenceEvaluator(source.proto)
        return list(source.inputs), list(source.outputs), EngineInfo(backend="toy", runtime_version=onnx.__version__)

    def _run(self, feeds: dict[str, Any], outputs: list[str] | None) -> dict[str, np.ndarray]:
        names = outputs if outputs is not None else self._output_names
        values = self._evaluator.run(names, feeds)
        return {n: np.asarray(v) for n, v in zip(names, values)}


def diagnose() -> Diagnosis:
    """What ``amdinfer doctor`` shows for the toy backend."""
    return Diagnosis(f"ready (onnx.reference {onnx.__version__})", details={"evaluator": "onnx.reference"})


def backend() -> BackendEntry:
    """The entry point: the toy backend with its doctor hook and conformance kind."""
    return BackendEntry(
        name="toy",
        factory=ToyEngine,
        description="a test plugin: onnx.reference behind the Engine contract",
        diagnose=diagnose,
        conformance=(ConformanceKind("toy", {"backend": "toy"}),),
    )
