"""The robustness corpus: one row per hostile or broken input, with the typed error or documented result it must give.

Each case is a function of a scratch folder (made by :func:`make_fixtures`). A case either raises, and the
test checks the error's class and that its message names the argument, tensor or path (``match``), or it
returns the documented result as a short string after checking it itself. ``isolate=True`` cases run in a
subprocess with a timeout and a memory cap (``_runner.py``): they could hang (FIFOs) or allocate (``/dev/zero``,
huge shapes, decompression bombs) if amdinfer regressed. See ``docs/security.md``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer import cli
from amdinfer.cache import CompiledModelCache, clear, list_entries
from amdinfer.errors import AmdinferError, CacheError, InputError, ModelError, OptionError
from amdinfer.model import ModelSource
from amdinfer.testing.models import tiny_cnn

CPU = {"backend": "ort", "providers": ["CPUExecutionProvider"], "threads": 1}
SECRET = b"TOP-SECRET-DATA!"


@dataclass(frozen=True)
class Case:
    """One corpus row: ``expect`` is an error class, or ``None`` for a documented (non-error) result."""

    name: str
    group: str
    run: Callable[[Path], object]
    expect: type[BaseException] | None = None
    match: str = ""
    isolate: bool = False
    setup: Callable[[Path], None] | None = None  # runs before ``run``, with the test's privileges


CASES: dict[str, Case] = {}


def case(
    group: str,
    expect: type[BaseException] | None = None,
    match: str = "",
    isolate: bool = False,
    setup: Callable[[Path], None] | None = None,
):
    def add(fn: Callable[[Path], object]) -> Callable[[Path], object]:
        name = fn.__name__
        assert name not in CASES, name
        CASES[name] = Case(name, group, fn, expect, match, isolate, setup)
        return fn

    return add


# ---------------------------------------------------------------------------------------------- fixtures
def identity_model(init: TensorProto, *, opset: int = 17) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("y", init.data_type, list(init.dims))
    graph = helper.make_graph([helper.make_node("Identity", [init.name], ["y"])], "g", [], [out], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def external_model(location: str, *, n: int = 16, offset: int | None = None, length: int | None = None):
    """A model whose one initializer ``w`` (``n`` uint8) lives in external file ``location``."""
    w = numpy_helper.from_array(np.zeros(n, np.uint8), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    if offset is not None:
        w.external_data.add(key="offset", value=str(offset))
    if length is not None:
        w.external_data.add(key="length", value=str(length))
    return identity_model(w)


def make_fixtures(d: Path) -> None:
    """The files the cases read; made once per session (and readable by every user, for the read-only cases)."""
    (d / "secret.txt").write_bytes(SECRET)
    (d / "sub").mkdir()
    (d / "sub" / "secret.txt").write_bytes(SECRET)
    onnx.save(tiny_cnn(), d / "m.onnx")
    os.mkfifo(d / "fifo")
    (d / "folder").mkdir()
    np.savez(d / "obj.npz", input=np.array([object()], dtype=object))
    (d / "rand.npz").write_bytes(np.random.default_rng(0).bytes(400))
    # A 20000 x 20000 grey PNG header with no pixel data: Pillow's decompression-bomb check fires on open.
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    (d / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    for p in [d, *d.rglob("*")]:
        if not p.is_fifo():
            p.chmod(0o755 if p.is_dir() else 0o644)


@contextlib.contextmanager
def chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def warnings_logged(logger: str = "amdinfer.cache") -> Iterator[list[str]]:
    records: list[str] = []

    class H(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    log = logging.getLogger(logger)
    h = H()
    log.addHandler(h)
    try:
        yield records
    finally:
        log.removeHandler(h)


def x32() -> np.ndarray:
    return np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32)


# ---------------------------------------------------------------------------------------------- external data
@case("external data", ModelError, r"tensor 'w' keeps its data in external file 'secret.txt'.*base_dir=")
def bytes_model_reads_secret_from_cwd(d: Path) -> object:
    with chdir(d):
        return amdinfer.load(external_model("secret.txt").SerializeToString(), **CPU).run({})


@case("external data", ModelError, r"tensor 'w' keeps its data in external file 'sub/secret.txt'")
def modelproto_reads_sub_secret_from_cwd(d: Path) -> object:
    with chdir(d):
        return amdinfer.load(external_model("sub/secret.txt"), **CPU).run({})


@case("external data", ModelError, r"tensor 'w' keeps its data in external file")
def modelproto_on_reference_engine(d: Path) -> object:
    with chdir(d):
        return amdinfer.load(external_model("secret.txt"), backend="reference").run({})


@case("external data")
def bytes_model_with_base_dir(d: Path) -> object:
    proto = external_model("secret.txt")
    before = proto.SerializeToString()
    y = amdinfer.load(proto.SerializeToString(), base_dir=d, **CPU).run({})["y"]
    assert y.tobytes() == SECRET, y
    assert proto.SerializeToString() == before  # the caller's proto is not changed
    return "reads the data from base_dir only"


@case("external data", OptionError, r"base_dir: given with a PosixPath")
def base_dir_with_a_path(d: Path) -> object:
    return ModelSource.from_any(d / "m.onnx", base_dir=d)


def _saved(d: Path, name: str, model: onnx.ModelProto) -> Path:
    folder = d / f"case-{name}"
    folder.mkdir(exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


@case("external data", ModelError, r"tensor 'w' points at '../secret.txt', outside the model's folder")
def dotdot_location(d: Path) -> object:
    return amdinfer.load(_saved(d, "dotdot", external_model("../secret.txt")), **CPU)


@case("external data", ModelError, r"tensor 'w' points at '/etc/passwd', an absolute path")
def absolute_location(d: Path) -> object:
    return amdinfer.load(_saved(d, "abs", external_model("/etc/passwd")), **CPU)


@case("external data", ModelError, r"tensor 'w' points at 'link.bin', outside the model's folder")
def symlink_out_of_folder(d: Path) -> object:
    path = _saved(d, "symlink", external_model("link.bin"))
    link = path.parent / "link.bin"
    if not link.is_symlink():
        link.symlink_to(d / "secret.txt")
    return amdinfer.load(path, **CPU)


@case("external data", ModelError, r"external data 'data.bin' of tensor 'w' at '.*data.bin': is a FIFO", isolate=True)
def fifo_as_external_data(d: Path) -> object:
    path = _saved(d, "fifo-ext", external_model("data.bin"))
    if not (path.parent / "data.bin").exists():
        os.mkfifo(path.parent / "data.bin")
    return amdinfer.load(path, **CPU)


@case("external data", ModelError, r"'short.bin'.*has 4 bytes, expected at least 16")
def external_file_too_short(d: Path) -> object:
    path = _saved(d, "short", external_model("short.bin"))
    (path.parent / "short.bin").write_bytes(b"abcd")
    return amdinfer.load(path, **CPU)


@case("external data", ModelError, r"tensor 'w' declares external-data length 8, but its shape \[16\] needs 16 bytes")
def external_length_disagrees_with_shape(d: Path) -> object:
    path = _saved(d, "length", external_model("data.bin", length=8))
    (path.parent / "data.bin").write_bytes(bytes(16))
    return amdinfer.load(path, **CPU)


@case("external data", ModelError, r"tensor 'w' has external-data offset '-5', expected an int >= 0")
def external_negative_offset(d: Path) -> object:
    path = _saved(d, "offset", external_model("data.bin"))
    w = onnx.load(path, load_external_data=False)
    w.graph.initializer[0].external_data.add(key="offset", value="-5")
    onnx.save(w, path)
    (path.parent / "data.bin").write_bytes(bytes(16))
    return amdinfer.load(path, **CPU)


@case("external data", ModelError, r"tensor 'w' has external-data location 'a\\x00b'")
def external_location_with_nul(d: Path) -> object:
    return amdinfer.load(_saved(d, "nul", external_model("a\0b")), **CPU)


# ---------------------------------------------------------------------------------------------- model files
@case("model files", ModelError, r"model 'fifo': is a FIFO \(named pipe\), expected a regular file", isolate=True)
def model_path_is_a_fifo(d: Path) -> object:
    with chdir(d):
        return amdinfer.load("fifo", **CPU)


@case("model files", ModelError, r"model '/dev/zero': is a character device, expected a regular file", isolate=True)
def model_path_is_dev_zero(d: Path) -> object:
    return amdinfer.load("/dev/zero", **CPU)


@case("model files", ModelError, r"model: got '.*m.onnx\\x00x', a path with a NUL byte")
def model_path_with_nul(d: Path) -> object:
    return amdinfer.load(str(d / "m.onnx") + "\0x", **CPU)


@case("model files", ModelError, r"is a directory, expected an .onnx file")
def model_path_is_a_folder(d: Path) -> object:
    return amdinfer.load(d / "folder", **CPU)


@case("model files", ModelError, r"model <bytes>: not a readable ONNX file|holds no ONNX graph")
def model_bytes_are_garbage(d: Path) -> object:
    return amdinfer.load(np.random.default_rng(3).bytes(300), **CPU)


@case("model files", ModelError, r"declares opset 99 of domain 'ai.onnx'.* defines opsets 1\.\.\d+")
def opset_99_on_reference(d: Path) -> object:
    return amdinfer.load(identity_model(numpy_helper.from_array(np.ones(2, np.float32), "w"), opset=99), "reference")


def _duplicate_output_model() -> onnx.ModelProto:
    model = identity_model(numpy_helper.from_array(np.ones(2, np.float32), "w"))
    model.graph.output.append(model.graph.output[0])
    return model


@case("model files", ModelError, r"graph output 'y' is listed 2 times; expected unique output names")
def duplicate_output_on_reference(d: Path) -> object:
    return amdinfer.load(_duplicate_output_model(), backend="reference")


@case("model files", ModelError, r"graph output 'y' is listed 2 times")
def duplicate_output_on_ort(d: Path) -> object:
    return amdinfer.load(_duplicate_output_model(), **CPU)


# ---------------------------------------------------------------------------------------------- feeds
@case(
    "feeds",
    InputError,
    r"input 'input' \(a non-contiguous view, copied before the run\): shape \(1000000000000, 3, 32, 32\) float32 needs",
    isolate=True,
)
def broadcast_to_a_trillion_rows(d: Path) -> object:
    engine = amdinfer.load(tiny_cnn(), **CPU)
    return engine.run(np.broadcast_to(np.float32(0), (10**12, 3, 32, 32)))


@case("feeds", InputError, r"input 'input': got a list of float64 values that float32 cannot hold exactly \(e.g. 0.1\)")
def list_with_an_inexact_float(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), backend="reference").run(np.full((1, 3, 32, 32), 0.1).tolist())


@case("feeds")
def list_with_exact_values(d: Path) -> object:
    engine = amdinfer.load(tiny_cnn(), backend="reference")
    x = np.full((1, 3, 32, 32), 0.5, np.float32)
    got = engine.run(x.astype(int).tolist())["logits"]  # ints are exact in float32
    want = engine.run(np.zeros_like(x))["logits"]
    assert np.array_equal(got, want)
    return "converted: nothing lost"


@case("feeds", InputError, r"input 'input': got a numpy masked array, expected a plain ndarray")
def masked_array(d: Path) -> object:
    x = np.ma.masked_array(x32(), mask=x32() > 0.5)
    return amdinfer.load(tiny_cnn(), **CPU).run(x)


@case("feeds", InputError, r"input 'input': got a list NumPy cannot turn into one array")
def ragged_list(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), backend="reference").run([[1.0, 2.0], [3.0]])


@case("feeds", InputError, r"input 'input': got dtype object, expected float32")
def object_array(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), **CPU).run(np.empty((1, 3, 32, 32), dtype=object))


# ---------------------------------------------------------------------------------------------- images
def _load_image(path: object) -> object:
    from amdinfer.preprocess import LoadImage

    return LoadImage()(path)


@case("images", InputError, r"LoadImage: cannot read image '.*fifo': is a FIFO", isolate=True)
def image_is_a_fifo(d: Path) -> object:
    return _load_image(d / "fifo")


@case("images", AmdinferError, r"is a FIFO \(named pipe\), expected a regular file", isolate=True)
def image_fifo_inside_pipeline_map(d: Path) -> object:
    from amdinfer.preprocess import Cast, HwcToChw, LoadImage, Resize

    pipe = amdinfer.Pipeline(
        preprocess=[LoadImage(), Resize((32, 32)), HwcToChw(), Cast("float32")], engine=amdinfer.load(tiny_cnn(), **CPU)
    )
    with pipe:
        return list(pipe.map([d / "fifo"], workers=2))


@case("images", InputError, r"LoadImage: cannot read image '/dev/zero': is a character device", isolate=True)
def image_is_dev_zero(d: Path) -> object:
    return _load_image("/dev/zero")


@case("images", InputError, r"LoadImage: '.*bomb.png': refused as a decompression bomb", isolate=True)
def image_decompression_bomb(d: Path) -> object:
    return _load_image(d / "bomb.png")


@case("images", InputError, r"LoadImage: cannot read image: got 'x\\x00.png', a path with a NUL byte")
def image_path_with_nul(d: Path) -> object:
    return _load_image("x\0.png")


@case("images", InputError, r"LoadImage: cannot read image '.*folder': is a directory")
def image_path_is_a_folder(d: Path) -> object:
    return _load_image(d / "folder")


# ---------------------------------------------------------------------------------------------- options
@case("options", OptionError, r"cache_dir: got int 5, expected a path")
def cache_dir_is_an_int(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), cache_dir=5, **CPU)


@case("options", OptionError, r"cache_dir: got '.*\\x00.*', a path with a NUL byte")
def cache_dir_with_nul(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), cache_dir=str(d / "c\0"), **CPU)


@case("options", OptionError, r"cache: got 'q\\x00', a path with a NUL byte")
def int8_quantizer_cache_with_nul(d: Path) -> object:
    from amdinfer.quantize import Int8Quantizer

    return Int8Quantizer(calibration=[{"input": x32()}], cache="q\0", progress=False)


@case("options", OptionError, r"optimized_model_path: '.*folder' is a directory")
def optimized_model_path_is_a_folder(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), optimized_model_path=d / "folder", **CPU)


@case("options", OptionError, r"optimized_model_path: folder '.*nodir' of '.*' does not exist")
def optimized_model_path_missing_parent(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), optimized_model_path=d / "nodir" / "o.onnx", **CPU)


@case("options", OptionError, r"optimized_model_path: .*'/proc/o.onnx'")
def optimized_model_path_in_proc(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), optimized_model_path="/proc/o.onnx", **CPU)


@case("options", OptionError, r"optimized_model_path: got 'o\\x00', a path with a NUL byte")
def optimized_model_path_with_nul(d: Path) -> object:
    return amdinfer.load(tiny_cnn(), optimized_model_path="o\0", **CPU)


# ---------------------------------------------------------------------------------------------- cache
def _cached(cache: Path) -> tuple[amdinfer.Engine, str]:
    engine = amdinfer.load(tiny_cnn(), cache_dir=cache, **CPU)
    return engine, engine.info.settings["cache"]["key"]


def _heals(d: Path, name: str, damage: Callable[[Path, str], None]) -> str:
    """Build an entry, damage it, and check the next load warns, rebuilds and answers like an uncached engine."""
    cache = d / f"cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    _, key = _cached(cache)
    damage(cache, key)
    with warnings_logged() as warned:
        engine, _ = _cached(cache)
    assert not engine.info.cache_hit and warned, (engine.info.cache_hit, warned)
    want = amdinfer.load(tiny_cnn(), **CPU).run(x32())["logits"]
    assert np.array_equal(engine.run(x32())["logits"], want)
    again, _ = _cached(cache)
    assert again.info.cache_hit
    return f"rebuilt with a warning ({warned[0][:60]}...)"


def _edit_manifest(**changes: object) -> Callable[[Path, str], None]:
    def damage(cache: Path, key: str) -> None:
        path = cache / key / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest.update(changes)
        path.write_text(json.dumps(manifest))

    return damage


@case("cache")
def manifest_of_random_bytes(d: Path) -> object:
    def damage(cache: Path, key: str) -> None:
        (cache / key / "manifest.json").write_bytes(np.random.default_rng(5).bytes(200))

    return _heals(d, "random", damage)


@case("cache")
def manifest_sha256_is_an_int(d: Path) -> object:
    return _heals(d, "sha-int", _edit_manifest(sha256=5))


@case("cache")
def manifest_created_yesterday(d: Path) -> object:
    return _heals(d, "created", _edit_manifest(created="yesterday"))


@case("cache")
def manifest_parts_a_list(d: Path) -> object:
    return _heals(d, "parts", _edit_manifest(parts=[1, 2]))


@case("cache")
def artefact_is_a_symlink(d: Path) -> object:
    def damage(cache: Path, key: str) -> None:
        manifest = json.loads((cache / key / "manifest.json").read_text())
        artefact = cache / key / manifest["artefact"]
        moved = d / f"outside-{key}.onnx"
        shutil.move(artefact, moved)
        artefact.symlink_to(moved)

    return _heals(d, "symlink", damage)


def _foreign_artefact(d: Path, name: str, finish: Callable[[Path], None]) -> str:
    """Model B's artefact copied into model A's entry, A's manifest rewritten to name it (size and SHA right)."""
    cache = d / f"cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)
    _, key_a = _cached(cache)
    b = amdinfer.load(tiny_cnn(seed=7), cache_dir=cache, **CPU)
    key_b = b.info.settings["cache"]["key"]
    mb = json.loads((cache / key_b / "manifest.json").read_text())
    ma_path = cache / key_a / "manifest.json"
    ma = json.loads(ma_path.read_text())
    shutil.copy(cache / key_b / mb["artefact"], cache / key_a / mb["artefact"])
    ma.update(artefact=mb["artefact"], size=mb["size"], sha256=mb["sha256"])
    ma_path.write_text(json.dumps(ma))
    for p in (ma_path, cache / key_a / mb["artefact"]):
        finish(p)
    with warnings_logged() as warned:
        engine, _ = _cached(cache)
    want = amdinfer.load(tiny_cnn(), **CPU).run(x32())["logits"]
    assert np.array_equal(engine.run(x32())["logits"], want), "model A answered with model B's weights"
    assert warned and not engine.info.cache_hit
    return f"rebuilt with a warning ({warned[0][:60]}...)"


