"""Fused pipelines: pre- and post-processing compiled into the model, one ONNX graph from uint8 images to answers.

:meth:`Pipeline.fuse() <amdinfer.Pipeline.fuse>` (or :func:`fuse_model`) turns the stages of a
:class:`~amdinfer.Pipeline` into ONNX nodes around the model, so one engine call takes a batch of uint8
``(N, H, W, C)`` images and returns final answers: detections (boxes in original-image pixels, scores,
classes) or the top-k classes. Every engine runs the fused graph (ORT on any execution provider, MIGraphX,
the NumPy reference engine), so it is checked like any model; on a GPU the host copies are uint8 images in
and kilobytes out.

How images enter (``image_size``):

* ``image_size=(H, W)``: a fixed-size stream. Geometry (``Letterbox``, ``Resize``, ``CenterCrop``) runs in the
  graph with its parameters fixed at fuse time. The resize reproduces ``cv2.resize(INTER_LINEAR)`` on uint8
  bit for bit (OpenCV's 11-bit weights and its SIMD vertical pass, in int32 arithmetic), so the fused graph
  sees the same pixels as the host stages with OpenCV installed.
* ``image_size=None``: mixed sizes. The geometric stages run on the host (OpenCV when installed) and put
  every image on one canvas; the graph takes the canvases plus two small inputs per image, ``affine``
  ``(N, 4)`` = ``(sx, sy, tx, ty)`` and ``orig_shape`` ``(N, 2)`` = ``(height, width)``, and does colour
  order, normalisation, layout, cast, the model and the post-processing.

Outputs of a fused detector: ``boxes`` ``float32 (K, 4)``, ``scores`` ``float32 (K,)``, ``classes`` ``int64
(K,)`` and ``batch_index`` ``int64 (K,)`` (the image each detection belongs to; best first within an image).
A fused classifier returns ``scores`` and ``indices`` of shape ``(N, k)``.

The package's private modules: ``_graph`` (the node builder), ``_pre`` and ``_post`` (stages as nodes),
``_model`` (:func:`fuse_model`), ``_pipeline`` (:class:`FusedPipeline`).

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.preprocess import Letterbox, Normalize, HwcToChw
    >>> from amdinfer.postprocess import YoloDecode, Nms, ScaleBoxes
    >>> from amdinfer.testing.models import yolov8
    >>> pipe = amdinfer.Pipeline(
    ...     preprocess=[Letterbox(64), Normalize(scale=1 / 255), HwcToChw()],
    ...     engine=yolov8(image_size=64, num_classes=3), backend="ort", providers=["CPUExecutionProvider"],
    ...     postprocess=[YoloDecode(conf_threshold=0.3), Nms(max_det=5), ScaleBoxes()],
    ... )
    >>> fused = pipe.fuse(image_size=(48, 80))
    >>> [i.name for i in fused.model.graph.input], [o.name for o in fused.model.graph.output]
    (['images'], ['boxes', 'scores', 'classes', 'batch_index'])
    >>> image = np.random.default_rng(0).integers(0, 255, (48, 80, 3), np.uint8)
    >>> a, b = fused(image), pipe(image)
    >>> a.classes.tolist() == b.classes.tolist() and bool(np.allclose(a.boxes, b.boxes, atol=0.5))
    True
    >>> fused.close(); pipe.close()
"""

from __future__ import annotations

from ._model import fuse_model
from ._model import split_host_stages as split_host_stages  # re-exported: pipeline.py uses it
from ._pipeline import FusedPipeline
from ._pipeline import _labels as _labels  # re-exported: pipeline.py uses it

__all__ = ["FusedPipeline", "fuse_model"]
