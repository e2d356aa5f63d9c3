"""Instance segmentation stages: :class:`SegmentDecode` (YOLOv8/11-seg outputs to candidate boxes with mask
coefficients) and :class:`SegmentMasks` (boxes and masks in the original image, as Ultralytics predicts)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..postprocess import ScaleBoxes, _class_names, _names_for, _number, _output_name
from ..results import Detections, Masks
from ..results._masks import DeferredPolygons
from ..stages import Postprocessor
from . import _mask_ops

__all__ = ["SegmentDecode", "SegmentMasks", "decode_with_rows"]


def decode_with_rows(
    pred: np.ndarray, nc: int, conf_threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One item's ``(4 + nc + extra, A)`` output decoded as Ultralytics' ``non_max_suppression`` does before NMS
    (each anchor's best class, kept when its score is strictly above the threshold): ``boxes`` (xyxy),
    ``scores``, ``classes`` and the ``extra`` rows of each kept anchor (mask coefficients, keypoints).

    Example:
        >>> pred = np.zeros((7, 2), np.float32); pred[:, 1] = [10, 10, 4, 2, 0.9, 5, 6]
        >>> [a.tolist() for a in decode_with_rows(pred, 1, 0.25)]
        [[[8.0, 9.0, 12.0, 11.0]], [0.8999999761581421], [0], [[5.0, 6.0]]]
    """
    from ..reference import xywh2xyxy

    x = pred.T
    candidate = x[:, 4 : 4 + nc].max(axis=1, initial=-np.inf) > conf_threshold
    x = x[candidate]
    cls = x[:, 4 : 4 + nc]
    j = cls.argmax(axis=1) if nc else np.zeros(len(x), np.int64)
    scores = np.take_along_axis(cls, j[:, None], axis=1)[:, 0] if len(x) else np.zeros(0, pred.dtype)
    keep = scores > conf_threshold
    return xywh2xyxy(x[keep, :4]), scores[keep], j[keep].astype(np.int64), x[keep, 4 + nc :]


def _per_item(x: Any, rank: int, what: str) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        shown = f"array of {x.dtype}" if isinstance(x, np.ndarray) else type(x).__name__
        raise InputError(f"{what}: got {shown}, expected a floating-point model output")
    if x.ndim == rank + 1 and x.shape[0] == 1:
        x = x[0]
    if x.ndim != rank:
        raise InputError(f"{what}: got shape {x.shape}, expected {rank}-D per item")
    return x


def _seg_outputs(stage: Any, data: Any) -> tuple[np.ndarray, np.ndarray]:
    """The predictions ``(4 + nc + nm, A)`` and prototypes ``(nm, mh, mw)`` of one item."""
    if not isinstance(data, Mapping) or len(data) < 2:
        got = f"outputs {list(data)}" if isinstance(data, Mapping) else type(data).__name__
        raise InputError(
            f"SegmentDecode: got {got}, expected a segmentation model's two outputs (output0: boxes, scores and mask "
            "coefficients; output1: the prototypes); is this a detection model? (amdinfer.yolo(task='detect'))"
        )
    if stage.output is not None or stage.protos is not None:
        pred = data[stage.output] if stage.output is not None else None
        protos = data[stage.protos] if stage.protos is not None else None
    else:
        batched = any(np.ndim(v) == 4 for v in data.values())  # a leading batch axis of 1 kept
        pred = next((v for v in data.values() if np.ndim(v) == 2 + batched), None)
        protos = next((v for v in data.values() if np.ndim(v) == 3 + batched), None)
    if pred is None or protos is None:
        raise InputError(f"SegmentDecode: outputs {list(data)}: name them with output= and protos=")
    return _per_item(pred, 2, "SegmentDecode: predictions"), _per_item(protos, 3, "SegmentDecode: prototypes")


