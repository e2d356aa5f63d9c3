"""CUDA shared memory against `amdinfer serve` on one GPU: correctness, then the rate against gRPC and system shm.

What it checks (one GPU: onnxruntime-gpu, torch, tritonclient, cuda-python):

1. ``amdinfer serve`` (ResNet-50 fp16 with a uint8 NHWC front, ``--providers cuda``) in a subprocess;
   ``tritonclient.utils.cuda_shared_memory`` makes an input and an output region on device 0 for each of
   REST and gRPC, registers them (``register_cuda_shared_memory``: the raw ``cudaIpcMemHandle_t``), writes a
   batch into the input region and infers with both tensors in device memory. The output read back from the
   device equals ``engine.run`` on the same model here (per-precision tolerance) and the plain gRPC answer;
   the status lists the regions and unregister empties it.
2. A closed loop of ``--clients`` threads (tritonclient's own clients, each with its own regions, writing its
   input into its region before every request) for ``--seconds``: requests/s and items/s for plain gRPC
   (tensor in the request), gRPC with system shared memory, gRPC and REST with CUDA shared memory. The server
   copies CUDA inputs device to host and outputs host to device (docs/serving.md), so the CUDA rows measure
   that path against sending the bytes.

A Markdown table is printed and ``serving_cuda_shm.json`` written under ``--out`` (default ``$OUT``).
``--cpu-smoke`` runs the same on the CPU with a tiny CNN: no GPU and no cuda-python, so the CUDA regions are
POSIX shared-memory blocks opened by the server's test stand-in (``AMDINFER_DEVICE_IPC=host``); it says so.

    python benchmarks/serving_cuda_shm.py --out /tmp/out                 # the H200, < 3 minutes
    python benchmarks/serving_cuda_shm.py --cpu-smoke --seconds 1        # any machine
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving as sv  # ServerProcess, resnet50_uint8, uint8_front

import amdinfer
from amdinfer.testing import models

DEVICE = 0


class CudaRegions:
    """Device memory through ``tritonclient.utils.cuda_shared_memory`` (cuda-python)."""

    label = "device memory (tritonclient.utils.cuda_shared_memory)"

    def __init__(self) -> None:
        import tritonclient.utils.cuda_shared_memory as cudashm

        self.m = cudashm

    def create(self, name: str, nbytes: int) -> Any:
        return self.m.create_shared_memory_region(name, nbytes, DEVICE)

    def raw_handle(self, h: Any) -> bytes:
        return self.m.get_raw_handle(h)

    def put(self, h: Any, x: np.ndarray) -> None:
        self.m.set_shared_memory_region(h, [x])

    def get(self, h: Any, dtype: Any, shape: list[int]) -> np.ndarray:
        return np.array(self.m.get_contents_as_numpy(h, dtype, shape))

    def destroy(self, h: Any) -> None:
        self.m.destroy_shared_memory_region(h)


class HostRegions:
    """The server's test stand-in (``--cpu-smoke``): a "handle" names a POSIX shared-memory block."""

    label = "host stand-in (AMDINFER_DEVICE_IPC=host), no GPU"

    def create(self, name: str, nbytes: int) -> Any:
        from multiprocessing import shared_memory

        return shared_memory.SharedMemory(create=True, size=nbytes)

    def raw_handle(self, h: Any) -> bytes:
        from amdinfer.serve._cuda_shm import host_handle

        return base64.b64encode(host_handle(h.name))

    def put(self, h: Any, x: np.ndarray) -> None:
        h.buf[: x.nbytes] = x.tobytes()

    def get(self, h: Any, dtype: Any, shape: list[int]) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=h.buf).copy()

    def destroy(self, h: Any) -> None:
        h.close()
        h.unlink()


