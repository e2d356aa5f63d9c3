"""Scale-out on Ray: offline batches with Ray Data, online serving with Ray Serve.

Needs the ``ray`` extra (``pip install 'amdinfer-onnx[ray]'``). amdinfer writes no scheduler of its own:
Ray places the actors and replicas (``num_gpus``, ``num_cpus``, nodes), amdinfer runs the model in them.
See docs/serving.md.

Example:
    >>> import numpy as np
    >>> from amdinfer.ray import BatchPredictor
    >>> from amdinfer.testing.models import tiny_cnn
    >>> BatchPredictor(tiny_cnn(), providers=["CPUExecutionProvider"])({"input": np.ones((2, 3, 32, 32), np.float32)})[
    ...     "logits"].shape
    (2, 10)
"""

from __future__ import annotations

from ._deployment import OipDeployment, deployment
from ._predictor import BatchPredictor

__all__ = ["BatchPredictor", "OipDeployment", "deployment"]
