"""Serve models over the Open Inference Protocol v2 (REST + gRPC) on KServe's ModelServer.

Needs the ``serve`` extra (``pip install 'amdinfer-onnx[serve]'``). One engine per device, an asyncio
dynamic batcher in front of them, binary tensors viewed with ``np.frombuffer``, Triton's system
shared-memory extension for clients on the same host, Prometheus metrics, a numerical canary that re-runs a
sample of requests on a reference engine (:class:`Canary`), bound to ``127.0.0.1`` unless told otherwise.
See docs/serving.md.

Example:
    >>> import amdinfer
    >>> from amdinfer.serve import build_model
    >>> from amdinfer.testing.models import tiny_cnn
    >>> model = build_model("tiny", amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]),
    ...                     max_batch_size=16, max_delay_ms=2)
    >>> model.name, model.batcher.max_batch_size
    ('tiny', 16)
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ._answers import result_tensors
from ._batcher import BatchWorker, DynamicBatcher, run_isolated
from ._canary import Canary, load_reference
from ._metrics import ServingMetrics
from ._workers import EngineWorker, PipelineWorker, batch_axis, check_request, request_rows

__all__ = [
    "AmdinferModel",
    "BatchWorker",
    "Canary",
    "DynamicBatcher",
    "EngineWorker",
    "FastDataPlane",
    "ModelRepository",
    "PipelineWorker",
    "Server",
    "ServingMetrics",
    "answer_error",
    "batch_axis",
    "build_model",
    "check_request",
    "decode_rest",
    "json_length",
    "load_recipe_workers",
    "load_reference",
    "load_workers",
    "request_rows",
    "result_tensors",
    "run_isolated",
    "serve",
    "serve_processes",
    "serve_repository",
    "tensor_metadata",
    "to_numpy",
]

# These need KServe: imported on first use, so that `amdinfer serve --help` and the batcher work without it.
_KSERVE = {
    "AmdinferModel": "_oip",
    "FastDataPlane": "_oip",
    "decode_rest": "_oip",
    "json_length": "_oip",
    "tensor_metadata": "_oip",
    "to_numpy": "_oip",
    "ModelRepository": "_repository",
    "answer_error": "_statuses",
    "Server": "_server",
    "build_model": "_models",
    "load_recipe_workers": "_models",
    "load_workers": "_models",
    "serve": "_serve_api",
    "serve_processes": "_supervisor",
    "serve_repository": "_serve_api",
}


def _kserve_module(name: str) -> Any:
    """Import ``amdinfer.serve.<name>``; KServe parses ``sys.argv`` when imported, so it sees none of ours."""
    from .._support._install import pip_extra
    from ..errors import BackendUnavailableError

    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        raise BackendUnavailableError(
            f"amdinfer.serve needs KServe ({exc}); install it with: {pip_extra('serve')}",
            backend="kserve",
        ) from None
    finally:
        sys.argv = argv


def __getattr__(name: str) -> Any:
    if name in _KSERVE:
        return getattr(_kserve_module(_KSERVE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
