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
  served over gRPC with batching, on one GPU and on two (``--devices 0`` vs ``0,1``).

The load generator is asyncio over ``grpc.aio`` (KServe's v2 stubs) and ``aiohttp`` (Triton's binary
tensor extension), in ``--client-procs`` processes; the server runs in a subprocess (``python -m amdinfer
serve``). Every result row is printed as Markdown and, with ``--out DIR`` (or ``$OUT``), appended to
``serving.jsonl`` there.

    python benchmarks/serving.py cpu --seconds 3
    python benchmarks/serving.py decode
    python benchmarks/serving.py gpu --out /tmp/out          # two GPUs, onnxruntime-gpu, torch
"""

from __future__ import annotations

import argparse
import asyncio
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
    model = models.resnet50()
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
    g.input.insert(0, helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", 224, 224, 3]))
    onnx.checker.check_model(model)
    return model


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
        providers: str,
        precision: str,
        devices: str,
        max_batch_size: int,
        max_delay_ms: float,
        preload_torch: bool = False,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.http, self.grpc = free_port(), free_port()
        args = ["serve", str(model_path), "--name", name, "--providers", providers, "--precision", precision]
        args += ["--devices", devices, "--max-batch-size", str(max_batch_size), "--max-delay-ms", str(max_delay_ms)]
        args += ["--http-port", str(self.http), "--grpc-port", str(self.grpc), *extra]
        pre = "import torch; " if preload_torch else ""
        code = pre + "import sys; from amdinfer.cli import main; sys.exit(main(sys.argv[1:]))"
        self.log = tempfile.NamedTemporaryFile(prefix="amdinfer-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=self.log, stderr=subprocess.STDOUT)
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

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------- clients
_DTYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.uint8): "UINT8"}


async def _client_grpc(address: str, model: str, x: np.ndarray, name: str, stop_at: float, lat: list) -> int:
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pbg

    opts = [("grpc.max_send_message_length", 1 << 30), ("grpc.max_receive_message_length", 1 << 30)]
    async with grpc.aio.insecure_channel(address, options=opts) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=_DTYPES[x.dtype], shape=list(x.shape))
        request = pb.ModelInferRequest(model_name=model, inputs=[tensor], raw_input_contents=[x.tobytes()])
        errors = 0
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            try:
                await stub.ModelInfer(request)
                t1 = time.perf_counter()
                lat.append((t1, t1 - t0))
            except grpc.aio.AioRpcError:
                errors += 1
        return errors


async def _client_rest(address: str, model: str, x: np.ndarray, name: str, stop_at: float, lat: list) -> int:
    import aiohttp

    head = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(x.shape),
                    "datatype": _DTYPES[x.dtype],
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    body = head + x.tobytes()
    headers = {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}
    url = f"http://{address}/v2/models/{model}/infer"
    errors = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as r:
                await r.read()
                if r.status == 200:
                    t1 = time.perf_counter()
                    lat.append((t1, t1 - t0))
                else:
                    errors += 1
    return errors


def _client_proc(args: tuple[str, str, str, np.ndarray, str, int, float, float, float]) -> tuple[list[float], int]:
    """Closed-loop clients; latencies of the requests that completed inside the measuring window."""
    protocol, address, model, x, name, clients, start_at, warmup, seconds = args

    async def main() -> tuple[list[float], int]:
        while time.time() < start_at:
            await asyncio.sleep(0.005)
        measure_from = time.perf_counter() + warmup  # the clients run from now; the queue fills meanwhile
        stop_at = measure_from + seconds
        done: list[tuple[float, float]] = []
        fn = _client_grpc if protocol == "grpc" else _client_rest
        errors = await asyncio.gather(*(fn(address, model, x, name, stop_at, done) for _ in range(clients)))
        return [lat for t, lat in done if measure_from <= t <= stop_at], sum(errors)

    return asyncio.run(main())


def load(
    server: ServerProcess,
    protocol: str,
    model: str,
    x: np.ndarray,
    name: str,
    clients: int,
    seconds: float,
    procs: int = 1,
    warmup: float = 1.0,
) -> dict[str, Any]:
    """``clients`` closed-loop clients: after ``warmup`` s of load, requests completed in the next ``seconds``.

    Returns requests/s, items/s, p50/p99 latency of those requests, and errors.
    """
    address = f"127.0.0.1:{server.grpc if protocol == 'grpc' else server.http}"
    procs = max(1, min(procs, clients))
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    start_at = time.time() + 0.3 + 0.3 * (procs > 1) * procs
    jobs = [(protocol, address, model, x, name, n, start_at, warmup, seconds) for n in per]
    if procs == 1:
        results = [_client_proc(jobs[0])]
    else:
        with mp.get_context("spawn").Pool(procs) as pool:
            results = pool.map(_client_proc, jobs)
    lat = sorted(v for r in results for v in r[0])
    errors = sum(r[1] for r in results)
    n = len(lat)
    return {
        "requests": n,
        "errors": errors,
        "req_s": round(n / seconds, 1),
        "items_s": round(n * x.shape[0] / seconds, 1),
        "p50_ms": round(1000 * lat[n // 2], 2) if n else None,
        "p99_ms": round(1000 * lat[min(n - 1, int(n * 0.99))], 2) if n else None,
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
        for devices in a.device_sets:
            try:
                server = ServerProcess(
                    path,
                    "resnet50",
                    providers=a.provider,
                    precision="fp16",
                    devices=devices,
                    max_batch_size=64,
                    max_delay_ms=a.delay_ms,
                    preload_torch=torch is not None,
                    extra=("--batch-buckets", a.batch_buckets) if a.batch_buckets else (),
                )
            except Exception as exc:
                record({"case": "served", "devices": devices, "error": f"{type(exc).__name__}: {str(exc)[-600:]}"})
                continue
            try:
                for clients in a.gpu_clients:
                    row = {
                        "case": "served",
                        "devices": devices,
                        "protocol": "grpc",
                        "clients": clients,
                        "items_per_request": a.request_items,
                    }
                    row.update(
                        load(server, "grpc", "resnet50", x, "images", clients, a.seconds, a.client_procs, a.warmup)
                    )
                    row["mean_batch"] = round(server.mean_batch("resnet50"), 1)
                    record(row)
            except Exception as exc:
                record({"case": "served", "devices": devices, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            finally:
                server.stop()


def main() -> None:
    global OUT
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["cpu", "decode", "gpu"])
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
    p.add_argument("--out", default=os.environ.get("OUT"))
    a = p.parse_args()
    if a.out:
        OUT = Path(a.out)
        OUT.mkdir(parents=True, exist_ok=True)
    {"cpu": cmd_cpu, "decode": cmd_decode, "gpu": cmd_gpu}[a.command](a)


if __name__ == "__main__":
    main()
