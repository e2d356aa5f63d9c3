"""``ocr(warm=)``: the bucketed cascade's shapes, built and run at load (the rule, the shapes, the answers)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from _models import DATA, PAGES, models, needs_models

import amdinfer
from amdinfer.errors import OptionError
from amdinfer.text import DetResize, PageFit, TextResize
from amdinfer.text._recipe import _warm
from amdinfer.text._warm import WARM_PAGES, ocr_warm_shapes

CASCADE = {
    "batch_size": 6,
    "det_limit": 736,
    "det_limit_type": "min",
    "page_fit": True,
    "rec_height": 48,
    "rec_width": 320,
    "cls_width": 192,
}


def test_the_shapes_are_the_buckets_the_stages_feed() -> None:
    # hand-computed: letter at 100 dpi (1100x850) keeps its scale, sides to multiples of 32 (1088x864), then
    # padded to 1280x1024; 400x640 grows to 736x1184 -> 768x1280; a 60x1200 strip gets 120 black rows each side
    shapes = ocr_warm_shapes(pages=[(1100, 850), (400, 640), (60, 1200)], max_rec_width=800)
    assert shapes["det"] == [(1, 3, 1280, 1024), (1, 3, 768, 1280), (1, 3, 768, 3072)]
    assert shapes["cls"] == [(6, 3, 48, 192)]
    assert shapes["rec"] == [(6, 3, 48, w) for w in (320, 480, 640, 800)]
    # the same through the stages themselves
    fit, resize = PageFit(), DetResize(736)
    for (h, w), (_, _, ch, cw) in zip([(1100, 850), (400, 640), (60, 1200)], shapes["det"]):
        fh, fw, top = fit.fit(h, w)
        th, tw = resize.target(fh + 2 * top, fw)
        assert (ch, cw) == (-(-th // 256) * 256, -(-tw // 256) * 256)
    pads = set()
    for width in (10, 200, 300, 333, 400):  # a 48-high line of each width: its padded width is a warmed one
        s = TextResize(48, 320, grow=True, width_step=160)(np.zeros((48, width, 3), np.uint8))
        pads.add(s.meta["pad_width"])
    assert pads <= {w for *_, w in ocr_warm_shapes()["rec"]}
    assert len(ocr_warm_shapes()["det"]) == 13 and len(WARM_PAGES) == 19


class _Engine:
    def __init__(self, device: str) -> None:
        self.info = SimpleNamespace(device=device)
        self.warmed: list = []

    def warm(self, shapes):
        self.warmed = list(shapes)
        return {"shapes": [list(s) for s in shapes]}


def _fake(device: str, buckets: bool, cls: bool = True):
    det, c, rec = _Engine(device), _Engine(device), _Engine(device)
    steps = (SimpleNamespace(engine=c), SimpleNamespace(engine=rec)) if cls else (SimpleNamespace(engine=rec),)
    pipe = SimpleNamespace(engine=det, steps=steps, shape_buckets={"det_multiple": 256} if buckets else None)
    pipe.warmed = None
    pipe.close = lambda: None
    return pipe, det, c, rec


@pytest.mark.parametrize(
    ("device", "buckets", "warm", "expected"),
    [
        ("cuda:0", True, "auto", True),  # a GPU with buckets: on
        ("cpu", True, "auto", False),  # the CPU: one session serves every shape; warming costs compute only
        ("cpu", True, True, True),  # forced
        ("cuda:0", True, False, False),
        ("cuda:0", False, "auto", False),  # no buckets: no shape known in advance
    ],
)
def test_the_rule(device, buckets, warm, expected) -> None:
    pipe, det, cls, rec = _fake(device, buckets)
    _warm(pipe, {**CASCADE, "warm": warm}, True)
    assert (pipe.warmed is not None) is expected
    if expected:
        shapes = ocr_warm_shapes()
        assert (det.warmed, cls.warmed, rec.warmed) == (shapes["det"], shapes["cls"], shapes["rec"])
        assert pipe.warmed["det"] == {"shapes": [list(s) for s in shapes["det"]]} and pipe.warmed["seconds"] >= 0


def test_page_sizes_choose_the_canvases_and_no_classifier_is_passed_over() -> None:
    pipe, det, cls, rec = _fake("cuda:0", True, cls=False)
    _warm(pipe, {**CASCADE, "warm": ((400, 640),)}, False)
    assert det.warmed == [(1, 3, 768, 1280)] and cls.warmed == [] and "cls" not in pipe.warmed
    assert rec.warmed == ocr_warm_shapes()["rec"]


def test_warm_without_buckets_is_refused() -> None:
    pipe, *_ = _fake("cpu", False)
    with pytest.raises(OptionError, match=r"warm: got True with shape_buckets=False"):
        _warm(pipe, {**CASCADE, "warm": True}, True)


@pytest.mark.parametrize("bad", ["yes", [(0, 5)], [(1, 2, 3)], 3])
def test_bad_values_are_refused_before_loading(bad) -> None:
    with pytest.raises(OptionError, match=r"warm: got"):
        amdinfer.ocr(None, None, charset=["a"], warm=bad)


@needs_models
def test_warmed_cascade_answers_the_same_and_builds_no_session_on_the_first_page() -> None:
    m = models()
    assert m is not None
    cpu = {"providers": ["cpu"], "threads": 1, "shape_buckets": True}
    pages = [str(DATA / p) for p in PAGES[:3]]  # 640 wide, 400, 420 and 480 high: canvases 768x1280 and 768x1024
    sizes = [(400, 640), (420, 640), (480, 640)]
    warm = amdinfer.ocr(m["det"], m["rec"], m["cls"], warm=sizes, shape_sessions=16, **cpu)
    plain = amdinfer.ocr(m["det"], m["rec"], m["cls"], **cpu)
    with warm, plain:
        engines = [warm.engine, *(s.engine for s in warm.steps)]
        shapes = ocr_warm_shapes(pages=sizes)
        assert shapes["det"] == [(1, 3, 768, 1280), (1, 3, 768, 1024)]
        for engine, role in zip(engines, ("det", "cls", "rec")):
            assert engine.info.settings["warm"]["shapes"] == [list(s) for s in shapes[role]]
        made = [len(e.info.settings["shape_sessions"]["shapes"]) for e in engines]
        assert plain.warmed is None and set(warm.warmed) == {"seconds", "det", "cls", "rec"}
        for page in pages:
            assert warm(page).texts == plain(page).texts
        # every shape the pages needed was warmed: no session made on first use
        assert [len(e.info.settings["shape_sessions"]["shapes"]) for e in engines] == made
