"""Helpers shared by the tests that start `amdinfer serve` in a subprocess (tests/serving, tests/robustness)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path


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
