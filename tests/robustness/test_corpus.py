"""Every corpus case gives its typed, located error or its documented result; risky ones run isolated.

Isolated cases run in a subprocess with a timeout (a FIFO that blocks shows up as a timeout, not a hung
suite) and an address-space cap (an allocation sized from a hostile shape fails there, not in pytest).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _corpus import CASES, make_fixtures
from _outcome import TALLY, outcome

TIMEOUT_S = 60
MEMORY_CAP = 3 << 30  # bytes of address space for an isolated case


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    # Readable by every user: the read-only cache cases run as 'nobody' when the suite runs as root.
    d = Path(tempfile.mkdtemp(prefix="amdinfer-robustness-"))
    d.chmod(0o755)
    make_fixtures(d)
    yield d
    for p in d.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(d, ignore_errors=True)


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _isolated(name: str, scratch: Path) -> dict:
    env = dict(os.environ, AMDINFER_CACHE_DIR=str(scratch / "env-cache"), OMP_NUM_THREADS="1")
    runner = Path(__file__).with_name("_runner.py")
    try:
        proc = subprocess.run(
            [sys.executable, str(runner), name, str(scratch)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=_limits,
            env=env,
            cwd=scratch,
        )
    except subprocess.TimeoutExpired:
        return {"kind": "other", "detail": f"no answer within {TIMEOUT_S} s (hang)"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"kind": "other", "detail": f"exit {proc.returncode}: {proc.stderr[-2000:]}"}
    return json.loads(lines[-1])


@pytest.mark.parametrize("name", sorted(CASES), ids=str)
def test_case(name: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    if case.isolate:
        result = _isolated(name, scratch)
    else:
        monkeypatch.setenv("AMDINFER_CACHE_DIR", str(scratch / "env-cache"))
        result = outcome(case, scratch, setup=True)
    TALLY[result["kind"]] += 1
    print(f"{case.group}: {name}: {result['kind']}: {result['detail'][:300]}")
    assert result["kind"] != "other", result["detail"]


def test_every_issue_case_is_in_the_corpus() -> None:
    """The cases issue 11 lists, by name (a renamed or dropped case fails here)."""
    listed = {
        "bytes_model_reads_secret_from_cwd", "modelproto_reads_sub_secret_from_cwd",
        "clear_keeps_a_user_folder_named_like_a_key",
        "foreign_artefact_world_writable", "model_path_is_a_fifo", "cli_inspect_fifo", "image_is_a_fifo",
        "image_fifo_inside_pipeline_map", "model_path_is_dev_zero", "image_is_dev_zero", "broadcast_to_a_trillion_rows",
        "cli_run_batch_trillion", "model_path_with_nul", "external_location_with_nul", "cache_dir_with_nul",
        "int8_quantizer_cache_with_nul", "cache_dir_is_an_int", "image_decompression_bomb",
        "optimized_model_path_is_a_folder", "optimized_model_path_missing_parent", "optimized_model_path_in_proc",
        "opset_99_on_reference", "duplicate_output_on_reference", "list_with_an_inexact_float", "masked_array",
        "manifest_of_random_bytes", "manifest_sha256_is_an_int", "read_only_cache_miss",
        "read_only_cache_corrupt_entry",
        "cli_cache_list_created_yesterday", "cli_cache_list_parts_a_list", "cli_cache_list_a_file",
        "cli_cache_clear_missing", "cli_cache_list_proc_self", "cli_cache_clear_proc_self", "cli_inspect_dev_zero",
        "cli_run_batch_negative", "cli_run_seed_negative", "cli_run_inputs_missing", "cli_run_inputs_random_bytes",
        "cli_run_inputs_object_array", "cli_run_inputs_folder", "cli_run_save_missing_folder",
    }  # fmt: skip
    assert listed <= set(CASES), sorted(listed - set(CASES))


def test_every_issue_20_case_is_in_the_corpus() -> None:
    """Issue 20's images, calibration data and CLI outputs, by name (the server's cases: test_server.py)."""
    listed = {
        *(f"image_{kind}_{path}" for kind in ("uint16", "float01", "int8", "bool", "rgba")
          for path in ("stage_by_stage", "fused")),
        "image_png_16_bit_rgb_both_decoders", "image_png_16_bit_grey_both_decoders", "image_elongated_20000x3",
        "image_elongated_1001x7", "image_elongated_fuse_640x3",
        "calib_one_inf", "calib_all_nan", "nan_weights", "calib_percentile_nan", "calib_entropy_inf",
        "calib_wrong_shape", "calib_wrong_dtype", "calib_empty", "calib_generator_raises", "cli_quantize_calib_inf",
        "cli_compile_out_is_input", "cli_compile_out_symlink", "cli_quantize_out_symlink", "cli_profile_trace_symlink",
        "cli_verify_save_golden_name", "cli_input_shapes_vs_batch", "cli_unknown_flag_names_command",
        "hint_bfloat16_names_ml_dtypes", "prepare_feed_resized", "cache_clear_races_loads",
    }  # fmt: skip
    assert listed <= set(CASES), sorted(listed - set(CASES))
