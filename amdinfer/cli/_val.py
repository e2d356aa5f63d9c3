"""``amdinfer val``: a model's task metric on a labelled set: COCO box mAP of a detector, box and mask mAP of an
instance segmenter, box and keypoint (OKS) mAP of a pose model (pycocotools; YOLO layout or COCO json), mean IoU
and pixel accuracy of a semantic segmenter (label PNGs)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import ModelError, OptionError
from ._common import add_output_args, emit, engine_options, note, positive_int, warn
from ._predict import add_engine_group, guess_task

NAME = "val"
HELP = (
    "measure a model's task metric on a labelled set: COCO mAP50 and mAP50-95 (pycocotools) of boxes, masks "
    "(segment) or keypoints (pose) on an Ultralytics data.yaml with images/ and labels/ or a COCO json; mean IoU "
    "and pixel accuracy of a semantic segmenter on images/ with label PNGs"
)
TASKS = ("auto", "detect", "segment", "pose", "semantic")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to the model's .onnx file")
    p.add_argument(
        "data",
        help="a data.yaml (or the folder holding it, with images/ and labels/: Ultralytics' layout) or a COCO .json; "
        "semantic: a folder with images/ and labels/ holding one class-index PNG per image",
    )
    p.add_argument(
        "--task",
        choices=TASKS,
        default="auto",
        help="auto (default: the model's metadata or outputs), detect, segment (instance masks, Ultralytics' -seg), "
        "pose, or semantic (a class per pixel, amdinfer.segment)",
    )
    p.add_argument("--split", default="val", help="the data.yaml entry whose images are measured (default: val)")
    p.add_argument("--images", metavar="DIR", help="COCO json: the images' folder (default: images/ beside it)")
    p.add_argument("--batch-size", type=positive_int, help="images per engine call (default: auto)")
    g = p.add_argument_group("recipe")
    g.add_argument(
        "--conf", type=float, default=0.001, help="confidence threshold (default 0.001, as Ultralytics' val)"
    )
    g.add_argument("--iou", type=float, default=0.7, help="NMS IoU threshold (default 0.7)")
    g.add_argument("--imgsz", type=positive_int, help="letterbox size of a dynamic model (default 640)")
    g.add_argument(
        "--max-det",
        type=positive_int,
        default=300,
        help="boxes per image kept and counted (default 300, as Ultralytics)",
    )
    g.add_argument(
        "--ignore-index",
        type=int,
        default=255,
        help="semantic: the label value left out (default 255, the VOC convention; -1: none)",
    )
    add_engine_group(p)
    add_output_args(p)


def pick_task(model: Any, requested: str, data: str) -> str:
    """The task measured: ``requested`` unless ``"auto"``; else a semantic segmenter's metadata (``guess_task``'s
    ``segment``), the YOLO task of a YOLO model (:func:`amdinfer.tasks.detect_task`: ``detect``, ``segment``,
    ``pose``), and for a model that says nothing, ``semantic`` when ``data`` holds label PNGs, else ``detect``.

    Example:
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import unet, yolov8_pose
        >>> [pick_task(ModelSource.from_any(m), "auto", "x") for m in (unet(), yolov8_pose(image_size=64))]
        ['semantic', 'pose']
    """
    from ..tasks import detect_task

    if requested != "auto":
        return requested
    try:
        guessed = guess_task(model)
    except OptionError:
        return "semantic" if _has_label_pngs(Path(data)) else "detect"  # the recipe says if it is not a detector
    if guessed == "segment":  # guess_task's name for amdinfer.segment (a class per pixel)
        return "semantic"
    if guessed != "detect":
        raise OptionError(
            f"val: the model is a {guessed} model (metadata), expected a detector, an instance segmenter, a pose "
            "model or a semantic segmenter (--task)"
        )
    try:
        return detect_task(model.proto)
    except ModelError:
        return "detect"


def _has_label_pngs(data: Path) -> bool:
    root = data if data.is_dir() else data.parent
    labels = root / "labels"
    return labels.is_dir() and any(labels.rglob("*.png")) and not any(labels.rglob("*.txt"))


def run(args: argparse.Namespace) -> int:
    from ..model import ModelSource

    model = ModelSource.from_any(args.model)
    task = pick_task(model, args.task, args.data)
    common = {"backend": args.backend, "device": args.device, "precision": args.precision}
    common.update(engine_options(args, args.backend))
    enabled = False if args.quiet or args.json else None
    if task == "semantic":
        return _semantic(args, model, common, enabled)
    return _instances(args, model, task, common, enabled)


def _instances(args: argparse.Namespace, model: Any, task: str, common: dict[str, Any], enabled: Any) -> int:
    import amdinfer
    from amdinfer.metrics import detection_map, keypoint_map, load_detection_set, mask_map

    from ..recipes import class_names
    from ..tasks import kpt_shape

    shape = kpt_shape(model.proto) if task == "pose" else None
    try:
        dataset = load_detection_set(args.data, split=args.split, images=args.images, task=task, kpt_shape=None)
    except amdinfer.InputError as exc:
        if task != "pose" or shape is None or "kpt_shape" not in str(exc):
            raise
        dataset = load_detection_set(args.data, split=args.split, images=args.images, task=task, kpt_shape=shape)
    names = class_names(model.proto)
    if names is not None and tuple(names) != dataset.names:
        warn(args, f"the model's class names {list(names)[:5]}... differ from the set's {list(dataset.names)[:5]}...")
    options = {"conf": args.conf, "iou": args.iou, "max_det": args.max_det, "keep_image": False, "task": task}
    if args.imgsz is not None:
        options["imgsz"] = args.imgsz
    note(args, f"loading {Path(args.model).name} ({task}); {len(dataset)} images from {dataset.source}")
    pipe = amdinfer.yolo(model, **options, **common)
    measure: Any = {"detect": detection_map, "segment": mask_map, "pose": keypoint_map}[task]
    try:
        metrics: Any = measure(
            pipe, dataset, max_dets=args.max_det, batch_size=args.batch_size or "auto", progress=enabled
        )
    finally:
        pipe.close()
    timed = metrics if task == "detect" else metrics.box
    if task == "detect":
        tail = f"mAP50 {metrics.map50:.4f}  mAP50-95 {metrics.map50_95:.4f}"
    else:
        kind = "Mask" if task == "segment" else "Pose (OKS)"
        own = metrics.own
        tail = (f"Box mAP50 {metrics.box.map50:.4f}  mAP50-95 {metrics.box.map50_95:.4f}; {kind} mAP50 "
                f"{own.map50:.4f}  mAP50-95 {own.map50_95:.4f}")  # fmt: skip
    text = (
        f"{metrics.summary()}{_speed(timed.seconds, timed.images, timed.stages)}\n{tail}  "
        f"({timed.library}: COCO mAP, 101 recall points, area all, at most {args.max_det} boxes per image)"
    )
    emit(args, {"data": dataset.source, "model": args.model, **metrics.to_dict()}, text)
    return 0


def _semantic(args: argparse.Namespace, model: Any, common: dict[str, Any], enabled: Any) -> int:
    import amdinfer
    from amdinfer.metrics import load_semantic_set, segmentation_iou

    dataset = load_semantic_set(args.data, split=args.split)
    note(args, f"loading {Path(args.model).name} (semantic); {len(dataset)} images from {dataset.source}")
    seg = amdinfer.segment(model, keep_image=False, **common)
    ignore = None if args.ignore_index < 0 else args.ignore_index
    try:
        m = segmentation_iou(seg, dataset, ignore_index=ignore, batch_size=args.batch_size or "auto", progress=enabled)
    finally:
        seg.close()
    text = (
        f"{m.summary()}{_speed(m.seconds, m.images, m.stages)}\nmIoU {m.miou:.4f}  pixel accuracy "
        f"{m.pixel_accuracy:.4f}  mean accuracy {m.mean_accuracy:.4f}  (one confusion matrix over the set; "
        f"label {ignore} ignored)"
    )
    emit(args, {"data": dataset.source, "model": args.model, **m.to_dict()}, text)
    return 0


def _speed(seconds: float | None, images: int, stages: dict[str, float]) -> str:
    if not seconds:
        return ""
    ms = 1000 * seconds / max(images, 1)
    each = ", ".join(f"{stages[k]:.1f} ms {k}" for k in ("preprocess", "inference", "postprocess") if k in stages)
    rate = images / seconds
    return f"\nSpeed: {each + ' per image; ' if each else ''}{ms:.1f} ms per image in all ({rate:.1f} images/s)"
