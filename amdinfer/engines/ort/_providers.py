"""What amdinfer knows about each ONNX Runtime execution provider: one frozen record per provider.

Every table the ORT backend needs (short names, provider libraries, wheels, fix hints, device types,
the typed knobs' option names, amdinfer's tuned defaults) is derived from :data:`PROVIDERS`; the option
names come from ONNX Runtime's own sources (``migraphx_execution_provider_info.h``,
``rocm_execution_provider_info.cc``, ``cuda_execution_provider_info.cc``). :func:`provider_options`
maps amdinfer's typed options without importing ONNX Runtime, so it is testable anywhere.

Example:
    >>> PROVIDERS["ROCMExecutionProvider"].short, PROVIDERS["ROCMExecutionProvider"].distribution
    ('rocm', 'onnxruntime-rocm')
    >>> provider_options("CUDAExecutionProvider", exhaustive_tune=False, prefer_nhwc=True)
    {'device_id': '0', 'cudnn_conv_algo_search': 'HEURISTIC', 'prefer_nhwc': '1'}
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from ..._support._install import pip_extra
from ...errors import BackendUnavailableError, OptionError
from .._fusion import FusionDefaults
from ._plugin_records import MIGRAPHX_EP, MIGRAPHX_SERVES, PLUGIN_DISTRIBUTIONS, PLUGIN_PROVIDERS
from ._record import (
    _NOT_OFFERED,
    GPU_FUSION,
    MIGRAPHX_FUSION,
    MIGRAPHX_TUNED,
    ExecutionProvider,
    Option,
    TunedDefault,
    _as_int,
    _exhaustive_cudnn,
)

__all__ = [
    "AMD_PROVIDERS",
    "CPU_EP",
    "CUDA_EP",
    "GPU_PROVIDERS",
    "AMD_ORDER",
    "MIGRAPHX_EP",
    "ORT_DISTRIBUTIONS",
    "PLUGIN_DISTRIBUTIONS",
    "PLUGIN_PROVIDERS",
    "PROVIDERS",
    "PROVIDER_ORDER",
    "ROCM_EP",
    "ExecutionProvider",
    "Option",
    "TunedDefault",
    "check_declared",
    "installed_ort_distributions",
    "ort_device_type",
    "probe_provider",
    "provider_options",
    "provider_record",
    "resolve_provider_name",
]


ROCM_EP = "ROCMExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"

_MIGRAPHX = ExecutionProvider(
    name=MIGRAPHX_EP,
    short="migraphx",
    label="migraphx",
    library="libonnxruntime_providers_migraphx.so",
    distribution="onnxruntime-migraphx",
    fix="install ROCm with MIGraphX (libmigraphx_c.so.3 must be on the loader path, e.g. /opt/rocm/lib) "
    f"and `{pip_extra('migraphx')}`; check with `amdinfer doctor`",
    device_type="gpu",
    options={
        "exhaustive_tune": (Option("migraphx_exhaustive_tune"),),
        "memory_limit": (Option("migraphx_mem_limit", _as_int),),
        "model_cache_dir": (Option("migraphx_model_cache_dir", str),),
        "int8_calibration_table": (
            Option("migraphx_int8_calibration_table_name", str),
            Option("migraphx_int8_use_native_calibration_table", fixed="0"),
        ),
        # ROCm 7.2's EP (onnxruntime-migraphx 1.23.2) added migraphx_hip_graph_enable, migraphx_max_dynamic_batch and
        # migraphx_compile_batches; older built-in EPs refuse unknown keys, so only the graph knob is mapped, and only
        # when asked for (gpu_graphs=True). The plugin EP's record maps all three.
        "gpu_graphs": (Option("migraphx_hip_graph_enable"),),
    },
    precision={
        "fp16": {"migraphx_fp16_enable": "1"},
        "bf16": {"migraphx_bf16_enable": "1"},
        "int8": {"migraphx_int8_enable": "1"},
    },
    tuned=MIGRAPHX_TUNED,
    fusion=MIGRAPHX_FUSION,
    serves=MIGRAPHX_SERVES,
)

_ROCM = ExecutionProvider(
    name=ROCM_EP,
    short="rocm",
    label="rocm",
    library="libonnxruntime_providers_rocm.so",
    distribution="onnxruntime-rocm",
    serves="AMD GPUs through ROCm (MIOpen, rocBLAS)",
    fix="install ROCm (libamdhip64, MIOpen, rocBLAS on the loader path, e.g. /opt/rocm/lib) and "
    f"`{pip_extra('rocm')}` (the ROCm EP exists up to onnxruntime 1.22); check with `amdinfer doctor`",
    device_type="cuda",
    options={
        "exhaustive_tune": (Option("miopen_conv_exhaustive_search"),),
        "tunable_ops": (Option("tunable_op_enable"), Option("tunable_op_tuning_enable")),
        "memory_limit": (Option("gpu_mem_limit", _as_int),),
        "gpu_graphs": (Option("enable_hip_graph"),),
    },
    tuned={
        "prefer_nhwc": TunedDefault(None, "the ROCm EP has no NHWC option (MIOpen layout is fixed by ONNX Runtime)"),
        "exhaustive_tune": TunedDefault(
            True, "MIOpen searches convolution solutions once per shape and caches them in its user database"
        ),
        "gpu_graphs": TunedDefault(
            True,
            "IO is bound to fixed device buffers per input shape, so each shape is captured once "
            "as a HIP graph and replayed",
        ),
        "tunable_ops": TunedDefault(
            True, "ROCm's TunableOp picks among rocBLAS/hipBLASLt/composable-kernel implementations per shape"
        ),
        "tf32": TunedDefault(None, _NOT_OFFERED),
    },
    fusion=GPU_FUSION,
)

_CUDA = ExecutionProvider(
    name=CUDA_EP,
    short="cuda",
    label="cuda",
    library="libonnxruntime_providers_cuda.so",
    distribution="onnxruntime-gpu",
    serves="NVIDIA GPUs through CUDA and cuDNN",
    fix="install the CUDA and cuDNN libraries onnxruntime-gpu was built for (or `import torch` first) and "
    f"`{pip_extra('cuda')}`; check with `amdinfer doctor`",
    device_type="cuda",
    options={
        "exhaustive_tune": (Option("cudnn_conv_algo_search", _exhaustive_cudnn),),
        "tunable_ops": (Option("tunable_op_enable"), Option("tunable_op_tuning_enable")),
        "memory_limit": (Option("gpu_mem_limit", _as_int),),
        "gpu_graphs": (Option("enable_cuda_graph"),),
        "prefer_nhwc": (Option("prefer_nhwc"),),
        "tf32": (Option("use_tf32"),),
    },
    tuned={
        "prefer_nhwc": TunedDefault(
            True,
            "NHWC convolutions run on tensor cores without a layout transpose around each one "
            "(ONNX Runtime rewrites the layout once, at load)",
        ),
        "exhaustive_tune": TunedDefault(
            True,
            "cuDNN times every convolution algorithm once per input shape and keeps the fastest "
            "(first run of each shape is slower; later runs faster than the HEURISTIC pick)",
        ),
        "gpu_graphs": TunedDefault(
            True,
            "IO is bound to fixed device buffers per input shape, so each shape's launches are "
            "captured once as a CUDA graph and replayed (removes per-kernel launch cost)",
        ),
        "tunable_ops": TunedDefault(
            None, "the CUDA EP's TunableOp covers a few GEMM/contrib kernels only; left at the provider default"
        ),
        "tf32": TunedDefault(
            None,
            "left at the provider default (on): fp32 convolutions and GEMMs use TF32 tensor cores "
            "(10-bit mantissa, relative error about 1e-3); pass tf32=False for strict fp32",
        ),
    },
    fusion=GPU_FUSION,
)

_CPU = ExecutionProvider(
    name=CPU_EP,
    short="cpu",
    label="cpu",
    library=None,
    distribution="onnxruntime",
    fix="reinstall onnxruntime",
    fusion=FusionDefaults(
        nms="per-class", reason="ONNX Runtime's CPU NonMaxSuppression runs any form; per-class is exact"
    ),
)


#: Every provider amdinfer knows, in the order ``backend="auto"`` tries them.
PROVIDERS: Mapping[str, ExecutionProvider] = {p.name: p for p in (_MIGRAPHX, _ROCM, _CUDA, _CPU)}

#: The order ``backend="auto"`` tries providers in.
PROVIDER_ORDER: tuple[str, ...] = tuple(PROVIDERS)
AMD_PROVIDERS: tuple[str, ...] = (MIGRAPHX_EP, ROCM_EP)
#: ``backend="auto"``'s order among AMD's EPs, built-in or plugin: the compiled MIGraphX path first (amdinfer maps
#: its cache, precision and batch options), AMD's umbrella EP next, the ROCm EP (ONNX Runtime <= 1.22) last.
AMD_ORDER: tuple[str, ...] = (MIGRAPHX_EP, "AMDGPUExecutionProvider", ROCM_EP)
#: Providers whose memory is on a GPU (IO bound on the device by default).
GPU_PROVIDERS: tuple[str, ...] = tuple(p.name for p in PROVIDERS.values() if p.gpu)

_SHORT_NAMES = {p.short: p.name for p in (*PROVIDERS.values(), *PLUGIN_PROVIDERS.values())}
#: The records of the EPs that plugins registered in this process (filled by ``_plugins``): amdinfer's plugin
#: record where it has one (the MIGraphX plugin shares the built-in EP's name but not its option names), else a
#: plain derived record. They win over the built-in records of the same name.
_DERIVED: dict[str, ExecutionProvider] = {}

#: The distributions that each install a module named ``onnxruntime`` (two at once overwrite each other).
ORT_DISTRIBUTIONS: tuple[str, ...] = tuple(
    f"onnxruntime{s}" for s in ("", "-gpu", "-rocm", "-migraphx", "-directml", "-openvino", "-training", "-qnn")
)


def provider_record(provider: str) -> ExecutionProvider | None:
    """The record of a built-in or plugin execution provider (``None``: amdinfer knows nothing of it).

    Example:
        >>> provider_record("OpenVINOExecutionProvider").plugin, provider_record("NoSuchEP") is None
        (True, True)
    """
    return _DERIVED.get(provider) or PROVIDERS.get(provider) or PLUGIN_PROVIDERS.get(provider)


#: Fix hints for EPs that ONNX Runtime builds carry but amdinfer keeps no record of (it maps none of their options
#: and never tries them under ``backend="auto"``): a user who names one gets what it needs, not "check the name".
_OTHER_FIXES = {
    "TensorrtExecutionProvider": "onnxruntime-gpu lists it, but it needs NVIDIA's TensorRT libraries (libnvinfer) of "
    "the version that onnxruntime-gpu was built for on the loader path (e.g. `pip install tensorrt` and its lib folder "
    "on LD_LIBRARY_PATH); check with `amdinfer doctor`",
    "AzureExecutionProvider": "it runs models hosted on Azure endpoints, not local ONNX models: pick another provider",
}


def fix_for(provider: str) -> str:
    """The fix hint for a provider (``"check the name"`` for names amdinfer knows nothing of).

    Example:
        >>> fix_for("CPUExecutionProvider")
        'reinstall onnxruntime'
        >>> "libnvinfer" in fix_for("TensorrtExecutionProvider"), fix_for("NoSuchExecutionProvider")
        (True, 'check the name')
    """
    record = provider_record(provider)
    if record is not None:
        return record.fix
    return _OTHER_FIXES.get(provider, "check the name")


def ort_device_type(provider: str) -> str:
    """The device name ONNX Runtime's Python API uses for a provider's memory (see :class:`ExecutionProvider`).

    Example:
        >>> ort_device_type("CUDAExecutionProvider"), ort_device_type("CPUExecutionProvider")
        ('cuda', 'cpu')
    """
    record = provider_record(provider)
    return record.device_type if record is not None else "cpu"


def import_ort() -> Any:
    """``import onnxruntime``, or :class:`~amdinfer.BackendUnavailableError` with the install hint.

    Example:
        >>> import_ort().__name__
        'onnxruntime'
    """
    try:
        import onnxruntime
    except ImportError as exc:
        raise BackendUnavailableError(
            "backend 'ort': onnxruntime is not installed; install one ONNX Runtime distribution: "
            f"{pip_extra('cpu')}; or the [migraphx], [rocm] or [cuda] extra instead of [cpu]",
            backend="ort",
            cause=str(exc),
        ) from exc
    return onnxruntime


def installed_ort_distributions() -> dict[str, str]:
    """ONNX Runtime distributions installed, name -> version (more than one is a broken install).

    Example:
        >>> found = installed_ort_distributions()
        >>> set(found) <= set(ORT_DISTRIBUTIONS) and all(isinstance(v, str) for v in found.values())
        True
    """
    found = {}
    for dist in ORT_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def resolve_provider_name(name: str) -> str:
    """Accept ``"migraphx"``/``"rocm"``/``"cuda"``/``"cpu"``/``"openvino"``, a short name of an installed plugin
    EP (its name without ``ExecutionProvider``, lower case), or full provider names.

    Example:
        >>> resolve_provider_name("rocm"), resolve_provider_name("openvino")
        ('ROCMExecutionProvider', 'OpenVINOExecutionProvider')
    """
    if not isinstance(name, str):
        raise OptionError(f"providers: got {name!r}, expected a provider name string")
    full = _SHORT_NAMES.get(name.lower())
    if full is None and not name.endswith("ExecutionProvider"):
        from ._plugin_find import plugin_short_names  # reads package metadata only; no library is loaded

        full = plugin_short_names().get(name.lower())
    return full or name


@cache
def probe_provider(provider: str) -> str | None:
    """Try to load a provider's shared library the way ONNX Runtime does; return the loader's error or None.

    ``onnxruntime-migraphx`` and ``onnxruntime-rocm`` list their provider as available even when its
    library cannot load (no ROCm); this finds out why, e.g.
    ``libmigraphx_c.so.3: cannot open shared object file: No such file or directory``.

    Example:
        >>> probe_provider("CPUExecutionProvider") is None
        True
    """
    record = PROVIDERS.get(provider)
    library = record.library if record is not None else None
    if library is None:
        return None
    ort = import_ort()
    capi = Path(ort.__file__).parent / "capi"
    path = capi / library
    if not path.exists():
        return f"{library} is not part of the installed onnxruntime build"
    try:
        ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(path))
    except OSError as exc:
        return str(exc)
    return None


def provider_options(
    provider: str,
    *,
    device: int = 0,
    precision: str = "fp32",
    exhaustive_tune: bool | None = None,
    tunable_ops: bool | None = None,
    memory_limit: int | None = None,
    model_cache_dir: str | os.PathLike | None = None,
    gpu_graphs: bool | None = None,
    prefer_nhwc: bool | None = None,
    int8_calibration_table: str | None = None,
    max_dynamic_batch: int | None = None,
    compile_batches: tuple[int, ...] | None = None,
) -> dict[str, str]:
    """Map amdinfer's typed options to one provider's option dict (ONNX Runtime's own option names).

    ``None`` leaves the provider's default. Options a provider does not have are left out of its dict
    (and reported by :class:`~amdinfer.engines.ort.OrtEngine` in ``info.notes``). The names come from
    the provider's :class:`ExecutionProvider` record.

    Args:
        provider: full provider name.
        device: GPU index -> ``device_id``.
        precision: ``"fp16"`` -> ``migraphx_fp16_enable``; ``"bf16"`` -> ``migraphx_bf16_enable``;
            ``"int8"`` -> ``migraphx_int8_enable`` (providers that convert the model themselves);
            ``"fp32"`` -> OpenVINO's ``INFERENCE_PRECISION_HINT=f32`` (it lowers precision by default).
        exhaustive_tune: ``migraphx_exhaustive_tune`` / ``miopen_conv_exhaustive_search`` /
            ``cudnn_conv_algo_search=EXHAUSTIVE`` (else ``HEURISTIC``).
        tunable_ops: ``tunable_op_enable`` + ``tunable_op_tuning_enable`` (ROCm, CUDA).
        memory_limit: bytes -> ``migraphx_mem_limit`` / ``gpu_mem_limit``.
        model_cache_dir: ``migraphx_model_cache_dir`` (compiled MIGraphX programs).
        gpu_graphs: ``enable_hip_graph`` (ROCm) / ``enable_cuda_graph`` (CUDA).
        prefer_nhwc: ``prefer_nhwc`` (CUDA).
        int8_calibration_table: ``migraphx_int8_calibration_table_name`` (+ native table flag off).
        max_dynamic_batch: the largest batch of a dynamic-batch ``shapes=`` -> ``max_dynamic_batch`` (MIGraphX plugin).
        compile_batches: ``batch_buckets=`` -> ``compile_batches`` (the MIGraphX plugin compiles each ahead).

    The MIGraphX *plugin* EP (``onnxruntime-ep-migraphx``, registered in this process) takes the same knobs
    under its own names: ``fp16_enable``, ``cache_dir``, ``exhaustive_tune``, ``hip_graph_enable``,
    ``max_dynamic_batch``, ``compile_batches``.

    Example:
        >>> provider_options("MIGraphXExecutionProvider", device=1, precision="fp16", exhaustive_tune=True)
        {'device_id': '1', 'migraphx_fp16_enable': '1', 'migraphx_exhaustive_tune': '1'}
        >>> provider_options("ROCMExecutionProvider", tunable_ops=True, gpu_graphs=True)
        {'device_id': '0', 'tunable_op_enable': '1', 'tunable_op_tuning_enable': '1', 'enable_hip_graph': '1'}
        >>> provider_options("OpenVINOExecutionProvider")["load_config"]
        '{"CPU": {"INFERENCE_PRECISION_HINT": "f32"}, "GPU": {"INFERENCE_PRECISION_HINT": "f32"}}'
        >>> provider_options("MIGraphXExecutionProvider", compile_batches=(1, 8), gpu_graphs=True)
        {'device_id': '0', 'migraphx_hip_graph_enable': '1'}
    """
    record = provider_record(provider)
    if record is None or not (record.gpu or record.plugin):
        return {}
    # a plugin EP's device is chosen among ONNX Runtime's EP devices (``_plugins.pick_device``), not by option
    opts: dict[str, str] = {} if record.plugin else {"device_id": str(int(device))}
    opts.update(record.precision.get(precision, {}))
    if precision != "int8":
        int8_calibration_table = None  # the table means nothing without int8
    knobs = {
        "exhaustive_tune": exhaustive_tune,
        "tunable_ops": tunable_ops,
        "memory_limit": memory_limit,
        "model_cache_dir": model_cache_dir,
        "gpu_graphs": gpu_graphs,
        "prefer_nhwc": prefer_nhwc,
        "int8_calibration_table": int8_calibration_table,
        "max_dynamic_batch": max_dynamic_batch,
        "compile_batches": compile_batches,
    }
    for knob, typed in knobs.items():
        if typed is None:
            continue
        for option in record.options.get(knob, ()):
            opts[option.name] = option.value(typed)
    return opts


def knob_applies(provider: str, knob: str) -> bool:
    """Whether ``provider`` has an option for the typed ``knob``.

    Example:
        >>> knob_applies("CUDAExecutionProvider", "prefer_nhwc"), knob_applies("ROCMExecutionProvider", "prefer_nhwc")
        (True, False)
    """
    record = provider_record(provider)
    return record is not None and knob in record.options


def check_declared(provider: str, options: Mapping[str, str], version: str | None = None) -> None:
    """Refuse provider options that ``provider`` would drop without an error (its record's ``declared`` list).

    Keys the EP accepts under an old name (``aliases``) pass. Records without a vocabulary (``declared=None``)
    accept anything.

    Raises:
        OptionError: naming the key, the EP and its version, and the option that replaced it.

    Example:
        >>> check_declared("OpenVINOExecutionProvider", {"anything": "1"})
        >>> rec = PLUGIN_PROVIDERS["MIGraphXExecutionProvider"]
        >>> _DERIVED[rec.name] = rec
        >>> check_declared(rec.name, {"fp16_enable": "1", "migraphx_exhaustive_tune": "1"}, "1.0.0")
        >>> check_declared(rec.name, {"migraphx_model_cache_dir": "/c"}, "1.0.0")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: provider option 'migraphx_model_cache_dir': ... use 'cache_dir' ...
        >>> del _DERIVED[rec.name]
    """
    record = provider_record(provider)
    if record is None or record.declared is None:
        return
    unknown = [k for k in options if k not in record.declared and k not in record.aliases]
    if not unknown:
        return
    key = unknown[0]
    replacement = record.renamed.get(key)
    if replacement:
        hint = f"use {replacement!r} (this EP renamed it)"
    elif key in record.renamed:
        hint = "this EP has no such setting"
    else:
        hint = f"the options it recognises are {sorted(record.declared)}"
    what = f"{record.distribution} {version}" if version else record.distribution
    raise OptionError(
        f"provider option {key!r}: {provider} from {what} does not recognise it and would ignore it without an "
        f"error; {hint}. amdinfer refuses it so that no setting is dropped silently (vocabulary from "
        f"{record.vocabulary_of or record.distribution})"
    )
