"""Every result type's shared forms (issue 40, item 3): Ultralytics' box forms and ``conf``/``cls``, ``summary()``,
``to_df()``/``to_csv()``, ``to_json(orient="rows"|"columns", decimals=...)``, ``show()``, ``speed``; one embedded
str is 1-D and ``Embeddings.search`` refuses text by name.

Truths: box conversions computed by hand for known boxes in a non-square image (so a swapped width and height
shows); Ultralytics' own ``Boxes``/``Results`` when it is installed (skipped otherwise); the :mod:`csv` and
:mod:`json` parsers reading back what is written; pandas when installed; Pillow decoding the picture ``show()``
hands over, against ``plot()``.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
import pytest

import amdinfer
from amdinfer.errors import BackendUnavailableError, InputError, OptionError
from amdinfer.results import Classification, Detections, Embedding, Embeddings, Matches, TextLines, _draw, _forms
from amdinfer.testing.models import yolov8

CPU = {"providers": ["CPUExecutionProvider"]}
H, W = 480, 640  # height, width: not square
BOXES = [[100, 50, 150, 100], [200, 150, 300, 250], [0, 0, 640, 480]]


def _det(**kw: Any) -> Detections:
    return Detections(BOXES, [0.9, 0.8, 0.123456], [0, 1, 0], labels=["cat", "dog", "cat"], image_shape=(H, W), **kw)


# ------------------------------------------------------------------ box forms
class TestBoxForms:
    def test_by_hand(self) -> None:
        det = _det()
        by_hand_xywh = [[125, 75, 50, 50], [250, 200, 100, 100], [320, 240, 640, 480]]
        np.testing.assert_array_equal(det.xywh, np.float32(by_hand_xywh))
        xyxyn = [[100 / W, 50 / H, 150 / W, 100 / H], [200 / W, 150 / H, 300 / W, 250 / H], [0, 0, 1, 1]]
        np.testing.assert_allclose(det.xyxyn, xyxyn, rtol=1e-6)
        xywhn = [[125 / W, 75 / H, 50 / W, 50 / H], [250 / W, 200 / H, 100 / W, 100 / H], [0.5, 0.5, 1, 1]]
        np.testing.assert_allclose(det.xywhn, xywhn, rtol=1e-6)
        assert det.xyxy is det.boxes and det.conf is det.scores and det.cls is det.classes
        assert {a.dtype.name for a in (det.xywh, det.xyxyn, det.xywhn)} == {"float32"}

    def test_empty_and_unknown_size(self) -> None:
        empty = Detections(np.zeros((0, 4)), [], [], image_shape=(H, W))
        assert empty.xywh.shape == empty.xyxyn.shape == empty.xywhn.shape == (0, 4)
        for name in ("xyxyn", "xywhn"):
            with pytest.raises(InputError, match=rf"Detections.{name}: got image_shape None"):
                getattr(Detections(BOXES, [1, 1, 1], [0, 0, 0]), name)

    def test_against_ultralytics(self) -> None:
        torch = pytest.importorskip("torch")
        results = pytest.importorskip("ultralytics.engine.results")
        det = _det()
        data = torch.tensor(np.column_stack([det.boxes, det.scores, det.classes]).astype(np.float32))
        boxes = results.Boxes(data, (H, W))
        for name in ("xyxy", "xywh", "xyxyn", "xywhn", "conf"):
            np.testing.assert_allclose(getattr(det, name), getattr(boxes, name).numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_array_equal(det.cls, boxes.cls.numpy().astype(np.int64))
        r = results.Results(np.zeros((H, W, 3), np.uint8), path="x.jpg", names={0: "cat", 1: "dog"}, boxes=data)
        for normalize in (False, True):
            assert det.summary(normalize=normalize, decimals=4) == r.summary(normalize=normalize, decimals=4)


# ------------------------------------------------------------------ summary, JSON, CSV, DataFrame
class TestSummary:
    def test_detections_by_hand(self) -> None:
        rows = _det().summary(decimals=3)
        assert rows[0] == {
            "name": "cat",
            "class": 0,
            "confidence": 0.9,
            "box": {"x1": 100, "y1": 50, "x2": 150, "y2": 100},
        }
        assert rows[2]["confidence"] == 0.123
        norm = _det().summary(normalize=True, decimals=4)
        assert norm[1]["box"] == {"x1": round(200 / W, 4), "y1": round(150 / H, 4), "x2": round(300 / W, 4),
                                  "y2": round(250 / H, 4)}  # fmt: skip
        unnamed = Detections([[0, 0, 1, np.inf]], [np.nan], [7]).summary()
        assert unnamed == [
            {"name": "7", "class": 7, "confidence": None, "box": {"x1": 0, "y1": 0, "x2": 1, "y2": None}}
        ]

    def test_errors(self) -> None:
        with pytest.raises(InputError, match=r"Detections.summary: normalize=True: got image_shape None"):
            Detections(BOXES, [1, 1, 1], [0, 0, 0]).summary(normalize=True)
        with pytest.raises(OptionError, match=r"decimals: got -1, expected an int >= 0"):
            _det().summary(decimals=-1)
        with pytest.raises(OptionError, match=r"normalize: got 1, expected True or False"):
            _det().summary(normalize=1)  # type: ignore[arg-type]

    def test_every_type(self) -> None:
        c = Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"])
        assert c.summary() == [
            {"name": "cat", "class": 3, "confidence": 0.7},
            {"name": "dog", "class": 1, "confidence": 0.2},
        ]
        lines = TextLines([[[0, 0], [8, 0], [8, 4], [0, 4]]], ["hé"], [0.5], image_shape=(8, 16))
        assert lines.summary(normalize=True)[0]["box"] == {"x1": 0, "y1": 0, "x2": 0.5, "y2": 0, "x3": 0.5, "y3": 0.5,
                                                           "x4": 0, "y4": 0.5}  # fmt: skip
        emb = Embeddings([[3.0, 4.0]], ["hi"])
        assert emb.summary() == [{"text": "hi", "embedding": [3.0, 4.0]}]
        assert emb.summary(normalize=True) == [{"text": "hi", "embedding": [0.6, 0.8]}]  # 3-4-5
        assert emb[0].summary() == emb.summary()
        m = Matches([[1, 0]], [[0.9, 0.2]], queries=["q"], docs=["a", "b"])
        assert m.summary() == [{"query": "q", "rank": 1, "index": 1, "text": "b", "score": 0.9},
                               {"query": "q", "rank": 2, "index": 0, "text": "a", "score": 0.2}]  # fmt: skip

    @pytest.mark.parametrize("decimals", [0, 2, 5])
    def test_json_rows_round_trip(self, decimals: int) -> None:
        for result in self._results():
            text = result.to_json(orient="rows", decimals=decimals)
            assert json.loads(text) == result.summary(decimals=decimals)
        assert json.loads(_det().to_json(orient="rows", decimals=2))[2]["confidence"] == 0.12

    def test_json_rows_by_default_columns_on_request(self) -> None:
        det = _det()
        assert json.loads(det.to_json()) == det.summary()  # rows, rounded to 5 decimals, as Ultralytics
        assert det.to_json() == det.to_json(orient="rows", decimals=5)
        plain = json.loads(json.dumps(det.to_dict()))
        assert json.loads(det.to_json(orient="columns")) == plain
        back = Detections(**json.loads(det.to_json(orient="columns", decimals=1)))
        np.testing.assert_allclose(back.scores, [0.9, 0.8, 0.1], rtol=1e-6)
        assert json.loads(det.to_json(orient="columns", indent=2)) == plain
        with pytest.raises(OptionError, match=r"orient: got 'records', expected one of \['rows', 'columns'\]"):
            det.to_json(orient="records")
        with pytest.raises(OptionError, match=r"normalize: got True with orient='columns', expected orient='rows'"):
            det.to_json(orient="columns", normalize=True)
        lines = TextLines(np.zeros((1, 4, 2)), ["hé"], [0.5])
        assert "hé" in lines.to_json() and "hé" in lines.to_json(orient="columns")  # texts as they read

    def test_csv_read_back(self) -> None:
        for result in self._results():
            got = list(csv.DictReader(io.StringIO(result.to_csv(decimals=3))))
            want = [
                {k: "" if v is None else str(v) for k, v in _forms.flatten(r).items()}
                for r in result.summary(decimals=3)
            ]
            assert got == want
        text = _det().to_csv(normalize=True, decimals=4)
        assert text.splitlines()[0] == "name,class,confidence,x1,y1,x2,y2"
        assert text.splitlines()[3] == "cat,0,0.1235,0.0,0.0,1.0,1.0"
        assert Detections(np.zeros((0, 4)), [], []).to_csv() == "name,class,confidence,x1,y1,x2,y2\n"
        assert Detections([[0, 0, 1, 1]], [np.nan], [2]).to_csv().splitlines()[1] == "2,2,,0.0,0.0,1.0,1.0"
        assert Embeddings([[1.0, 2.0]]).to_csv().splitlines() == ["text,embedding_0,embedding_1", ",1.0,2.0"]

    def test_dataframe(self) -> None:
        pd = pytest.importorskip("pandas")
        df = _det().to_df(normalize=True)
        assert isinstance(df, pd.DataFrame) and list(df.columns) == [
            "name",
            "class",
            "confidence",
            "x1",
            "y1",
            "x2",
            "y2",
        ]
        np.testing.assert_allclose(df[["x1", "y1", "x2", "y2"]].to_numpy(), np.round(_det().xyxyn.astype(float), 5))
        assert df["name"].tolist() == ["cat", "dog", "cat"]

    def test_dataframe_without_pandas(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = _draw._have
        monkeypatch.setattr(_draw, "_have", lambda m: False if m == "pandas" else real(m))
        with pytest.raises(BackendUnavailableError, match=r"Detections.to_df needs pandas: pip install pandas"):
            _det().to_df()

    @staticmethod
    def _results() -> list[Any]:
        return [
            _det(),
            Classification([3, 1], [0.712345, 0.2], labels=["cat", "dog"]),
            TextLines([[[0, 0], [8.123456, 0], [8, 4], [0, 4]]], ["hé"], [0.5]),
            Embeddings([[0.123456, 0.5], [1.0, 2.0]], ["a", "b"]),
            Embeddings([[0.123456, 0.5]], ["a"])[0],
            Matches([[1, 0]], [[0.912345, 0.2]], docs=["a", "b"]),
        ]


# ------------------------------------------------------------------ show
class TestShow:
    def test_notebook_gets_the_picture(self, monkeypatch: pytest.MonkeyPatch) -> None:
        Image = pytest.importorskip("PIL.Image")
        display = pytest.importorskip("IPython.display")
        shown: list[Any] = []
        monkeypatch.setattr(_forms, "in_notebook", lambda: True)
        monkeypatch.setattr(display, "display", shown.append)
        det = Detections([[4, 4, 20, 20]], [0.9], [0], labels=["cat"], image=np.zeros((32, 48, 3), np.uint8))
        det.show()
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(shown[0].data))), det.plot())
        bare = Detections([[4, 4, 20, 20]], [0.9], [0])
        bare.show()  # no picture: the table (the result itself, which Jupyter renders as HTML)
        assert shown[1] is bare

    def test_desktop(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("PIL.Image")
        from PIL import ImageShow

        monkeypatch.setattr(_forms, "in_notebook", lambda: False)
        monkeypatch.setattr(_forms.sys, "platform", "linux")
        monkeypatch.delenv("DISPLAY", raising=False)
        monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
        det = Classification([1], [0.5], labels=["fox"], image=np.zeros((32, 48, 3), np.uint8))
        with pytest.raises(BackendUnavailableError, match=r"Classification.show: no display here"):
            det.show()
        windows: list[Any] = []
        monkeypatch.setenv("DISPLAY", ":0")
        monkeypatch.setattr(ImageShow, "show", lambda image, title=None: windows.append((image, title)) or True)
        det.show()
        np.testing.assert_array_equal(np.asarray(windows[0][0]), det.plot())
        assert windows[0][1] == "Classification"
        monkeypatch.setattr(ImageShow, "show", lambda image, title=None: False)
        with pytest.raises(BackendUnavailableError, match=r"Pillow found no image viewer"):
            det.show()
        with pytest.raises(InputError, match=r"TextLines.plot: this result keeps no image"):
            TextLines(np.zeros((1, 4, 2)), ["a"], [0.5]).show()

    def test_without_a_picture_it_prints(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setattr(_forms, "in_notebook", lambda: False)
        m = Matches([[0]], [[1.0]], docs=["x"])
        m.show()
        assert capsys.readouterr().out == repr(m) + "\n"


# ------------------------------------------------------------------ speed
class TestSpeed:
    def test_by_hand_is_untimed(self) -> None:
        assert _det().speed == {"preprocess": None, "inference": None, "postprocess": None}

    def test_a_pipeline_times_each_stage(self) -> None:
        image = np.zeros((48, 80, 3), np.uint8)
        with amdinfer.yolo(yolov8(image_size=64, num_classes=2), **CPU) as det:
            results = [det(image), *det([image, image[:40]]), *det.map([image] * 3, batch_size=2)]
        for r in results:
            assert list(r.speed) == ["preprocess", "inference", "postprocess"]
            assert all(isinstance(v, float) and v >= 0 for v in r.speed.values()), r.speed


# ------------------------------------------------------------------ embeddings
class TestEmbeddings:
    def test_one_is_1d(self) -> None:
        e = Embeddings([[0.6, 0.8], [1.0, 0.0]], ["a", "b"])[0]
        assert isinstance(e, Embedding) and e.shape == (2,) and np.asarray(e).shape == (2,)
        with pytest.raises(InputError, match=r"Embedding: vector: got shape \(1, 2\), expected \(d,\)"):
            Embedding("a", np.zeros((1, 2), np.float32))

    def test_the_embedder(self) -> None:
        pytest.importorskip("tokenizers")
        from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer

        with amdinfer.embed(toy_encoder(), toy_tokenizer(), **CPU) as embedder:
            one, many = embedder("the cat"), embedder(["the cat"])
            assert isinstance(one, Embedding) and one.shape == (embedder.dim,) and one.text == "the cat"
            assert many.vectors.shape == (1, embedder.dim)
            np.testing.assert_allclose(one.vector, many.vectors[0], atol=1e-6)
            found = embedder(["a dog", "the cat sat"]).search(one, k=1)
            assert found.queries == ["the cat"] and found.indices.shape == (1, 1)

    def test_search_refuses_text(self) -> None:
        docs = Embeddings([[1.0, 0.0], [0.0, 1.0]], ["x", "y"])
        for query in ("cats", ["cats", "dogs"]):
            with pytest.raises(InputError, match=r"search: queries: got text .*expected an Embedding/Embeddings or "
                               r"vectors \(m, 2\): embed the text first"):  # fmt: skip
                docs.search(query)
        with pytest.raises(InputError, match=r"similarity: other: got text 'cats'"):
            docs.similarity("cats")
        assert docs.search(docs[1], k=1).indices.tolist() == [[1]]
