"""An encoded image's declared size, read from its header before anything decodes it: the pixel limit.

A decompression bomb is a small file whose header declares a huge image (a 1.2 MB PNG of 20000 x 20000, a
727-byte JPEG whose SOF0 says 30000 x 30000): decoders allocate what the header declares. Every decoder
:class:`~amdinfer.preprocess.LoadImage` uses (OpenCV, Pillow, nvJPEG) and the server's encoded-image inputs
check the size here first, against one limit (:data:`DEFAULT_MAX_IMAGE_PIXELS`, Pillow's ``MAX_IMAGE_PIXELS``).

Formats read here, each by its own header (what OpenCV's decoders recognise, by the same signatures): PNG
(IHDR), JPEG (the first SOF0-SOF15 marker, segments walked as libjpeg does), WebP (VP8, VP8L, VP8X), GIF (the
logical screen and the first frame), BMP, TIFF and BigTIFF (the first IFD), PNM/PAM/PFM, Sun raster, Radiance
HDR, JPEG 2000 (codestream SIZ, and the JP2 ``ihdr`` box) and AVIF/HEIF (the ``ispe`` boxes). Any other format
is sized by Pillow's ``Image.open`` (which reads the header only) when Pillow is installed, and refused
otherwise: a size that cannot be read is not checked, so it is not decoded.
"""

from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, OptionError

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "MAX_IMAGE_PIXELS_BOUND",
    "ImageHeader",
    "check_image_pixels",
    "check_max_image_pixels",
    "read_image_header",
]

#: Pillow's ``PIL.Image.MAX_IMAGE_PIXELS`` (``1024 * 1024 * 1024 // 4 // 3``): about 256 MiB of RGB pixels.
DEFAULT_MAX_IMAGE_PIXELS = 89_478_485
#: the largest limit that may be set: OpenCV's own (``OPENCV_IO_MAX_IMAGE_PIXELS``, 2**30), past which it
#: refuses to decode anyway.
MAX_IMAGE_PIXELS_BOUND = 1 << 30

_HINT = "LoadImage(max_pixels=...), the recipe option max_image_pixels or amdinfer serve --max-image-pixels"


