"""Package-level promises: light import, public surface, docstrings with examples."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import amdinfer

PUBLIC_MODULES = [
    "amdinfer",
    "amdinfer.errors",
    "amdinfer.types",
    "amdinfer.model",
    "amdinfer.engines",
    "amdinfer.engines.base",
    "amdinfer.engines.ort",
    "amdinfer.engines.registry",
    "amdinfer.bench",
    "amdinfer.cli",
    "amdinfer.doctor",
    "amdinfer.profile",
    "amdinfer.stages",
    "amdinfer.preprocess",
    "amdinfer.postprocess",
    "amdinfer.results",
    "amdinfer.pipeline",
    "amdinfer.quantize",
    "amdinfer.verify",
    "amdinfer.reference",
    "amdinfer.cache",
    "amdinfer.pool",
    "amdinfer.engines.reference",
    "amdinfer.engines.migraphx",
    "amdinfer.testing.conformance",
]


def test_import_needs_only_numpy_and_onnx() -> None:
    code = (
        "import sys, amdinfer; "
        "bad = [m for m in ('onnxruntime', 'migraphx', 'torch', 'cv2', 'scipy') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_py_typed_ships() -> None:
    assert (Path(amdinfer.__file__).parent / "py.typed").exists()


@pytest.mark.parametrize("name", PUBLIC_MODULES)
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


def test_errors_inherit_builtins() -> None:
    assert issubclass(amdinfer.BackendUnavailableError, ImportError)
    assert issubclass(amdinfer.InputError, ValueError)
    assert issubclass(amdinfer.ModelError, ValueError)
    assert issubclass(amdinfer.OptionError, TypeError)
    for cls in (amdinfer.BackendUnavailableError, amdinfer.InputError, amdinfer.ModelError, amdinfer.OptionError):
        assert issubclass(cls, amdinfer.AmdinferError)


def test_registry_refuses_duplicates() -> None:
    with pytest.raises(amdinfer.OptionError, match="already registered"):
        amdinfer.register_backend("ort", "x:y")
