"""How :meth:`Pipeline.fuse <amdinfer.Pipeline.fuse>` loads the fused model by default, and its ``"auto"`` modes.

Example:
    >>> _auto_nms_mode({"backend": "ort", "providers": ["CUDAExecutionProvider"]}, [])
    'dense'
    >>> _auto_resize({"backend": "ort", "providers": ["CPUExecutionProvider"]})
    'exact'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import OptionError

__all__ = ["fused_load_options"]

#: Load options of the unfused pipeline that do not carry over to the fused model: the engine's resolved
#: backend, providers and precision replace the first three; ``shapes``/``fp16_io`` describe the unfused
#: model's input; the fused model is in memory, with its own optimized form.
_NOT_CARRIED = (
    "backend",
    "providers",
    "precision",
    "quantizer",
    "shapes",
    "fp16_io",
    "base_dir",
    "optimized_model_path",
)


def fused_load_options(engine: Any, quantizer: Any, given: Mapping[str, Any], proto: Any) -> tuple[Any, dict[str, Any]]:
    """:meth:`Pipeline.fuse`'s default load options: the load options the pipeline was built with (``device``,
    ``threads``, ``io_binding``, cache and tuning knobs, ...) with ``engine``'s resolved backend, providers and
    precision. ORT fp16 (not on the MIGraphX EP): the model's own nodes are converted before fusing, fp32 IO,
    so the pre/post-processing stays float32/int32 (box coordinates and pixel values need more than fp16's
    11 bits); the fused engine then reports fp16 from the weights it loads. Returns the model to fuse and the
    load options.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"], threads=1)
        >>> _, options = fused_load_options(engine, None, {"threads": 1, "shapes": {}}, engine.model.proto)
        >>> options
        {'threads': 1, 'backend': 'ort', 'providers': ['CPUExecutionProvider']}
        >>> fused_load_options(engine, None, {}, engine.model.proto)[1]["threads"]  # from the Engine itself
        1
        >>> engine.close()
    """
    info = engine.info
    options: dict[str, Any] = {k: v for k, v in given.items() if k not in _NOT_CARRIED}
    options["backend"] = info.backend
    index = str(info.device).rpartition(":")[2]
    if "device" not in options and index.isdigit() and int(index):  # an Engine passed in: its GPU (cuda:1)
        options["device"] = int(index)
    if info.backend == "ort":
        options["providers"] = list(info.requested_providers or info.providers)
        session = info.settings.get("session") or {}
        # an Engine passed in: its thread counts travel too (a fused engine on ORT's default pool is slower)
        for key, name in (("intra_op_num_threads", "threads"), ("inter_op_num_threads", "inter_op_threads")):
            if name not in options and session.get(key):
                options[name] = int(session[key])
    migraphx_ep = any("MIGraphX" in p for p in info.providers)
    if info.precision == "fp16" and info.backend == "ort" and not migraphx_ep and quantizer is None:
        import onnx

        from ...quantize import precision_quantizer

        fp16 = precision_quantizer("fp16")  # the quantizer amdinfer.load gives the engine for fp16
        if fp16 is not None and not any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer):
            proto = fp16.quantize(proto)  # what the engine's fp16 does, fp32 IO
    elif info.precision != "fp32" and info.settings.get("model_precision") != info.precision:
        options["precision"] = info.precision  # (a precision read off the weights travels with the model)
    return proto, options


def _check_nms_backend(load_options: Mapping[str, Any], nms_mode: str, postprocess: Sequence[Any]) -> None:
    """In-graph NMS is refused on MIGraphX (it pads data-dependent outputs)."""
    from ...postprocess import Nms

    if (
        load_options.get("backend") == "migraphx"
        and nms_mode != "host"
        and any(isinstance(s, Nms) for s in postprocess)
    ):
        raise OptionError(
            f"nms_mode={nms_mode!r} on MIGraphX: it pads the outputs of NonMaxSuppression and NonZero to a "
            "static size with zero rows (seen on MIGraphX 2.16's ref target), so in-graph NMS returns "
            "padding as detections; use nms_mode='host' (the default there)"
        )


def _first_provider(load_options: Mapping[str, Any]) -> str:
    providers = load_options.get("providers") or ()
    return str(providers[0]).lower() if providers else ""


def _ort_gpu_ep(load_options: Mapping[str, Any]) -> bool:
    """Whether the fused model loads on ONNX Runtime's CUDA or ROCm EP (first in ``providers``)."""
    first = _first_provider(load_options)
    return load_options.get("backend") in (None, "ort") and ("cuda" in first or "rocm" in first)


def _auto_resize(load_options: Mapping[str, Any]) -> str:
    """``resize="auto"`` of :meth:`Pipeline.fuse`: fuse_model's size rule on ORT's CUDA/ROCm EPs, exact elsewhere."""
    return "auto" if _ort_gpu_ep(load_options) else "exact"


def _auto_nms_mode(load_options: Mapping[str, Any], postprocess: Sequence[Any]) -> str:
    """``nms_mode="auto"`` of :meth:`Pipeline.fuse`: on the CPU or the reference engine, offset when the ``Nms``
    stage has a ``class_offset`` else per-class; host on MIGraphX (native or EP); dense on ORT's CUDA/ROCm
    EPs; else offset."""
    from ...postprocess import Nms

    providers = [str(p) for p in load_options.get("providers") or ()]
    cpu = load_options.get("backend") == "reference" or (
        bool(providers) and all(p.lower() in ("cpu", "cpuexecutionprovider") for p in providers)
    )
    offset_nms = any(isinstance(s, Nms) and s.class_offset is not None for s in postprocess)
    if cpu:
        return "offset" if offset_nms else "per-class"
    if load_options.get("backend") == "migraphx" or "migraphx" in _first_provider(load_options):
        return "host"  # MIGraphX pads NonMaxSuppression/NonZero outputs to static shapes
    return "dense" if _ort_gpu_ep(load_options) else "offset"
