"""Triton's system shared-memory extension, driven by tritonclient's own shm utilities over REST and gRPC.

The truth is ``engine.run`` in this process on the same model; the server runs in a subprocess on loopback.
Also here: the server's one start line, quiet client errors and no deprecation warnings (issue 22), checked
on this server's log.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

import tritonclient.utils.shared_memory as shm  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from .conftest import RunningServer, assert_output_in_region, free_port, running_server  # noqa: E402

CLIENTS = {"http": httpclient, "grpc": grpcclient}
# every warning the server process could emit is shown, so that a deprecation at start or per request is seen
WARNINGS = ["-W", "always::DeprecationWarning", "-W", "always::PendingDeprecationWarning", "-W", "always::UserWarning"]


@pytest.fixture(scope="module")
def server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    http, grpc = free_port(), free_port()
    argv = [*WARNINGS, "-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-batch-size", "8", "--max-delay-ms", "5"]
    log = tmp_path_factory.mktemp("shm") / "log.txt"
    with running_server(argv, http, grpc, log) as s:
        yield s
        assert s.stop() == 0, log.read_text()


def client(server: RunningServer, protocol: str):
    return CLIENTS[protocol].InferenceServerClient(server.http if protocol == "http" else server.grpc)


class Regions:
    """Shared-memory objects made with tritonclient's utilities, destroyed (and unregistered) at the end."""

    def __init__(self, server: RunningServer, protocol: str) -> None:
        self.client = client(server, protocol)
        self.mod = CLIENTS[protocol]
        self.handles: list = []
        self.tag = secrets.token_hex(4)

    def make(self, name: str, byte_size: int, *, register: bool = True, offset: int = 0, size: int | None = None):
        key = f"/amdinfer-test-{self.tag}-{name}"
        handle = shm.create_shared_memory_region(f"{self.tag}-{name}", key, byte_size)
        self.handles.append(handle)
        if register:
            self.client.register_system_shared_memory(self.name(name), key, size or byte_size, offset=offset)
        return handle

    def name(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def key(self, name: str) -> str:
        return f"/amdinfer-test-{self.tag}-{name}"

    def close(self) -> None:
        self.client.unregister_system_shared_memory()
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture(params=sorted(CLIENTS))
def regions(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[Regions]:
    r = Regions(server, request.param)
    yield r
    r.close()


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), dtype=np.float32)


def _input(regions: Regions, shape: list[int], region: str, size: int, offset: int = 0):
    tensor = regions.mod.InferInput("input", shape, "FP32")
    tensor.set_shared_memory(regions.name(region), size, offset=offset)
    return tensor


def _output(regions: Regions, region: str, size: int, offset: int = 0):
    out = regions.mod.InferRequestedOutput("logits")
    out.set_shared_memory(regions.name(region), size, offset=offset)
    return out


def _refused(call, *, grpc_status: str = "StatusCode.INVALID_ARGUMENT") -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() in ("400", grpc_status), (info.value.status(), info.value.message())
    return str(info.value.message())


class TestInfer:
    def test_input_and_output_in_shared_memory_equal_engine_run(self, regions: Regions, engine) -> None:
        x = _x(3, seed=1)
        want = engine.run(x)["logits"]
        inp = regions.make("in", x.nbytes)
        out = regions.make("out", want.nbytes)
        shm.set_shared_memory_region(inp, [x])
        result = regions.client.infer(
            "tiny", [_input(regions, list(x.shape), "in", x.nbytes)], outputs=[_output(regions, "out", want.nbytes)]
        )
        got = shm.get_contents_as_numpy(out, np.float32, [3, 10])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert_output_in_region(result, regions.mod is httpclient, regions.name("out"), want.nbytes)

    def test_tensors_at_offsets_of_one_region(self, regions: Regions, engine) -> None:
        """Two requests' inputs and outputs side by side in one region each: every access lands at its offset."""
        a, b = _x(1, seed=2), _x(2, seed=3)
        both = regions.make("in", a.nbytes + b.nbytes)
        shm.set_shared_memory_region(both, [a, b])
        outs = regions.make("out", 64 + 3 * 40)  # the second output starts 64 bytes in, after a gap
        regions.client.infer(
            "tiny", [_input(regions, [1, 3, 32, 32], "in", a.nbytes)], outputs=[_output(regions, "out", 40)]
        )
        regions.client.infer(
            "tiny",
            [_input(regions, [2, 3, 32, 32], "in", b.nbytes, offset=a.nbytes)],
            outputs=[_output(regions, "out", 80, offset=64)],
        )
        np.testing.assert_allclose(
            shm.get_contents_as_numpy(outs, np.float32, [1, 10]), engine.run(a)["logits"], rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(
            shm.get_contents_as_numpy(outs, np.float32, [2, 10], offset=64),
            engine.run(b)["logits"],
            rtol=1e-5,
            atol=1e-6,
        )
        assert bytes(outs._mpsm_handle.buf[40:64]) == b"\0" * 24  # nothing written between the two outputs

    def test_input_in_shared_memory_output_in_response(self, regions: Regions, engine) -> None:
        x = _x(2, seed=4)
        shm.set_shared_memory_region(regions.make("in", x.nbytes), [x])
        result = regions.client.infer("tiny", [_input(regions, list(x.shape), "in", x.nbytes)])
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)

    def test_region_registered_at_an_offset_of_its_object(self, regions: Regions, engine) -> None:
        x = _x(1, seed=5)
        obj = regions.make("in", 4096 + x.nbytes, register=False)
        shm.set_shared_memory_region(obj, [x], offset=4096)
        regions.client.register_system_shared_memory(regions.name("in"), regions.key("in"), x.nbytes, offset=4096)
        result = regions.client.infer("tiny", [_input(regions, [1, 3, 32, 32], "in", x.nbytes)])
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)


