"""A stand-in for an AMD plugin EP package (``onnxruntime-ep-amdgpu``, not released yet) with the documented layout.

``tests/engines/test_plugin_eps.py`` writes its ``.dist-info`` at test time. ``get_library_path()`` returns the
OpenVINO plugin's library so that the package really loads on a CPU machine; amdinfer must find, register,
order and run it without knowing its name.
"""

from __future__ import annotations


def get_library_path() -> str:
    """The plugin library (here: the OpenVINO plugin EP's)."""
    import onnxruntime_ep_openvino

    return onnxruntime_ep_openvino.get_library_path()


def get_ep_names() -> list[str]:
    """The EPs the library brings."""
    return ["OpenVINOExecutionProvider"]
