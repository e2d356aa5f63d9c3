"""Several models in one server: a model folder, its optional ``models.toml``, and Triton's repository API.

A repository is a folder. Each ``*.onnx`` file in it, and each sub-folder ``NAME/model.onnx``, is a model
named by its stem (or folder). An optional ``models.toml`` (or ``models.json``) names models with their load
options::

    [defaults]                  # every model's options (the server's flags come first, these override them)
    providers = ["cpu"]

    [models.det]
    path = "yolo/yolov8n.onnx"  # inside the folder
    recipe = "yolo"             # serve amdinfer.yolo(...) of it: clients send JPEG/PNG files
    recipe_options = { conf = 0.3, imgsz = 640 }
    precision = "fp16"
    max_batch_size = 16
    load = false                # listed by the index, loaded by a load request only

    [models.ocr]                # ocr/model.onnx: the text detector
    recipe = "ocr"              # any recipe that `amdinfer serve --recipe` serves (amdinfer.recipes.RECIPES)
    recipe_options = { rec = "ocr/rec.onnx", cls = "ocr/cls.onnx" }  # its further models, inside the folder too

A load request may carry Triton's ``config`` parameter: a JSON object with the same options (``name`` too,
if it is the model's), applied over the file's. Only names in the folder load, never a path outside it (a
symlink out of the folder is refused); so do a recipe's further models (``rec``, ``cls``), from the file or
from a load request.

Several server processes (one per device, or several per device) share one folder of small state files that
the supervisor names in ``AMDINFER_REPOSITORY_STATE``: a load or unload is written there by the process that
took it, and every other process replays it before it answers a repository, readiness or inference request
that depends on it (one ``stat`` of the folder per request otherwise).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import InputError, OptionError
from ._bundles import bundle_batching, bundle_folder
from ._model_folder import (
    REPOSITORY_STATE_ENV,
    ModelConfig,
    check_name,
    check_recipe,
    parse_load_config,
    read_repository,
)
from ._triton_layout import LAYOUTS, check_tensors

__all__ = ["REPOSITORY_STATE_ENV", "ModelRepository"]

logger = logging.getLogger("amdinfer.serve")

#: a state folder changed less than this ago is read again at the next request (mtime granularity)
_FRESH_NS = 1_000_000_000


class ModelRepository:
    """The models of a repository folder in one server process: index, load, unload, per-model readiness.

    Loading builds the model off the event loop (one worker per device, warmed up), then makes it visible;
    requests to the other models go on meanwhile. Loading a loaded model reloads it: the new one takes the
    name, the old one finishes its requests and closes. Unloading takes the name away at once, lets the
    model's requests in flight finish, then stops its batcher and closes its engines.

    Args:
        folder: the repository (see :func:`read_repository` and the module's text for its layout).
        devices: the devices of this process; each model gets one worker per device.
        defaults: options for every model (``backend``, ``providers``, ``precision``, ``max_batch_size``, ...),
            overridden by the folder's ``models.toml``.
        state: the folder of load/unload records shared with the other processes of this server (default:
            ``$AMDINFER_REPOSITORY_STATE``; ``None`` there too: this process alone).
        warmup: run each engine at its batch sizes before a model is ready.

    Raises:
        OptionError: see :func:`read_repository`.

    Example:
        >>> import asyncio, tempfile, onnx
        >>> from kserve.model_repository import ModelRepository as Registry
        >>> from amdinfer.testing.models import tiny_cnn
        >>> root = Path(tempfile.mkdtemp())
        >>> onnx.save(tiny_cnn(), root / "tiny.onnx")
        >>> repo = ModelRepository(root, defaults={"providers": ["cpu"]}, warmup=False)
        >>> async def main():
        ...     await repo.start(Registry())
        ...     await repo.unload("tiny")
        ...     return await repo.index()
        >>> asyncio.run(main())
        [{'name': 'tiny', 'state': 'UNAVAILABLE', 'reason': 'unloaded'}]
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        devices: Sequence[int] = (0,),
        defaults: Mapping[str, Any] | None = None,
        state: str | Path | None = None,
        warmup: bool = True,
    ) -> None:
        from ._supervisor import process_slot

        self.defaults = dict(defaults or {})
        slot = process_slot()
        self.processes = slot[1] if slot else 1  # the server's processes per device (instance_group count)
        # a broken folder fails before anything loads
        self._configs = read_repository(folder, self.defaults, processes=self.processes)
        self.root = Path(folder).resolve()
        self.devices = list(devices)
        self.warmup = bool(warmup)
        state = os.environ.get(REPOSITORY_STATE_ENV) if state is None else state
        self.state = Path(state) if state else None
        if self.state is not None:
            self.state.mkdir(parents=True, exist_ok=True)
        self._registry: Any = None
        self._models: dict[str, Any] = {}
        self._reasons: dict[str, str] = {}
        self._applied: dict[str, str] = {}
        self._seen: int | None = None
        self._tasks: dict[str, asyncio.Future[None]] = {}
        self._lock = asyncio.Lock()

    # -- what the server asks ------------------------------------------------------------------------------

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a model of the repository (loaded or not)."""
        return name in self._configs or name in self._models

    def reason(self, name: str) -> str:
        """Why ``name`` is not ready (``""`` when it is)."""
        if name in self._models:
            return ""
        entry = self._configs.get(name)
        if isinstance(entry, str):
            return entry
        return self._reasons.get(name, "not loaded")

    def unavailable(self, name: str, registry: Any) -> str | None:
        """Why ``name``, a model of the repository, cannot take requests (``None``: it can, or it is not one)."""
        if registry.get_model(name) is not None or not self.knows(name):
            return None
        return f"{self.reason(name)}; load it with POST v2/repository/models/{name}/load"

    async def check(self, name: str, registry: Any) -> str | None:
        """:meth:`unavailable` after replaying what other processes did to ``name``."""
        await self.sync(name)
        return self.unavailable(name, registry)

    @property
    def loaded(self) -> list[Any]:
        """The loaded models (``AmdinferModel``), by name."""
        return [self._models[n] for n in sorted(self._models)]

    async def start(self, registry: Any) -> None:
        """Load the models marked to load at start (``load = true``, the default) into KServe's ``registry``."""
        self._registry = registry
        for name, entry in sorted(self._configs.items()):
            if isinstance(entry, str):
                logger.warning("model repository %s: %s", self.root, entry)
            elif entry.load:
                async with self._lock:
                    await self._apply(name, True, {})
        self._seen = None
        await self.sync()  # records of a server whose other processes run already

    async def index(self, ready: bool = False) -> list[dict[str, str]]:
        """Triton's index: every model of the folder with its state (``READY``, ``UNAVAILABLE``) and why."""
        await self.sync()
        self._rescan()
        rows = []
        for name in sorted({*self._configs, *self._models}):
            state = "READY" if name in self._models else "UNAVAILABLE"
            if ready and state != "READY":
                continue
            rows.append({"name": name, "state": state, "reason": self.reason(name)})
        return rows

    async def load(self, name: str, config: Any = None) -> None:
        """Load (or reload) ``name``, with a load request's ``config`` options over the folder's.

        Raises:
            InputError: a name that is not in the folder, a path out of it, bad options, or a model that failed
                to load (the message says why); the model keeps its previous state then.
        """
        overrides = parse_load_config(check_name(name), config)
        async with self._lock:
            await self._apply(name, True, overrides)
            self._publish(name, True, overrides)

    async def unload(self, name: str) -> None:
        """Unload ``name``: no new requests; those in flight finish; then its engines close.

        Raises:
            InputError: a name that is not in the folder and not loaded.
        """
        check_name(name)
        await self.sync(name)
        if not self.knows(name):
            self._rescan()
            if not self.knows(name):
                raise InputError(f"unload {name!r}: not a model of the repository {self.root}; it has {self._names()}")
        async with self._lock:
            await self._apply(name, False, {})
            self._publish(name, False, {})

    async def close(self) -> None:
        """Unload every model (their requests in flight finish first)."""
        for task in list(self._tasks.values()):
            task.cancel()
        async with self._lock:
            for name in list(self._models):
                await self._apply(name, False, {})

    # -- several processes ---------------------------------------------------------------------------------

    async def sync(self, name: str | None = None) -> None:
        """Replay the loads and unloads that other processes recorded; wait for those of ``name`` (``None``:
        all). A ``stat`` of the state folder when nothing changed."""
        if self.state is None:
            return
        try:
            mtime = os.stat(self.state).st_mtime_ns
        except OSError:
            return
        if mtime != self._seen:
            # a change within the folder's timestamp granularity could hide behind the same mtime: read again
            self._seen = mtime if time.time_ns() - mtime > _FRESH_NS else None
            for record in self._records():
                other = record["name"]
                if self._applied.get(other) != record["token"] and other not in self._tasks:
                    task = self._tasks[other] = asyncio.ensure_future(self._replay(other))
                    task.add_done_callback(functools.partial(self._done, other))
        waits = [t for n, t in self._tasks.items() if name is None or n == name]
        if waits:
            await asyncio.gather(*(asyncio.shield(t) for t in waits), return_exceptions=True)

    def _done(self, name: str, task: asyncio.Future[None]) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]

    def _records(self) -> list[dict[str, Any]]:
        assert self.state is not None
        records = []
        for path in self.state.glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):  # replaced meanwhile (or not UTF-8): read at the next request
                self._seen = None
                continue
            if isinstance(record, dict) and {"name", "loaded", "token"} <= set(record):
                records.append(record)
        return records

    async def _replay(self, name: str) -> None:
        assert self.state is not None
        async with self._lock:
            path = self.state / (name.encode().hex() + ".json")
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                self._seen = None
                return
            if self._applied.get(name) == record["token"]:
                return
            self._applied[name] = record["token"]
            try:
                overrides = parse_load_config(name, record.get("config")) if record["loaded"] else {}
                await self._apply(name, bool(record["loaded"]), overrides)
                logger.info(
                    "model %r %s (replayed from another process)", name, "loaded" if record["loaded"] else "unloaded"
                )
            except Exception as exc:
                logger.warning("model %r: replaying another process's load failed here: %s", name, exc)
        self._seen = None

    def _publish(self, name: str, loaded: bool, overrides: dict[str, Any]) -> None:
        if self.state is None:
            return
        token = uuid.uuid4().hex
        record = {"name": name, "loaded": loaded, "config": overrides, "token": token}
        path = self.state / (name.encode().hex() + ".json")
        tmp = self.state / f".{path.stem}.{os.getpid()}.{token}"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)  # atomic: a reader sees the old record or the new one
        self._applied[name] = token

    # -- loading -------------------------------------------------------------------------------------------

    def _names(self) -> list[str]:
        return sorted({*self._configs, *self._models})

    def _rescan(self) -> None:
        try:
            self._configs = read_repository(self.root, self.defaults, processes=self.processes)
        except OptionError as exc:
            raise InputError(f"model repository {self.root}: {exc}") from None

    def _config(self, name: str, overrides: dict[str, Any]) -> ModelConfig:
        self._rescan()
        entry = self._configs.get(name)
        if entry is None:
            raise InputError(
                f"load {name!r}: not a model of the repository {self.root}; it has {self._names()} (expected {LAYOUTS})"
            )
        if isinstance(entry, str):
            raise InputError(f"load {name!r}: {entry}")
        if not overrides:
            return entry
        try:  # a load request's recipe and options, checked as the file's were (its models inside the folder)
            return check_recipe(self.root, replace(entry, **overrides), f"load {name!r}: config")
        except OptionError as exc:
            raise InputError(str(exc)) from None

    async def _apply(self, name: str, loaded: bool, overrides: dict[str, Any]) -> None:
        """Load or unload ``name`` here (the caller holds the lock)."""
        if not loaded:
            model = self._models.pop(name, None)
            self._reasons[name] = "unloaded"
            if model is not None:
                self._registry.get_models().pop(name, None)
                await model.aclose()
                logger.info("model %r unloaded", name)
            return
        config = self._config(name, overrides)
        try:
            model = await self._build_started(config)
        except Exception as exc:
            why = f"failed to load ({config.describe()}): {type(exc).__name__}: {exc}"
            if name not in self._models:
                self._reasons[name] = why
            raise InputError(f"load {name!r}: {why}") from None
        old = self._models.get(name)
        self._models[name] = model
        self._registry.update(model)
        self._reasons.pop(name, None)
        logger.info("model %r loaded: %s", name, config.describe())
        if old is not None:
            await old.aclose()

    async def _build_started(self, config: ModelConfig) -> Any:
        loop = asyncio.get_running_loop()
        model = await loop.run_in_executor(None, self._build, config)
        try:
            if self.warmup:
                jobs = [
                    loop.run_in_executor(None, w.warmup, model.batcher.max_batch_size)
                    for w in model.batcher.workers
                    if hasattr(w, "warmup")
                ]
                await asyncio.gather(*jobs)
            await model.batcher.start()
        except BaseException:
            await model.aclose()
            raise
        return model

    def _build(self, config: ModelConfig) -> Any:
        from ._models import build_model, load_recipe_workers, load_workers

        options: dict[str, Any] = {}
        if config.providers:
            options["providers"] = list(config.providers)
        bundle = bundle_folder(config.path)
        if bundle is not None:  # loaded as built: buckets other than the bundle's are refused
            bundle_batching(bundle, config.batch_buckets, f"model {config.name!r}")
        elif config.batch_buckets:
            options["batch_buckets"] = list(config.batch_buckets)
        devices = [d for d in self.devices if d in config.gpus] if config.gpus else self.devices
        if not devices:
            raise OptionError(f"config.pbtxt: instance_group gpus {list(config.gpus)}, but this server process runs "
                              f"on devices {self.devices}; every process serves every model: list them")  # fmt: skip
        if config.recipe and config.tensors:
            raise OptionError("config.pbtxt: input/output given for a recipe model; its tensors are the recipe's")
        common = dict(devices=devices, backend=config.backend, precision=config.precision, **options)
        workers: list[Any]
        if config.recipe:  # its options checked and its further models found inside the folder (check_recipe)
            workers = list(load_recipe_workers(str(bundle or config.path), config.recipe,
                                               recipe_options=config.recipe_options, **common))  # fmt: skip
        else:
            workers = list(load_workers(str(bundle or config.path), **common))
        try:
            check_tensors(config.tensors, workers[0])
            model = build_model(
                config.name, workers, max_batch_size=config.max_batch_size, max_delay_ms=config.max_delay_ms
            )
            model.version = model.metrics.version = config.version
            return model
        except BaseException:
            for w in workers:
                (getattr(w, "engine", None) or w.pipeline).close()
            raise
