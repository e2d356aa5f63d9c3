"""``amdinfer compile MODEL --shapes-from LOG``: the planned buckets are the shapes compiled.

The truth is hand-computed: batch sizes 1, 1, 3, 7, 8 in 2 buckets waste 5 rows with {3, 8} (6 with {1, 8}, 16 with
{7, 8}); the compiled shapes are read back from the command's JSON (``input_shapes``)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from amdinfer.cli import main
from amdinfer.serve._shapes import FORMAT
from amdinfer.testing.models import tiny_cnn


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("m") / "cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


def _compile(cnn: Path, log: Path, cache: Path) -> None:
    argv = ["compile", str(cnn), "--providers", "cpu", "--cache-dir", str(cache), "--shapes-from", str(log)]
    assert main([*argv, "--max-buckets", "2", "--json", "-q"]) == 0


def test_text_batch_sizes(cnn: Path, tmp_path: Path, capsys) -> None:
    log = tmp_path / "batches.txt"
    log.write_text("# batch sizes seen\n1\n1\n3\n7\n8\n")
    _compile(cnn, log, tmp_path / "c")
    out = json.loads(capsys.readouterr().out)
    assert out["input_shapes"] == [{"input": [3, 3, 32, 32]}, {"input": [8, 3, 32, 32]}]


def test_the_report_names_the_plan(cnn: Path, tmp_path: Path, capsys) -> None:
    log = tmp_path / "shapes.txt"
    log.write_text("1x3x32x32 2\n3x3x32x32\n7,3,32,32\n8x3x32x32 1\n")
    argv = ["compile", str(cnn), "--providers", "cpu", "--cache-dir", str(tmp_path / "c"), "--shapes-from", str(log)]
    assert main([*argv, "--max-buckets", "2", "-q"]) == 0
    text = capsys.readouterr().out
    # 5 rows of 3x32x32 = 3072 elements each wasted, over 20 rows fed
    assert f"planned   2 buckets from {log}: (3, 3, 32, 32), (8, 3, 32, 32); padding 15360 elements over 61440" in text
    assert "shapes    input 3x3x32x32 .. 8x3x32x32" in text


def test_a_server_shape_log_plans_from_the_engine_calls(cnn: Path, tmp_path: Path, capsys) -> None:
    calls = {"1x3x32x32": 40, "2x3x32x32": 1, "16x3x32x32": 2}  # {2, 16}: 40 rows of padding; {1, 16}: 14
    requests = {"1x3x32x32": 99}  # what clients sent is not what the engine ran: not planned from
    log = tmp_path / "shapes.json"
    entry = {"inputs": {"input": {"requests": requests, "calls": calls}}}
    log.write_text(json.dumps({"format": FORMAT, "models": {"cnn": entry, "other": entry}}))
    _compile(cnn, log, tmp_path / "c")
    out = json.loads(capsys.readouterr().out)
    assert out["input_shapes"] == [{"input": [1, 3, 32, 32]}, {"input": [16, 3, 32, 32]}]


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("1\n2\n", ["--batch", "4"], "--shapes-from: plans the batch sizes itself; drop --batch"),
        ("1 x\n", [], "line 1: got '1 x', expected a shape like 4x3x224x224 [count]"),
        ("1x3x32\n", [], "input 'input' has rank 4"),
        (json.dumps({"format": FORMAT, "models": {"a": {}, "b": {}}}), [], "none named 'cnn'"),
    ],
)
def test_bad_logs_are_one_line(cnn: Path, tmp_path: Path, capsys, content: str, extra: list[str], message: str) -> None:
    log = tmp_path / "log.txt"
    log.write_text(content)
    argv = ["compile", str(cnn), "--providers", "cpu", "--cache-dir", str(tmp_path / "c"), "--shapes-from", str(log)]
    assert main([*argv, *extra]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_with_bundle_the_planned_batch_sizes_are_the_buckets(cnn: Path, tmp_path: Path, capsys) -> None:
    log = tmp_path / "batches.json"
    log.write_text(json.dumps([1, 1, 3, 7, 8]))
    argv = ["compile", str(cnn), "--providers", "cpu", "--shapes-from", str(log), "--max-buckets", "2"]
    assert main([*argv, "--bundle", str(tmp_path / "b"), "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert [b["name"] for b in out["buckets"]] == [b["name"] for b in manifest["buckets"]]
    assert [(b["batch"], b["shapes"]) for b in manifest["buckets"]] == [
        (3, {"input": [3, 3, 32, 32]}),
        (8, {"input": [8, 3, 32, 32]}),
    ]
