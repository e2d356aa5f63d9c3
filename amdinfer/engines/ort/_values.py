"""ONNX Runtime's ``OrtValue`` as one DLPack producer among others (registered with :mod:`amdinfer.engines._dlpack`).

Example:
    >>> import numpy as np, onnxruntime as ort
    >>> from amdinfer.engines._dlpack import DeviceArray
    >>> DeviceArray(ort.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32))).device
    'cpu:0'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dlpack import DeviceValueType, register_device_value

__all__ = ["ORT_TYPES", "is_ortvalue", "ortvalue_device_id"]

#: ONNX Runtime's ``OrtValue.data_type()`` strings -> NumPy dtypes.
ORT_TYPES = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
}


def is_ortvalue(value: Any) -> bool:
    """Whether ``value`` is an ``onnxruntime.OrtValue`` (checked without importing onnxruntime).

    Example:
        >>> is_ortvalue(np.zeros(1))
        False
    """
    return type(value).__name__ == "OrtValue" and hasattr(value, "data_ptr") and hasattr(value, "device_name")


def ortvalue_device_id(ortvalue: Any) -> int:
    """The device index of an ``OrtValue`` (0 when this onnxruntime cannot tell).

    Example:
        >>> import onnxruntime as ort
        >>> ortvalue_device_id(ort.OrtValue.ortvalue_from_numpy(np.zeros(1, np.float32)))
        0
    """
    try:
        return int(ortvalue.__dlpack_device__()[1])
    except Exception:
        return 0


register_device_value(
    DeviceValueType(
        name="onnxruntime.OrtValue",
        matches=is_ortvalue,
        shape=lambda v: tuple(v.shape()),
        dtype=lambda v: ORT_TYPES.get(v.data_type()),  # type: ignore[arg-type,return-value]
        device=lambda v: (v.device_name().lower(), ortvalue_device_id(v)),
        data_ptr=lambda v: int(v.data_ptr()),
        to_numpy=lambda v: v.numpy(),
    )
)
