"""Ray Data with BatchPredictor on a local Ray and on a two-node local cluster; a Ray Serve deployment over OIP v2.

Everything stays on this machine and on 127.0.0.1; the cluster's head and worker are ``ray start --block``
processes started here and stopped by their process ids.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="needs the ray extra: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

from tritonclient.utils import InferenceServerException  # noqa: E402

import amdinfer  # noqa: E402
from amdinfer.ray import BatchPredictor, deployment  # noqa: E402

from .conftest import free_port  # noqa: E402

# A busy 2-core machine: Ray's memory monitor would kill workers; its usage stats would try the network.
RAY_ENV = {"RAY_memory_monitor_refresh_ms": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def engine(tiny_path: Path):
    with amdinfer.load(tiny_path, providers=CPU) as e:
        yield e


def _items(n: int) -> list[dict]:
    rng = np.random.default_rng(7)
    return [{"id": i, "input": rng.random((3, 32, 32), dtype=np.float32)} for i in range(n)]


def _check(rows: list[dict], engine) -> None:
    rows = sorted(rows, key=lambda r: r["id"])
    x = np.stack([r["input"] for r in rows])
    want = engine.run(x)["logits"]
    np.testing.assert_allclose(np.stack([r["logits"] for r in rows]), want, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def local_ray():
    os.environ.update(RAY_ENV)
    ray.init(
        address="local",  # a new instance, whatever cluster an earlier `ray start` left recorded in /tmp/ray
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _node_ip_address="127.0.0.1",
    )
    yield
    ray.shutdown()


class TestLocalRay:
    def test_map_batches_equals_engine_run(self, local_ray, tiny_path, engine):
        ds = ray.data.from_items(_items(40))
        out = ds.map_batches(
            BatchPredictor,
            fn_constructor_args=(str(tiny_path),),
            fn_constructor_kwargs={"providers": CPU},
            batch_size=8,
            batch_format="numpy",
            concurrency=2,
            num_cpus=0.5,  # fractional CPUs per actor: two actors on one CPU's worth
        )
        rows = out.take_all()
        assert len(rows) == 40
        _check(rows, engine)

    def test_map_batches_pipeline(self, local_ray):
        from . import pipelines
        from .pipelines import classify

        ray.cloudpickle.register_pickle_by_value(pipelines)  # the workers cannot import the tests folder
        images = np.random.default_rng(3).integers(0, 255, (12, 32, 32, 3), dtype=np.uint8)
        ds = ray.data.from_items([{"id": i, "item": images[i]} for i in range(12)])
        rows = ds.map_batches(
            BatchPredictor,
            fn_constructor_kwargs={"pipeline": classify},
            batch_size=4,
            batch_format="numpy",
            concurrency=1,
            num_cpus=0.5,
        ).take_all()
        rows = sorted(rows, key=lambda r: r["id"])
        with classify() as pipe:
            want = np.stack(pipe.run_batch(list(images)))
        np.testing.assert_allclose(np.stack([r["result"] for r in rows]), want, rtol=1e-5, atol=1e-6)

    def test_serve_deployment_answers_oip_v2(self, local_ray, tiny_path, engine):
        from ray import serve

        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        try:
            app = deployment("tiny", str(tiny_path), providers=CPU, max_batch_size=8, max_delay_ms=5, num_cpus=0.5)
            serve.run(app, route_prefix="/", name="amdinfer-test")
            client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
            assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("tiny")
            meta = client.get_model_metadata("tiny")
            assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
            x = np.random.default_rng(1).random((3, 3, 32, 32), dtype=np.float32)
            for binary in (True, False):
                inp = httpclient.InferInput("input", list(x.shape), "FP32")
                inp.set_data_from_numpy(x, binary_data=binary)
                outputs = [httpclient.InferRequestedOutput("logits", binary_data=binary)]
                result = client.infer("tiny", [inp], outputs=outputs, request_id="ray-1")
                np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
                assert result.get_response()["id"] == "ray-1"
            bad = httpclient.InferInput("input", [1, 3, 32, 31], "FP32")
            bad.set_data_from_numpy(np.zeros((1, 3, 32, 31), np.float32))
            with pytest.raises(InferenceServerException) as info:
                client.infer("tiny", [bad])
            assert info.value.status() == "400" and "got shape (1, 3, 32, 31)" in info.value.message()
            _check_strict_json_for_nan(port)
        finally:
            serve.shutdown()


def _check_strict_json_for_nan(port: int) -> None:
    """A NaN input makes NaN logits; their JSON answer must parse with a strict parser (null, never bare NaN)."""
    import http.client

    x = np.full((1, 3, 32, 32), np.nan, np.float32)
    inp = httpclient.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out = [httpclient.InferRequestedOutput("logits", binary_data=False)]
    body, json_size = httpclient.InferenceServerClient.generate_request_body([inp], outputs=out)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(json_size)}
    conn.request("POST", "/v2/models/tiny/infer", body=body, headers=headers)
    answer = conn.getresponse()
    text = answer.read().decode()
    assert answer.status == 200, text

    def refuse(name: str) -> None:
        raise AssertionError(f"bare {name} in the JSON answer: {text[:200]}")

    logits = json.loads(text, parse_constant=refuse)["outputs"][0]["data"]
    assert logits == [None] * 10


def _ray_cli() -> str:
    path = Path(sys.executable).with_name("ray")
    return str(path) if path.exists() else shutil.which("ray") or "ray"


CLUSTER_DRIVER = """
import json, sys, time
import numpy as np, ray
from amdinfer.ray import BatchPredictor

