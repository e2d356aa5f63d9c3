"""Issue 40, item 3, the rest: ``to_json()`` is row-oriented by default (Ultralytics' ``Results.to_json()`` layout,
``decimals=5``), every method of every result type works on an empty result, and a fused pipeline's results carry
``speed``.

Truths: Ultralytics' documented row layout written out by hand for a hand-made :class:`Detections` (``name``,
``class``, ``confidence``, ``box`` ``{x1, y1, x2, y2}``, five decimals); the :mod:`json` and :mod:`csv` parsers
reading back what is written; Pillow decoding a saved empty picture against the kept image (nothing drawn); the
wall-clock time of the call bounding the sum of its per-image stage times (a property, no threshold).
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import amdinfer
from amdinfer.errors import BackendUnavailableError
from amdinfer.results import Classification, Detections, Embeddings, Matches, TextLines, _draw, _forms
from amdinfer.testing.models import tiny_cnn, yolov8

CPU = {"providers": ["CPUExecutionProvider"]}
IMAGE = np.full((20, 30, 3), 7, np.uint8)  # a kept picture: 30 wide, 20 high


# ------------------------------------------------------------------ the row form is the default
class TestRowJson:
    def test_ultralytics_layout_by_hand(self) -> None:
        det = Detections(
            [[10.123456789, 20, 50.5, 80], [0, 0, 30, 20]],
            [0.912345678, 0.5],
            [2, 0],
            labels=["car", "person"],
            image_shape=(20, 30),
        )
        # Ultralytics' Results.summary()/to_json(): one dict per box, these keys in this order, 5 decimals
        want = [
            {"name": "car", "class": 2, "confidence": 0.91235,
             "box": {"x1": 10.12346, "y1": 20.0, "x2": 50.5, "y2": 80.0}},
            {"name": "person", "class": 0, "confidence": 0.5, "box": {"x1": 0.0, "y1": 0.0, "x2": 30.0, "y2": 20.0}},
        ]  # fmt: skip
        rows = json.loads(det.to_json())
        assert rows == want
        assert [list(r) for r in rows] == [["name", "class", "confidence", "box"]] * 2
        assert [list(r["box"]) for r in rows] == [["x1", "y1", "x2", "y2"]] * 2
        assert json.loads(det.to_json(decimals=2))[0] == {
            "name": "car",
            "class": 2,
            "confidence": 0.91,
            "box": {"x1": 10.12, "y1": 20.0, "x2": 50.5, "y2": 80.0},
        }
        assert json.loads(det.to_json(normalize=True))[1]["box"] == {"x1": 0.0, "y1": 0.0, "x2": 1.0, "y2": 1.0}
        assert json.loads(det.to_json(indent=2)) == want  # json.dumps keywords still pass through

    def test_columns_on_request_read_back(self) -> None:
        det = Detections([[1, 2, 3, 4]], [0.25], [1], labels=["b"], image_shape=(8, 9))
        back = Detections(**json.loads(det.to_json(orient="columns")))
        assert back.to_dict() == det.to_dict()

    def test_every_type_defaults_to_rows(self) -> None:
        results = [
            Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"]),
            TextLines([[[0, 0], [8, 0], [8, 4], [0, 4]]], ["hi"], [0.9]),
            Embeddings([[0.6, 0.8]], ["hi"]),
            Matches([[0]], [[0.5]], docs=["x"]),
        ]
        for r in results:
            assert json.loads(r.to_json()) == r.summary(), type(r).__name__
            assert json.loads(r.to_json(orient="columns")) == json.loads(json.dumps(r.to_dict()))


# ------------------------------------------------------------------ empty results
EMPTY: dict[str, Callable[[], Any]] = {
    "Detections": lambda: Detections(np.zeros((0, 4)), [], [], labels=[], image=IMAGE),
    "Classification": lambda: Classification([], [], labels=[], image=IMAGE),
    "TextLines": lambda: TextLines(np.zeros((0, 4, 2)), [], [], image=IMAGE),
    "Embeddings": lambda: Embeddings(np.zeros((0, 4), np.float32), []),
    "Matches": lambda: Matches(np.zeros((0, 2), np.int64), np.zeros((0, 2))),
}
PICTURED = {"Detections", "Classification", "TextLines"}
INDEXED = {"Detections", "TextLines", "Embeddings", "Matches"}  # Classification, as Ultralytics' Probs, is not


def _check_plot(r: Any, tmp_path: Path) -> None:
    np.testing.assert_array_equal(r.plot(), IMAGE)  # the bug: plot() of zero boxes raised ValueError (reshape)
    from PIL import Image

    np.testing.assert_array_equal(np.asarray(Image.open(r.save(tmp_path / "empty.png"))), IMAGE)


def _check_csv(r: Any, tmp_path: Path) -> None:
    reader = csv.DictReader(io.StringIO(r.to_csv()))
    assert list(reader) == [] and reader.fieldnames == r._columns()


def _check_df(r: Any, tmp_path: Path) -> None:
    if not _draw._have("pandas"):
        with pytest.raises(BackendUnavailableError, match=r"to_df needs pandas: pip install pandas"):
            r.to_df()
        return
    df = r.to_df()
    assert df.shape == (0, len(r._columns())) and list(df.columns) == r._columns()


def _check_show(r: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(_forms, "in_notebook", lambda: False)
    shown: list[Any] = []
    monkeypatch.setattr(_forms, "_window", lambda image, title: shown.append((image, title)))
    r.show()
    if type(r).__name__ in PICTURED:
        np.testing.assert_array_equal(shown[0][0], IMAGE)
        assert shown[0][1] == type(r).__name__
    else:
        assert not shown and capsys.readouterr().out == repr(r) + "\n"


def _check_index(r: Any, tmp_path: Path) -> None:
    assert len(r) == 0
    if type(r).__name__ not in INDEXED:
        return
    assert list(r) == []
    for i in (0, -1):
        with pytest.raises(IndexError, match=rf"{type(r).__name__}: index {i} is out of range for 0 "):
            r[i]


METHODS: dict[str, Callable[..., None]] = {
    "summary": lambda r, p: (r.summary() == [] and r.summary(decimals=0) == []) or pytest.fail("summary"),
    "to_json": lambda r, p: (json.loads(r.to_json()) == []) or pytest.fail("to_json"),
    "to_json_columns": lambda r, p: (
        json.loads(r.to_json(orient="columns")) == json.loads(json.dumps(r.to_dict()))
        or pytest.fail("to_json(orient='columns')")
    ),
    "to_csv": _check_csv,
    "to_df": _check_df,
    "len_iter_index": _check_index,
    "repr": lambda r, p: repr(r).startswith(f"{type(r).__name__}(") or pytest.fail("repr"),
    "speed": lambda r, p: r.speed == dict.fromkeys(_forms.STAGES) or pytest.fail("speed"),
}


@pytest.mark.parametrize("kind", list(EMPTY))
@pytest.mark.parametrize("method", [*METHODS, "plot_save", "show"])
def test_an_empty_result(
    kind: str, method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    r = EMPTY[kind]()
    if method == "show":
        _check_show(r, tmp_path, monkeypatch, capsys)
    elif method == "plot_save":
        if kind not in PICTURED:
            assert not hasattr(r, "plot")
            return
        pytest.importorskip("PIL.Image")
        _check_plot(r, tmp_path)
    else:
        METHODS[method](r, tmp_path)


# ------------------------------------------------------------------ a fused pipeline's speed
def _check_speed(results: list[Any], wall_ms: float) -> None:
    for r in results:
        speed = r.speed
        assert list(speed) == ["preprocess", "inference", "postprocess"], speed
        values = list(speed.values())
        assert all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in values), speed
        assert sum(values) <= wall_ms, (speed, wall_ms)  # one image's stages ran inside the call


def _timed(fn: Callable[[], Any]) -> tuple[list[Any], float]:
    start = time.perf_counter()
    out = fn()
    return (out if isinstance(out, list) else [out]), (time.perf_counter() - start) * 1e3


class TestFusedSpeed:
    def test_detector(self) -> None:
        image = np.zeros((48, 80, 3), np.uint8)
        with amdinfer.yolo(yolov8(image_size=64, num_classes=2), fuse=True, **CPU) as det:
            assert type(det).__name__ == "FusedPipeline"
            for call in (lambda: det(image), lambda: det([image, image[:40]]), lambda: det.run_batch([image] * 3)):
                _check_speed(*_timed(call))
            _check_speed(*_timed(lambda: list(det.map([image] * 3, batch_size=2))))

    def test_classifier(self) -> None:
        image = np.zeros((40, 50, 3), np.uint8)
        with amdinfer.classify(tiny_cnn(), size=32, fuse=True, **CPU) as clf:
            assert type(clf).__name__ == "FusedPipeline"
            _check_speed(*_timed(lambda: clf.run_batch([image] * 2)))
            _check_speed(*_timed(lambda: list(clf.map([image] * 3, batch_size=2))))
