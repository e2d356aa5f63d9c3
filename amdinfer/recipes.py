"""One-call pipelines for common models: :func:`yolo` builds a YOLO detector the way Ultralytics predicts.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import yolov8
    >>> det = amdinfer.yolo(yolov8(image_size=64, num_classes=2), conf=0.25, providers=["CPUExecutionProvider"])
    >>> det(np.zeros((48, 80, 3), np.uint8)).image_shape
    (48, 80)
    >>> det.close()
"""

from __future__ import annotations

import ast
from typing import Any, cast

import onnx

from .errors import OptionError
from .model import ModelLike, ModelSource

__all__ = ["class_names", "yolo"]

_CHANNELS = ("RGB", "BGR")


def class_names(model: ModelLike) -> tuple[str, ...] | None:
    """Class names from the model's ONNX metadata ``names`` (what Ultralytics exports write:
    ``"{0: 'person', 1: 'bicycle', ...}"``), or ``None`` when there are none.

    Raises:
        ModelError: the model cannot be read.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = tiny_cnn()
        >>> _ = m.metadata_props.add(key="names", value="{0: 'cat', 1: 'dog'}")
        >>> class_names(m)
        ('cat', 'dog')
    """
    proto = model if isinstance(model, onnx.ModelProto) else ModelSource.from_any(model).proto
    raw = next((p.value for p in proto.metadata_props if p.key == "names"), None)
    if raw is None:
        return None
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, dict) and sorted(value) == list(range(len(value))):
        return tuple(str(value[k]) for k in range(len(value)))
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return None


def _stride(proto: onnx.ModelProto) -> int:
    raw = next((p.value for p in proto.metadata_props if p.key == "stride"), None)
    try:
        return int(float(raw)) if raw is not None else 32
    except ValueError:
        return 32


def yolo(
    model: ModelLike,
    *,
    conf: float = 0.25,
    iou: float = 0.7,
    max_det: int = 300,
    imgsz: int | tuple[int, int] = 640,
    channels: str = "RGB",
    agnostic: bool = False,
    classes: Any = None,
    fuse: bool = False,
    backend: str = "auto",
    **load_options: Any,
) -> Any:
    """A YOLO detector (v8/v5/v11 layouts) in one call, with Ultralytics' ``predict`` defaults and geometry.

    Builds ``LoadImage -> Letterbox -> [BgrToRgb] -> Normalize(1/255) -> HwcToChw -> YoloDecode -> Nms ->
    ScaleBoxes``, with Ultralytics' class-offset NMS (``Nms(class_offset=7680)``). The letterbox follows
    Ultralytics' rectangular inference: a model with a fixed input size gets exactly that size; a dynamic
    model gets ``Letterbox(imgsz, auto=True)`` (the smallest stride multiple around the image, stride from
    the ``stride`` metadata, else 32). Class names come from the
    model's ``names`` metadata.

    Args:
        model: the ONNX model (path, bytes, ``onnx.ModelProto``).
        conf: confidence threshold (strict ``>``).
        iou: NMS IoU threshold.
        max_det: most detections per image.
        imgsz: the inference size of a dynamic model (int or ``(height, width)``).
        channels: the channel order of the arrays you pass, ``"RGB"`` (amdinfer's and Pillow's decoders) or
            ``"BGR"`` (``cv2.imread``); paths are decoded in this order too. Never guessed: a BGR array
            passed as RGB changes the answers, so say which you have.
        agnostic: class-agnostic NMS.
        classes: keep only these class indices.
        fuse: compile it into one ONNX graph (:meth:`amdinfer.Pipeline.fuse`; geometry on the host).
        backend: :func:`amdinfer.load`'s backend.
        **load_options: other :func:`amdinfer.load` arguments (``providers=``, ``precision=``, ...).

    Returns:
        A :class:`~amdinfer.Pipeline` (or a :class:`~amdinfer.fuse.FusedPipeline` with ``fuse=True``) whose
        results are :class:`~amdinfer.results.Detections` in original-image pixels.

    Raises:
        OptionError: a bad argument.

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> det = yolo(yolov8(image_size=64, num_classes=2), providers=["CPUExecutionProvider"])
        >>> det.preprocess[1]
        Letterbox(new_shape=(64, 64))
        >>> det.close()
    """
    from ._load import load
    from .pipeline import Pipeline
    from .preprocess import _hw

    if channels not in _CHANNELS:
        raise OptionError(f"channels: got {channels!r}, expected one of {_CHANNELS}")
    size = _hw("imgsz", imgsz)
    engine = load(model, backend=backend, **load_options)
    try:
        preprocess, postprocess = _yolo_stages(engine, size, channels, conf, iou, max_det, agnostic, classes)
        pipe = Pipeline(preprocess=preprocess, engine=engine, postprocess=postprocess)
    except Exception:
        engine.close()
        raise
    pipe._owns_engine = True
    if not fuse:
        return pipe
    try:
        return pipe.fuse()
    finally:
        pipe.close()


def _yolo_stages(
    engine: Any,
    size: tuple[int, int],
    channels: str,
    conf: float,
    iou: float,
    max_det: int,
    agnostic: bool,
    classes: Any,
) -> tuple[list[Any], list[Any]]:
    """:func:`yolo`'s preprocessing and post-processing stages for ``engine``'s model."""
    from .postprocess import Nms, ScaleBoxes, YoloDecode
    from .preprocess import BgrToRgb, HwcToChw, Letterbox, LoadImage, Normalize

    proto = engine.model.proto
    (spec,) = engine.inputs
    dims = list(spec.shape)
    fixed = len(dims) == 4 and isinstance(dims[2], int) and isinstance(dims[3], int)
    letterbox = (
        Letterbox((cast(int, dims[2]), cast(int, dims[3])))
        if fixed
        else Letterbox(size, auto=True, stride=_stride(proto))
    )
    preprocess: list[Any] = [LoadImage(channels, backend="auto"), letterbox]
    if channels == "BGR":
        preprocess.append(BgrToRgb())
    preprocess += [Normalize(scale=1 / 255), HwcToChw()]
    if str(spec.dtype) == "float16":
        from .preprocess import Cast

        preprocess.append(Cast("float16"))
    postprocess = [
        YoloDecode(conf_threshold=conf, labels=class_names(proto)),
        Nms(iou_threshold=iou, max_det=max_det, agnostic=agnostic, classes=classes, class_offset=7680),
        ScaleBoxes(),
    ]
    return preprocess, postprocess
