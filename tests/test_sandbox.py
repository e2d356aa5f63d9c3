"""The test suite touches nothing outside its sandbox (the user's cache, HOME, the working directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import _sandbox

import amdinfer.cache

ROOT = Path(__file__).parents[1]


def test_the_run_is_redirected_into_the_sandbox():
    for name in _sandbox.SANDBOXED:
        assert Path(os.environ[name]).name == name.lower(), name
        assert Path(os.environ[name]).parent.name.startswith("amdinfer-tests-"), name
    assert amdinfer.cache.default_cache_dir() == Path(os.environ["AMDINFER_CACHE_DIR"])


def test_tests_that_write_the_default_cache_leave_home_and_cwd_untouched(tmp_path):
    # A fresh HOME with no redirection of its own, and an empty working directory: run tests that write
    # int8 calibration entries into the *default* cache, then look for anything they left behind.
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _sandbox.SANDBOXED and k != "MPLBACKEND"}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(ROOT),
        "-c",
        str(ROOT / "pyproject.toml"),
        str(ROOT / "tests" / "quantize" / "test_quantize.py"),
        "-k",
        "test_qdq_model_close_to_float or test_exclude_nodes_and_keep_last_n",
    ]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout, done.stdout[-2000:]
    assert list(home.iterdir()) == [], sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert list(cwd.iterdir()) == [], sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))
