"""LoadImage's JPEG path (decoded straight to RGB) and single_threaded_opencv (OpenCV's pool while placing).

The truth for pixels is a bare decode of the same file by OpenCV (``cv2.imdecode(..., IMREAD_COLOR)``, channels
reversed) and by Pillow (``exif_transpose`` + ``convert("RGB")``), both libjpeg-turbo.
"""

from __future__ import annotations

import io
import logging
import threading

import numpy as np
import pytest

from amdinfer.errors import OptionError
from amdinfer.pipeline._executor import Executor
from amdinfer.preprocess import LoadImage, _cv_threads, read_image_header
from amdinfer.preprocess._cv_threads import single_threaded_opencv

cv2 = pytest.importorskip("cv2")
Image = pytest.importorskip("PIL.Image")
ImageOps = pytest.importorskip("PIL.ImageOps")


def _page(seed: int, shape: tuple[int, ...] = (96, 130, 3)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    smooth = np.linspace(0, 200, shape[0] * shape[1]).reshape(shape[:2])
    image = (smooth[..., None] if len(shape) == 3 else smooth) + rng.integers(0, 55, shape)
    return image.astype(np.uint8)


def _jpeg(image: np.ndarray, orientation: int = 1, subsampling: int = 2, progressive: bool = False) -> bytes:
    pil = Image.fromarray(image)
    exif = pil.getexif()
    if orientation != 1:
        exif[0x0112] = orientation
    buf = io.BytesIO()
    pil.save(buf, "JPEG", quality=88, exif=exif.tobytes(), subsampling=subsampling, progressive=progressive)
    return buf.getvalue()


def _bare_cv2(raw: bytes, flag: int) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(raw, np.uint8), flag)


def _bare_pillow(raw: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(raw)) as pil:
        return np.asarray(ImageOps.exif_transpose(pil).convert("RGB"))


JPEGS = [pytest.param(dict(orientation=o), id=f"exif{o}") for o in range(1, 9)] + [
    pytest.param(dict(subsampling=0), id="444"),
    pytest.param(dict(subsampling=1), id="422"),
    pytest.param(dict(progressive=True), id="progressive"),
]


@pytest.mark.parametrize("kind", JPEGS)
def test_jpeg_pixels_equal_a_bare_decode(kind, tmp_path) -> None:
    raw = _jpeg(_page(3), **kind)
    path = tmp_path / "page.jpg"
    path.write_bytes(raw)
    bgr = _bare_cv2(raw, cv2.IMREAD_COLOR)
    for source in (path, raw):
        rgb = LoadImage(backend="opencv")(source).data
        assert rgb.dtype == np.uint8 and rgb.flags.c_contiguous
        np.testing.assert_array_equal(rgb, bgr[..., ::-1])
        np.testing.assert_array_equal(rgb, _bare_pillow(raw))  # the same libjpeg-turbo IDCT and upsampling
        np.testing.assert_array_equal(LoadImage("BGR", backend="opencv")(source).data, bgr)
        np.testing.assert_array_equal(LoadImage("L", backend="opencv")(source).data, _bare_cv2(raw, 0))
        np.testing.assert_array_equal(LoadImage(backend="pillow")(source).data, rgb)


def test_grey_jpeg_is_repeated_into_rgb() -> None:
    raw = _jpeg(_page(4, (40, 50)))
    grey = _bare_cv2(raw, cv2.IMREAD_GRAYSCALE)
    np.testing.assert_array_equal(LoadImage(backend="opencv")(raw).data, np.repeat(grey[..., None], 3, axis=2))


def test_without_imread_color_rgb_the_swap_gives_the_same_pixels(monkeypatch) -> None:
    raw = _jpeg(_page(5), orientation=6)
    want = LoadImage(backend="opencv")(raw).data
    monkeypatch.delattr(cv2, "IMREAD_COLOR_RGB", raising=False)  # OpenCV before 4.10
    np.testing.assert_array_equal(LoadImage(backend="opencv")(raw).data, want)


def test_sixteen_bit_tiff_keeps_the_swap() -> None:
    """OpenCV 5.0's IMREAD_COLOR_RGB gives zeros for a 16-bit TIFF: only JPEGs are decoded straight to RGB."""
    rgb16 = (np.arange(4 * 5 * 3, dtype=np.uint16).reshape(4, 5, 3) * 997).astype(np.uint16)
    ok, buf = cv2.imencode(".tiff", rgb16[..., ::-1])
    assert ok
    np.testing.assert_array_equal(LoadImage(backend="opencv")(buf.tobytes()).data, (rgb16 >> 8).astype(np.uint8))


def test_the_resolved_decoder_is_not_pickled() -> None:
    import pickle

    stage = LoadImage(backend="opencv")
    stage(_jpeg(_page(6)))
    assert "_resolved" in stage.__dict__
    again = pickle.loads(pickle.dumps(stage))
    assert "_resolved" not in again.__dict__ and again == stage


def test_decoder_choice_errors_name_the_argument() -> None:
    with pytest.raises(OptionError, match=r"^backend: got 'turbo', expected one of \("):
        LoadImage(backend="turbo")


# ------------------------------------------------------------------ single_threaded_opencv
@pytest.fixture
def opencv_threads():
    """OpenCV's pool at 3 threads for the test (a count the context must put back), then as it was."""
    before = cv2.getNumThreads()
    cv2.setNumThreads(3)
    yield 3
    cv2.setNumThreads(before)
    assert _cv_threads._users == 0 and _cv_threads._saved is None