address, model, out = sys.argv[1:]
ray.init(address=address, _node_ip_address="127.0.0.2", log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + 90
while len([n for n in ray.nodes() if n["Alive"]]) < 2:
    assert time.monotonic() < deadline, "the worker did not join"
    time.sleep(0.5)
rng = np.random.default_rng(7)
items = [{"id": i, "input": rng.random((3, 32, 32), dtype=np.float32)} for i in range(24)]
rows = ray.data.from_items(items).map_batches(
    BatchPredictor,
    fn_constructor_args=(model,),
    fn_constructor_kwargs={"providers": ["CPUExecutionProvider"]},
    batch_size=6,
    batch_format="numpy",
    concurrency=1,
    num_cpus=0.5,
    resources={"worker_node": 0.5},  # only the worker node has it
).take_all()
np.savez(out, **{k: np.stack([r[k] for r in rows]) for k in ("id", "input", "logits")})
nodes = {n["NodeManagerAddress"]: sorted(n["Resources"]) for n in ray.nodes() if n["Alive"]}
ray.shutdown()
print(json.dumps(nodes))
"""


def _wait_port(host: str, port: int, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    import socket

    while True:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"nothing listens on {host}:{port}; log:\n{log.read_text()}"
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.5)


class TestTwoNodeCluster:
    def test_map_batches_on_the_worker_node(self, tiny_path, engine, tmp_path):
        """A head (127.0.0.2) and a worker (127.0.0.3) started here with separate resources; the job is
        pinned to the worker's resource. Ray's `ray start` turns token authentication on: every process
        gets the same fresh token through the environment (nothing is written to ~/.ray)."""
        import secrets

        if ray.is_initialized():
            ray.shutdown()
        port = free_port()
        token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        env = dict(os.environ, **RAY_ENV, **token, HOME=str(tmp_path))
        common = ["--block", "--num-cpus", "1", "--disable-usage-stats"]
        head_log, worker_log = tmp_path / "head.log", tmp_path / "worker.log"
        head = subprocess.Popen(
            [
                _ray_cli(),
                "start",
                "--head",
                "--port",
                str(port),
                "--node-ip-address",
                "127.0.0.2",
                "--include-dashboard",
                "false",
                "--resources",
                json.dumps({"head_node": 1}),
                *common,
            ],
            stdout=open(head_log, "wb"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        worker = None
        try:
            deadline = time.monotonic() + 120
            _wait_port("127.0.0.2", port, head, head_log, deadline)
            worker = subprocess.Popen(
                [
                    _ray_cli(),
                    "start",
                    "--address",
                    f"127.0.0.2:{port}",
                    "--node-ip-address",
                    "127.0.0.3",
                    "--resources",
                    json.dumps({"worker_node": 1}),
                    *common,
                ],
                stdout=open(worker_log, "wb"),
                stderr=subprocess.STDOUT,
                env=env,
            )
            # The driver runs in its own process: Ray reads the token settings when it is imported.
            out = tmp_path / "rows.npz"
            driver = subprocess.run(
                [sys.executable, "-c", CLUSTER_DRIVER, f"127.0.0.2:{port}", str(tiny_path), str(out)],
                env=env,
                capture_output=True,
                text=True,
                timeout=max(10.0, deadline + 60 - time.monotonic()),
            )
            assert driver.returncode == 0, (
                driver.stdout[-3000:] + driver.stderr[-3000:] + worker_log.read_text()[-2000:]
            )
            nodes = json.loads(driver.stdout.strip().splitlines()[-1])
            assert set(nodes) == {"127.0.0.2", "127.0.0.3"} and "worker_node" in nodes["127.0.0.3"]
            with np.load(out) as data:
                rows = [
                    {"id": i, "input": x, "logits": y} for i, x, y in zip(data["id"], data["input"], data["logits"])
                ]
            assert len(rows) == 24
            _check(rows, engine)
        finally:
            for proc in (worker, head):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in (worker, head):
                if proc is not None:
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
