"""Encoded images in, typed answers out: OIP v2 ``BYTES`` tensors for pipelines that start with ``LoadImage``.

The request layout (one image file per element, Triton's convention for ``BYTES``):

* one input, named as the pipeline's engine input (``images`` for :func:`amdinfer.yolo`), datatype ``BYTES``,
  shape ``[N]`` or ``[N, 1]``: each element is a whole JPEG or PNG file (any format ``LoadImage`` decodes);
* over REST the elements travel as binary data (Triton's binary tensor extension: ``binary_data_size`` and
  ``Inference-Header-Content-Length``; each element a 4-byte little-endian length and the bytes, what
  tritonclient sends with ``binary_data=True``); JSON ``data`` strings are UTF-8 text, which no image file is;
* over gRPC in ``contents.bytes_contents`` (one element each) or ``raw_input_contents`` (length-prefixed).

The answer, per request (see :class:`~amdinfer.serve.PipelineWorker`):

* detections: ``boxes`` FP32 ``[K, 4]`` (x1, y1, x2, y2 in the image's pixels), ``scores`` FP32 ``[K]``,
  ``classes`` INT64 ``[K]``, ``labels`` BYTES ``[K]`` (when the model names its classes) and
  ``boxes_batch_index`` INT64 ``[K]``: which image of the request each box belongs to (the layout of ONNX
  ``NonMaxSuppression``; an image without boxes has no rows);
* classification: ``indices`` INT64 ``[N, k]``, ``scores`` FP32 ``[N, k]``, ``labels`` BYTES ``[N, k]``
  (best first).

Decoding and geometry run in the pipeline's executor (``run_batch`` decodes the bytes items on its threads).
Before that, each request's images are checked against the pixel limit from their headers
(:func:`image_items` with ``max_pixels``, the limit of the pipeline's ``LoadImage``): a decompression bomb is
refused as that request's 400 / ``INVALID_ARGUMENT`` before it meets other requests or a decoder.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..preprocess._image_header import check_image_pixels

__all__ = ["bytes_tensor", "image_items", "parse_length_prefixed"]

_PREFIX = struct.Struct("<I")


def parse_length_prefixed(name: str, raw: bytes | memoryview, count: int) -> list[bytes]:
    """The ``count`` elements of a serialised ``BYTES`` tensor: each a 4-byte little-endian length, then the bytes.

    Raises:
        InputError: a length that runs past the data, fewer or more elements than ``count``, or bytes left over;
            the message names the tensor and the element.

    Example:
        >>> parse_length_prefixed("images", b"\\x02\\x00\\x00\\x00hi\\x01\\x00\\x00\\x00!", 2)
        [b'hi', b'!']
        >>> parse_length_prefixed("images", b"\\x09\\x00\\x00\\x00hi", 1)
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'images': item 0 declares 9 bytes, but only 2 follow its length prefix
    """
    view = memoryview(raw).cast("B")
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end and len(items) < count:
        index = len(items)
        if end - offset < 4:
            raise InputError(
                f"input {name!r}: item {index}: got {end - offset} bytes where a 4-byte length prefix was expected"
            )
        (size,) = _PREFIX.unpack_from(view, offset)
        offset += 4
        if size > end - offset:
            raise InputError(
                f"input {name!r}: item {index} declares {size} bytes, but only {end - offset} follow its length prefix"
            )
        items.append(bytes(view[offset : offset + size]))
        offset += size
    if len(items) != count:
        raise InputError(f"input {name!r}: got {len(items)} BYTES elements, expected {count} for its shape")
    if offset != end:
        raise InputError(
            f"input {name!r}: {end - offset} bytes left after the {count} elements its shape holds; each element is "
            "a 4-byte little-endian length and that many bytes"
        )
    return items


def bytes_tensor(name: str, shape: Sequence[int], *, raw: Any = None, data: Any = None) -> np.ndarray:
    """A request's ``BYTES`` tensor as an object array of ``bytes`` of ``shape``.

    ``raw``: the serialised tensor (REST binary data, gRPC ``raw_input_contents``); ``data``: its elements as a
    (nested) list, ``bytes`` (gRPC ``bytes_contents``) or ``str`` (REST JSON: UTF-8 text, encoded back to UTF-8).

    Raises:
        InputError: elements that are neither bytes nor strings, or a count that does not match ``shape``.

    Example:
        >>> bytes_tensor("images", [2, 1], data=[[b"\\xff\\xd8"], ["a"]]).tolist()
        [[b'\\xff\\xd8'], [b'a']]
    """
    count = math.prod(shape)
    if raw is not None:
        items = parse_length_prefixed(name, raw, count)
    else:
        flat = np.asarray(data if data is not None else [], dtype=object).ravel().tolist()
        items = []
        for i, value in enumerate(flat):
            if isinstance(value, (bytes, bytearray)):
                items.append(bytes(value))
            elif isinstance(value, str):
                items.append(value.encode("utf-8"))
            else:
                raise InputError(f"input {name!r}: item {i}: got {type(value).__name__}, expected bytes or a string")
        if len(items) != count:
            raise InputError(
                f"input {name!r}: got {len(items)} BYTES elements, expected {count} for shape {list(shape)}"
            )
    out = np.empty(count, dtype=object)
    out[:] = items
    return out.reshape(tuple(shape))


def image_items(name: str, arr: np.ndarray, *, max_pixels: int | None = None) -> list[bytes]:
    """The encoded images of a request: a ``BYTES`` tensor of shape ``[N]`` or ``[N, 1]``, one file per element.

    With ``max_pixels``, each image's header is read (nothing is decoded) and checked against it
    (:func:`~amdinfer.preprocess.check_image_pixels`).

    Raises:
        InputError: another shape, no items, or an empty element; with ``max_pixels``, an image whose header
            declares more pixels or cannot be read (the message names the tensor and the item).

    Example:
        >>> image_items("images", np.array([[b"\\x89PNG..."], [b"\\xff\\xd8..."]], dtype=object))
        [b'\\x89PNG...', b'\\xff\\xd8...']
        >>> image_items("images", np.array([b"\\xff\\xd8", b""], dtype=object))
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'images': item 1 is empty, expected an encoded image (JPEG, PNG, ...)
        >>> import struct
        >>> bomb = b"\\xff\\xd8" + struct.pack(">HHBHHB", 0xFFC0, 11, 8, 30000, 30000, 1)  # a JPEG's SOF0
        >>> image_items("images", np.array([bomb], dtype=object), max_pixels=89_478_485)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'images': item 0: refused as a decompression bomb: its JPEG header \
