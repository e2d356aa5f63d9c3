"""Hostile and broken requests to `amdinfer serve` (issue 20): each request is answered on its own.

Servers run in subprocesses on loopback with a memory cap (``RLIMIT_AS``) and every client call has a
timeout, so a regression shows up as a failed test, not a hung or swapping suite. The truth is computed in
this process: ``y = a + b`` by NumPy, detections by the same pipeline run with ``Pipeline.run_batch``.

Needs the ``serve`` extra and tritonclient: the ``serve`` nox session runs this file.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from _servers import free_port, wait_until_ready
from onnx import TensorProto, helper

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
from tritonclient.utils import InferenceServerException  # noqa: E402

MEMORY_CAP = 6 << 30  # address space of a server process (ONNX Runtime, gRPC and uvicorn threads fit in it)
TIMEOUT_S = 60  # per client call: a hang fails, it does not stall the suite
ROOT = Path(__file__).resolve().parents[1]


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


@dataclass
class Srv:
    process: subprocess.Popen[bytes]
    http: int
    grpc: int
    log: Path

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.http, timeout=TIMEOUT_S)
        try:
            conn.request("POST", path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.http, timeout=TIMEOUT_S)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()


@contextmanager
def server(argv: Sequence[str], log: Path) -> Iterator[Srv]:
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    args = [sys.executable, *argv, str(http_port), str(grpc_port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_cap)
    srv = Srv(proc, http_port, grpc_port, log)
    try:
        wait_until_ready(proc, http_port, log)
        yield srv
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def add_model() -> onnx.ModelProto:
    """``y = a + b``, inputs ``a`` and ``b`` of shape ``(N, 4)`` float32: the issue's model."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


CLI_SERVER = "import sys; from amdinfer.cli import main; sys.exit(main(sys.argv[1:-2] + ['--http-port', sys.argv[-2], '--grpc-port', sys.argv[-1]]))"  # noqa: E501


@pytest.fixture(scope="module")
def add_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Srv]:
    folder = tmp_path_factory.mktemp("add")
    onnx.save(add_model(), folder / "add.onnx")
    argv = ["-c", CLI_SERVER, "serve", str(folder / "add.onnx"), "--name", "add", "--providers", "cpu"]
    argv += ["--max-batch-size", "8", "--max-delay-ms", "50", "--max-request-bytes", "48M", "--no-warmup"]
    with server(argv, folder / "log.txt") as s:
        yield s


def rest_body(feeds: dict[str, np.ndarray], *, binary: bool = True) -> tuple[bytes, dict[str, str]]:
    """An OIP v2 REST body (Triton's binary extension when ``binary``) and its headers."""
    inputs, blobs = [], []
    for name, arr in feeds.items():
        spec: dict = {"name": name, "shape": list(arr.shape), "datatype": "FP32"}
        if binary:
            spec["parameters"] = {"binary_data_size": arr.nbytes}
            blobs.append(arr.tobytes())
        else:
            spec["data"] = arr.ravel().tolist()
        inputs.append(spec)
    head = json.dumps({"inputs": inputs, "outputs": [{"name": "y", "parameters": {"binary_data": False}}]}).encode()
    headers = {"Content-Type": "application/octet-stream"}
    if binary:
        headers["Inference-Header-Content-Length"] = str(len(head))
    return head + b"".join(blobs), headers


def infer_add(srv: Srv, a: np.ndarray, b: np.ndarray, *, binary: bool = True) -> tuple[int, object]:
    body, headers = rest_body({"a": a, "b": b}, binary=binary)
    status, data = srv.post("/v2/models/add/infer", body, headers)
    payload = json.loads(data)
    if status != 200:
        return status, payload["error"]
    out = payload["outputs"][0]
    return status, np.asarray(out["data"], np.float32).reshape(out["shape"])


def rows(n: int, value: float) -> np.ndarray:
    return np.full((n, 4), value, np.float32)


