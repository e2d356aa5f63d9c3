"""``python benchmarks/serving.py stream``: Triton's ``ModelStreamInfer`` against unary ``ModelInfer`` calls.

One server (``amdinfer serve`` with batching), one model, the same request ``--requests`` times each way, for
each window ``W`` of ``--clients``:

* ``unary``: ``W`` asyncio callers on one gRPC channel, each awaiting its ``ModelInfer`` before the next
  (``W`` requests in flight);
* ``stream``: one ``ModelStreamInfer`` stream with ``W`` requests in flight (the next is written when an
  answer arrives), each answer parsed as the unary client parses its own and checked for its request's id.

The rows run unary, stream, stream, unary (drift on a shared host falls on both alike); each gives requests/s,
items/s, p50/p99 latency (send to answer) and errors; a last row per window gives ``ratio``: the stream rows'
mean requests/s over the unary rows'. Imported by
``benchmarks/serving.py``, which owns the server process and the result rows.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from amdinfer.testing import models

_OPTS = [("grpc.max_send_message_length", 1 << 30), ("grpc.max_receive_message_length", 1 << 30)]
_DTYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float16): "FP16", np.dtype(np.uint8): "UINT8"}


def _request(model: str, name: str, x: np.ndarray) -> Any:
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb

    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=_DTYPES[x.dtype], shape=list(x.shape))
    return pb.ModelInferRequest(model_name=model, inputs=[tensor], raw_input_contents=[x.tobytes()])


def _summary(lat: list[float], errors: int, wall: float, items: int) -> dict[str, Any]:
    lat = sorted(lat)
    n = len(lat)
    return {
        "requests": n,
        "errors": errors,
        "req_s": round(n / wall, 1),
        "items_s": round(n * items / wall, 1),
        "p50_ms": round(1000 * lat[n // 2], 2) if n else None,
        "p99_ms": round(1000 * lat[min(n - 1, int(n * 0.99))], 2) if n else None,
    }


async def _unary(address: str, request: Any, total: int, window: int) -> tuple[list[float], int, float]:
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2_grpc as pbg

    lat: list[float] = []
    errors = 0
    sent = iter(range(total))
    async with grpc.aio.insecure_channel(address, options=_OPTS) as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)

        async def caller() -> None:
            nonlocal errors
            for _ in sent:
                t0 = time.perf_counter()
                try:
                    await stub.ModelInfer(request)
                    lat.append(time.perf_counter() - t0)
                except grpc.aio.AioRpcError:
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(window)))
        return lat, errors, time.perf_counter() - t0


async def _stream(address: str, request: Any, total: int, window: int) -> tuple[list[float], int, float]:
    import grpc
    from kserve.protocol.grpc import grpc_predict_v2_pb2 as pb

    from amdinfer.serve._stream import messages

    answer_type = messages()["ModelStreamInferResponse"]
    lat: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(address, options=_OPTS) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=answer_type.FromString,
        )()
        room = asyncio.Semaphore(window)
        started: list[float] = []

        async def write() -> None:
            for i in range(total):
                await room.acquire()
                request.id = f"s-{i}"
                started.append(time.perf_counter())
                await call.write(request)
            await call.done_writing()

        t0 = time.perf_counter()
        writer = asyncio.create_task(write())
        for i in range(total):
            answer = await call.read()
            lat.append(time.perf_counter() - started[i])
            room.release()
            inner = pb.ModelInferResponse.FromString(answer.infer_response)  # what the unary client parses
            if answer.error_message or inner.id != f"s-{i}":
                errors += 1
        await writer
        return lat, errors, time.perf_counter() - t0


def run(a: argparse.Namespace, server_process: Any, record: Any) -> None:
    """The ``stream`` command (``server_process``: serving.py's ``ServerProcess``; ``record``: its row sink)."""
    provider = a.provider
    precision = "fp32" if provider == "cpu" else "fp16"
    name = a.models[0]
    proto = {"tiny": models.tiny_cnn, "resnet50": models.resnet50}[name]()
    size = 32 if name == "tiny" else 224
    x = np.random.default_rng(0).random((a.request_items, 3, size, size), dtype=np.float32)
    path = Path(tempfile.mkdtemp(prefix="amdinfer-stream-")) / f"{name}.onnx"
    onnx.save(proto, path)
    server = server_process(
        path, name, providers=provider, precision=precision, devices="0", max_batch_size=64, max_delay_ms=a.delay_ms
    )
    try:
        address = f"127.0.0.1:{server.grpc}"
        request = _request(name, proto.graph.input[0].name, x)
        asyncio.run(_unary(address, request, min(200, a.requests), 8))  # warm-up: connections, batch sizes
        for window in a.clients:
            rates: dict[str, list[float]] = {"unary": [], "stream": []}
            for kind in ("unary", "stream", "stream", "unary"):
                fn = _unary if kind == "unary" else _stream
                row = {"model": name, "provider": provider, "mode": kind, "window": window, "items": a.request_items}
                row.update(_summary(*asyncio.run(fn(address, request, a.requests, window)), a.request_items))
                rates[kind].append(row["req_s"])
                record(row)
            ratio = statistics.mean(rates["stream"]) / statistics.mean(rates["unary"])
            record({"model": name, "provider": provider, "window": window, "ratio": round(ratio, 3)})
    finally:
        server.stop()