def check_max_image_pixels(value: object, name: str = "max_pixels") -> int:
    """``value`` as a pixel limit: an int in ``1 .. MAX_IMAGE_PIXELS_BOUND`` (2**30).

    Raises:
        OptionError: not an int (a bool is not one), or outside those bounds; the message names ``name``.

    Example:
        >>> check_max_image_pixels(1_000_000)
        1000000
        >>> check_max_image_pixels(0, "max_image_pixels")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: max_image_pixels: got 0, expected an int in 1..1073741824 (pixels per image)
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_IMAGE_PIXELS_BOUND:
        raise OptionError(f"{name}: got {value!r}, expected an int in 1..{MAX_IMAGE_PIXELS_BOUND} (pixels per image)")
    return int(value)


@dataclass(frozen=True)
class ImageHeader:
    """What an image's header declares: its format and its size in pixels (before any EXIF rotation).

    For a JPEG also its frame's ``sample_bits`` (8 or 12) and ``components`` (1 grey, 3 colour, 4 CMYK), read
    from the same SOF marker (``None`` for other formats; neither is shown nor compared).

    Example:
        >>> h = ImageHeader("PNG", 640, 480)
        >>> h.pixels, str(h)
        (307200, 'PNG header declares 640 x 480 (width x height) = 307,200 pixels')
    """

    format: str
    width: int
    height: int
    sample_bits: int | None = field(default=None, repr=False, compare=False)
    components: int | None = field(default=None, repr=False, compare=False)

    @property
    def pixels(self) -> int:
        """``width * height``."""
        return self.width * self.height

    def __str__(self) -> str:
        return f"{self.format} header declares {self.width} x {self.height} (width x height) = {self.pixels:,} pixels"


class _Truncated(Exception):
    """A read past the end of the header (turned into an InputError naming the format)."""


class _Malformed(Exception):
    """A header whose fields make no sense (turned into an InputError naming the format)."""


class _Reader:
    """Bounds-checked reads of ``raw``: a read past its end raises :class:`_Truncated`, never an IndexError."""

    def __init__(self, raw: bytes | bytearray) -> None:
        self.raw = raw  # the caller's buffer: no copy of a large file
        self.size = len(raw)

    def find(self, byte: bytes, offset: int) -> int:
        """The offset of the next ``byte`` from ``offset`` on."""
        at = self.raw.find(byte, offset)
        if at < 0:
            raise _Truncated
        return at

    def take(self, offset: int, n: int) -> bytes:
        if offset < 0 or offset + n > self.size:
            raise _Truncated
        return bytes(self.raw[offset : offset + n])

    def unpack(self, fmt: str, offset: int) -> tuple[Any, ...]:
        s = struct.Struct(fmt)
        return s.unpack(self.take(offset, s.size))


# ---------------------------------------------------------------------------------------------- the formats
def _png(r: _Reader) -> tuple[int, int]:
    length, kind = r.unpack(">I4s", 8)
    if kind != b"IHDR" or length < 8:
        raise _Malformed("its first chunk is not IHDR")
    width, height = r.unpack(">II", 16)
    return width, height


#: SOF0..SOF15 except DHT (0xC4), JPG (0xC8) and DAC (0xCC): the markers that declare the frame's size
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM, RST0..7: no length


def _jpeg(r: _Reader) -> tuple[int, int, int, int]:
    # libjpeg's walk: SOI first; then markers, each 0xFF (any fill 0xFF bytes) and a code; bytes that are no
    # marker are skipped as libjpeg skips them ("extraneous bytes before marker"), so this finds its SOF.
    offset = 2
    while True:
        offset = r.find(b"\xff", offset)
        while r.take(offset, 1) == b"\xff":
            offset += 1
        code = r.take(offset, 1)[0]
        offset += 1
        if code == 0x00 or code in _STANDALONE:  # a stuffed zero (no marker), or a marker without a length
            continue
        if code in (0xD8, 0xD9, 0xDA):
            raise _Malformed(f"no SOF marker before {'SOI' if code == 0xD8 else 'EOI' if code == 0xD9 else 'SOS'}")
        (length,) = r.unpack(">H", offset)
        if length < 2:
            raise _Malformed(f"marker 0xFF{code:02X} has length {length}")
        if code in _SOF:
            precision, height, width, components = r.unpack(">BHHB", offset + 2)
            return width, height, precision, components
        offset += length


def _webp(r: _Reader) -> tuple[int, int]:
    kind = r.take(12, 4)
    if kind == b"VP8 ":
        if r.take(23, 3) != b"\x9d\x01\x2a":
            raise _Malformed("its VP8 frame has no start code")
        width, height = r.unpack("<HH", 26)
        return width & 0x3FFF, height & 0x3FFF
    if kind == b"VP8L":
        if r.take(20, 1) != b"\x2f":
            raise _Malformed("its VP8L bitstream has no signature")
        (bits,) = r.unpack("<I", 21)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8X":
        w = r.take(24, 3)
        h = r.take(27, 3)
        return int.from_bytes(w, "little") + 1, int.from_bytes(h, "little") + 1
    raise _Malformed(f"its first chunk is {kind!r}, expected VP8, VP8L or VP8X")


def _gif(r: _Reader) -> tuple[int, int]:
    width, height, flags = r.unpack("<HHB", 6)
    offset = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while True:  # to the first image descriptor: a frame may reach past the logical screen
        block = r.take(offset, 1)[0]
        if block == 0x2C:
            left, top, w, h = r.unpack("<HHHH", offset + 1)
            return max(width, left + w), max(height, top + h)
        if block != 0x21:
            raise _Malformed(f"block 0x{block:02X} before the first image")
        offset += 2
        while (n := r.take(offset, 1)[0]) != 0:  # the extension's sub-blocks
            offset += n + 1
        offset += 1


def _bmp(r: _Reader) -> tuple[int, int]:
    (header,) = r.unpack("<I", 14)
    if header == 12:  # OS/2 BITMAPCOREHEADER
        return r.unpack("<HH", 18)  # type: ignore[return-value]
    if header < 16:
        raise _Malformed(f"its DIB header is {header} bytes")
    width, height = r.unpack("<ii", 18)
    return abs(width), abs(height)  # a negative height is a top-down image


def _tiff(r: _Reader) -> tuple[int, int]:
    order = "<" if r.take(0, 2) == b"II" else ">"
    (version,) = r.unpack(order + "H", 2)
    big = version == 43
    if big:
        (offset,) = r.unpack(order + "Q", 8)
        (count,) = r.unpack(order + "Q", offset)
        entry, start = 20, offset + 8
    else:
        (offset,) = r.unpack(order + "I", 4)
        (count,) = r.unpack(order + "H", offset)
        entry, start = 12, offset + 2
    size: dict[int, int] = {}
    for i in range(min(count, 4096)):
        at = start + i * entry
        tag, kind = r.unpack(order + "HH", at)
        if tag not in (256, 257):
            continue
        value_at = at + (12 if big else 8)
        formats = {3: "H", 4: "I", 16: "Q"}  # SHORT, LONG, LONG8
        if kind not in formats:
            raise _Malformed(f"its image {'width' if tag == 256 else 'length'} has field type {kind}")
        (size[tag],) = r.unpack(order + formats[kind], value_at)
        if len(size) == 2:
            return size[256], size[257]
    raise _Malformed("its first IFD has no ImageWidth and ImageLength")


_TOKEN = re.compile(rb"(?:\s|#[^\n]*\n?)*([^\s#]+)")


def _pnm(r: _Reader) -> tuple[int, int]:
    head = bytes(r.raw[:4096])
    if head[:2] == b"P7":  # PAM: "WIDTH n" and "HEIGHT n" lines before ENDHDR
        if b"ENDHDR" not in head:
            raise _Truncated
        fields = dict(re.findall(rb"(?m)^\s*(WIDTH|HEIGHT)\s+(\S+)", head.split(b"ENDHDR", 1)[0]))
        if b"WIDTH" not in fields or b"HEIGHT" not in fields:
            raise _Truncated
        return _number(fields[b"WIDTH"]), _number(fields[b"HEIGHT"])
    numbers: list[int] = []
    offset = 2
    while len(numbers) < 2:
        m = _TOKEN.match(head, offset)
        if m is None or m.end() >= len(head):
            raise _Truncated
        numbers.append(_number(m.group(1)))
        offset = m.end()
    return numbers[0], numbers[1]


def _number(token: bytes) -> int:
    if not token.isdigit() or len(token) > 18:
        raise _Malformed(f"got {token[:20]!r} where a size was expected")
    return int(token)


def _sun(r: _Reader) -> tuple[int, int]:
    return r.unpack(">II", 4)  # type: ignore[return-value]


def _hdr(r: _Reader) -> tuple[int, int]:
    head = bytes(r.raw[:65536])
    end = head.find(b"\n\n")
    if end < 0:
        raise _Truncated
    rest = head[end + 2 :]
    if b"\n" not in rest:  # the resolution line, whole: a cut one would give another size
        raise _Truncated
    line = rest.split(b"\n", 1)[0].split()
    if len(line) != 4 or line[0] not in (b"-Y", b"+Y", b"-X", b"+X") or line[2] not in (b"-Y", b"+Y", b"-X", b"+X"):
        raise _Malformed(f"its resolution line is {b' '.join(line)[:40]!r}")
    first, second = _number(line[1]), _number(line[3])
    return (second, first) if line[0].endswith(b"Y") else (first, second)


def _siz(r: _Reader, offset: int) -> tuple[int, int]:
    if r.take(offset, 4) != b"\xff\x4f\xff\x51":
        raise _Malformed("its codestream does not start with SOC and SIZ")
    x, y, x0, y0 = r.unpack(">IIII", offset + 8)
    return max(0, x - x0), max(0, y - y0)


def _boxes(r: _Reader, start: int, end: int) -> list[tuple[bytes, int, int]]:
    """The ISO base media boxes in ``[start, end)``: (type, payload start, payload end)."""
    out: list[tuple[bytes, int, int]] = []
    offset = start
    while offset + 8 <= end:
        size, kind = r.unpack(">I4s", offset)
        head = 8
        if size == 1:
            (size,) = r.unpack(">Q", offset + 8)
            head = 16
        elif size == 0:
            size = end - offset
        if size < head:
            raise _Malformed(f"box {kind!r} declares {size} bytes")
        if offset + size > end:
            raise _Truncated
        out.append((kind, offset + head, offset + size))
        offset += size
    return out


def _jp2(r: _Reader) -> tuple[int, int]:
    sizes: list[tuple[int, int]] = []
    boxes = _boxes(r, 0, r.size)
    for kind, start, end in boxes:
        if kind == b"jp2h":
            for inner, s, _e in _boxes(r, start, end):
                if inner == b"ihdr":
                    height, width = r.unpack(">II", s)
                    sizes.append((width, height))
        elif kind == b"jp2c":  # the codestream's SIZ: what the decoder allocates
            sizes.append(_siz(r, start))
    if not any(kind == b"jp2c" for kind, _s, _e in boxes):
        raise _Malformed("no codestream (jp2c box)")
    return max(sizes, key=lambda s: s[0] * s[1])


_HEIF_BRANDS = frozenset([b"avif", b"avis", b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"])


def _heif(r: _Reader) -> tuple[int, int]:
    sizes: list[tuple[int, int]] = []

    def walk(start: int, end: int) -> None:
        for kind, s, e in _boxes(r, start, end):
            if kind == b"meta":
                walk(s + 4, e)  # a full box: version and flags first
            elif kind in (b"iprp", b"ipco"):
                walk(s, e)
            elif kind == b"ispe":
                width, height = r.unpack(">II", s + 4)
                sizes.append((width, height))

    walk(0, r.size)
    if not sizes:
        raise _Malformed("no ispe (image size) box")
    return max(sizes, key=lambda s: s[0] * s[1])  # the primary image, its thumbnails, alpha, grid tiles


def _is_heif(raw: bytes) -> bool:
    if raw[4:8] != b"ftyp":
        return False
    size = int.from_bytes(raw[:4], "big")
    brands = raw[8:12] + raw[16 : min(max(size, 16), 64)]
    return any(brands[i : i + 4] in _HEIF_BRANDS for i in range(0, len(brands) - 3, 4))


def _format(raw: bytes) -> str | None:
    """The format ``raw``'s signature names (the signatures OpenCV's decoders check), or ``None``."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if raw.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "WebP"
    if raw[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if raw[:2] == b"BM":
        return "BMP"
    if raw[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "TIFF"
    if raw[:1] == b"P" and raw[1:2] and raw[1:2] in b"1234567Ff" and raw[2:3].isspace():
        return "PNM"
    if raw[:4] == b"\x59\xa6\x6a\x95":
        return "Sun raster"
    if raw.startswith((b"#?RADIANCE", b"#?RGBE")):
        return "HDR"
    if raw.startswith(b"\xff\x4f\xff\x51"):
        return "JPEG 2000"
    if raw.startswith(b"\x00\x00\x00\x0cjP  \r\n\x87\n"):
        return "JP2"
    if _is_heif(raw):
        return "AVIF/HEIF"
    return None


_READERS = {
    "PNG": _png, "JPEG": _jpeg, "WebP": _webp, "GIF": _gif, "BMP": _bmp, "TIFF": _tiff, "PNM": _pnm,
    "Sun raster": _sun, "HDR": _hdr, "JPEG 2000": lambda r: _siz(r, 0), "JP2": _jp2, "AVIF/HEIF": _heif,
}  # fmt: skip


def read_image_header(raw: bytes | bytearray | memoryview) -> ImageHeader | None:
    """The size ``raw``'s header declares, for the formats read here (see the module); ``None`` for others.

    Nothing is decoded: a few fields are read from the first bytes (a JPEG's segments up to its SOF marker).

    Raises:
        InputError: a known format whose header is truncated or malformed (the message names the format).

    Example:
        >>> import struct
        >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + struct.pack(">I4sII", 13, b"IHDR", 20000, 30000)
        >>> read_image_header(png)
        ImageHeader(format='PNG', width=20000, height=30000)
        >>> read_image_header(b"plain text") is None
        True
        >>> read_image_header(png[:20])
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: a PNG image whose header is truncated (20 bytes), so its size cannot be read
    """
    if isinstance(raw, memoryview):
        raw = raw.tobytes()
    head = bytes(raw[:64])
    kind = _format(head)
    if kind is None:
        return None
    fmt = "JPEG 2000" if kind == "JP2" else kind
    try:
        width, height, *frame = _READERS[kind](_Reader(raw))  # a JPEG's: its precision and components too
    except _Truncated:
        raise InputError(
            f"a {fmt} image whose header is truncated ({len(raw)} bytes), so its size cannot be read"
        ) from None
    except _Malformed as exc:
        raise InputError(f"a {fmt} image whose header is malformed ({exc}), so its size cannot be read") from None
    return ImageHeader(fmt, int(width), int(height), *(int(v) for v in frame))


def _pillow_header(raw: bytes | bytearray | memoryview) -> ImageHeader | None:
    """The size Pillow's ``Image.open`` reads (the header only), ``None`` when Pillow is missing or cannot tell."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        return None
    try:
        with Image.open(io.BytesIO(bytes(raw))) as pil:
            return ImageHeader(str(pil.format), int(pil.size[0]), int(pil.size[1]))
    except Image.DecompressionBombError as exc:  # over twice PIL.Image.MAX_IMAGE_PIXELS
        raise InputError(f"refused as a decompression bomb (Pillow: {exc})") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, struct.error, EOFError):
        return None


def check_image_pixels(raw: bytes | bytearray | memoryview, max_pixels: int) -> ImageHeader:
    """The header of encoded image ``raw``, checked against ``max_pixels`` before anything decodes it.

    Formats not read here are sized by Pillow's ``Image.open`` (header only) when Pillow is installed.

    Raises:
        InputError: the header declares more than ``max_pixels`` pixels, or an empty image; it is truncated
            or malformed; or its size cannot be read (an unknown format, Pillow missing or unable to tell).
            The message says what was declared and the limit; the caller prefixes what the image is.

    Example:
        >>> import struct
        >>> sof0 = struct.pack(">HHBHHB", 0xFFC0, 11, 8, 30000, 30000, 1)
        >>> jpeg = b"\\xff\\xd8" + sof0 + b"\\x01\\x11\\x00\\xff\\xd9"
        >>> check_image_pixels(jpeg, 1_000_000_000)
        ImageHeader(format='JPEG', width=30000, height=30000)
        >>> check_image_pixels(jpeg, 89_478_485)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: refused as a decompression bomb: its JPEG header declares 30000 x 30000 \
(width x height) = 900,000,000 pixels, above the limit of 89,478,485 pixels (raise it for images you trust: \
LoadImage(max_pixels=...), the recipe option max_image_pixels or amdinfer serve --max-image-pixels)
    """
    header = read_image_header(raw) or _pillow_header(raw)
    if header is None:
        raise InputError(
            "not a decodable image: its format is none whose size amdinfer reads from the header (PNG, JPEG, "
            "WebP, GIF, BMP, TIFF, PNM, Sun raster, HDR, JPEG 2000, AVIF/HEIF) and Pillow "
            f"{'cannot identify it' if _have_pillow() else 'is not installed to read it'}; its size must be "
            f"known before decoding (the pixel limit, {max_pixels:,})"
        )
    if header.pixels > max_pixels:
        raise InputError(
            f"refused as a decompression bomb: its {header}, above the limit of {max_pixels:,} pixels (raise it "
            f"for images you trust: {_HINT})"
        )
    if header.pixels == 0:
        raise InputError(f"not a decodable image: its {header}, an empty image")
    return header


def _have_pillow() -> bool:
    from ._common import _have

    return _have("PIL")