class TestBounds:
    def test_input_past_the_region(self, regions: Regions) -> None:
        x = _x(1, seed=0)
        regions.make("in", x.nbytes)
        message = _refused(
            lambda: regions.client.infer("tiny", [_input(regions, [1, 3, 32, 32], "in", x.nbytes, offset=4)])
        )
        assert f"input 'input': offset 4 + byte_size {x.nbytes} = {x.nbytes + 4} runs past region" in message
        assert regions.name("in") in message

    def test_input_byte_size_must_be_the_tensors(self, regions: Regions) -> None:
        regions.make("in", 2 * 12288)
        message = _refused(lambda: regions.client.infer("tiny", [_input(regions, [1, 3, 32, 32], "in", 2 * 12288)]))
        assert "input 'input': shared_memory_byte_size is 24576" in message and "expected 12288 bytes" in message

    def test_output_region_too_small(self, regions: Regions) -> None:
        x = _x(2, seed=0)
        shm.set_shared_memory_region(regions.make("in", x.nbytes), [x])
        regions.make("out", 40)
        message = _refused(
            lambda: regions.client.infer(
                "tiny", [_input(regions, [2, 3, 32, 32], "in", x.nbytes)], outputs=[_output(regions, "out", 40)]
            )
        )
        assert "output 'logits': got 80 bytes" in message and "shared_memory_byte_size is 40" in message

    def test_output_window_past_the_region(self, regions: Regions) -> None:
        x = _x(1, seed=0)
        shm.set_shared_memory_region(regions.make("in", x.nbytes), [x])
        regions.make("out", 40)
        message = _refused(
            lambda: regions.client.infer(
                "tiny",
                [_input(regions, [1, 3, 32, 32], "in", x.nbytes)],
                outputs=[_output(regions, "out", 40, offset=8)],
            )
        )
        assert "output 'logits': offset 8 + byte_size 40 = 48 runs past region" in message

    def test_unknown_region(self, regions: Regions) -> None:
        message = _refused(lambda: regions.client.infer("tiny", [_input(regions, [1, 3, 32, 32], "nope", 12288)]))
        assert f"shared-memory region '{regions.name('nope')}' is not registered" in message

    def test_register_past_the_object(self, regions: Regions) -> None:
        regions.make("small", 64, register=False)
        message = _refused(
            lambda: regions.client.register_system_shared_memory(
                regions.name("small"), regions.key("small"), 64, offset=8
            )
        )
        assert "offset 8 + byte_size 64 = 72 runs past the end" in message

    def test_register_a_key_that_does_not_exist(self, regions: Regions) -> None:
        message = _refused(lambda: regions.client.register_system_shared_memory("ghost", "/amdinfer-no-such", 64))
        assert "no shared-memory object '/amdinfer-no-such'" in message

    @pytest.mark.parametrize("key", ["/../etc/passwd", "/a/b", "/.."])
    def test_keys_stay_in_dev_shm(self, regions: Regions, key: str) -> None:
        message = _refused(lambda: regions.client.register_system_shared_memory("escape", key, 64))
        assert "expected one POSIX shared-memory name" in message or "no shared-memory object" in message


def _object(regions: Regions, name: str) -> str:
    return "/dev/shm/" + regions.key(name).lstrip("/")


