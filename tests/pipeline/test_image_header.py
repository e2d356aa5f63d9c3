"""The pixel limit: sizes read from image headers before decoding, one limit for every decoder (issue 35).

The truth of a hand-made header is the size written into it; the truth of a real file is the shape its encoder
(Pillow, OpenCV) was given. A bomb is refused with the declared size and the limit in the message, before any
decoder runs (a decoder that ran would have allocated gigabytes, or failed in its own words).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest

import amdinfer
from amdinfer.errors import InputError, OptionError, StageError
from amdinfer.preprocess import (
    DEFAULT_MAX_IMAGE_PIXELS,
    ImageHeader,
    LoadImage,
    check_image_pixels,
    read_image_header,
)

Image = pytest.importorskip("PIL.Image", reason="needs Pillow to encode the test images")
cv2 = pytest.importorskip("cv2", reason="needs OpenCV to encode the test images")


# ---------------------------------------------------------------------------------------------- hand-made headers
def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))


def _segment(code: int, payload: bytes) -> bytes:
    return struct.pack(">BBH", 0xFF, code, len(payload) + 2) + payload


def jpeg(width: int, height: int, sof: int = 0xC0, before: bytes = b"") -> bytes:
    """SOI, a JFIF APP0, ``before``, then an SOFn declaring ``width x height`` (one component)."""
    app0 = _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    frame = _segment(sof, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    return b"\xff\xd8" + app0 + before + frame + b"\xff\xd9"


def webp(kind: bytes, width: int, height: int) -> bytes:
    if kind == b"VP8 ":
        data = b"\x10\x02\x00\x9d\x01\x2a" + struct.pack("<HH", width, height)
    elif kind == b"VP8L":
        data = b"\x2f" + struct.pack("<I", (width - 1) | (height - 1) << 14)
    else:
        data = b"\x10\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"WEBP" + kind + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def gif(screen: tuple[int, int], frame: tuple[int, int, int, int]) -> bytes:
    lsd = struct.pack("<HHBBB", *screen, 0x80, 0, 0) + b"\x00" * 6  # a 2-colour global table
    ext = b"\x21\xf9\x04\x00\x00\x00\x00\x00"  # a graphic control extension: one sub-block
    return b"GIF89a" + lsd + ext + b"\x2c" + struct.pack("<HHHHB", *frame, 0) + b"\x02\x02\x44\x01\x00;"


def bmp(width: int, height: int, core: bool = False) -> bytes:
    dib = struct.pack("<IHHHH", 12, width, height, 1, 24) if core else struct.pack("<Iii", 40, width, height)
    return b"BM" + struct.pack("<IHHI", 0, 0, 0, 0) + dib + b"\x00" * 28


def tiff(width: int, height: int, order: str = "<", kind: int = 4, big: bool = False) -> bytes:
    mark = b"II" if order == "<" else b"MM"
    code = {3: "H", 4: "I", 16: "Q"}[kind]
    if big:
        head = mark + struct.pack(order + "HHHQ", 43, 8, 0, 16)
        entries = [struct.pack(order + "HHQ", 254, 4, 1) + struct.pack(order + "Q", 0)]
        for tag, v in ((256, width), (257, height)):
            entries.append(struct.pack(order + "HHQ", tag, kind, 1) + struct.pack(order + code, v).ljust(8, b"\0"))
        return head + struct.pack(order + "Q", len(entries)) + b"".join(entries) + b"\0" * 8
    head = mark + struct.pack(order + "HI", 42, 8)
    entries = [struct.pack(order + "HHII", 254, 4, 1, 0)]
    for tag, v in ((256, width), (257, height)):
        entries.append(struct.pack(order + "HHI", tag, kind, 1) + struct.pack(order + code, v).ljust(4, b"\0"))
    return head + struct.pack(order + "H", len(entries)) + b"".join(entries) + b"\0" * 4


def j2k(width: int, height: int, offset: tuple[int, int] = (0, 0)) -> bytes:
    siz = struct.pack(">HHIIIIIIIIH", 41, 0, width + offset[0], height + offset[1], *offset, 64, 64, 0, 0, 1)
    return b"\xff\x4f\xff\x51" + siz + b"\x07\x01\x01"


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload) + 8) + kind + payload


def jp2(ihdr: tuple[int, int], siz: tuple[int, int]) -> bytes:
    head = b"\x00\x00\x00\x0cjP  \r\n\x87\n" + _box(b"ftyp", b"jp2 \x00\x00\x00\x00jp2 ")
    jp2h = _box(b"jp2h", _box(b"ihdr", struct.pack(">IIHBBBB", ihdr[1], ihdr[0], 3, 7, 7, 0, 0)))
    return head + jp2h + _box(b"jp2c", j2k(*siz))


def avif(*sizes: tuple[int, int]) -> bytes:
    ipco = _box(b"ipco", b"".join(_box(b"ispe", b"\0\0\0\0" + struct.pack(">II", *s)) for s in sizes))
    meta = _box(b"meta", b"\0\0\0\0" + _box(b"hdlr", b"\0" * 24) + _box(b"iprp", ipco))
    return _box(b"ftyp", b"avif\x00\x00\x00\x00mif1avif") + meta


HEADERS: dict[str, tuple[bytes, tuple[str, int, int]]] = {
    "png": (png(20000, 30000), ("PNG", 20000, 30000)),
    "jpeg sof0": (jpeg(30000, 20000), ("JPEG", 30000, 20000)),
    "jpeg sof2 progressive": (jpeg(640, 480, 0xC2), ("JPEG", 640, 480)),
    "jpeg sof3 lossless": (jpeg(17, 9, 0xC3), ("JPEG", 17, 9)),
    "jpeg sof9 arithmetic": (jpeg(65535, 65535, 0xC9), ("JPEG", 65535, 65535)),
    "jpeg sof15": (jpeg(3, 4, 0xCF), ("JPEG", 3, 4)),
    # DHT (0xC4), JPG (0xC8) and DAC (0xCC) lie in the SOF range but declare no size: skipped by their length
    "jpeg dht jpg dac before sof": (
        jpeg(12, 34, before=b"".join(_segment(c, struct.pack(">BHHB", 8, 9999, 9999, 1)) for c in (0xC4, 0xC8, 0xCC))),
        ("JPEG", 12, 34),
    ),
    # fill bytes before a marker, a restart marker, bytes that are no marker (libjpeg skips them too), and an
    # EXIF APP1 that holds a thumbnail's SOF0 inside its payload
    "jpeg fill rst junk app1": (
        jpeg(50, 60, before=b"\xff\xff\xff\xd0junk\x00" + _segment(0xE1, b"Exif\0\0" + jpeg(9000, 9000))),
        ("JPEG", 50, 60),
    ),
    "webp vp8": (webp(b"VP8 ", 16383, 100), ("WebP", 16383, 100)),
    "webp vp8 scale bits": (webp(b"VP8 ", 0xC000 | 640, 0x4000 | 480), ("WebP", 640, 480)),
    "webp vp8l": (webp(b"VP8L", 16384, 16384), ("WebP", 16384, 16384)),
    "webp vp8x": (webp(b"VP8X", 1 << 24, 1 << 24), ("WebP", 1 << 24, 1 << 24)),
    "gif": (gif((300, 200), (0, 0, 300, 200)), ("GIF", 300, 200)),
    "gif frame past the screen": (gif((10, 10), (5, 3, 65535, 40000)), ("GIF", 65540, 40003)),
    "bmp": (bmp(40000, 30000), ("BMP", 40000, 30000)),
    "bmp top-down": (bmp(640, -480), ("BMP", 640, 480)),
    "bmp core": (bmp(65535, 2, core=True), ("BMP", 65535, 2)),
    "tiff le long": (tiff(100000, 3000), ("TIFF", 100000, 3000)),
    "tiff be short": (tiff(640, 480, ">", 3), ("TIFF", 640, 480)),
    "bigtiff long8": (tiff(1 << 20, 1 << 20, "<", 16, big=True), ("TIFF", 1 << 20, 1 << 20)),
    "bigtiff be": (tiff(7, 8, ">", 4, big=True), ("TIFF", 7, 8)),
    "pgm with comments": (b"P5\n# made by hand\n 40000 # width\n30000\n255\n", ("PNM", 40000, 30000)),
    "pbm": (b"P4 3 2\n\x00\x00", ("PNM", 3, 2)),
    "pam": (b"P7\nWIDTH 123\nHEIGHT 45\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n", ("PNM", 123, 45)),
    "pfm": (b"PF\n70000 2\n-1.0\n", ("PNM", 70000, 2)),
    "sun raster": (b"\x59\xa6\x6a\x95" + struct.pack(">7I", 30000, 4000, 24, 0, 1, 0, 0), ("Sun raster", 30000, 4000)),
    "hdr": (b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 480 +X 640\n", ("HDR", 640, 480)),
    "hdr x first": (b"#?RGBE\n\n+X 7 -Y 9\n", ("HDR", 7, 9)),
    "j2k": (j2k(30000, 30000), ("JPEG 2000", 30000, 30000)),
    "j2k offset": (j2k(100, 50, (1000, 2000)), ("JPEG 2000", 100, 50)),
    # the codestream's SIZ is what OpenJPEG allocates, whatever the ihdr box says
    "jp2 small ihdr large siz": (jp2((8, 8), (30000, 30000)), ("JPEG 2000", 30000, 30000)),
    "avif": (avif((30000, 30000)), ("AVIF/HEIF", 30000, 30000)),
    "avif thumbnail and primary": (avif((64, 64), (4000, 3000)), ("AVIF/HEIF", 4000, 3000)),
}  # fmt: skip


#: what Pillow writes, as real files (progressive JPEG, a JPEG with a 2 kB EXIF segment, lossless WebP ...)
PILLOW_FILES = [
    ("PNG", {}), ("JPEG", {}), ("JPEG", {"progressive": True}), ("JPEG", {"exif": b"Exif\0\0" + b"\0" * 2000}),
    ("WEBP", {}), ("WEBP", {"lossless": True}), ("GIF", {}), ("BMP", {}), ("TIFF", {}),
    ("TIFF", {"compression": "tiff_lzw"}), ("PPM", {}), ("JPEG2000", {}),
]  # fmt: skip


class TestReadImageHeader:
    @pytest.mark.parametrize("name", sorted(HEADERS))
    def test_hand_made_header_gives_the_size_written(self, name):
        raw, want = HEADERS[name]
        assert read_image_header(raw) == ImageHeader(*want)
        assert read_image_header(memoryview(raw)) == ImageHeader(*want)

    @pytest.mark.parametrize("name", sorted(HEADERS))
    def test_every_truncation_is_an_input_error_naming_the_format(self, name):
        raw, (fmt, _, _) = HEADERS[name]
        sizes = {len(raw[:n]) for n in range(8, len(raw))}
        for n in sorted(sizes):
            try:
                got = read_image_header(raw[:n])
            except InputError as exc:
                assert f"a {fmt} image whose header is" in str(exc) and "its size cannot be read" in str(exc)
            else:  # a prefix may already hold the whole header (the bytes after it are not read)
                assert got is None or got == ImageHeader(*HEADERS[name][1]), (n, got)

    @pytest.mark.parametrize("name", sorted(HEADERS))
    def test_garbage_after_the_signature_is_a_header_or_an_input_error(self, name):
        raw = HEADERS[name][0]
        rng = np.random.default_rng(len(name))
        for _ in range(200):
            bad = bytearray(raw)
            for at in rng.integers(4, len(raw), size=int(rng.integers(1, 6))):
                bad[at] = int(rng.integers(0, 256))
            try:
                got = read_image_header(bytes(bad))
            except InputError:
                continue
            assert got is None or (got.width >= 0 and got.height >= 0)

    def test_other_bytes_have_no_header(self):
        assert read_image_header(b"plain text, not an image") is None
        assert read_image_header(b"") is None
        assert read_image_header(_box(b"ftyp", b"isom\0\0\0\0isommp41")) is None  # an MP4 video is no HEIF image

    def test_malformed_headers_say_why(self):
        with pytest.raises(InputError, match=r"a PNG image whose header is malformed \(its first chunk is not IHDR\)"):
            read_image_header(b"\x89PNG\r\n\x1a\n" + _chunk(b"tEXt", b"x" * 13))
        with pytest.raises(InputError, match=r"a JPEG image whose header is malformed \(no SOF marker before SOS\)"):
            read_image_header(b"\xff\xd8" + _segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + b"\xff\xd9")
        with pytest.raises(InputError, match=r"a PNM image whose header is malformed \(got b'12x'"):
            read_image_header(b"P6\n12x 7\n255\n")

    @pytest.mark.parametrize("fmt, kw", PILLOW_FILES)
    def test_files_pillow_writes(self, fmt, kw):
        buf = io.BytesIO()
        Image.fromarray(np.zeros((37, 53, 3), np.uint8)).save(buf, fmt, **kw)
        header = read_image_header(buf.getvalue())
        assert header is not None and (header.width, header.height) == (53, 37)

    @pytest.mark.parametrize(
        "ext", [".png", ".jpg", ".webp", ".bmp", ".tiff", ".ppm", ".pgm", ".pam", ".pfm", ".ras", ".hdr", ".jp2"]
    )
    def test_files_opencv_writes(self, ext):
        image = np.zeros((37, 53, 3), np.uint8) if ext not in (".pgm",) else np.zeros((37, 53), np.uint8)
        try:
            ok, buf = cv2.imencode(ext, image.astype(np.float32) if ext in (".pfm", ".hdr") else image)
        except cv2.error as exc:  # pragma: no cover - a build without that codec
            pytest.skip(f"this OpenCV cannot write {ext}: {exc}")
        header = read_image_header(buf.tobytes())
        assert ok and header is not None and (header.width, header.height) == (53, 37)

    def test_animated_and_alpha_files_give_the_canvas(self):
        frames = [Image.fromarray(np.full((37, 53, 4), v, np.uint8)) for v in (0, 255)]
        for fmt in ("WEBP", "GIF", "PNG"):
            buf = io.BytesIO()
            frames[0].save(buf, fmt, save_all=True, append_images=frames[1:])
            assert read_image_header(buf.getvalue()) == ImageHeader("WebP" if fmt == "WEBP" else fmt, 53, 37)


# ---------------------------------------------------------------------------------------------- the limit
def _png_file(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 90, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


class TestCheckImagePixels:
    def test_at_the_limit_passes_one_above_is_refused(self):
        assert check_image_pixels(png(7, 5), 35) == ImageHeader("PNG", 7, 5)
        with pytest.raises(InputError) as info:
            check_image_pixels(png(7, 5), 34)
        assert str(info.value).startswith(
            "refused as a decompression bomb: its PNG header declares 7 x 5 (width x height) = 35 pixels, above the "
            "limit of 34 pixels"
        )

    def test_an_empty_image_is_refused(self):
        with pytest.raises(InputError, match=r"not a decodable image: its JPEG header declares 640 x 0 .*empty"):
            check_image_pixels(jpeg(640, 0), DEFAULT_MAX_IMAGE_PIXELS)

    def test_formats_read_by_pillow_only(self):
        buf = io.BytesIO()
        Image.fromarray(np.zeros((9, 11, 3), np.uint8)).save(buf, "TGA")
        assert read_image_header(buf.getvalue()) is None  # no signature read here: Pillow reads its header
        assert check_image_pixels(buf.getvalue(), 99) == ImageHeader("TGA", 11, 9)
        with pytest.raises(InputError, match=r"its TGA header declares 11 x 9 .* above the limit of 98 pixels"):
            check_image_pixels(buf.getvalue(), 98)

    def test_a_size_that_cannot_be_read_is_refused(self, monkeypatch):
        with pytest.raises(InputError, match=r"^not a decodable image: .*Pillow cannot identify it"):
            check_image_pixels(b"plain text", DEFAULT_MAX_IMAGE_PIXELS)
        buf = io.BytesIO()
        Image.fromarray(np.zeros((9, 11, 3), np.uint8)).save(buf, "TGA")
        monkeypatch.setitem(__import__("sys").modules, "PIL", None)  # as if Pillow were not installed
        with pytest.raises(InputError, match=r"Pillow is not installed to read it; its size must be known before"):
            check_image_pixels(buf.getvalue(), DEFAULT_MAX_IMAGE_PIXELS)

    def test_default_is_pillows_limit(self):
        assert DEFAULT_MAX_IMAGE_PIXELS == Image.MAX_IMAGE_PIXELS == 89_478_485


class TestLoadImageLimit:
    @pytest.mark.parametrize("backend", ["opencv", "pillow"])
    @pytest.mark.parametrize("bomb", ["png", "jpeg sof0", "webp vp8x", "tiff le long", "gif frame past the screen"])
    def test_bomb_refused_before_decoding_with_size_and_limit(self, backend, bomb):
        raw, (fmt, w, h) = HEADERS[bomb]
        with pytest.raises(InputError) as info:
            LoadImage(backend=backend)(raw)
        assert str(info.value) == (
            f"LoadImage: {len(raw)} bytes: refused as a decompression bomb: its {fmt} header declares {w} x {h} "
            f"(width x height) = {w * h:,} pixels, above the limit of 89,478,485 pixels (raise it for images you "
            "trust: LoadImage(max_pixels=...), the recipe option max_image_pixels or amdinfer serve --max-image-pixels)"
        )

    @pytest.mark.parametrize("backend", ["opencv", "pillow"])
    def test_a_lower_limit_refuses_a_normal_image_the_default_decodes(self, backend, tmp_path):
        raw = _png_file(8, 6)
        assert LoadImage(backend=backend)(raw).data.shape == (6, 8, 3)
        assert LoadImage(backend=backend, max_pixels=48)(raw).data.shape == (6, 8, 3)
        path = tmp_path / "small.png"
        path.write_bytes(raw)
        with pytest.raises(
            InputError, match=r"^LoadImage: '.*small\.png': refused .* = 48 pixels, above the limit of 47"
        ):
            LoadImage(backend=backend, max_pixels=47)(path)

    def test_nvjpeg_checks_the_header_before_the_gpu_decodes(self, monkeypatch):
        from amdinfer.preprocess import _nvjpeg

        decoded: list[int] = []
        monkeypatch.setattr(_nvjpeg, "check_nvjpeg", lambda: None)
        monkeypatch.setattr(
            _nvjpeg, "decode_jpeg_on_gpu", lambda raw, mode: decoded.append(len(raw)) or np.zeros((2, 2, 3), np.uint8)
        )
        stage = LoadImage(backend="nvjpeg", max_pixels=1000)
        with pytest.raises(InputError, match=r"its JPEG header declares 30000 x 20000 .* limit of 1,000 pixels"):
            stage(HEADERS["jpeg sof0"][0])
        assert decoded == []  # the GPU never saw the bomb
        small = jpeg(20, 50)
        assert stage(small).data.shape == (2, 2, 3) and decoded == [len(small)]
        with pytest.raises(InputError, match=r"its PNG header declares 20000 x 30000"):  # other formats: the host
            stage(HEADERS["png"][0])

    def test_a_pillow_image_over_the_limit_is_refused(self):
        with pytest.raises(InputError, match=r"LoadImage: a Pillow 'L' image of 100 x 10 \(width x height\) = 1,000"):
            LoadImage(max_pixels=999)(Image.new("L", (100, 10)))
        assert LoadImage(max_pixels=1000)(Image.new("L", (100, 10))).data.shape == (10, 100, 3)

    @pytest.mark.parametrize("bad", [0, -1, 2**30 + 1, True, 1.5, "1000", None])
    def test_bad_limits_are_option_errors(self, bad):
        with pytest.raises(OptionError, match=r"LoadImage: max_pixels: got .*, expected an int in 1..1073741824"):
            LoadImage(max_pixels=bad)

    def test_the_limit_shows_in_the_repr_when_set(self):
        assert "max_pixels=1000" in repr(LoadImage(max_pixels=1000))
        assert LoadImage(max_pixels=2**30).max_pixels == 2**30

    def test_pipeline_map_names_the_item(self):
        from amdinfer.preprocess import CenterCrop, HwcToChw, Normalize, Resize
        from amdinfer.testing.models import tiny_cnn

        pipe = amdinfer.Pipeline(
            preprocess=[LoadImage(max_pixels=10_000), Resize(32), CenterCrop(32), Normalize(scale=1 / 255), HwcToChw()],
            engine=tiny_cnn(),
            backend="ort",
            providers=["CPUExecutionProvider"],
        )
        with pipe:
            good = _png_file(40, 30)
            assert len(list(pipe.map([good, good]))) == 2
            with pytest.raises(StageError) as info:
                list(pipe.map([good, HEADERS["jpeg sof0"][0], good]))
        assert isinstance(info.value, InputError)
        assert str(info.value).startswith("item 1: preprocess[0] LoadImage: InputError: LoadImage: ")
        assert "its JPEG header declares 30000 x 20000 (width x height) = 600,000,000 pixels, above the limit of " \
               "10,000 pixels" in str(info.value)  # fmt: skip
