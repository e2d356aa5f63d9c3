"""amdinfer.ocr against RapidOCR 3.10.0 (the shipped golden) with the same models, on the shipped pages."""

from __future__ import annotations

import numpy as np
import pytest
from _models import DATA, PAGES, golden, models, needs_models

import amdinfer

pytestmark = needs_models


@pytest.fixture(scope="module")
def pipe():
    m = models()
    assert m is not None
    p = amdinfer.ocr(m["det"], m["rec"], m["cls"], providers=["CPUExecutionProvider"], threads=2)
    yield p
    p.close()


def test_golden_covers_the_pages():
    assert sorted(golden()) == list(PAGES) and len(PAGES) >= 5
    assert sum(len(g["texts"]) for g in golden().values()) >= 20


@pytest.mark.parametrize("name", PAGES)
def test_lines_and_boxes_match_rapidocr(pipe, name):
    g = golden()[name]
    lines = pipe(str(DATA / name))
    assert lines.texts == g["texts"]
    want = np.asarray(g["boxes"], np.float32).reshape(-1, 4, 2)
    assert lines.quads.shape == want.shape
    assert np.abs(lines.quads - want).max(initial=0) <= 1.0
    np.testing.assert_allclose(lines.scores, g["scores"], atol=2e-3)


def test_run_batch_and_map_give_the_same_lines(pipe):
    paths = [str(DATA / n) for n in PAGES]
    one = [pipe(p).texts for p in paths]
    assert [r.texts for r in pipe.run_batch(paths)] == one  # pages of different sizes: bucketed by shape
    assert [r.texts for r in pipe(paths)] == one
    with pipe.map(paths, batch_size=1, workers=2) as results:
        assert [r.texts for r in results] == one


def test_result_keeps_the_page_and_draws(pipe):
    lines = pipe(str(DATA / PAGES[0]))
    assert lines.image is not None and lines.image.shape[:2] == lines.image_shape
    out = lines.plot(text=False)
    assert out.shape == lines.image.shape and not np.array_equal(out, lines.image)


def test_without_classifier_the_upright_lines_still_read():
    m = models()
    assert m is not None
    with amdinfer.ocr(m["det"], m["rec"], providers=["CPUExecutionProvider"]) as p:
        lines = p(str(DATA / PAGES[0]))
    assert lines.texts == golden()[PAGES[0]]["texts"]


def test_ctc_in_the_graph_gives_the_lines_and_scores_of_the_probabilities(pipe):
    m = models()
    assert m is not None and pipe.ctc_in_graph  # the default
    assert [o.name for o in pipe.steps[-1].engine.outputs] == ["ctc_index", "ctc_best"]
    with amdinfer.ocr(m["det"], m["rec"], m["cls"], fuse_ctc=False, providers=["CPUExecutionProvider"]) as plain:
        assert not plain.ctc_in_graph
        for name in PAGES:
            a, b = pipe(str(DATA / name)), plain(str(DATA / name))
            assert a.texts == b.texts
            np.testing.assert_array_equal(a.scores, b.scores)
