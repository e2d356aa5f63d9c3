"""``amdinfer predict``: a recipe over files, a folder, a glob or a video; annotated pictures, JSON, CSV, labels."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError, OptionError
from ._common import add_cache_args, add_engine_args, add_output_args, emit, engine_options, note, positive_int
from ._predict_out import PredictOutputs

NAME = "predict"
HELP = (
    "run a recipe (detect, classify, ocr, embed, segment) on an image, a folder, a glob or a video: annotated "
    "pictures, one JSON and one CSV of all results, YOLO label files"
)

TASKS = ("detect", "classify", "ocr", "embed", "segment")
#: The suffixes (lower case) read as videos through OpenCV.
VIDEO_SUFFIXES = (".avi", ".m4v", ".mkv", ".mov", ".mp4", ".mpeg", ".mpg", ".webm", ".wmv")
#: The options that belong to one task (argparse dest -> task); given with another task they are refused.
_TASK_OPTIONS = {
    "conf": "detect",
    "iou": "detect",
    "imgsz": "detect",
    "max_det": "detect",
    "save_conf": "detect",
    "topk": "classify",
    "rec": "ocr",
    "cls": "ocr",
    "text_score": "ocr",
    "tokenizer": "embed",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to an .onnx file (the detector, the classifier, the text detector, the encoder)")
    p.add_argument(
        "source",
        help="an image file, a folder (its images), a glob ('pages/*.png', quoted), a video (read by OpenCV), "
        "or for --task embed a .txt file (one text per line)",
    )
    p.add_argument("--task", choices=TASKS, help="the recipe (default: detect when the model is a YOLO detector)")
    p.add_argument(
        "--save-dir", metavar="DIR", help="where results go (default: runs/predict, runs/predict2, ... a new one)"
    )
    p.add_argument("--no-save", action="store_true", help="no annotated pictures (JSON, CSV and labels still)")
    p.add_argument("--save-conf", action="store_true", help="detect: the confidence last on each label line")
    p.add_argument("--batch-size", type=positive_int, help="items per engine call (default: auto, as map chooses)")
    g = p.add_argument_group("recipe")
    g.add_argument("--conf", type=float, help="detect: confidence threshold (default 0.25)")
    g.add_argument("--iou", type=float, help="detect: NMS IoU threshold (default 0.7)")
    g.add_argument("--imgsz", type=positive_int, help="detect: letterbox size of a dynamic model (default 640)")
    g.add_argument("--max-det", type=positive_int, help="detect: boxes per image at most (default 300)")
    g.add_argument("--topk", type=positive_int, help="classify: classes per image (default 5)")
    g.add_argument("--rec", metavar="REC.onnx", help="ocr: the recogniser model (required for --task ocr)")
    g.add_argument("--cls", metavar="CLS.onnx", help="ocr: the text-direction classifier (optional)")
    g.add_argument("--text-score", type=float, help="ocr: lowest line score kept (default 0.5)")
    g.add_argument("--tokenizer", metavar="tokenizer.json", help="embed: the tokenizer (required for --task embed)")
    add_engine_group(p)
    add_output_args(p)


def add_engine_group(p: argparse.ArgumentParser) -> None:
    """``--backend``, the engine flags, ``--provider-option`` and the cache flags (no random-input options)."""
    g = p.add_argument_group("engine")
    g.add_argument("--backend", default="auto", help="auto (default), ort, migraphx or reference")
    add_engine_args(g)
    g.add_argument("--provider-option", action="append", metavar="KEY=VALUE", help="a raw option of the first provider")
    add_cache_args(g)


def guess_task(source: Any) -> str:
    """``detect`` for a YOLO detector (Ultralytics' ``task`` metadata, ``segment`` and ``pose`` included: the YOLO
    recipe answers their masks and keypoints; or one output that is a YOLO head for the
    model's fixed input size), the metadata's ``classify``; else an :class:`OptionError` asking for ``--task``.

    Example:
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import tiny_cnn, yolov8
        >>> guess_task(ModelSource.from_any(yolov8(image_size=64, num_classes=2)))
        'detect'
        >>> from amdinfer.testing.models import yolov8_pose
        >>> guess_task(ModelSource.from_any(yolov8_pose(image_size=64)))  # the yolo recipe, which finds the keypoints
        'detect'
        >>> guess_task(ModelSource.from_any(tiny_cnn()))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --task: cannot tell the task of <ModelProto tiny_cnn> ...; give --task detect, ...
    """
    from ..postprocess import _anchor_count, detect_layout

    meta = {p.key: p.value for p in source.proto.metadata_props}
    if meta.get("task") in ("detect", "classify"):
        return meta["task"]
    if meta.get("task") in ("segment", "pose"):  # Ultralytics' YOLO masks and keypoints: amdinfer.yolo answers both
        return "detect"
    if meta.get("task") == "semantic-segmentation":  # amdinfer.testing.models.unet; Ultralytics' segment is YOLO's
        return "segment"
    outs = [tuple(o.shape) for o in source.outputs]
    dims = tuple(source.inputs[0].shape) if source.inputs else ()
    if (
        len(outs) == 1
        and len(outs[0]) == 3
        and len(dims) == 4
        and all(isinstance(d, int) for d in (*dims[2:], *outs[0][1:]))
    ):
        hw = (int(dims[2]), int(dims[3]))
        layout, anchors = detect_layout(outs[0][1:], hw), _anchor_count(hw)
        if (layout == "v8" and outs[0][2] == anchors) or (layout == "v5" and outs[0][1] == 3 * anchors):
            return "detect"
    raise OptionError(
        f"--task: cannot tell the task of {source.name} (no Ultralytics task metadata, and its outputs "
        f"{[list(s) for s in outs]} are not a YOLO head for input {list(dims)}); give --task detect, classify, "
        "ocr, embed or segment"
    )


def _check_task_options(args: argparse.Namespace, task: str) -> None:
    for dest, owner in _TASK_OPTIONS.items():
        value = getattr(args, dest, None)
        if owner != task and value not in (None, False):
            flag = "--" + dest.replace("_", "-")
            raise OptionError(f"{flag}: applies to --task {owner}, got --task {task}; drop {flag}")
    for dest, what in (("rec", "the recogniser model"), ("tokenizer", "the tokenizer.json")):
        if _TASK_OPTIONS[dest] == task and getattr(args, dest, None) is None:
            raise OptionError(f"--{dest}: --task {task} needs {what}; give --{dest} PATH")


def build(args: argparse.Namespace, task: str, source: Any) -> Any:
    """The recipe of ``task`` for the parsed model ``source`` with the given flags (what Python's builders take)."""
    import amdinfer

    common = {"backend": args.backend, "device": args.device, "precision": args.precision}
    common.update(engine_options(args, args.backend))
    given = {k: getattr(args, k) for k in _TASK_OPTIONS if getattr(args, k, None) is not None}
    given.pop("save_conf", None)
    if task == "detect":
        return amdinfer.yolo(source, **given, **common)
    if task == "classify":
        return amdinfer.classify(source, **given, **common)
    if task == "segment":
        return amdinfer.segment(source, **given, **common)
    if task == "ocr":
        rec, cls = given.pop("rec"), given.pop("cls", None)
        return amdinfer.ocr(source, rec, cls, **given, **common)
    return amdinfer.embed(source, given.pop("tokenizer"), **common)


def items_of(source: str, task: str) -> tuple[list[tuple[str, str, str]] | None, Any, int | None]:
    """What ``source`` names: ``(named, stream, count)`` where ``named`` lists ``(name, stem, suffix)`` per item
    and ``stream`` yields the items (paths, RGB video frames, texts) in that order; ``named`` is ``None`` for a
    video (its names come with its frames) and ``count`` may be unknown.

    Raises:
        InputError: a source that does not exist, a folder or glob without an image, an unreadable video.
    """
    from ..pipeline._sources import expand

    path = Path(source)
    magic = any(c in source for c in "*?[")
    if not path.exists() and not magic:
        raise InputError(f"source: {source!r} does not exist, expected an image file, a folder, a glob or a video")
    if task == "embed":
        if not path.is_file():
            raise InputError(f"source: {source!r}: --task embed reads a .txt file with one text per line")
        texts = [t for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
        return [(t, str(i), "") for i, t in enumerate(texts)], iter(texts), len(texts)
    if path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES:
        frames, count = _video(source)
        return None, frames, count
    paths = [os.fspath(p) for p in expand(source)[0]]
    return [(p, Path(p).stem, Path(p).suffix or ".jpg") for p in paths], iter(paths), len(paths)


def _video(source: str) -> tuple[Iterator[tuple[tuple[str, str, str], Any]], int | None]:
    try:
        import cv2
    except ImportError:
        from ..errors import BackendUnavailableError

        raise BackendUnavailableError(
            "predict: a video source is read by OpenCV: pip install opencv-python-headless"
        ) from None
    cap = cv2.VideoCapture(source)
    if not cap.isOpened():
        raise InputError(f"source: the video {source!r} cannot be opened by OpenCV, expected a video it reads")
    count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) or None
    stem = Path(source).stem

    def frames() -> Iterator[tuple[tuple[str, str, str], Any]]:
        n = 0
        try:
            while True:
                ok, frame = cap.read()
                if not ok:
                    return
                yield (f"{source}#{n}", f"{stem}_{n:06d}", ".jpg"), cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
                n += 1
        finally:
            cap.release()

    return frames(), count


def save_dir_for(args: argparse.Namespace) -> Path:
    """``--save-dir``, else the first of ``runs/predict``, ``runs/predict2``, ... that does not exist."""
    if args.save_dir:
        return Path(args.save_dir)
    base, n = Path("runs") / "predict", 2
    out = base
    while out.exists():
        out, n = Path(f"{base}{n}"), n + 1
    return out


def run(args: argparse.Namespace) -> int:
    from ..metrics._map import mean_stages
    from ..model import ModelSource

    model = ModelSource.from_any(args.model)
    task = args.task or guess_task(model)
    _check_task_options(args, task)
    named, stream, count = items_of(args.source, task)
    save_dir = save_dir_for(args)
    note(args, f"loading {Path(args.model).name} ({task})")
    pipe = build(args, task, model)
    out = PredictOutputs(save_dir, task, pictures=not args.no_save, save_conf=args.save_conf)
    try:
        seconds = _predict(args, pipe, out, named, stream, count)
    finally:
        pipe.close()
    written = out.close()
    n = len(out.records)
    units = {"detect": "boxes", "classify": "classes", "ocr": "text lines", "embed": "vectors", "segment": "areas"}
    unit = units[task]
    rate = n / seconds if seconds > 0 else float("inf")
    stages = mean_stages(out.speeds)
    each = ", ".join(f"{stages[k]:.1f} ms {k}" for k in ("preprocess", "inference", "postprocess") if k in stages)
    text = (
        f"{n} {'texts' if task == 'embed' else 'images'}, {out.count} {unit} in {seconds:.2f} s ({rate:.1f}/s)\n"
        + (f"Speed: {each} per image\n" if each else "")
        + f"results in {save_dir}: {', '.join(p.name for p in written.values())}"
        + ("" if args.no_save or task == "embed" else ", annotated pictures")
    )
    payload = {
        "task": task,
        "items": n,
        "found": out.count,
        "seconds": seconds,
        "per_second": rate,
        "stages_ms": stages,
        "save_dir": str(save_dir),
        "files": {k: str(v) for k, v in written.items()},
    }
    emit(args, payload, text)
    return 0


def _predict(args: argparse.Namespace, pipe: Any, out: PredictOutputs, named: Any, stream: Any, count: Any) -> float:
    """Run ``stream`` through ``pipe.map`` (the fast path) with a progress bar; record each result; the seconds."""
    from .._support._progress import progress_bar

    names: list[tuple[str, str, str]] = [] if named is None else named
    if named is None:  # a video: each frame comes with its name
        named_frames = stream

        def frames() -> Iterator[Any]:
            for name, frame in named_frames:
                names.append(name)
                yield frame

        stream = frames()
    unit = "text" if out.task == "embed" else "image"
    enabled = False if args.quiet or args.json else None
    batch = args.batch_size or (None if out.task == "embed" else "auto")  # the embedder keeps its own
    t0 = time.perf_counter()
    with progress_bar("predict", count, unit=unit, enabled=enabled) as bar:
        with pipe.map(stream, batch_size=batch) as results:
            for i, result in enumerate(results):
                image, stem, suffix = names[i]
                out.add(image, stem, result, suffix=suffix)
                bar.update()
    return time.perf_counter() - t0
