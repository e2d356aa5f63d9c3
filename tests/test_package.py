"""Package-level promises: light import, public surface, docstrings with examples."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
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
    "amdinfer.pipeline.fuse",
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
    "amdinfer.testing.squares",
    "amdinfer.metrics",
    "amdinfer.bundle",
    "amdinfer.tasks",
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


#: Largest module (lines) and function (lines from ``def`` to its last line, docstring included) in amdinfer/.
MAX_MODULE_LINES = 520
MAX_FUNCTION_LINES = 85
#: Modules and functions allowed over those sizes: path under amdinfer/ -> names (``"<module>"``: the module).
SIZE_EXCEPTIONS: dict[str, dict[str, str]] = {
    # Model builders: each writes one ONNX graph node by node, top to bottom; splitting them hides the network.
    "testing/models.py": {
        "<module>": "a zoo of offline model builders",
        "yolov8": "model builder",
        "yolov5": "model builder",
        "transformer_encoder": "model builder",
        "unet": "model builder",
    },
    # The one-call recipe: its docstring documents every option (tasks, tiles, int8, fuse, ...); the body is short.
    "recipes/_yolo.py": {"yolo": "public recipe, one documented argument per option"},
}


def test_module_and_function_sizes() -> None:
    root = Path(amdinfer.__file__).parent
    too_big = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        allowed = SIZE_EXCEPTIONS.get(rel, {})
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and "<module>" not in allowed:
            too_big.append(f"{rel}: {lines} lines (module)")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES and node.name not in allowed:
                    too_big.append(f"{rel}:{node.lineno} {node.name}: {size} lines (function)")
    assert not too_big, (
        f"over {MAX_MODULE_LINES} lines per module / {MAX_FUNCTION_LINES} per function (split them, or add a "
        "reasoned entry to SIZE_EXCEPTIONS):\n" + "\n".join(too_big)
    )


def _imports() -> dict[str, set[str]]:
    """Every module of the package -> the package modules it imports, function-level imports included.

    ``from .x import y`` counts as importing ``x.y`` when that is a module, else ``x``. The parent packages
    Python runs on the way (``amdinfer/__init__.py`` for any ``amdinfer.*``) are not counted: they are not a
    dependency the module chose.
    """
    root = Path(amdinfer.__file__).parent
    modules: dict[str, tuple[Path, bool]] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if package else name.split(".")[:-1]
                    base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
                wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in wanted:
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in modules and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def test_no_import_cycles() -> None:
    graph = _imports()
    cycles = []
    for start in graph:  # a depth-first search from every module; the package is small
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not cycles, "import cycles:\n" + "\n".join(sorted(set(cycles))[:10])


def test_layers_engines_below_quantize_and_backend_folders_private() -> None:
    """No module under engines/ imports amdinfer.quantize (it sits above them); nothing outside a backend's
    folder (engines/ort/) imports that folder's private modules."""
    graph = _imports()
    upward = sorted(
        f"{m} imports {t}"
        for m, ts in graph.items()
        if m.startswith("amdinfer.engines")
        for t in ts
        if t.startswith("amdinfer.quantize")
    )
    assert not upward, upward
    folders = {m.rsplit(".", 1)[0] for m in graph if m.startswith("amdinfer.engines.") and m.count(".") == 3}
    private = sorted(
        f"{m} imports {t}"
        for m, ts in graph.items()
        for t in ts
        for folder in folders
        if t.startswith(folder + "._") and not m.startswith(folder + ".") and m != folder
    )
    assert not private, private
    assert "amdinfer.engines.ort" in folders  # the check sees the backend folders


#: The package's rooms (its top-level modules and folders), bottom to top: a room imports only rooms of its own
#: layer or below. docs/architecture.md draws the same layers.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "types"),
    ("_support", "model", "reference", "results", "cache", "_certificate"),
    ("engines", "stages"),
    ("preprocess", "postprocess", "pool", "bench", "profile", "doctor", "metrics", "tasks"),
    ("quantize", "bundle"),
    ("_load", "verify", "testing"),
    ("pipeline",),
    ("text", "recipes"),
    ("cli", "serve", "ray", "__init__", "__main__"),
)
#: A handful of private rooms at the root; everything else lives in a package.
ROOT_PRIVATE_ROOMS = {"_load", "_support", "_certificate"}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_layers_every_room_imports_only_its_layer_or_below() -> None:
    graph = _imports()
    layer = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    rooms = {_room(m) for m in graph}
    assert rooms <= set(layer), f"rooms without a layer (add them to LAYERS): {sorted(rooms - set(layer))}"
    upward = sorted(f"{m} imports {t}" for m, ts in graph.items() for t in ts if layer[_room(t)] > layer[_room(m)])
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)
    root = Path(amdinfer.__file__).parent
    private = {p.stem if p.suffix else p.name for p in root.iterdir() if p.name.startswith("_") and p.name[1] != "_"}
    private = {name for name in private if (root / name).is_dir() or (root / f"{name}.py").exists()}
    assert private <= ROOT_PRIVATE_ROOMS, f"private modules at the root (put them in a package): {sorted(private)}"