@case("cache")
def foreign_artefact_world_writable(d: Path) -> object:
    return _foreign_artefact(d, "foreign-mode", lambda p: p.chmod(0o666))


@case("cache")
def foreign_artefact_other_owner(d: Path) -> object:
    if os.geteuid() != 0:
        return "skipped: needs root to give the files to another user"
    return _foreign_artefact(d, "foreign-owner", lambda p: os.chown(p, 65534, 65534))


@case("cache")
def clear_keeps_a_user_folder_named_like_a_key(d: Path) -> object:
    cache = d / "cache-clear"
    shutil.rmtree(cache, ignore_errors=True)
    _cached(cache)
    mine = cache / ("ab" * 16)
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    assert clear(cache) == 1
    assert (mine / "thesis.tex").read_text() == "precious"
    return "removed amdinfer's entry only"


@case("cache", CacheError, r"cache folder '.*m.onnx': is a regular file, expected a directory")
def list_a_file(d: Path) -> object:
    return list_entries(d / "m.onnx")


@case("cache", CacheError, r"cache folder '.*missing': does not exist")
def clear_a_missing_folder(d: Path) -> object:
    return clear(d / "missing")


@case("cache", CacheError, r"cache folder '/proc/self': holds \d+ files or folders but no amdinfer CACHEDIR.TAG")
def clear_proc_self(d: Path) -> object:
    return clear("/proc/self")


