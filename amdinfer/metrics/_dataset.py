"""Labelled detection sets: Ultralytics' YOLO txt layout (``data.yaml``, ``images/``, ``labels/``) or COCO json.

:func:`load_detection_set` reads either into one :class:`DetectionSet`: the image paths, each image's true boxes
(``x1, y1, x2, y2`` in pixels) and class indices into ``names``. ``data.yaml`` is read by a small safe parser
(:func:`read_data_yaml`: the keys Ultralytics' dataset files use, no YAML tags, nothing executed).

Example:
    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "data.yaml").write_text("path: .\\nval: images\\nnames:\\n  0: cat\\n  1: dog\\n")
    >>> read_data_yaml(d / "data.yaml")["names"]
    ['cat', 'dog']
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from . import _labels

__all__ = ["DetectionSet", "load_detection_set", "read_data_yaml"]

_IMAGE_SUFFIXES = (".bmp", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
_KEY = re.compile(r"^([A-Za-z_][\w-]*|\d+)\s*:\s*(.*)$")


@dataclass(frozen=True)
class DetectionSet:
    """A labelled detection set: images, their true boxes and the class names.

    Attributes:
        images: the image paths, in order.
        boxes: per image, ``float64 (k, 4)`` true boxes ``x1, y1, x2, y2`` in the image's pixels.
        classes: per image, ``int64 (k,)`` class indices into ``names``.
        names: the class names (index ``i`` is class ``i``).
        sizes: per image, ``(height, width)``.
        source: the file or folder it was read from.
        category_ids: COCO json only: the category id of each class index (``names`` are the categories sorted
            by id); ``()`` for the YOLO layout.
        masks: ``task="segment"``: per image, one compressed COCO RLE (``pycocotools.mask``) per true box; else
            ``()``.
        keypoints: ``task="pose"``: per image, ``float64 (k, K, 3)`` ``x, y, v`` in pixels (``v > 0``: labelled);
            else ``()``.
        areas: ``task="pose"``: per image, the ``(k,)`` areas COCO's OKS is scaled by (the json's ``area``, else
            the box's area x 0.53, as Ultralytics); else ``()``.

    Example:
        >>> s = DetectionSet(("a.png",), (np.array([[0, 0, 4, 4.0]]),), (np.array([0]),), ("cat",), ((8, 8),), "x")
        >>> len(s), s.instances()
        (1, [1])
    """

    images: tuple[str, ...]
    boxes: tuple[np.ndarray, ...]
    classes: tuple[np.ndarray, ...]
    names: tuple[str, ...]
    sizes: tuple[tuple[int, int], ...]
    source: str
    category_ids: tuple[int, ...] = ()
    masks: tuple[tuple[dict[str, Any], ...], ...] = ()
    keypoints: tuple[np.ndarray, ...] = ()
    areas: tuple[np.ndarray, ...] = ()

    @property
    def task(self) -> str:
        """``"segment"`` with masks, ``"pose"`` with keypoints, else ``"detect"``."""
        return "segment" if self.masks else "pose" if self.keypoints else "detect"

    def __len__(self) -> int:
        return len(self.images)

    def instances(self) -> list[int]:
        """The number of true boxes of each class, in class order.

        Example:
            >>> DetectionSet((), (), (), ("a", "b"), (), "x").instances()
            [0, 0]
        """
        counts = np.zeros(len(self.names), np.int64)
        for c in self.classes:
            np.add.at(counts, c, 1)
        return [int(n) for n in counts]


def read_data_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The keys of an Ultralytics ``data.yaml``: ``path``, ``train``, ``val``, ``test`` (strings), ``nc`` and
    ``names`` (a list, from a ``0: name`` block, a ``- name`` block, ``[a, b]`` or ``{0: a, 1: b}``).

    A small safe parser of the subset of YAML those files use: ``key: value`` lines, one indented block for
    ``names``, ``#`` comments, quoted or plain scalars. Anything else is refused, naming the file and line.

    Raises:
        InputError: the file is missing, or a line it cannot read, or ``names`` missing or not indices
            ``0..n-1`` (naming the file and what was found).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "data.yaml"
        >>> _ = p.write_text("val: images/val  # split\\nnames: ['a', 'b']\\n")
        >>> read_data_yaml(p)
        {'val': 'images/val', 'names': ['a', 'b']}
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"data: {str(p)!r} does not exist, expected a data.yaml file")
    out: dict[str, Any] = {}
    key, text_block = "", False
    for n, raw in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if text_block and (not raw.strip() or raw[0] in " \t"):
            out[key] += raw.strip() + "\n"  # a `|` or `>` text (Ultralytics' download scripts): kept as text
            continue
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        where = f"data: {str(p)!r} line {n}"
        if line[0] in " \t":
            if not isinstance(out.get(key), list):
                raise InputError(f"{where}: got the indented line {raw.strip()[:60]!r} outside a block")
            out[key].append((line.strip(), where))
            continue
        m = _KEY.match(line)
        if not m:
            raise InputError(f"{where}: got {raw.strip()[:60]!r}, expected key: value (an Ultralytics data.yaml)")
        key, value = m.group(1), m.group(2).strip()
        text_block = value in ("|", ">", "|-", ">-", "|+", ">+")
        out[key] = [] if value == "" else "" if text_block else _scalar(value, where)
    for k, v in out.items():
        if isinstance(v, list) and v and isinstance(v[0], tuple):
            out[k] = _block(v)
        elif isinstance(v, list) and not v:  # `test:` with nothing under it
            out[k] = None
    if "names" in out:
        out["names"] = _names(out["names"], f"data: {str(p)!r}")
    return out


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if ch in "'\"" and (not quote or quote == ch):
            quote = "" if quote else ch
        elif ch == "#" and not quote and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _block(lines: list[tuple[str, str]]) -> list[Any] | dict[Any, Any]:
    """An indented block: ``- item`` lines (a list) or ``key: value`` lines (a dict), not both."""
    if lines[0][0].startswith("-"):
        items = []
        for text, where in lines:
            if not text.startswith("-"):
                raise InputError(f"{where}: got {text[:60]!r} in a block of '- item' lines, expected '- item'")
            items.append(_scalar(text[1:].strip(), where))
        return items
    table: dict[Any, Any] = {}
    for text, where in lines:
        m = _KEY.match(text)
        if not m:
            raise InputError(f"{where}: got {text[:60]!r}, expected '0: name' or '- name'")
        table[int(m.group(1)) if m.group(1).isdigit() else m.group(1)] = _scalar(m.group(2).strip(), where)
    return table


def _scalar(value: str, where: str) -> Any:
    """A plain or quoted scalar, or a flow ``[a, 'b']`` / ``{0: a, 1: b}`` of them (not nested)."""
    if value[0] in "[{":
        close = "]" if value[0] == "[" else "}"
        if not value.endswith(close):
            raise InputError(f"{where}: got {value[:60]!r}, expected it to end in {close!r} on the same line")
        parts = [x for x in _split(value[1:-1], where) if x.strip()]
        if value[0] == "[":
            return [_plain(x, where) for x in parts]
        table: dict[Any, Any] = {}
        for x in parts:
            k, sep, v = x.partition(":")
            if not sep:
                raise InputError(f"{where}: got {x.strip()[:60]!r} in {{...}}, expected key: value")
            table[_plain(k, where)] = _plain(v, where)
        return table
    return _plain(value, where)


def _split(text: str, where: str) -> list[str]:
    """``text`` cut at the commas outside quotes."""
    parts, quote, start = [], "", 0
    for i, ch in enumerate(text):
        if ch in "'\"" and (not quote or quote == ch):
            quote = "" if quote else ch
        elif ch in "[]{}" and not quote:
            raise InputError(f"{where}: got a nested {ch!r}, expected a flat [a, b] or {{0: a}}")
        elif ch == "," and not quote:
            parts.append(text[start:i])
            start = i + 1
    if quote:
        raise InputError(f"{where}: got {text[:60]!r}, expected its quote {quote} closed")
    return [*parts, text[start:]]


def _plain(value: str, where: str) -> Any:
    value = value.strip()
    if value[:1] in ("'", '"'):
        try:
            return str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            raise InputError(f"{where}: got {value[:60]!r}, expected a quoted string") from None
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    return value


def _names(names: Any, where: str) -> list[str]:
    if isinstance(names, dict):
        keys = sorted(names, key=str)
        if not all(isinstance(k, int) for k in names) or sorted(names) != list(range(len(names))):
            raise InputError(f"{where}: names: got keys {keys[:10]}, expected the class indices 0..{len(names) - 1}")
        return [str(names[i]) for i in range(len(names))]
    if isinstance(names, (list, tuple)) and names:
        return [str(x) for x in names]
    raise InputError(f"{where}: names: got {str(names)[:60]!r}, expected a list of class names or 0: name lines")


def load_detection_set(
    data: str | os.PathLike[str],
    *,
    split: str = "val",
    images: str | os.PathLike[str] | None = None,
    task: str = "detect",
    kpt_shape: tuple[int, int] | None = None,
) -> DetectionSet:
    """Read a labelled detection set: an Ultralytics YOLO dataset or a COCO json file.

    * YOLO (``data`` is a ``data.yaml`` or a folder holding one): the images of ``split`` (the yaml's ``val`` entry:
      a folder, a list of folders, or a ``.txt`` list of image paths, relative to the yaml's ``path``, itself
      relative to the yaml's folder; without that entry, the folder ``images/`` beside the yaml). Each image's
      labels are the ``.txt`` of the same name in the folder where the path's last ``images`` is ``labels``, one
      ``class cx cy w h`` line per box (normalized; a polygon line is taken as its bounding box); an image without
      a label file has no box (as Ultralytics reads backgrounds).
    * COCO (``data`` ends in ``.json``): ``images``, ``annotations`` (``bbox`` as ``x, y, w, h``; crowd boxes left
      out) and ``categories``; classes are the categories sorted by id. Images are read from ``images`` (default:
      the ``images/`` folder beside the file, else the file's folder).
    * ``task="segment"`` also reads each object's mask (:attr:`DetectionSet.masks`): the label line's polygon
      rasterized in the image's pixels (``pycocotools``), or the json's ``segmentation`` (polygons or RLE);
      ``task="pose"`` its keypoints (:attr:`DetectionSet.keypoints`): ``kpt_shape`` ``(K, D)`` values after the
      box (argument, else the yaml's ``kpt_shape``), or the json's ``keypoints`` (``K`` from the categories'
      ``keypoints`` names, else the annotations). ``"detect"`` takes a polygon line as its bounding box.

    Raises:
        InputError: a missing file or folder, a malformed ``data.yaml``, json or label line, or a class index
            outside ``names`` (each naming the file, and line where there is one).

    Example:
        >>> from pathlib import Path
        >>> shipped = Path(__import__("amdinfer").__file__).parents[1] / "tests" / "data" / "val_shapes"
        >>> s = load_detection_set(shipped) if shipped.is_dir() else None
        >>> s is None or (len(s), s.names[:2]) == (4, ("square", "bar"))
        True
    """
    if task not in ("detect", "segment", "pose"):
        raise InputError(f"task: got {task!r}, expected 'detect', 'segment' or 'pose'")
    p = Path(data)
    if p.suffix.lower() == ".json":
        return _coco(p, None if images is None else Path(images), task)
    if p.is_dir():
        found = [q for q in (p / "data.yaml", p / "data.yml") if q.is_file()]
        if not found:
            raise InputError(
                f"data: the folder {str(p)!r} holds no data.yaml, expected an Ultralytics dataset (data.yaml, "
                "images/, labels/) or a COCO .json file"
            )
        p = found[0]
    elif not p.exists():
        raise InputError(f"data: {str(p)!r} does not exist, expected a data.yaml, a dataset folder or a COCO .json")
    cfg = read_data_yaml(p)
    if "names" not in cfg:
        raise InputError(f"data: {str(p)!r} has no names, expected the class names (names: [a, b] or 0: a lines)")
    root = p.parent / str(cfg.get("path") or ".")
    entry = cfg.get(split)
    if entry is None and split not in cfg and (root / "images").is_dir():
        entry = "images"
    if entry is None:
        raise InputError(f"data: {str(p)!r} has no {split!r} entry and no images/ folder, expected one of them")
    files = _image_files(root, entry, str(p))
    names = tuple(cfg["names"])
    if task == "pose":
        kpt_shape = _kpt_shape(kpt_shape if kpt_shape is not None else cfg.get("kpt_shape"), str(p))
    boxes, classes, sizes, masks, points, areas = [], [], [], [], [], []
    for f in files:
        size = _image_size(f)
        if task == "segment":
            b, c, m = _labels.yolo_segment_labels(_label_path(f), size, len(names))
            masks.append(m)
        elif task == "pose" and kpt_shape is not None:
            b, c, kp, a = _labels.yolo_pose_labels(_label_path(f), size, len(names), kpt_shape)
            points.append(kp)
            areas.append(a)
        else:
            b, c = _yolo_labels(_label_path(f), size, len(names))
        boxes.append(b)
        classes.append(c)
        sizes.append(size)
    return DetectionSet(tuple(str(f) for f in files), tuple(boxes), tuple(classes), names, tuple(sizes), str(p),
                        masks=tuple(masks), keypoints=tuple(points), areas=tuple(areas))  # fmt: skip


def _kpt_shape(value: Any, where: str) -> tuple[int, int]:
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value)
    if not ok or int(value[0]) < 1 or int(value[1]) not in (2, 3):
        raise InputError(f"data: {where}: kpt_shape: got {value!r}, expected [K, 2] or [K, 3] (the yaml's kpt_shape "
                         "or kpt_shape=, Ultralytics' pose datasets)")  # fmt: skip
    return int(value[0]), int(value[1])


def _image_files(root: Path, entry: Any, where: str) -> list[Path]:
    entries = entry if isinstance(entry, list) else [entry]
    files: list[Path] = []
    for e in entries:
        q = root / str(e)
        if q.is_dir():
            files += sorted(f for f in q.rglob("*") if f.suffix.lower() in _IMAGE_SUFFIXES and f.is_file())
            labels = _label_path(q / "x.txt").parent
            if not labels.is_dir():
                raise InputError(f"data: {where}: the labels folder {str(labels)!r} is missing, expected one .txt "
                                 f"per image of {str(q)!r} (Ultralytics' images/ -> labels/ layout)")  # fmt: skip
        elif q.is_file() and q.suffix == ".txt":
            lines = [s.strip() for s in q.read_text(encoding="utf-8").splitlines() if s.strip()]
            files += [q.parent / s if not Path(s).is_absolute() else Path(s) for s in lines]
        else:
            raise InputError(f"data: {where}: {str(q)!r} does not exist, expected a folder of images or a .txt list")
    if not files:
        raise InputError(f"data: {where}: no image in {[str(root / str(e)) for e in entries]}, expected at least one")
    return files


def _label_path(image: Path) -> Path:
    parts = list(image.parts)
    idx = max((i for i, s in enumerate(parts[:-1]) if s == "images"), default=None)
    if idx is None:
        raise InputError(
            f"data: the image {str(image)!r} is not under a folder named images, expected images/ and labels/"
        )
    parts[idx] = "labels"
    return Path(*parts).with_suffix(".txt")


def _image_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return int(im.height), int(im.width)
    except (OSError, ValueError) as exc:
        raise InputError(f"data: the image {str(path)!r} cannot be read ({exc}), expected an image file") from None


def _yolo_labels(path: Path, size: tuple[int, int], nc: int) -> tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        return np.zeros((0, 4)), np.zeros(0, np.int64)
    h, w = size
    boxes, classes = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            values = [float(v) for v in line.split()]
        except ValueError:
            values = []
        if len(values) < 5 or (len(values) > 5 and len(values) % 2 == 0) or values[0] != int(values[0]):
            raise InputError(f"labels: {str(path)!r} line {n}: got {line.strip()[:60]!r}, expected 'class cx cy w h' "
                             "(normalized) or 'class x1 y1 x2 y2 ...' (a polygon)")  # fmt: skip
        c = int(values[0])
        if not 0 <= c < nc:
            raise InputError(f"labels: {str(path)!r} line {n}: class {c} is outside names (0..{nc - 1})")
        if len(values) == 5:
            cx, cy, bw, bh = values[1:]
            box = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
        else:
            xs, ys = values[1::2], values[2::2]
            box = [min(xs), min(ys), max(xs), max(ys)]
        boxes.append([box[0] * w, box[1] * h, box[2] * w, box[3] * h])
        classes.append(c)
    return np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(classes, np.int64)


def _coco(path: Path, images: Path | None, task: str = "detect") -> DetectionSet:
    if not path.is_file():
        raise InputError(f"data: {str(path)!r} does not exist, expected a COCO json file")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        cats = sorted(doc["categories"], key=lambda c: int(c["id"]))
        ids = [int(c["id"]) for c in cats]
        index = {cid: i for i, cid in enumerate(ids)}
        folder = images or (path.parent / "images" if (path.parent / "images").is_dir() else path.parent)
        by_image: dict[int, list[Any]] = {}
        for a in doc["annotations"]:
            if not a.get("iscrowd", 0):
                by_image.setdefault(int(a["image_id"]), []).append(a)
        files, boxes, classes, sizes, masks, points, areas = [], [], [], [], [], [], []
        k = _coco_kpt_count(cats, doc["annotations"]) if task == "pose" else 0
        for im in sorted(doc["images"], key=lambda i: int(i["id"])):
            anns = by_image.get(int(im["id"]), [])
            xywh = np.asarray([a["bbox"] for a in anns], np.float64).reshape(-1, 4)
            boxes.append(np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1))
            classes.append(np.asarray([index[int(a["category_id"])] for a in anns], np.int64))
            files.append(str(folder / im["file_name"]))
            sizes.append((int(im["height"]), int(im["width"])))
            where = f"data: {str(path)!r}"
            if task == "segment":
                masks.append(tuple(_labels.coco_segmentation(a["segmentation"], sizes[-1], where) for a in anns))
            elif task == "pose":
                kp, a = _labels.coco_keypoints(anns, k, where)
                points.append(kp)
                areas.append(a)
    except (ValueError, KeyError, TypeError) as exc:
        what = f"{type(exc).__name__}: {exc}"[:120]
        raise InputError(f"data: {str(path)!r} is not a COCO detection json ({what}), expected images, "
                         "annotations (bbox x, y, w, h) and categories") from None  # fmt: skip
    names = tuple(str(c["name"]) for c in cats)
    return DetectionSet(tuple(files), tuple(boxes), tuple(classes), names, tuple(sizes), str(path), tuple(ids),
                        tuple(masks), tuple(points), tuple(areas))  # fmt: skip


def _coco_kpt_count(cats: list[Any], anns: list[Any]) -> int:
    """``K``: the categories' ``keypoints`` names, else the first annotation's ``keypoints`` values / 3."""
    named = {len(c["keypoints"]) for c in cats if c.get("keypoints")}
    if len(named) == 1:
        return named.pop()
    found = next((len(a["keypoints"]) for a in anns if a.get("keypoints")), 0)
    if found % 3 or not found:
        raise KeyError(f"keypoints: found {found} values, expected x, y, v per keypoint")
    return found // 3
