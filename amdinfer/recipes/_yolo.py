"""The YOLO recipe: :func:`yolo` builds a detector the way Ultralytics predicts."""

from __future__ import annotations

from typing import Any, cast

import onnx

from ..model import ModelLike
from ._build import _decoder, _recipe, _sliced, _slicing, class_names
from ._yolo_tasks import resolve_task

__all__ = ["yolo"]


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
    fuse: bool | str = "auto",
    geometry: str = "auto",
    dynamic_batch: bool | str = "auto",
    decoder: str = "auto",
    keep_image: bool = True,
    calibration: Any = None,
    tiles: Any = None,
    tile_overlap: float | tuple[float, float] = 0.2,
    tile_merge: Any = "GREEDYNMM",
    backend: str = "auto",
    task: str = "auto",
    retina_masks: bool = False,
    **load_options: Any,
) -> Any:
    """A YOLO detector (v8/v5/v11 layouts) in one call, with Ultralytics' ``predict`` defaults and geometry.

    Builds ``LoadImage -> Letterbox -> [BgrToRgb] -> Normalize(1/255) -> HwcToChw -> YoloDecode -> Nms ->
    ScaleBoxes``, with Ultralytics' class-offset NMS (``Nms(class_offset=7680)``). The letterbox follows
    Ultralytics' rectangular inference: a model with a fixed input size gets exactly that size; a dynamic
    model gets ``Letterbox(imgsz, auto=True)`` (the smallest stride multiple around the image, stride from
    the ``stride`` metadata, else 32). Class names come from the model's ``names`` metadata.

    Args:
        model: the ONNX model (path, bytes, ``onnx.ModelProto``).
        conf, iou, max_det: the confidence threshold (strict ``>``), NMS IoU threshold, most detections per image.
        imgsz: the inference size of a dynamic model (int or ``(height, width)``).
        channels: the channel order of the arrays you pass, ``"RGB"`` (amdinfer's and Pillow's decoders) or
            ``"BGR"`` (``cv2.imread``); paths are decoded in this order too. Never guessed: a BGR array
            passed as RGB changes the answers, so say which you have.
        agnostic, classes: class-agnostic NMS; keep only these class indices.
        fuse: ``"auto"`` (the default): compiled into one ONNX graph (:meth:`amdinfer.Pipeline.fuse`, the
            letterbox on the host, NMS in the graph) when the engine runs on an accelerator, stage by stage on
            the CPU (the reference, and as fast there); ``True``/``False`` force one form. Same detections.
        geometry: ``"auto"`` (equal frames letterboxed in the graph on an accelerator: docs/pipeline.md), ``"host"``,
            ``"graph"``; same detections (the resize is OpenCV's in both). See :mod:`amdinfer.recipes._frames`.
        dynamic_batch: ``"auto"``: a batch-1 export gets a dynamic batch on an accelerator when proven, kept on the CPU
            (docs/pipeline.md, ``engine.info.settings["dynamic_batch"]``); ``True``: on any device; ``False``: never.
        decoder: how paths and bytes are decoded: ``"auto"`` (OpenCV when installed, else Pillow), ``"opencv"``,
            ``"pillow"``, or ``"nvjpeg"`` (JPEG on the NVIDIA GPU; see :class:`~amdinfer.preprocess.LoadImage`).
        keep_image: results keep the picture they answer (``result.image``, not a copy: ``plot()``); ``False``: not.
        calibration: with ``precision="int8"``: images (``(H, W, 3)`` uint8 arrays in ``channels`` order, paths,
            anything ``LoadImage`` reads) that this recipe's own preprocessing (the letterbox, ``/ 255``, CHW) turns
            into calibration samples for an :class:`~amdinfer.quantize.Int8Quantizer` with its defaults (on a
            YOLO, the decode head kept in float: ``docs/quantization.md#int8-on-detectors``). For other int8
            settings pass ``quantizer=`` instead (not both).
        backend, **load_options: :func:`amdinfer.load`'s backend and other arguments (``providers=``, ...), fused too.
        tiles: sliced inference for large images (SAHI's): ``(height, width)`` (or an int) of overlapping tiles, each
            answered by the detector, plus the whole image, merged back in original pixels; or a
            :class:`~amdinfer.pipeline.Tiles` (``perform_standard_pred=False`` and other settings). ``None``: the
            whole image only. See docs/pipeline.md, "Sliced inference (large images)".
        tile_overlap: the tiles' overlap, a fraction of the tile (one for both axes, or ``(height, width)``).
        tile_merge: ``"GREEDYNMM"`` (SAHI's default: IOS 0.5, per class unless ``agnostic``), ``"NMS"``, or a
            :class:`~amdinfer.pipeline.MergeTiles` with other settings.
        task, retina_masks: ``"auto"`` (:func:`amdinfer.tasks.detect_task`), ``"detect"``, ``"segment"`` (``masks``,
            made at the image's size with ``retina_masks``) or ``"pose"`` (``keypoints``): docs/pipeline.md.

    Returns:
        A :class:`~amdinfer.Pipeline`, or its :class:`~amdinfer.pipeline.fuse.FusedPipeline` when fused (with
        ``tiles``: a :class:`~amdinfer.pipeline.SlicedPipeline` around it), whose results
        are :class:`~amdinfer.results.Detections` in original-image pixels. Calling it with one image (array,
        Pillow image, path, bytes) gives one result; with a list, a glob (``"pages/*.png"``) or a folder (its
        files with an image suffix, sorted; not its subfolders) a list of results in order.

    Raises:
        OptionError: a bad argument (``calibration`` without ``precision="int8"``, or with ``quantizer=``).
        ModelError: ``dynamic_batch=True`` and the model's batch cannot be made dynamic (the proof's reason).
        StageError: the preprocessing failed on a calibration image (the message names it).

    Example:
        >>> from amdinfer.testing.models import yolov8
        >>> det = yolo(yolov8(image_size=64, num_classes=2), providers=["CPUExecutionProvider"])
        >>> det.preprocess[1]
        Letterbox(new_shape=(64, 64))
        >>> det.close()
        >>> import numpy as np
        >>> pages = [np.full((48, 80, 3), v, np.uint8) for v in (0, 128, 255)]
        >>> det = yolo(yolov8(image_size=64, num_classes=2), precision="int8", calibration=pages, providers=["cpu"])
        >>> det.engine.info.precision, any("YOLO v8 head" in n for n in det.engine.info.notes)
        ('int8', True)
        >>> det.close()
    """
    from ..preprocess import _hw

    size, backend_of_decoder = _hw("imgsz", imgsz), _decoder(decoder)
    slicing = _slicing(tiles, tile_overlap, tile_merge, agnostic)
    model, post, fuse = resolve_task(model, task, fuse, retina_masks, tiles)

    def stages(engine: Any, _: Any, channels: str) -> tuple[list[Any], list[Any]]:
        return _yolo_stages(engine, size, channels, conf, iou, max_det, agnostic, classes, backend_of_decoder, post)

    args = {"keep_image": keep_image, "calibration": calibration, "geometry": geometry, "dynamic_batch": dynamic_batch}
    return _sliced(_recipe(model, stages, args, channels, fuse, backend, load_options), slicing)