class Client:
    """One client: a tritonclient connection and, for the shm modes, its own input and output regions."""

    def __init__(self, server: sv.ServerProcess, mode: str, regions: Any, x: np.ndarray, outs: list, tag: str) -> None:
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient
        import tritonclient.utils.shared_memory as sysshm

        self.mode, self.regions, self.x, self.outs = mode, regions, x, outs
        self.mod = httpclient if mode.startswith("rest") else grpcclient
        address = f"127.0.0.1:{server.http if mode.startswith('rest') else server.grpc}"
        self.client = self.mod.InferenceServerClient(address)
        out_bytes = sum(n for _, n, _ in outs)
        self.names, self.handles = [f"in-{tag}", f"out-{tag}"], []
        if mode.endswith("cuda-shm"):
            for name, n in zip(self.names, (x.nbytes, out_bytes), strict=True):
                h = regions.create(name, n)
                self.handles.append(h)
                self.client.register_cuda_shared_memory(name, regions.raw_handle(h), DEVICE, n)
        elif mode.endswith("system-shm"):
            self.sys = sysshm
            for name, n in zip(self.names, (x.nbytes, out_bytes), strict=True):
                self.handles.append(sysshm.create_shared_memory_region(name, f"/{name}", n))
                self.client.register_system_shared_memory(name, f"/{name}", n)
        self.inputs = [self.mod.InferInput("images", list(x.shape), sv._DTYPES[x.dtype])]
        self.outputs = []
        if self.handles:
            self.inputs[0].set_shared_memory(self.names[0], x.nbytes)
            offset = 0
            for name, n, _ in outs:
                out = self.mod.InferRequestedOutput(name)
                out.set_shared_memory(self.names[1], n, offset=offset)
                self.outputs.append(out)
                offset += n
        else:
            self.inputs[0].set_data_from_numpy(x)

    def write_input(self) -> None:
        if self.mode.endswith("cuda-shm"):
            self.regions.put(self.handles[0], self.x)
        elif self.mode.endswith("system-shm"):
            self.sys.set_shared_memory_region(self.handles[0], [self.x])

    def infer(self) -> Any:
        self.write_input()
        return self.client.infer("m", self.inputs, outputs=self.outputs or None)

    def results(self, result: Any) -> dict[str, np.ndarray]:
        """Each output: read back from the output region (shm modes) or from the response."""
        if not self.handles:
            return {name: result.as_numpy(name) for name, _, _ in self.outs}
        got, offset = {}, 0
        for name, n, (dtype, shape) in self.outs:
            if self.mode.endswith("cuda-shm"):
                whole = self.regions.get(self.handles[1], np.uint8, [sum(k for _, k, _ in self.outs)])
            else:
                whole = self.sys.get_contents_as_numpy(self.handles[1], np.uint8, [sum(k for _, k, _ in self.outs)])
            got[name] = whole[offset : offset + n].view(dtype).reshape(shape)
            offset += n
        return got

    def close(self) -> None:
        for h in self.handles:
            (self.regions.destroy if self.mode.endswith("cuda-shm") else self.sys.destroy_shared_memory_region)(h)
        if self.mode.endswith("cuda-shm"):
            for name in self.names:
                self.client.unregister_cuda_shared_memory(name)
        elif self.handles:
            for name in self.names:
                self.client.unregister_system_shared_memory(name)
        self.client.close()


def check(server: sv.ServerProcess, regions: Any, x: np.ndarray, ref: dict, outs: list, tol: float) -> list:
    """Both protocols: CUDA regions in and out equal engine.run and the plain gRPC answer; status; unregister."""
    rows = []
    plain = Client(server, "grpc", regions, x, outs, "plain")
    want_served = plain.results(plain.infer())
    plain.close()
    for mode in ("rest-cuda-shm", "grpc-cuda-shm"):
        c = Client(server, mode, regions, x, outs, f"check-{mode}")
        got = c.results(c.infer())
        status = c.client.get_cuda_shared_memory_status()
        listed = sorted(s["name"] for s in status) if isinstance(status, list) else sorted(status.regions)
        assert listed == sorted(c.names), (mode, listed)
        for name, _, _ in outs:
            scale = float(np.abs(ref[name]).max()) or 1.0
            diff = float(np.abs(got[name].astype(np.float64) - ref[name]).max())
            same = float(np.abs(got[name].astype(np.float64) - want_served[name]).max())
            row = {"case": "check", "mode": mode, "output": name, "max_abs_diff_vs_engine": diff}
            row.update(scale=scale, max_abs_diff_vs_plain_grpc=same, ok=diff <= tol * scale and same <= tol * scale)
            rows.append(row)
            print(row, flush=True)
            assert row["ok"], f"{mode}: output {name!r} differs from engine.run by {diff} (scale {scale}, tol {tol})"
        c.close()
        status = c.mod.InferenceServerClient(f"127.0.0.1:{server.http if mode.startswith('rest') else server.grpc}")
        left = status.get_cuda_shared_memory_status()
        assert (left if isinstance(left, list) else list(left.regions)) == [], left
    return rows


