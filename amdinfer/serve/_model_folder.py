"""A model repository folder: its models, their load options (``models.toml`` / ``models.json``), safe paths.

See :mod:`amdinfer.serve._repository` for the layout.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._support._recipes import SERVED_RECIPES, get_recipe
from ..errors import BundleError, InputError, OptionError
from ._bounds import BOUNDS, MAX_BUCKETS, check, check_buckets, check_finite
from ._bundles import bundle_batching, bundle_folder
from ._triton_layout import LAYOUTS, is_triton_folder, read_triton_model

__all__ = [
    "CONFIG_FILES",
    "REPOSITORY_STATE_ENV",
    "ModelConfig",
    "check_name",
    "check_recipe",
    "inside",
    "parse_load_config",
    "read_repository",
]

CONFIG_FILES = ("models.toml", "models.json")
#: The folder of load/unload records shared by the server processes of one ``amdinfer serve``.
REPOSITORY_STATE_ENV = "AMDINFER_REPOSITORY_STATE"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class ModelConfig:
    """One model of a repository and how it is loaded (``amdinfer.load`` / a recipe, and its batcher).

    Example:
        >>> ModelConfig("tiny", Path("/models/tiny.onnx"), providers=("cpu",)).describe()
        'tiny.onnx: backend auto, providers cpu, fp32, batches of 32 within 2 ms'
    """

    name: str
    path: Path
    backend: str = "auto"
    providers: tuple[str, ...] = ()
    precision: str = "fp32"
    max_batch_size: int = 32
    max_delay_ms: float = 2.0
    batch_buckets: tuple[int, ...] = ()
    recipe: str | None = None
    recipe_options: dict[str, Any] = field(default_factory=dict)
    load: bool = True
    #: a Triton-layout model's (:mod:`amdinfer.serve._triton_layout`): its version folder, ``instance_group``
    #: gpus and ``config.pbtxt`` tensors ``(kind, name, datatype, dims)`` to check at load
    version: str = ""
    gpus: tuple[int, ...] = ()
    tensors: tuple[tuple[str, str, str, tuple[int, ...]], ...] = ()

    def describe(self) -> str:
        bundle = bundle_folder(self.path)
        shown = f"bundle {bundle.name}" if bundle is not None else self.path.name
        providers = f", providers {','.join(self.providers)}" if self.providers else ""
        recipe = f", recipe {self.recipe}" if self.recipe else ""
        recipe += f", version {self.version}" if self.version else ""
        return (
            f"{shown}: backend {self.backend}{providers}, {self.precision}{recipe}, batches of "
            f"{self.max_batch_size} within {self.max_delay_ms:g} ms"
        )


#: option -> (accepted types, what to say when it is not one); the numbers' bounds are :mod:`._bounds`'s
_OPTIONS: dict[str, tuple[tuple[type, ...], str]] = {
    "path": ((str,), "a path inside the repository folder"),
    "backend": ((str,), "a backend name such as 'ort'"),
    "providers": ((list, str), "a list of provider names (or one comma-separated string)"),
    "precision": ((str,), "'fp32', 'fp16', 'bf16' or 'int8'"),
    "max_batch_size": ((int,), BOUNDS["max_batch_size"].accepted()),
    "max_delay_ms": ((int, float), BOUNDS["max_delay_ms"].accepted()),
    "batch_buckets": ((list, tuple), f"a list of 1 to {MAX_BUCKETS} ints, each {BOUNDS['batch_bucket'].accepted()}"),
    "recipe": ((str,), f"one of {list(SERVED_RECIPES)}"),
    "recipe_options": ((dict,), "a table of the recipe's options"),
    "load": ((bool,), "true or false"),
}


def _options(where: str, raw: Any, *, allow: Sequence[str] = tuple(_OPTIONS)) -> dict[str, Any]:
    """Checked options of one table (``where`` names it in errors); numbers through :func:`._bounds.check`."""
    if not isinstance(raw, Mapping):
        raise OptionError(f"{where}: got {type(raw).__name__}, expected a table of options")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in allow:
            raise OptionError(f"{where}: got option {str(key)[:80]!r}, expected options among {sorted(allow)}")
        if key == "batch_buckets":
            out[key] = check_buckets(value, where)
            continue
        if key in BOUNDS:
            out[key] = check(key, value, where)
            continue
        kinds, expected = _OPTIONS[key]
        bad = isinstance(value, bool) and bool not in kinds
        if bad or not isinstance(value, kinds):
            raise OptionError(f"{where}: option {key!r} got {repr(value)[:80]}, expected {expected}")
        v: Any = value  # its type checked above
        if key == "providers":
            v = tuple(v.split(",") if isinstance(v, str) else v)
            if not all(isinstance(p, str) and p for p in v):
                raise OptionError(f"{where}: option 'providers' got {raw[key]!r}, expected {expected}")
        elif key == "recipe":
            get_recipe(v, served=True, where=f"{where}: option 'recipe'")
        elif key == "recipe_options":
            check_finite(v, where, "recipe_options")
            if "pipeline_threads" in v:
                threads = check("pipeline_threads", v["pipeline_threads"], f"{where}: recipe_options")
                v = {**v, "pipeline_threads": threads}
        out[key] = v
    return out


def _parse_json(text: str | bytes) -> Any:
    """JSON as the config files and load requests take it. Python's parser reads ``NaN`` and ``Infinity`` (and
    ``1e400``) as floats: the options' checks refuse them, naming the option (``_options``).

    Raises:
        ValueError: not JSON, not UTF-8, an int of more than 4300 digits.
        RecursionError: nested too deeply.
    """
    return json.loads(text)


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OptionError(
            f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
        ) from None


def _read_config_file(root: Path) -> dict[str, Any]:
    """The parsed ``models.toml`` / ``models.json`` of ``root`` (``{}`` without one).

    Raises:
        OptionError: both files, a file that is not UTF-8, not valid TOML/JSON, nested too deeply, or with
            tables other than ``defaults`` and ``models``.
    """
    present = [root / n for n in CONFIG_FILES if (root / n).is_file()]
    if len(present) > 1:
        raise OptionError(f"{root}: has both {CONFIG_FILES[0]} and {CONFIG_FILES[1]}; keep one")
    if not present:
        return {}
    path = present[0]
    text = _decode(path, path.read_bytes())
    data: Any
    if path.suffix == ".toml":
        if sys.version_info < (3, 11):
            raise OptionError(f"{path}: TOML needs Python >= 3.11 (tomllib); write the same tables to models.json")
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise OptionError(f"{path}: not valid TOML: {exc}") from None
        except RecursionError:
            raise OptionError(f"{path}: not valid TOML: nested too deeply") from None
    else:
        try:
            data = _parse_json(text)
        except ValueError as exc:
            raise OptionError(f"{path}: not valid JSON: {exc}") from None
        except RecursionError:
            raise OptionError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict) or set(data) - {"defaults", "models"}:
        extra = sorted(set(data) - {"defaults", "models"}) if isinstance(data, dict) else type(data).__name__
        raise OptionError(f"{path}: got {extra}, expected only the tables 'defaults' and 'models'")
    return {"file": path, **data}


def check_name(name: Any) -> str:
    """A model name as the repository takes it: 1 to 128 letters, digits, ``_ . -``, not starting with ``.``.

    Example:
        >>> check_name("../etc")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: model name: got '../etc', expected 1 to 128 of A-Z a-z 0-9 _ . - (not ...
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(
            f"model name: got {str(name)[:80]!r}, expected 1 to 128 of A-Z a-z 0-9 _ . - (not starting with '.' or '-')"
        )
    return name


def inside(root: Path, path: Path, where: str) -> Path:
    """``path`` resolved (symlinks followed), refused unless it is a file inside ``root``."""
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError, OSError):
        raise InputError(f"{where}: {path} does not exist") from None
    if not resolved.is_relative_to(root):
        raise InputError(f"{where}: {path} resolves to {resolved}, outside the repository {root}; refused")
    if not resolved.is_file():
        raise InputError(f"{where}: {resolved} is not a file")
    return resolved


