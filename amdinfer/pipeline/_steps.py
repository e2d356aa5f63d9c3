"""The per-item steps a :class:`~amdinfer.Pipeline` is made of: preprocess, stack + engine call, postprocess.

:class:`PipelineSteps` holds them (each names the item and stage that failed); ``Pipeline`` builds on it, and
:class:`~amdinfer.pipeline.SubPipeline` and the streaming executor (:class:`~amdinfer.pipeline.PipelineMap`) run a
pipeline through them.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import HwcToChw, Cast
    >>> from amdinfer.testing.models import tiny_cnn
    >>> pipe = amdinfer.Pipeline(preprocess=[HwcToChw(), Cast("float32")], engine=tiny_cnn(),
    ...                          backend="ort", providers=["CPUExecutionProvider"])
    >>> isinstance(pipe, PipelineSteps)
    True
    >>> [s.data.shape for s in pipe._infer_samples(0, [pipe._preprocess_one(0, np.zeros((32, 32, 3), np.uint8))])]
    [(10,)]
    >>> pipe.close()
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..engines.base import Engine
from ..errors import InputError, OptionError, StageError, StageInputError
from ..preprocess import stack
from ..stages import Postprocessor, Preprocessor, Sample, _stage_error
from ..types import TensorSpec
from ._map import MapSteps
from ._source_images import attach, remember

__all__ = ["PipelineSteps"]


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise OptionError(f"{name}: got {value!r}, expected an int >= {minimum}")
    return int(value)


def _shape_groups(samples: list[Sample]) -> list[list[int]]:
    """The indices of ``samples`` grouped by their data's shape and dtype, groups in order of first item."""
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault((s.data.shape, s.data.dtype.str), []).append(i)
    return list(groups.values())


class PipelineSteps:
    """The steps of a pipeline (its stages, engine and single input set by the subclass), each naming what failed.

    Example:
        >>> import amdinfer
        >>> issubclass(amdinfer.Pipeline, PipelineSteps)
        True
    """

    _preprocess: tuple[Preprocessor, ...]
    _postprocess: tuple[Postprocessor, ...]
    _engine: Engine
    _input: TensorSpec
    _keep_image: bool

    def _map_steps(self) -> MapSteps:
        """What the streaming executor needs from this pipeline (it sees nothing else of it)."""
        return MapSteps(
            engine=self._engine,
            input_name=self._input.name,
            preprocess_one=self._preprocess_one,
            postprocess_one=self._postprocess_one,
            infer_samples=self._infer_samples,
            chunks=self._chunks,
            cut=self._cut,
            split=self._split,
        )

    def _preprocess_one(self, index: int, item: Any) -> Sample:
        sample = Sample.wrap(item)
        for k, stage in enumerate(self._preprocess):
            try:
                sample = stage(sample)
            except Exception as exc:
                raise _stage_error(index, f"preprocess[{k}] {type(stage).__name__}", exc) from exc
            if k == 0 and self._keep_image:
                remember(sample, stage)
        if not isinstance(sample.data, np.ndarray):
            exc = TypeError(f"got {type(sample.data).__name__}, expected a numpy array for the engine")  # type: ignore[misc]
            raise _stage_error(index, "preprocess (result)", exc)  # type: ignore[misc]
        return sample

    def _postprocess_one(self, index: int, sample: Sample) -> Any:
        for k, stage in enumerate(self._postprocess):
            try:
                sample = stage(sample)
            except Exception as exc:
                raise _stage_error(index, f"postprocess[{k}] {type(stage).__name__}", exc) from exc
        return attach(sample.data, sample.meta)

    def _infer_samples(self, first: int, samples: list[Sample]) -> list[Sample]:
        """Stack, run the engine, split per item; errors name the batch's items."""
        try:
            batch, metas = stack(samples)
        except Exception as exc:
            raise _stage_error(first, "stack", exc, count=len(samples)) from exc
        try:
            outputs = self._infer(batch)
        except Exception as exc:
            raise _stage_error(first, f"engine {type(self._engine).__name__}", exc, count=len(samples)) from exc
        return [Sample(out, meta) for out, meta in zip(outputs, metas)]

    def _infer_group(self, indices: list[int], samples: list[Sample]) -> list[Sample]:
        """:meth:`_infer_samples` for items of one shape that need not be neighbours in the input; an error
        names them all."""
        if indices == list(range(indices[0], indices[0] + len(indices))):
            return self._infer_samples(indices[0], samples)
        try:
            return self._infer_samples(indices[0], samples)
        except StageError as exc:
            stage = getattr(exc, "stage", "")
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            kind = StageInputError if isinstance(cause, InputError) else StageError
            err = kind(f"items {', '.join(map(str, indices))} (one batch): {stage}: {type(cause).__name__}: {cause}")
            err.index = indices[0]  # type: ignore[attr-defined]
            err.stage = stage  # type: ignore[attr-defined]
            raise err from cause

    def _infer_by_shape(self, first: int, samples: list[Sample]) -> list[Sample]:
        """Items of several shapes (``first`` is the index of ``samples[0]``): one engine step per shape
        (:meth:`_infer_group`), answers in the items' order."""
        outputs: list[Sample] = [None] * len(samples)  # type: ignore[list-item]
        for group in _shape_groups(samples):
            outs = self._infer_group([first + i for i in group], [samples[i] for i in group])
            for i, out in zip(group, outs):
                outputs[i] = out
        return outputs

    def _infer(self, batch: np.ndarray) -> list[Any]:
        parts = []
        for chunk, size in self._chunks(batch):
            parts.append(self._cut(self._engine.run({self._input.name: chunk}), chunk, size))
        return self._split(parts, batch.shape[0])

    def _chunks(self, batch: np.ndarray) -> list[tuple[np.ndarray, int]]:
        """The engine calls for one stacked batch: ``(feed, real items)``; a fixed batch size ``B`` gives
        chunks of ``B``, the last one padded by repeating its last item."""
        n = batch.shape[0]
        fixed = self._input.shape[0] if self._input.shape else None
        if not isinstance(fixed, int) or fixed == n or self._engine.batch_buckets:
            return [(batch, n)]
        out = []
        for start in range(0, n, fixed):
            chunk = batch[start : start + fixed]
            size = chunk.shape[0]
            if size < fixed:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], fixed - size, axis=0)])
            out.append((chunk, size))
        return out

    @staticmethod
    def _cut(result: dict[str, Any], chunk: np.ndarray, size: int) -> dict[str, Any]:
        """Drop the padding rows of a padded chunk's outputs."""
        if size == chunk.shape[0]:
            return result
        return {k: v[:size] for k, v in result.items()}

    def _split(self, parts: list[dict[str, Any]], n: int) -> list[Any]:
        """Join a batch's chunk outputs, check each has the batch axis, and split them per item."""
        if len(parts) == 1:
            result = parts[0]
        else:
            result = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        for name, value in result.items():
            if getattr(value, "ndim", 0) < 1 or value.shape[0] != n:
                raise StageError(
                    f"output {name!r}: got shape {getattr(value, 'shape', None)}, expected a batch axis of {n} "
                    "(a Pipeline splits outputs per item along axis 0)"
                )
        if len(result) == 1:
            (value,) = result.values()
            return list(value)
        return [{k: v[i] for k, v in result.items()} for i in range(n)]
