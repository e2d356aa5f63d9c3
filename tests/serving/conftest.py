"""Servers in subprocesses on loopback, on free ports; real clients (tritonclient) talk to them.

These tests need the ``serve`` and ``ray`` extras and run in their own nox session (``nox -s serve``,
tagged ``tests``); the main session passes ``--ignore=tests/serving``.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _servers import free_port, wait_until_ready

__all__ = ["RunningServer", "bytes_input", "free_port", "running_server"]

# Ray (2.60) turns token authentication on and, without a token in the environment, writes a new one to
# ~/.ray/auth_token. Give every Ray process of this session a fresh token through the environment instead,
# before any test module imports ray.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    http: str
    grpc: str
    log: Path

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (graceful shutdown) and the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
                raise AssertionError(
                    f"server did not stop on SIGTERM within {timeout} s; log:\n{self.log.read_text()}"
                ) from None
        return int(self.process.returncode)


@contextmanager
def running_server(argv: Sequence[str], http_port: int, grpc_port: int, log: Path) -> Iterator[RunningServer]:
    """Start ``python argv...`` and wait until ``/v2/health/ready`` answers; stop it at the end."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT, env=env)
    server = RunningServer(proc, f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", log)
    try:
        wait_until_ready(proc, http_port, log)
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from amdinfer.testing.models import tiny_cnn

    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    onnx.save(tiny_cnn(seed=3), path)
    return path


@pytest.fixture(scope="module")
def engine(tiny_path: Path) -> Iterator[Any]:
    """The served model run locally on ORT's CPU EP: the truth the served answers are compared with."""
    import amdinfer

    with amdinfer.load(tiny_path, providers=["CPUExecutionProvider"]) as e:
        yield e


def assert_output_in_region(result: Any, http: bool, region: str, nbytes: int) -> None:
    """The response of a request whose output ``logits`` went to shared-memory ``region`` (system or CUDA) names
    the region and holds no data for it (Triton's rule); ``http``: a tritonclient REST result, else gRPC."""
    meta = result.get_output("logits")
    if http:
        assert "data" not in meta and meta["parameters"]["shared_memory_region"] == region
        assert meta["parameters"]["shared_memory_byte_size"] == nbytes
    else:
        assert meta.parameters["shared_memory_region"].string_param == region
        assert list(result.get_response().raw_output_contents) == [b""]


def bytes_input(client: Any, items: list[bytes], name: str = "images", column: bool = False) -> Any:
    """A tritonclient ``BYTES`` input holding one encoded file per element, shape ``[N]`` (``[N, 1]`` with
    ``column``): REST (``tritonclient.http``) as binary data, gRPC as length-prefixed ``raw_input_contents``."""
    arr = np.empty(len(items), dtype=object)
    arr[:] = items
    if column:
        arr = arr[:, None]
    inp = client.InferInput(name, list(arr.shape), "BYTES")
    if client.__name__.endswith(".http"):
        inp.set_data_from_numpy(arr, binary_data=True)
    else:
        inp.set_data_from_numpy(arr)
    return inp
