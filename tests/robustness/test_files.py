"""``amdinfer._support._files``: the checked readers give exactly what NumPy and the file system give for good files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from amdinfer._support._files import check_allocation, read_npz, read_regular
from amdinfer.errors import InputError, ModelError


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed], ids=["savez", "savez_compressed"])
def test_read_npz_equals_numpy(tmp_path: Path, save) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.random((2, 3, 4), dtype=np.float32),
        "fortran": np.asfortranarray(rng.random((3, 5))),
        "scalar": np.array(7, np.int64),
        "empty": np.zeros((0, 3), np.uint8),
        "bool": rng.random(10) > 0.5,
        "f16": rng.random((4,)).astype(np.float16),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
    }
    path = tmp_path / "x.npz"
    save(path, **arrays)
    got = read_npz(path, "--inputs")
    with np.load(path) as want:
        assert sorted(got) == sorted(want.files)
        for k in want.files:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
            assert np.array_equal(got[k], want[k]), k


def test_read_npz_refuses_a_header_larger_than_its_data(tmp_path: Path) -> None:
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (9,)})
    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", buf.getvalue() + bytes(16))  # header says 9 floats, 4 are stored
    with pytest.raises(InputError, match=r"array 'x' declares shape \(9,\) \(36 bytes\) but stores \d+ bytes"):
        read_npz(path, "--inputs")


def test_read_regular_reads_exact_ranges(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(100)))
    assert read_regular(path, "f") == bytes(range(100))
    assert read_regular(path, "f", offset=10, length=5) == bytes(range(10, 15))
    with pytest.raises(ModelError, match=r"f '.*f.bin': has 100 bytes, expected at least 101"):
        read_regular(path, "f", offset=1, length=100, error=ModelError)
    with pytest.raises(InputError, match=r"100 bytes to read, more than the limit of 10 bytes"):
        read_regular(path, "f", max_bytes=10)


def test_read_regular_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # No writer: a blocking open would hang here; the non-blocking open returns and fstat refuses it.
    with pytest.raises(InputError, match=r"is a FIFO \(named pipe\), expected a regular file"):
        read_regular(fifo, "f")


def test_check_allocation_uses_exact_integers() -> None:
    assert check_allocation((3, 5), np.float64, "x") == 120
    with pytest.raises(
        InputError, match=r"x: shape \(4611686018427387904, 4\) int64 needs 147573952589676412928 bytes"
    ):
        check_allocation((2**62, 4), np.int64, "x")  # overflows int64: computed with Python ints