class TestIsolation:
    def test_the_issue_three_requests_5ms_apart(self, add_server: Srv) -> None:
        """bad1 (a 2 rows, b 1), good (1 + 2), bad2 (a 1 row, b 2): the bad ones 400, good gets 3."""
        sends = {
            "bad1": (rows(2, 100000), rows(1, 1)),
            "good": (rows(1, 1), rows(1, 2)),
            "bad2": (rows(1, 5), rows(2, 7)),
        }
        with ThreadPoolExecutor(3) as pool:
            futures = {}
            for name, (a, b) in sends.items():
                futures[name] = pool.submit(infer_add, add_server, a, b)
                time.sleep(0.005)
            got = {k: f.result(TIMEOUT_S) for k, f in futures.items()}
        assert got["good"][0] == 200 and got["good"][1].tolist() == [[3.0] * 4]
        assert got["bad1"] == (400, "input 'b': axis 0 ('N') is 1, but input 'a' has 'N' = 2")
        assert got["bad2"] == (400, "input 'b': axis 0 ('N') is 2, but input 'a' has 'N' = 1")

    def test_a_bad_request_never_fails_its_batch_mate(self, add_server: Srv) -> None:
        with ThreadPoolExecutor(2) as pool:
            bad = pool.submit(infer_add, add_server, rows(2, 1), rows(1, 1))
            time.sleep(0.005)
            good = pool.submit(infer_add, add_server, rows(3, 4), rows(3, 0.5))
            assert bad.result(TIMEOUT_S)[0] == 400
            status, y = good.result(TIMEOUT_S)
        assert status == 200 and np.array_equal(y, rows(3, 4.5))

    def test_many_clients_some_sending_garbage(self, add_server: Srv) -> None:
        """16 clients x 12 requests, a third of them broken in 8 ways: every good answer is its own a + b."""
        garbage: list[tuple[bytes, dict[str, str]]] = [
            rest_body({"a": rows(2, 9), "b": rows(1, 9)}),  # rows disagree
            rest_body({"a": rows(1, 9)}),  # an input missing
            (b"{not json", {"Content-Type": "application/json"}),
            (b"[1, 1, 1]", {"Content-Type": "application/json"}),
            (rest_body({"a": rows(1, 9), "b": rows(1, 9)})[0], {"Inference-Header-Content-Length": "abc"}),
            (rest_body({"a": rows(1, 9), "b": rows(1, 9)})[0][:-3], {"Inference-Header-Content-Length": "10"}),
            (json_request(("a", [None] * 4, "FP32", [1, 4]), B_OK), {}),
            (json_request(("a", [1e39] * 4, "FP32", [1, 4]), B_OK), {}),
        ]  # fmt: skip

        def client(c: int) -> list[str]:
            rng = np.random.default_rng(c)
            failures = []
            for i in range(12):
                if (c + i) % 3 == 0:
                    body, headers = garbage[(c + i) % len(garbage)]
                    status, data = add_server.post("/v2/models/add/infer", body, headers)
                    if status != 400 or len(data) > 2000:
                        failures.append(f"garbage {(c + i) % len(garbage)}: {status} {data[:200]!r}")
                    continue
                n = int(rng.integers(1, 4))
                a = rng.integers(0, 1000, (n, 4)).astype(np.float32)
                b = rng.integers(0, 1000, (n, 4)).astype(np.float32) + c * 10_000 + i
                status, y = infer_add(add_server, a, b, binary=bool(i % 2))
                if status != 200 or not np.array_equal(y, a + b):
                    failures.append(f"client {c} request {i}: {status} {y}")
            return failures

        with ThreadPoolExecutor(16) as pool:
            failures = [f for fs in pool.map(client, range(16)) for f in fs]
        assert failures == []
        assert add_server.get("/v2/health/live")[0] == 200