class SegmentDecode(Postprocessor):
    """Candidate :class:`~amdinfer.results.Detections` of a YOLOv8/11-seg model, each with its mask coefficients.

    The model's ``output0`` is ``(4 + nc + nm, A)`` (box ``cx, cy, w, h``, class scores, ``nm`` mask
    coefficients) and ``output1`` the prototypes ``(nm, H / 4, W / 4)``; ``nm`` comes from the prototypes. Each
    anchor keeps its best class when that scores strictly above ``conf_threshold`` (Ultralytics). The
    prototypes travel in the metadata (``"yolo_protos"``) to :class:`SegmentMasks`; put :class:`~amdinfer.
    postprocess.Nms` between them.

    Args:
        conf_threshold: minimum score, in ``[0, 1]``.
        labels: class names (a sequence or ``{index: name}``).
        output, protos: the names of the two outputs (``None``: told apart by rank).

    Raises:
        OptionError: a parameter has the wrong type or range.

    Example:
        >>> pred = np.zeros((4 + 1 + 2, 3), np.float32); pred[:, 0] = [8, 8, 8, 8, 0.9, 1.0, -1.0]
        >>> det = SegmentDecode()({"output0": pred, "output1": np.ones((2, 4, 4), np.float32)}).data
        >>> det.boxes.tolist(), det.coefficients.tolist()
        ([[4.0, 4.0, 12.0, 12.0]], [[1.0, -1.0]])
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(
        self,
        conf_threshold: float = 0.25,
        *,
        labels: Sequence[str] | dict[int, str] | None = None,
        output: str | None = None,
        protos: str | None = None,
    ) -> None:
        self.conf_threshold = _number("conf_threshold", conf_threshold, 0.0, 1.0)
        self.labels = _class_names(labels)
        self.output = _output_name(output)
        if protos is not None and not isinstance(protos, str):
            raise OptionError(f"protos: got {protos!r}, expected an output name or None")
        self.protos = protos

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        pred, protos = _seg_outputs(self, data)
        nm = protos.shape[0]
        nc = pred.shape[0] - 4 - nm
        if nc < 1:
            raise InputError(
                f"SegmentDecode: predictions of {pred.shape[0]} rows and {nm} prototypes leave {nc} classes, "
                "expected 4 + nc + nm rows with nc >= 1"
            )
        if self.labels is not None and len(self.labels) != nc:
            raise InputError(f"SegmentDecode: the model has {nc} classes, but labels has {len(self.labels)} names")
        boxes, scores, classes, coef = decode_with_rows(pred, nc, self.conf_threshold)
        meta["yolo_protos"] = protos
        meta["yolo"] = {"prediction": pred[: 4 + nc], "layout": "v8", "conf_threshold": self.conf_threshold}
        meta["yolo"]["labels"] = self.labels
        labels = _names_for(self, self.labels, classes)
        return Detections(boxes, scores, classes, labels, meta.get("input_shape"), coefficients=coef)


def _check_letterbox(meta: dict[str, Any], input_shape: tuple[int, int], orig: tuple[int, int]) -> None:
    """Masks are un-letterboxed from the two shapes, as Ultralytics does; refuse any other geometry."""
    top, left, bottom, right = _mask_ops.content_box(input_shape, orig)
    sx, sy, tx, ty = meta.get("affine", (1.0, 1.0, 0.0, 0.0))
    want = ((right - left) / orig[1], (bottom - top) / orig[0], left, top)
    if not np.allclose((sx, sy, tx, ty), want, rtol=1e-6, atol=1e-6):
        raise InputError(
            f"SegmentMasks: the preprocessing mapped the image by scale ({sx:.4g}, {sy:.4g}) and offset ({tx:.4g}, "
            f"{ty:.4g}); expected a centred Letterbox of {orig} into {input_shape} (scale ({want[0]:.4g}, "
            f"{want[1]:.4g}), offset ({left}, {top})): put Letterbox(center=True) in the preprocessing"
        )


class SegmentMasks(Postprocessor):
    """Boxes and instance masks in original-image pixels, after :class:`SegmentDecode` and ``Nms``.

    ``retina_masks=False`` (Ultralytics' default): Ultralytics' ``process_mask(upsample=True)`` at the model's
    input size (coefficients @ prototypes, bilinear upsampling, ``> 0`` (sigmoid ``> 0.5``), cropped to the
    box in input pixels), boxes whose mask is empty dropped (as its predictor does), then the letterbox removed
    and the mask resized (bilinear) to the image and ``> 0.5`` (what its ``plot`` and ``scale_masks`` do). The
    polygons (``masks.xy``) are the contours of the input-size masks mapped to the image, Ultralytics'
    ``Masks.xy``. ``retina_masks=True``: ``process_mask_native``, the masks made at the image's size and cropped
    to the boxes there; the polygons are their contours. Each mask is made inside its box's window only (the same
    numbers as the whole planes, :mod:`amdinfer.tasks._mask_ops`), the result's ``masks.data`` planes are filled
    from those windows when first read, and the polygons are found when ``masks.xy`` is first read.

    Args:
        retina_masks: make the masks at the image's size (Ultralytics' ``retina_masks=True``).
        polygons: ``masks.xy`` gives Ultralytics' polygons (found when first read; needs OpenCV); ``False``: the
            contours of the image-size masks.
        clip: clip the boxes to the image (as :class:`~amdinfer.postprocess.ScaleBoxes`).

    Raises:
        OptionError: a parameter is not a bool.

    Example:
        >>> from amdinfer.preprocess import Letterbox
        >>> from amdinfer.stages import Sample
        >>> meta = Letterbox(16)(np.zeros((8, 16, 3), np.uint8)).meta  # rows 4..11 of the 16x16 input
        >>> meta["yolo_protos"] = np.ones((1, 4, 4), np.float32)
        >>> det = Detections([[0, 4, 8, 12]], [0.9], [0], coefficients=[[1.0]])
        >>> out = SegmentMasks(polygons=False)(Sample(det, meta)).data
        >>> out.boxes.tolist(), out.masks.data.shape, out.masks.areas.tolist()
        ([[0.0, 0.0, 8.0, 8.0]], (1, 8, 16), [64])
    """

    output_type = Detections
    output_description = "a Detections"

    def __init__(self, *, retina_masks: bool = False, polygons: bool = True, clip: bool = True) -> None:
        for name, value in (("retina_masks", retina_masks), ("polygons", polygons), ("clip", clip)):
            if not isinstance(value, (bool, np.bool_)):
                raise OptionError(f"{name}: got {value!r}, expected True or False")
        self.retina_masks, self.polygons, self.clip = bool(retina_masks), bool(polygons), bool(clip)

    def process(self, data: Any, meta: dict[str, Any]) -> Detections:
        if not isinstance(data, Detections):
            raise InputError(f"SegmentMasks: got {type(data).__name__}, expected Detections (put SegmentDecode first)")
        protos = meta.get("yolo_protos")
        if protos is None or data.coefficients is None:
            raise InputError(
                "SegmentMasks: the detections carry no mask coefficients; put SegmentDecode and Nms before it "
                "(Nms(multi_label=True) decodes again and drops them: use multi_label=False)"
            )
        if "orig_shape" not in meta or "input_shape" not in meta:
            raise InputError(
                "SegmentMasks: the sample has no 'orig_shape'/'input_shape'; put Letterbox before the model"
            )
        orig, inp = tuple(meta["orig_shape"]), tuple(meta["input_shape"])
        _check_letterbox(meta, inp, orig)
        if self.retina_masks:
            det = ScaleBoxes(clip=self.clip).process(data, meta)
            full = _mask_ops.windows_native(protos, data.coefficients, det.boxes, orig)
            keep = _filled(full)
            det, full = det.select(keep), [full[i] for i in np.flatnonzero(keep)]
            contours, shape, box = full, orig, None
        else:
            at_input = _mask_ops.windows_at_input(protos, data.coefficients, data.boxes, inp)
            keep = _filled(at_input)
            data, at_input = data.select(keep), [at_input[i] for i in np.flatnonzero(keep)]
            det = ScaleBoxes(clip=self.clip).process(data, meta)
            full = _mask_ops.unletterbox_windows(at_input, inp, orig)
            contours, shape, box = at_input, inp, _mask_ops.content_box(inp, orig)
        polys = DeferredPolygons(functools.partial(_polygons, shape=shape, box=box, orig=orig), contours)
        masks = Masks.from_windows(full, orig, polys if self.polygons else None)
        return Detections(det.boxes, det.scores, det.classes, det.labels, orig, masks=masks, image=data.image)


def _filled(windows: list[Any]) -> np.ndarray:
    """``bool``: which of the windows hold a set pixel (Ultralytics drops the boxes whose mask is empty)."""
    return np.array([w is not None and bool(w[2].any()) for w in windows], bool)


def _polygons(
    windows: list[Any], shape: tuple[int, int], box: tuple[int, int, int, int] | None, orig: tuple[int, ...]
) -> list[np.ndarray]:
    """Contours of the masks (windows of planes of ``shape``) mapped to the image (from the letterbox ``box`` when
    given) and clipped to it, as Ultralytics' ``Masks.xy`` (``scale_coords``) does."""
    from ..results._masks import window_polygons

    h0, w0 = orig
    out = []
    for p in window_polygons(windows, shape):
        if box is not None:
            top, left, bottom, right = box
            p = (p - np.array([left, top], np.float32)) / np.array([(right - left) / w0, (bottom - top) / h0])
        out.append(np.clip(p, 0, np.array([w0, h0])).astype(np.float32))
    return out
