"""Issue 35 (item 3) in the serve env: the Python API checks every number against the one table of bounds before
anything loads, and the shared-memory refusal names the ``--shared-memory`` flag, what it was and what it takes.

The validator itself is tested without KServe in tests/test_serve_bounds.py; the repository's load endpoint in
test_repository.py.
"""

from __future__ import annotations

import importlib.util
import math

import pytest

if importlib.util.find_spec("kserve") is None:
    pytest.skip("needs the serve extra: run `nox -s serve`", allow_module_level=True)

from amdinfer.errors import InputError, OptionError
from amdinfer.serve import Server, serve, serve_repository


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_delay_ms": math.inf}, r"^max_delay_ms: got inf, expected a finite number in 0\.\.60000"),
        ({"max_delay_ms": math.nan}, r"^max_delay_ms: got nan"),
        ({"max_batch_size": 1 << 30}, r"^max_batch_size: got 1073741824, expected an int in 1\.\.4096"),
        ({"max_request_bytes": 1 << 40}, r"^max_request_bytes: got 1099511627776, expected an int in 1024\.\."),
        ({"batch_buckets": [1 << 30]}, r"^batch_buckets: got 1073741824 \(item 0\)"),
        ({"recipe": "yolo", "recipe_options": {"pipeline_threads": 1000}},
         r"^recipe_options: option 'pipeline_threads' got 1000, expected an int in 1\.\.256"),
        ({"workers_per_device": 1000}, r"^workers_per_device: got 1000, expected an int in 1\.\.\d+ \(4 per usable"),
    ],
)  # fmt: skip
def test_serve_checks_numbers_before_loading(kwargs: dict, match: str) -> None:
    # the model does not exist: a check that ran after loading would fail on the path instead
    with pytest.raises(OptionError, match=match):
        serve("/no/such/model.onnx", http_port=0, grpc_port=None, **kwargs)


def test_serve_repository_checks_its_numbers() -> None:
    with pytest.raises(OptionError, match=r"^max_request_bytes: got 12, expected an int in 1024\.\."):
        serve_repository("/no/such/folder", http_port=0, grpc_port=None, max_request_bytes=12)


@pytest.mark.parametrize(
    ("host", "shared_memory", "says"),
    [
        ("127.0.0.1", False, "it was started with --shared-memory off (Server(shared_memory=False))"),
        ("0.0.0.0", None, "it was started with --shared-memory auto, which allows it on a loopback --host only, and "
                          "this server listens on 0.0.0.0"),
    ],
)  # fmt: skip
def test_the_shared_memory_refusal_names_the_flag(host: str, shared_memory: bool | None, says: str) -> None:
    registry = Server(host=host, http_port=0, grpc_port=None, shared_memory=shared_memory)._shared_memory_registry()
    try:
        with pytest.raises(InputError) as info:
            registry.register("r", "/amdinfer-test", 0, 16)
    finally:
        registry.close()
    message = str(info.value)
    assert says in message, message
    assert "--shared-memory takes auto, on or off: start it with --shared-memory on" in message, message
