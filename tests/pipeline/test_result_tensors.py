"""Each result class knows its own tensor layout (issue 37, item 4): ``to_tensors()`` / ``from_tensors()`` /
``from_batch()``, and the server's answers built from them.

Truths: results built by hand; the names, dtypes, shapes and order of the server's outputs as
``serve/_answers.py`` wrote them before the classes knew their layout (``Detections``: ``boxes`` float32 (k, 4),
``scores`` float32 (k,), ``classes`` int64 (k,), ``labels`` BYTES (k,) when named, concatenated over a request
with ``boxes_batch_index`` int64 right after ``boxes``; ``Classification``: ``indices`` int64, ``scores``
float32, ``labels`` BYTES, stacked to (n, k); ``TextLines``: ``quads`` float32 (k, 4, 2), ``scores`` float32,
``texts`` BYTES with ``b""`` before recognition, concatenated with ``quads_batch_index``), written out here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from amdinfer.errors import InputError
from amdinfer.results import (
    Classification,
    Detection,
    Detections,
    Embedding,
    Embeddings,
    Match,
    Matches,
    TensorResult,
    TextLine,
    TextLines,
    batch_tensors,
    split_batch,
)
from amdinfer.serve._answers import result_tensors, row_tensor

QUAD = [[1, 2], [9, 2], [9, 6], [1, 6]]


def _layout(tensors: dict[str, np.ndarray]) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(k, v.dtype.name, v.shape) for k, v in tensors.items()]


def _fields(result: Any) -> dict[str, Any]:
    """Every attribute of a result, arrays as (dtype, list): what "equal" means for classes without ``__eq__``."""
    names = getattr(type(result), "__slots__", None) or vars(result)
    out = {}
    for name in names:
        v = getattr(result, name)
        out[name] = (v.dtype.name, v.shape, v.tolist()) if isinstance(v, np.ndarray) else v
    return out


def _dets() -> list[Detections]:
    return [
        Detections([[5, 6, 30, 20], [40, 25, 55, 38]], [0.9, 0.4], [0, 3], labels=["cat", "dög"]),
        Detections(np.zeros((0, 4)), [], [], labels=[]),
        Detections([[1, 1, 2, 2]], [0.5], [7], labels=["fox"]),
    ]


# ------------------------------------------------------------------------------------- one result: to/from tensors
class TestOneResult:
    @pytest.mark.parametrize(
        "result, layout",
        [
            (
                _dets()[0],
                [("boxes", "float32", (2, 4)), ("scores", "float32", (2,)), ("classes", "int64", (2,)),
                 ("labels", "object", (2,))],
            ),
            (Detections(np.zeros((0, 4)), [], []), [("boxes", "float32", (0, 4)), ("scores", "float32", (0,)),
                                                      ("classes", "int64", (0,))]),
            (Classification([3, 1, 0], [0.7, 0.2, 0.1], labels=["a", "b", "c"]),
             [("indices", "int64", (3,)), ("scores", "float32", (3,)), ("labels", "object", (3,))]),
            (Classification([3], [0.7]), [("indices", "int64", (1,)), ("scores", "float32", (1,))]),
            (TextLines([QUAD, QUAD], ["hi", "ünï"], [0.9, 0.8]),
             [("quads", "float32", (2, 4, 2)), ("scores", "float32", (2,)), ("texts", "object", (2,))]),
            (TextLines(np.zeros((0, 4, 2)), [], []),
             [("quads", "float32", (0, 4, 2)), ("scores", "float32", (0,)), ("texts", "object", (0,))]),
            (Embeddings([[0.6, 0.8], [1, 0], [0, 1]], ["a", "b", "c"]),
             [("vectors", "float32", (3, 2)), ("texts", "object", (3,))]),
            (Embeddings(np.zeros((0, 4))), [("vectors", "float32", (0, 4))]),
            (Matches([[1, 0], [0, 1]], [[0.9, 0.2], [0.8, 0.1]], queries=["q", "r"]),
             [("indices", "int64", (2, 2)), ("scores", "float32", (2, 2)), ("queries", "object", (2,))]),
            (Matches(np.zeros((0, 3)), np.zeros((0, 3))),
             [("indices", "int64", (0, 3)), ("scores", "float32", (0, 3))]),
        ],
    )  # fmt: skip
    def test_layout_and_round_trip(self, result: TensorResult, layout: list) -> None:
        tensors = result.to_tensors()
        assert _layout(tensors) == layout
        back = type(result).from_tensors(tensors)
        assert _fields(back) == _fields(result)

    def test_text_is_utf8_bytes(self) -> None:
        assert _dets()[0].to_tensors()["labels"].tolist() == [b"cat", "dög".encode()]
        assert TextLines([QUAD], ["ünï"], [1.0]).to_tensors()["texts"].tolist() == ["ünï".encode()]
        assert Embeddings([[1.0]], ["é"]).to_tensors()["texts"].tolist() == ["é".encode()]

    def test_text_lines_before_recognition_send_empty_texts(self) -> None:
        lines = TextLines([QUAD, QUAD], None, [0.9, 0.8])
        assert lines.to_tensors()["texts"].tolist() == [b"", b""]
        assert TextLines.from_tensors(lines.to_tensors()).texts == ["", ""]  # the layout has no "not recognised"

    def test_values_are_kept_exactly_including_nan(self) -> None:
        det = Detections([[0.1, np.nan, np.inf, 3.3]], [np.nan], [2])
        t = det.to_tensors()
        np.testing.assert_array_equal(t["boxes"], np.float32([[0.1, np.nan, np.inf, 3.3]]))
        back = Detections.from_tensors(t)
        np.testing.assert_array_equal(back.boxes, det.boxes)
        assert np.isnan(back.scores[0])

    def test_what_the_tensors_do_not_carry_comes_as_arguments(self) -> None:
        image = np.zeros((40, 60, 3), np.uint8)
        det = Detections.from_tensors(_dets()[0].to_tensors(), image_shape=(40, 60), image=image)
        assert det.image_shape == (40, 60) and det.image is image
        lines = TextLines.from_tensors(TextLines([QUAD], ["a"], [1.0]).to_tensors(), image=image)
        assert lines.image_shape == (40, 60)
        assert Classification.from_tensors(Classification([1], [1.0]).to_tensors(), image=image).image is image
        assert Embeddings.from_tensors(Embeddings([[1.0, 0.0]]).to_tensors(), normalized=True).normalized
        m = Matches.from_tensors(Matches([[1]], [[0.5]]).to_tensors(), docs=["a", "b"])
        assert m[0][0].text == "b"

    def test_records_travel_as_one_row_of_their_container(self) -> None:
        det = _dets()[0]
        assert _layout(det[1].to_tensors()) == [(k, d, (1, *s[1:])) for k, d, s in _layout(det.to_tensors())]
        assert Detection.from_tensors(det[1].to_tensors()) == det[1]
        lines = TextLines([QUAD, QUAD], ["a", "b"], [0.9, 0.8])
        assert _layout(lines[0].to_tensors()) == [
            ("quads", "float32", (1, 4, 2)),
            ("scores", "float32", (1,)),
            ("texts", "object", (1,)),
        ]
        assert TextLine.from_tensors(lines[1].to_tensors()) == lines[1]
        emb = Embeddings([[0.6, 0.8], [1, 0]], ["a", "b"])[1]
        back = Embedding.from_tensors(emb.to_tensors())
        assert back.text == "b" and back.vector.tolist() == [1.0, 0.0] and back.vector.dtype == np.float32
        match = Matches([[1, 0]], [[0.9, 0.2]], docs=["x", "y"])[0][0]
        assert _layout(match.to_tensors()) == [("indices", "int64", (1,)), ("scores", "float32", (1,)),
                                               ("texts", "object", (1,))]  # fmt: skip
        assert Match.from_tensors(match.to_tensors()) == match
        assert Match.from_tensors(Match(2, 0.5, None).to_tensors()) == Match(2, 0.5, None)

    def test_a_record_needs_exactly_one_row(self) -> None:
        with pytest.raises(InputError, match=r"Detection.from_tensors: got 2 boxes, expected 1"):
            Detection.from_tensors(_dets()[0].to_tensors())
        with pytest.raises(InputError, match=r"TextLine.from_tensors: got 0 lines, expected 1"):
            TextLine.from_tensors(TextLines(np.zeros((0, 4, 2)), [], []).to_tensors())

    def test_every_result_class_is_a_tensor_result(self) -> None:
        for cls in (Detection, Detections, Classification, TextLine, TextLines, Embedding, Embeddings, Match, Matches):
            assert issubclass(cls, TensorResult), cls
        assert [c.row_tensor for c in (Detections, Classification, TextLines, Embeddings, Matches)] == [
            "boxes",
            None,
            "quads",
            "vectors",
            "indices",
        ]


class TestFromTensorsRefuses:
    def test_missing_and_unknown_names(self) -> None:
        t = _dets()[0].to_tensors()
        del t["classes"]
        with pytest.raises(InputError, match=r"Detections.from_tensors: got tensors \['boxes', 'labels', 'scores'\]"):
            Detections.from_tensors(t)
        with pytest.raises(InputError, match=r"got tensors .*'colour'.*expected"):
            Classification.from_tensors({**Classification([1], [1.0]).to_tensors(), "colour": np.zeros(1)})

    def test_a_batch_points_at_from_batch(self) -> None:
        answer = batch_tensors([d.to_tensors() for d in _dets()], "boxes")
        with pytest.raises(InputError, match=r"use Detections.from_batch"):
            Detections.from_tensors(answer)
        stacked = batch_tensors([Classification([1, 2], [0.5, 0.4]).to_tensors()] * 2)
        with pytest.raises(InputError, match=r"'indices': got shape \(2, 2\), expected 1 dimension .*from_batch"):
            Classification.from_tensors(stacked)

    def test_counts_and_text(self) -> None:
        with pytest.raises(InputError, match="got 2 boxes, 1 scores and 2 classes"):
            Detections.from_tensors({"boxes": np.zeros((2, 4)), "scores": np.zeros(1), "classes": np.zeros(2)})
        bad = np.array([b"\xff"], dtype=object)
        with pytest.raises(InputError, match="TextLines: texts: element 0: got bytes that are not UTF-8"):
            TextLines.from_tensors({"quads": np.zeros((1, 4, 2)), "scores": np.ones(1), "texts": bad})
        with pytest.raises(InputError, match="labels: element 0: got int, expected UTF-8 bytes or str"):
            Classification.from_tensors({"indices": [1], "scores": [1.0], "labels": np.array([5], dtype=object)})
        with pytest.raises(InputError, match="tensors: got list, expected a dict of arrays"):
            Embeddings.from_tensors([np.zeros((1, 2))])  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- the server's answers
def _served(results: list[Any]) -> dict[str, np.ndarray]:
    """One request's answer as the server builds it (PipelineWorker.run: result_tensors, then batch_tensors)."""
    return batch_tensors([result_tensors(r) for r in results], row_tensor(results[0]))


