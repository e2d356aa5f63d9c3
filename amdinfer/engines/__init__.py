"""Engines: the :class:`Engine` contract, the backend registry, and the backends (imported lazily).

Example:
    >>> from amdinfer.engines import backend_names
    >>> "ort" in backend_names()
    True
"""

from ._dlpack import DeviceArray, DeviceFeed, DlpackOnly, device_feed, register_device_value
from ._options import EngineOptions, Flag, option_doc
from ._prepared import PreparedRun
from .base import Engine, EngineInfo
from .registry import backend_names, get_backend, register_backend

__all__ = [
    "DeviceArray",
    "DeviceFeed",
    "DlpackOnly",
    "Engine",
    "EngineInfo",
    "EngineOptions",
    "Flag",
    "PreparedRun",
    "backend_names",
    "device_feed",
    "get_backend",
    "option_doc",
    "register_backend",
    "register_device_value",
]
