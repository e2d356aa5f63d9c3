"""``BatchPredictor``: a callable class for ``ray.data.Dataset.map_batches`` (NumPy batch format)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..results import TensorResult

__all__ = ["BatchPredictor"]


class BatchPredictor:
    """Runs an amdinfer engine (or Pipeline) on the NumPy batches of a Ray Dataset; built once per actor.

    With a model, each batch's columns named after the model's inputs are fed to ``engine.run`` and the
    outputs are added to the batch as columns named after the model's outputs. With ``pipeline=`` (a
    zero-argument function that builds a :class:`~amdinfer.Pipeline`, called once in each actor), the
    column ``input_column`` holds one item per row, and the results come back in ``output_column``: arrays
    stacked per row (an object column when their shapes differ). A result that knows its tensors (an
    :class:`amdinfer.results.TensorResult`: ``Detections``, ``Classification``, ``TextLines``, ...) gives one
    column per tensor of its ``to_tensors()``, named ``<output_column>_<tensor>`` (``result_boxes``,
    ``result_scores``, ...), stacked per row, or an object column of arrays where rows differ (a box count);
    ``Detections.from_tensors({k: row["result_" + k] for k in ("boxes", "scores", "classes")})`` rebuilds one.

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
        return {**batch, **_result_columns(results, self.output_column)}

    def __del__(self) -> None:
        target = self._engine if self._engine is not None else self._pipeline
        if target is not None:
            try:
                target.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass


def _column(values: list[Any]) -> np.ndarray:
    """One value per row: arrays of one shape stacked, anything else an object column (one element per row)."""
    if all(isinstance(v, np.ndarray) for v in values) and len({v.shape for v in values}) == 1:
        return np.stack(values)
    column = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # one by one: a list of equal-length arrays would be broadcast, not stored
        column[i] = v
    return column


def _result_columns(results: list[Any], name: str) -> dict[str, np.ndarray]:
    """The pipeline's results as batch columns: ``name``, or ``<name>_<tensor>`` per tensor of TensorResults.

    Example:
        >>> from amdinfer.results import Detections
        >>> cols = _result_columns([Detections([[0, 0, 1, 1]], [0.5], [3]), Detections([], [], [])], "result")
        >>> {k: (v.dtype.name, v.shape) for k, v in cols.items()}["result_boxes"], cols["result_boxes"][1].shape
        (('object', (2,)), (0, 4))
    """
    if not any(isinstance(r, TensorResult) for r in results):
        return {name: _column(results)}
    kinds = sorted({type(r).__name__ for r in results})
    if len(kinds) > 1:
        raise InputError(f"pipeline results: got {kinds} in one batch, expected one TensorResult type")
    tensors = [r.to_tensors() for r in results]
    names = list(tensors[0])
    for i, t in enumerate(tensors):
        if set(t) != set(names):
            raise InputError(f"pipeline results: row {i}: got tensors {sorted(t)}, expected {sorted(names)} (row 0's)")
    return {f"{name}_{k}": _column([t[k] for t in tensors]) for k in names}