class TestShrink:
    """Issue 35.1: a client may shrink its object after registering it; only the request that reads or writes
    it is refused, naming the tensor, the region and both sizes, and the region works again once regrown.
    (tritonclient's handles map the objects in this process: they are only touched while full size.)"""

    def test_a_shrunk_input_region_fails_its_request_alone(self, regions: Regions, engine) -> None:
        x = _x(1, seed=7)
        shm.set_shared_memory_region(regions.make("in", x.nbytes), [x])
        os.truncate(_object(regions, "in"), 100)
        message = _refused(lambda: regions.client.infer("tiny", [_input(regions, list(x.shape), "in", x.nbytes)]))
        assert message == (
            f"input 'input': region '{regions.name('in')}' was registered as {x.nbytes} bytes of "
            f"'{regions.key('in')}' (offset 0 + byte_size {x.nbytes}), but the object has shrunk to 100 bytes"
        )
        plain = regions.mod.InferInput("input", list(x.shape), "FP32")
        plain.set_data_from_numpy(x)
        np.testing.assert_allclose(  # the server and this connection are fine
            regions.client.infer("tiny", [plain]).as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6
        )
        os.truncate(_object(regions, "in"), x.nbytes)
        shm.set_shared_memory_region(regions.handles[-1], [x])
        result = regions.client.infer("tiny", [_input(regions, list(x.shape), "in", x.nbytes)])
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)

    def test_a_shrunk_output_region_fails_its_request_alone(self, regions: Regions, engine) -> None:
        x = _x(2, seed=8)
        shm.set_shared_memory_region(regions.make("in", x.nbytes), [x])
        out = regions.make("out", 4096 + 80, register=False)
        regions.client.register_system_shared_memory(regions.name("out"), regions.key("out"), 80, offset=4096)
        os.truncate(_object(regions, "out"), 4096)
        infer = lambda: regions.client.infer(  # noqa: E731
            "tiny", [_input(regions, list(x.shape), "in", x.nbytes)], outputs=[_output(regions, "out", 80)]
        )
        assert _refused(infer) == (
            f"output 'logits': region '{regions.name('out')}' was registered as 4176 bytes of "
            f"'{regions.key('out')}' (offset 4096 + byte_size 80), but the object has shrunk to 4096 bytes"
        )
        os.truncate(_object(regions, "out"), 4096 + 80)
        infer()
        got = shm.get_contents_as_numpy(out, np.float32, [2, 10], offset=4096)
        np.testing.assert_allclose(got, engine.run(x)["logits"], rtol=1e-5, atol=1e-6)


LONG = "r" * 128
LONG_WORDS = f"region name: got {LONG[:32]!r}... (128 bytes), expected 1 to 100 bytes of text"


class TestNames:
    """Issue 35.5: a name no region can have is refused in the register call's words on every call that names
    a region, without the server's temporary folder (registrations are files named by the name in hex)."""

    @pytest.mark.parametrize("call", ["register", "status", "unregister", "infer"])
    def test_names_over_100_bytes(self, regions: Regions, call: str) -> None:
        calls = {
            "register": lambda: regions.client.register_system_shared_memory(LONG, regions.key("in"), 64),
            "status": lambda: regions.client.get_system_shared_memory_status(LONG),
            "unregister": lambda: regions.client.unregister_system_shared_memory(LONG),
            "infer": lambda: regions.client.infer("tiny", [_input(regions, [1, 3, 32, 32], "", 12288)]),
        }
        if call == "infer":
            regions.tag = LONG[:-1]  # _input names f"{tag}-{region}": 128 bytes
        message = _refused(calls[call])
        assert message == ("input 'input': " if call == "infer" else "") + LONG_WORDS
        assert tempfile.gettempdir() not in message and "amdinfer-shm-" not in message

    def test_100_bytes_is_a_name(self, regions: Regions) -> None:
        regions.make("in", 64, register=False)
        name = "n" * 100
        regions.client.register_system_shared_memory(name, regions.key("in"), 64)
        status = regions.client.get_system_shared_memory_status(name)
        assert (status[0]["name"] if isinstance(status, list) else next(iter(status.regions))) == name
        regions.client.unregister_system_shared_memory(name)


