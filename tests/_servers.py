"""Helpers shared by the tests that start `amdinfer serve` in a subprocess (tests/serving, tests/robustness)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_ready(proc: subprocess.Popen[bytes], http_port: int, log: Path, timeout: float = 120) -> None:
    """Poll ``/v2/health/ready`` until it answers 200; fail with the server's log if it exits or never does."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}; log:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"server not ready after {timeout:.0f} s; log:\n{log.read_text()}")
        time.sleep(0.2)


class _Addresses(Protocol):
    http: str  # host:port of the REST endpoint
    grpc: str  # host:port of the gRPC endpoint


def concurrent_infer(
    server: _Addresses,
    model: str,
    input_name: str,
    output_name: str,
    inputs: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    *,
    grpc_clients: int,
    http_clients: int,
    per_client: int,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> tuple[list[bool], list[Exception]]:
    """Run ``grpc_clients`` gRPC and ``http_clients`` REST asyncio clients at once, each on its own connection.

    Client ``k`` of each protocol (numbered from 0) sends ``per_client`` requests, request ``i`` being
    ``inputs[(k + i) % len(inputs)]``, and compares output ``output_name`` with the matching ``want`` by
    ``np.allclose``. Returns one bool per answer received and every exception a client stopped on; the
    caller asserts on both (needs tritonclient's aio clients: the serve extra).
    """
    from tritonclient.grpc import aio as grpc_aio
    from tritonclient.http import aio as http_aio
    from tritonclient.utils import np_to_triton_dtype

    done: list[bool] = []
    errors: list[Exception] = []

    from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE

    # gRPC channels of one process share their connections (the global subchannel pool) unless told not to: a
    # local pool gives each client its own TCP connection, as "each on its own connection" says
    own_connection = [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.use_local_subchannel_pool", 1),
    ]

    async def client(aio: Any, url: str, k: int) -> None:
        c = (
            aio.InferenceServerClient(url, channel_args=own_connection)
            if aio is grpc_aio
            else aio.InferenceServerClient(url)
        )
        try:
            for i in range(per_client):
                j = (k + i) % len(inputs)
                inp = aio.InferInput(input_name, list(inputs[j].shape), np_to_triton_dtype(inputs[j].dtype))
                inp.set_data_from_numpy(inputs[j])
                r = await c.infer(model, [inp])
                done.append(np.allclose(r.as_numpy(output_name), want[j], rtol=rtol, atol=atol))
        except Exception as exc:
            errors.append(exc)
        finally:
            await c.close()

    async def main() -> None:
        await asyncio.gather(
            *(client(grpc_aio, server.grpc, k) for k in range(grpc_clients)),
            *(client(http_aio, server.http, k) for k in range(http_clients)),
        )

    asyncio.run(main())
    return done, errors
