"""The machine fingerprint: CPU instruction set and AMD GPU architectures (cache keys and ``amdinfer doctor``).

Read without initializing any runtime (``/proc/cpuinfo`` and KFD's sysfs topology).

Example:
    >>> amd_gpu_archs("/nonexistent"), visible_gpu_arch(0, [], env={})
    ([], 'unknown')
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

__all__ = ["amd_gpu_archs", "cpu_description", "cpu_info", "cpu_signature", "int8_saturates", "visible_gpu_arch"]

PathLike = Union[str, "os.PathLike[str]"]


def cpu_signature() -> str:
    """The CPU's architecture and instruction-set flags, digested (ORT's CPU-optimized graphs depend on them).

    ONNX Runtime's layout optimizations (NCHWc blocking) pick block sizes from the CPU's vector width, so an
    optimized model written on an AVX-512 machine is not valid on an AVX2 one.

    Example:
        >>> cpu_signature().startswith(platform.machine())
        True
    """
    flags = ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    return f"{platform.machine()}:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def _gfx_from_target_version(version: int) -> str:
    """KFD's ``gfx_target_version`` (e.g. 90402, 90010, 110000) as a gfx name (gfx942, gfx90a, gfx1100)."""
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def amd_gpu_archs(sysfs: PathLike = "/sys/class/kfd/kfd/topology/nodes") -> list[dict[str, Any]]:
    """AMD GPUs the kernel driver (KFD) lists, in node order: ``[{"gfx": "gfx942", "cu": 304}, ...]``.

    Read from sysfs without initializing HIP. Empty without ROCm's driver (as on machines without an AMD GPU).

    Example:
        >>> amd_gpu_archs("/nonexistent")
        []
    """
    root = Path(sysfs)
    out = []  # type: ignore[var-annotated]
    if not root.is_dir():
        return out
    nodes = sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for node in nodes:
        props: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            for line in (node / "properties").read_text().splitlines():
                name, _, value = line.partition(" ")
                if value.strip().lstrip("-").isdigit():
                    props[name] = int(value)
        version = props.get("gfx_target_version", 0)
        if version > 0:  # CPU nodes report 0
            cu = props.get("simd_count", 0) // max(props.get("simd_per_cu", 1), 1)
            out.append({"gfx": _gfx_from_target_version(version), "cu": cu, "node": int(node.name)})
    return out


def visible_gpu_arch(
    device: int, archs: list[dict[str, Any]] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The gfx name of HIP device ``device`` (after ``HIP_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES``), or ``"unknown"``.

    Best effort: HIP numbers GPUs in the driver's node order; a visibility variable that is not a list of
    indices (UUIDs) leaves the mapping unknown unless every GPU has the same architecture.

    Example:
        >>> two = [{"gfx": "gfx90a", "cu": 104}, {"gfx": "gfx942", "cu": 304}]
        >>> visible_gpu_arch(1, two, env={})
        'gfx942:304cu'
        >>> visible_gpu_arch(0, two, env={"HIP_VISIBLE_DEVICES": "1"})
        'gfx942:304cu'
        >>> visible_gpu_arch(0, [], env={})
        'unknown'
    """
    archs = amd_gpu_archs() if archs is None else archs
    env = os.environ if env is None else env
    if not archs:
        return "unknown"
    names = {f"{a['gfx']}:{a['cu']}cu" for a in archs}
    order = list(range(len(archs)))
    for var in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = env.get(var)
        if value is None or value == "":
            continue
        items = [v.strip() for v in value.split(",") if v.strip()]
        if not all(v.isdigit() for v in items):
            return names.pop() if len(names) == 1 else "unknown"
        order = [order[int(v)] for v in items if int(v) < len(order)]
    if device >= len(order):
        return "unknown"
    a = archs[order[device]]
    return f"{a['gfx']}:{a['cu']}cu"


#: Instruction-set extensions named by :func:`cpu_description` (ONNX Runtime, OpenVINO, OpenCV pick kernels by them).
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")


def _cpuinfo_fields(path: PathLike) -> dict[str, str]:
    """The first processor's ``vendor_id``, ``model name`` and ``flags`` lines of ``path`` (empty when unreadable)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("vendor_id", "model name", "flags") and key not in fields:
                    fields[key] = value.strip()
                if len(fields) == 3:
                    break
    return fields


def cpu_info(path: PathLike = "/proc/cpuinfo") -> dict[str, Any]:
    """The CPU's vendor id, model name and the instruction-set extensions of :data:`_ISA_FLAGS` it has.

    Example:
        >>> sorted(cpu_info())
        ['isa', 'model', 'vendor']
        >>> cpu_info("/nonexistent")["vendor"]
        'unknown'
    """
    fields = _cpuinfo_fields(path)
    flags = set(fields.get("flags", "").split())
    return {
        "vendor": fields.get("vendor_id", "unknown"),
        "model": fields.get("model name", platform.processor() or platform.machine()),
        "isa": [f for f in _ISA_FLAGS if f in flags],
    }


def cpu_description(path: PathLike = "/proc/cpuinfo") -> str:
    """One line naming the CPU: model, vendor id and the extensions that change kernels (for messages, benchmarks).

    Example:
        >>> cpu_description("/nonexistent").endswith("(unknown; no listed extensions)")
        True
    """
    info = cpu_info(path)
    isa = " ".join(info["isa"]) or "no listed extensions"
    return f"{info['model']} ({info['vendor']}; {isa})"


#: x86 extensions whose int8 dot product sums in 32 bits (AVX-512 VNNI, AVX-VNNI, AMX): no 16-bit intermediate
_INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def int8_saturates(path: PathLike = "/proc/cpuinfo", machine: str | None = None) -> bool:
    """Whether ONNX Runtime's int8 kernels on this CPU can saturate: an x86 CPU without VNNI or AMX.

    There, uint8 x int8 products go through ``vpmaddubsw``, which adds pairs into 16 bits and clips; full-range
    8-bit weights then lose accuracy (measured on an AMD EPYC with AVX2 and no VNNI: the PP-OCR recogniser's int8
    cosine fell to 0.93 and a MiniLM encoder's to 0.987, the trained DocLayNet YOLOv8n lost boxes; with 7-bit
    weights each met its bound). ONNX Runtime's answer is ``reduce_range`` (7-bit weights), which
    the int8 quantizers choose by default where this is true. Other architectures (ARM's dot products sum in 32
    bits) answer ``False``; an unreadable ``/proc/cpuinfo`` on x86 answers ``True`` (the safe side).

    Example:
        >>> int8_saturates(machine="aarch64")
        False
        >>> int8_saturates("/nonexistent", machine="x86_64")
        True
    """
    arch = (machine or platform.machine()).lower()
    if arch not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return False
    return not (set(_cpuinfo_fields(path).get("flags", "").split()) & _INT8_DOT_FLAGS)