def read_repository(
    folder: str | Path, defaults: Mapping[str, Any] | None = None, *, processes: int = 1
) -> dict[str, ModelConfig | str]:
    """The models of a repository folder: their configs, or why one cannot load (a path out of the folder).

    Args:
        folder: the repository.
        defaults: options for every model (the server's flags), overridden by the file's.
        processes: the server processes per device (what a ``config.pbtxt``'s ``instance_group`` count must say).

    Raises:
        OptionError: a folder that does not exist, a config file that does not parse or has unknown options,
            or a model in the file without a path and without a file of its name.

    Example:
        >>> import tempfile, onnx
        >>> from amdinfer.testing.models import tiny_cnn
        >>> root = Path(tempfile.mkdtemp())
        >>> onnx.save(tiny_cnn(), root / "tiny.onnx")
        >>> _ = (root / "models.json").write_text('{"models": {"tiny": {"precision": "fp16"}}}')
        >>> read_repository(root)["tiny"].precision
        'fp16'
    """
    root = Path(folder)
    if not root.is_dir():
        raise OptionError(f"model repository: got {str(folder)!r}, expected a folder of .onnx models")
    root = root.resolve()
    found: dict[str, Path] = {p.stem: p for p in sorted(root.glob("*.onnx"))}
    found.update({p.parent.name: p for p in sorted(root.glob("*/model.onnx"))})
    config = _read_config_file(root)
    where = str(config.get("file", root))
    triton = model_folders(root, found, config.get("models", {}), processes)
    found.update({name: path for name, (path, _, _) in triton.items()})
    base = _options(f"{where}: [defaults]", config.get("defaults", {}), allow=[k for k in _OPTIONS if k != "path"])
    server = _options("server defaults", dict(defaults or {}), allow=[k for k in _OPTIONS if k != "path"])
    tables = config.get("models", {})
    if not isinstance(tables, dict):
        raise OptionError(f"{where}: 'models' got {type(tables).__name__}, expected a table of models")
    models: dict[str, ModelConfig | str] = {}
    for name in sorted({*found, *tables}):
        table = _options(f"{where}: [models.{name}]", tables.get(name, {}))
        if "path" not in table and name not in found:
            raise OptionError(f"{where}: [models.{name}] has no path, and the folder has no model {name}: {LAYOUTS}")
        try:
            check_name(name)
            path = inside(root, root / table.pop("path", found.get(name)), f"model {name!r}")
            _, pbtxt, extras = triton.get(name, (None, {}, {}))
            merged = ModelConfig(name, path, **{**server, **base, **pbtxt, **table}, **extras)
            models[name] = check_recipe(root, merged, f"{where}: [models.{name}]")
        except InputError as exc:  # a path out of the folder: this model cannot load, the others can
            models[name] = str(exc)
    return models


