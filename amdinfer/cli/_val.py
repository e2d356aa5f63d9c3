"""``amdinfer val``: a detector's COCO mAP50 and mAP50-95 on a labelled set (YOLO layout or COCO json)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import OptionError
from ._common import add_output_args, emit, engine_options, note, positive_int, warn
from ._predict import add_engine_group, guess_task

NAME = "val"
HELP = (
    "measure a detector's mAP50 and mAP50-95 (pycocotools' COCO mAP) per class on a labelled set: an Ultralytics "
    "data.yaml with images/ and labels/, or a COCO json"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to the detector's .onnx file")
    p.add_argument(
        "data",
        help="a data.yaml (or the folder holding it, with images/ and labels/: Ultralytics' layout) or a COCO .json",
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
    add_engine_group(p)
    add_output_args(p)


def run(args: argparse.Namespace) -> int:
    import amdinfer
    from amdinfer.metrics import detection_map, load_detection_set

    from ..model import ModelSource
    from ..recipes import class_names

    dataset = load_detection_set(args.data, split=args.split, images=args.images)
    model = ModelSource.from_any(args.model)
    try:
        task = guess_task(model)
    except OptionError:
        task = "detect"  # a detector whose head cannot be told from its shapes: the recipe says if it is not one
    if task != "detect":
        raise OptionError(f"val: {Path(args.model).name} is a {task} model (metadata), expected a detector")
    names = class_names(model.proto)
    if names is not None and tuple(names) != dataset.names:
        warn(args, f"the model's class names {list(names)[:5]}... differ from the set's {list(dataset.names)[:5]}...")
    options = {"conf": args.conf, "iou": args.iou, "max_det": args.max_det, "keep_image": False}
    if args.imgsz is not None:
        options["imgsz"] = args.imgsz
    common = {"backend": args.backend, "device": args.device, "precision": args.precision}
    note(args, f"loading {Path(args.model).name}; {len(dataset)} images from {dataset.source}")
    pipe = amdinfer.yolo(model, **options, **common, **engine_options(args, args.backend))
    enabled = False if args.quiet or args.json else None
    try:
        metrics = detection_map(
            pipe, dataset, max_dets=args.max_det, batch_size=args.batch_size or "auto", progress=enabled
        )
    finally:
        pipe.close()
    speed = ""
    if metrics.seconds:
        ms = 1000 * metrics.seconds / max(metrics.images, 1)
        rate, stages = metrics.images_per_second, metrics.stages
        each = ", ".join(f"{stages[k]:.1f} ms {k}" for k in ("preprocess", "inference", "postprocess") if k in stages)
        speed = f"\nSpeed: {each + ' per image; ' if each else ''}{ms:.1f} ms per image in all ({rate:.1f} images/s)"
    text = (
        f"{metrics.summary()}{speed}\nmAP50 {metrics.map50:.4f}  mAP50-95 {metrics.map50_95:.4f}  "
        f"({metrics.library}: COCO mAP, 101 recall points, area all, at most {args.max_det} boxes per image)"
    )
    emit(args, {"data": dataset.source, "model": args.model, **metrics.to_dict()}, text)
    return 0
