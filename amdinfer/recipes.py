"""One-call pipelines for common models: :func:`yolo` builds a YOLO detector the way Ultralytics predicts,
:func:`classify` an image classifier (torchvision/timm or Ultralytics preprocessing, top-k with names).

Both pick the fast form by default (``fuse="auto"``): the fused graph (:meth:`amdinfer.Pipeline.fuse`) when
the engine runs on an accelerator (``engine.info.device`` is not the CPU), stage by stage on the CPU, where
the stages are the reference and as fast. ``fuse=True``/``False`` force one form; both give the same answers.

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

from .errors import ModelError, OptionError
from .model import ModelLike, ModelSource

__all__ = ["class_names", "classify", "yolo"]

_CHANNELS = ("RGB", "BGR")


def _check_fuse(fuse: Any) -> None:
    if fuse is not True and fuse is not False and not (isinstance(fuse, str) and fuse == "auto"):
        raise OptionError(f"fuse: got {fuse!r}, expected True, False or 'auto'")


def _finish(pipe: Any, fuse: bool | str, load_options: dict[str, Any]) -> Any:
    """The recipe's result: ``pipe`` itself (stage by stage) or its fused form (``pipe`` closed)."""
    pipe._owns_engine = True
    pipe._load_options = dict(load_options)  # the fused engine is loaded with the caller's options too
    device = str(pipe.engine.info.device).split(":")[0]
    if fuse is False or (fuse == "auto" and device == "cpu"):
        return pipe
    try:
        return pipe.fuse()
    except OptionError as exc:
        if fuse != "auto":
            raise
        raise OptionError(f"{exc} (fuse='auto' fuses on {device}; fuse=False runs stage by stage)") from exc
    finally:
        pipe.close()


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


_DECODER_CHOICES = ("auto", "opencv", "pillow", "nvjpeg")


