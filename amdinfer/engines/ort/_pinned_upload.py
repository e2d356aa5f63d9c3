"""Host batches in pinned memory copied to the GPU by PyTorch, ahead of the run, outside the slot's lock.

A bound run (:class:`~amdinfer.engines.ort._iobinding.IoBindingRunner`) copies a host feed into its slot's device
buffer with ``OrtValue.update_inplace``: synchronous, under the slot's lock, so the copy of batch k+1 waits for the
compute of batch k. On an H200 (ResNet-50 fp16 with the frame geometry in the graph, 64 frames of 640x480, 59 MB)
the engine ran 9,263 frames/s from device tensors and 4,201 from a host batch, while one pinned copy of that batch
took 1.1 ms (54 GB/s). When PyTorch is already imported and sees the device, a pinned host batch (the executor's
:class:`~amdinfer.engines._staging.PinnedStaging` buffers are) is copied here with ``non_blocking=True`` on a
side stream of the calling thread, waited for, and handed to the run as a device tensor: the slot's own copy is then
device to device, and runs on other threads copy while this one computes.

Nothing changes without PyTorch, on other devices, for pageable arrays or for batches under :data:`MIN_BYTES`.

Example:
    >>> import numpy as np
    >>> pinned_upload({"x": np.zeros((2, 3), np.float32)}, "cpu", 0) is None  # not a GPU engine
    True
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["MIN_BYTES", "pinnable", "pinned_upload"]

#: Batches under this many input bytes keep the bound copy (a small copy is cheaper than a stream wait).
MIN_BYTES = 1 << 20

_local = threading.local()


def _stream(torch: Any, device: int) -> Any:
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    if device not in streams:
        streams[device] = torch.cuda.Stream(device=device)
    return streams[device]


def pinnable(feeds: Mapping[str, Any], device: str) -> bool:
    """Whether :func:`pinned_upload` applies to ``feeds`` on ``device`` (it may still decline on a failed copy).

    Example:
        >>> import numpy as np
        >>> pinnable({"x": np.zeros((1024, 1024), np.float32)}, "cpu")
        False
    """
    torch = sys.modules.get("torch")
    if device != "cuda" or torch is None or not feeds:
        return False
    if not all(type(v) is np.ndarray for v in feeds.values()) or sum(v.nbytes for v in feeds.values()) < MIN_BYTES:
        return False
    try:
        return bool(torch.cuda.is_available()) and all(torch.from_numpy(v).is_pinned() for v in feeds.values())
    except Exception:  # a read-only or odd array: not this path
        return False


def pinned_upload(feeds: Mapping[str, Any], device: str, device_id: int) -> dict[str, Any] | None:
    """``feeds`` with every input as a CUDA tensor copied from its pinned host array, or ``None`` when that does not
    apply (not a CUDA engine, PyTorch not imported or without CUDA, a feed that is not a pinned NumPy array, a batch
    under :data:`MIN_BYTES`). The copies are complete when this returns.

    Args:
        feeds: checked feeds (NumPy arrays or device feeds).
        device: the runner's ONNX Runtime device name (``"cuda"`` here).
        device_id: its index.

    Returns:
        ``{name: torch.Tensor}`` on ``cuda:device_id``, or ``None``.

    Example:
        >>> import numpy as np
        >>> pinned_upload({"x": np.zeros((1024, 1024), np.float32)}, "cuda", 0) is None or "torch" in sys.modules
        True
    """
    if not pinnable(feeds, device):
        return None
    torch = sys.modules["torch"]
    try:
        hosts = {name: torch.from_numpy(value) for name, value in feeds.items()}
        stream = _stream(torch, device_id)
        with torch.cuda.stream(stream):
            out = {name: t.to(f"cuda:{device_id}", non_blocking=True) for name, t in hosts.items()}
        stream.synchronize()
    except Exception:  # a read-only or odd array, a torch without this device: the bound copy does it
        return None
    return out
