"""Issue 35's robustness cases: results with odd values, and texts that are not valid Unicode (registered into
the corpus by ``_corpus.py``).

The rule (docs/pipeline.md, "Odd values"): a row with a NaN or infinite box, score or quad is left out of
``draw()``/``plot()``/``save()`` with one ``amdinfer.results`` warning that counts the rows, and ``to_dict()``/
``to_json()`` write ``null`` for such a number (strict JSON). Each documented case checks the picture against the
same result built without the odd rows, and the JSON with a parser that refuses ``NaN``/``Infinity``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _corpus import CPU, case, warnings_logged

import amdinfer
from amdinfer.errors import InputError
from amdinfer.results import Classification, Detections, TextLines


def _strict(text: str) -> object:
    def refuse(token: str) -> object:
        raise AssertionError(f"not strict JSON: {token} in {text[:200]}")

    return json.loads(text, parse_constant=refuse)


def _blank(h: int = 40, w: int = 60) -> np.ndarray:
    return np.zeros((h, w, 3), np.uint8)


def _one_warning(warned: list[str], says: str) -> str:
    assert len(warned) == 1 and says in warned[0], warned
    return warned[0]


# ---------------------------------------------------------------------------------------------- pictures
@case("results")
def detections_plot_nan_box(d: Path) -> object:
    det = Detections([[5, 6, 30, 20], [np.nan, 1, 9, 9]], [0.9, 0.8], [0, 1], labels=["a", "b"], image=_blank())
    with warnings_logged("amdinfer.results") as warned:
        out = det.plot()  # was: ValueError: cannot convert float NaN to integer
    alone = Detections([[5, 6, 30, 20]], [0.9], [0], labels=["a"], image=_blank()).plot()
    assert np.array_equal(out, alone)
    return _one_warning(warned, "Detections.plot: 1 of 2 boxes not drawn")


@case("results")
def detections_save_inf_box_and_nan_score(d: Path) -> object:
    det = Detections([[1, 1, np.inf, 9], [5, 6, 30, 20], [2, 2, 8, 8]], [0.5, 0.9, np.nan], [0, 0, 1], image=_blank())
    with warnings_logged("amdinfer.results") as warned:
        path = det.save(d / "case-odd-boxes.png")  # was: OverflowError: cannot convert float infinity to integer
    from PIL import Image

    with Image.open(path) as im:
        assert np.array_equal(np.asarray(im), Detections([[5, 6, 30, 20]], [0.9], [0], image=_blank()).plot())
    return _one_warning(warned, "Detections.plot: 2 of 3 boxes not drawn")


@case("results")
def detections_huge_finite_box(d: Path) -> object:
    det = Detections([[5, 6, 1e30, 3e38]], [0.9], [0], labels=["wide"], image=_blank())
    out = det.plot(thickness=1)  # the label too: Pillow failed on an anchor this far out (SystemError)
    assert (out[6, 5:] != 0).all() and (out[6:, 5] != 0).all()  # cut at the border
    return "drawn, cut at the image border"


@case("results")
def classification_plot_nan_score(d: Path) -> object:
    c = Classification([3, 1], [np.nan, 0.2], labels=["cat", "dog"], image=_blank(80, 120))
    with warnings_logged("amdinfer.results") as warned:
        out = c.plot()
    assert np.array_equal(out, Classification([1], [0.2], labels=["dog"], image=_blank(80, 120)).plot())
    return _one_warning(warned, "Classification.plot: 1 of 2 classes not drawn")


@case("results", InputError, r"^Classification: indices: got non-finite values at rows \[1\], expected class indices")
def classification_nan_index(d: Path) -> object:
    return Classification([2, np.nan], [0.5, 0.4])  # was: ValueError: cannot convert float NaN to integer


@case("results")
def text_lines_plot_nan_and_huge_quads(d: Path) -> object:
    quads = [[[1, 1], [1e30, 1], [1e30, 5], [1, 5]], [[0, 0], [np.nan, 0], [4, 4], [0, 4]]]
    lines = TextLines(quads, ["far", "nan"], [0.9, 0.8], image=_blank(10, 12))
    with warnings_logged("amdinfer.results") as warned:
        out = lines.plot(thickness=1, text=False)  # the 1e30 edge was: ValueError: Maximum allowed size exceeded
    lines.plot()  # and with the texts
    assert out[1, 1:].any(axis=1).all() and not out[8:].any()
    return _one_warning(warned, "TextLines.plot: 1 of 2 lines not drawn")


# ---------------------------------------------------------------------------------------------- JSON
@case("results")
def detections_to_json_nan_inf(d: Path) -> object:
    det = Detections([[0, 1, 2, np.inf], [np.nan, 1, 2, 3]], [-np.inf, 0.5], [1, 2])
    text = det.to_json(orient="columns")  # was: bare NaN / Infinity / -Infinity
    data = _strict(text)
    assert data == {
        "boxes": [[0.0, 1.0, 2.0, None], [None, 1.0, 2.0, 3.0]],
        "scores": [None, 0.5],
        "classes": [1, 2],
        "labels": None,
        "image_shape": None,
    }
    assert _strict(json.dumps(det.to_dict())) == data
    return text


@case("results")
def classification_text_lines_matches_json_nan(d: Path) -> object:
    from amdinfer.text import Matches

    texts = [
        Classification([1], [np.nan]).to_json(orient="columns"),
        TextLines([[[0, 0], [np.inf, 0], [1, 1], [0, 1]]], ["a"], [np.nan]).to_json(orient="columns"),
        Matches([[0]], [[np.inf]]).to_json(orient="columns"),
    ]
    for text in texts:
        _strict(text)
    return " | ".join(texts)


# ---------------------------------------------------------------------------------------------- embed
def _embedder() -> object:
    from amdinfer.text._embed_toy import toy_encoder, toy_tokenizer

    return amdinfer.embed(toy_encoder(), toy_tokenizer(), providers=CPU["providers"])


_LONE = r"not valid Unicode \(lone surrogate U\+D800 at position 1\); expected a str that encodes as UTF-8"


@case("embed", InputError, r"^texts\[0\]: text: " + _LONE + "$")
def embed_lone_surrogate(d: Path) -> object:
    with _embedder() as embedder:  # type: ignore[attr-defined]
        return embedder("a\ud800b")  # was: StageError ... TypeError: TextInputSequence must be str


@case("embed", InputError, r"^texts\[1\]: text: " + _LONE + "$")
def embed_map_lone_surrogate(d: Path) -> object:
    with _embedder() as embedder:  # type: ignore[attr-defined]
        return list(embedder.map(["fine", "a\ud800b"]))
