"""Serving benchmarks: `amdinfer serve` under load over REST and gRPC, and the multi-GPU proof.

Three commands:

* ``cpu``: requests/s and p50/p99 latency with and without dynamic batching at 1 / 8 / 32 / 64 concurrent
  clients, REST vs gRPC, for a small CNN (1x3x32x32) and ResNet-50 (1x3x224x224), on the CPU provider.
* ``decode``: the server's cost of one 640x640x3 uint8 binary tensor: KServe's own REST decoder against
  amdinfer's (``decode_rest`` + ``to_numpy``), and end-to-end latency of a trivial model with that input.
* ``gpu``: on a machine with two GPUs (ONNX Runtime CUDA EP, PyTorch): (1) a torch tensor on ``cuda:1``
  fed to the engine on device 1 while device 0 is current (DLPack export under the tensor's device);
  (2) two engines with CUDA graphs run from two threads at once (the capture gate), against each one's
  own results; (3) ResNet-50 fp16 (uint8 NHWC in) engine rate on host batches of 64, against the rate
  served with batching over gRPC and gRPC with system shared memory, on each ``--device-sets`` entry (``0`` vs
  ``0,1``), and the same for the trained YOLOv8n of ``--yolo PATH`` (issue 25).

* ``gpu1``: one GPU, one run (``benchmarks/serving_h200.sh`` on the H200): the engine's own rate
  (``engine.run`` on host batches at each ``--batch-buckets`` size and 64; the YOLO engine and its JPEG
  pipeline; the decoder alone), then ``amdinfer serve`` on device 0 with 16 / 64 clients over gRPC, REST
  binary, system shared memory (``grpc-shm``/``rest-shm``: each client registers its own input and output
  regions over Triton's REST routes and writes its input into the region before every request) and JPEG
  ``BYTES`` (``--recipe classify|yolo``): ResNet-50 fp16 (uint8 NHWC in), the same with
  ``--verify-sample 0.01`` (the canary's cost), with ``--workers-per-device N`` vs 1 (when ``serve --help``
  lists the flag), and the YOLO of ``--yolo PATH``. Each served row gives items/s over the engine's rate
  (``ratio``; ``ratio_at_served_batch``: over the engine at the bucket of the served mean batch) and the
  client processes' CPU use (``client_cpu``, 1.0 = a core each); a no-op model with the same requests gives
  the ceiling of clients plus server. ``--cpu-smoke`` runs every row on the CPU with a tiny CNN.

* ``defaults`` (issue 38): each served row with ``amdinfer serve``'s defaults (no batching flag: the server derives
  them from the model and the device) and with the docs' ``--max-batch-size 64 --max-delay-ms 2 --batch-buckets
  8,16,32,64`` side by side, 64 gRPC clients (a connection each) x 8 images, over the engine alone in the same run
  (host batches of 64; with torch, device tensors too): the bare ResNet-50 fp16 (uint8 NHWC in), ``--recipe
  classify`` on 640x480 JPEG files, and ``--recipe yolo`` on JPEG pages with ``--yolo PATH``. Models by path
  (``--model``, ``--classifier``; default: ResNet-50 with random weights from ``amdinfer.testing.models``, no
  download); ``--out DIR`` gets ``serving_defaults.md`` and ``serving_defaults.json``; each row keeps the
  server's start line (what it chose and why).

* ``stream``: Triton's ``ModelStreamInfer`` (one stream, ``W`` requests in flight) against unary ``ModelInfer``
  calls (``W`` callers) on one server, the same model and ``--requests`` requests each way, for each window ``W``
  of ``--clients``, and the ratio of their requests/s (``benchmarks/serving_stream.py``): ``--models tiny``
  (or ``resnet50``), ``--provider`` (``cpu`` here, ``cuda`` or ``migraphx`` on a GPU), ``--request-items``.

The load generator is asyncio over ``grpc.aio`` (KServe's v2 stubs) and ``aiohttp`` (Triton's binary
tensor extension), in ``--client-procs`` processes (spawned once per run); the server runs in a subprocess
(``python -m amdinfer serve``). Every result row is printed as Markdown and, with ``--out DIR`` (or
``$OUT``), appended to ``serving.jsonl`` there.

    python benchmarks/serving.py cpu --seconds 3
    python benchmarks/serving.py decode
    python benchmarks/serving.py gpu --out /tmp/out          # two GPUs, onnxruntime-gpu, torch
    python benchmarks/serving.py gpu1 --yolo yolov8n.onnx --client-procs 4 --out /tmp/out   # one GPU
    python benchmarks/serving.py gpu1 --cpu-smoke --seconds 1 --gpu-clients 2 4 --request-items 2
    python benchmarks/serving.py defaults --client-procs 4 --out /tmp/out [--yolo yolov8n.onnx]   # one GPU, ~4 min
    python benchmarks/serving.py defaults --cpu-smoke --seconds 1 --clients 4 --request-items 2
    python benchmarks/serving.py stream --provider cpu --models tiny --request-items 1 --clients 1 8 64 --requests 2000
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import amdinfer
from amdinfer.testing import models

OUT: Path | None = None
ROWS: list[dict[str, Any]] = []


def record(row: dict[str, Any]) -> None:
    ROWS.append(row)
    print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if OUT is not None:
        with open(OUT / "serving.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------- models
def resnet50_uint8() -> onnx.ModelProto:
    """ResNet-50 taking ``uint8 (N, 224, 224, 3)`` images: Cast, NHWC->NCHW and 1/255 fused in front."""
    return uint8_front(models.resnet50(), 224)


def trivial_uint8(size: int = 640) -> onnx.ModelProto:
    """``uint8 (N, size, size, 3)`` -> per-image mean (float): the model costs next to nothing."""
    x = helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", size, size, 3])
    y = helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["N", 1, 1, 1])
    nodes = [
        helper.make_node("Cast", ["images"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f"], ["mean"], keepdims=1, axes=[1, 2, 3]),
    ]
    return helper.make_model(helper.make_graph(nodes, "trivial", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


# ---------------------------------------------------------------------------------------------- server
class ServerProcess:
    """``python -m amdinfer serve`` in a subprocess, ready once ``/v2/health/ready`` answers."""

    def __init__(
        self,
        model_path: Path,
        name: str,
        *,
        providers: str | None,
        precision: str,
        devices: str,
        max_batch_size: int | None,
        max_delay_ms: float | None,
        preload_torch: bool = False,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.http, self.grpc = free_port(), free_port()
        args = ["serve", str(model_path), "--name", name, "--precision", precision, "--devices", devices]
        # None: the flag is not given (the server's own default)
        for flag, value in (("--providers", providers), ("--max-batch-size", max_batch_size),
                            ("--max-delay-ms", max_delay_ms)):  # fmt: skip
            if value is not None:
                args += [flag, str(value)]
        args += ["--http-port", str(self.http), "--grpc-port", str(self.grpc), *extra]
        pre = "import torch; " if preload_torch else ""
        code = pre + "import sys; from amdinfer.cli import main; sys.exit(main(sys.argv[1:]))"
        self.log = tempfile.NamedTemporaryFile(prefix="amdinfer-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {Path(self.log.name).read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("server not ready after 600 s") from None
                time.sleep(0.2)

    def cpu_seconds(self) -> dict[int, float]:
        """CPU seconds (user + system) so far of each process under the server (the supervisor excluded when it
        has children: they are the server processes), from /proc; empty where /proc is missing."""
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        stats: dict[int, tuple[int, float]] = {}
        for entry in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = entry.read_text()
            except OSError:
                continue
            fields = text.rsplit(")", 1)[1].split()
            stats[int(entry.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
        tree, frontier = {self.proc.pid}, [self.proc.pid]
        while frontier:
            parent = frontier.pop()
            for pid, (ppid, _) in stats.items():
                if ppid == parent and pid not in tree:
                    tree.add(pid)
                    frontier.append(pid)
        children = tree - {self.proc.pid}
        servers = {pid for pid in children if stats[pid][0] == self.proc.pid} or {self.proc.pid}
        return {pid: stats[pid][1] for pid in sorted(servers) if pid in stats}

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics", timeout=10) as r:
            return r.read().decode()

    def mean_batch(self, model: str) -> float:
        total = count = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("amdinfer_batch_size_sum") and f'model="{model}"' in line:
                total += float(line.rsplit(" ", 1)[1])
            if line.startswith("amdinfer_batch_size_count") and f'model="{model}"' in line:
                count += float(line.rsplit(" ", 1)[1])
        return total / count if count else float("nan")

    def start_line(self) -> str:
        """What the server logged it serves with (the start lines of its processes, the first one)."""
        text = Path(self.log.name).read_text(errors="replace")
        lines = [ln.split("amdinfer.serve: ", 1)[1] for ln in text.splitlines() if "amdinfer.serve: serving" in ln]
        return lines[0] if lines else ""

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------- clients
_DTYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.uint8): "UINT8"}
_DTYPE_SIZE = {"FP32": 4, "FP16": 2, "UINT8": 1, "INT8": 1, "INT32": 4, "INT64": 8, "FP64": 8, "BOOL": 1}
_GRPC_OPTS = [("grpc.max_send_message_length", 1 << 30), ("grpc.max_receive_message_length", 1 << 30)]


class Payload:
    """One request's input: a tensor (``np.ndarray``) or a list of encoded files (``BYTES``), as raw bytes.

    ``outputs`` (name, bytes) are what a shared-memory request asks to have written into its output region.
    """

    def __init__(self, name: str, x: Any, outputs: tuple[tuple[str, int], ...] = ()) -> None:
        self.name, self.outputs = name, outputs
        if isinstance(x, np.ndarray):
            self.datatype, self.shape, self.raw = _DTYPES[x.dtype], list(x.shape), x.tobytes()
        else:  # encoded files: Triton's BYTES serialization, each element a 4-byte little-endian length + bytes
            self.datatype, self.shape = "BYTES", [len(x)]
            self.raw = b"".join(len(b).to_bytes(4, "little") + bytes(b) for b in x)
        self.items = self.shape[0]


async def _shm_regions(address: str, p: Payload, tag: str) -> tuple[Any, Any, list[str]]:
    """A client's own input and output regions in /dev/shm, registered over REST (Triton's routes)."""
    from multiprocessing import shared_memory

    import aiohttp

    inp = shared_memory.SharedMemory(create=True, size=len(p.raw))
    out_size = max(1, sum(n for _, n in p.outputs))
    out = shared_memory.SharedMemory(create=True, size=out_size)
    names = [f"in-{tag}", f"out-{tag}"]
    async with aiohttp.ClientSession() as session:
        for name, seg, size in ((names[0], inp, len(p.raw)), (names[1], out, out_size)):
            body = {"key": "/" + seg.name, "offset": 0, "byte_size": size}
            async with session.post(f"http://{address}/v2/systemsharedmemory/region/{name}/register", json=body) as r:
                if r.status != 200:
                    raise RuntimeError(f"register {name}: {r.status} {await r.text()}")
    return inp, out, names


async def _shm_release(address: str, regions: tuple[Any, Any, list[str]]) -> None:
    import aiohttp

    inp, out, names = regions
    async with aiohttp.ClientSession() as session:
        for name in names:
            async with session.post(f"http://{address}/v2/systemsharedmemory/region/{name}/unregister") as r:
                await r.read()
    for seg in (inp, out):
        seg.close()
        seg.unlink()


async def _client_grpc(
    address: str,
    model: str,
    p: Payload,
    stop_at: float,
    lat: list,
    shm: tuple[Any, Any, list[str]] | None,
    conn_per_client: bool = False,
) -> int:
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pbg

    Param = pb.InferParameter
    options = [*_GRPC_OPTS, ("grpc.use_local_subchannel_pool", 1)] if conn_per_client else _GRPC_OPTS
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        tensor = pb.ModelInferRequest.InferInputTensor(name=p.name, datatype=p.datatype, shape=p.shape)
        if shm is None:
            request = pb.ModelInferRequest(model_name=model, inputs=[tensor], raw_input_contents=[p.raw])
        else:
            _, _, (in_name, out_name) = shm
            tensor.parameters["shared_memory_region"].CopyFrom(Param(string_param=in_name))
            tensor.parameters["shared_memory_byte_size"].CopyFrom(Param(int64_param=len(p.raw)))
            outs, offset = [], 0
            for name, size in p.outputs:
                o = pb.ModelInferRequest.InferRequestedOutputTensor(name=name)
                o.parameters["shared_memory_region"].CopyFrom(Param(string_param=out_name))
                o.parameters["shared_memory_byte_size"].CopyFrom(Param(int64_param=size))
                o.parameters["shared_memory_offset"].CopyFrom(Param(int64_param=offset))
                outs.append(o)
                offset += size
            request = pb.ModelInferRequest(model_name=model, inputs=[tensor], outputs=outs)
        errors = 0
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            if shm is not None:
                shm[0].buf[: len(p.raw)] = p.raw  # a real client writes its next input into the region
            try:
                await stub.ModelInfer(request)
                t1 = time.perf_counter()
                lat.append((t1, t1 - t0))
            except grpc.aio.AioRpcError as exc:
                errors += 1
                if errors == 1:
                    print(f"client error: {exc.code()}: {exc.details()[:300]}", file=sys.stderr, flush=True)
        return errors


async def _client_rest(
    address: str,
    model: str,
    p: Payload,
    stop_at: float,
    lat: list,
    shm: tuple[Any, Any, list[str]] | None,
    conn_per_client: bool = False,  # an aiohttp session opens a connection per concurrent request anyway
) -> int:
    import aiohttp

    if shm is None:
        head = json.dumps(
            {
                "inputs": [
                    {
                        "name": p.name,
                        "shape": p.shape,
                        "datatype": p.datatype,
                        "parameters": {"binary_data_size": len(p.raw)},
                    }
                ],
                "parameters": {"binary_data_output": True},
            }
        ).encode()
        body = head + p.raw
        headers = {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}
    else:
        _, _, (in_name, out_name) = shm
        outs, offset = [], 0
        for name, size in p.outputs:
            region = {"shared_memory_region": out_name, "shared_memory_byte_size": size, "shared_memory_offset": offset}
            outs.append({"name": name, "parameters": region})
            offset += size
        region = {"shared_memory_region": in_name, "shared_memory_byte_size": len(p.raw)}
        tensor = {"name": p.name, "shape": p.shape, "datatype": p.datatype, "parameters": region}
        body = json.dumps({"inputs": [tensor], "outputs": outs}).encode()
        headers = {"Content-Type": "application/json"}
    url = f"http://{address}/v2/models/{model}/infer"
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            if shm is not None:
                shm[0].buf[: len(p.raw)] = p.raw
            async with session.post(url, data=body, headers=headers) as r:
                text = await r.read()
                if r.status == 200:
                    t1 = time.perf_counter()
                    lat.append((t1, t1 - t0))
                else:
                    errors += 1
                    if errors == 1:
                        print(f"client error: {r.status}: {text[:300]!r}", file=sys.stderr, flush=True)
    return errors


def _client_proc(args: tuple[Any, ...]) -> tuple[list[float], int, float]:
    """Closed-loop clients; latencies of the requests that completed inside the measuring window, errors,
    and this process's CPU seconds in that window (the client's own load: near 1.0 per process = saturated)."""
    protocol, http, grpc_address, model, p, clients, start_at, warmup, seconds, conn_per_client = args
    import aiohttp  # noqa: F401  (imported here, not inside the measuring window)
    import grpc  # noqa: F401
    from kserve.protocol.grpc import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc  # noqa: F401

    use_shm = protocol.endswith("-shm")
    fn = _client_grpc if protocol.startswith("grpc") else _client_rest
    address = grpc_address if protocol.startswith("grpc") else http

    async def main() -> tuple[list[float], int, float]:
        regions = []
        if use_shm:
            regions = [await _shm_regions(http, p, f"{os.getpid()}-{i}-{time.time_ns()}") for i in range(clients)]
        try:
            while time.time() < start_at:
                await asyncio.sleep(0.005)
            measure_from = time.perf_counter() + warmup  # the clients run from now; the queue fills meanwhile
            stop_at = measure_from + seconds
            done: list[tuple[float, float]] = []
            cpu: list[float] = []

            async def meter() -> None:
                await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
                c0 = time.process_time()
                await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
                cpu.append(time.process_time() - c0)

            coros = [
                fn(address, model, p, stop_at, done, regions[i] if use_shm else None, conn_per_client)
                for i in range(clients)
            ]
            *errors, _ = await asyncio.gather(*coros, meter())
            return [lat for t, lat in done if measure_from <= t <= stop_at], sum(errors), cpu[0] if cpu else 0.0
        finally:
            for r in regions:
                await _shm_release(http, r)

    return asyncio.run(main())


_POOLS: dict[int, Any] = {}


def client_pool(procs: int) -> Any:
    """A pool of client processes kept for the whole run (spawned once: no fork of a CUDA/ORT process)."""
    if procs not in _POOLS:
        _POOLS[procs] = mp.get_context("spawn").Pool(procs)
    return _POOLS[procs]


def load(
    server: ServerProcess,
    protocol: str,
    model: str,
    x: Any,
    name: str,
    clients: int,
    seconds: float,
    procs: int = 1,
    warmup: float = 1.0,
    outputs: tuple[tuple[str, int], ...] = (),
    conn_per_client: bool = False,
) -> dict[str, Any]:
    """``clients`` closed-loop clients: after ``warmup`` s of load, requests completed in the next ``seconds``.

    ``protocol``: ``grpc``, ``rest``, ``grpc-shm`` or ``rest-shm`` (inputs and ``outputs`` in system shared
    memory: each client registers its own regions). ``x``: an array, or a list of encoded files (BYTES).
    Returns requests/s, items/s, p50/p99 latency of those requests, errors, the client processes' CPU
    use in the window (1.0 = one core busy per process) and each server process's (``server_cpu``: cores
    busy per server process over the whole load, warm-up included: how evenly the requests were spread).
    ``conn_per_client``: each gRPC client its own TCP connection (gRPC's local subchannel pool); by default
    the clients of one process share one, as gRPC does for channels with the same target and options.
    """
    p = Payload(name, x, outputs)
    http, grpc_address = f"127.0.0.1:{server.http}", f"127.0.0.1:{server.grpc}"
    procs = max(1, min(procs, clients))
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    start_at = time.time() + 0.5 + (1.0 if protocol.endswith("-shm") else 0.0) + 0.02 * clients
    jobs = [(protocol, http, grpc_address, model, p, n, start_at, warmup, seconds, conn_per_client) for n in per]
    cpu0, t0 = server.cpu_seconds(), time.perf_counter()
    if procs == 1:
        results = [_client_proc(jobs[0])]
    else:
        results = client_pool(procs).map(_client_proc, jobs)
    cpu1, wall = server.cpu_seconds(), time.perf_counter() - t0
    server_cpu = [round((cpu1[pid] - cpu0.get(pid, 0.0)) / wall, 2) for pid in cpu1]
    lat = sorted(v for r in results for v in r[0])
    errors = sum(r[1] for r in results)
    n = len(lat)
    return {
        "requests": n,
        "errors": errors,
        "req_s": round(n / seconds, 1),
        "items_s": round(n * p.items / seconds, 1),
        "p50_ms": round(1000 * lat[n // 2], 2) if n else None,
        "p99_ms": round(1000 * lat[min(n - 1, int(n * 0.99))], 2) if n else None,
        "client_cpu": round(sum(r[2] for r in results) / seconds / procs, 2),
        "server_cpu": server_cpu,
    }


# ---------------------------------------------------------------------------------------------- commands
def cmd_cpu(a: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="amdinfer-serving-"))
    builders = {
        "tiny": lambda: (models.tiny_cnn(), np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)),
        "resnet50": lambda: (models.resnet50(), np.random.default_rng(0).random((1, 3, 224, 224), np.float32)),
    }
    cases = [(name, *builders[name]()) for name in a.models]
    for name, proto, x in cases:
        path = folder / f"{name}.onnx"
        onnx.save(proto, path)
        input_name = proto.graph.input[0].name
        for batching, (mbs, delay) in (("off", (1, 0)), ("on", (64, a.delay_ms))):
            server = ServerProcess(
                path, name, providers="cpu", precision="fp32", devices="0", max_batch_size=mbs, max_delay_ms=delay
            )
            try:
                for protocol in ("grpc", "rest"):
                    for clients in a.clients:
                        row = {"model": name, "protocol": protocol, "batching": batching, "clients": clients}
                        row.update(
                            load(server, protocol, name, x, input_name, clients, a.seconds, a.client_procs, a.warmup)
                        )
                        row["mean_batch"] = round(server.mean_batch(name), 2)
                        record(row)
            finally:
                server.stop()


def cmd_decode(a: argparse.Namespace) -> None:
    argv, sys.argv = sys.argv, sys.argv[:1]  # KServe parses sys.argv when imported
    try:
        from kserve.protocol.infer_type import InferRequest

        from amdinfer.serve import decode_rest, to_numpy
    finally:
        sys.argv = argv
    x = np.random.default_rng(0).integers(0, 255, (1, 640, 640, 3), dtype=np.uint8)
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "images",
                    "shape": list(x.shape),
                    "datatype": "UINT8",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ]
        }
    ).encode()
    body = head + x.tobytes()

    def per_call(fn: Any, n: int) -> float:
        fn()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    ours = per_call(lambda: to_numpy(decode_rest(body, len(head), "m").inputs[0]), 200)
    theirs = per_call(lambda: InferRequest.from_bytes(body, len(head), "m").inputs[0].as_numpy(), 3)
    record(
        {
            "case": "REST decode 640x640x3 uint8",
            "kserve_ms": round(theirs * 1e3, 2),
            "amdinfer_ms": round(ours * 1e3, 4),
        }
    )
    # The whole server path in process, without sockets: REST decode -> validation -> batcher -> a worker
    # that costs nothing -> response encode. This is the server's overhead per request.
    from amdinfer.serve import AmdinferModel, DynamicBatcher, FastDataPlane, check_request
    from amdinfer.types import TensorSpec

    class Free:
        name = "free"

        def key(self, feeds: Any) -> Any:
            return 0

        def rows(self, feeds: Any) -> int:
            return 1

        def run(self, requests: Any) -> list[dict[str, np.ndarray]]:
            return [{"mean": np.zeros((1, 1, 1, 1), np.float32)} for _ in requests]

    spec = [TensorSpec("images", np.dtype(np.uint8), ("N", 640, 640, 3))]

    async def server_path() -> float:
        batcher = DynamicBatcher([Free()], max_batch_size=1, max_delay_ms=0)
        model = AmdinferModel("m", batcher, inputs=spec, outputs=[], check=lambda f: check_request(spec, f))
        from kserve.model_repository import ModelRepository

        repo = ModelRepository()
        repo.update(model)
        plane = FastDataPlane(model_registry=repo)
        headers = {"inference-header-content-length": str(len(head))}
        times = []
        async with batcher:
            for i in range(301):
                t0 = time.perf_counter()
                request, _ = plane.decode(body, headers, protocol_version="v2", model_name="m")
                response, _ = await plane.infer("m", request, headers)
                plane.encode("m", response, headers, {})
                if i:
                    times.append(time.perf_counter() - t0)
        return statistics.median(times)

    path_s = asyncio.run(server_path())
    record({"case": "server path in process, 640x640x3 uint8 (REST)", "median_ms": round(path_s * 1e3, 3)})
    folder = Path(tempfile.mkdtemp(prefix="amdinfer-serving-"))
    for label, proto in (("trivial 640x640x3 uint8", trivial_uint8(640)), ("trivial 1x1x3 uint8", trivial_uint8(1))):
        path = folder / "trivial.onnx"
        onnx.save(proto, path)
        size = proto.graph.input[0].type.tensor_type.shape.dim[1].dim_value
        xx = np.random.default_rng(0).integers(0, 255, (1, size, size, 3), dtype=np.uint8)
        server = ServerProcess(
            path, "trivial", providers="cpu", precision="fp32", devices="0", max_batch_size=1, max_delay_ms=0
        )
        try:
            for protocol in ("rest", "grpc"):
                row = {"case": label, "protocol": protocol, "clients": 1}
                row.update(load(server, protocol, "trivial", xx, "images", 1, a.seconds, 1, a.warmup))
                record(row)
        finally:
            server.stop()


# ------------------------------------------------------------------ gpu
def _gpu_proof(torch: Any, path: Path) -> dict[str, Any]:
    """DLPack export on the tensor's device, and two graph-capturing engines run from two threads at once.

    With one GPU, both engines are on device 0 (the capture race is the same: one process, two threads)
    and the cross-device DLPack case is not run.
    """
    from amdinfer.engines import _dlpack as dev

    out: dict[str, Any] = {}
    gpus = (0, 1) if torch.cuda.device_count() > 1 else (0, 0)
    out["engine_devices"] = list(gpus)
    engines = [amdinfer.load(path, providers=["cuda"], precision="fp16", device=d) for d in gpus]
    out["graphs"] = [e.info.settings.get("data_path", {}).get("gpu_graphs") for e in engines]
    rng = np.random.default_rng(0)
    xs = [rng.integers(0, 255, (64, 224, 224, 3), dtype=np.uint8) for _ in range(2)]
    if gpus[1] == 1:
        want1 = engines[1].run(xs[1])["logits"]  # host path
        torch.cuda.set_device(0)
        t1 = torch.from_numpy(xs[1]).to("cuda:1")
        saved = dev._DEVICE_CONTEXTS
        dev._DEVICE_CONTEXTS = {}
        try:
            engines[1].run(t1)
            out["dlpack_without_fix"] = "ran (torch did not refuse)"
        except Exception as exc:
            out["dlpack_without_fix"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        finally:
            dev._DEVICE_CONTEXTS = saved
        got = engines[1].run(t1)["logits"]
        got = torch.from_dlpack(got).cpu().numpy() if not isinstance(got, np.ndarray) else got
        out["dlpack_cuda1_current0_maxdiff"] = float(np.abs(got.astype(np.float32) - want1).max())
    # two threads, two engines, device tensors: each first device run binds the tensor's own memory in a
    # new slot (a new graph id), so both engines capture graphs at the same time
    ts = [torch.from_numpy(xs[i]).to(f"cuda:{gpus[i]}") for i in (0, 1)]
    want32 = [engines[i].run(xs[i])["logits"] for i in (0, 1)]
    errors: list[str] = []
    diffs = [0.0, 0.0]
    iters = 200
    barrier = threading.Barrier(2)

    def work(i: int) -> None:
        try:
            torch.cuda.set_device(gpus[i])
            barrier.wait()
            for k in range(iters):
                r = engines[i].run(ts[i])["logits"]
                if k in (0, 5, iters - 1):
                    arr = torch.from_dlpack(r).cpu().numpy() if not isinstance(r, np.ndarray) else r
                    diffs[i] = max(diffs[i], float(np.abs(arr.astype(np.float32) - want32[i]).max()))
        except Exception as exc:
            errors.append(f"engine{i}: {type(exc).__name__}: {str(exc)[:200]}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    out["two_threads_errors"] = errors
    out["two_threads_maxdiff"] = diffs
    out["two_threads_img_s"] = round(2 * iters * 64 / seconds, 1)
    for e in engines:
        e.close()
    return out


def _engine_rate(path: Path, device: int, batch: int, seconds: float, provider: str = "cuda") -> float:
    with amdinfer.load(path, providers=[provider], precision="fp16", device=device) as e:
        x = np.random.default_rng(0).integers(0, 255, (batch, 224, 224, 3), dtype=np.uint8)
        for _ in range(5):
            e.run(x)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            e.run(x)
            n += 1
        return n * batch / (time.perf_counter() - t0)


def cmd_gpu(a: argparse.Namespace) -> None:
    if a.provider == "cuda":
        import torch  # before onnxruntime: its CUDA libraries
    else:
        torch = None  # a smoke run of the engine and serve parts on the CPU

    folder = Path(tempfile.mkdtemp(prefix="amdinfer-serving-"))
    path = folder / "resnet50_u8.onnx"
    onnx.save(resnet50_uint8(), path)
    env: dict[str, Any] = {"provider": a.provider}
    if torch is not None:
        env.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), torch=torch.__version__)
    import onnxruntime as ort

    env.update(onnxruntime=ort.__version__, python=platform.python_version())
    record({"case": "environment", **env})
    if "proof" in a.parts and torch is not None:
        try:
            record({"case": "gpu proof", **_gpu_proof(torch, path)})
        except Exception as exc:  # keep going: the other parts are independent
            record({"case": "gpu proof", "error": f"{type(exc).__name__}: {str(exc)[:400]}"})
    if "engine" in a.parts:
        for device in range(torch.cuda.device_count() if torch is not None else 1):
            try:
                rate = _engine_rate(path, device, a.engine_batch, a.seconds, a.provider)
                row = {"case": "engine rate", "device": device, "batch": a.engine_batch, "img_s": round(rate, 1)}
            except Exception as exc:
                row = {"case": "engine rate", "device": device, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            record(row)
    if "serve" in a.parts:
        x = np.random.default_rng(0).integers(0, 255, (a.request_items, 224, 224, 3), dtype=np.uint8)
        served: list[tuple[str, Path, Any, str]] = [("resnet50", path, x, "images")]
        if a.yolo:  # issue 25: the trained YOLOv8n too (its own fixed batch: one page per request)
            graph_input = onnx.load(a.yolo, load_external_data=False).graph.input[0]
            dims = [d.dim_value or 1 for d in graph_input.type.tensor_type.shape.dim]
            xy = np.random.default_rng(1).random(dims, dtype=np.float32)
            served.append(("yolo", Path(a.yolo), xy, graph_input.name))
        for (model_name, model_path, xm, input_name), devices in itertools.product(served, a.device_sets):
            _serve_gpu_rows(a, model_name, model_path, xm, input_name, devices, torch is not None)


def _serve_gpu_rows(
    a: argparse.Namespace, name: str, path: Path, x: Any, input_name: str, devices: str, preload_torch: bool
) -> None:
    """``gpu``: one served model on ``devices``, over plain gRPC and gRPC with system shared memory."""
    try:
        server = ServerProcess(
            path,
            name,
            providers=a.provider,
            precision="fp16",
            devices=devices,
            max_batch_size=64,
            max_delay_ms=a.delay_ms,
            preload_torch=preload_torch,
            extra=("--batch-buckets", a.batch_buckets) if a.batch_buckets and name == "resnet50" else (),
        )
    except Exception as exc:
        record(
            {"case": "served", "model": name, "devices": devices, "error": f"{type(exc).__name__}: {str(exc)[-600:]}"}
        )
        return
    try:
        for protocol, clients in itertools.product(["grpc", "grpc-shm"], a.gpu_clients):
            row = {"case": "served", "model": name, "devices": devices, "protocol": protocol, "clients": clients}
            row["items_per_request"] = len(x)
            try:
                outs = output_specs(server, name, len(x)) if protocol.endswith("-shm") else ()
                row.update(
                    load(server, protocol, name, x, input_name, clients, a.seconds, a.client_procs, a.warmup, outs)
                )
                row["mean_batch"] = round(server.mean_batch(name), 1)
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            record(row)
    finally:
        server.stop()


# ------------------------------------------------------------------ gpu1
def uint8_front(model: onnx.ModelProto, size: int) -> onnx.ModelProto:
    """``model`` (float ``(N, 3, size, size)`` in) taking ``uint8 (N, size, size, 3)``: Cast, NHWC->NCHW, 1/255."""
    g = model.graph
    old = g.input[0].name
    pre = [
        helper.make_node("Cast", ["images"], ["images_f"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["images_f"], ["images_chw"], perm=[0, 3, 1, 2]),
        helper.make_node("Mul", ["images_chw", "inv255"], [old]),
    ]
    g.initializer.append(onnx.numpy_helper.from_array(np.array(1 / 255, np.float32), "inv255"))
    nodes = pre + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    del g.input[0]
    g.input.insert(0, helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", size, size, 3]))
    onnx.checker.check_model(model)
    return model


def output_specs(server: ServerProcess, model: str, items: int) -> tuple[tuple[str, int], ...]:
    """(name, bytes) of each output of ``model`` for a request of ``items`` rows, from the server's metadata."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http}/v2/models/{model}", timeout=10) as r:
        meta = json.loads(r.read())
    specs = []
    for o in meta["outputs"]:
        dims = [items if (d is None or int(d) < 0) else int(d) for d in o["shape"]]
        specs.append((o["name"], int(np.prod(dims)) * _DTYPE_SIZE[o["datatype"]]))
    return tuple(specs)


def serve_help() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from amdinfer.cli import main; sys.exit(main(['serve', '--help']))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout + out.stderr


def _jpegs(count: int, width: int | None, quality: int = 90) -> list[bytes]:
    """JPEG files of the shipped document pages (tests/data/doclayout_page*.png), optionally resized."""
    import io

    from PIL import Image

    pages = sorted((Path(__file__).resolve().parents[1] / "tests" / "data").glob("doclayout_page*.png"))
    files = []
    for i in range(count):
        im = Image.open(pages[i % len(pages)]).convert("RGB")
        if width is not None:
            im = im.resize((width, round(im.height * width / im.width)))
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=quality)
        files.append(buf.getvalue())
    return files


