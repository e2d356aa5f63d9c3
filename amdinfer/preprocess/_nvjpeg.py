"""JPEG decoding on an NVIDIA GPU (nvJPEG through ``torchvision.io.decode_jpeg``), for ``LoadImage(backend="nvjpeg")``.

The decoded image is copied back to the host, where the geometry stages (and the executor's placement into the
batch buffer) take it as any decoded image: the GPU only takes the decoding, the host's most expensive step for
JPEG files (docs/performance.md, "Images and files in, answers out").
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError
from ._common import _import

__all__ = ["check_nvjpeg", "decode_jpeg_on_gpu", "is_jpeg"]

_LOCK = threading.Lock()  # torchvision shares one nvJPEG handle between calls


def is_jpeg(raw: bytes) -> bool:
    """Whether ``raw`` starts with a JPEG start-of-image marker.

    Example:
        >>> is_jpeg(b"\\xff\\xd8\\xff\\xe0...."), is_jpeg(b"\\x89PNG")
        (True, False)
    """
    return raw[:3] == b"\xff\xd8\xff"


def check_nvjpeg() -> None:
    """Raise :class:`~amdinfer.errors.BackendUnavailableError` unless torch and torchvision can decode on a GPU.

    Example:
        >>> try:
        ...     check_nvjpeg()
        ... except BackendUnavailableError as exc:
        ...     print("unavailable")  # doctest: +SKIP
    """
    try:
        torch = _import("torch")
        _import("torchvision.io")
    except ImportError as exc:
        raise BackendUnavailableError(
            f"LoadImage(backend='nvjpeg'): needs torch and torchvision with CUDA ({exc}); use backend='opencv'",
            backend="nvjpeg",
        ) from None
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            "LoadImage(backend='nvjpeg'): torch sees no CUDA GPU (torch.cuda.is_available() is False); "
            "use backend='opencv'",
            backend="nvjpeg",
        )


def decode_jpeg_on_gpu(raw: bytes, mode: str) -> np.ndarray:
    """One JPEG decoded by nvJPEG on the current CUDA device, as a host uint8 ``(H, W, 3)`` (``"RGB"``/``"BGR"``)
    or ``(H, W)`` (``"L"``) array; the EXIF orientation is applied where torchvision supports it.

    Example:
        >>> decode_jpeg_on_gpu  # doctest: +ELLIPSIS
        <function decode_jpeg_on_gpu at ...>
    """
    torch = _import("torch")
    tvio = _import("torchvision.io")
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    read_mode = tvio.ImageReadMode.GRAY if mode == "L" else tvio.ImageReadMode.RGB
    options: dict[str, Any] = {}
    if "apply_exif_orientation" in inspect.signature(tvio.decode_jpeg).parameters:
        options["apply_exif_orientation"] = True
    with _LOCK:
        image = tvio.decode_jpeg(data, mode=read_mode, device="cuda", **options)
    out = image.permute(1, 2, 0).contiguous().cpu().numpy()
    if mode == "L":
        return np.ascontiguousarray(out[..., 0])
    if mode == "BGR":
        return np.ascontiguousarray(out[..., ::-1])
    return out