def model_folders(
    root: Path, found: Mapping[str, Path], tables: Any, processes: int = 1
) -> dict[str, tuple[Path, dict[str, Any], Any]]:
    """The Triton-layout folders of ``root`` (:func:`~amdinfer.serve._triton_layout.read_triton_model`: model file,
    options, extras). A sub-folder with ``.onnx`` files in neither layout, and not named by a model of the config
    file (a ``path`` or recipe model inside it), is refused naming both layouts.

    Raises:
        OptionError: such a folder, a folder in both layouts, or a ``config.pbtxt`` that cannot be honoured.
    """
    used: set[str] = set()
    for table in tables.values() if isinstance(tables, dict) else ():
        values = [table.get("path"), *(table.get("recipe_options") or {}).values()] if isinstance(table, dict) else []
        used.update(Path(v).parts[0] for v in values if isinstance(v, str) and len(Path(v).parts) > 1)
    out: dict[str, tuple[Path, dict[str, Any], Any]] = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        triton = is_triton_folder(sub)
        if bundle_folder(sub) is not None:  # a bundle: served as built, its buckets the server's
            try:
                rows = {"max_batch_size": bundle_batching(sub, where=str(sub))["max_batch_size"]}
            except BundleError:  # an edited manifest: the model's load says so (the others load)
                rows = {}
            out[sub.name] = (sub / "manifest.json", rows, {})
        elif (sub / "model.onnx").is_file():
            if triton:
                raise OptionError(f"{sub}: holds model.onnx and Triton's version folders or config.pbtxt; {LAYOUTS}")
        elif triton:
            path, options, extras = read_triton_model(sub, processes=processes)
            out[sub.name] = (path, _options(str(sub / "config.pbtxt"), options), extras)
        elif sub.name not in used and any(sub.glob("*.onnx")):
            raise OptionError(f"{sub}: has .onnx files but no model in a layout this server reads; expected {LAYOUTS}")
    return out