def _decoder() -> tuple[str, Any]:
    """The recipe's default decoder: OpenCV when installed, else Pillow (one JPEG file -> pixels)."""
    try:
        import cv2

        return "cv2.imdecode", lambda b: cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
    except ImportError:
        import io

        from PIL import Image

        return "PIL decode", lambda b: np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))


def _rate(fn: Any, items: int, seconds: float, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    return n * items / (time.perf_counter() - t0)


def cmd_gpu1(a: argparse.Namespace) -> None:
    """One GPU, one run: engine rates, then each served configuration against them (module docstring)."""
    smoke = a.cpu_smoke
    provider, precision = ("cpu", "fp32") if smoke else ("cuda", "fp16")
    if not smoke:
        import torch  # before onnxruntime: its CUDA libraries
    import onnxruntime as ort

    folder = Path(tempfile.mkdtemp(prefix="amdinfer-serving-"))
    help_text = serve_help()
    has = {
        flag: flag in help_text
        for flag in ("--workers-per-device", "--recipe", "--verify-sample", "--shared-memory", "--pipeline-threads")
    }
    env: dict[str, Any] = {"case": "environment", "provider": provider, "precision": precision}
    env.update(onnxruntime=ort.__version__, python=platform.python_version(), cores=os.cpu_count())
    env.update(client_procs=a.client_procs, seconds=a.seconds, warmup=a.warmup, flags={k: v for k, v in has.items()})
    if not smoke:
        import torch

        env.update(gpu=torch.cuda.get_device_name(0), torch=torch.__version__)
    record(env)

    # the classifier: ResNet-50 (a tiny CNN in the smoke run), float NCHW for the recipe, uint8 NHWC bare
    size = 32 if smoke else 224
    cls_proto = models.tiny_cnn() if smoke else models.resnet50()
    cls_path, cls_u8_path = folder / "classifier.onnx", folder / "classifier_u8.onnx"
    onnx.save(cls_proto, cls_path)
    onnx.save(uint8_front(onnx.ModelProto.FromString(cls_proto.SerializeToString()), size), cls_u8_path)
    noop_path = folder / "noop.onnx"
    onnx.save(trivial_uint8(size), noop_path)
    items = a.request_items
    rng = np.random.default_rng(0)
    x_cls = rng.integers(0, 255, (items, size, size, 3), dtype=np.uint8)
    jpeg_cls = _jpegs(items, 500)  # ImageNet-sized photos: 500 px wide
    buckets = [int(b) for b in a.batch_buckets.split(",")] if a.batch_buckets else [a.max_batch]
    yolo = Path(a.yolo) if a.yolo else None
    yolo_meta: dict[str, Any] = {}
    if yolo is not None:
        shape = [
            d.dim_value or d.dim_param
            for d in onnx.load(yolo, load_external_data=False).graph.input[0].type.tensor_type.shape.dim
        ]
        yolo_meta = {"shape": shape, "input": onnx.load(yolo, load_external_data=False).graph.input[0].name}

    # ---- 1. engine rates (nothing else on the GPU)
    engine: dict[tuple[str, int], float] = {}
    with amdinfer.load(cls_u8_path, providers=[provider], precision=precision, device=0) as e:
        for b in sorted({*buckets, a.engine_batch}):
            xb = rng.integers(0, 255, (b, size, size, 3), dtype=np.uint8)
            engine["classifier", b] = _rate(lambda xb=xb: e.run(xb), b, a.engine_seconds)
            record({"case": "engine", "model": "classifier", "batch": b, "img_s": round(engine["classifier", b], 1)})
    decoder, decode = _decoder()
    dec = _rate(lambda: [decode(j) for j in jpeg_cls], items, 1.0)
    record({"case": "decode", "what": f"{decoder}, 1 thread", "image": "500 px JPEG", "img_s": round(dec, 1)})
    jpeg_yolo: list[bytes] = []
    if yolo is not None:
        jpeg_yolo = _jpegs(8, None)
        with amdinfer.load(yolo, providers=[provider], precision=precision, device=0) as e:
            xy = rng.random([int(d) if isinstance(d, int) and d else 1 for d in yolo_meta["shape"]], np.float32)
            engine["yolo", 1] = _rate(lambda: e.run(xy), xy.shape[0], a.engine_seconds)
            record({"case": "engine", "model": "yolo", "batch": xy.shape[0], "img_s": round(engine["yolo", 1], 1)})
        dec = _rate(lambda: [decode(j) for j in jpeg_yolo], len(jpeg_yolo), 1.0)
        record({"case": "decode", "what": f"{decoder}, 1 thread", "image": "page JPEG", "img_s": round(dec, 1)})
        try:
            det = amdinfer.yolo(yolo, providers=[provider], precision=precision, device=0)
            rate = _rate(lambda: det.run_batch(jpeg_yolo), len(jpeg_yolo), a.engine_seconds, warm=1)
            engine["yolo-pipeline", 1] = rate
            record({"case": "engine", "model": "yolo pipeline (JPEG in, run_batch)", "img_s": round(rate, 1)})
            det.close() if hasattr(det, "close") else None
        except Exception as exc:
            record({"case": "engine", "model": "yolo pipeline", "error": f"{type(exc).__name__}: {str(exc)[:300]}"})

    # ---- 2. served
    def serve(
        path: Path, name: str, extra: tuple[str, ...] = (), mbs: int | None = None, env: dict[str, str] | None = None
    ) -> ServerProcess:
        flags = list(extra)
        if has["--workers-per-device"] and "--workers-per-device" not in flags:
            flags += ["--workers-per-device", "1"]
        if a.batch_buckets and mbs is None:
            flags += ["--batch-buckets", a.batch_buckets]
        return ServerProcess(
            path,
            name,
            providers=provider,
            precision=precision,
            devices="0",
            max_batch_size=mbs or a.max_batch,
            max_delay_ms=a.delay_ms,
            preload_torch=not smoke,
            extra=tuple(flags),
            env=env,
        )

    def measure(
        server: ServerProcess,
        label: str,
        name: str,
        x: Any,
        input_name: str,
        protocols: list[str],
        clients: list[int],
        ref: tuple[str, int] | None,
        conn: bool = False,
    ) -> None:
        for protocol in protocols:
            outs = output_specs(server, name, len(x)) if protocol.endswith("-shm") else ()
            for c in clients:
                row: dict[str, Any] = {"case": "served", "config": label, "protocol": protocol, "clients": c}
                row["items_per_request"] = len(x)
                if conn:
                    row["conn_per_client"] = True
                try:
                    row.update(
                        load(server, protocol, name, x, input_name, c, a.seconds, a.client_procs, a.warmup, outs, conn)
                    )
                    row["mean_batch"] = round(server.mean_batch(name), 1)
                    if ref is not None and ref in engine:
                        row["engine_img_s"] = round(engine[ref], 1)
                        row["ratio"] = round(row["items_s"] / engine[ref], 2)
                        served_b = next((b for b in sorted(buckets) if b >= row["mean_batch"]), None)
                        if ref[0] == "classifier" and served_b and ("classifier", served_b) in engine:
                            row["ratio_at_served_batch"] = round(row["items_s"] / engine["classifier", served_b], 2)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                record(row)

    def run_config(
        label: str,
        path: Path,
        name: str,
        extra: tuple[str, ...],
        body: Any,
        mbs: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        try:
            server = serve(path, name, extra, mbs, env)
        except Exception as exc:
            record({"case": "served", "config": label, "error": f"{type(exc).__name__}: {str(exc)[-600:]}"})
            return
        try:
            body(server)
        finally:
            server.stop()

    all_protocols = ["grpc", "rest", "grpc-shm", "rest-shm"]

    def want(key: str) -> bool:
        return a.configs is None or key in a.configs

    top = [max(a.gpu_clients)]
    ref_cls = ("classifier", a.engine_batch)
    # the ceiling of clients + server with a model that costs nothing, same request size
    if want("noop"):
        run_config(
            "no-op model (ceiling)",
            noop_path,
            "noop",
            (),
            lambda s: measure(
                s, "no-op model (ceiling)", "noop", x_cls, "images", ["grpc", "rest", "grpc-shm"], top, None
            ),
        )
    if want("cls1"):
        run_config(
            "classifier, 1 worker",
            cls_u8_path,
            "classifier",
            (),
            lambda s: measure(
                s, "classifier, 1 worker", "classifier", x_cls, "images", all_protocols, a.gpu_clients, ref_cls
            ),
        )
    if has["--verify-sample"] and want("canary"):
        run_config(
            "classifier, canary 0.01",
            cls_u8_path,
            "classifier",
            ("--verify-sample", str(a.canary)),
            lambda s: measure(
                s, "classifier, canary 0.01", "classifier", x_cls, "images", ["grpc", "grpc-shm"], top, ref_cls
            ),
        )
    if has["--workers-per-device"] and has["--verify-sample"] and want("workers-canary"):
        label_c = f"classifier, {a.workers} workers, canary {a.canary}"
        run_config(
            label_c,
            cls_u8_path,
            "classifier",
            ("--workers-per-device", str(a.workers), "--verify-sample", str(a.canary)),
            lambda s: measure(s, label_c, "classifier", x_cls, "images", ["grpc", "grpc-shm"], top, ref_cls),
        )
    if has["--workers-per-device"] and has["--recipe"] and want("workers-recipe"):
        label_r = f"classifier recipe, JPEG BYTES, {a.workers} workers"
        run_config(
            label_r,
            cls_path,
            "classifier",
            ("--recipe", "classify", "--workers-per-device", str(a.workers)),
            lambda s: measure(s, label_r, "classifier", jpeg_cls, "images", ["grpc", "rest"], a.gpu_clients, ref_cls),
        )
    if has["--pipeline-threads"] and want("jpeg-diagnosis"):
        # Issue 23: why JPEG requests stayed far below the engine with several server processes. One factor at a
        # time, 64 clients over gRPC, each row with every server process's CPU use (server_cpu).
        cores = str(os.cpu_count() or 1)
        w1, w2, one_cv = str(a.workers), str(2 * a.workers), {"OPENCV_FOR_THREADS_NUM": "1"}
        variants: list[tuple[str, str, tuple[str, ...], dict[str, str] | None, bool]] = [
            (f"{cores} decode threads each (the old default)", w1, ("--pipeline-threads", cores), None, False),
            ("decode threads shared out (the new default)", w1, (), None, False),
            ("shared + a connection per client", w1, (), None, True),
            ("shared + a connection per client + OpenCV 1 thread", w1, (), one_cv, True),
            ("shared + a connection per client", w2, (), None, True),
        ]  # fmt: skip
        for tag, workers, extra, env_vars, conn in variants:
            label_d = f"classifier recipe, JPEG BYTES, {workers} workers, {tag}"
            run_config(
                label_d,
                cls_path,
                "classifier",
                ("--recipe", "classify", "--workers-per-device", workers, *extra),
                lambda s, label_d=label_d, conn=conn: measure(
                    s, label_d, "classifier", jpeg_cls, "images", ["grpc"], top, ref_cls, conn
                ),
                env=env_vars,
            )
    if has["--pipeline-threads"] and want("jpeg-nvjpeg"):
        # Issue 23's next step after jpeg-diagnosis: JPEG decoded by nvJPEG on the GPU (torchvision) instead of
        # cv2.imdecode on the host cores, with a gRPC connection per client; 1 and --workers processes.
        for workers in ("1", str(a.workers)):
            label_n = f"classifier recipe, JPEG BYTES, nvjpeg, {workers} workers, a connection per client"
            run_config(
                label_n,
                cls_path,
                "classifier",
                ("--recipe", "classify", "--decoder", "nvjpeg", "--workers-per-device", workers),
                lambda s, label_n=label_n: measure(
                    s, label_n, "classifier", jpeg_cls, "images", ["grpc"], top, ref_cls, True
                ),
            )
    if has["--workers-per-device"] and want("workers"):
        label = f"classifier, {a.workers} workers"
        run_config(
            label,
            cls_u8_path,
            "classifier",
            ("--workers-per-device", str(a.workers)),
            lambda s: measure(
                s, label, "classifier", x_cls, "images", ["grpc", "rest", "grpc-shm"], a.gpu_clients, ref_cls
            ),
        )
    if has["--recipe"] and want("recipe"):
        run_config(
            "classifier recipe, JPEG BYTES",
            cls_path,
            "classifier",
            ("--recipe", "classify"),
            lambda s: measure(
                s,
                "classifier recipe, JPEG BYTES",
                "classifier",
                jpeg_cls,
                "images",
                ["grpc", "rest"],
                a.gpu_clients,
                ref_cls,
            ),
        )
    if yolo is not None:
        xy_req = rng.random([int(d) if isinstance(d, int) and d else 1 for d in yolo_meta["shape"]], np.float32)
        if want("yolo"):
            run_config(
                "yolo, 1 worker",
                yolo,
                "yolo",
                (),
                lambda s: measure(
                    s,
                    "yolo, 1 worker",
                    "yolo",
                    xy_req,
                    yolo_meta["input"],
                    ["grpc", "rest", "grpc-shm"],
                    a.gpu_clients,
                    ("yolo", 1),
                ),
                mbs=1,
            )
        imgsz = [d for d in yolo_meta["shape"] if isinstance(d, int) and d > 3]
        recipe_flags = ("--recipe", "yolo") + (("--imgsz", str(imgsz[-1])) if imgsz else ())
        if has["--recipe"] and has["--workers-per-device"] and want("workers-yolo-recipe"):
            label_y = f"yolo recipe, JPEG BYTES, {a.workers} workers"
            run_config(
                label_y,
                yolo,
                "yolo",
                (*recipe_flags, "--workers-per-device", str(a.workers)),
                lambda s: measure(s, label_y, "yolo", jpeg_yolo[:1], "images", ["grpc"], a.gpu_clients, ("yolo", 1)),
                mbs=a.max_batch,
            )
        if has["--recipe"] and want("yolo-recipe"):
            run_config(
                "yolo recipe, JPEG BYTES",
                yolo,
                "yolo",
                recipe_flags,
                lambda s: measure(
                    s,
                    "yolo recipe, JPEG BYTES",
                    "yolo",
                    jpeg_yolo[:1],
                    "images",
                    ["grpc", "rest"],
                    a.gpu_clients,
                    ("yolo", 1),
                ),
                mbs=a.max_batch,
            )
    for pool in _POOLS.values():
        pool.terminate()
    print_table()


#: the docs' flags: the "best" side of ``defaults`` (docs/serving.md, docs/performance.md)
BEST_FLAGS = ("--max-batch-size", "64", "--max-delay-ms", "2", "--batch-buckets", "8,16,32,64")


def _decode_all_cores(*sets: list[bytes]) -> None:
    """Host JPEG decode rates (OpenCV, one OpenCV thread per decode) on a pool of every core: the most images/s a
    JPEG recipe can take on this host without a GPU decoder (a served JPEG row above this is not decode-bound)."""
    from concurrent.futures import ThreadPoolExecutor

    import cv2

    cv2.setNumThreads(1)
    n = os.cpu_count() or 1
    with ThreadPoolExecutor(n) as pool:
        for files, what in zip(sets, ("640x480 JPEG", "page JPEG")):
            if not files:
                continue
            batch = [files[i % len(files)] for i in range(16 * n)]
            arrays = [np.frombuffer(f, np.uint8) for f in batch]

            def go(arrays: list[np.ndarray] = arrays) -> None:
                list(pool.map(lambda x: cv2.imdecode(x, cv2.IMREAD_COLOR), arrays))

            rate = _rate(go, len(arrays), 1.0)
            record({"case": "decode", "what": f"opencv, {n} threads", "image": what, "img_s": round(rate, 1)})


def _jpegs_sized(count: int, size: tuple[int, int], quality: int = 90) -> list[bytes]:
    """JPEG files of the shipped document pages resized to ``size`` (width, height) exactly."""
    import io

    from PIL import Image

    pages = sorted((Path(__file__).resolve().parents[1] / "tests" / "data").glob("doclayout_page*.png"))
    files = []
    for i in range(count):
        buf = io.BytesIO()
        Image.open(pages[i % len(pages)]).convert("RGB").resize(size).save(buf, "JPEG", quality=quality)
        files.append(buf.getvalue())
    return files


def _input_shape(path: Path) -> tuple[str, list[Any], int]:
    """(name, shape with symbols as str, elem type) of a model's first input, without its external data."""
    value = onnx.load(path, load_external_data=False).graph.input[0]
    shape = [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]
    return value.name, shape, value.type.tensor_type.elem_type


def cmd_defaults(a: argparse.Namespace) -> None:
    """Each served row with ``amdinfer serve``'s defaults and with the docs' flags (:data:`BEST_FLAGS`), side by side,
    over the engine alone in the same run (issue 38, part 3). One GPU (device 0); ``--cpu-smoke``: a tiny CNN on
    the CPU to check the script itself."""
    smoke = a.cpu_smoke
    if not smoke:
        import torch  # noqa: F401  (before onnxruntime: its CUDA libraries)
    import onnxruntime as ort

    providers = "cpu" if smoke else a.serve_providers  # None: not given (the server's auto)
    engine_providers = [providers] if providers else None
    precision = "fp32" if smoke else "fp16"
    folder = Path(tempfile.mkdtemp(prefix="amdinfer-defaults-"))
    size = 32 if smoke else 224
    if a.model:
        cls_u8 = Path(a.model)
    else:
        cls_u8 = folder / "resnet50_u8.onnx"
        onnx.save(uint8_front(models.tiny_cnn() if smoke else models.resnet50(), size), cls_u8)
    size = int(_input_shape(cls_u8)[1][1])  # uint8 (N, H, W, 3)
    if a.classifier:
        cls_f = Path(a.classifier)
    else:
        cls_f = folder / "resnet50.onnx"
        onnx.save(models.tiny_cnn() if smoke else models.resnet50(), cls_f)
    env = {"case": "environment", "command": "defaults", "onnxruntime": ort.__version__, "cores": os.cpu_count()}
    env.update(providers=providers or "auto", precision=precision, best_flags=" ".join(BEST_FLAGS))
    env.update(clients=a.clients[-1], client_procs=a.client_procs, seconds=a.seconds, items=a.request_items)
    record(env)
    rng = np.random.default_rng(0)
    items, clients = a.request_items, a.clients[-1]

    def engine_rate(path: Path, shape: list[Any], dtype: Any, label: str) -> float:
        batch = next((d for d in shape[:1] if isinstance(d, int) and d > 0), a.engine_batch)
        dims = [batch] + [d if isinstance(d, int) and d > 0 else 640 for d in shape[1:]]
        with amdinfer.load(path, providers=engine_providers, precision=precision, device=0) as e:
            x = rng.integers(0, 255, dims).astype(dtype) if dtype == np.uint8 else rng.random(dims, np.float32)
            rate = _rate(lambda: e.run(x), batch, a.engine_seconds, warm=5)
            row = {"case": "engine", "model": label, "batch": batch, "img_s": round(rate, 1), "device": e.info.device}
            if not smoke:  # the same batch already on the device (DLPack): the engine without the host copy
                try:
                    import torch

                    xt = torch.from_numpy(x).to(f"cuda:{0}")
                    row["device_tensor_img_s"] = round(_rate(lambda: e.run(xt), batch, a.engine_seconds, warm=5), 1)
                except Exception as exc:
                    row["device_tensor_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            record(row)
            device_rates[label] = row.get("device_tensor_img_s")
        return rate

    device_rates: dict[str, Any] = {}

    rows: list[tuple[str, Path, tuple[str, ...], Any, str, float]] = []
    engine_u8 = engine_rate(cls_u8, _input_shape(cls_u8)[1], np.uint8, "classifier uint8 NHWC (bare)")
    x_u8 = rng.integers(0, 255, (items, size, size, 3), dtype=np.uint8)
    rows.append((f"bare model, {items} uint8 images/request", cls_u8, (), x_u8, "images", engine_u8))
    _, cls_shape, _ = _input_shape(cls_f)
    engine_f = engine_rate(cls_f, cls_shape, np.float32, "classifier float NCHW (recipe's engine)")
    jpeg = _jpegs_sized(items, (640, 480))
    rows.append((f"--recipe classify, {items} 640x480 JPEG/request", cls_f, ("--recipe", "classify"), jpeg, "images",
                 engine_f))  # fmt: skip
    if a.yolo:
        yolo = Path(a.yolo)
        _, yshape, _ = _input_shape(yolo)
        engine_rate(yolo, yshape, np.float32, "yolo (as exported)")
        # the recipe makes a batch-1 export batch-dynamic on a GPU (dynamic_batch="auto"), so the served model's
        # engine is the same graph with a dynamic batch, at the served batch
        from amdinfer.testing.models import batch_dynamic

        dyn = folder / "yolo_dynamic.onnx"
        onnx.save(batch_dynamic(onnx.load(yolo)) if isinstance(yshape[0], int) else onnx.load(yolo), dyn)
        engine_y = engine_rate(dyn, ["N", *yshape[1:]], np.float32, "yolo")
        imgsz = [d for d in yshape if isinstance(d, int) and d > 3]
        flags = ("--recipe", "yolo", *(("--imgsz", str(imgsz[-1])) if imgsz else ()))
        rows.append(("--recipe yolo, 1 JPEG page/request", yolo, flags, _jpegs(1, None), "images", engine_y))

    _decode_all_cores(jpeg, _jpegs(8, None) if a.yolo else [])
    table: list[dict[str, Any]] = []
    engine_labels = ["classifier uint8 NHWC (bare)", "classifier float NCHW (recipe's engine)", "yolo"]
    for (label, path, flags, x, input_name, engine), engine_label in zip(rows, engine_labels):
        out: dict[str, Any] = {"row": label, "engine_img_s": round(engine, 1)}
        if device_rates.get(engine_label):
            out["engine_device_tensor_img_s"] = device_rates[engine_label]
        sides: list[tuple[str, tuple[str, ...]]] = [("default", ()), ("best", BEST_FLAGS)]
        if "classify" in flags and not smoke:  # the JPEG row: the GPU decoder, the rest default
            sides.append(("nvjpeg", ("--decoder", "nvjpeg")))
        for side, extra in sides:
            try:
                server = ServerProcess(path, "m", providers=providers, precision=precision, devices="0",
                                       max_batch_size=None, max_delay_ms=None, preload_torch=not smoke,
                                       extra=(*flags, *extra))  # fmt: skip
            except Exception as exc:
                out[f"{side}_error"] = f"{type(exc).__name__}: {str(exc)[-400:]}"
                continue
            try:
                got = load(server, "grpc", "m", x, input_name, clients, a.seconds, a.client_procs, a.warmup,
                           conn_per_client=True)  # fmt: skip
                out[f"{side}_img_s"] = got["items_s"]
                out[f"{side}_ratio"] = round(got["items_s"] / engine, 2)
                if out.get("engine_device_tensor_img_s"):
                    out[f"{side}_ratio_device"] = round(got["items_s"] / out["engine_device_tensor_img_s"], 2)
                out[f"{side}_p50_ms"], out[f"{side}_errors"] = got["p50_ms"], got["errors"]
                out[f"{side}_mean_batch"] = round(server.mean_batch("m"), 1)
                out[f"{side}_start_line"] = server.start_line()
            except Exception as exc:
                out[f"{side}_error"] = f"{type(exc).__name__}: {str(exc)[-400:]}"
            finally:
                server.stop()
        record({"case": "defaults", **out})
        table.append(out)
    for pool in _POOLS.values():
        pool.terminate()
    md = ["| row | engine img/s (host batch; device tensors) | defaults img/s (÷ engine) | best img/s (÷ engine) "
          "| defaults ÷ best | --decoder nvjpeg img/s (÷ engine) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in table:

        def cell(side: str, r: dict[str, Any] = r) -> str:
            if f"{side}_img_s" not in r:
                return str(r.get(f"{side}_error", ""))[:120]
            return f"{r[side + '_img_s']:,.0f} ({r[side + '_ratio']:.2f})"

        both = "default_img_s" in r and "best_img_s" in r and r["best_img_s"]
        ratio = f"{r['default_img_s'] / r['best_img_s']:.2f}" if both else ""
        dev = f"; {r['engine_device_tensor_img_s']:,.0f}" if r.get("engine_device_tensor_img_s") else ""
        nv = cell("nvjpeg") if "nvjpeg_img_s" in r or "nvjpeg_error" in r else ""
        md.append(
            f"| {r['row']} | {r['engine_img_s']:,.0f}{dev} | {cell('default')} | {cell('best')} | {ratio} | {nv} |"
        )
    md.append("")
    md += [f"- {r['row']}, defaults: `{r.get('default_start_line', '')}`" for r in table]
    text = "\n".join(md)
    print("\n" + text, flush=True)
    if OUT is not None:
        (OUT / "serving_defaults.md").write_text(text + "\n")
        (OUT / "serving_defaults.json").write_text(json.dumps({"environment": env, "rows": table}, indent=1))


def print_table() -> None:
    """Every row as one Markdown table (served rows with their ratios; engine and decode rows as rates)."""
    keys = ["case", "config", "model", "what", "protocol", "clients", "items_per_request", "batch", "img_s", "items_s"]
    keys += ["req_s", "p50_ms", "p99_ms", "mean_batch", "engine_img_s", "ratio", "ratio_at_served_batch"]
    keys += ["client_cpu", "errors", "error"]
    rows = [r for r in ROWS if r.get("case") != "environment"]
    used = [k for k in keys if any(k in r for r in rows)]
    print()
    print("| " + " | ".join(used) + " |")
    print("|" + "---|" * len(used))
    for r in rows:
        print("| " + " | ".join(str(r.get(k, "")) for k in used) + " |")
    print(flush=True)


def main() -> None:
    global OUT
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["cpu", "decode", "gpu", "gpu1", "defaults", "stream"])
    p.add_argument("--seconds", type=float, default=3.0, help="measuring time per row")
    p.add_argument("--warmup", type=float, default=1.0, help="load before the measuring window (s)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--gpu-clients", type=int, nargs="+", default=[16, 64])
    p.add_argument("--client-procs", type=int, default=1, help="client processes (use several on many cores)")
    p.add_argument("--delay-ms", type=float, default=2.0, help="max queue delay with batching on")
    p.add_argument("--request-items", type=int, default=8, help="gpu: images per request")
    p.add_argument("--parts", nargs="+", default=["proof", "engine", "serve"], help="gpu: what to run")
    p.add_argument("--models", nargs="+", default=["tiny", "resnet50"], choices=["tiny", "resnet50"], help="cpu")
    p.add_argument("--provider", default="cuda", help="gpu: ONNX Runtime provider (cpu: a smoke run)")
    p.add_argument("--device-sets", nargs="+", default=["0", "0,1"], help="gpu: --devices of each served run")
    p.add_argument("--engine-batch", type=int, default=64, help="gpu: batch of the engine-rate loop")
    p.add_argument("--batch-buckets", default="8,16,32,64", help="gpu: the server's --batch-buckets ('' for none)")
    p.add_argument("--yolo", help="gpu, gpu1: the trained YOLOv8n .onnx (tests/_trained.model_path())")
    p.add_argument("--cpu-smoke", action="store_true", help="gpu1: every row on the CPU with a tiny CNN")
    p.add_argument("--workers", type=int, default=4, help="gpu1: N of --workers-per-device N (when the flag exists)")
    p.add_argument("--canary", type=float, default=0.01, help="gpu1: --verify-sample of the canary rows")
    p.add_argument(
        "--configs",
        nargs="+",
        default=None,
        help="gpu1: only these served configurations (noop cls1 canary workers workers-canary recipe "
        "workers-recipe jpeg-diagnosis jpeg-nvjpeg yolo yolo-recipe workers-yolo-recipe; default: all)",
    )
    p.add_argument("--max-batch", type=int, default=64, help="gpu1: the server's --max-batch-size")
    p.add_argument("--engine-seconds", type=float, default=2.0, help="gpu1: seconds per engine-rate row")
    p.add_argument("--model", help="defaults: the bare model (uint8 NHWC in; default: ResNet-50 with a uint8 front)")
    p.add_argument("--classifier", help="defaults: the --recipe classify model (default: ResNet-50, float NCHW)")
    p.add_argument("--serve-providers", help="defaults: --providers of the servers and engines (default: auto)")
    p.add_argument("--requests", type=int, default=2000, help="stream: requests of each unary and stream row")
    p.add_argument("--out", default=os.environ.get("OUT"))
    a = p.parse_args()
    if a.out:
        OUT = Path(a.out)
        OUT.mkdir(parents=True, exist_ok=True)
    if a.command == "stream":  # benchmarks/serving_stream.py: ModelStreamInfer against unary calls
        import serving_stream

        serving_stream.run(a, ServerProcess, record)
        return
    {"cpu": cmd_cpu, "decode": cmd_decode, "gpu": cmd_gpu, "gpu1": cmd_gpu1, "defaults": cmd_defaults}[a.command](a)


if __name__ == "__main__":
    main()