READ_WHILE_SHRINKING = """
import os, sys, threading
import numpy as np
from multiprocessing import shared_memory
from amdinfer.errors import InputError
from amdinfer.serve._shm import SharedMemoryRegistry

size = 1 << 16
block = shared_memory.SharedMemory(create=True, size=size)
registry = SharedMemoryRegistry()
registry.register("r", "/" + block.name, 0, size)
done = threading.Event()

def shrink():
    fd = os.open("/dev/shm/" + block.name, os.O_RDWR)
    while not done.is_set():
        os.ftruncate(fd, 0)
        os.ftruncate(fd, size)
    os.close(fd)

thread = threading.Thread(target=shrink)
thread.start()
counts = {"ok": 0, "refused": 0}
try:
    for i in range(int(sys.argv[1])):
        try:
            if i % 2:
                int(np.frombuffer(registry.read("input 'x'", "r", 0, size), np.uint8).sum())  # touch every byte
            else:
                registry.write("output 'y'", "r", 0, size, np.ones(size // 4, np.float32))
            counts["ok"] += 1
        except InputError as exc:
            assert "region 'r' was registered as 65536 bytes" in str(exc), exc
            counts["refused"] += 1
finally:
    done.set()
    thread.join()
registry.close()
block.close()
block.unlink()
print(counts["ok"], counts["refused"])
"""


def test_reads_and_writes_while_the_object_shrinks_never_fault(tmp_path: Path) -> None:
    """The registry alone, in a subprocess (a SIGBUS kills only it): 2,000 reads and writes of a region whose
    object a thread truncates to 0 and back without pause; each one succeeds or is refused, none faults."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", READ_WHILE_SHRINKING, "2000"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    ok, refused = map(int, proc.stdout.split())
    assert ok + refused == 2000 and refused > 0, proc.stdout


class TestRegistry:
    def test_double_registration_is_refused(self, regions: Regions) -> None:
        regions.make("in", 64)
        message = _refused(
            lambda: regions.client.register_system_shared_memory(regions.name("in"), regions.key("in"), 64)
        )
        assert f"region '{regions.name('in')}': already registered" in message

    def test_status_lists_then_unregister_one_then_all(self, regions: Regions) -> None:
        regions.make("a", 64)
        regions.make("b", 8192, offset=4096, size=1024)
        status = regions.client.get_system_shared_memory_status()
        if isinstance(status, list):  # REST: a JSON list
            listed = {s["name"]: (s["key"], s["offset"], s["byte_size"]) for s in status}
        else:  # gRPC: SystemSharedMemoryStatusResponse, regions by name
            listed = {k: (v.key, v.offset, v.byte_size) for k, v in status.regions.items()}
        assert listed == {
            regions.name("a"): (regions.key("a"), 0, 64),
            regions.name("b"): (regions.key("b"), 4096, 1024),
        }
        one = regions.client.get_system_shared_memory_status(regions.name("a"))
        assert (one[0]["name"] if isinstance(one, list) else next(iter(one.regions))) == regions.name("a")
        regions.client.unregister_system_shared_memory(regions.name("a"))
        _refused(lambda: regions.client.get_system_shared_memory_status(regions.name("a")))
        regions.client.unregister_system_shared_memory()
        status = regions.client.get_system_shared_memory_status()
        assert (status if isinstance(status, list) else list(status.regions)) == []
        message = _refused(lambda: regions.client.infer("tiny", [_input(regions, [1, 3, 32, 32], "b", 12288)]))
        assert "is not registered" in message

    def test_server_metadata_lists_the_extension(self, server: RunningServer) -> None:
        for extension in ("system_shared_memory", "cuda_shared_memory"):
            assert extension in client(server, "http").get_server_metadata()["extensions"]
            assert extension in client(server, "grpc").get_server_metadata().extensions


class TestLog:
    """Issue 22: one start line, client errors in one line without a traceback, no deprecation warnings."""

    def test_start_line_names_backend_providers_precision_devices_and_addresses(self, server: RunningServer) -> None:
        log = server.log.read_text()
        lines = [line for line in log.splitlines() if "amdinfer.serve: serving" in line]
        assert len(lines) == 1, log
        line = lines[0]
        for part in ("model 'tiny' on ort (CPUExecutionProvider)", "fp32", "devices cpu", "batches of up to 8 rows",
                     f"REST http://{server.http}", f"gRPC {server.grpc}", "system shared memory on"):  # fmt: skip
            assert part in line, line
        # KServe's and uvicorn's own start lines are not there at the default level
        assert "Registering model" not in log and "Started server process" not in log

    def test_client_errors_are_one_line_without_traceback(self, server: RunningServer) -> None:
        bad = httpclient.InferInput("input", [1, 3, 32, 31], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3, 32, 31), np.float32))
        _refused(lambda: client(server, "http").infer("tiny", [bad]))
        with pytest.raises(InferenceServerException) as info:
            client(server, "http").get_model_metadata("nope")
        assert info.value.status() == "404"
        with pytest.raises(InferenceServerException):
            client(server, "grpc").get_model_metadata("nope")
        log = server.log.read_text()
        assert "Traceback" not in log, log
        assert re.search(r"INFO amdinfer\.serve: 400 POST /v2/models/tiny/infer: input 'input': got shape", log), log
        assert re.search(r"INFO amdinfer\.serve: 404 GET /v2/models/nope: ", log), log

    def test_no_deprecation_warnings_at_start_or_per_request(self, server: RunningServer) -> None:
        """The server runs with DeprecationWarning and UserWarning (FastAPI's) always shown: none came."""
        for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/tiny", "/v2/models/tiny/ready", "/v2"):
            with urllib.request.urlopen(f"http://{server.http}{path}", timeout=10) as r:
                assert r.status == 200
        x = _x(1, seed=0)
        tensor = httpclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=False)
        client(server, "http").infer("tiny", [tensor], outputs=[httpclient.InferRequestedOutput("logits", False)])
        log = server.log.read_text()
        assert "Warning" not in log and "deprecated" not in log.lower(), log


