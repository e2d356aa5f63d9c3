"""``amdinfer serve DET --recipe ocr --rec REC --cls CLS``: PP-OCR pages in as PNG files, text lines out.

The truth is ``amdinfer.ocr`` with the same models run in this process on the same file bytes (and RapidOCR's
golden texts, which that equals on the CPU: tests/ocr/test_ocr_parity.py); the server is asked by tritonclient
over REST (binary tensor extension) and gRPC, two pages per request.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")
pytest.importorskip("cv2", reason="the OCR stages need OpenCV (the serve session installs it)")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ocr"))
from _models import DATA, PAGES, golden, models  # noqa: E402

from .conftest import bytes_input, free_port, running_server  # noqa: E402

MODELS = models()
pytestmark = pytest.mark.skipif(MODELS is None, reason="needs rapidocr==3.10.0 installed --no-deps (nox -s serve)")
#: two pages of different sizes per request, with lines on both
FILES = [(DATA / name).read_bytes() for name in PAGES[:2]]


@pytest.fixture(scope="module")
def local():
    import amdinfer

    assert MODELS is not None
    pipe = amdinfer.ocr(MODELS["det"], MODELS["rec"], MODELS["cls"], providers=["cpu"], keep_image=False)
    yield [pipe(f) for f in FILES]
    pipe.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert MODELS is not None
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(MODELS["det"]), "--name", "ocr", "--recipe", "ocr"]
    argv += ["--rec", str(MODELS["rec"]), "--cls", str(MODELS["cls"]), "--providers", "cpu"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-batch-size", "4", "--max-delay-ms", "20"]
    log = tmp_path_factory.mktemp("ocr") / "log.txt"
    with running_server(argv, http, grpc, log) as s:
        yield s
        assert s.stop() == 0
    assert re.search(r"pipeline 'ocr' on .*; batches of up to 4 rows", log.read_text()), log.read_text()


def _check(result, local) -> None:
    texts = [t.decode("utf-8") for t in result.as_numpy("texts").reshape(-1)]
    index = result.as_numpy("quads_batch_index")
    quads, scores = result.as_numpy("quads"), result.as_numpy("scores")
    assert quads.shape == (len(texts), 4, 2) and scores.shape == index.shape == (len(texts),)
    for page, want in enumerate(local):
        mine = index == page
        assert [t for t, m in zip(texts, mine) if m] == want.texts == golden()[PAGES[page]]["texts"]
        assert np.abs(quads[mine] - want.quads).max(initial=0) <= 1.0
        np.testing.assert_allclose(scores[mine], want.scores, atol=2e-3)


def test_metadata_says_pages_in_as_bytes(server) -> None:
    meta = httpclient.InferenceServerClient(server.http).get_model_metadata("ocr")
    assert meta["inputs"] == [{"name": "images", "datatype": "BYTES", "shape": [-1]}]


def test_rest_answers_the_lines_of_each_page_in_reading_order(server, local) -> None:
    assert sum(len(p) for p in local) >= 10  # the pages have lines
    _check(httpclient.InferenceServerClient(server.http).infer("ocr", [bytes_input(httpclient, FILES)]), local)


def test_grpc_answers_the_same(server, local) -> None:
    _check(grpcclient.InferenceServerClient(server.grpc).infer("ocr", [bytes_input(grpcclient, FILES)]), local)


def test_ocr_without_rec_is_a_one_line_error() -> None:
    import subprocess

    assert MODELS is not None
    proc = subprocess.run(
        [sys.executable, "-m", "amdinfer", "serve", str(MODELS["det"]), "--recipe", "ocr", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == (
        "amdinfer serve: OptionError: recipe_options: 'ocr' needs rec (the recogniser model; cls, the classifier, "
        "is optional)"
    )