class TestSharedMemoryIsolation:
    def test_shm_requests_batched_with_others_each_get_their_own_sum(self, add_server: Srv) -> None:
        """8 requests within one batching window: 4 read a and b from their own regions and write y into their
        own region (filled with a sentinel), 3 send tensors, 1 names a wrong byte size. Each answer is its own
        a + b, each region holds its own y and nothing past it; the bad one is refused alone."""
        import tritonclient.utils.shared_memory as shm

        client = grpcclient.InferenceServerClient(f"127.0.0.1:{add_server.grpc}")
        handles, sentinel = [], np.float32(-7.5)

        def region(name: str, size: int):
            handle = shm.create_shared_memory_region(name, f"/amdinfer-iso-{os.getpid()}-{name}", size)
            handles.append(handle)
            client.register_system_shared_memory(name, f"/amdinfer-iso-{os.getpid()}-{name}", size)
            return handle

        def via_shm(k: int, n: int, byte_size: int | None = None) -> tuple[int, object]:
            a, b = rows(n, 10.0 * k), rows(n, k + 0.25)
            shm.set_shared_memory_region(region(f"ab{k}", 2 * a.nbytes), [a, b])
            out = region(f"y{k}", 4 * 16 * 4)  # room for 4 rows; n <= 3 are written
            shm.set_shared_memory_region(out, [np.full((4, 4), sentinel, np.float32)])
            inputs = []
            for i, name in enumerate("ab"):
                tensor = grpcclient.InferInput(name, [n, 4], "FP32")
                tensor.set_shared_memory(f"ab{k}", byte_size or a.nbytes, offset=i * a.nbytes)
                inputs.append(tensor)
            wanted = grpcclient.InferRequestedOutput("y")
            wanted.set_shared_memory(f"y{k}", 4 * 16 * 4)
            try:
                grpcclient.InferenceServerClient(f"127.0.0.1:{add_server.grpc}").infer("add", inputs, outputs=[wanted])
            except InferenceServerException as exc:
                return 400, exc.message()
            y = shm.get_contents_as_numpy(out, np.float32, [4, 4]).copy()  # a view dies with the region
            assert np.all(y[n:] == sentinel), f"request {k}: bytes past its {n} rows changed: {y}"
            return 200, (y[:n], a + b)

        try:
            with ThreadPoolExecutor(8) as pool:
                futures = {}
                for k in range(8):
                    if k in (1, 3, 5, 7):
                        futures[k] = pool.submit(via_shm, k, 1 + k % 3)
                    elif k == 6:
                        futures[k] = pool.submit(via_shm, k, 2, byte_size=20)
                    else:
                        futures[k] = pool.submit(infer_add, add_server, rows(2, 100.0 * k), rows(2, 1.0))
                got = {k: f.result(TIMEOUT_S) for k, f in futures.items()}
        finally:
            client.unregister_system_shared_memory()
            for handle in handles:
                shm.destroy_shared_memory_region(handle)
        for k in (1, 3, 5, 7):
            status, (y, want) = got[k]
            assert status == 200 and np.array_equal(y, want), (k, y, want)
        for k in (0, 2, 4):
            assert got[k][0] == 200 and np.array_equal(got[k][1], rows(2, 100.0 * k + 1.0)), got[k]
        assert got[6][0] == 400 and "shared_memory_byte_size is 20" in got[6][1], got[6]


def json_request(*inputs: tuple[str, list, str, list[int]]) -> bytes:
    """A JSON-only OIP v2 body from ``(name, data, datatype, shape)`` rows."""
    specs = [{"name": n, "shape": shape, "datatype": dt, "data": data} for n, data, dt, shape in inputs]
    return json.dumps({"inputs": specs}).encode()


B_OK = ("b", [1, 2, 3, 4], "FP32", [1, 4])
HEADER = "Inference-Header-Content-Length"
BAD_REST = [
    # (id, body, headers, status, message part)
    ("header_abc", b"{}", {HEADER: "abc"}, 400, f"{HEADER}: got 'abc'"),
    ("header_1e3", b"{}", {HEADER: "1e3"}, 400, f"{HEADER}: got '1e3'"),
    ("malformed_json", b'{"inputs": [', {}, 400, "request body: not valid JSON"),
    ("not_a_request", b"[1,1,1]", {}, 400, 'expected a JSON object with an "inputs" list'),
    ("json_null", json_request(("a", [1, None, 2, 3], "FP32", [1, 4]), B_OK), {}, 400,
     "input 'a': data holds null, expected FP32 numbers"),
    ("json_overflow", json_request(("a", [1, 1e39, 2, 3], "FP32", [1, 4]), B_OK), {}, 400,
     "input 'a': value 1e+39 overflows FP32"),
    ("json_strings", json_request(("a", ["x"], "FP32", [1, 1])), {}, 400, "input 'a': data holds strings"),
    ("int_overflow", json_request(("a", [300], "UINT8", [1])), {}, 400,
     "input 'a': value 300 is out of range for UINT8"),
    ("unknown_datatype", json_request(("a", [1], "FLOAT99", [1])), {}, 400, "input 'a': got datatype 'FLOAT99'"),
]  # fmt: skip


