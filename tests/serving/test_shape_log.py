"""The server's view of shapes: a WARNING for each shape compiled outside warm-up (model, input, shape), and the
shape log (``--shape-log FILE``) that ``amdinfer compile --shapes-from`` plans buckets from.

The truth is what was sent: the shapes and counts of the requests, and the warm-up sizes the worker reports."""

from __future__ import annotations

import importlib.util
import json
import logging
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import amdinfer
from amdinfer.serve._shapes import FORMAT, configure_shape_log, watch_model
from amdinfer.serve._workers import EngineWorker
from amdinfer.testing.models import tiny_cnn

from .conftest import free_port, running_server


def _rows(n: int) -> dict[str, np.ndarray]:
    return {"input": np.zeros((n, 3, 32, 32), np.float32)}


def test_a_compile_outside_warm_up_is_a_warning_naming_model_input_and_shape(tmp_path: Path, caplog) -> None:
    log = configure_shape_log(tmp_path / "shapes.json")
    with amdinfer.load(tiny_cnn(), providers=["CPUExecutionProvider"]) as engine:
        worker = EngineWorker(engine)
        watch_model("tiny", [worker])
        with caplog.at_level(logging.WARNING, logger="amdinfer.serve"):
            assert worker.warmup(4, runs=1) == [1, 4]
            assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # warm-up shapes: no warning
            worker.run([_rows(1)])  # prepared at warm-up
            worker.run([_rows(1), _rows(2)])  # one call of 3 rows: new
            worker.run([_rows(3)])  # 3 rows again: prepared by now
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "model 'tiny': input 'input': shape (3, 3, 32, 32)" in warnings[0] and "request path" in warnings[0]
        assert engine.info.settings["new_shapes"]["compiled"] == [{"input": [3, 3, 32, 32]}]
    data = json.loads(log.dump().read_text())
    assert data["format"] == FORMAT
    entry = data["models"]["tiny"]
    assert entry["inputs"]["input"] == {
        "requests": {"1x3x32x32": 2, "2x3x32x32": 1, "3x3x32x32": 1},
        "calls": {"1x3x32x32": 1, "3x3x32x32": 2},
    }
    assert entry["compiled_outside_warmup"] == [{"input": [3, 3, 32, 32]}]


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(amdinfer.OptionError, match=r"--shape-log: got .* does not exist"):
        configure_shape_log(tmp_path / "missing" / "shapes.json")


@pytest.mark.skipif(importlib.util.find_spec("kserve") is None, reason="needs the serve extra: run `nox -s serve`")
def test_serve_writes_the_shape_log_and_compile_plans_from_it(tiny_path: Path, tmp_path: Path, capsys) -> None:
    http, grpc = free_port(), free_port()
    shapes = tmp_path / "shapes.json"
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu", "--grpc-port", "-1"]
    argv += ["--http-port", str(http), "--max-batch-size", "1", "--shape-log", str(shapes)]
    sent = [1, 1, 1, 3, 7, 8]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
        for n in sent:
            body = {
                "inputs": [{"name": "input", "shape": [n, 3, 32, 32], "datatype": "FP32", "data": [0.0] * (n * 3072)}]
            }
            req = urllib.request.Request(f"http://{server.http}/v2/models/tiny/infer", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=60) as r:
                assert json.loads(r.read())["outputs"][0]["shape"] == [n, 10]
        assert server.stop() == 0
    text = (tmp_path / "log.txt").read_text()
    # warmed at 1 (batches of one): 3, 7 and 8 rows compile on the request path, each once
    for n in (3, 7, 8):
        assert f"model 'tiny': input 'input': shape ({n}, 3, 32, 32) was not prepared" in text
    data = json.loads(shapes.read_text())
    assert data["models"]["tiny"]["inputs"]["input"]["requests"] == {"1x3x32x32": 3, "3x3x32x32": 1,
                                                                     "7x3x32x32": 1, "8x3x32x32": 1}  # fmt: skip
    from amdinfer.cli import main

    # 1,1,1,3,7,8 in 2 buckets: {3, 8} wastes 3 x 2 + 1 = 7 rows ({1, 8}: 5 + 1 = 6 rows: the better one)
    assert main(["compile", str(tiny_path), "--providers", "cpu", "--shapes-from", str(shapes), "--max-buckets",
                 "2", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert [s["input"] for s in out["input_shapes"]] == [[1, 3, 32, 32], [8, 3, 32, 32]]


@pytest.mark.skipif(importlib.util.find_spec("kserve") is None, reason="needs the serve extra: run `nox -s serve`")
def test_serve_on_new_shape_error_refuses_what_warm_up_did_not_prepare(tiny_path: Path, tmp_path: Path) -> None:
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu", "--grpc-port", "-1"]
    argv += ["--http-port", str(http), "--max-batch-size", "4", "--max-delay-ms", "0", "--on-new-shape", "error"]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as server:  # warmed at 1 and 4 rows

        def infer(n: int) -> tuple[int, dict]:
            body = {
                "inputs": [{"name": "input", "shape": [n, 3, 32, 32], "datatype": "FP32", "data": [0.0] * (n * 3072)}]
            }
            req = urllib.request.Request(f"http://{server.http}/v2/models/tiny/infer", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        assert infer(4)[0] == 200 and infer(1)[0] == 200
        status, answer = infer(3)
        assert status == 400
        assert "input 'input': shape (3, 3, 32, 32) is not a prepared shape" in answer["error"]
        assert "prepared: (1, 3, 32, 32), (4, 3, 32, 32)" in answer["error"]
        assert server.stop() == 0