class TestServedLayout:
    def test_detections_concatenated_with_boxes_batch_index(self) -> None:
        dets = _dets()
        answer = _served(dets)
        assert _layout(answer) == [
            ("boxes", "float32", (3, 4)),
            ("boxes_batch_index", "int64", (3,)),
            ("scores", "float32", (3,)),
            ("classes", "int64", (3,)),
            ("labels", "object", (3,)),
        ]
        assert answer["boxes_batch_index"].tolist() == [0, 0, 2]
        assert answer["labels"].tolist() == [b"cat", "dög".encode(), b"fox"]
        np.testing.assert_array_equal(answer["boxes"], np.float32([[5, 6, 30, 20], [40, 25, 55, 38], [1, 1, 2, 2]]))
        assert answer["classes"].tolist() == [0, 3, 7]
        back = Detections.from_batch(answer, 3)
        assert [_fields(b) for b in back] == [_fields(d) for d in dets]

    def test_every_item_without_boxes(self) -> None:
        empty = [Detections(np.zeros((0, 4)), [], []) for _ in range(2)]
        answer = _served(empty)
        assert _layout(answer) == [
            ("boxes", "float32", (0, 4)),
            ("boxes_batch_index", "int64", (0,)),
            ("scores", "float32", (0,)),
            ("classes", "int64", (0,)),
        ]
        assert [len(d) for d in Detections.from_batch(answer, 2)] == [0, 0]

    def test_same_box_count_is_still_concatenated(self) -> None:
        one = Detections([[0, 0, 1, 1]], [0.5], [1])
        answer = _served([one, one])
        assert answer["boxes"].shape == (2, 4) and answer["boxes_batch_index"].tolist() == [0, 1]

    def test_classifications_stacked(self) -> None:
        items = [Classification([3, 1], [0.7, 0.2], labels=["c", "d"]), Classification([0, 2], [0.6, 0.3], ["a", "e"])]
        answer = _served(items)
        assert _layout(answer) == [("indices", "int64", (2, 2)), ("scores", "float32", (2, 2)),
                                   ("labels", "object", (2, 2))]  # fmt: skip
        assert answer["labels"].tolist() == [[b"c", b"d"], [b"a", b"e"]]
        assert [_fields(c) for c in Classification.from_batch(answer, 2)] == [_fields(c) for c in items]

    def test_text_lines_concatenated_with_quads_batch_index(self) -> None:
        pages = [TextLines(np.zeros((0, 4, 2)), [], []), TextLines([QUAD, QUAD], ["a", "ü"], [0.9, 0.8])]
        answer = _served(pages)
        assert _layout(answer) == [
            ("quads", "float32", (2, 4, 2)),
            ("quads_batch_index", "int64", (2,)),
            ("scores", "float32", (2,)),
            ("texts", "object", (2,)),
        ]
        assert answer["quads_batch_index"].tolist() == [1, 1] and answer["texts"].tolist() == [b"a", "ü".encode()]
        assert [_fields(p) for p in TextLines.from_batch(answer, 2)] == [_fields(p) for p in pages]

    def test_arrays_and_dicts_as_before(self) -> None:
        assert _layout(_served([np.ones(3, np.float32), np.zeros(3, np.float32)])) == [("output", "float32", (2, 3))]
        answer = _served([{"x": np.zeros((2, 3))}, {"x": np.ones((1, 3))}])
        assert _layout(answer) == [("x", "float64", (3, 3)), ("x_batch_index", "int64", (3,))]
        assert answer["x_batch_index"].tolist() == [0, 0, 1]
        assert [t["x"].shape for t in split_batch(answer, 2)] == [(2, 3), (1, 3)]

    def test_a_result_that_is_not_a_tensor_result_is_named(self) -> None:
        class Odd:
            pass

        with pytest.raises(InputError, match=r"pipeline result: got Odd, expected .*TensorResult"):
            result_tensors(Odd())
        with pytest.raises(InputError, match="got list"):
            result_tensors([Detections(np.zeros((0, 4)), [], [])])