def check_recipe(root: Path, config: ModelConfig, where: str) -> ModelConfig:
    """``config`` with its ``recipe_options`` checked against its recipe's record (:data:`amdinfer.recipes.RECIPES`)
    and the further models the recipe loads (``ocr``'s ``rec``, ``cls``) resolved inside ``root``: paths relative
    to the repository folder, as ``path`` is.

    Raises:
        OptionError: ``recipe_options`` without a recipe, an option the recipe does not take (or of the wrong
            type), or a model it needs missing.
        InputError: a further model that is not a file inside ``root`` (a symlink out of it included).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()).resolve()
        >>> for n in ("det.onnx", "rec.onnx"): _ = (root / n).write_bytes(b"")
        >>> config = ModelConfig("ocr", root / "det.onnx", recipe="ocr", recipe_options={"rec": "rec.onnx"})
        >>> check_recipe(root, config, "models.toml").recipe_options["rec"] == str(root / "rec.onnx")
        True
        >>> check_recipe(root, ModelConfig("ocr", root / "det.onnx", recipe="ocr"), "models.toml")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: models.toml: recipe_options: 'ocr' needs rec (the recogniser model; cls, the \
classifier, is optional)
    """
    if config.recipe is None:
        if config.recipe_options:
            raise OptionError(
                f"{where}: got recipe_options {sorted(config.recipe_options)} without a recipe, expected recipe = "
                f"one of {list(SERVED_RECIPES)}"
            )
        return config
    entry = get_recipe(config.recipe, served=True, where=f"{where}: option 'recipe'")
    options = entry.check_options(config.recipe_options, f"{where}: recipe_options")
    for model in entry.models:
        value = options.get(model.name)
        if value is not None:
            options[model.name] = str(inside(root, root / value, f"model {config.name!r}: recipe_options {model.name}"))
    return replace(config, recipe_options=options)


def parse_load_config(name: str, config: Any) -> dict[str, Any]:
    """The options of a load request's ``config`` parameter (a JSON object, as Triton's clients send it).

    Example:
        >>> parse_load_config("tiny", '{"name": "tiny", "max_batch_size": 4}')
        {'max_batch_size': 4}
        >>> parse_load_config("tiny", '{"path": "/etc/passwd"}')  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: load 'tiny': config: got option 'path', expected options among ['backend', ...]
    """
    if config is None or config == "":
        return {}
    if isinstance(config, (str, bytes)):
        try:
            config = _parse_json(config)
        except ValueError as exc:  # not JSON, not UTF-8
            raise InputError(f"load {name!r}: parameter 'config' is not valid JSON: {exc}") from None
        except RecursionError:
            raise InputError(f"load {name!r}: parameter 'config' is not valid JSON: nested too deeply") from None
    if not isinstance(config, dict):
        raise InputError(f"load {name!r}: parameter 'config' got {type(config).__name__}, expected a JSON object")
    config = dict(config)
    if config.pop("name", name) != name:
        raise InputError(f"load {name!r}: config names another model ({config.get('name')!r})")
    try:
        return _options(f"load {name!r}: config", config, allow=[k for k in _OPTIONS if k not in ("path", "load")])
    except OptionError as exc:
        raise InputError(str(exc)) from None