def test_pipeline_sits_above_engines_and_results_import_without_engines() -> None:
    graph = _imports()
    down = sorted(
        f"{m} imports {t}" for m, ts in graph.items() if _room(m) == "engines" for t in ts if _room(t) == "pipeline"
    )
    assert not down, down
    # results (and everything they import) never need an engine: a client can rebuild answers without a runtime
    reach, todo = set(), [m for m in graph if _room(m) == "results"]
    while todo:
        for t in graph[todo.pop()] - reach:
            reach.add(t)
            todo.append(t)
    assert not {m for m in reach if _room(m) in ("engines", "pipeline")}, sorted(reach)


def test_a_recipe_parses_its_model_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``amdinfer.yolo(path)``: the file is read and parsed once, from the entry point to the class names."""
    import onnx

    from amdinfer.testing.models import yolov8

    path = tmp_path / "det.onnx"
    model = yolov8(image_size=64, num_classes=2)
    model.metadata_props.add(key="names", value="{0: 'cat', 1: 'dog'}")
    onnx.save(model, path)
    parses: list[int] = []  # every parse of a ModelProto goes through ParseFromString (onnx.load included)
    monkeypatch.setattr(onnx.ModelProto, "ParseFromString", _counting(onnx.ModelProto.ParseFromString, parses))
    det = amdinfer.yolo(path, providers=["CPUExecutionProvider"], cache=False)
    try:
        assert det.postprocess[0].labels == ("cat", "dog")  # read from the one parsed model
    finally:
        det.close()
    assert len(parses) == 1, f"{len(parses)} parses of one model file"


def _counting(method, calls: list):
    def wrapper(self, data):
        calls.append(1)
        return method(self, data)

    return wrapper


def test_package_data_ships_every_data_file() -> None:
    """Every non-Python file under amdinfer/ is listed in package-data, so a regular (non-editable) install has it.

    `nox -s package` checks the built wheel itself; this catches a new data file without building anything.
    """
    tomllib = pytest.importorskip("tomllib")
    root = Path(amdinfer.__file__).parent
    pyproject = tomllib.loads((root.parent / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["amdinfer"]
    data = sorted(
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )
    assert Path("data/migraphx_onnx_operators.txt") in data and Path("py.typed") in data  # the check sees them
    unlisted = [str(p) for p in data if not any(p.match(pattern) for pattern in patterns)]
    assert not unlisted, f"add to [tool.setuptools.package-data] in pyproject.toml: {unlisted}"


def test_license_metadata_is_spdx_with_the_file() -> None:
    tomllib = pytest.importorskip("tomllib")
    top = Path(amdinfer.__file__).parents[1]
    project = tomllib.loads((top / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (top / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")


def _onnxruntime_files_in_fresh_home(tmp_path: Path, disable: bool) -> list[str]:
    """Import onnxruntime and run a session in a subprocess with an empty HOME; what it left there."""
    from amdinfer.testing.models import tiny_cnn

    home = tmp_path / ("home-disabled" if disable else "home")
    home.mkdir()
    model = tmp_path / "cnn.onnx"
    model.write_bytes(tiny_cnn().SerializeToString())
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "ORT_DISABLE_TELEMETRY")}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1", **({"ORT_DISABLE_TELEMETRY": "1"} if disable else {}))
    code = (
        "import sys, numpy as np, onnxruntime as ort; "
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider']); "
        "s.run(None, {'input': np.zeros((1, 3, 32, 32), np.float32)})"
    )
    done = subprocess.run([sys.executable, "-c", code, str(model)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


def test_onnxruntime_telemetry_stays_out_of_home(tmp_path: Path) -> None:
    """tests/conftest.py sets ORT_DISABLE_TELEMETRY=1 (and noxfile's sessions): ONNX Runtime then writes nothing
    under HOME; without it, 1.32 writes ~/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}."""
    pytest.importorskip("onnxruntime")
    assert os.environ.get("ORT_DISABLE_TELEMETRY") == "1"
    assert _onnxruntime_files_in_fresh_home(tmp_path, disable=True) == []
    written = _onnxruntime_files_in_fresh_home(tmp_path, disable=False)
    if not written:
        pytest.skip("this onnxruntime writes nothing under HOME even without ORT_DISABLE_TELEMETRY")
    assert any("onnxruntime" in name for name in written), written  # the files the variable keeps out


def test_install_hints_name_a_command_that_works() -> None:
    """Messages say how to install through ``_install.pip_extra`` (the index name and the clone form), never the
    bare index name alone, which is not published yet (docstrings' ``...`` literals may name the extra)."""
    import re

    root = Path(amdinfer.__file__).parent
    bare = re.compile(r"pip install '?amdinfer-onnx\[")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "_install.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if bare.search(line) and "``" not in line
    ]
    assert not offenders, offenders