def _make_read_only(d: Path, name: str, corrupt: bool) -> None:
    cache = d / f"cache-ro-{name}"
    if cache.exists():
        for p in [cache, *cache.rglob("*")]:
            p.chmod(0o755)
        shutil.rmtree(cache)
    if corrupt:
        _, key = _cached(cache)
        (cache / key / "manifest.json").write_text("{")
    else:
        CompiledModelCache(cache).runtime_dir("ort-migraphx-ep")  # an existing, tagged, empty cache
    for p in [cache, *cache.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)


def _read_only(d: Path, name: str) -> str:
    """Run as a user who cannot write the cache (``_runner.py`` drops root to ``nobody``)."""
    cache = d / f"cache-ro-{name}"
    with warnings_logged() as warned:
        engine = amdinfer.load(tiny_cnn(), cache_dir=cache, **CPU)
    assert not engine.info.cache_hit
    assert any("running uncached" in w for w in warned), warned
    want = amdinfer.load(tiny_cnn(), **CPU).run(x32())["logits"]
    assert np.array_equal(engine.run(x32())["logits"], want)
    return "warns and runs uncached"


@case("cache", isolate=True, setup=lambda d: _make_read_only(d, "miss", corrupt=False))
def read_only_cache_miss(d: Path) -> object:
    return _read_only(d, "miss")


