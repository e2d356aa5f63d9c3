"""The process supervisor of ``amdinfer serve``: several server processes on shared ports, started and stopped
together."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import OptionError
from ._bounds import check
from ._model_folder import REPOSITORY_STATE_ENV
from ._shm import REGISTRY_ENV

__all__ = ["PROCESS_ENV", "check_workers_per_device", "process_slot", "serve_processes"]

logger = logging.getLogger("amdinfer.serve")

#: set by :func:`serve_processes` in each child: ``"J/N"``, the child's index J (0-based) among the N server
#: processes of its device
PROCESS_ENV = "AMDINFER_SERVE_PROCESS"


def process_slot() -> tuple[int, int] | None:
    """``(index, count)`` of this server process among its device's, when :func:`serve_processes` started it
    with several per device; else ``None``.

    Example:
        >>> import os
        >>> os.environ[PROCESS_ENV] = "1/2"; process_slot()
        (1, 2)
        >>> del os.environ[PROCESS_ENV]; process_slot() is None
        True
    """
    text = os.environ.get(PROCESS_ENV, "")
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or int(count) < 2:
        return None
    return int(index), int(count)


def check_workers_per_device(workers_per_device: Any) -> int:
    """``workers_per_device`` if it is an int in ``1..min(64, 4 x usable cores)`` (:mod:`amdinfer.serve._bounds`).

    Raises:
        OptionError: anything else (a bool too).

    Example:
        >>> check_workers_per_device(2)
        2
        >>> check_workers_per_device(1000)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: workers_per_device: got 1000, expected an int in 1... (4 per usable core, ...
    """
    return int(check("workers_per_device", workers_per_device))


def _forward(stream: Any, last: list[str]) -> None:
    """Copy a child's stderr to ours line by line, keeping its last non-empty line (its error, if it fails)."""
    out = getattr(sys.stderr, "buffer", None)
    for line in iter(stream.readline, b""):
        if line.strip():
            last[0] = line.decode(errors="replace").strip()
        if out is not None:
            out.write(line)
            out.flush()
        else:
            sys.stderr.write(line.decode(errors="replace"))
    stream.close()


class _Children:
    """The running server processes: started one by one, each with a thread forwarding its stderr."""

    def __init__(self, child_argv: Sequence[Sequence[str]]) -> None:
        self.argv = child_argv
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lasts: list[list[str]] = []
        self.readers: list[threading.Thread] = []
        self.stopping = False

    def start(self, argv: Sequence[str], env: dict[str, str]) -> None:
        child = subprocess.Popen([sys.executable, "-m", "amdinfer", *argv], env=env, stderr=subprocess.PIPE)
        self.processes.append(child)
        self.lasts.append([""])
        reader = threading.Thread(target=_forward, args=(child.stderr, self.lasts[-1]), daemon=True)
        reader.start()
        self.readers.append(reader)

    def stop(self, *_: object) -> None:
        """SIGTERM to every child still running (a signal handler too)."""
        self.stopping = True
        for child in self.processes:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def _report(self, i: int) -> None:
        child, argv = self.processes[i], self.argv[i]
        device = argv[argv.index("--devices") + 1] if "--devices" in argv else "?"
        logger.error(
            "server process %d of %d (device %s, pid %d) exited with code %d: %s; stopping the others",
            i + 1,
            len(self.processes),
            device,
            child.pid,
            child.returncode,
            self.lasts[i][0] or "no message",
        )

    def watch(self) -> int:
        """Wait until every child exits; the first failure stops the others. The exit code to return."""
        failure: int | None = None
        while True:
            running = any(c.poll() is None for c in self.processes)
            failed = [i for i, c in enumerate(self.processes) if c.poll() not in (None, 0)]
            if not self.stopping and failed:
                failure = self.processes[failed[0]].returncode
                self.readers[failed[0]].join(5)
                self._report(failed[0])
                self.stop()  # one child failed (port taken, model error): stop the others
            if not running:
                break
            time.sleep(0.2)
        for reader in self.readers:
            reader.join(5)
        # the failure reported, not the SIGTERM its siblings got; a child killed by signal S: 128 + S
        code = failure if failure is not None else next((c.returncode for c in self.processes if c.returncode), 0)
        return code if code >= 0 else 128 - code

    def reap(self) -> None:
        """Stop and wait for every child (killed after 60 s): a supervisor that fails leaves none behind."""
        self.stop()
        for child in self.processes:
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()


def serve_processes(child_argv: Sequence[Sequence[str]], *, workers_per_device: int = 1) -> int:
    """Run several server processes on shared ports (``SO_REUSEPORT``) and supervise them.

    Each child is ``python -m amdinfer serve ... --devices D --reuse-port``: its own event loop, its own
    KServe stack and engine, so request decoding scales with the processes instead of sharing one GIL; the
    kernel spreads connections over the processes listening. ``child_argv`` lists the children device by
    device, ``workers_per_device`` consecutive ones each; each child learns its index on its device through
    ``AMDINFER_SERVE_PROCESS`` (``J/N``, see :func:`process_slot`) and, with several per device, labels its
    worker ``deviceD-pJ`` in the metrics and names itself in its start line. ``/metrics`` sums every process
    (prometheus_client multiprocess mode, in a temporary folder); shared-memory regions registered through
    any process are seen by all (one registry folder), and so are model-repository loads and unloads (one
    state folder). SIGINT/SIGTERM go to every child; a child that exits with an error (at start: port
    taken, a model that does not load) stops the others, and its last stderr line is logged as the reason.

    Args:
        child_argv: the ``amdinfer`` arguments of each child (after ``python -m amdinfer``).
        workers_per_device: how many consecutive children serve the same device.

    Returns:
        0 when every child stopped cleanly, else the first non-zero exit code.

    Raises:
        OptionError: ``workers_per_device`` is not an int within its bounds (:mod:`amdinfer.serve._bounds`)
            dividing the number of children.

    Example:
        >>> serve_processes([])
        0
    """
    n = check_workers_per_device(workers_per_device)
    if len(child_argv) % n:
        raise OptionError(f"workers_per_device: got {n} for {len(child_argv)} children, expected a divisor")
    if not child_argv:
        return 0
    with tempfile.TemporaryDirectory(prefix="amdinfer-serve-") as folder:
        os.mkdir(metrics := os.path.join(folder, "metrics"))
        shared = {  # metrics summed over the processes; shm regions and repository loads through any of them
            "PROMETHEUS_MULTIPROC_DIR": metrics,
            REGISTRY_ENV: os.path.join(folder, "shm"),
            REPOSITORY_STATE_ENV: os.path.join(folder, "repository"),
        }
        children = _Children(child_argv)
        previous = {sig: signal.signal(sig, children.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for i, argv in enumerate(child_argv):
                children.start(argv, {**os.environ, **shared, PROCESS_ENV: f"{i % n}/{n}"})
            return children.watch()
        finally:
            children.reap()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
