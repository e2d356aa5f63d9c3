"""amdinfer's records of plugin execution providers (``onnxruntime-ep-*`` packages): AMD's MIGraphX plugin and umbrella
EP, OpenVINO, WebGPU, TensorRT-RTX. Built from each plugin's published sources; :mod:`._providers` reads them.

Example:
    >>> PLUGIN_PROVIDERS["MIGraphXExecutionProvider"].distribution
    'onnxruntime-ep-migraphx'
    >>> PLUGIN_DISTRIBUTIONS["onnxruntime-ep-openvino"].short
    'openvino'
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..._support._install import pip_extra
from ._record import MIGRAPHX_FUSION, MIGRAPHX_TUNED, ExecutionProvider, Option, _as_int, _batches

__all__ = ["MIGRAPHX_EP", "MIGRAPHX_SERVES", "PLUGIN_DISTRIBUTIONS", "PLUGIN_PROVIDERS"]

#: The MIGraphX EP's name, built in and as AMD's plugin alike.
MIGRAPHX_EP = "MIGraphXExecutionProvider"
#: What MIGraphX runs on (built in or plugin).
MIGRAPHX_SERVES = "AMD Instinct and Radeon GPUs through ROCm's MIGraphX"


def _ov_precision(hint: str) -> dict[str, str]:
    # OpenVINO's plugin EP ignores its old `precision` option ("set it via the load_config"); the per-device
    # INFERENCE_PRECISION_HINT in load_config is what its CPU and GPU plugins read.
    return {"load_config": json.dumps({dev: {"INFERENCE_PRECISION_HINT": hint} for dev in ("CPU", "GPU")})}


_OPENVINO = ExecutionProvider(
    name="OpenVINOExecutionProvider",
    short="openvino",
    label="openvino",
    library=None,
    distribution="onnxruntime-ep-openvino",
    fix="`pip install onnxruntime-ep-openvino` (a plugin EP: onnxruntime >= 1.23 loads it); "
    "check with `amdinfer doctor`",
    precision={"fp32": _ov_precision("f32")},
    plugin=True,
    lowers="OpenVINO runs float32 models in bf16 on CPUs with bf16 units and in fp16 on GPUs unless "
    "INFERENCE_PRECISION_HINT says f32",
    serves="Intel CPUs, GPUs and NPUs (its factory offers no device for other vendors' CPUs)",
    ort_min="1.23",
)

_WEBGPU = ExecutionProvider(
    name="WebGpuExecutionProvider",
    short="webgpu",
    label="webgpu",
    library=None,
    distribution="onnxruntime-ep-webgpu",
    fix="`pip install onnxruntime-ep-webgpu` and a Vulkan loader (libvulkan.so.1) on a machine with a GPU; "
    "check with `amdinfer doctor`",
    device_type="gpu",
    plugin=True,
    serves="GPUs that ONNX Runtime's device discovery lists, through Dawn (Vulkan on Linux); a software Vulkan "
    "driver such as Mesa's lavapipe is not offered as a device",
    ort_min="1.24",
)

#: The option keys of AMD's MIGraphX plugin EP (``src/migraphx/mgx_options.h`` of onnxruntime/onnxruntime-ep-amdgpu).
_MIGRAPHX_PLUGIN_KEYS = frozenset(
    """device_id fp16_enable bf16_enable fp8_enable int8_enable int8_calibration_table_name
    int8_use_native_calibration_table disable_caching force_recompile compute_mode cache_dir exhaustive_tune
    dump_subgraphs hip_graph_enable coresident_programs max_resident_programs max_dynamic_batch compile_batches
    precompile_at_load coalesce_io mlss_use_specific_ops cpu_control_flow model_arch user_compute_stream
    has_user_compute_stream static_pad_seq static_pad_seq_len static_pad_inputs static_pad_outputs""".split()
)

_MIGRAPHX_PLUGIN = ExecutionProvider(
    name=MIGRAPHX_EP,
    short="migraphx",
    label="migraphx",
    library=None,
    distribution="onnxruntime-ep-migraphx",
    fix="install AMD's MIGraphX plugin EP for your ROCm release (`pip install onnxruntime-ep-migraphx` once AMD "
    "publishes it; PyPI holds a 0.0.0 placeholder today) with onnxruntime >= 1.24, or the built-in EP: "
    f"`{pip_extra('migraphx')}`; check with `amdinfer doctor`",
    device_type="gpu",
    options={
        "exhaustive_tune": (Option("exhaustive_tune"),),
        "model_cache_dir": (Option("cache_dir", str),),
        "int8_calibration_table": (
            Option("int8_calibration_table_name", str),
            Option("int8_use_native_calibration_table", fixed="0"),
        ),
        "gpu_graphs": (Option("hip_graph_enable"),),
        "max_dynamic_batch": (Option("max_dynamic_batch", _as_int),),
        "compile_batches": (Option("compile_batches", _batches),),
    },
    precision={"fp16": {"fp16_enable": "1"}, "bf16": {"bf16_enable": "1"}, "int8": {"int8_enable": "1"}},
    tuned=MIGRAPHX_TUNED,
    fusion=MIGRAPHX_FUSION,
    plugin=True,
    serves=MIGRAPHX_SERVES,
    ort_min="1.24",
    declared=_MIGRAPHX_PLUGIN_KEYS,
    aliases={
        f"migraphx_{k}": k
        for k in (
            "fp16_enable bf16_enable fp8_enable int8_enable int8_calibration_table_name "
            "int8_use_native_calibration_table exhaustive_tune user_compute_stream has_user_compute_stream"
        ).split()
    },
    renamed={
        "migraphx_model_cache_dir": "cache_dir",
        "migraphx_hip_graph_enable": "hip_graph_enable",
        "migraphx_max_dynamic_batch": "max_dynamic_batch",
        "migraphx_compile_batches": "compile_batches",
        "migraphx_mem_limit": "",
        "migraphx_arena_extend_strategy": "",
        "migraphx_external_alloc": "",
        "migraphx_external_free": "",
        "migraphx_external_empty_cache": "",
    },
    vocabulary_of="onnxruntime-ep-migraphx 1.0.0 (onnxruntime/onnxruntime-ep-amdgpu sources, 2026)",
)

_AMDGPU = ExecutionProvider(
    name="AMDGPUExecutionProvider",
    short="amdgpu",
    label="amdgpu",
    library=None,
    distribution="onnxruntime-ep-amdgpu",
    fix="install AMD's umbrella plugin EP (`pip install onnxruntime-ep-amdgpu` once AMD publishes it; PyPI holds "
    "a 0.0.0 placeholder today) with onnxruntime >= 1.24; check with `amdinfer doctor`",
    device_type="gpu",
    plugin=True,
    serves="AMD GPUs (AMD's umbrella EP, which picks a MIGraphX or hipDNN backend)",
    ort_min="1.24",
)

_NV_TENSORRT_RTX = ExecutionProvider(
    name="NvTensorRTRTXExecutionProvider",
    short="nvtensorrtrtx",
    label="nvtensorrtrtx",
    library=None,
    distribution="onnxruntime-ep-nv-tensorrt-rtx",
    fix="`pip install onnxruntime-ep-nv-tensorrt-rtx` on a machine with an NVIDIA RTX GPU; check with "
    "`amdinfer doctor`",
    device_type="cuda",
    plugin=True,
    serves="NVIDIA RTX GPUs (GeForce/RTX professional; not data-centre GPUs such as the H200)",
    ort_min="1.23",
)

#: Plugin execution providers amdinfer has a record for (any other plugin EP gets a plain derived record).
PLUGIN_PROVIDERS: Mapping[str, ExecutionProvider] = {
    p.name: p for p in (_MIGRAPHX_PLUGIN, _AMDGPU, _OPENVINO, _NV_TENSORRT_RTX, _WEBGPU)
}
#: Plugin records by distribution (``onnxruntime-ep-migraphx`` -> its record), for packages that did not register.
PLUGIN_DISTRIBUTIONS: Mapping[str, ExecutionProvider] = {p.distribution: p for p in PLUGIN_PROVIDERS.values()}