def _decoder(choice: str = "auto") -> str:
    """The recipes' image decoder (``LoadImage``'s backend): for ``"auto"``, OpenCV when installed (what
    Ultralytics decodes with; on the H200 host's 16 cores 1,292 JPEG pages/s against Pillow's 496), else Pillow;
    otherwise the one named (``"nvjpeg"``: JPEG files on the GPU)."""
    from .preprocess import opencv_available

    if choice not in _DECODER_CHOICES:
        raise OptionError(f"decoder: got {choice!r}, expected one of {_DECODER_CHOICES}")
    if choice != "auto":
        return choice
    return "opencv" if opencv_available() else "auto"


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
    decoder: str = "auto",
    keep_image: bool = True,
    calibration: Any = None,
    backend: str = "auto",
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
        conf: confidence threshold (strict ``>``).
        iou: NMS IoU threshold.
        max_det: most detections per image.
        imgsz: the inference size of a dynamic model (int or ``(height, width)``).
        channels: the channel order of the arrays you pass, ``"RGB"`` (amdinfer's and Pillow's decoders) or
            ``"BGR"`` (``cv2.imread``); paths are decoded in this order too. Never guessed: a BGR array
            passed as RGB changes the answers, so say which you have.
        agnostic: class-agnostic NMS.
        classes: keep only these class indices.
        fuse: ``"auto"`` (the default): compiled into one ONNX graph (:meth:`amdinfer.Pipeline.fuse`, the
            letterbox on the host, NMS in the graph) when the engine runs on an accelerator, stage by stage on
            the CPU (the reference, and as fast there); ``True``/``False`` force one form. Same detections.
        decoder: how paths and encoded bytes are decoded: ``"auto"`` (OpenCV when installed, else Pillow),
            ``"opencv"``, ``"pillow"``, or ``"nvjpeg"`` (JPEG files on the NVIDIA GPU, then geometry on the host;
            see :class:`~amdinfer.preprocess.LoadImage`).
        keep_image: results keep the picture they answer (``result.image``: the decoded image, or your array,
            not a copy), for ``plot()``/``save()``; ``False`` for bulk runs that hold many results (Ray).
        calibration: with ``precision="int8"``: images (``(H, W, 3)`` uint8 arrays in ``channels`` order, paths,
            anything ``LoadImage`` reads) that this recipe's own preprocessing (the letterbox, ``/ 255``, CHW) turns
            into calibration samples for an :class:`~amdinfer.quantize.Int8Quantizer` with its defaults (on a
            YOLO, the decode head kept in float: ``docs/quantization.md#int8-on-detectors``). For other int8
            settings pass ``quantizer=`` instead (not both).
        backend: :func:`amdinfer.load`'s backend.
        **load_options: other :func:`amdinfer.load` arguments (``providers=``, ``precision=``, ...), fused too.

    Returns:
        A :class:`~amdinfer.Pipeline`, or its :class:`~amdinfer.pipeline.fuse.FusedPipeline` when fused, whose results
        are :class:`~amdinfer.results.Detections` in original-image pixels. Calling it with one image (array,
        Pillow image, path, bytes) gives one result; with a list, a glob (``"pages/*.png"``) or a folder (its
        files with an image suffix, sorted; not its subfolders) a list of results in order.

    Raises:
        OptionError: a bad argument (``calibration`` without ``precision="int8"``, or with ``quantizer=``).
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
    from .preprocess import _hw

    size, backend_of_decoder = _hw("imgsz", imgsz), _decoder(decoder)

    def stages(engine: Any, _: Any, channels: str) -> tuple[list[Any], list[Any]]:
        return _yolo_stages(engine, size, channels, conf, iou, max_det, agnostic, classes, backend_of_decoder)

    args = {"keep_image": keep_image, "calibration": calibration}
    return _recipe(model, stages, args, channels, fuse, backend, load_options)


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
    preprocess: list[Any] = [LoadImage(channels, backend=decoder), letterbox]
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


#: torchvision's ImageNet recipe (ResNet-50 V1 weights' ``transforms()``; timm's default ``crop_pct``): the
#: shorter side to ``crop / 0.875`` (256 for 224), the centre ``crop``, ImageNet mean and std.
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_CROP_PCT = 0.875
#: Nodes that pass a tensor's values through unchanged (a Softmax before them still ends the model).
_PASS_THROUGH = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast")


def classify(
    model: ModelLike,
    *,
    size: int | tuple[int, int] | None = None,
    crop: int | tuple[int, int] | None = None,
    mean: Any = None,
    std: Any = None,
    topk: int = 5,
    labels: Any = None,
    channels: str = "RGB",
    softmax: bool | None = None,
    fuse: bool | str = "auto",
    decoder: str = "auto",
    keep_image: bool = True,
    calibration: Any = None,
    backend: str = "auto",
    **load_options: Any,
) -> Any:
    """An image classifier in one call: ``LoadImage -> Resize(size) -> CenterCrop(crop) -> [BgrToRgb] ->
    Normalize(mean, std, 1/255) -> HwcToChw -> model -> [Softmax] -> TopK(topk)`` with class names.

    Each parameter comes from the argument, else the model, else torchvision's ImageNet recipe:

    * ``crop``: the model's input ``(H, W)`` when fixed (a different ``crop=`` is an error), else the ONNX
      metadata ``imgsz`` (Ultralytics), else 224.
    * ``size`` (the shorter side after resizing): Ultralytics classify exports (metadata ``task`` =
      ``classify``, ``author`` Ultralytics) resize to the crop (their crop fraction 1.0); metadata
      ``crop_pct`` (timm's name) gives ``floor(max(crop) / crop_pct)``; else ``floor(max(crop) / 0.875)``
      (256 for 224, torchvision's ResNet recipe).
    * ``mean``/``std`` (fractions of 255, torchvision's convention): metadata ``mean``/``std`` (a list, e.g.
      ``"[0.485, 0.456, 0.406]"``); Ultralytics exports: none (pixels / 255, as Ultralytics trains them);
      else ImageNet's. torchvision and timm exports write no metadata: their models get the ImageNet recipe,
      which is what their pretrained weights use; pass the values for a model trained otherwise.
    * ``labels``: the argument (a sequence or ``{index: name}``), else metadata ``names`` (:func:`class_names`).

    The model's output is read as logits, and ``Softmax`` turns them into probabilities, unless the graph
    already ends in a ``Softmax`` node (Ultralytics classify exports do; torchvision and timm end in the
    logits): ``softmax=None`` decides so, ``True``/``False`` force it.

    Args:
        model: the ONNX model (path, bytes, ``onnx.ModelProto``): one image input ``(N, 3, H, W)`` (or
            ``(N, H, W, 3)``), one output ``(N, classes)``.
        size: the shorter side to resize to (int), or an exact ``(height, width)``.
        crop: the centre crop ``(height, width)`` (an int for a square).
        mean, std: per-channel normalisation in fractions of 255 (one number or three).
        topk: how many classes each result keeps (all of them when the model has fewer, as Ultralytics' ``top5``).
        labels: class names.
        channels: the channel order of the arrays you pass, ``"RGB"`` or ``"BGR"`` (``cv2.imread``); the model gets RGB.
        softmax: see above.
        fuse: ``"auto"``, ``True`` or ``False`` as for :func:`yolo` (fused on an accelerator); the same top-k.
        decoder: ``"auto"``, ``"opencv"``, ``"pillow"`` or ``"nvjpeg"`` (see :func:`yolo`).
        keep_image: results keep the picture they answer (see :func:`yolo`).
        calibration: with ``precision="int8"``: images that this recipe's preprocessing turns into int8
            calibration samples (resized, cropped, normalised; see :func:`yolo`).
        backend: :func:`amdinfer.load`'s backend.
        **load_options: other :func:`amdinfer.load` arguments (``providers=``, ``precision=``, ...).

    Returns:
        A :class:`~amdinfer.Pipeline` (or its :class:`~amdinfer.pipeline.fuse.FusedPipeline`) whose results are
        :class:`~amdinfer.results.Classification` (indices, scores, labels; best first); it takes one image or
        a list, glob or folder of them as :func:`yolo`'s does.

    Raises:
        OptionError: a bad argument (``calibration`` as for :func:`yolo`), or a model that is not a one-input,
            one-output classifier.
        ModelError: the model's ``mean``/``std`` metadata is not a list of numbers or is out of range.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = tiny_cnn(num_classes=3)
        >>> _ = m.metadata_props.add(key="names", value="{0: 'cat', 1: 'dog', 2: 'fox'}")
        >>> clf = classify(m, topk=2, providers=["CPUExecutionProvider"])
        >>> clf.preprocess[1:3]
        (Resize(size=36), CenterCrop(size=(32, 32)))
        >>> result = clf(np.full((40, 60, 3), 128, np.uint8))
        >>> len(result.labels), bool(abs(result.scores.sum() - 1) < 1) and result.labels[0] in ("cat", "dog", "fox")
        (2, True)
        >>> clf.close()
    """
    _check_softmax(softmax)
    args = {"size": size, "crop": crop, "mean": mean, "std": std, "labels": labels, "softmax": softmax, "topk": topk}
    args["decoder"], args["keep_image"], args["calibration"] = _decoder(decoder), keep_image, calibration
    return _recipe(model, _classify_stages, args, channels, fuse, backend, load_options)


def _check_softmax(softmax: Any) -> None:
    if softmax is not None and not isinstance(softmax, bool):
        raise OptionError(f"softmax: got {softmax!r}, expected None (decide from the model), True or False")


def _recipe(
    model: ModelLike, stages: Any, args: dict[str, Any], channels: str, fuse: Any, backend: str, load: dict[str, Any]
) -> Any:
    """Load ``model``, build the pipeline of ``stages(engine, args, channels)``, fuse it when asked."""
    from ._load import load as load_model
    from .pipeline import Pipeline
    from .pipeline._source_images import check_keep

    if channels not in _CHANNELS:
        raise OptionError(f"channels: got {channels!r}, expected one of {_CHANNELS}")
    _check_fuse(fuse)
    keep = check_keep(args["keep_image"])
    from .quantize._data import check_calibration

    if check_calibration(args["calibration"], load):
        model = ModelSource.from_any(model)  # read once: the calibration's stages and the engine share it
        load = {**load, "quantizer": _calibrated(model, stages, args, channels)}
    engine = load_model(model, backend=backend, **load)
    try:
        preprocess, postprocess = stages(engine, args, channels)
        pipe = Pipeline(preprocess=preprocess, engine=engine, postprocess=postprocess, keep_image=keep)
    except Exception:
        engine.close()
        raise
    return _finish(pipe, fuse, load)


def _calibrated(source: ModelSource, stages: Any, args: dict[str, Any], channels: str) -> Any:
    """An :class:`~amdinfer.quantize.Int8Quantizer` on ``args["calibration"]`` run through the recipe's own
    preprocessing (built for the float model's inputs, which int8 keeps)."""
    from types import SimpleNamespace

    from .quantize import Int8Quantizer
    from .quantize._data import materialize
    from .stages import Sample

    spec = SimpleNamespace(model=source, inputs=source.inputs, outputs=source.outputs)
    preprocess, _ = stages(spec, args, channels)
    samples = materialize(args["calibration"], what="calibration", preprocess=[Sample.wrap, *preprocess])
    return Int8Quantizer(calibration=samples, progress=False)


def _classify_stages(engine: Any, args: dict[str, Any], channels: str) -> tuple[list[Any], list[Any]]:
    """:func:`classify`'s stages for ``engine``'s model (``args``: the recipe's optional arguments)."""
    from .postprocess import Softmax, TopK
    from .preprocess import BgrToRgb, Cast, CenterCrop, HwcToChw, LoadImage, Normalize, Resize

    proto = engine.model.proto
    meta = {p.key: p.value for p in proto.metadata_props}
    spec, nhwc, fixed = _image_input(engine)
    crop = _crop(args["crop"], fixed, meta)
    ultralytics = meta.get("task") == "classify" and "ultralytics" in meta.get("author", "").lower()
    size = _resize_size(args["size"], crop, meta, ultralytics)
    imagenet = (None, None) if ultralytics else (_IMAGENET_MEAN, _IMAGENET_STD)
    mean = _fractions("mean", args["mean"], meta, imagenet[0])
    std = _fractions("std", args["std"], meta, imagenet[1])
    preprocess: list[Any] = [LoadImage(channels, backend=args["decoder"]), Resize(size), CenterCrop(crop)]
    if channels == "BGR":
        preprocess.append(BgrToRgb())
    preprocess.append(Normalize(mean=mean, std=std, scale=1 / 255))
    preprocess += [] if nhwc else [HwcToChw()]
    if str(spec.dtype) == "float16":
        preprocess.append(Cast("float16"))
    classes = _classes(engine)
    labels = class_names(proto) if args["labels"] is None else args["labels"]
    if labels is not None and classes is not None and len(labels) != classes:
        raise OptionError(f"labels: got {len(labels)} names, expected {classes} (the model's output has {classes})")
    topk = args["topk"]
    if classes is not None and isinstance(topk, int) and not isinstance(topk, bool) and topk > classes:
        topk = classes  # as Ultralytics' top5: a model with fewer classes gives them all
    softmax = args["softmax"] if args["softmax"] is not None else not _ends_in_softmax(proto)
    return preprocess, ([Softmax()] if softmax else []) + [TopK(topk, labels=labels)]


def _image_input(engine: Any) -> tuple[Any, bool, tuple[int, int] | None]:
    """The model's image input, whether it is NHWC, and its fixed ``(H, W)`` (``None`` when dynamic)."""
    if len(engine.inputs) != 1 or len(engine.outputs) != 1:
        raise OptionError(
            f"model: got inputs {[s.name for s in engine.inputs]} and outputs {[s.name for s in engine.outputs]}, "
            "expected one image input and one (N, classes) output"
        )
    (spec,) = engine.inputs
    dims = list(spec.shape)
    if len(dims) != 4:
        raise OptionError(f"input {spec.name!r}: got shape {tuple(dims)}, expected (N, 3, H, W) or (N, H, W, 3)")
    nhwc = dims[3] == 3 and dims[1] != 3
    channel = dims[3] if nhwc else dims[1]
    if isinstance(channel, int) and channel != 3:
        raise OptionError(f"input {spec.name!r}: got shape {tuple(dims)}, expected 3 channels (N, 3, H, W)")
    h, w = (dims[1], dims[2]) if nhwc else (dims[2], dims[3])
    return spec, nhwc, (h, w) if isinstance(h, int) and isinstance(w, int) else None


def _crop(crop: Any, fixed: tuple[int, int] | None, meta: dict[str, str]) -> tuple[int, int]:
    from .preprocess import _hw

    if crop is not None:
        hw = _hw("crop", crop)
        if fixed is not None and hw != fixed:
            raise OptionError(f"crop: got {hw}, expected the model's fixed input size {fixed} (or None)")
        return hw
    if fixed is not None:
        return fixed
    raw = _literal(meta.get("imgsz"))
    if isinstance(raw, int) or (isinstance(raw, (list, tuple)) and len(raw) in (1, 2)):
        return _hw("metadata imgsz", raw if isinstance(raw, int) else tuple(raw) * (3 - len(raw)))
    return (224, 224)


def _resize_size(size: Any, crop: tuple[int, int], meta: dict[str, str], ultralytics: bool) -> int | tuple[int, int]:
    from .preprocess import _hw

    if size is None:
        pct = _literal(meta.get("crop_pct"))
        ratio = 1.0 if ultralytics else float(pct) if isinstance(pct, (int, float)) and 0 < pct <= 1 else _CROP_PCT
        return int(max(crop) / ratio)
    hw = _hw("size", size)
    if isinstance(size, int):
        if size < max(crop):
            raise OptionError(f"size: got {size}, expected at least {max(crop)} (the crop {crop} must fit)")
        return size
    if hw[0] < crop[0] or hw[1] < crop[1]:
        raise OptionError(f"size: got {hw}, expected at least the crop {crop} on both sides")
    return hw


def _fractions(name: str, value: Any, meta: dict[str, str], default: Any) -> Any:
    """``mean``/``std`` from the argument, else the metadata, else ``default``; fractions of 255."""
    source = name
    if value is None and name in meta:
        value, source = _literal(meta[name]), f"metadata {name}"
        if value is None:
            raise ModelError(f"{source}: got {meta[name]!r}, expected a list of numbers such as [0.485, 0.456, 0.406]")
    if value is None:
        return default
    values = [value] if isinstance(value, (int, float)) else value
    try:
        numbers = [float(v) for v in values]
    except (TypeError, ValueError):
        error = OptionError if source == name else ModelError
        raise error(f"{source}: got {value!r}, expected one number or three (fractions of 255)") from None
    low = 0.0 if name == "mean" else 1e-6
    if len(numbers) not in (1, 3) or not all(low <= v <= 1 for v in numbers):
        raise (OptionError if source == name else ModelError)(
            f"{source}: got {value!r}, expected one or three numbers in [{low:g}, 1]: fractions of 255, "
            "torchvision's convention (0.485, not 123.675)"
        )
    return tuple(numbers)


def _literal(raw: str | None) -> Any:
    try:
        return None if raw is None else ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None


def _classes(engine: Any) -> int | None:
    (out,) = engine.outputs
    dims = list(out.shape)
    if len(dims) != 2:
        raise OptionError(f"output {out.name!r}: got shape {tuple(dims)}, expected (N, classes)")
    return dims[1] if isinstance(dims[1], int) else None


def _ends_in_softmax(proto: onnx.ModelProto) -> bool:
    """Whether the (one) output is a ``Softmax``'s, through nodes that pass values on unchanged."""
    producers = {o: n for n in proto.graph.node for o in n.output}
    node = producers.get(proto.graph.output[0].name)
    while node is not None and node.op_type in _PASS_THROUGH and node.input:
        node = producers.get(node.input[0])
    return node is not None and node.op_type == "Softmax"
