"""Pictures of results: line widths, labels written with Pillow, and encoding to PNG/JPEG files.

PNG is always available: without Pillow, :func:`png_bytes` writes one with :mod:`zlib` alone. Other formats
need Pillow or OpenCV.

Example:
    >>> import numpy as np, zlib
    >>> data = png_bytes(np.zeros((2, 3, 3), np.uint8), pillow=False)
    >>> data[:8], data[12:16]
    (b'\\x89PNG\\r\\n\\x1a\\n', b'IHDR')
"""

from __future__ import annotations

import importlib.util
import io
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._support._files import write_atomic
from ..errors import BackendUnavailableError, InputError, OptionError

__all__ = [
    "PALETTE",
    "SUFFIXES",
    "encode",
    "font_size",
    "line_width",
    "png_bytes",
    "require_image",
    "save",
    "write_labels",
    "write_lines",
]

#: What :func:`save` writes, by the path's suffix (any case): Pillow's format names.
SUFFIXES = {
    ".png": "PNG",
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".bmp": "BMP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".webp": "WEBP",
}
_JPEG_QUALITY = 95  # what cv2.imwrite (Ultralytics' save) uses

#: Colours (RGB) that ``Detections.draw`` and ``Detections.plot`` cycle through by class index (Ultralytics'
#: palette).
PALETTE: tuple[tuple[int, int, int], ...] = (
    (255, 56, 56),
    (255, 157, 151),
    (255, 112, 31),
    (255, 178, 29),
    (207, 210, 49),
    (72, 249, 10),
    (146, 204, 23),
    (61, 219, 134),
    (26, 147, 52),
    (0, 212, 187),
    (44, 153, 168),
    (0, 194, 255),
    (52, 69, 147),
    (100, 115, 255),
    (0, 24, 236),
    (132, 56, 255),
    (82, 0, 133),
    (203, 56, 255),
    (255, 149, 200),
    (255, 55, 199),
)


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def line_width(shape: Sequence[int]) -> int:
    """Ultralytics' box line width for an image of ``shape``: ``max(round((H + W) / 2 * 0.003), 2)``.

    Example:
        >>> line_width((1024, 1024)), line_width((48, 80))
        (3, 2)
    """
    return max(round((int(shape[0]) + int(shape[1])) / 2 * 0.003), 2)


def font_size(shape: Sequence[int]) -> int:
    """Label text height in pixels for an image of ``shape``: six line widths, at least 12.

    Example:
        >>> font_size((1024, 1024)), font_size((48, 80))
        (18, 12)
    """
    return max(6 * line_width(shape), 12)


def require_image(image: np.ndarray | None, what: str) -> np.ndarray:
    """``image``, or an :class:`~amdinfer.errors.InputError` that says how a result gets one.

    Example:
        >>> try:
        ...     require_image(None, "Detections.plot")
        ... except InputError as exc:
        ...     print(str(exc)[:45])
        Detections.plot: this result keeps no image (
    """
    if image is None:
        raise InputError(
            f"{what}: this result keeps no image (results keep the picture they answer when amdinfer.yolo or "
            "amdinfer.classify decoded or received it, with keep_image=True; a hand-built Pipeline's results do "
            "not); pass image= when you build it, or draw on your own copy with Detections.draw(image)"
        )
    return image


def _font(size: int | None) -> Any:
    from PIL import ImageFont

    if size is None:
        return ImageFont.load_default()
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one bitmap size only
        return ImageFont.load_default()


def _pillow(what: str) -> Any:
    try:
        from PIL import Image, ImageDraw
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{what} writes text with Pillow: pip install pillow", backend="pillow", cause=str(exc)
        ) from exc
    return Image, ImageDraw


def write_labels(
    image: np.ndarray,
    anchors: Sequence[tuple[float, float]],
    texts: Sequence[str],
    colors: Sequence[Any],
    *,
    size: int | None = None,
    what: str = "draw",
) -> np.ndarray:
    """A copy of ``image`` with each text on a filled box of its colour just above its anchor ``(x, y)`` (below
    it when there is no room), white letters; ``size`` in pixels (``None``: Pillow's default font). A label that
    falls wholly outside the image is not drawn (Pillow fails on huge coordinates); a non-finite anchor is an
    :class:`~amdinfer.errors.InputError` naming it (the result classes leave such rows out before they get here).

    Example:
        >>> out = write_labels(np.zeros((40, 60, 3), np.uint8), [(5, 20)], ["cat 0.90"], [(255, 56, 56)])
        >>> bool((out[:20] != 0).any()), bool((out[21:] != 0).any())
        (True, False)
    """
    image_cls, draw_cls = _pillow(what)
    pil = image_cls.fromarray(image)
    canvas = draw_cls.Draw(pil)
    font = _font(size)
    white: Any = 255 if image.ndim == 2 else (255, 255, 255)
    h, w = image.shape[:2]
    for i, ((x, y), text, color) in enumerate(zip(anchors, texts, colors)):
        if not (np.isfinite(x) and np.isfinite(y)):
            raise InputError(f"{what}: anchors[{i}]: got ({x}, {y}), expected finite pixel coordinates")
        left, top, right, bottom = canvas.textbbox((0, 0), text, font=font)
        tw, th = right - left, bottom - top
        y0 = y - th - 4 if y - th - 4 >= 0 else y
        if x + tw + 3 < 0 or x >= w or y0 + th + 3 < 0 or y0 >= h:
            continue
        canvas.rectangle((x, y0, x + tw + 3, y0 + th + 3), fill=color)
        canvas.text((x + 2 - left, y0 + 2 - top), text, fill=white, font=font)
    return np.asarray(pil, dtype=image.dtype).copy()


