"""What ``amdinfer predict`` writes: annotated pictures, one JSON and one CSV of all results, YOLO label files.

The rows are read from the results' own arrays (``boxes``, ``scores``, ``classes``, ...), unrounded: the JSON
holds exactly what the Python recipe returned (float32 values written as the shortest float that reads back).

Example:
    >>> from amdinfer.results import Detections
    >>> det = Detections([[10, 20, 50, 60]], [0.5], [1], labels=["b"], image_shape=(100, 200))
    >>> label_lines(det, save_conf=True)
    ['1 0.15 0.4 0.2 0.4 0.5']
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CSV_COLUMNS", "PredictOutputs", "label_lines", "rows_of"]

#: The CSV's columns per task (one row per box, class, text line or text).
CSV_COLUMNS: dict[str, tuple[str, ...]] = {
    "detect": ("image", "class", "name", "conf", "x1", "y1", "x2", "y2"),
    "classify": ("image", "rank", "class", "name", "score"),
    "ocr": ("image", "line", "text", "score", "x1", "y1", "x2", "y2", "x3", "y3", "x4", "y4"),
    "embed": ("index", "text", "embedding"),
    "segment": ("image", "class", "name", "pixels", "fraction"),
}


def _name(labels: Any, i: int, c: int) -> str | None:
    return None if labels is None else str(labels[i]) if i < len(labels) else str(c)


def rows_of(task: str, result: Any) -> list[dict[str, Any]]:
    """One dict per box (detect), class (classify), text line (ocr) or one for the vector (embed).

    Example:
        >>> from amdinfer.results import Classification
        >>> rows_of("classify", Classification([3, 1], [0.75, 0.25], labels=["cat", "dog"]))
        [{'rank': 0, 'class': 3, 'name': 'cat', 'score': 0.75}, {'rank': 1, 'class': 1, 'name': 'dog', 'score': 0.25}]
    """
    if task == "detect":
        return [
            {"class": int(c), "name": _name(result.labels, i, int(c)), "conf": float(s), "box": [float(v) for v in b]}
            for i, (b, s, c) in enumerate(zip(result.boxes, result.scores, result.classes))
        ]
    if task == "classify":
        return [
            {"rank": i, "class": int(c), "name": _name(result.labels, i, int(c)), "score": float(s)}
            for i, (c, s) in enumerate(zip(result.indices, result.scores))
        ]
    if task == "ocr":
        texts = result.texts if result.texts is not None else [None] * len(result)
        return [
            {"line": i, "text": t, "score": float(s), "quad": np.asarray(q, np.float64).tolist()}
            for i, (q, t, s) in enumerate(zip(result.quads, texts, result.scores))
        ]
    if task == "segment":  # one row per class present: its pixels and its mask as COCO RLE (SegmentationMap.to_dict)
        rle, total = result.to_dict()["rle"], result.classes.size
        return [
            {"class": c, "name": _name(result.labels, c, c), "pixels": n, "fraction": n / total, "rle": rle[str(c)]}
            for c, n in enumerate(result.counts.tolist())
            if n
        ]
    return [{"embedding": np.asarray(result, np.float64).reshape(-1).tolist()}]


def label_lines(det: Any, *, save_conf: bool = False) -> list[str]:
    """Ultralytics' ``labels/*.txt`` lines of one image: ``class cx cy w h`` normalized by the image size (``%g``),
    with the confidence last under ``save_conf``.

    Example:
        >>> from amdinfer.results import Detections
        >>> label_lines(Detections([[0, 0, 50, 25]], [0.9], [0], image_shape=(50, 100)))
        ['0 0.25 0.25 0.5 0.5']
    """
    if det.image_shape is None:
        from ..errors import InputError

        raise InputError("predict: a result without image_shape cannot be written as normalized labels")
    h, w = det.image_shape
    lines = []
    for (x1, y1, x2, y2), s, c in zip(det.boxes.astype(np.float64), det.scores, det.classes):
        values = [int(c), (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]
        if save_conf:
            values.append(float(s))
        lines.append(("%g " * len(values)).rstrip() % tuple(values))
    return lines


def _save_picture(result: Any, path: Path) -> None:
    """``result.save(path)``; a result with no row is its picture unchanged (``plot()`` of an empty
    ``Detections`` fails in ``results._base._drawable``, whose ``reshape(0, -1)`` NumPy refuses)."""
    if not hasattr(result, "boxes") or len(result):
        result.save(path)
        return
    from PIL import Image

    Image.fromarray(result.image).save(path)


class PredictOutputs:
    """Collects the results of one ``amdinfer predict`` run and writes them under ``save_dir``.

    ``predictions.json``: a list with one record per image (``image``, ``shape``, and the rows of
    :func:`rows_of` under the task's key); ``predictions.csv``: the same rows flat (:data:`CSV_COLUMNS`);
    pictures (the results' ``save()``) under their source's file name; ``labels/<stem>.txt`` for detect.

    Example:
        >>> import tempfile
        >>> from amdinfer.results import Detections
        >>> out = PredictOutputs(Path(tempfile.mkdtemp()), "detect", pictures=False)
        >>> out.add("a.png", "a", Detections([[0, 0, 2, 2]], [0.5], [0], image_shape=(4, 4)))
        >>> sorted(p.name for p in out.close().values())
        ['labels', 'predictions.csv', 'predictions.json']
    """

    def __init__(
        self, save_dir: Path, task: str, *, pictures: bool = True, labels: bool = True, save_conf: bool = False
    ) -> None:
        self.save_dir, self.task = save_dir, task
        self.pictures, self.save_conf = pictures, save_conf
        self.labels = labels and task == "detect"
        self.records: list[dict[str, Any]] = []
        self.count = 0
        #: each result's ``speed`` (ms per stage), for the mean the command prints
        self.speeds: list[dict[str, Any]] = []
        self._stems: set[str] = set()
        save_dir.mkdir(parents=True, exist_ok=True)
        if self.labels:
            (save_dir / "labels").mkdir(exist_ok=True)

    def _unique(self, stem: str) -> str:
        name, k = stem, 1
        while name in self._stems:
            name, k = f"{stem}_{k}", k + 1
        self._stems.add(name)
        return name

    def add(self, image: str, stem: str, result: Any, *, suffix: str = ".jpg") -> None:
        """Record one result (``image``: what it answers, ``stem``: its output file names)."""
        stem = self._unique(stem)
        self.speeds.append(dict(getattr(result, "speed", None) or {}))
        rows = rows_of(self.task, result)
        self.count += len(rows) if self.task != "embed" else 1
        shape = getattr(result, "image_shape", None)
        if shape is None and getattr(result, "image", None) is not None:
            shape = tuple(result.image.shape[:2])
        keys = {"detect": "detections", "classify": "classes", "ocr": "lines", "embed": "vector", "segment": "segments"}
        key = keys[self.task]
        record: dict[str, Any] = {"image": image, "shape": None if shape is None else [int(v) for v in shape]}
        if self.task == "embed":
            record = {"index": len(self.records), "text": image, key: rows[0]["embedding"]}
        else:
            record[key] = rows
        self.records.append(record)
        if self.pictures and self.task != "embed" and getattr(result, "image", None) is not None:
            _save_picture(result, self.save_dir / f"{stem}{suffix}")
        if self.labels:
            lines = label_lines(result, save_conf=self.save_conf)
            if lines:  # as Ultralytics: an image without a detection has no label file
                (self.save_dir / "labels" / f"{stem}.txt").write_text("\n".join(lines) + "\n")

    def close(self) -> dict[str, Path]:
        """Write ``predictions.json`` and ``predictions.csv``; the paths written, by kind."""
        written = {"json": self.save_dir / "predictions.json", "csv": self.save_dir / "predictions.csv"}
        written["json"].write_text(json.dumps(self.records, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        with written["csv"].open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS[self.task])
            for record in self.records:
                for row in self._csv_rows(record):
                    writer.writerow(row)
        if self.labels:
            written["labels"] = self.save_dir / "labels"
        return written

    def _csv_rows(self, record: dict[str, Any]) -> list[list[Any]]:
        image = record.get("image")
        if self.task == "detect":
            return [[image, r["class"], r["name"] or "", r["conf"], *r["box"]] for r in record["detections"]]
        if self.task == "classify":
            return [[image, r["rank"], r["class"], r["name"] or "", r["score"]] for r in record["classes"]]
        if self.task == "segment":
            return [[image, r["class"], r["name"] or "", r["pixels"], r["fraction"]] for r in record["segments"]]
        if self.task == "ocr":
            return [
                [image, r["line"], r["text"] or "", r["score"], *np.asarray(r["quad"]).reshape(-1).tolist()]
                for r in record["lines"]
            ]
        return [[record["index"], record["text"], " ".join(repr(v) for v in record["vector"])]]