def _yolo_stages(
    engine: Any,
    size: tuple[int, int],
    channels: str,
    conf: float,
    iou: float,
    max_det: int,
    agnostic: bool,
    classes: Any,
    decoder: str,
    post: dict[str, Any] | None = None,
) -> tuple[list[Any], list[Any]]:
    """:func:`yolo`'s preprocessing and post-processing stages for ``engine``'s model."""
    from ..postprocess import Nms, ScaleBoxes, YoloDecode
    from ..preprocess import BgrToRgb, HwcToChw, Letterbox, LoadImage, Normalize

    proto = engine.model.proto
    (spec,) = engine.inputs
    dims = list(spec.shape)
    fixed = len(dims) == 4 and isinstance(dims[2], int) and isinstance(dims[3], int)
    letterbox = (
        Letterbox((cast(int, dims[2]), cast(int, dims[3])))
        if fixed
        else Letterbox(size, auto=True, stride=_stride(proto))
    )
    preprocess: list[Any] = [LoadImage(channels, backend=decoder), letterbox]
    if channels == "BGR":
        preprocess.append(BgrToRgb())
    preprocess += [Normalize(scale=1 / 255), HwcToChw()]
    if str(spec.dtype) == "float16":
        from ..preprocess import Cast

        preprocess.append(Cast("float16"))
    postprocess = [
        YoloDecode(conf_threshold=conf, labels=class_names(proto)),
        Nms(iou_threshold=iou, max_det=max_det, agnostic=agnostic, classes=classes, class_offset=7680),
        ScaleBoxes(),
    ]
    if post is not None and post["heads"] != "detect":  # a segmentation or pose model, whatever the task asked
        from ._yolo_tasks import task_postprocess

        postprocess = task_postprocess(post, proto, conf, postprocess[1], class_names(proto))
    return preprocess, postprocess
