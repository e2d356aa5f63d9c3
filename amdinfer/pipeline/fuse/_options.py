"""How :meth:`Pipeline.fuse <amdinfer.Pipeline.fuse>` loads the fused model by default, and its ``"auto"`` modes.

The ``"auto"`` NMS and Resize forms are read from records, never from names: the ``fusion`` field of the first ONNX
Runtime provider's :class:`~amdinfer.engines.ort.ExecutionProvider`, or of the named backend's registry entry.

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
    precision. ORT fp16 on a provider without its own fp16 knob (the MIGraphX EP has one: its record's
    ``precision``): the model's own nodes are converted before fusing, fp32 IO,
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
    native_fp16 = False
    if info.backend == "ort":
        from ...engines.ort import provider_record

        options["providers"] = list(info.requested_providers or info.providers)
        # an Engine passed in: its thread counts travel too (a fused engine on ORT's default pool is slower)
        for name in ("threads", "inter_op_threads"):
            if name not in options and getattr(info.options, name, None):
                options[name] = int(getattr(info.options, name))
        first = provider_record(info.providers[0]) if info.providers else None
        native_fp16 = first is not None and "fp16" in first.precision  # the provider converts the model itself
    if info.precision == "fp16" and info.backend == "ort" and not native_fp16 and quantizer is None:
        import onnx

        from ...quantize import precision_quantizer

        fp16 = precision_quantizer("fp16")  # the quantizer amdinfer.load gives the engine for fp16
        if fp16 is not None and not any(t.data_type == onnx.TensorProto.FLOAT16 for t in proto.graph.initializer):
            proto = fp16.quantize(proto)  # what the engine's fp16 does, fp32 IO
    elif info.precision != "fp32" and info.settings.get("model_precision") != info.precision:
        options["precision"] = info.precision  # (a precision read off the weights travels with the model)
    return proto, options


def _check_nms_backend(load_options: Mapping[str, Any], nms_mode: str, postprocess: Sequence[Any]) -> None:
    """In-graph NMS is refused on a backend whose fusion record says NMS runs on the host (native MIGraphX pads
    data-dependent outputs)."""
    from ...engines.registry import get_backend
    from ...postprocess import Nms

    backend = load_options.get("backend")
    fusion = get_backend(backend).fusion if isinstance(backend, str) and backend not in ("auto", "ort") else None
    if (
        fusion is not None
        and fusion.nms == "host"
        and nms_mode != "host"
        and any(isinstance(s, Nms) for s in postprocess)
    ):
        raise OptionError(f"nms_mode={nms_mode!r} on {fusion.reason}; use nms_mode='host' (the default there)")


def _fusion_defaults(load_options: Mapping[str, Any]) -> Any:
    """The :class:`~amdinfer.engines._fusion.FusionDefaults` of the fused model's load: the named backend's registry
    entry, else the record of the first ONNX Runtime provider (``None``: neither says, e.g. ``backend="auto"``)."""
    from ...engines.ort import provider_record, resolve_provider_name
    from ...engines.registry import get_backend

    backend = load_options.get("backend")
    if backend not in (None, "ort"):
        return get_backend(backend).fusion if isinstance(backend, str) else None
    providers = load_options.get("providers") or ()
    if not providers:
        return None
    first = providers[0][0] if isinstance(providers[0], tuple) else providers[0]
    record = provider_record(resolve_provider_name(str(first)))
    return record.fusion if record is not None else None


def _auto_resize(load_options: Mapping[str, Any]) -> str:
    """``resize="auto"`` of :meth:`Pipeline.fuse`: the provider's (or backend's) ``fusion.resize``; exact elsewhere."""
    fusion = _fusion_defaults(load_options)
    return fusion.resize if fusion is not None else "exact"


def _auto_nms_mode(load_options: Mapping[str, Any], postprocess: Sequence[Any]) -> str:
    """``nms_mode="auto"`` of :meth:`Pipeline.fuse`: the first provider's (or the backend's) ``fusion.nms``, e.g.
    dense on ORT's CUDA/ROCm EPs, host on MIGraphX (native or EP), per-class on the CPU, where an ``Nms`` stage
    with a ``class_offset`` takes offset instead; offset where no record says."""
    from ...postprocess import Nms

    fusion = _fusion_defaults(load_options)
    mode = fusion.nms if fusion is not None else "offset"
    if mode == "per-class" and any(isinstance(s, Nms) and s.class_offset is not None for s in postprocess):
        return "offset"
    return mode