class TestBadRequests:
    @pytest.mark.parametrize(
        ("body", "headers", "status", "message"), [b[1:] for b in BAD_REST], ids=[b[0] for b in BAD_REST]
    )
    def test_rest(self, add_server: Srv, body: bytes, headers: dict, status: int, message: str) -> None:
        got, data = add_server.post("/v2/models/add/infer", body, headers)
        assert got == status, data
        assert message in json.loads(data)["error"]

    def test_large_garbage_body_answered_without_echo_while_health_answers(self, add_server: Srv) -> None:
        """40 MB of ``[1,1,...]``: a short 400, and /v2/health/live answers while it is being parsed."""
        body = b"[" + b"1," * (20 << 20) + b"1]"
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(r=add_server.post("/v2/models/add/infer", body)))
        thread.start()
        health = []
        while thread.is_alive():
            health.append(add_server.get("/v2/health/live")[0])
        thread.join()
        status, data = result["r"]
        assert status == 400 and len(data) < 500, data[:500]
        assert health and set(health) == {200}

    def test_body_over_the_limit_is_413_before_it_is_read(self, add_server: Srv) -> None:
        """Only the headers are sent: the answer comes without the server waiting for 49 MB of body."""
        with socket.create_connection(("127.0.0.1", add_server.http), timeout=TIMEOUT_S) as sock:
            head = "POST /v2/models/add/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n"
            sock.sendall(head.format(49 << 20).encode())
            answer = b""
            while chunk := sock.recv(4096):  # the server closes after its answer
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"--max-request-bytes" in answer

    def test_chunked_body_over_the_limit_is_413(self, add_server: Srv) -> None:
        """No length declared: refused once the chunks pass the limit, not after the whole body arrived."""
        with socket.create_connection(("127.0.0.1", add_server.http), timeout=TIMEOUT_S) as sock:
            sock.sendall(b"POST /v2/models/add/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n" % (1 << 20) + b"\0" * (1 << 20) + b"\r\n"
            answer = b""
            try:
                for _ in range(49):  # 49 MiB: over the 48M limit; the body is never finished
                    sock.sendall(chunk)
                sock.settimeout(TIMEOUT_S)
                answer = sock.recv(4096)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed while chunks were still being sent
        assert answer == b"" or answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert add_server.get("/v2/health/live")[0] == 200

    def test_a_version_gets_the_same_answer_on_rest_and_grpc(self, add_server: Srv) -> None:
        body, headers = rest_body({"a": rows(1, 1), "b": rows(1, 1)})
        status, data = add_server.post("/v2/models/add/versions/99/infer", body, headers)
        message = "model 'add': got version '99', but this server keeps one unversioned model per name"
        assert status == 400 and message in json.loads(data)["error"]
        assert add_server.get("/v2/models/add/versions/99")[0] == 400
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{add_server.grpc}")
        inputs = []
        for name in ("a", "b"):
            inp = grpcclient.InferInput(name, [1, 4], "FP32")
            inp.set_data_from_numpy(rows(1, 1))
            inputs.append(inp)
        with pytest.raises(InferenceServerException) as info:
            client.infer("add", inputs, model_version="99")
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and message in info.value.message()
        with pytest.raises(InferenceServerException) as info:
            client.get_model_metadata("add", model_version="99")
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and message in info.value.message()
        assert client.infer("add", inputs).as_numpy("y").tolist() == [[2.0] * 4]

    def test_grpc_unknown_datatype_names_the_input(self, add_server: Srv) -> None:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{add_server.grpc}")
        a = grpcclient.InferInput("a", [1, 4], "FLOAT99")
        a._raw_content = rows(1, 1).tobytes()
        b = grpcclient.InferInput("b", [1, 4], "FP32")
        b.set_data_from_numpy(rows(1, 1))
        with pytest.raises(InferenceServerException) as info:
            client.infer("add", [a, b])
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "input 'a'" in info.value.message() and "FLOAT99" in info.value.message()

    def test_client_errors_log_no_traceback(self, add_server: Srv) -> None:
        add_server.post("/v2/models/add/infer", b"{not json")
        assert "Traceback" not in add_server.log.read_text()


PIPELINE_SERVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from amdinfer.serve import Server, build_model
    from serving.pipelines import detect

    http, grpc = int(sys.argv[-2]), int(sys.argv[-1])
    model = build_model("det", detect(), max_batch_size=8, max_delay_ms=50)
    Server(http_port=http, grpc_port=grpc, warmup=False).start([model])
    """
)


class TestPipeline:
    def test_an_rgba_image_fails_alone(self, tmp_path: Path) -> None:
        """An RGBA image and a good image 10 ms later: 400 naming the channels, and the good one's detections."""
        sys.path.insert(0, str(ROOT))
        from serving.pipelines import detect

        good = np.random.default_rng(6).integers(0, 255, (1, 48, 80, 3), dtype=np.uint8)
        rgba = np.random.default_rng(7).integers(0, 255, (1, 48, 80, 4), dtype=np.uint8)
        with detect() as pipe:
            want = pipe.run_batch(list(good))[0]

        def send(srv: Srv, x: np.ndarray) -> tuple[int, dict]:
            spec = {"name": "images", "shape": list(x.shape), "datatype": "UINT8"}
            spec["parameters"] = {"binary_data_size": x.nbytes}
            outputs = [{"name": n, "parameters": {"binary_data": False}} for n in ("boxes", "classes")]
            head = json.dumps({"inputs": [spec], "outputs": outputs})
            status, data = srv.post(
                "/v2/models/det/infer", head.encode() + x.tobytes(), {"Inference-Header-Content-Length": str(len(head))}
            )
            return status, json.loads(data)

        argv = ["-c", PIPELINE_SERVER.format(root=str(ROOT))]
        with server(argv, tmp_path / "log.txt") as srv, ThreadPoolExecutor(2) as pool:
            bad = pool.submit(send, srv, rgba)
            time.sleep(0.01)
            ok = pool.submit(send, srv, good)
            (bad_status, bad_body), (status, body) = bad.result(TIMEOUT_S), ok.result(TIMEOUT_S)
        assert bad_status == 400 and "4 channels" in bad_body["error"], bad_body
        assert status == 200, body
        outs = {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in body["outputs"]}
        np.testing.assert_allclose(outs["boxes"], want.boxes, atol=1e-3)
        np.testing.assert_array_equal(outs["classes"], want.classes)
        assert "Traceback" not in (tmp_path / "log.txt").read_text()


SERVE_ERRORS = [
    (["--host", "999.1.1.1"], "host: got '999.1.1.1'"),
    (["--http-port", "-5"], "--http-port: got '-5', expected a TCP port 0..65535"),
    (["--http-port", "70000"], "--http-port: got '70000', expected a TCP port 0..65535"),
    (["--max-request-bytes", "12"], "--max-request-bytes: got '12'"),
]


class TestServeCommand:
    @pytest.mark.parametrize(("flags", "message"), SERVE_ERRORS, ids=["host", "port_negative", "port_70000", "limit"])
    def test_bad_options_are_one_line(self, tmp_path: Path, flags: list[str], message: str) -> None:
        onnx.save(add_model(), tmp_path / "add.onnx")
        argv = [sys.executable, "-m", "amdinfer", "serve", str(tmp_path / "add.onnx"), "--providers", "cpu", *flags]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=_cap)
        assert proc.returncode in (1, 2), proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("amdinfer serve"), proc.stderr
        assert message in lines[0]

    @pytest.mark.parametrize("which", ["--http-port", "--grpc-port"])
    def test_a_taken_port_is_one_line(self, tmp_path: Path, which: str) -> None:
        onnx.save(add_model(), tmp_path / "add.onnx")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            ports = {"--http-port": str(free_port()), "--grpc-port": str(free_port()), which: str(port)}
            argv = [sys.executable, "-m", "amdinfer", "serve", str(tmp_path / "add.onnx"), "--providers", "cpu"]
            argv += [item for kv in ports.items() for item in kv]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=_cap)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("amdinfer serve: OSError:"), proc.stderr
        assert f":{port}" in lines[0]