declares 30000 x 30000 (width x height) = 900,000,000 pixels, above the limit of 89,478,485 pixels (...)
    """
    if arr.ndim not in (1, 2) or (arr.ndim == 2 and arr.shape[1] != 1) or arr.shape[0] == 0:
        raise InputError(
            f"input {name!r}: got BYTES of shape {list(arr.shape)}, expected [N] or [N, 1] with N >= 1 (one encoded "
            "image per element)"
        )
    items = arr.reshape(-1).tolist()
    for i, item in enumerate(items):
        if not isinstance(item, bytes):
            raise InputError(f"input {name!r}: item {i}: got {type(item).__name__}, expected the bytes of an image")
        if not item:
            raise InputError(f"input {name!r}: item {i} is empty, expected an encoded image (JPEG, PNG, ...)")
        sent = sent_as_text(item)
        if sent is not None:
            raise InputError(
                f"input {name!r}: item {i}: got {sent}, expected the image file's own bytes; {SEND_BINARY}"
            )
        if max_pixels is not None:
            try:
                check_image_pixels(item, max_pixels)
            except InputError as exc:
                seen = f"; received {_head(item)}" if str(exc).startswith("not a decodable") else ""
                raise InputError(f"input {name!r}: item {i}: {exc}{seen}") from None
    return items


#: How to send an image so that the server gets the file's bytes (docs/serving.md#images-in-images-out).
SEND_BINARY = (
    "send each file's raw bytes as one element of a BYTES tensor: tritonclient's "
    "InferInput('images', [1], 'BYTES').set_data_from_numpy(np.array([open(path, 'rb').read()], dtype=object), "
    "binary_data=True), or curl --data-binary with Triton's binary extension (a JSON header whose input has "
    '"parameters": {"binary_data_size": 4 + file size}, the Inference-Header-Content-Length header, then a 4-byte '
    "little-endian length and the file; docs/serving.md)"
)

_IMAGE_MAGIC = {b"\xff\xd8": "JPEG", b"\x89PNG": "PNG", b"GIF8": "GIF", b"RIFF": "WebP", b"BM": "BMP",
                b"II*\x00": "TIFF", b"MM\x00*": "TIFF"}  # fmt: skip


def sent_as_text(item: bytes) -> str | None:
    """What an image element that is text holds (base64 of an image, a data URI, JSON), or ``None`` for bytes
    that are not one of those (a real image file is never refused here: none of them is such text).

    Example:
        >>> import base64
        >>> sent_as_text(base64.b64encode(b"\\xff\\xd8\\xff\\xe0 a JPEG"))
        'base64 text of a JPEG file (16 characters), not the file'
        >>> sent_as_text(b'{"data": "..."}')
        'JSON text (15 characters)'
        >>> sent_as_text(b"\\xff\\xd8\\xff\\xe0") is None
        True
    """
    import base64
    import binascii

    try:
        text = item.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    if not text:
        return None
    size = f"{len(text)} characters"
    if text.startswith("data:"):
        return f"a data URI ({text[:30]}..., {size}), not the file"
    if text[0] in "{[":
        return f"JSON text ({size})"
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    kind = next((k for magic, k in _IMAGE_MAGIC.items() if raw.startswith(magic)), None)
    return None if kind is None else f"base64 text of a {kind} file ({size}), not the file"


def _head(item: bytes) -> str:
    """The first bytes of an element, for a message (never the whole body)."""
    return f"{len(item):,} bytes starting {item[:12]!r}"
