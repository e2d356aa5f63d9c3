"""``BatchPredictor``: a callable class for ``ray.data.Dataset.map_batches`` (NumPy batch format)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InputError, OptionError

__all__ = ["BatchPredictor"]


class BatchPredictor:
    """Runs an amdinfer engine (or Pipeline) on the NumPy batches of a Ray Dataset; built once per actor.

    With a model, each batch's columns named after the model's inputs are fed to ``engine.run`` and the
    outputs are added to the batch as columns named after the model's outputs. With ``pipeline=`` (a
    zero-argument function that builds a :class:`~amdinfer.Pipeline`, called once in each actor), the
    column ``input_column`` holds one item per row, and the results come back in ``output_column``
    (arrays stacked per row; ``Detections`` as an object column).

    Ray decides the resources per actor: ``ds.map_batches(BatchPredictor, fn_constructor_args=(model,),
    batch_format="numpy", concurrency=2, num_gpus=0.5)``; inside an actor with ``num_gpus`` Ray sets
    ``CUDA_VISIBLE_DEVICES``, so ``device=0`` (the default) is the actor's GPU.

    Args:
        model: a model (path, bytes, ``onnx.ModelProto``); ``None`` with ``pipeline=``.
        pipeline: a function returning a Pipeline, instead of a model.
        input_column: the pipeline's item column (default ``"item"``).
        output_column: the pipeline's result column (default ``"result"``).
        **load_options: :func:`amdinfer.load` options (``backend=``, ``providers=``, ``precision=``, ...).

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> predict = BatchPredictor(tiny_cnn(), providers=["CPUExecutionProvider"])
        >>> batch = predict({"input": np.zeros((4, 3, 32, 32), np.float32), "id": np.arange(4)})
        >>> sorted(batch), batch["logits"].shape
        (['id', 'input', 'logits'], (4, 10))
    """

    def __init__(
        self,
        model: Any = None,
        *,
        pipeline: Callable[[], Any] | None = None,
        input_column: str = "item",
        output_column: str = "result",
        **load_options: Any,
    ) -> None:
        if (model is None) == (pipeline is None):
            raise OptionError("BatchPredictor: give a model or pipeline=, not both and not neither")
        self._engine: Any = None
        self._pipeline: Any = None
        self.input_column, self.output_column = input_column, output_column
        if pipeline is not None:
            if load_options:
                raise OptionError(f"{sorted(load_options)}: load options go into the pipeline function")
            self._pipeline = pipeline()
        else:
            from .._load import load

            self._engine = load(model, **load_options)
        self._inputs = [] if self._engine is None else [s.name for s in self._engine.inputs]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._engine is not None:
            missing = [n for n in self._inputs if n not in batch]
            if missing:
                raise InputError(f"batch: got columns {sorted(batch)}, expected the model's inputs {self._inputs}")
            out = self._engine.run({n: np.ascontiguousarray(batch[n]) for n in self._inputs})
            return {**batch, **{k: np.asarray(v) for k, v in out.items()}}
        if self.input_column not in batch:
            raise InputError(f"batch: got columns {sorted(batch)}, expected {self.input_column!r}")
        results = self._pipeline.run_batch(list(batch[self.input_column]))
        if all(isinstance(r, np.ndarray) for r in results) and len({r.shape for r in results}) == 1:
            column = np.stack(results)
        else:
            column = np.empty(len(results), dtype=object)
            column[:] = results
        return {**batch, self.output_column: column}

    def __del__(self) -> None:
        target = self._engine if self._engine is not None else self._pipeline
        if target is not None:
            try:
                target.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