def rate(server: sv.ServerProcess, mode: str, regions: Any, x: np.ndarray, outs: list, a: argparse.Namespace) -> dict:
    """``a.clients`` closed-loop threads for ``a.seconds`` after ``a.warmup``: requests and items per second."""
    done, errors = [0] * a.clients, [0] * a.clients
    start = time.perf_counter() + 1.0  # the clients register their regions meanwhile
    measure_from, stop_at = start + a.warmup, start + a.warmup + a.seconds

    def loop(i: int) -> None:  # tritonclient's REST client (gevent) stays on the thread that made it
        client = Client(server, mode, regions, x, outs, f"{mode}-{i}-{os.getpid()}")
        try:
            while (now := time.perf_counter()) < stop_at:
                try:
                    client.infer()
                    done[i] += now >= measure_from
                except Exception as exc:
                    errors[i] += 1
                    if errors[i] == 1:
                        print(f"{mode} client {i}: {str(exc)[:300]}", file=sys.stderr, flush=True)
        finally:
            client.close()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    n = sum(done)
    row = {"case": "rate", "mode": mode, "clients": a.clients, "items_per_request": len(x), "requests": n}
    return {**row, "errors": sum(errors), "req_s": round(n / a.seconds, 1), "items_s": round(n * len(x) / a.seconds, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="CPU, tiny CNN, the server's host stand-in for CUDA")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--items", type=int, default=8, help="images per request")
    p.add_argument("--out", default=os.environ.get("OUT"))
    a = p.parse_args()
    t0 = time.perf_counter()
    smoke = a.cpu_smoke
    provider, precision, tol = ("cpu", "fp32", 1e-5) if smoke else ("cuda", "fp16", 2e-2)
    if not smoke:
        import torch  # noqa: F401  (before onnxruntime: its CUDA libraries)
    regions = HostRegions() if smoke else CudaRegions()
    if smoke:
        print("--cpu-smoke: no GPU; CUDA regions are host blocks opened by AMDINFER_DEVICE_IPC=host", flush=True)
    size = 32 if smoke else 224
    folder = Path(tempfile.mkdtemp(prefix="amdinfer-cuda-shm-"))
    path = folder / "model.onnx"
    onnx.save(sv.uint8_front(models.tiny_cnn(), size) if smoke else sv.resnet50_uint8(), path)
    x = np.random.default_rng(0).integers(0, 255, (a.items, size, size, 3), dtype=np.uint8)
    with amdinfer.load(path, providers=[provider], precision=precision, device=DEVICE) as engine:
        ref = {k: np.asarray(v, np.float64) for k, v in engine.run(x).items()}
        outs = [(k, v.nbytes, (v.dtype, list(v.shape))) for k, v in engine.run(x).items()]
    env = {"AMDINFER_DEVICE_IPC": "host"} if smoke else {}
    server = sv.ServerProcess(path, "m", providers=provider, precision=precision, devices=str(DEVICE),
                              max_batch_size=64, max_delay_ms=2, preload_torch=not smoke, env=env)  # fmt: skip
    setup = {"case": "setup", "provider": provider, "precision": precision, "regions": regions.label}
    rows: list[dict[str, Any]] = [{**setup, "model": "tiny_cnn uint8" if smoke else "resnet50 fp16 uint8"}]
    try:
        rows += check(server, regions, x, ref, outs, tol)
        for mode in ("grpc", "grpc-system-shm", "grpc-cuda-shm", "rest-cuda-shm"):
            rows.append(rate(server, mode, regions, x, outs, a))
            print(rows[-1], flush=True)
    finally:
        server.stop()
    rows.append({"case": "total", "seconds": round(time.perf_counter() - t0, 1)})
    print("\n| mode | clients | items/request | requests/s | items/s | errors |\n|---|---|---|---|---|---|")
    for r in rows:
        if r["case"] == "rate":
            cells = [r[k] for k in ("mode", "clients", "items_per_request", "req_s", "items_s", "errors")]
            print("| " + " | ".join(str(c) for c in cells) + " |")
    print(f"\nall outputs equal engine.run (tol {tol} x max|ref|); {rows[-1]['seconds']} s in all")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "serving_cuda_shm.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
