"""Throughput: several server processes per device (``--workers-per-device``) and the batch assembled in a
reused buffer instead of ``np.concatenate``.

The truth is ``engine.run`` in this process on each request alone. No timing is asserted; the measurements
are in docs/serving.md ("Throughput: processes per GPU").
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

import psutil  # noqa: E402  (a KServe dependency)
import tritonclient.utils.shared_memory as shm  # noqa: E402
from _servers import concurrent_infer  # noqa: E402

import amdinfer  # noqa: E402
from amdinfer.errors import InputError  # noqa: E402
from amdinfer.serve import EngineWorker, run_isolated  # noqa: E402

from .conftest import RunningServer, free_port, running_server  # noqa: E402
from .test_serve import _wait_for_every_process, changes, metrics, sample  # noqa: E402
from .test_shm import Regions, _infer_row_on_fresh_connection  # noqa: E402

WORKERS = ("device0-p0", "device0-p1")


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), dtype=np.float32)


@pytest.fixture(scope="module")
def server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """``--workers-per-device 2 --devices 0`` on CPU: two server processes of one device on shared ports."""
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu", "--no-warmup"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--devices", "0", "--workers-per-device", "2"]
    argv += ["--max-batch-size", "8", "--max-delay-ms", "5"]
    log = tmp_path_factory.mktemp("throughput") / "log.txt"
    with running_server(argv, http, grpc, log) as s:
        _wait_for_every_process(s, [http, grpc], processes=2)
        yield s
        assert s.stop() == 0, log.read_text()


def _children(server: RunningServer) -> list[psutil.Process]:
    return psutil.Process(server.process.pid).children(recursive=True)


class TestProcesses:
    def test_two_server_processes_each_with_its_start_line(self, server: RunningServer) -> None:
        children = {c.pid for c in _children(server)}
        assert len(children) == 2
        text = server.log.read_text()
        assert "starting 2 server processes: 2 per device (--workers-per-device) on device 0" in text
        lines = re.findall(r"serving model 'tiny' .*\(pid (\d+), server process (\d) of 2 on its device\)", text)
        assert {int(pid) for pid, _ in lines} == children
        assert sorted(index for _, index in lines) == ["1", "2"]

    def test_many_clients_answered_right_by_both_processes(self, server: RunningServer, engine) -> None:
        """20 clients (16 gRPC, 4 REST), each on its own connection, 10 requests of 1-3 rows each."""
        inputs = [_x(1 + i % 3, seed=20 + i) for i in range(6)]
        want = [engine.run(x)["logits"] for x in inputs]
        before = metrics(server)
        per_client = 10
        done, errors = concurrent_infer(
            server, "tiny", "input", "logits", inputs, want, grpc_clients=16, http_clients=4, per_client=per_client
        )
        assert errors == []
        assert len(done) == 20 * per_client and all(done)
        changed = changes(before, metrics(server))
        rows = sum(1 + ((k + i) % 6) % 3 for k in [*range(16), *range(4)] for i in range(per_client))
        # /metrics sums both processes: every request and row counted once, whichever process served it
        assert sample(changed, "amdinfer_requests_total", model="tiny", outcome="ok") == 20 * per_client
        assert sample(changed, "amdinfer_batch_size_sum", model="tiny") == rows
        served = {w: sample(changed, "amdinfer_batch_size_sum", model="tiny", worker=w) for w in WORKERS}
        assert sum(served.values()) == rows
        # 20 connections spread by the kernel: all on one process has odds of 2**-19
        assert all(v > 0 for v in served.values()), served

    def test_region_registered_through_one_process_serves_both(self, server: RunningServer, engine) -> None:
        regions = Regions(server, "grpc")  # one connection: one of the two processes registers the regions
        try:
            xs = _x(48, seed=31)
            shm.set_shared_memory_region(regions.make("in", xs.nbytes), [xs])
            out = regions.make("out", 48 * 40)
            before = metrics(server)
            for i in range(48):  # a fresh connection each: the kernel spreads them over the two processes
                _infer_row_on_fresh_connection(server, regions, i, row_nbytes=xs[:1].nbytes)
            got = shm.get_contents_as_numpy(out, np.float32, [48, 10])
            np.testing.assert_allclose(got, engine.run(xs)["logits"], rtol=1e-5, atol=1e-6)
            changed = changes(before, metrics(server))
            served = {w: sample(changed, "amdinfer_batch_size_sum", worker=w) for w in WORKERS}
            assert sum(served.values()) == 48 and all(v > 0 for v in served.values()), served
        finally:
            regions.close()

    def test_sigterm_stops_every_process(self, tiny_path: Path, tmp_path: Path) -> None:
        http, grpc = free_port(), free_port()
        argv = ["-m", "amdinfer", "serve", str(tiny_path), "--providers", "cpu", "--no-warmup"]
        argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--workers-per-device", "2"]
        with running_server(argv, http, grpc, tmp_path / "log.txt") as s:
            _wait_for_every_process(s, [http, grpc], processes=2)
            children = _children(s)
            assert s.stop() == 0
            gone, alive = psutil.wait_procs(children, timeout=30)
            assert alive == [] and len(gone) == 2
            assert len(re.findall(r"stopped \(pid \d+\)", s.log.read_text())) == 2


def test_a_child_that_fails_at_start_fails_the_server_with_its_error(tmp_path: Path) -> None:
    http, grpc = free_port(), free_port()
    missing = tmp_path / "missing.onnx"
    argv = [sys.executable, "-m", "amdinfer", "serve", str(missing), "--providers", "cpu", "--workers-per-device", "2"]
    proc = subprocess.run(
        [*argv, "--http-port", str(http), "--grpc-port", str(grpc)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert re.search(
        r"ERROR amdinfer\.serve: server process [12] of 2 \(device 0, pid \d+\) exited with code 1: "
        r"amdinfer serve: ModelError: model '.*missing\.onnx': file not found; stopping the others",
        proc.stderr,
    ), proc.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--single-process", "--workers-per-device", "2"], "--workers-per-device 2 with --single-process"),
        (["--workers-per-device", "2", "--http-port", "0"], ": port 0 (any free port) with 2 server processes"),
    ],
)
def test_refused_combinations(tiny_path: Path, flags: list[str], message: str) -> None:
    argv = [sys.executable, "-m", "amdinfer", "serve", str(tiny_path), "--providers", "cpu", *flags]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "OptionError: " in proc.stderr and message in proc.stderr, proc.stderr


def test_serve_with_workers_per_device_needs_a_path() -> None:
    """From Python (in a subprocess: KServe's protos and tritonclient's cannot share one)."""
    code = (
        "from amdinfer.serve import serve\n"
        "from amdinfer.testing.models import tiny_cnn\n"
        "for model, n in ((tiny_cnn(), 2), ('m.onnx', 0), ('m.onnx', 2)):\n"
        "    try:\n"
        "        serve(model, workers_per_device=n, devices=[0], http_port=0, foo=1)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout + proc.stderr
    assert re.match(r"OptionError workers_per_device: got 2 with a ModelProto model; .* model's path", lines[0])
    assert lines[1].startswith("OptionError workers_per_device: got 0, expected an int in 1..")
    assert lines[2].startswith("OptionError foo: not carried to the server processes of workers_per_device=2")


def test_default_workers_per_device_rule() -> None:
    from amdinfer.serve._cli import default_workers_per_device

    table = {(1, 1): 1, (1, 2): 1, (1, 4): 2, (1, 16): 4, (1, 128): 4, (2, 8): 2, (4, 8): 1, (8, 2): 1}
    assert {k: default_workers_per_device(k[0], cores=k[1]) for k in table} == table


# ---------------------------------------------------------------- batch assembly, in process


def _identity() -> onnx.ModelProto:
    """y = x: an output the reference backend may hand back as the input's own memory."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class TestBatchAssembly:
    @pytest.mark.parametrize("buckets", [None, [4, 8, 16]], ids=["no-buckets", "buckets"])
    def test_mixed_request_sizes_equal_each_alone(self, tiny_path: Path, buckets) -> None:
        kw = {"batch_buckets": buckets} if buckets else {}
        with amdinfer.load(tiny_path, providers=["CPUExecutionProvider"], **kw) as engine:
            worker = EngineWorker(engine)
            for sizes in ([1, 3, 2], [5], [1] * 7, [2, 1, 4, 3, 6]):  # 6 rows (bucket 8), 5, 7, 16, 16+
                requests = [{"input": _x(n, seed=100 + i)} for i, n in enumerate(sizes)]
                outs = worker.run(requests)
                assert [o["logits"].shape for o in outs] == [(n, 10) for n in sizes]
                for r, o in zip(requests, outs):
                    np.testing.assert_allclose(o["logits"], engine.run(r)["logits"], rtol=1e-5, atol=1e-6)

    def test_answers_survive_the_buffer_being_reused(self) -> None:
        with amdinfer.load(_identity(), backend="reference") as engine:
            worker = EngineWorker(engine)
            a = [{"x": np.full((2, 4), 1, np.float32)}, {"x": np.full((1, 4), 2, np.float32)}]
            b = [{"x": np.full((1, 4), 7, np.float32)}, {"x": np.full((2, 4), 9, np.float32)}]
            first = worker.run(a)
            worker.run(b)  # fills the same leased buffer again
            assert [o["y"].tolist() for o in first] == [[[1.0] * 4] * 2, [[2.0] * 4]]

    def test_a_request_of_another_dtype_or_shape_fails_alone(self, tiny_path: Path) -> None:
        """Requests that would not fit the batch's slots (the batcher's key keeps them apart; a worker driven
        directly may still get them): the batch fails, each request is run alone, only the bad ones fail."""
        with amdinfer.load(tiny_path, providers=["CPUExecutionProvider"]) as engine:
            worker = EngineWorker(engine)
            good = [{"input": _x(2, seed=1)}, {"input": _x(1, seed=2)}]
            wrong_dtype = {"input": _x(1, seed=3).astype(np.float64)}
            wrong_shape = {"input": np.zeros((1, 3, 32, 31), np.float32)}
            outs = run_isolated(worker, [good[0], wrong_dtype, good[1], wrong_shape])
            for r, o in zip(good, (outs[0], outs[2])):
                assert isinstance(o, dict), o
                np.testing.assert_allclose(o["logits"], engine.run(r)["logits"], rtol=1e-5, atol=1e-6)
            assert isinstance(outs[1], InputError) and "float64" in str(outs[1]), outs[1]
            assert isinstance(outs[3], InputError) and "31" in str(outs[3]), outs[3]