def test_existing_logging_configuration_is_kept(tiny_path: Path, tmp_path: Path) -> None:
    """A process that configured logging before calling the CLI keeps its format (the start line uses it)."""
    http, grpc = free_port(), free_port()
    code = (
        "import logging, sys; logging.basicConfig(format='CUSTOM %(name)s | %(message)s', level=logging.INFO); "
        "from amdinfer.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["-c", code, "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu", "--no-warmup"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc)]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as s:
        assert s.stop() == 0
    log = (tmp_path / "log.txt").read_text()
    assert re.search(r"^CUSTOM amdinfer\.serve \| serving model 'tiny' on ort", log, re.MULTILINE), log


def test_regions_are_shared_by_the_processes_of_one_server(tiny_path: Path, tmp_path: Path, engine) -> None:
    """--devices 0,1: one process per device on shared ports. A region registered through one connection is
    used by requests that land on either process, and an unregistration is seen by both."""
    from .test_serve import _wait_for_every_process, metrics, sample

    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu", "--no-warmup"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--devices", "0,1", "--max-batch-size", "1"]
    with running_server(argv, http, grpc, tmp_path / "log.txt") as server:
        _wait_for_every_process(server, [http, grpc], processes=2)
        regions = Regions(server, "grpc")
        try:
            xs = _x(64, seed=11)
            shm.set_shared_memory_region(regions.make("in", xs.nbytes), [xs])
            out = regions.make("out", 64 * 40)
            served = 0
            for i in range(64):  # a fresh connection each: the kernel spreads them over the two processes
                _infer_row_on_fresh_connection(server, regions, i, row_nbytes=xs[:1].nbytes)
                np.testing.assert_allclose(
                    shm.get_contents_as_numpy(out, np.float32, [1, 10], offset=i * 40),
                    engine.run(xs[i : i + 1])["logits"],
                    rtol=1e-5,
                    atol=1e-6,
                )
                served = i + 1
                values = metrics(server)
                if all(sample(values, "amdinfer_batch_size_count", worker=w) > 0 for w in ("device0", "device1")):
                    break
            assert all(
                sample(metrics(server), "amdinfer_batch_size_count", worker=w) > 0 for w in ("device0", "device1")
            )
            regions.client.unregister_system_shared_memory()
            for _ in range(max(served, 8)):
                fresh = httpclient.InferenceServerClient(server.http)
                request = [_input(_http(regions), [1, 3, 32, 32], "in", 12288)]
                message = _refused(lambda c=fresh, r=request: c.infer("tiny", r))
                assert "is not registered" in message
                fresh.close()
        finally:
            regions.close()
        assert server.stop() == 0


def _infer_row_on_fresh_connection(server: RunningServer, regions: Regions, i: int, row_nbytes: int) -> None:
    """Row ``i`` of region "in" through a new REST connection (so the kernel picks the server process), its
    logits written to row ``i`` of region "out"."""
    fresh = httpclient.InferenceServerClient(server.http)
    try:
        fresh.infer(
            "tiny",
            [_input(_http(regions), [1, 3, 32, 32], "in", row_nbytes, offset=i * row_nbytes)],
            outputs=[_output(_http(regions), "out", 40, offset=i * 40)],
        )
    finally:
        fresh.close()


def _http(regions: Regions) -> Regions:
    """The same regions, addressed through the REST client's tensor classes."""
    view = Regions.__new__(Regions)
    view.__dict__.update(regions.__dict__, mod=httpclient)
    return view
