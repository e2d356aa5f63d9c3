"""``Pipeline``: preprocessing stages -> engine -> postprocessing stages, one item, a batch, or a stream.

The package holds the data path: the :class:`Pipeline` and its steps (``_steps``), the one executor that every
batching path runs on (``_executor``), ``map`` (``_map``), cascades (:class:`SubPipeline` with the
:class:`~amdinfer.stages.FanOut` and :class:`~amdinfer.stages.Gather` stages, ``_cascade``), sliced inference
(:class:`SlicedPipeline` with :class:`Tiles` and :class:`MergeTiles`, ``_slices``), the sources a
pipeline reads (``_sources``, ``_source_images``) and the fused form (:mod:`amdinfer.pipeline.fuse`).

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
    >>> from amdinfer.postprocess import Softmax, TopK
    >>> from amdinfer.testing.models import tiny_cnn
    >>> pipe = amdinfer.Pipeline(
    ...     preprocess=[Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
    ...     engine=tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"],
    ...     postprocess=[Softmax(), TopK(3)],
    ... )
    >>> result = pipe(np.zeros((48, 64, 3), np.uint8))
    >>> len(result.indices)
    3
    >>> [len(r) for r in pipe.map([np.zeros((40, 40, 3), np.uint8)] * 3, batch_size=2)]
    [3, 3, 3]
    >>> pipe.close()
"""

from __future__ import annotations

from ._cascade import SubPipeline
from ._map import PipelineMap
from ._pipeline import Pipeline
from ._slices import MergeTiles, SlicedPipeline, Tiles
from .fuse import FusedPipeline, fuse_model

__all__ = [
    "FusedPipeline",
    "MergeTiles",
    "Pipeline",
    "PipelineMap",
    "SlicedPipeline",
    "SubPipeline",
    "Tiles",
    "fuse_model",
]
