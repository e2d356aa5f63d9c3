"""amdinfer.serve and amdinfer.ray keep the package's promises: __all__, docstrings with examples, light import."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

MODULES = ["amdinfer.serve", "amdinfer.ray"]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist_and_are_documented_with_an_example(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no module docstring"
    for attr in module.__all__:
        obj = getattr(module, attr)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            doc = inspect.getdoc(obj) or ""
            assert doc, f"{name}.{attr} has no docstring"
            if obj.__module__.startswith("amdinfer"):
                assert "Example" in doc or ">>>" in doc, f"{name}.{attr}: docstring has no example"


def test_cli_and_batcher_do_not_import_kserve_or_ray() -> None:
    """`amdinfer --help`, the batcher and the workers load without KServe and Ray."""
    code = (
        "import sys; from amdinfer.cli import build_parser; build_parser(); "
        "from amdinfer.serve import DynamicBatcher, EngineWorker; import amdinfer.ray; "
        "bad = [m for m in ('kserve', 'ray', 'fastapi', 'grpc') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