# --- Issue 35.1: shared memory a client cannot use against others -------------------------------------------------
# A client owns its shared-memory object and can shrink it at any time. A server that touched the object's pages
# through a mapping died of SIGBUS when one did (and every other client's connection with it); it must refuse
# only the request that reads or writes the shrunk region. Region names that no region can have are refused in
# the register call's words, without the server's temporary path.

ROWS = 384  # a and b of (384, 4) float32 side by side: the issue's 12,288-byte region
ATTACKER = textwrap.dedent(
    """
    import os, sys, time
    paths, seconds, count = sys.argv[1:-2], float(sys.argv[-2]), int(sys.argv[-1])
    fds = [os.open(p, os.O_RDWR) for p in paths]
    kept = [(fd, os.fstat(fd).st_size, os.pread(fd, os.fstat(fd).st_size, 0)) for fd in fds]
    deadline, n = time.monotonic() + seconds, 0
    while n < count and time.monotonic() < deadline:
        for fd, size, data in kept:  # to 0 and back, then the bytes again (the region reads zeros meanwhile)
            os.ftruncate(fd, 0)
            os.ftruncate(fd, size)
            os.pwrite(fd, data, 0)
        n += 1
    print(n)
    """
)


def _shm_spec(name: str, shape: list[int], region: str, size: int, offset: int = 0) -> dict:
    params = {"shared_memory_region": region, "shared_memory_byte_size": size, "shared_memory_offset": offset}
    return {"name": name, "shape": shape, "datatype": "FP32", "parameters": params}


