"""``reduce_range="auto"``: 7-bit int8 weights exactly where ONNX Runtime's int8 kernels saturate (x86, no VNNI).

The truth is the CPU's own flag list, written here as /proc/cpuinfo files: AVX2 alone saturates (``vpmaddubsw``
sums pairs into 16 bits), AVX-512 VNNI, AVX-VNNI and AMX do not; other architectures never do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amdinfer import OptionError
from amdinfer._support._hardware import int8_saturates
from amdinfer.quantize import DynamicInt8Quantizer, Int8Quantizer
from amdinfer.quantize._options import reduce_range_choice


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 {flags}\n\nprocessor\t: 1\n")
    return path


@pytest.mark.parametrize(
    ("flags", "saturates"),
    [
        ("avx avx2 fma", True),  # the AMD EPYC of this repository's CI on some days
        ("avx avx2 avx512f avx512bw", True),  # AVX-512 without VNNI still goes through 16-bit pair sums
        ("avx avx2 avx512f avx512_vnni", False),
        ("avx avx2 avx_vnni", False),
        ("avx avx2 avx512f amx_tile amx_int8", False),
    ],
)
def test_x86_saturates_without_an_int8_dot_product(tmp_path: Path, flags: str, saturates: bool) -> None:
    assert int8_saturates(_cpuinfo(tmp_path, flags), machine="x86_64") is saturates


def test_other_architectures_never_saturate(tmp_path: Path) -> None:
    assert int8_saturates(_cpuinfo(tmp_path, "fp asimd"), machine="aarch64") is False


def test_auto_follows_this_cpu_and_the_caller_wins() -> None:
    here = int8_saturates()
    calibration = [np.zeros((1, 3, 8, 8), np.float32)]
    for make in (lambda **kw: Int8Quantizer(calibration, **kw), DynamicInt8Quantizer):
        auto = make()
        assert auto.reduce_range is here
        assert auto.reduce_range_why.startswith("reduce_range=auto: ")
        assert ("7-bit" in auto.reduce_range_why) is here
        assert make(reduce_range=False).reduce_range is False
        assert make(reduce_range=True).reduce_range is True
    assert reduce_range_choice(True) == (True, "reduce_range=True (set by the caller)")


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_other_values_are_refused_naming_the_argument(bad: object) -> None:
    with pytest.raises(OptionError, match="reduce_range: got"):
        Int8Quantizer([np.zeros((1, 3, 8, 8), np.float32)], reduce_range=bad)  # type: ignore[arg-type]