def test_context_restores_the_count_nested_and_on_errors(opencv_threads) -> None:
    with single_threaded_opencv():
        assert cv2.getNumThreads() == 1
        with pytest.raises(ZeroDivisionError):
            with single_threaded_opencv():
                assert cv2.getNumThreads() == 1
                1 / 0  # noqa: B018
        assert cv2.getNumThreads() == 1  # the outer one still runs
    assert cv2.getNumThreads() == opencv_threads
    with pytest.raises(KeyError):
        with single_threaded_opencv():
            raise KeyError("x")
    assert cv2.getNumThreads() == opencv_threads


def test_context_inactive_and_a_count_set_inside_are_left_alone(opencv_threads) -> None:
    with single_threaded_opencv(False):
        assert cv2.getNumThreads() == opencv_threads
    with single_threaded_opencv():
        cv2.setNumThreads(2)  # the caller's own choice, made while it ran
    assert cv2.getNumThreads() == 2


def test_context_from_several_threads_restores_once_the_last_ends(opencv_threads) -> None:
    inside, go, seen = threading.Barrier(4), threading.Event(), []

    def user() -> None:
        with single_threaded_opencv():
            inside.wait()
            go.wait()
            seen.append(cv2.getNumThreads())

    threads = [threading.Thread(target=user) for _ in range(3)]
    for t in threads:
        t.start()
    inside.wait()
    assert cv2.getNumThreads() == 1
    go.set()
    for t in threads:
        t.join()
    assert seen == [1, 1, 1] and cv2.getNumThreads() == opencv_threads


def test_context_logs_once_at_debug(opencv_threads, monkeypatch, caplog) -> None:
    monkeypatch.setattr(_cv_threads, "_logged", False)
    with caplog.at_level(logging.DEBUG, logger="amdinfer.preprocess"):
        for _ in range(3):
            with single_threaded_opencv():
                pass
    said = [r for r in caplog.records if "OpenCV's thread pool set to 1 thread (from 3)" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.DEBUG


def test_context_without_opencv_is_a_no_op(monkeypatch) -> None:
    monkeypatch.setattr(_cv_threads, "_opencv", lambda: None)
    with single_threaded_opencv():
        pass
    assert _cv_threads._users == 0 and _cv_threads._saved is None


def _counting_executor(seen: list[int]) -> Executor:
    def place(i, item, slot):
        seen.append(cv2.getNumThreads())
        slot((1,))[:] = item
        return i

    return Executor(place, lambda batch, metas: {"y": batch[:, 0]}, lambda out, metas: list(out["y"]), threads=2)


@pytest.mark.parametrize("workers", [1, 2])
def test_map_places_with_opencv_single_threaded_on_several_workers(opencv_threads, workers) -> None:
    seen: list[int] = []
    ex = _counting_executor(seen)
    assert [int(v) for v in ex.map(range(6), batch_size=2, workers=workers)] == list(range(6))
    assert set(seen) == ({1} if workers > 1 else {opencv_threads})
    assert cv2.getNumThreads() == opencv_threads
    ex.close()


def test_map_left_early_and_run_batch_restore_the_count(opencv_threads) -> None:
    seen: list[int] = []
    ex = _counting_executor(seen)
    it = iter(ex.map(range(20), batch_size=2, workers=2))
    next(it)
    it.close()  # type: ignore[attr-defined]
    assert cv2.getNumThreads() == opencv_threads
    seen.clear()
    assert [int(v) for v in ex.run_batch(list(range(4)))] == [0, 1, 2, 3]
    assert set(seen) == {1} and cv2.getNumThreads() == opencv_threads
    seen.clear()
    ex.run_batch([7])  # one item: placed here, OpenCV's pool as it was
    assert seen == [opencv_threads]
    ex.close()


def test_auto_decodes_a_plain_jpeg_with_opencv_and_the_same_pixels_as_pillow() -> None:
    raw = _jpeg(_page(7), orientation=8)
    stage = LoadImage()  # "auto": Pillow first, but a plain JPEG with OpenCV
    np.testing.assert_array_equal(stage(raw).data, _bare_pillow(raw))
    assert stage.__dict__.get("_resolved_jpeg") == "opencv"
    np.testing.assert_array_equal(LoadImage("BGR")(raw).data, _bare_cv2(raw, cv2.IMREAD_COLOR))
    grey = LoadImage("L")  # "L" stays Pillow's (its luma, within 1 of OpenCV's)
    grey(raw)
    assert "_resolved_jpeg" not in grey.__dict__


def test_auto_keeps_pillow_for_a_cmyk_jpeg() -> None:
    buf = io.BytesIO()
    Image.fromarray(_page(8, (20, 24, 3))).convert("CMYK").save(buf, "JPEG")
    header = read_image_header(buf.getvalue())
    assert (header.format, header.sample_bits, header.components) == ("JPEG", 8, 4)
    stage = LoadImage()
    np.testing.assert_array_equal(stage(buf.getvalue()).data, LoadImage(backend="pillow")(buf.getvalue()).data)
    assert "_resolved_jpeg" not in stage.__dict__
    colour = read_image_header(_jpeg(_page(9)))
    assert (colour.sample_bits, colour.components) == (8, 3) and read_image_header(
        _jpeg(_page(9, (8, 8)))
    ).components == 1