def _error(data: bytes) -> str:
    return str(json.loads(data).get("error", data[:300]))


class _ShmClients:
    """The regions of one attack: ``atk`` (a and b) and ``atk_out``, which the attacker shrinks, and ``vic`` and
    ``vic_out``, a bystander's own; all made with tritonclient's utilities and registered over REST."""

    def __init__(self, srv: Srv, tag: str) -> None:
        import tritonclient.utils.shared_memory as shm

        self.srv, self.shm, self.tag, self.handles = srv, shm, tag, {}
        self.a = np.arange(1, ROWS * 4 + 1, dtype=np.float32).reshape(ROWS, 4)
        self.b = self.a + 10_000
        self.va, self.vb = rows(ROWS, 0.5) + self.a, rows(ROWS, 3.0)
        n = self.a.nbytes
        made = [("atk", 2 * n, [self.a, self.b]), ("atk_out", n, []), ("vic", 2 * n, [self.va, self.vb]),
                ("vic_out", n, [])]  # fmt: skip
        for name, size, arrays in made:
            handle = shm.create_shared_memory_region(self.name(name), self.key(name), size)
            if arrays:
                shm.set_shared_memory_region(handle, arrays)
            self.handles[name] = handle
            body = json.dumps({"key": self.key(name), "offset": 0, "byte_size": size}).encode()
            status, data = srv.post(f"/v2/systemsharedmemory/region/{self.name(name)}/register", body)
            assert status == 200, data

    def name(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def key(self, name: str) -> str:
        return f"/amdinfer-rob-{self.tag}-{name}"

    def close(self) -> None:
        self.srv.post("/v2/systemsharedmemory/unregister", b"")
        for handle in self.handles.values():
            self.shm.destroy_shared_memory_region(handle)

    def shrink_refusal(self, message: str, regions: tuple[str, ...]) -> bool:
        """Whether ``message`` is the refusal of a shrunk region among ``regions`` (naming it and both sizes)."""
        return any(
            f"region '{self.name(r)}' was registered as " in message
            and ("has shrunk to " in message or "shrank during the read" in message)
            for r in regions
        )

    def attacked_rest(self) -> tuple[str, str]:
        """a and b from the attacked region, y in the response: y is a + b of what the region held when read
        (each element of a and b is its value or 0: the attacker's regrown object reads zeros until it rewrote
        it), or a 400 naming the region and its sizes."""
        nbytes = self.a.nbytes
        spec = [_shm_spec("a", [ROWS, 4], self.name("atk"), nbytes), _shm_spec("b", [ROWS, 4], self.name("atk"),
                nbytes, nbytes)]  # fmt: skip
        body = json.dumps({"inputs": spec, "outputs": [{"name": "y", "parameters": {"binary_data": False}}]})
        status, data = self.srv.post("/v2/models/add/infer", body.encode())
        if status == 400 and self.shrink_refusal(_error(data), ("atk",)):
            return "refused", ""
        if status != 200:
            return "bad", f"attacked REST: {status} {data[:300]!r}"
        y = np.asarray(json.loads(data)["outputs"][0]["data"], np.float32).reshape(ROWS, 4)
        a, b = self.a, self.b
        if not np.all((y == a + b) | (y == a) | (y == b) | (y == 0)):
            return "bad", f"attacked REST: y holds values that are not a + b of the region's bytes: {y[:2]}"
        return "ok", ""

    def attacked_grpc(self, client) -> tuple[str, str]:
        """a and b from the attacked region, y into the attacked output region: answered 200 (what lands in the
        region is the attacker's business) or refused naming one of the two regions."""
        inputs = []
        for i, name in enumerate("ab"):
            tensor = grpcclient.InferInput(name, [ROWS, 4], "FP32")
            tensor.set_shared_memory(self.name("atk"), self.a.nbytes, offset=i * self.a.nbytes)
            inputs.append(tensor)
        out = grpcclient.InferRequestedOutput("y")
        out.set_shared_memory(self.name("atk_out"), self.a.nbytes)
        try:
            client.infer("add", inputs, outputs=[out], client_timeout=TIMEOUT_S)
        except InferenceServerException as exc:
            ok = exc.status() == "StatusCode.INVALID_ARGUMENT" and self.shrink_refusal(
                exc.message(), ("atk", "atk_out")
            )
            return ("refused", "") if ok else ("bad", f"attacked gRPC: {exc.status()} {exc.message()}")
        return "ok", ""

    def bystander(self, client, i: int) -> tuple[str, str]:
        """The bystander's own regions (gRPC, even i) or tensors in the request (REST, odd i): exactly a + b."""
        if i % 2:
            a, b = rows(3, i), rows(3, 0.25)
            status, y = infer_add(self.srv, a, b)
            good = status == 200 and np.array_equal(y, a + b)
            return ("ok", "") if good else ("bad", f"bystander REST {i}: {status} {y}")
        inputs = []
        for k, name in enumerate("ab"):
            tensor = grpcclient.InferInput(name, [ROWS, 4], "FP32")
            tensor.set_shared_memory(self.name("vic"), self.a.nbytes, offset=k * self.a.nbytes)
            inputs.append(tensor)
        out = grpcclient.InferRequestedOutput("y")
        out.set_shared_memory(self.name("vic_out"), self.a.nbytes)
        self.shm.set_shared_memory_region(self.handles["vic_out"], [rows(ROWS, -1.0)])
        try:
            client.infer("add", inputs, outputs=[out], client_timeout=TIMEOUT_S)
        except InferenceServerException as exc:
            return "bad", f"bystander gRPC {i}: {exc.status()} {exc.message()}"
        y = self.shm.get_contents_as_numpy(self.handles["vic_out"], np.float32, [ROWS, 4]).copy()
        return ("ok", "") if np.array_equal(y, self.va + self.vb) else ("bad", f"bystander gRPC {i}: {y[:2]}")


def _shrink_attack(srv: Srv, tag: str, *, seconds: float = 6.0, per_client: int = 400) -> None:
    """The attacker shrinks its regions in a loop while three clients infer: from the attacked regions over
    REST and gRPC, and a bystander from its own regions and with tensors in the request."""
    clients = _ShmClients(srv, tag)
    try:
        paths = [f"/dev/shm/{clients.key(r).lstrip('/')}" for r in ("atk", "atk_out")]
        attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, *paths, str(seconds), "1000000"],
                                    stdout=subprocess.PIPE, preexec_fn=_cap)  # fmt: skip
        deadline = time.monotonic() + seconds

        def run(kind: str) -> list[tuple[str, str]]:
            grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc}")
            got = []
            for i in range(per_client):
                if time.monotonic() > deadline:
                    break
                try:
                    if kind == "rest":
                        got.append(clients.attacked_rest())
                    elif kind == "grpc":
                        got.append(clients.attacked_grpc(grpc))
                    else:
                        got.append(clients.bystander(grpc, i))
                except (OSError, http.client.HTTPException) as exc:  # the server went away
                    got.append(("bad", f"{kind} {i}: {exc!r}"))
                    break
            grpc.close()
            return got

        try:
            with ThreadPoolExecutor(3) as pool:
                results = dict(zip(("rest", "grpc", "bystander"), pool.map(run, ("rest", "grpc", "bystander"))))
        finally:
            out, _ = attacker.communicate(timeout=TIMEOUT_S)
        assert attacker.returncode == 0 and int(out) > 0, out
        assert srv.process.poll() is None, f"the server exited with {srv.process.returncode}"
        bad = [why for got in results.values() for outcome, why in got if outcome == "bad"]
        assert bad == [], bad[:5]
        attacked = results["rest"] + results["grpc"]
        assert any(outcome == "refused" for outcome, _ in attacked), "the attack never hit a request"
        assert results["bystander"] and all(outcome == "ok" for outcome, _ in results["bystander"])
        # the attacker gone, its regions answer again
        assert clients.attacked_rest() == ("ok", "")
    finally:
        clients.close()


