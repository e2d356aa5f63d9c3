"""Pose stages: :class:`PoseDecode` (YOLOv8/11-pose outputs to candidate boxes with keypoints) and
:class:`ScaleKeypoints` (boxes and keypoints in the original image, as Ultralytics' ``scale_coords``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..postprocess import ScaleBoxes, _class_names, _names_for, _number, _output_name
from ..results import Detections, Keypoints
from ..stages import Postprocessor
from ._seg import _per_item, decode_with_rows

__all__ = ["PoseDecode", "ScaleKeypoints"]


def _kpt_shape(value: Any) -> tuple[int, int]:
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, np.integer)) for v in value)
    if not ok or value[0] < 1 or value[1] not in (2, 3):
        raise OptionError(f"kpt_shape: got {value!r}, expected (K, 3) or (K, 2): keypoints and x, y[, visibility]")
    return int(value[0]), int(value[1])


class PoseDecode(Postprocessor):
    """Candidate :class:`~amdinfer.results.Detections` of a YOLOv8/11-pose model, each with its keypoints.

    The output is ``(4 + nc + K * D, A)``: box ``cx, cy, w, h``, class scores, then per keypoint ``x, y`` in
    input pixels and (``D = 3``) its visibility score, as Ultralytics exports them (decoded in the graph). Each
    anchor keeps its best class when that scores strictly above ``conf_threshold``. Put
    :class:`~amdinfer.postprocess.Nms` and :class:`ScaleKeypoints` after it.

    Args:
        kpt_shape: ``(K, D)``, the model's ``kpt_shape`` metadata (COCO persons: ``(17, 3)``).
        conf_threshold: minimum score, in ``[0, 1]``.
        labels: class names; the number of classes is ``rows - 4 - K * D``.
        output: which output holds the predictions when the model has several.

    Raises:
        OptionError: a parameter has the wrong type or range.

    Example:
        >>> pred = np.zeros((4 + 1 + 2 * 3, 2), np.float32); pred[:, 1] = [8, 8, 4, 4, 0.9, 7, 6, 0.8, 9, 9, 0.1]
        >>> det = PoseDecode((2, 3))(pred).data
        >>> det.boxes.tolist(), det.keypoints.data.astype(float).round(2).tolist()
        ([[6.0, 6.0, 10.0, 10.0]], [[[7.0, 6.0, 0.8], [9.0, 9.0, 0.1]]])
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(
        self,
        kpt_shape: tuple[int, int] = (17, 3),
        conf_threshold: float = 0.25,
        *,
        labels: Sequence[str] | dict[int, str] | None = None,
        output: str | None = None,
    ) -> None:
        self.kpt_shape = _kpt_shape(kpt_shape)
        self.conf_threshold = _number("conf_threshold", conf_threshold, 0.0, 1.0)
        self.labels = _class_names(labels)
        self.output = _output_name(output)

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        pred = _per_item(self._select_output(self, data, self.output), 2, "PoseDecode")
        k, d = self.kpt_shape
        nc = pred.shape[0] - 4 - k * d
        if nc < 1:
            raise InputError(
                f"PoseDecode: got {pred.shape[0]} rows, expected 4 + nc + {k} * {d} with nc >= 1 (kpt_shape {k, d}); "
                "pass the model's kpt_shape"
            )
        if self.labels is not None and len(self.labels) != nc:
            raise InputError(f"PoseDecode: the model has {nc} classes, but labels has {len(self.labels)} names")
        boxes, scores, classes, rows = decode_with_rows(pred, nc, self.conf_threshold)
        meta["yolo"] = {"prediction": pred[: 4 + nc], "layout": "v8", "conf_threshold": self.conf_threshold}
        meta["yolo"]["labels"] = self.labels
        labels = _names_for(self, self.labels, classes)
        kpts = rows.reshape(len(rows), k, d)
        return Detections(boxes, scores, classes, labels, meta.get("input_shape"), keypoints=kpts)


class ScaleKeypoints(Postprocessor):
    """Boxes (:class:`~amdinfer.postprocess.ScaleBoxes`) and keypoints mapped back to the original image: ``x, y``
    less the letterbox offset, divided by its per-axis gains, clipped to ``[0, W] x [0, H]`` (Ultralytics'
    ``scale_coords``); the visibility is kept as it is.

    Args:
        clip: clip boxes and keypoints to the image.

    Raises:
        OptionError: ``clip`` is not a bool.

    Example:
        >>> from amdinfer.preprocess import Letterbox
        >>> from amdinfer.stages import Sample
        >>> meta = Letterbox(16)(np.zeros((8, 16, 3), np.uint8)).meta  # rows 4..11 of the 16x16 input
        >>> det = Detections([[0, 4, 8, 12]], [0.9], [0], keypoints=[[[2, 6, 0.7]]])
        >>> ScaleKeypoints()(Sample(det, meta)).data.keypoints.data.astype(float).round(2).tolist()
        [[[2.0, 2.0, 0.7]]]
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(self, *, clip: bool = True) -> None:
        if not isinstance(clip, (bool, np.bool_)):
            raise OptionError(f"clip: got {clip!r}, expected True or False")
        self.clip = bool(clip)

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        if not isinstance(data, Detections) or data.keypoints is None:
            raise InputError(
                "ScaleKeypoints: got detections without keypoints; put PoseDecode and Nms before it "
                "(Nms(multi_label=True) decodes again and drops them: use multi_label=False)"
            )
        sx, sy, tx, ty = meta.get("affine", (1.0, 1.0, 0.0, 0.0))
        det = ScaleBoxes(clip=self.clip).process(data, meta)
        kp = data.keypoints.data.astype(np.float64)
        kp[..., 0] = (kp[..., 0] - tx) / sx
        kp[..., 1] = (kp[..., 1] - ty) / sy
        if self.clip:
            h, w = det.image_shape or (np.inf, np.inf)
            kp[..., 0] = kp[..., 0].clip(0, w)
            kp[..., 1] = kp[..., 1].clip(0, h)
        return Detections(
            det.boxes, det.scores, det.classes, det.labels, det.image_shape, keypoints=Keypoints(kp, det.image_shape)
        )
