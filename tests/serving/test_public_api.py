"""amdinfer.serve and amdinfer.ray keep the package's promises: __all__, docstrings with examples, light import.

Each check runs in a subprocess: KServe's gRPC protos and tritonclient's (imported by the other test modules)
register the same names in protobuf's default pool, so they cannot share one process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

DOCUMENTED = """
import importlib, inspect, sys
module = importlib.import_module(sys.argv[1])
assert module.__doc__, f"{sys.argv[1]} has no module docstring"
for attr in module.__all__:
    obj = getattr(module, attr)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        doc = inspect.getdoc(obj) or ""
        assert doc, f"{sys.argv[1]}.{attr} has no docstring"
        if obj.__module__.startswith("amdinfer"):
            assert "Example" in doc or ">>>" in doc, f"{sys.argv[1]}.{attr}: docstring has no example"
print(len(module.__all__))
"""


@pytest.mark.parametrize("name", ["amdinfer.serve", "amdinfer.ray"])
def test_all_names_exist_and_are_documented_with_an_example(name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", DOCUMENTED, name], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert int(proc.stdout.split()[-1]) >= 3


def test_cli_and_batcher_do_not_import_kserve_or_ray() -> None:
    """`amdinfer --help`, the batcher and the workers load without KServe and Ray."""
    code = (
        "import sys; from amdinfer.cli import build_parser; build_parser(); "
        "from amdinfer.serve import DynamicBatcher, EngineWorker; import amdinfer.ray; "
        "bad = [m for m in ('kserve', 'ray', 'fastapi', 'grpc') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