def _long_names_refused(srv: Srv) -> None:
    """128-byte region names on every call that names a region: 400 / INVALID_ARGUMENT in the register call's
    words, without the server's temporary folder (a registration is a file named by the name in hex)."""
    import tempfile

    name = "a" * 128
    words = "region name: got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... (128 bytes), expected 1 to 100 bytes of text"
    infer = json.dumps({"inputs": [_shm_spec("a", [1, 4], name, 16), {"name": "b", "shape": [1, 4],
                        "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()  # fmt: skip
    register = json.dumps({"key": "/amdinfer-no-such", "byte_size": 16}).encode()
    rest = {
        "status": srv.get(f"/v2/systemsharedmemory/region/{name}/status"),
        "unregister": srv.post(f"/v2/systemsharedmemory/region/{name}/unregister", b""),
        "register": srv.post(f"/v2/systemsharedmemory/region/{name}/register", register),
        "cuda status": srv.get(f"/v2/cudasharedmemory/region/{name}/status"),
        "cuda unregister": srv.post(f"/v2/cudasharedmemory/region/{name}/unregister", b""),
        "infer": srv.post("/v2/models/add/infer", infer),
    }
    messages = {}
    for call, (status, data) in rest.items():
        assert status == 400, (call, status, data[:300])
        messages[f"REST {call}"] = _error(data)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{srv.grpc}")
    a = grpcclient.InferInput("a", [1, 4], "FP32")
    a.set_shared_memory(name, 16)
    b = grpcclient.InferInput("b", [1, 4], "FP32")
    b.set_data_from_numpy(rows(1, 1))
    for call, fn in {
        "status": lambda: client.get_system_shared_memory_status(name),
        "unregister": lambda: client.unregister_system_shared_memory(name),
        "register": lambda: client.register_system_shared_memory(name, "/amdinfer-no-such", 16),
        "cuda unregister": lambda: client.unregister_cuda_shared_memory(name),
        "infer": lambda: client.infer("add", [a, b], client_timeout=TIMEOUT_S),
    }.items():
        with pytest.raises(InferenceServerException) as info:
            fn()
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT", (call, info.value.status(), info.value.message())
        messages[f"gRPC {call}"] = info.value.message()
    client.close()
    for call, message in messages.items():
        where = "input 'a': " if call.endswith("infer") else ""
        assert message == where + words, (call, message)
        assert tempfile.gettempdir() not in message and "amdinfer-shm-" not in message, (call, message)


SHM_ARGV = ["serve", "--name", "add", "--providers", "cpu", "--no-warmup", "--max-batch-size", "8",
            "--max-delay-ms", "5"]  # fmt: skip


class TestSharedMemoryShrink:
    def test_single_process_server_survives_and_refuses_only_the_shrunk_region(self, tmp_path: Path) -> None:
        onnx.save(add_model(), tmp_path / "add.onnx")
        argv = ["-c", CLI_SERVER, *SHM_ARGV, str(tmp_path / "add.onnx"), "--single-process"]
        with server(argv, tmp_path / "log.txt") as srv:
            _shrink_attack(srv, f"s{os.getpid()}")
            _long_names_refused(srv)
            assert srv.get("/v2/health/live")[0] == 200
        assert "Traceback" not in (tmp_path / "log.txt").read_text()

    def test_multi_process_server_survives_and_refuses_only_the_shrunk_region(self, tmp_path: Path) -> None:
        """``--workers-per-device 2``: two server processes share the ports and the registrations; neither may
        die (the supervisor would stop the other, so the same two pids must serve to the end)."""
        import psutil

        onnx.save(add_model(), tmp_path / "add.onnx")
        argv = ["-c", CLI_SERVER, *SHM_ARGV, str(tmp_path / "add.onnx"), "--workers-per-device", "2"]
        with server(argv, tmp_path / "log.txt") as srv:
            deadline = time.monotonic() + TIMEOUT_S
            while len(children := psutil.Process(srv.process.pid).children()) != 2 or not all(
                {srv.http, srv.grpc} <= {c.laddr.port for c in child.connections("inet") if c.status == "LISTEN"}
                for child in children
            ):
                assert time.monotonic() < deadline, "the two server processes never listened on both ports"
                time.sleep(0.2)
            pids = sorted(c.pid for c in children)
            _shrink_attack(srv, f"m{os.getpid()}")
            _long_names_refused(srv)
            assert sorted(c.pid for c in psutil.Process(srv.process.pid).children()) == pids
            assert all(c.status() != psutil.STATUS_ZOMBIE for c in psutil.Process(srv.process.pid).children())
        assert "Traceback" not in (tmp_path / "log.txt").read_text()
