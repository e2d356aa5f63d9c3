"""Issue 20's and 22's robustness cases: cli (registered into the corpus by ``_corpus.py``).

Output files (``--out``, ``--save``, ``--trace``, ...) are written beside the target and renamed over it: a
symbolic link planted at the path is replaced, never followed, and an output that is one of the command's
inputs is refused. The rest: option conflicts and usage errors name what they should, hints spell NumPy 2's
dtypes, a prepared run notices a feed resized in place, and a cache cleared by another process never fails
a load. Issue 22: the cache and engine options conflict in one line, ``--mean``/``--std`` are checked against the
images, notes obey ``-q``, and a reader that closes stdout early ends the command quietly.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from _corpus import CPU, CliResult, case, chdir, run_cli
from onnx import TensorProto, helper

import amdinfer
from amdinfer import cli
from amdinfer.errors import InputError
from amdinfer.testing.models import tiny_cnn

VICTIM = b"a file the command must not touch"


def _folder(d: Path, name: str) -> Path:
    """A fresh folder for one case, holding a copy of the model (the shared fixtures stay untouched)."""
    f = d / name
    shutil.rmtree(f, ignore_errors=True)
    f.mkdir()
    shutil.copyfile(d / "m.onnx", f / "m.onnx")
    return f


def _cli(f: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with chdir(f), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _through_symlink(d: Path, name: str, argv: list[str], output: str) -> tuple[Path, dict]:
    """Run ``argv`` (``{out}`` is the output) with a symbolic link to a victim file planted at the output path."""
    f = _folder(d, name)
    victim = f / "victim.txt"
    victim.write_bytes(VICTIM)
    (f / output).symlink_to(victim)
    rc, out, err = _cli(f, *[a.replace("{out}", output) for a in argv], "--json", "-q")
    assert rc in (0, 1) and not err, (rc, err)
    assert victim.read_bytes() == VICTIM, "the symbolic link was followed"
    target = f / output
    assert target.is_file() and not target.is_symlink()
    assert not [p.name for p in f.iterdir() if p.name.startswith(f".{output}.")], "a temporary file was left"
    return target, json.loads(out)


@case("command line", CliResult, r"^exit 1: amdinfer compile: OptionError: --out: got '\./m\.onnx', the same file as "
      r"the input model \('m\.onnx'\); expected a different path")  # fmt: skip
def cli_compile_out_is_input(d: Path) -> object:
    f = _folder(d, "compile_out_is_input")
    before = (f / "m.onnx").read_bytes()
    try:
        run_cli(f, "compile", "m.onnx", "--providers", "cpu", "--out", "./m.onnx", "-q")
    finally:
        assert (f / "m.onnx").read_bytes() == before
    return None  # pragma: no cover - run_cli raises


@case("command line")
def cli_compile_out_symlink(d: Path) -> object:
    out, doc = _through_symlink(
        d, "compile_out_symlink", ["compile", "m.onnx", "--providers", "cpu", "--out", "{out}"], "opt.onnx"
    )
    assert out.read_bytes() == Path(doc["artefact"]).read_bytes()
    return "a link at --out is replaced by the compiled model; the file it pointed at is unchanged"


@case("command line")
def cli_quantize_out_symlink(d: Path) -> object:
    out, _ = _through_symlink(
        d, "quantize_out_symlink", ["quantize", "m.onnx", "--precision", "fp16", "--out", "{out}"], "q.onnx"
    )
    types = {t.data_type for t in onnx.load(str(out)).graph.initializer}
    assert types == {TensorProto.FLOAT16}, types
    return "a link at --out is replaced by the fp16 model; the file it pointed at is unchanged"


@case("command line")
def cli_profile_trace_symlink(d: Path) -> object:
    argv = ["profile", "m.onnx", "--providers", "cpu", "--runs", "1", "--trace", "{out}"]
    out, _ = _through_symlink(d, "profile_trace_symlink", argv, "trace.json")
    assert any(e.get("cat") == "Node" for e in json.loads(out.read_text()))
    return "a link at --trace is replaced by the Chrome trace; the file it pointed at is unchanged"


@case("command line")
def cli_run_save_symlink(d: Path) -> object:
    out, _ = _through_symlink(d, "run_save_symlink", ["run", "m.onnx", "--providers", "cpu", "--save", "{out}"], "o")
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    with amdinfer.load(tiny_cnn(), cache=False, **CPU) as engine, np.load(out) as saved:
        np.testing.assert_array_equal(saved["input/input"], x)  # the golden-file format (verify --golden)
        np.testing.assert_allclose(saved["output/logits"], engine.run(x)["logits"], rtol=1e-5)
    return "a link at --save is replaced by the .npz (at exactly that name); the file it pointed at is unchanged"


@case("command line")
def cli_verify_save_golden_name(d: Path) -> object:
    f = _folder(d, "verify_save_golden_name")
    rc, out, err = _cli(f, "verify", "m.onnx", "--providers", "cpu", "--save-golden", "g_out", "-q")
    assert rc == 0 and not err, (rc, err)
    assert "golden    wrote inputs and reference outputs to g_out\n" in out
    assert sorted(p.name for p in f.iterdir()) == ["g_out", "m.onnx"]
    with np.load(f / "g_out") as g:
        assert {"meta", "input/input", "output/logits"} <= set(g.files)
    return "--save-golden g_out writes g_out (an .npz archive) and says so"


@case("command line", CliResult, r"^exit 1: amdinfer run: OptionError: --input-shapes input:2x3x32x32 and --batch 5 "
      r"disagree on axis 0 of input 'input'")  # fmt: skip
def cli_input_shapes_vs_batch(d: Path) -> object:
    run_cli(d, "run", "m.onnx", "--providers", "cpu", "--input-shapes", "input:2x3x32x32", "--batch", "5", "-q")
    return None  # pragma: no cover - run_cli raises


@case("command line", CliResult, r"^exit 2: amdinfer run: UsageError: unrecognized arguments: --bogus "
      r"\(see amdinfer run --help\)$")  # fmt: skip
def cli_unknown_flag_names_command(d: Path) -> object:
    run_cli(d, "run", "m.onnx", "--bogus")
    return None  # pragma: no cover - run_cli raises


@case("command line", CliResult, r"^exit 1: amdinfer run: OptionError: --provider-option: applies to the first "
      r"provider of --providers; give --providers")  # fmt: skip
def cli_provider_option_without_providers(d: Path) -> object:
    run_cli(d, "run", "m.onnx", "--provider-option", "device_id=1", "-q")
    return None  # pragma: no cover - run_cli raises


@case("command line", CliResult, r"^exit 1: amdinfer bench: OptionError: --cache-dir 'c': given together with "
      r"--no-cache; drop one of them$")  # fmt: skip
def cli_cache_dir_with_no_cache(d: Path) -> object:
    run_cli(d, "bench", "m.onnx", "--providers", "cpu", "--no-cache", "--cache-dir", "c", "-q")
    return None  # pragma: no cover - run_cli raises


def _image_folder(d: Path, name: str) -> Path:
    from PIL import Image

    f = _folder(d, name)
    (f / "imgs").mkdir()
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(f / "imgs" / "a.png")
    return f


@case("command line", CliResult, r"^exit 1: amdinfer quantize: OptionError: --mean: got 2 values \[0\.5, 0\.5\] "
      r"for the 3-channel images of --calibration 'imgs', expected 1 or 3$")  # fmt: skip
def cli_mean_count_vs_channels(d: Path) -> object:
    f = _image_folder(d, "mean_count_vs_channels")
    run_cli(f, "quantize", "m.onnx", "--precision", "int8", "--calibration", "imgs", "--mean", "0.5,0.5",
            "--out", "q.onnx", "-q")  # fmt: skip
    return None  # pragma: no cover - run_cli raises


@case("command line", CliResult, r"^exit 1: amdinfer run: OptionError: --std: got '0\.2,0,0\.2', expected values > 0")
def cli_std_zero(d: Path) -> object:
    f = _image_folder(d, "std_zero")
    run_cli(f, "run", "m.onnx", "--precision", "int8", "--calibration", "imgs", "--std", "0.2,0,0.2", "-q")
    return None  # pragma: no cover - run_cli raises


@case("command line")
def cli_quiet_drops_notes(d: Path) -> object:
    f = _folder(d, "quiet_drops_notes")
    rc, out, err = _cli(f, "run", "m.onnx", "-q")  # auto: MIGraphX (and GPU providers) are passed over here
    assert rc == 0 and err == "" and "passed over" not in out, (rc, err)
    rc, out, err = _cli(f, "run", "m.onnx", "--json", "-q")
    assert rc == 0 and err == "" and json.loads(out)["skipped"]
    return "-q: no notes at all (the backends passed over are in --json's skipped)"


@case("command line", isolate=True)
def cli_stdout_closed_early(d: Path) -> object:
    import os

    f = _folder(d, "stdout_closed_early")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a byte
    try:
        done = subprocess.run(
            [sys.executable, "-m", "amdinfer", "run", "m.onnx", "--providers", "cpu", "--json", "-q"],
            cwd=f, stdout=write, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == b"", (done.returncode, done.stderr[-400:])
    return "stdout closed by its reader: exit 0, nothing on stderr (no BrokenPipeError)"


@case("engine inputs", InputError, r"^input 'x': got dtype float32, expected bfloat16 \(cast explicitly, e\.g\. "
      r"x\.astype\(ml_dtypes\.bfloat16\)\)$")  # fmt: skip
def hint_bfloat16_names_ml_dtypes(d: Path) -> object:
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])
    y = helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    with amdinfer.load(model, cache=False, **CPU) as engine:
        return engine.run({"x": np.zeros(2, np.float32)})


@case("engine inputs", InputError, r"^input 'input': prepared with shape \(2, 3, 32, 32\) float32, now shape "
      r"\(1, 3, 32, 32\) float32 \(changed in place after engine\.prepare\)")  # fmt: skip
def prepare_feed_resized(d: Path) -> object:
    x = np.zeros((2, 3, 32, 32), np.float32)
    with amdinfer.load(tiny_cnn(), cache=False, io_binding=True, **CPU) as engine:
        step = engine.prepare({"input": x})
        step()
        x.resize((1, 3, 32, 32), refcheck=False)
        return step()


_CLEARER = """
import sys, pathlib
from amdinfer.cache import clear
root, stop = sys.argv[1], pathlib.Path(sys.argv[2])
while not stop.exists():
    clear(root)
"""


@case("cache", isolate=True)
def cache_clear_races_loads(d: Path) -> object:
    root = d / "race-cache"
    shutil.rmtree(root, ignore_errors=True)
    stop = d / "race-stop"
    stop.unlink(missing_ok=True)
    model = tiny_cnn()
    amdinfer.load(model, cache_dir=root, **CPU).close()
    clearer = subprocess.Popen([sys.executable, "-c", _CLEARER, str(root), str(stop)])
    failures: list[str] = []
    n = 120
    try:
        for _ in range(n):
            try:
                amdinfer.load(model, cache_dir=root, **CPU).close()
            except Exception as exc:  # the case's finding: any failed load
                failures.append(f"{type(exc).__name__}: {exc}")
    finally:
        stop.touch()
        try:
            clearer.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover
            clearer.kill()
            clearer.wait()
        stop.unlink(missing_ok=True)
    assert clearer.returncode == 0, clearer.returncode
    assert not failures, f"{len(failures)} of {n} loads failed: {failures[:2]}"
    return f"{n} loads against a process clearing the cache in a loop: none failed"
