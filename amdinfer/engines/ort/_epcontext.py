"""EPContext models: ONNX Runtime's compile API (``onnxruntime.ModelCompiler``) and its compiled-model
compatibility check, for the EPs that compile (built in or plugin).

An EP that compiles (OpenVINO, MIGraphX, TensorRT, TensorRT-RTX, QNN, VitisAI) can write what it built into an
ONNX model whose graph is one ``com.microsoft.EPContext`` node per compiled partition; a session made from that
model loads the compiled blob instead of compiling. ORT 1.22 brought ``ModelCompiler`` to Python; 1.23 the
compatibility info that an EP writes into the model's metadata (``ep_compatibility_info.<EP>``) and
``get_model_compatibility_for_ep_devices``, which asks the installed EP whether that info still suits its device.
Where an ONNX Runtime lacks a function, :func:`compile_api_missing` says which and :func:`compatibility_verdict`
returns ``None`` (the bundle then relies on its recorded versions).

The compiled data is written to a file beside the model (``embed_mode=0``): on this Intel Xeon, OpenVINO's
ResNet-50 blob (100 MB) embedded in the model took 2.5 s to open, the same blob in its own file 0.24 s (ORT copies
an embedded attribute; a file is mapped). Such a model must be opened by path (:func:`needs_model_path`).

Example:
    >>> from amdinfer.testing.models import tiny_cnn
    >>> epcontext_nodes(tiny_cnn())
    []
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx

from ...errors import BackendUnavailableError, ModelError
from ._plugins import (
    describe_device,
    ep_devices,
    is_plugin_ep,
    plugin_failure,
    plugin_missing,
    plugin_version,
    register_plugins,
)

__all__ = [
    "EPCONTEXT_OP",
    "compatibility_verdict",
    "compile_api_missing",
    "compatibility_info",
    "compile_epcontext",
    "ep_device_record",
    "epcontext_device",
    "epcontext_nodes",
    "loads_by_path",
    "needs_model_path",
]

#: The operator ORT's compile API writes for each compiled partition (domain ``com.microsoft``).
EPCONTEXT_OP = "EPContext"
#: ``OrtCompiledModelCompatibility`` states that refuse a compiled model.
REFUSED = ("EP_UNSUPPORTED",)


def compile_api_missing(ort: Any) -> str | None:
    """Why this ONNX Runtime cannot write EPContext models (``None``: it can).

    Example:
        >>> import onnxruntime
        >>> compile_api_missing(onnxruntime) is None
        True
    """
    missing = [n for n in ("ModelCompiler", "OrtCompileApiFlags", "get_ep_devices") if not hasattr(ort, n)]
    if missing:
        return (
            f"onnxruntime {ort.__version__} lacks {', '.join(missing)} (ONNX Runtime's compile API: 1.22 or later; "
            "plugin EP devices: 1.23 or later); upgrade onnxruntime"
        )
    return None


def epcontext_device(ort: Any, name: str, device: int) -> Any | None:
    """The ``OrtEpDevice`` that compiles for plugin EP ``name`` (registering installed plugins first), or ``None``
    for a built-in EP (added by name).

    Raises:
        BackendUnavailableError: the EP is neither built in nor brought by a plugin with a device here, or
            ``device`` is out of range (naming the devices there are).

    Example:
        >>> import onnxruntime
        >>> epcontext_device(onnxruntime, "CPUExecutionProvider", 0) is None
        True
    """
    register_plugins(ort)
    if not is_plugin_ep(name) and name in ort.get_available_providers():
        return None
    devices = ep_devices(ort, name)
    if not devices:
        why = plugin_failure(name) or plugin_missing(name)
        raise BackendUnavailableError(
            why
            or f"provider {name!r}: neither built into onnxruntime {ort.__version__} nor brought by a plugin "
            "EP with a device here (`amdinfer doctor` lists them)",
            backend=name,
        )
    if not 0 <= device < len(devices):
        raise BackendUnavailableError(
            f"device: got {device}, expected an index into {name}'s devices {[describe_device(d) for d in devices]}",
            backend=name,
        )
    return devices[device]


def ep_device_record(ort: Any, name: str, device: int) -> dict[str, Any]:
    """What a bundle records of EP ``name`` and its device ``device`` here: ``{ep, version, device, vendor,
    metadata}`` (metadata: the device's name, architecture and capabilities where the EP reports them).

    Example:
        >>> import onnxruntime
        >>> ep_device_record(onnxruntime, "CPUExecutionProvider", 0)["device"]
        'built-in EP'
    """
    return _device_record(ort, name, epcontext_device(ort, name, device))


def _device_record(ort: Any, name: str, dev: Any | None) -> dict[str, Any]:
    if dev is None:
        return {"ep": name, "version": ort.__version__, "device": "built-in EP", "vendor": None, "metadata": {}}
    meta = dict(dev.ep_metadata)
    keep = ("version", "ov_device", "FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "OPTIMIZATION_CAPABILITIES")
    return {
        "ep": name,
        "version": meta.get("version") or plugin_version(name),
        "device": describe_device(dev),
        "vendor": dev.ep_vendor,
        "metadata": {k: meta[k] for k in keep if k in meta},
    }


def compile_epcontext(
    ort: Any, model: bytes, path: Path, name: str, options: Mapping[str, str], device: int
) -> dict[str, Any]:
    """Compile ``model`` (serialized, static shapes) for EP ``name`` into the EPContext model ``path``, its
    compiled data in a file beside it; ``ERROR_IF_NO_NODES_COMPILED``: a model the EP takes no node of is an error.

    Returns:
        ``{"compatibility": ORT's compatibility info string or None, "device": {ep, version, device, vendor,
        metadata}, "nodes": the EPContext nodes written}``.

    Raises:
        BackendUnavailableError: no compile API, or the EP/device is not here. ModelError: the EP refused the
            model (ONNX Runtime's message), or compiled none of it (the CPU EP compiles nothing).

    Example:
        >>> import onnxruntime, tempfile
        >>> from amdinfer.testing.models import tiny_cnn
        >>> out = Path(tempfile.mkdtemp()) / "cnn.ctx.onnx"
        >>> compile_epcontext(onnxruntime, tiny_cnn().SerializeToString(), out, "CPUExecutionProvider", {}, 0)
        Traceback (most recent call last):
        ...
        amdinfer.errors.ModelError: EPContext: CPUExecutionProvider could not compile 'cnn.ctx.onnx': ...
    """
    missing = compile_api_missing(ort)
    if missing:
        raise BackendUnavailableError(f"EPContext: {missing}", backend=name)
    dev = epcontext_device(ort, name, device)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if dev is None:
        so.add_provider(name, dict(options))
    else:
        so.add_provider_for_devices([dev], dict(options))
    try:
        compiler = ort.ModelCompiler(
            so, model, embed_compiled_data_into_model=False, flags=ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED
        )
        compiler.compile_to_file(str(path))
    except Exception as exc:  # ORT's own pybind exception types
        raise ModelError(f"EPContext: {name} could not compile '{path.name}': {str(exc).strip()}") from None
    nodes = epcontext_nodes(onnx.load(str(path), load_external_data=False))
    if not nodes:
        raise ModelError(f"EPContext: {name} compiled '{path.name}' but wrote no EPContext node (nothing compiled)")
    compat = compatibility_info(ort, path, name)
    return {"compatibility": compat, "device": _device_record(ort, name, dev), "nodes": nodes}


def compatibility_info(ort: Any, path: Path, name: str) -> str | None:
    """ORT's compatibility info string that EP ``name`` wrote into the compiled model (``None``: none, or an
    ONNX Runtime without the API)."""
    from onnxruntime.capi import _pybind_state as capi

    read = getattr(capi, "get_compatibility_info_from_model", None)
    info = read(str(path), name) if read is not None else None
    return None if info is None else str(info)


def compatibility_verdict(ort: Any, name: str, info: str, device: int) -> tuple[str, str] | None:
    """ONNX Runtime's verdict on a compiled model's compatibility info for EP ``name``'s device here:
    ``(state, detail)`` with ``state`` an ``OrtCompiledModelCompatibility`` name (``EP_SUPPORTED_OPTIMAL``,
    ``EP_SUPPORTED_PREFER_RECOMPILATION``, ``EP_UNSUPPORTED``, ``EP_NOT_APPLICABLE``) and whether it refuses;
    ``None`` where this ONNX Runtime has no such check (before 1.23) or the EP is built in.

    Example:
        >>> import onnxruntime
        >>> compatibility_verdict(onnxruntime, "CPUExecutionProvider", "{}", 0) is None
        True
    """
    from onnxruntime.capi import _pybind_state as capi

    check = getattr(capi, "get_model_compatibility_for_ep_devices", None)
    if check is None:
        return None
    dev = epcontext_device(ort, name, device)
    if dev is None:
        return None
    verdict = check([dev], info)
    state = str(getattr(verdict, "name", verdict)).rpartition(".")[2]
    return state, "refused" if state in REFUSED else "accepted"


def epcontext_nodes(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """The model's EPContext nodes: ``{"name", "source" (the EP), "embed_mode", "file"}`` (``file``: the
    compiled data's file beside the model when it is not embedded).

    Example:
        >>> from onnx import helper
        >>> node = helper.make_node("EPContext", [], [], domain="com.microsoft", source="OpenVINOExecutionProvider",
        ...                         embed_mode=0, ep_cache_context="b1.bin")
        >>> g = helper.make_graph([node], "g", [], [])
        >>> epcontext_nodes(helper.make_model(g))[0]["file"]
        'b1.bin'
    """
    out = []
    for node in model.graph.node:
        if node.op_type != EPCONTEXT_OP or node.domain != "com.microsoft":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        embed = int(attrs.get("embed_mode", 1))
        ctx = attrs.get("ep_cache_context", b"")
        source = attrs.get("source", b"")
        out.append(
            {
                "name": node.name,
                "source": source.decode() if isinstance(source, bytes) else str(source),
                "embed_mode": embed,
                "file": (ctx.decode() if isinstance(ctx, bytes) else str(ctx)) if embed == 0 else None,
            }
        )
    return out


def needs_model_path(model: onnx.ModelProto) -> bool:
    """Whether ONNX Runtime must open this model by its path: an EPContext node keeps its compiled data in a file
    next to the model, which the EP finds relative to the model's path (a session made from bytes cannot).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> needs_model_path(tiny_cnn())
        False
    """
    return any(n["embed_mode"] == 0 for n in epcontext_nodes(model))


def loads_by_path(source: Any) -> bool:
    """Whether a session opens this :class:`~amdinfer.model.ModelSource` by its path rather than from the bytes
    amdinfer read and checked: a model too large for one protobuf, or one that :func:`needs_model_path`.

    Example:
        >>> from amdinfer.model import ModelSource
        >>> from amdinfer.testing.models import tiny_cnn
        >>> loads_by_path(ModelSource.from_any(tiny_cnn()))
        False
    """
    if source.path is None:
        return False
    huge = source._bytes is None and source.proto.ByteSize() >= 2**31 - 1
    return huge or needs_model_path(source.proto)
