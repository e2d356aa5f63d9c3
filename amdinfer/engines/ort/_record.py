"""The record type behind :mod:`._providers` and :mod:`._plugin_records`: one frozen dataclass per execution provider.

Example:
    >>> Option("prefer_nhwc").value(True), TunedDefault(None, "the provider's own").value is None
    ('1', True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..._support._validate import flag
from .._fusion import FusionDefaults

__all__ = ["GPU_FUSION", "MIGRAPHX_FUSION", "MIGRAPHX_TUNED", "ExecutionProvider", "Option", "TunedDefault"]


def _exhaustive_cudnn(value: Any) -> str:
    return "EXHAUSTIVE" if value else "HEURISTIC"


def _as_int(value: Any) -> str:
    return str(int(value))


def _batches(value: Any) -> str:
    return ",".join(str(int(b)) for b in value)


@dataclass(frozen=True)
class Option:
    """One ONNX Runtime provider option a typed knob sets.

    Attributes:
        name: ONNX Runtime's option name.
        encode: typed value -> option string (default: ``"1"``/``"0"``).
        fixed: a constant written whenever the knob is set (``encode`` is then ignored).

    Example:
        >>> Option("prefer_nhwc").encode(True), Option("cudnn_conv_algo_search", _exhaustive_cudnn).encode(False)
        ('1', 'HEURISTIC')
    """

    name: str
    encode: Callable[[Any], str] = flag
    fixed: str | None = None

    def value(self, typed: Any) -> str:
        """The option string for ``typed``."""
        return self.fixed if self.fixed is not None else self.encode(typed)


@dataclass(frozen=True)
class TunedDefault:
    """amdinfer's default for a tunable knob on one provider, and why (``value=None``: the provider's own).

    Example:
        >>> TunedDefault(True, "faster").value
        True
    """

    value: bool | None
    reason: str


@dataclass(frozen=True)
class ExecutionProvider:
    """Everything amdinfer knows about one ONNX Runtime execution provider.

    Attributes:
        name: ONNX Runtime's name (``"MIGraphXExecutionProvider"``).
        short: the short name accepted in ``providers=`` (``"migraphx"``).
        label: the device label in ``engine.info.device`` (``"migraphx:0"``).
        library: the provider's shared library inside ``onnxruntime/capi`` (``None``: built in).
        distribution: the wheel that ships it.
        fix: what to do when it cannot load.
        device_type: the device name ONNX Runtime's Python API uses for its memory (``OrtValue``
            and IOBinding): ``"cuda"`` for CUDA and ROCm (ROCm builds map their GPU to ``"cuda"``),
            ``"gpu"`` for MIGraphX (a generic GPU device with AMD's vendor id), ``"cpu"``. The AMD
            mappings follow ONNX Runtime's sources and are not verified on AMD hardware.
        options: typed knob -> the provider options it sets (knobs absent here do not exist there).
        precision: precision -> provider options that make the provider convert the model itself.
        tuned: tunable knob -> :class:`TunedDefault` (see :mod:`amdinfer.engines.ort._tuning`).
        plugin: loaded from an ``onnxruntime-ep-*`` package through ONNX Runtime's EP ABI (not built into
            the wheel; see :mod:`amdinfer.engines.ort._plugins`).
        lowers: what the provider does to a float32 model by default when that is less than float32
            (``precision["fp32"]`` then holds the options that keep float32).
        serves: the hardware the provider runs on (named when a plugin offers no device on this machine).
        ort_min: the oldest onnxruntime that loads it (plugin EPs: the EP ABI they are built against).
        declared: every provider option the EP recognises (``None``: amdinfer has no record of its vocabulary and
            passes options through). Any other key is refused before the session is made, since the EP would
            drop it without an error.
        aliases: old option names the EP still accepts, mapped to its own.
        renamed: old option names the EP does **not** accept, mapped to the option that replaced them (the
            refusal names the replacement).
        vocabulary_of: which release of the EP the ``declared`` list was taken from.
        fusion: what :meth:`Pipeline.fuse <amdinfer.Pipeline.fuse>`'s ``"auto"`` modes build when this provider
            comes first (:class:`~amdinfer.engines._fusion.FusionDefaults`: the NMS and Resize forms, and why).

    Example:
        >>> from amdinfer.engines.ort._providers import PLUGIN_PROVIDERS, PROVIDERS
        >>> PROVIDERS["MIGraphXExecutionProvider"].precision["fp16"]
        {'migraphx_fp16_enable': '1'}
        >>> PLUGIN_PROVIDERS["MIGraphXExecutionProvider"].option_names("model_cache_dir")
        ('cache_dir',)
    """

    name: str
    short: str
    label: str
    library: str | None
    distribution: str
    fix: str
    device_type: str = "cpu"
    options: Mapping[str, tuple[Option, ...]] = field(default_factory=dict)
    precision: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    tuned: Mapping[str, TunedDefault] = field(default_factory=dict)
    plugin: bool = False
    lowers: str | None = None
    serves: str = ""
    ort_min: str | None = None
    declared: frozenset[str] | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)
    renamed: Mapping[str, str] = field(default_factory=dict)
    vocabulary_of: str = ""
    fusion: FusionDefaults = field(default_factory=FusionDefaults)

    @property
    def gpu(self) -> bool:
        """Whether the provider's memory is on a GPU (IO bound on the device by default)."""
        return self.device_type != "cpu"

    def option_names(self, knob: str) -> tuple[str, ...]:
        """The provider options ``knob`` sets here (empty: the provider has no such option)."""
        return tuple(o.name for o in self.options.get(knob, ()))


_NOT_OFFERED = "the provider has no such option"

#: The MIGraphX compiler's fusion facts, one compiler behind both the built-in EP and AMD's plugin EP.
MIGRAPHX_FUSION = FusionDefaults(
    nms="host",
    reason="MIGraphX pads the outputs of NonMaxSuppression and NonZero to static shapes, so NMS runs on the host",
)
#: CUDA and ROCm EPs: the dense NMS loop and fuse_model's size rule stay on the GPU.
GPU_FUSION = FusionDefaults(
    nms="dense",
    resize="auto",
    reason="the dense NMS (one greedy loop) and fuse_model's Resize size rule run on the GPU without host round trips",
)

#: MIGraphX's tuned defaults, one compiler behind both the built-in EP and AMD's plugin EP.
MIGRAPHX_TUNED: Mapping[str, TunedDefault] = {
    "prefer_nhwc": TunedDefault(None, "MIGraphX chooses layouts itself while compiling"),
    "exhaustive_tune": TunedDefault(
        True,
        "MIGraphX benchmarks kernel configurations while compiling (slower compile: keep "
        "model_cache_dir so it happens once)",
    ),
    "gpu_graphs": TunedDefault(
        None,
        "HIP graph capture (migraphx_hip_graph_enable, ROCm 7.2+) is left at the EP's default (off): not "
        "measured on AMD hardware here; pass gpu_graphs=True to turn it on",
    ),
    "tunable_ops": TunedDefault(None, _NOT_OFFERED),
    "tf32": TunedDefault(None, _NOT_OFFERED),
}