class TestBatchHelpers:
    def test_split_checks_its_indices(self) -> None:
        answer = _served(_dets())
        with pytest.raises(InputError, match=r"'boxes_batch_index': got \[0, 0, 2\]\.\.\., expected ints in \[0, 2\)"):
            Detections.from_batch(answer, 2)
        with pytest.raises(InputError, match="n: got 0, expected the item count"):
            split_batch(answer, 0, "boxes")
        no_index = {k: v for k, v in answer.items() if k != "boxes_batch_index"}
        with pytest.raises(InputError, match=r"expected \['boxes_batch_index'\]"):
            Detections.from_batch(no_index, 3)
        with pytest.raises(InputError, match=r"'scores': got shape \(2,\), expected 3 rows"):
            Detections.from_batch({**answer, "scores": np.zeros(2, np.float32)}, 3)
        with pytest.raises(InputError, match=r"'indices': got shape \(2, 1\), expected \(3, \.\.\.\)"):
            Classification.from_batch({"indices": np.zeros((2, 1)), "scores": np.zeros((2, 1))}, 3)

    def test_batch_needs_items_of_one_kind(self) -> None:
        with pytest.raises(InputError, match="got no items"):
            batch_tensors([])
        with pytest.raises(InputError, match=r"item 1: got tensors \['boxes', 'classes', 'scores'\]"):
            batch_tensors([d.to_tensors() for d in (_dets()[0], Detections(np.zeros((0, 4)), [], []))], "boxes")
        with pytest.raises(InputError, match="row_tensor: got 'quads'"):
            batch_tensors([_dets()[0].to_tensors()], "quads")

    def test_embeddings_and_matches_round_trip_through_a_batch(self) -> None:
        embs = [Embeddings([[1, 0], [0, 1]], ["a", "b"]), Embeddings([[0.6, 0.8]], ["c"])]
        answer = batch_tensors([e.to_tensors() for e in embs], Embeddings.row_tensor)
        assert answer["vectors_batch_index"].tolist() == [0, 0, 1]
        assert [_fields(e) for e in Embeddings.from_batch(answer, 2)] == [_fields(e) for e in embs]
        found = [Matches([[1, 0]], [[0.9, 0.2]], queries=["q"]), Matches([[0, 1], [1, 0]], [[0.8, 0.1], [0.7, 0.3]])]
        found = [Matches(m.indices, m.scores) for m in found]  # one layout per batch: no queries in either
        answer = batch_tensors([m.to_tensors() for m in found], Matches.row_tensor)
        back = Matches.from_batch(answer, 2, docs=["x", "y"])
        assert [b.indices.tolist() for b in back] == [[[1, 0]], [[0, 1], [1, 0]]] and back[1][0][0].text == "x"
