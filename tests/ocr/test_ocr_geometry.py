"""amdinfer.ocr against live RapidOCR on pages of extreme shapes: very wide strips (15:1 to 40:1), a very tall one
(1:20), tiny ones (8x200 to 24x80), and pages over 2000 pixels.

The pages are made here: Hershey text drawn by ``cv2.putText`` and bands cut from the shipped ``ocr_page0.png``.
Both OCRs read the same PNG files, so the drawing need not be the same across OpenCV versions. The peer runs in
the test: ``rapidocr`` 3.10.0 where its dependencies are installed (``nox -s ocr_golden``), else
``rapidocr-onnxruntime`` 1.4.4 (its page rules are the same code) with the same model files; both need pyclipper
and shapely. :class:`~amdinfer.text.PageFit`'s arithmetic is checked against RapidOCR's own functions
(``rapidocr/utils/process_img.py``, loaded from the wheel by path: it needs only OpenCV and NumPy).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from _models import DATA, models, needs_models

import amdinfer
from amdinfer.errors import InputError, OptionError
from amdinfer.stages import Sample
from amdinfer.text import PageFit
from amdinfer.text._det import PAGE, PAGE_MAP, page_to_original

FONT = cv2.FONT_HERSHEY_SIMPLEX


def _strip(text: str, height: int, width: int, scale: float, thick: int = 1) -> np.ndarray:
    """Black Hershey text centred on a white ``height x width`` canvas."""
    img = np.full((height, width, 3), 255, np.uint8)
    (tw, th), _ = cv2.getTextSize(text, FONT, scale, thick)
    cv2.putText(img, text, ((width - tw) // 2, (height + th) // 2), FONT, scale, (0, 0, 0), thick, cv2.LINE_AA)
    return img


@functools.cache
def _pages() -> dict[str, np.ndarray]:
    page0 = cv2.imread(str(DATA / "ocr_page0.png"))
    long_line = "Invoice 2024 total 31875 paid in full by card 4417 on the 9th of May"
    return {
        # the case: at 20:1 the detector's resize alone (shorter side to 736) gives 736x14720
        "wide_20to1": _strip("Invoice 2024-117 Total: 1,280.50 EUR", 60, 1200, 1.2, 2),
        "wide_40to1": _strip(long_line, 50, 2000, 1.0, 2),
        "wide_40to1_over_2000": _strip(long_line, 100, 4000, 2.0, 4),  # scaled to 64x1984, then bands
        "page0_band_15to1": page0[26:68],
        "page0_two_lines_30to1": cv2.hconcat([page0[26:68], page0[93:135]]),
        "tall_1to20": np.ascontiguousarray(np.rot90(_strip("Invoice 2024 total 31875", 60, 1200, 1.2, 2), -1)),
        "tiny_8x200": _strip("hello world 42", 8, 200, 0.3),  # scaled to 32x736, then bands
        "tiny_12x240": _strip("total 31875 paid", 12, 240, 0.3),
        "tiny_24x80": _strip("No 42", 24, 80, 0.5),
        "tiny_20x60": _strip("AB12", 20, 60, 0.5),  # RapidOCR reads nothing here (the page becomes 32x96)
    }


PAGES = tuple(_pages())


@pytest.fixture(scope="module")
def page_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("extreme_pages")
    files = {}
    for name, img in _pages().items():
        files[name] = folder / f"{name}.png"
        assert cv2.imwrite(str(files[name]), img)
    return files


def _process_img() -> Any:
    """RapidOCR 3.10.0's ``utils/process_img.py`` (its page rules), loaded by path without the package."""
    spec = importlib.util.find_spec("rapidocr")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the rapidocr 3.10.0 wheel (nox -s tests installs it --no-deps)")
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "process_img.py"
    loaded = importlib.util.spec_from_file_location("_rapidocr_process_img", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


SIZES = [(8, 200), (20, 60), (12, 240), (24, 80), (60, 1200), (50, 2000), (100, 4000), (1200, 60), (2400, 120)]
SIZES += [(30, 100), (30, 240), (31, 250), (400, 640), (172, 448), (2500, 1800), (17, 17), (29, 400), (45, 361)]


@pytest.mark.parametrize("size", SIZES)
def test_page_fit_is_rapidocrs_page_rules(size):
    rules = _process_img()
    h, w = size
    image = np.random.default_rng(h * 10007 + w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    want, ratio_h, ratio_w = rules.resize_image_within_bounds(image, 30, 2000)
    record = {"preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w}}
    want, record = rules.apply_vertical_padding(want, record, 8, 30)
    top = record["padding_1"]["top"]
    got = PageFit()(Sample(image, {}))
    np.testing.assert_array_equal(got.data, want)
    assert PageFit().fit(h, w) == (want.shape[0] - 2 * top, want.shape[1], top)
    if (want.shape, top) == (image.shape, 0):
        assert PAGE not in got.meta and PAGE_MAP not in got.meta  # an ordinary page passes untouched
        return
    assert got.meta[PAGE] is got.data and got.meta["orig_shape"] == (h, w)
    # quads anywhere in the fitted page (and past its edges) map back as RapidOCR maps its boxes
    rng = np.random.default_rng(h + w)
    quads = (rng.random((7, 4, 2)) * 1.2 - 0.1) * np.array([want.shape[1], want.shape[0]])
    quads = np.round(quads).astype(np.float32)
    expected = rules.map_boxes_to_original(quads.copy(), record, h, w)
    mapped, shape = page_to_original(quads, got.meta, None)
    np.testing.assert_array_equal(mapped, expected)
    assert shape == (h, w)


def test_page_fit_refuses_a_page_that_scales_to_nothing_as_rapidocr_does():
    rules = _process_img()
    image = np.zeros((5, 3000, 3), np.uint8)  # 5 * 2000 / 3000 = 3 rows -> 0 after rounding to 32
    with pytest.raises(rules.ResizeImgError):
        rules.resize_image_within_bounds(image, 30, 2000)
    with pytest.raises(InputError, match=r"PageFit: a page of size \(5, 3000\) scales to \(0, 1984\)"):
        PageFit()(image)


def test_page_fit_options_and_off_switches():
    assert PageFit(None, None, strip_ratio=None, min_height=0).fit(8, 4000) == (8, 4000, 0)
    assert PageFit(strip_ratio=None).fit(60, 1200) == (60, 1200, 0)  # only the height rule is left
    assert PageFit(strip_ratio=None).fit(30, 1200) == (30, 1200, 15)
    for bad in ({"min_side": 0}, {"max_side": 2.5}, {"strip_ratio": 0}, {"min_height": -1}):
        with pytest.raises(OptionError, match=next(iter(bad))):
            PageFit(**bad)
    with pytest.raises(OptionError, match="page_fit: got 'yes', expected True or False"):
        amdinfer.ocr(None, None, charset=["a"], page_fit="yes")


def _rapidocr() -> Any:
    """``path -> (texts, boxes (k, 4, 2), scores)`` of live RapidOCR with the models of tests/ocr, or a skip."""
    m = models()
    assert m is not None
    try:
        from rapidocr import RapidOCR

        params = {"Global.log_level": "warning", "EngineConfig.onnxruntime.intra_op_num_threads": 2}
        engine3 = RapidOCR(params=params)

        def run3(path: Path) -> tuple[list[str], np.ndarray, list[float]]:
            res = engine3(str(path))
            boxes = np.zeros((0, 4, 2)) if res.boxes is None else np.asarray(res.boxes)
            return list(res.txts or ()), boxes, [float(s) for s in (res.scores or ())]

        return run3
    except ImportError:
        pass
    try:
        from rapidocr_onnxruntime import RapidOCR as RapidOCR14
    except ImportError as exc:
        pytest.skip(f"needs RapidOCR's dependencies pyclipper and shapely (the test extra): {exc}")
    paths = {f"{k}_model_path": str(v) for k, v in m.items()}
    engine = RapidOCR14(**paths, intra_op_num_threads=2)

    def run(path: Path) -> tuple[list[str], np.ndarray, list[float]]:
        res, _ = engine(str(path))
        kept = [r for r in res or () if r[1].strip()]  # RapidOCR 3.10 drops blank lines, as amdinfer does
        return [r[1] for r in kept], np.asarray([r[0] for r in kept]), [float(r[2]) for r in kept]

    return run


@pytest.fixture(scope="module")
def rapid() -> Any:
    return _rapidocr()


@pytest.fixture(scope="module")
def pipe():
    m = models()
    assert m is not None
    p = amdinfer.ocr(m["det"], m["rec"], m["cls"], providers=["CPUExecutionProvider"], threads=2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def answers() -> dict[str, Any]:
    """amdinfer's lines per page, read once (the run_batch test compares against them)."""
    return {}


@needs_models
@pytest.mark.parametrize("name", PAGES)
def test_lines_and_boxes_match_live_rapidocr(rapid, pipe, page_files, answers, name):
    texts, boxes, scores = rapid(page_files[name])
    lines = pipe(str(page_files[name]))
    answers[name] = lines
    assert lines.texts == texts
    want = np.asarray(boxes, np.float32).reshape(-1, 4, 2)
    assert lines.quads.shape == want.shape
    assert np.abs(lines.quads - want).max(initial=0) <= 2.0
    np.testing.assert_allclose(lines.scores, scores, atol=2e-3)
    h, w = _pages()[name].shape[:2]
    assert lines.image_shape == (h, w) and lines.image is not None and lines.image.shape[:2] == (h, w)
    assert (lines.quads >= 0).all() and (lines.quads[..., 0] <= w).all() and (lines.quads[..., 1] <= h).all()


@needs_models
def test_the_wide_strip_is_one_line_with_every_digit(pipe, page_files):
    # issue 38: at 20:1 the cascade without RapidOCR's page rules split such a strip into words or lost it
    assert pipe(str(page_files["wide_20to1"])).texts == ["Invoice 2024-117 Total: 1,280.50 EUR"]


@needs_models
def test_run_batch_and_map_give_the_lines_of_single_calls(pipe, page_files, answers):
    names = [n for n in PAGES if n != "tall_1to20"]  # the tall page alone is a 736x14720 detector input
    paths = [str(page_files[n]) for n in names]
    one = [answers[n] if n in answers else pipe(p) for n, p in zip(names, paths)]
    batch = pipe.run_batch(paths)
    assert [r.texts for r in batch] == [r.texts for r in one]
    for a, b in zip(batch, one):
        np.testing.assert_array_equal(a.quads, b.quads)
        assert a.image_shape == b.image_shape
    with pipe.map(paths[:4], batch_size=1, workers=2) as results:
        assert [r.texts for r in results] == [r.texts for r in one[:4]]
