"""Post-processing of the YOLO tasks beyond boxes: instance segmentation and pose (Ultralytics' ``segment`` and
``pose`` predictors on the same raw outputs).

A segmentation chain is ``SegmentDecode -> Nms -> SegmentMasks``; a pose chain ``PoseDecode -> Nms ->
ScaleKeypoints``. :func:`amdinfer.yolo` builds them from the model's ``task`` metadata (or its output layout);
:func:`detect_task` is that choice. The results are :class:`~amdinfer.results.Detections` with ``masks``
(:class:`~amdinfer.results.Masks`) or ``keypoints`` (:class:`~amdinfer.results.Keypoints`).

=====================  ==================================================================================
``_mask_ops.py``       NumPy kernels of Ultralytics' ``process_mask``, ``process_mask_native``, ``scale_masks``
``_seg.py``            :class:`SegmentDecode`, :class:`SegmentMasks`
``_pose.py``           :class:`PoseDecode`, :class:`ScaleKeypoints`
``_task.py``           :func:`detect_task`, :func:`kpt_shape`
=====================  ==================================================================================

Example:
    >>> import numpy as np
    >>> from amdinfer.postprocess import Nms
    >>> from amdinfer.stages import Sample
    >>> pred = np.zeros((4 + 1 + 3, 2), np.float32); pred[:, 0] = [8, 8, 8, 8, 0.9, 1, 2, 0.5]
    >>> sample = Sample(pred, {"input_shape": (16, 16)})
    >>> det = Nms()(PoseDecode((1, 3))(sample)).data
    >>> det.keypoints.data.tolist()
    [[[1.0, 2.0, 0.5]]]
"""

from ._pose import PoseDecode, ScaleKeypoints
from ._seg import SegmentDecode, SegmentMasks
from ._task import TASKS, detect_task, kpt_shape

__all__ = ["TASKS", "PoseDecode", "ScaleKeypoints", "SegmentDecode", "SegmentMasks", "detect_task", "kpt_shape"]
