"""Issue 20's robustness cases: images (registered into the corpus by ``_corpus.py``).

One rule for image dtypes and channels on both pipeline paths (``amdinfer.preprocess.check_image``), 16-bit
files decoded alike by both decoders (``v >> 8``), and very elongated images letterboxed to at least one pixel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _corpus import CPU, case

import amdinfer
from amdinfer.errors import InputError


@functools.lru_cache(maxsize=1)
def _detector_model():
    from amdinfer.testing.models import yolov8

    return yolov8(image_size=64, num_classes=2)


def _named(name: str, fn: Callable[[Path], object]) -> Callable[[Path], object]:
    fn.__name__ = name
    return fn


# ---------------------------------------------------------------------------------------------- dtypes, channels
#: name -> (image, what the refusal must say). The stage-by-stage YOLO pipeline answered all of these (uint16:
#: top scores 1.0; floats in [0, 1]: 37 boxes instead of 43); the fused one refused them in other words.
_BAD_IMAGES: dict[str, tuple[Callable[[], np.ndarray], str]] = {
    "uint16": (
        lambda: np.full((48, 80, 3), 120 * 257, np.uint16),
        r"got dtype uint16 \(an image of shape \(48, 80, 3\)\), expected uint8 \(H, W, 3\); .*\(image >> 8\)",
    ),
    "float01": (
        lambda: np.full((48, 80, 3), 0.47, np.float32),
        r"got dtype float32 .*expected uint8 \(H, W, 3\); for floats in \[0, 1\] use \(image \* 255\)\.round\(\)",
    ),
    "int8": (lambda: np.zeros((48, 80, 3), np.int8), r"got dtype int8 .*np\.clip\(image, 0, 255\)"),
    "bool": (lambda: np.ones((48, 80, 3), bool), r"got dtype bool .*image\.astype\(np\.uint8\) \* 255"),
    "rgba": (
        lambda: np.zeros((48, 80, 4), np.uint8),
        r"got an image with 4 channels of shape \(48, 80, 4\), expected uint8 \(H, W, 3\); drop the alpha",
    ),
}


def _run_staged(image: np.ndarray) -> object:
    with amdinfer.yolo(_detector_model(), **CPU) as det:
        return det(image)


def _run_fused(image: np.ndarray) -> object:
    with amdinfer.yolo(_detector_model(), fuse=True, **CPU) as det:
        return det(image)


for _kind, (_make, _says) in _BAD_IMAGES.items():
    # Both paths: an InputError (a StageError too, located by the item) from LoadImage's check of the array.
    _where = r"^item 0: preprocess\[0\] LoadImage: InputError: LoadImage: "
    case("images", InputError, _where + _says)(
        _named(f"image_{_kind}_stage_by_stage", lambda d, make=_make: _run_staged(make()))
    )
    case("images", InputError, _where + _says)(_named(f"image_{_kind}_fused", lambda d, make=_make: _run_fused(make())))


# ---------------------------------------------------------------------------------------------- 16-bit files
def _decode_16_bit(d: Path, channels: int | None) -> str:
    import cv2

    from amdinfer.preprocess import LoadImage

    shape = (6, 9) if channels is None else (6, 9, channels)
    v = np.random.default_rng(20).integers(0, 65536, shape, dtype=np.uint16)
    path = d / f"case-16bit-{channels}.png"
    assert cv2.imwrite(str(path), v if channels is None else v[..., ::-1])  # OpenCV writes BGR
    high = (v >> 8).astype(np.uint8)  # by hand: the high byte
    rgb = np.repeat(high[..., None], 3, axis=2) if channels is None else high
    for backend in ("pillow", "opencv"):
        got = LoadImage(backend=backend)(path).data
        assert got.dtype == np.uint8 and np.array_equal(got, rgb), (backend, got[0, :3], rgb[0, :3])
        if channels is None:
            assert np.array_equal(LoadImage("L", backend=backend)(path).data, high), backend
    return "Pillow and OpenCV both decode it to v >> 8"


@case("images")
def image_png_16_bit_rgb_both_decoders(d: Path) -> object:
    return _decode_16_bit(d, 3)


@case("images")
def image_png_16_bit_grey_both_decoders(d: Path) -> object:
    # Pillow's convert() clipped 16-bit grey to 255 (99.5 % of the pixels); OpenCV took the high byte.
    return _decode_16_bit(d, None)


# ---------------------------------------------------------------------------------------------- elongated images
def _elongated(hw: tuple[int, int], fused_size: tuple[int, int] | None) -> str:
    from amdinfer.preprocess import Letterbox
    from amdinfer.reference import letterbox

    image = np.random.default_rng(hw[1]).integers(0, 256, (*hw, 3), dtype=np.uint8)
    want, _, _ = letterbox(image, 64)  # the NumPy reference
    staged = Letterbox(64, backend="numpy")(image).data
    assert np.array_equal(staged, want)
    opencv = Letterbox(64, backend="opencv")(image).data
    assert np.abs(opencv.astype(int) - want.astype(int)).max() <= 1
    short = int(np.argmin(hw))
    padded = int((want == 114).all(axis=(1 - short, 2)).sum())  # rows (or columns) of padding only
    assert padded == 63, padded  # one row or column of content
    if fused_size is not None:
        from onnx import TensorProto, helper

        from amdinfer.pipeline.fuse import fuse_model

        x = helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", 64, 64, 3])
        y = helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", 64, 64, 3])
        identity = helper.make_model(
            helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y]),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        model = fuse_model(identity, [Letterbox(64)], [], image_size=fused_size)
        with amdinfer.load(model, **CPU) as engine:
            got = engine.run({"images": image[None]})["y"][0]
        assert np.array_equal(got, opencv), "fused graph != OpenCV stage"
    with amdinfer.yolo(_detector_model(), **CPU) as det:
        staged_det = det(image)
        with det.fuse(image_size=fused_size) as fused:
            fused_det = fused(image)
    assert staged_det.image_shape == fused_det.image_shape == hw
    assert sorted(staged_det.classes.tolist()) == sorted(fused_det.classes.tolist())
    return f"letterboxed to one {'column' if short else 'row'} of content, the same on every path"


@case("images")
def image_elongated_20000x3(d: Path) -> object:
    return _elongated((20000, 3), (20000, 3))


@case("images")
def image_elongated_1001x7(d: Path) -> object:
    return _elongated((1001, 7), (1001, 7))


@case("images")
def image_elongated_fuse_640x3(d: Path) -> object:
    return _elongated((640, 3), (640, 3))


# ---------------------------------------------------------------------------------------------- decompression bombs
# Issue 35: a 1.17 MB PNG of 20000 x 20000 and a 727-byte JPEG whose SOF0 says 30000 x 30000 were decoded (+2.3 and
# +2.9..5.2 GB of memory). Each is refused from its header, by every decoder, and the process's peak memory
# barely moves (under the runner's address-space cap a decode would fail there instead).
def _png_bomb(size: int = 20000) -> bytes:
    """A real PNG: grey 8-bit, ``size x size`` zeros, deflated (about 400 kB for 20000)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row, parts = zlib.compressobj(9), b"\x00" * (size + 1), []
    for _ in range(size // 100):
        parts.append(packer.compress(row * 100))
    parts.append(packer.flush())
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")


def _jpeg_bomb(size: int = 30000) -> bytes:
    """A real 16 x 16 JPEG (Pillow's) whose SOF0 is rewritten to declare ``size x size``."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 128, np.uint8)).save(buf, "JPEG")
    raw = bytearray(buf.getvalue())
    at = raw.index(b"\xff\xc0")
    raw[at + 5 : at + 9] = size.to_bytes(2, "big") * 2  # height, width
    return bytes(raw)


def _peak_stays_small(fn: Callable[[], object]) -> object:
    """``fn()``, failing if this process's peak memory grew by more than 64 MiB while it ran."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    try:
        return fn()
    finally:
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grew < 64 << 10, f"peak memory grew by {grew >> 10} MiB while refusing a bomb"


def _refuse(raw: bytes, backend: str) -> object:
    from amdinfer.preprocess import LoadImage

    stage = LoadImage(backend=backend)
    return _peak_stays_small(lambda: stage(raw))


_BOMB = r"^LoadImage: \d+ bytes: refused as a decompression bomb: its {} header declares {n} x {n} \(width x height\)"
_LIMIT = r" = {:,} pixels, above the limit of 89,478,485 pixels"
for _backend in ("opencv", "pillow"):
    case("images", InputError, _BOMB.format("PNG", n=20000) + _LIMIT.format(20000**2), isolate=True)(
        _named(f"image_png_bomb_20000_{_backend}", lambda d, b=_backend: _refuse(_png_bomb(), b))
    )
    case("images", InputError, _BOMB.format("JPEG", n=30000) + _LIMIT.format(30000**2), isolate=True)(
        _named(f"image_jpeg_sof0_bomb_30000_{_backend}", lambda d, b=_backend: _refuse(_jpeg_bomb(), b))
    )


@case(
    "images",
    InputError,
    r"^item 1: preprocess\[0\] LoadImage: InputError: LoadImage: \d+ bytes: refused as a decompression bomb: its "
    r"JPEG header declares 30000 x 30000",
    isolate=True,
)
def image_jpeg_sof0_bomb_inside_pipeline_map(d: Path) -> object:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 90, np.uint8)).save(buf, "JPEG")
    with amdinfer.yolo(_detector_model(), imgsz=64, **CPU) as det:
        return _peak_stays_small(lambda: list(det.map([buf.getvalue(), _jpeg_bomb(), buf.getvalue()])))