@case("cache", isolate=True, setup=lambda d: _make_read_only(d, "corrupt", corrupt=True))
def read_only_cache_corrupt_entry(d: Path) -> object:
    return _read_only(d, "corrupt")


# ---------------------------------------------------------------------------------------------- command line
@dataclass(frozen=True)
class CliResult(Exception):
    """What a CLI case produced: the exit status and stderr (raised so cases stay uniform)."""

    rc: int
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.rc}: {self.stderr.strip()}"


def run_cli(d: Path, *argv: str) -> None:
    err = io.StringIO()
    with chdir(d), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(list(argv))
        except SystemExit as exc:
            rc = int(exc.code or 0)
    raise CliResult(rc, err.getvalue())


def cli_case(name: str, argv: list[str], rc: int, error: str, match: str, isolate: bool = False) -> None:
    pattern = rf"^exit {rc}: amdinfer {argv[0]}: {error}: {match}"
    case("command line", CliResult, pattern, isolate)(_named(name, lambda d: run_cli(d, *argv)))


def _named(name: str, fn: Callable[[Path], object]) -> Callable[[Path], object]:
    fn.__name__ = name
    return fn


cli_case("cli_inspect_dev_zero", ["inspect", "/dev/zero"], 1, "ModelError", r"model '/dev/zero': is a character device")
cli_case("cli_inspect_fifo", ["inspect", "fifo"], 1, "ModelError", r"model 'fifo': is a FIFO", isolate=True)
cli_case("cli_run_batch_negative", ["run", "m.onnx", "--batch", "-1"], 2, "UsageError", r"argument --batch: got -1")
cli_case(
    "cli_run_batch_trillion",
    ["run", "m.onnx", "--batch", "1000000000000"],
    1,
    "InputError",
    r"input 'input' \(random, --batch 1000000000000\): shape \(1000000000000, 3, 32, 32\)",
    isolate=True,
)
cli_case("cli_run_seed_negative", ["run", "m.onnx", "--seed", "-1"], 2, "UsageError", r"argument --seed: got -1")
cli_case(
    "cli_run_inputs_missing",
    ["run", "m.onnx", "--inputs", "missing.npz"],
    1,
    "InputError",
    r"--inputs 'missing.npz': file not found",
)
cli_case(
    "cli_run_inputs_random_bytes",
    ["run", "m.onnx", "--inputs", "rand.npz"],
    1,
    "InputError",
    r"--inputs 'rand.npz': not an .npz file",
)
cli_case(
    "cli_run_inputs_object_array",
    ["run", "m.onnx", "--inputs", "obj.npz"],
    1,
    "InputError",
    r"--inputs 'obj.npz': array 'input' holds Python objects",
)
cli_case(
    "cli_run_inputs_folder",
    ["run", "m.onnx", "--inputs", "folder"],
    1,
    "InputError",
    r"--inputs 'folder': is a directory",
)
cli_case(
    "cli_run_inputs_fifo",
    ["run", "m.onnx", "--inputs", "fifo"],
    1,
    "InputError",
    r"--inputs 'fifo': is a FIFO",
    isolate=True,
)
cli_case(
    "cli_run_save_missing_folder",
    ["run", "m.onnx", "--save", "nodir/out.npz"],
    1,
    "OptionError",
    r"--save: got 'nodir/out.npz', but folder 'nodir' does not exist",
)
cli_case(
    "cli_cache_list_a_file",
    ["cache", "list", "--cache-dir", "m.onnx"],
    1,
    "CacheError",
    r"cache folder 'm.onnx': is a regular file",
)
cli_case(
    "cli_cache_clear_a_file",
    ["cache", "clear", "--cache-dir", "m.onnx"],
    1,
    "CacheError",
    r"cache folder 'm.onnx': is a regular file",
)
cli_case(
    "cli_cache_list_missing",
    ["cache", "list", "--cache-dir", "missing"],
    1,
    "CacheError",
    r"cache folder 'missing': does not exist",
)
cli_case(
    "cli_cache_clear_missing",
    ["cache", "clear", "--cache-dir", "missing"],
    1,
    "CacheError",
    r"cache folder 'missing': does not exist",
)
cli_case(
    "cli_cache_list_proc_self",
    ["cache", "list", "--cache-dir", "/proc/self"],
    1,
    "CacheError",
    r"cache folder '/proc/self': holds",
)
cli_case(
    "cli_cache_clear_proc_self",
    ["cache", "clear", "--cache-dir", "/proc/self"],
    1,
    "CacheError",
    r"cache folder '/proc/self': holds",
)


def _corrupt_listing(d: Path, changes: dict) -> str:
    cache = d / f"cache-list-{next(iter(changes))}"
    shutil.rmtree(cache, ignore_errors=True)
    _, key = _cached(cache)
    _edit_manifest(**changes)(cache, key)
    try:
        run_cli(d, "cache", "list", "--cache-dir", str(cache))
    except CliResult as res:
        assert res.rc == 0 and not res.stderr, res
    [entry] = list_entries(cache)
    assert entry.problem and entry.key == key, entry
    return f"listed with its problem ({entry.problem[:50]}...)"


@case("command line")
def cli_cache_list_created_yesterday(d: Path) -> object:
    return _corrupt_listing(d, {"created": "yesterday"})


@case("command line")
def cli_cache_list_parts_a_list(d: Path) -> object:
    return _corrupt_listing(d, {"parts": [1, 2]})


# ---------------------------------------------------------------------------------------------- issue 20
# The cases of issue 20, one module per area; each registers its rows with @case above.
import _cases_cli  # noqa: E402, F401
import _cases_config  # noqa: E402, F401
import _cases_images  # noqa: E402, F401
import _cases_quant  # noqa: E402, F401
import _cases_results  # noqa: E402, F401
