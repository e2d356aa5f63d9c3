"""Triton's CUDA shared-memory extension over REST and gRPC, driven by tritonclient's own clients.

The server runs with ``AMDINFER_DEVICE_IPC=host``, the test seam of ``amdinfer/serve/_cuda_shm.py``: a
64-byte "handle" (``host_handle``) names a POSIX shared-memory object, which the stand-in opener maps in
place of device memory. So the whole request path runs without a GPU: register with a raw handle, status,
unregister, the input copied out of the region into the batch, the output copied into the region.
``tritonclient.utils.cuda_shared_memory`` itself needs cuda-python and a GPU, so the requests are built with
the clients' ``register_cuda_shared_memory`` and ``set_shared_memory``; ``benchmarks/serving_cuda_shm.py``
does the same with real device memory on a GPU. The truth is ``engine.run`` in this process.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)
grpcclient = pytest.importorskip("tritonclient.grpc", reason="needs tritonclient[grpc]: run `nox -s serve`")
httpclient = pytest.importorskip("tritonclient.http", reason="needs tritonclient[http]: run `nox -s serve`")

from tritonclient.utils import InferenceServerException  # noqa: E402

from amdinfer.errors import InputError  # noqa: E402
from amdinfer.serve._cuda_shm import IPC_ENV, RuntimeIpc, host_handle  # noqa: E402

from .conftest import RunningServer, assert_output_in_region, free_port, running_server  # noqa: E402

CLIENTS = {"http": httpclient, "grpc": grpcclient}
ROW = 3 * 32 * 32 * 4  # one input row of the tiny CNN, float32
NO_RUNTIME = "CUDA shared memory needs the CUDA runtime (libcudart) or the HIP runtime (libamdhip64)"


def _serve(tiny_path: Path, log: Path, ipc: str) -> Iterator[RunningServer]:
    http, grpc = free_port(), free_port()
    argv = ["-m", "amdinfer", "serve", str(tiny_path), "--name", "tiny", "--providers", "cpu", "--no-warmup"]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--max-batch-size", "8", "--max-delay-ms", "5"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv(IPC_ENV, ipc)
        with running_server(argv, http, grpc, log) as s:
            yield s
            assert s.stop() == 0, log.read_text()


@pytest.fixture(scope="module")
def server(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from _serve(tiny_path, tmp_path_factory.mktemp("cuda_shm") / "log.txt", "host")


class Regions:
    """ "Device" memory for the stand-in opener: POSIX shared-memory blocks, registered as CUDA regions."""

    def __init__(self, server: RunningServer, protocol: str) -> None:
        self.mod = CLIENTS[protocol]
        self.client = self.mod.InferenceServerClient(server.http if protocol == "http" else server.grpc)
        self.tag = secrets.token_hex(4)
        self.blocks: dict[str, shared_memory.SharedMemory] = {}

    def name(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def make(self, name: str, byte_size: int, *, register: bool = True) -> shared_memory.SharedMemory:
        block = self.blocks[name] = shared_memory.SharedMemory(create=True, size=byte_size)
        if register:
            self.register(name, self.handle(name), 0, byte_size)
        return block

    def handle(self, name: str) -> bytes:
        return base64.b64encode(host_handle(self.blocks[name].name))  # as cuda_shared_memory.get_raw_handle

    def register(self, name: str, b64: bytes, device_id: int, byte_size: int) -> None:
        self.client.register_cuda_shared_memory(self.name(name), b64, device_id, byte_size)

    def array(self, name: str, shape: list[int], offset: int = 0) -> np.ndarray:
        return np.ndarray(shape, np.float32, buffer=self.blocks[name].buf, offset=offset).copy()

    def input(self, shape: list[int], region: str, size: int, offset: int = 0):
        tensor = self.mod.InferInput("input", shape, "FP32")
        tensor.set_shared_memory(self.name(region), size, offset=offset)
        return tensor

    def output(self, region: str, size: int, offset: int = 0):
        out = self.mod.InferRequestedOutput("logits")
        out.set_shared_memory(self.name(region), size, offset=offset)
        return out

    def close(self) -> None:
        self.client.unregister_cuda_shared_memory()
        self.client.close()
        for block in self.blocks.values():
            block.close()
            block.unlink()


@pytest.fixture(params=sorted(CLIENTS))
def regions(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[Regions]:
    r = Regions(server, request.param)
    yield r
    r.close()


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 3, 32, 32), dtype=np.float32)


def _put(block: shared_memory.SharedMemory, x: np.ndarray, offset: int = 0) -> None:
    block.buf[offset : offset + x.nbytes] = x.tobytes()


def _refused(call) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), (info.value.status(), info.value.message())
    return str(info.value.message())


def _listed(status) -> dict[str, tuple[int, int]]:
    if isinstance(status, list):  # REST: a JSON list
        return {s["name"]: (s["device_id"], s["byte_size"]) for s in status}
    return {k: (v.device_id, v.byte_size) for k, v in status.regions.items()}  # gRPC: the regions map


class TestInfer:
    def test_input_and_output_in_cuda_regions_equal_engine_run(self, regions: Regions, engine) -> None:
        x = _x(3, seed=1)
        want = engine.run(x)["logits"]
        _put(regions.make("in", x.nbytes), x)
        regions.make("out", want.nbytes)
        result = regions.client.infer(
            "tiny", [regions.input([3, 3, 32, 32], "in", x.nbytes)], outputs=[regions.output("out", want.nbytes)]
        )
        np.testing.assert_allclose(regions.array("out", [3, 10]), want, rtol=1e-5, atol=1e-6)
        assert_output_in_region(result, regions.mod is httpclient, regions.name("out"), want.nbytes)

    def test_tensors_at_offsets_of_one_region(self, regions: Regions, engine) -> None:
        a, b = _x(1, seed=2), _x(2, seed=3)
        both = regions.make("in", a.nbytes + b.nbytes)
        _put(both, a)
        _put(both, b, offset=a.nbytes)
        regions.make("out", 64 + 80)
        regions.client.infer("tiny", [regions.input([1, 3, 32, 32], "in", ROW)], outputs=[regions.output("out", 40)])
        regions.client.infer(
            "tiny",
            [regions.input([2, 3, 32, 32], "in", b.nbytes, offset=a.nbytes)],
            outputs=[regions.output("out", 80, offset=64)],
        )
        np.testing.assert_allclose(regions.array("out", [1, 10]), engine.run(a)["logits"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            regions.array("out", [2, 10], offset=64), engine.run(b)["logits"], rtol=1e-5, atol=1e-6
        )
        assert bytes(regions.blocks["out"].buf[40:64]) == b"\0" * 24  # nothing written between the two

    def test_cuda_input_output_in_the_response(self, regions: Regions, engine) -> None:
        x = _x(2, seed=4)
        _put(regions.make("in", x.nbytes), x)
        result = regions.client.infer("tiny", [regions.input([2, 3, 32, 32], "in", x.nbytes)])
        np.testing.assert_allclose(result.as_numpy("logits"), engine.run(x)["logits"], rtol=1e-5, atol=1e-6)


class TestBounds:
    def test_input_past_the_region(self, regions: Regions) -> None:
        regions.make("in", ROW)
        message = _refused(lambda: regions.client.infer("tiny", [regions.input([1, 3, 32, 32], "in", ROW, offset=4)]))
        assert (
            f"input 'input': offset 4 + byte_size {ROW} = {ROW + 4} runs past region '{regions.name('in')}'" in message
        )

    def test_output_window_past_the_region(self, regions: Regions) -> None:
        _put(regions.make("in", ROW), _x(1, seed=0))
        regions.make("out", 40)
        message = _refused(
            lambda: regions.client.infer(
                "tiny", [regions.input([1, 3, 32, 32], "in", ROW)], outputs=[regions.output("out", 40, offset=8)]
            )
        )
        assert "output 'logits': offset 8 + byte_size 40 = 48 runs past region" in message

    def test_output_region_too_small(self, regions: Regions) -> None:
        _put(regions.make("in", 2 * ROW), _x(2, seed=0))
        regions.make("out", 40)
        message = _refused(
            lambda: regions.client.infer(
                "tiny", [regions.input([2, 3, 32, 32], "in", 2 * ROW)], outputs=[regions.output("out", 40)]
            )
        )
        assert "output 'logits': got 80 bytes" in message and "shared_memory_byte_size is 40" in message

    def test_unknown_region(self, regions: Regions) -> None:
        message = _refused(lambda: regions.client.infer("tiny", [regions.input([1, 3, 32, 32], "nope", ROW)]))
        assert f"shared-memory region '{regions.name('nope')}' is not registered" in message


class TestRegister:
    def test_status_lists_then_unregister_one_then_all(self, regions: Regions, server: RunningServer) -> None:
        regions.make("a", 64)
        regions.make("b", 2 * ROW)
        assert _listed(regions.client.get_cuda_shared_memory_status()) == {
            regions.name("a"): (0, 64),
            regions.name("b"): (0, 2 * ROW),
        }
        assert _listed(regions.client.get_cuda_shared_memory_status(regions.name("a"))) == {regions.name("a"): (0, 64)}
        system = regions.client.get_system_shared_memory_status()  # the kinds are listed apart
        assert (system if isinstance(system, list) else list(system.regions)) == []
        regions.client.unregister_system_shared_memory()  # leaves CUDA regions alone
        regions.client.unregister_cuda_shared_memory(regions.name("a"))
        _refused(lambda: regions.client.get_cuda_shared_memory_status(regions.name("a")))
        assert list(_listed(regions.client.get_cuda_shared_memory_status())) == [regions.name("b")]
        regions.client.unregister_cuda_shared_memory()
        assert _listed(regions.client.get_cuda_shared_memory_status()) == {}
        message = _refused(lambda: regions.client.infer("tiny", [regions.input([1, 3, 32, 32], "b", ROW)]))
        assert "is not registered" in message

    @pytest.mark.parametrize(
        ("handle", "device_id", "byte_size", "expected"),
        [
            (base64.b64encode(bytes(10)), 0, 64, "raw_handle has 10 bytes, expected the 64 bytes of a cudaIpcMem"),
            ("good", 1, 64, "device_id 1 is not a device of this server"),
            ("good", -1, 64, "got device_id=-1, expected an int >= 0"),
            ("good", 0, 0, "got byte_size=0, expected an int >= 1"),
            ("good", 0, 128, "byte_size 128 is larger than the memory of raw_handle"),
            (base64.b64encode(b"x" * 64), 0, 64, "raw_handle is not a handle this server can open"),
        ],
    )  # fmt: skip
    def test_bad_registrations(self, regions: Regions, handle, device_id: int, byte_size: int, expected: str) -> None:
        regions.make("g", 64, register=False)
        b64 = regions.handle("g") if handle == "good" else handle
        message = _refused(lambda: regions.register("g", b64, device_id, byte_size))
        assert f"CUDA shared-memory region '{regions.name('g')}'" in message and expected in message
        assert _listed(regions.client.get_cuda_shared_memory_status()) == {}

    def test_a_name_is_one_region_of_either_kind(self, regions: Regions) -> None:
        regions.make("g", 64)
        message = _refused(lambda: regions.register("g", regions.handle("g"), 0, 64))
        assert f"region '{regions.name('g')}': already registered (CUDA, device 0)" in message
        key = "/" + regions.blocks["g"].name
        message = _refused(lambda: regions.client.register_system_shared_memory(regions.name("g"), key, 64))
        assert "already registered (CUDA, device 0)" in message
        _refused(lambda: regions.client.get_system_shared_memory_status(regions.name("g")))


def _post(server: RunningServer, path: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{server.http}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"raw_handle": {"b64": "not base64!"}, "device_id": 0, "byte_size": 64}, "raw_handle.b64 is not base64"),
        ({"raw_handle": "AAAA", "device_id": 0, "byte_size": 64}, 'expected {"b64": "<base64 text>"}'),
        ({"raw_handle": {"b64": "AAAA"}, "byte_size": 64}, 'expected a JSON object with "raw_handle", "device_id"'),
        ({"raw_handle": {"b64": base64.b64encode(bytes(64)).decode()}, "device_id": 0, "byte_size": -8},
         "got byte_size=-8, expected an int >= 1"),
        ({"raw_handle": {"b64": base64.b64encode(bytes(64)).decode()}, "device_id": "0", "byte_size": 8},
         "got device_id='0', expected an int >= 0"),
        ([1, 2], "got a JSON list, expected an object"),
    ],
)  # fmt: skip
def test_rest_register_payloads(server: RunningServer, body, expected: str) -> None:
    status, text = _post(server, "/v2/cudasharedmemory/region/g/register", json.dumps(body).encode())
    assert status == 400 and expected in json.loads(text)["error"], text


def _runtime_here() -> bool:
    for kind in ("cuda", "hip"):
        try:
            RuntimeIpc(kind)
            return True
        except InputError:
            pass
    return False


def test_without_a_gpu_runtime_register_is_refused_clearly(tiny_path: Path, tmp_path: Path) -> None:
    if _runtime_here():
        pytest.skip("a GPU runtime is usable here: benchmarks/serving_cuda_shm.py checks that case")
    for s in _serve(tiny_path, tmp_path / "log.txt", "auto"):
        for mod, address in ((httpclient, s.http), (grpcclient, s.grpc)):
            client = mod.InferenceServerClient(address)
            message = _refused(lambda c=client: c.register_cuda_shared_memory("g", base64.b64encode(bytes(64)), 0, 64))
            assert message.startswith(f"{NO_RUNTIME} and a GPU in the server; none is usable here (the server's log"), (
                message
            )
            assert "libcudart" in message and "libamdhip64" in message
            assert "/" not in message, message  # the library paths tried are the server's files: only its log has them
            assert _listed(client.get_cuda_shared_memory_status()) == {}
            client.close()
        log = s.log.read_text()
        assert "Traceback" not in log
        assert "CUDA runtime (libcudart) is not usable; tried " in log, log  # what was tried, for the operator


def test_the_ipc_handle_reaches_the_runtime_whole() -> None:
    """All 64 handle bytes, NULs included, are passed by value (the H200 refused a handle cut at its first NUL)."""
    import ctypes

    from amdinfer.serve._cuda_shm import RuntimeIpc

    handle = bytes([7, 0, 0, 9]) + bytes(range(60))
    seen: list[bytes] = []

    class FakeRuntime:  # the calls RuntimeIpc.open makes, recording the handle it passes
        def cudaSetDevice(self, device: int) -> int:
            return 0

        def cudaIpcOpenMemHandle(self, ptr, struct, flags) -> int:
            seen.append(bytes(memoryview(struct)))
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_void_p))[0] = 4096
            return 0

    ipc = object.__new__(RuntimeIpc)
    ipc.name, ipc._p, ipc.path, ipc._lib = "CUDA runtime", "cuda", "fake", FakeRuntime()
    memory = ipc.open("region 'r'", handle, 0, 64)
    assert seen == [handle]
    assert memory.ptr == 4096


def test_a_byte_size_past_the_device_allocation_is_refused_at_register() -> None:
    """A region larger than the allocation its handle exports is refused when it is opened (and the handle
    closed again), from the driver's address range of the opened pointer, so no copy ever runs past it.

    The runtime here is a fake (HIP names, so no libcuda is asked). On an H200 (driver 580, libcudart 13,
    2026-12-01) the driver reported a 1 MiB cudaMalloc as 1,048,576 bytes, a 4 MiB registration of it was
    refused with this message, and a copy run past the end without the check was cudaMemcpy's error 1
    (invalid argument, not sticky: the next copy worked)."""
    import ctypes

    from amdinfer.serve._cuda_shm import RuntimeIpc

    closed: list[int] = []

    class FakeRuntime:
        def hipSetDevice(self, device: int) -> int:
            return 0

        def hipIpcOpenMemHandle(self, ptr, struct, flags) -> int:
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_void_p))[0] = 0x10000 + 256  # 256 bytes into an allocation
            return 0

        def hipMemGetAddressRange(self, base, size, ptr) -> int:
            assert ptr.value == 0x10000 + 256
            ctypes.cast(base, ctypes.POINTER(ctypes.c_uint64))[0] = 0x10000
            ctypes.cast(size, ctypes.POINTER(ctypes.c_size_t))[0] = 4096
            return 0

        def hipIpcCloseMemHandle(self, ptr) -> int:
            closed.append(ptr.value)
            return 0

    ipc = object.__new__(RuntimeIpc)
    ipc.name, ipc._p, ipc.path, ipc._lib = "HIP runtime", "hip", "fake", FakeRuntime()
    assert ipc.open("region 'r'", bytes(64), 0, 4096 - 256).ptr == 0x10000 + 256
    with pytest.raises(InputError) as info:
        ipc.open("region 'r'", bytes(64), 0, 4096 - 255)
    assert str(info.value) == (
        "region 'r': byte_size 3841 is larger than the device allocation of raw_handle (3840 bytes)"
    )
    assert closed == [0x10000 + 256]
