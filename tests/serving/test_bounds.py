"""Issue 35 (item 3) in the serve env: the Python API checks every number against the one table of bounds before
anything loads, and the shared-memory refusal names the ``--shared-memory`` flag, what it was and what it takes.

The validator itself is tested without KServe in tests/test_serve_bounds.py; the repository's load endpoint in
test_repository.py. ``amdinfer.serve`` imports KServe's gRPC protos, which cannot share a process with
tritonclient's (the other serving tests' client): the calls run in one subprocess, and each test reads its answer.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap

import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)

SERVE_CASES = {
    "max_delay_ms inf": ({"max_delay_ms": "inf"}, r"^max_delay_ms: got inf, expected a finite number in 0\.\.60000"),
    "max_delay_ms nan": ({"max_delay_ms": "nan"}, r"^max_delay_ms: got nan"),
    "max_batch_size": ({"max_batch_size": 1 << 30}, r"^max_batch_size: got 1073741824, expected an int in 1\.\.4096"),
    "max_request_bytes": (
        {"max_request_bytes": 1 << 40},
        r"^max_request_bytes: got 1099511627776, expected an int in 1024\.\.",
    ),
    "batch_buckets": ({"batch_buckets": [1 << 30]}, r"^batch_buckets: got 1073741824 \(item 0\)"),
    "pipeline_threads": (
        {"recipe": "yolo", "recipe_options": {"pipeline_threads": 1000}},
        r"^recipe_options: option 'pipeline_threads' got 1000, expected an int in 1\.\.256",
    ),
    "workers_per_device": (
        {"workers_per_device": 1000},
        r"^workers_per_device: got 1000, expected an int in 1\.\.\d+ \(4 per usable",
    ),
}
SHM_CASES = {
    "off": ("127.0.0.1", False, "it was started with --shared-memory off (Server(shared_memory=False))"),
    "auto": (
        "0.0.0.0",
        None,
        "it was started with --shared-memory auto, which allows it on a loopback --host only, and this server "
        "listens on 0.0.0.0",
    ),
}

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from amdinfer.errors import InputError, OptionError
    from amdinfer.serve import Server, serve, serve_repository

    serve_cases, shm_cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    out = {}
    for name, kwargs in serve_cases.items():
        kwargs = {k: float(v) if v in ("inf", "nan") else v for k, v in kwargs.items()}
        try:
            # the model does not exist: a check that ran after loading would fail on the path instead
            serve("/no/such/model.onnx", http_port=0, grpc_port=None, **kwargs)
            out[name] = "no error"
        except OptionError as exc:
            out[name] = "OptionError " + str(exc)
    try:
        serve_repository("/no/such/folder", http_port=0, grpc_port=None, max_request_bytes=12)
        out["repository"] = "no error"
    except OptionError as exc:
        out["repository"] = "OptionError " + str(exc)
    for name, (host, shared_memory) in shm_cases.items():
        registry = Server(host=host, http_port=0, grpc_port=None, shared_memory=shared_memory)._shared_memory_registry()
        try:
            registry.register("r", "/amdinfer-test", 0, 16)
            out["shm " + name] = "no error"
        except InputError as exc:
            out["shm " + name] = "InputError " + str(exc)
        finally:
            registry.close()
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def said() -> dict[str, str]:
    serve_cases = {name: kwargs for name, (kwargs, _) in SERVE_CASES.items()}
    shm_cases = {name: (host, shm) for name, (host, shm, _) in SHM_CASES.items()}
    argv = [sys.executable, "-c", _SCRIPT, json.dumps(serve_cases), json.dumps(shm_cases)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(SERVE_CASES))
def test_serve_checks_numbers_before_loading(said: dict[str, str], case: str) -> None:
    kind, _, message = said[case].partition(" ")
    assert kind == "OptionError", said[case]
    assert re.search(SERVE_CASES[case][1], message), message


def test_serve_repository_checks_its_numbers(said: dict[str, str]) -> None:
    kind, _, message = said["repository"].partition(" ")
    assert kind == "OptionError" and message.startswith("max_request_bytes: got 12, expected an int in 1024.."), message


@pytest.mark.parametrize("case", sorted(SHM_CASES))
def test_the_shared_memory_refusal_names_the_flag(said: dict[str, str], case: str) -> None:
    kind, _, message = said["shm " + case].partition(" ")
    assert kind == "InputError", said["shm " + case]
    assert SHM_CASES[case][2] in message, message
    assert "--shared-memory takes auto, on or off: start it with --shared-memory on" in message, message