def write_lines(image: np.ndarray, lines: Sequence[str], *, size: int, what: str = "plot") -> np.ndarray:
    """A copy of ``image`` with ``lines`` written top-down in its top-left corner, white on black boxes.

    Example:
        >>> out = write_lines(np.zeros((60, 80, 3), np.uint8), ["cat 0.70", "dog 0.20"], size=12)
        >>> bool(out[:30, :60].any()), bool(out[40:].any())
        (True, False)
    """
    image_cls, draw_cls = _pillow(what)
    pil = image_cls.fromarray(image)
    canvas = draw_cls.Draw(pil)
    font = _font(size)
    white: Any = 255 if image.ndim == 2 else (255, 255, 255)
    margin = y = line_width(image.shape)
    for text in lines:
        left, top, right, bottom = canvas.textbbox((0, 0), text, font=font)
        canvas.rectangle(
            (margin, y, margin + right - left + 3, y + bottom - top + 3), fill=0 if image.ndim == 2 else (0, 0, 0)
        )
        canvas.text((margin + 2 - left, y + 2 - top), text, fill=white, font=font)
        y += bottom - top + 5
    return np.asarray(pil, dtype=image.dtype).copy()


def png_bytes(image: np.ndarray, *, pillow: bool | None = None) -> bytes:
    """``image`` (uint8 ``(H, W, 3)`` RGB or ``(H, W)`` grey) as PNG: with Pillow when installed (``pillow=None``),
    else with :mod:`zlib` alone (filter ``None`` per row, what any PNG reader takes).

    Example:
        >>> from PIL import Image
        >>> image = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
        >>> np.array_equal(np.asarray(Image.open(io.BytesIO(png_bytes(image, pillow=False)))), image)
        True
    """
    image = _check(image, "png_bytes")
    if pillow is None:
        pillow = _have("PIL")
    if pillow:
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(image).save(out, format="PNG")
        return out.getvalue()
    h, w = image.shape[:2]
    color = 2 if image.ndim == 3 else 0
    rows = np.ascontiguousarray(image).reshape(h, -1)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def _check(image: Any, what: str) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)) or not image.size:
        raise InputError(f"{what}: got {image.dtype} {image.shape}, expected a uint8 (H, W, 3) RGB or (H, W) image")
    return image


def encode(image: np.ndarray, suffix: str, where: str) -> bytes:
    """``image`` encoded in the format of ``suffix`` (see :data:`SUFFIXES`): PNG with Pillow or zlib, the others
    with Pillow, else OpenCV (JPEG quality 95 with both).

    Raises:
        OptionError: an unknown suffix (``where`` names the path).
        BackendUnavailableError: neither Pillow nor OpenCV for a format other than PNG.

    Example:
        >>> encode(np.zeros((4, 4, 3), np.uint8), ".jpg", "'a.jpg'")[:3]
        b'\\xff\\xd8\\xff'
    """
    image = _check(image, where)
    fmt = SUFFIXES.get(suffix.lower())
    if fmt is None:
        raise OptionError(
            f"path {where}: got suffix {suffix!r}, expected one of {', '.join(SUFFIXES)} (the suffix picks the format)"
        )
    if fmt == "PNG":
        return png_bytes(image)
    if _have("PIL"):
        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(image).save(out, format=fmt, **({"quality": _JPEG_QUALITY} if fmt == "JPEG" else {}))
        return out.getvalue()
    if _have("cv2"):
        import cv2

        bgr = image if image.ndim == 2 else np.ascontiguousarray(image[..., ::-1])
        params = [cv2.IMWRITE_JPEG_QUALITY, _JPEG_QUALITY] if fmt == "JPEG" else []
        ok, data = cv2.imencode(suffix.lower(), bgr, params)
        if ok:
            return bytes(data)
        raise OptionError(f"path {where}: OpenCV could not encode {suffix!r}; write PNG or install Pillow")
    raise BackendUnavailableError(
        f"path {where}: writing {fmt} needs Pillow or OpenCV (pip install pillow), or save as .png",
        backend="pillow",
    )


def save(image: np.ndarray, path: Any) -> Path:
    """Write ``image`` to ``path`` in the format of its suffix, atomically (a reader never sees half a file).

    Raises:
        OptionError: an unknown suffix, a missing folder or a write that failed (naming the path).
        BackendUnavailableError: see :func:`encode`.

    Example:
        >>> import tempfile, os
        >>> p = save(np.zeros((4, 4, 3), np.uint8), os.path.join(tempfile.mkdtemp(), "x.png"))
        >>> p.read_bytes()[1:4]
        b'PNG'
    """
    target = Path(path)
    data = encode(image, target.suffix, repr(str(target)))
    return write_atomic(target, data, argument="path")
