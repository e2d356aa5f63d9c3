"""The classification recipe: :func:`classify` builds an image classifier (torchvision/timm or Ultralytics
preprocessing, top-k with names)."""

from __future__ import annotations

from typing import Any

import onnx

from ..errors import ModelError, OptionError
from ..model import ModelLike
from ._build import _decoder, _literal, _recipe, class_names

__all__ = ["classify"]

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
    geometry: str = "auto",
    dynamic_batch: bool | str = "auto",
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
        topk, labels: how many classes each result keeps (all when the model has fewer, as ``top5``); class names.
        channels: the channel order of the arrays you pass, ``"RGB"`` or ``"BGR"`` (``cv2.imread``); the model gets RGB.
        softmax: see above.
        fuse, geometry, dynamic_batch: as for :func:`yolo` (on an accelerator: fused, equal frames' geometry in
            the graph, a batch-1 export's batch made dynamic when proven); same top-k.
        decoder: ``"auto"``, ``"opencv"``, ``"pillow"`` or ``"nvjpeg"`` (see :func:`yolo`).
        keep_image: results keep the picture they answer (see :func:`yolo`).
        calibration: with ``precision="int8"``: images that this recipe's preprocessing turns into int8
            calibration samples (resized, cropped, normalised; see :func:`yolo`).
        backend, **load_options: :func:`amdinfer.load`'s backend and other arguments (``providers=``, ``precision=``).

    Returns:
        A :class:`~amdinfer.Pipeline` (or its :class:`~amdinfer.pipeline.fuse.FusedPipeline`) whose results are
        :class:`~amdinfer.results.Classification` (indices, scores, labels; best first); it takes one image or
        a list, glob or folder of them as :func:`yolo`'s does.

    Raises:
        OptionError: a bad argument (``calibration`` as for :func:`yolo`), or not a one-input, one-output classifier.
        ModelError: the ``mean``/``std`` metadata is not a list of numbers in range; see :func:`yolo`.

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
    args.update(decoder=_decoder(decoder), keep_image=keep_image, calibration=calibration, geometry=geometry)
    args.update(dynamic_batch=dynamic_batch)
    return _recipe(model, _classify_stages, args, channels, fuse, backend, load_options)


def _check_softmax(softmax: Any) -> None:
    if softmax is not None and not isinstance(softmax, bool):
        raise OptionError(f"softmax: got {softmax!r}, expected None (decide from the model), True or False")


def _classify_stages(engine: Any, args: dict[str, Any], channels: str) -> tuple[list[Any], list[Any]]:
    """:func:`classify`'s stages for ``engine``'s model (``args``: the recipe's optional arguments)."""
    from ..postprocess import Softmax, TopK
    from ..preprocess import BgrToRgb, Cast, CenterCrop, HwcToChw, LoadImage, Normalize, Resize

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
    from ..preprocess import _hw

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
    from ..preprocess import _hw

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
