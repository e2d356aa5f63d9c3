"""Shared fixtures: engine kinds of the conformance suite, small builder models, the oracle, a quiet root logger."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Before anything imports onnxruntime: the pinned build (1.32) writes a telemetry device id and event database
# (onnxruntime.db) under $XDG_CACHE_HOME, else ~/.cache, /Microsoft/DeveloperTools/.onnxruntime when it is
# imported, and the sandbox below only starts in pytest_configure. Subprocesses of the tests inherit this.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"

from amdinfer.testing import conformance

sys.path.insert(0, str(Path(__file__).parent))
import _sandbox

#: tests/installed/ is the smoke test of the installed wheel (`nox -s package` runs it outside the checkout).
collect_ignore = ["installed", "engines/example_plugin_ep"]

#: The user's amdinfer cache (path, contents) before the run; the run must leave it as it found it.
_USER_CACHE: tuple[Path, frozenset | None] | None = None
_SANDBOX: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Sandbox the run before anything is collected (doctests in the same invocation included)."""
    global _USER_CACHE, _SANDBOX
    if _SANDBOX is None:
        user = _sandbox.user_cache_dir()
        _USER_CACHE = (user, _sandbox.snapshot(user))
        _SANDBOX = _sandbox.enter()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if it touched the user's amdinfer cache; remove the sandbox."""
    if _USER_CACHE is not None:
        user, before = _USER_CACHE
        if _sandbox.snapshot(user) != before:
            session.config.get_terminal_writer().line(
                f"FAILED sandbox: the test run changed the user's amdinfer cache {user}", red=True
            )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _SANDBOX is not None and os.environ.get("AMDINFER_KEEP_TEST_SANDBOX") != "1":
        shutil.rmtree(_SANDBOX, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for name in conformance.selected_kinds():
        why = conformance.availability(name)
        lines.append(f"amdinfer engine {name}: " + ("available" if why is None else f"skipped ({why[:400]})"))
    return lines


@pytest.fixture(params=conformance.selected_kinds())
def engine_kind(request: pytest.FixtureRequest) -> str:
    """Each engine kind the suite runs over; unavailable kinds skip with the backend's reason."""
    why = conformance.availability(request.param)
    if why is not None:
        pytest.skip(why)
    return request.param


@pytest.fixture
def quiet_root_logger() -> Iterator[None]:
    """Root logger at ERROR for the test: onnxruntime.quantization logs advice there; keep test output readable."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    yield
    root.setLevel(level)
