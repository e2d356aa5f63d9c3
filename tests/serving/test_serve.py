"""`amdinfer serve` in a subprocess on loopback, driven by tritonclient over REST and gRPC.

The truth is the same model run in this process with ``engine.run`` (and ``Pipeline.run_batch``).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest

# KServe is not imported here: its gRPC protos and tritonclient's register the same names ("inference.*")
# in protobuf's default pool, so the two cannot live in one process. The servers run in subprocesses.
if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

import psutil  # noqa: E402  (a KServe dependency)
from _servers import concurrent_infer  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from .conftest import RunningServer, free_port, running_server  # noqa: E402


def metrics(server: RunningServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{server.http}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(values: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in values.items() if n == name and all((k, labels[k]) in ls for k in labels))


def changes(before: dict, after: dict) -> dict:
    """Per-sample difference of two ``metrics`` snapshots (read it with ``sample``)."""
    return {key: after.get(key, 0.0) - before.get(key, 0.0) for key in before.keys() | after.keys()}


@pytest.fixture(scope="module")
def server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory):
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--devices", "0,1"]
    argv += ["--max-batch-size", "16", "--max-delay-ms", "20"]
    log = tmp_path_factory.mktemp("logs") / "tiny.log"
    with running_server(argv, http, grpc, log) as s:
        _wait_for_every_process(s, [http, grpc], processes=2)
        yield s
        assert s.stop() == 0, log.read_text()


def _wait_for_every_process(server: RunningServer, ports: list[int], processes: int, timeout: float = 120) -> None:
    """Wait until each per-GPU process listens on every port: /v2/health/ready answers as soon as one does, and
    clients that connect before the others listen would all land on it (SO_REUSEPORT spreads connections only
    over the sockets listening when they arrive)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        children = psutil.Process(server.process.pid).children(recursive=True)
        listening = [{c.laddr.port for c in child.connections("inet") if c.status == "LISTEN"} for child in children]
        if len(children) == processes and all(set(ports) <= ports_of for ports_of in listening):
            return
        assert time.monotonic() < deadline, f"not every process listens on {ports}: {listening}"
        time.sleep(0.2)


def _x(rows: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), dtype=np.float32)


def _http_input(x: np.ndarray, name: str = "input", datatype: str = "FP32", binary: bool = True):
    inp = httpclient.InferInput(name, list(x.shape), datatype)
    inp.set_data_from_numpy(x, binary_data=binary)
    return inp


def _grpc_input(x: np.ndarray, name: str = "input", datatype: str = "FP32"):
    inp = grpcclient.InferInput(name, list(x.shape), datatype)
    inp.set_data_from_numpy(x)
    return inp


class TestInfer:
    def test_rest_binary_equals_engine_run(self, server, engine):
        x = _x(3)
        result = httpclient.InferenceServerClient(server.http).infer("tiny", [_http_input(x)], request_id="req-7")
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        assert result.get_response()["id"] == "req-7"

    def test_rest_json_equals_engine_run(self, server, engine):
        x = _x(1, seed=1)
        out = [httpclient.InferRequestedOutput("logits", binary_data=False)]
        result = httpclient.InferenceServerClient(server.http).infer(
            "tiny", [_http_input(x, binary=False)], outputs=out
        )
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        assert result.get_response()["id"]  # generated when the request has none

    def test_grpc_equals_engine_run(self, server, engine):
        x = _x(2, seed=2)
        result = grpcclient.InferenceServerClient(server.grpc).infer("tiny", [_grpc_input(x)], request_id="g-1")
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)
        assert result.get_response().id == "g-1"

    def test_health_and_metadata(self, server):
        http = httpclient.InferenceServerClient(server.http)
        grpc = grpcclient.InferenceServerClient(server.grpc)
        assert http.is_server_live() and http.is_server_ready() and http.is_model_ready("tiny")
        assert grpc.is_server_live() and grpc.is_server_ready() and grpc.is_model_ready("tiny")
        meta = http.get_model_metadata("tiny")
        assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
        assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
        gmeta = grpc.get_model_metadata("tiny")
        assert [(t.name, t.datatype, list(t.shape)) for t in gmeta.inputs] == [("input", "FP32", [-1, 3, 32, 32])]

    def test_binds_loopback_only(self, server):
        # --devices 0,1 runs one server process per device under a supervisor: look at all of them
        processes = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
        assert len(processes) == 3  # the supervisor and one server per device
        listening = [c.laddr for p in processes for c in p.connections("inet") if c.status == "LISTEN"]
        assert {a.port for a in listening} >= {int(server.http.split(":")[1]), int(server.grpc.split(":")[1])}
        # gRPC may listen on an IPv6 socket as ::ffff:127.0.0.1 (IPv4-mapped): still loopback only
        addresses = {ipaddress.ip_address(a.ip) for a in listening}
        assert {getattr(a, "ipv4_mapped", None) or a for a in addresses} == {ipaddress.ip_address("127.0.0.1")}


BAD = [
    # (what, inputs as (name, array, datatype), message part)
    (
        "dtype",
        ("input", np.zeros((1, 3, 32, 32), np.float64), "FP64"),
        "input 'input': got dtype float64, expected float32",
    ),
    ("shape", ("input", np.zeros((1, 3, 32, 31), np.float32), "FP32"), "input 'input': got shape (1, 3, 32, 31)"),
    ("name", ("images", np.zeros((1, 3, 32, 32), np.float32), "FP32"), "inputs: got ['images'], expected ['input']"),
    ("rank", ("input", np.zeros((3, 32, 32), np.float32), "FP32"), "input 'input': got shape (3, 32, 32)"),
]


class TestBadRequests:
    @pytest.mark.parametrize(("what", "bad", "message"), BAD, ids=[b[0] for b in BAD])
    def test_rest_400_with_message(self, server, what, bad, message):
        name, x, dt = bad
        with pytest.raises(InferenceServerException) as info:
            httpclient.InferenceServerClient(server.http).infer("tiny", [_http_input(x, name, dt)])
        assert info.value.status() == "400"
        assert message in info.value.message()

    @pytest.mark.parametrize(("what", "bad", "message"), BAD, ids=[b[0] for b in BAD])
    def test_grpc_invalid_argument_with_message(self, server, what, bad, message):
        name, x, dt = bad
        with pytest.raises(InferenceServerException) as info:
            grpcclient.InferenceServerClient(server.grpc).infer("tiny", [_grpc_input(x, name, dt)])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert message in info.value.message()

    def test_truncated_binary_body_is_400(self, server):
        head = json.dumps(
            {
                "inputs": [
                    {
                        "name": "input",
                        "shape": [1, 3, 32, 32],
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": 12288},
                    }
                ]
            }
        ).encode()
        req = urllib.request.Request(
            f"http://{server.http}/v2/models/tiny/infer",
            data=head + b"\0" * 100,
            headers={"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=30)
        assert info.value.code == 400
        assert "binary_data_size 12288 runs past the body" in info.value.read().decode()

    def test_unknown_model_is_404(self, server):
        with pytest.raises(InferenceServerException) as info:
            httpclient.InferenceServerClient(server.http).infer("nope", [_http_input(_x(1))])
        assert info.value.status() == "404"


class TestLoad:
    def test_bounded_concurrent_load_batches_and_spreads(self, server, engine):
        """24 clients (16 gRPC, 8 REST) x 15 requests: zero errors, right answers, batches > 1, both workers used."""
        inputs = [_x(1 + i % 2, seed=10 + i) for i in range(4)]
        want = [engine.run(x)["logits"] for x in inputs]
        before = metrics(server)
        per_client = 15
        done, errors = concurrent_infer(
            server, "tiny", "input", "logits", inputs, want, grpc_clients=16, http_clients=8, per_client=per_client
        )
        assert errors == []
        assert len(done) == 24 * per_client and all(done)
        changed = changes(before, metrics(server))
        requests = 24 * per_client
        rows = sum(1 + ((k + i) % 4) % 2 for k in range(24) for i in range(per_client))
        assert sample(changed, "amdinfer_requests_total", model="tiny", outcome="ok") == requests
        # every row went through one engine call
        assert sample(changed, "amdinfer_batch_size_sum", model="tiny") == rows
        calls = sample(changed, "amdinfer_batch_size_count", model="tiny")
        assert calls < requests  # some calls carried several requests
        single = sample(changed, "amdinfer_batch_size_bucket", model="tiny", le="1.0")
        assert single < calls  # batches of more than one item were seen
        for worker in ("device0", "device1"):
            assert sample(changed, "amdinfer_batch_size_count", model="tiny", worker=worker) > 0, worker
        assert sample(changed, "amdinfer_queue_seconds_count", model="tiny") == requests


PIPELINE_SERVER = textwrap.dedent(
    """
    import sys
    import amdinfer
    from amdinfer.serve import Server, build_model
    from serving.pipelines import classify, detect

    http, grpc = int(sys.argv[1]), int(sys.argv[2])
    models = [
        build_model("det", detect(), max_batch_size=8, max_delay_ms=5),
        build_model("cls", [classify(), classify()], max_batch_size=8, max_delay_ms=5),
    ]
    Server(http_port=http, grpc_port=grpc).start(models)
    """
)


@pytest.fixture(scope="module")
def pipeline_server(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("pipe")
    script = folder / "serve_pipelines.py"
    script.write_text(PIPELINE_SERVER)
    http, grpc = free_port(), free_port()
    root = Path(__file__).resolve().parents[1]
    argv = ["-c", f"import sys; sys.path.insert(0, {str(root)!r}); exec(open({str(script)!r}).read())"]
    argv += [str(http), str(grpc)]
    with running_server(argv, http, grpc, folder / "log.txt") as s:
        yield s
        assert s.stop() == 0


class TestPipeline:
    def test_classification_pipeline_stacks_items(self, pipeline_server):
        from .pipelines import classify

        images = np.random.default_rng(5).integers(0, 255, (3, 32, 32, 3), dtype=np.uint8)
        result = grpcclient.InferenceServerClient(pipeline_server.grpc).infer(
            "cls", [_grpc_input(images, "input", "UINT8")]
        )
        with classify() as pipe:
            want = np.stack(pipe.run_batch(list(images)))
        np.testing.assert_allclose(result.as_numpy("output"), want, rtol=1e-5, atol=1e-6)

    def test_detection_pipeline_boxes_with_batch_index(self, pipeline_server):
        from .pipelines import detect

        images = np.random.default_rng(6).integers(0, 255, (2, 48, 80, 3), dtype=np.uint8)
        result = httpclient.InferenceServerClient(pipeline_server.http).infer(
            "det", [_http_input(images, "images", "UINT8")]
        )
        with detect() as pipe:
            want = pipe.run_batch(list(images))
        index = result.as_numpy("boxes_batch_index")
        assert index.tolist() == [i for i, d in enumerate(want) for _ in range(len(d))]
        np.testing.assert_allclose(result.as_numpy("boxes"), np.concatenate([d.boxes for d in want]), atol=1e-3)
        np.testing.assert_array_equal(result.as_numpy("classes"), np.concatenate([d.classes for d in want]))

    def test_pipeline_rejects_a_second_input(self, pipeline_server):
        x = np.zeros((1, 32, 32, 3), np.uint8)
        inputs = [_http_input(x, "input", "UINT8"), _http_input(x, "other", "UINT8")]
        with pytest.raises(InferenceServerException) as info:
            httpclient.InferenceServerClient(pipeline_server.http).infer("cls", inputs)
        assert info.value.status() == "400" and "expected ['input']" in info.value.message()


class TestShutdown:
    def test_sigterm_finishes_queued_requests_then_exits_0(self, tiny_path, engine, tmp_path):
        http, grpc = free_port(), free_port()
        argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu"]
        argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-batch-size", "64"]
        argv += ["--max-delay-ms", "3000"]  # requests sit in the queue until SIGTERM arrives
        with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
            x = _x(1, seed=9)
            results: list = []

            def call() -> None:
                try:
                    client = httpclient.InferenceServerClient(server.http, network_timeout=60)
                    results.append(client.infer("tiny", [_http_input(x)]).as_numpy("logits"))
                except Exception as exc:  # pragma: no cover - reported below
                    results.append(exc)

            threads = [threading.Thread(target=call) for _ in range(3)]
            for t in threads:
                t.start()
            for _ in range(600):
                if sample(metrics(server), "amdinfer_queue_depth", model="tiny") == 3:
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the three requests never queued")
            code = server.stop()
            for t in threads:
                t.join(60)
        assert code == 0
        assert len(results) == 3
        for r in results:
            assert isinstance(r, np.ndarray), r
            np.testing.assert_allclose(r, engine.run(x)["logits"], rtol=1e-5, atol=1e-6)


def test_cli_without_kserve_says_how_to_install(tmp_path):
    """The subcommand is registered without KServe; running it without KServe names the extra."""
    import subprocess

    code = "import sys; sys.modules['kserve'] = None; from amdinfer.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "serve", str(tmp_path / "m.onnx")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert "pip install 'amdinfer-onnx[serve]'" in proc.stderr
