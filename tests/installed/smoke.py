"""Smoke test of an installed amdinfer: every CLI subcommand and the README's first snippet, outside the checkout.

Run by ``nox -s package`` in a virtualenv that holds the built wheel (not an editable install), from an empty
temporary working directory, never by the main pytest run (``tests/conftest.py`` ignores this folder)::

    python smoke.py --checkout /path/to/clone

``--checkout`` is only used to prove that ``amdinfer`` is *not* imported from there and to read README.md.
Each check runs the ``amdinfer`` console script of this interpreter's environment, asserts its exit code and
one property of what it wrote, and prints one line; the first failure raises with the command's output.
Models are built offline (``amdinfer.testing.models``); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.resources
import json
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

import amdinfer
from amdinfer.cli import SUBCOMMANDS
from amdinfer.testing.models import tiny_cnn

DIST = "amdinfer-onnx"
#: The console script this environment installed (the wheel's entry point, not ``python -m``).
AMDINFER = str(Path(sys.executable).with_name("amdinfer"))
CPU = ["--providers", "cpu"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkout", type=Path, required=True, help="the source tree the wheel was built from")
    args = p.parse_args()
    checkout = args.checkout.resolve()
    check_installed(checkout)
    Path("cnn.onnx").write_bytes(tiny_cnn().SerializeToString())  # input (N, 3, 32, 32) -> logits (N, 10)
    rng = np.random.default_rng(0)
    # 40 samples: quantize holds the last 10 out, enough for a verdict (fewer than 8 is NOT JUDGED, exit 3)
    np.savez("calib.npz", input=rng.random((40, 3, 32, 32), dtype=np.float32))
    covered = set(CHECKS)
    listed = {importlib.import_module(path).NAME for path in SUBCOMMANDS}
    assert listed <= covered, f"subcommands without a smoke check: {sorted(listed - covered)}"
    for name, check in CHECKS.items():
        check()
        print(f"smoke  amdinfer {name}: ok")
    readme_snippet(checkout / "README.md")
    print(f"smoke  all {len(CHECKS)} subcommands and the README snippet passed (amdinfer {amdinfer.__version__})")


def check_installed(checkout: Path) -> None:
    """The package comes from site-packages as a regular (not editable) install, with its data and license."""
    # nox keeps its virtualenvs in the checkout (.nox/): inside this environment's prefix is not "the checkout".
    here = Path(amdinfer.__file__).resolve()
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert here.is_relative_to(site), f"amdinfer imported from {here}, not from this environment's {site}"
    prefix = Path(sys.prefix).resolve()
    on_path = [
        e
        for e in sys.path
        if Path(e or ".").resolve().is_relative_to(checkout) and not Path(e).resolve().is_relative_to(prefix)
    ]
    assert not on_path, f"the checkout is on sys.path: {on_path}"
    assert Path.cwd().resolve() != checkout and not Path.cwd().resolve().is_relative_to(checkout), Path.cwd()
    dist = importlib.metadata.distribution(DIST)
    assert dist.version == amdinfer.__version__, (dist.version, amdinfer.__version__)
    direct = dist.read_text("direct_url.json")
    assert direct is None or not json.loads(direct).get("dir_info", {}).get("editable"), direct
    assert dist.metadata["License-Expression"] == "MIT", dist.metadata["License-Expression"]
    licenses = [f for f in dist.files or [] if f.name == "LICENSE"]
    assert licenses and "MIT License" in licenses[0].read_text(), dist.files
    package = importlib.resources.files("amdinfer")
    assert package.joinpath("py.typed").is_file()
    operators = package.joinpath("data/migraphx_onnx_operators.txt").read_text().split()
    assert "Conv" in operators, operators[:10]
    assert Path(AMDINFER).is_file(), f"no console script at {AMDINFER}"
    print(f"smoke  amdinfer {amdinfer.__version__} from {here.parent} (wheel install, checkout not on sys.path)")


def cli(*argv: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    """Run ``amdinfer ARGV`` and assert its exit code; errors carry the command's output."""
    done = subprocess.run([AMDINFER, *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == rc, f"amdinfer {' '.join(argv)}: exit {done.returncode}, expected {rc}\n" + (
        f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    return done


def cli_json(*argv: str, rc: int = 0) -> dict:
    out = json.loads(cli(*argv, "--json", rc=rc).stdout)
    assert out["command"] == argv[0] and out["amdinfer"] == amdinfer.__version__, {k: out[k] for k in list(out)[:2]}
    return out


def saved_array(archive: Path, kind: str, name: str) -> np.ndarray:
    """``name`` from an ``.npz`` written by the CLI: a plain key, or ``kind/name`` (the golden layout)."""
    with np.load(archive, allow_pickle=False) as data:
        for key in (name, f"{kind}/{name}"):
            if key in data.files:
                return data[key]
    raise AssertionError(f"{archive}: no array {name!r} or {kind + '/' + name!r} among {data.files}")


def check_version() -> None:
    assert cli("--version").stdout.strip() == f"amdinfer {amdinfer.__version__}"


def check_doctor() -> None:
    out = cli_json("doctor")
    assert out["packages"][DIST] == amdinfer.__version__, out["packages"]
    cli("doctor")


def check_inspect() -> None:
    out = cli_json("inspect", "cnn.onnx")
    assert [(i["name"], i["shape"]) for i in out["inputs"]] == [("input", ["N", 3, 32, 32])], out["inputs"]
    assert [o["name"] for o in out["outputs"]] == ["logits"], out["outputs"]
    # The MIGraphX coverage reads amdinfer/data/migraphx_onnx_operators.txt (when `migraphx` does not import):
    # the file every non-editable install lacked before it was listed in package-data.
    assert out["coverage"]["migraphx"]["unsupported"] == [], out["coverage"]
    assert "logits" in cli("inspect", "cnn.onnx").stdout


def check_run() -> None:
    # The documented random inputs: np.random.default_rng(S).random(shape, dtype=float32) per input.
    cli("run", "cnn.onnx", *CPU, "--batch", "2", "--seed", "3", "--save", "out.npz", "-q")
    x = np.random.default_rng(3).random((2, 3, 32, 32), dtype=np.float32)
    expected = amdinfer.load("cnn.onnx", backend="reference").run({"input": x})["logits"]
    got = saved_array(Path("out.npz"), "output", "logits")
    assert got.shape == (2, 10) and np.allclose(got, expected, rtol=1e-4, atol=1e-5), (got, expected)
    out = cli_json("run", "cnn.onnx", *CPU, "--batch", "2", "-q")
    assert out["outputs"]["logits"]["shape"] == [2, 10], out["outputs"]
    assert cli("run", "cnn.onnx", "--bogus", rc=2).stderr.startswith("amdinfer run: UsageError:")
    failed = cli("run", "missing.onnx", "-q", rc=1).stderr
    assert failed.startswith("amdinfer run: ") and "Traceback" not in failed and "missing.onnx" in failed, failed


def check_bench() -> None:
    out = cli_json("bench", "cnn.onnx", *CPU, "--batch", "1,2", "--iterations", "5", "--warmup", "1", "-q")
    rows = [(r["batch"], r["iterations"], r["items"]) for r in out["results"]]
    assert rows == [(1, 5, 5), (2, 5, 10)], rows


def check_profile() -> None:
    out = cli_json("profile", "cnn.onnx", *CPU, "--runs", "2", "--trace", "trace.json", "-q")
    assert out["runs"] == 2 and out["nodes"], out
    trace = json.loads(Path("trace.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("cat") == "Node" for e in events), events[:3]


def check_verify() -> None:
    assert "PASSED" in cli("verify", "cnn.onnx", *CPU, "--save-golden", "golden.npz", "-q").stdout
    assert cli_json("verify", "cnn.onnx", "--backend", "reference", "--golden", "golden.npz", "-q")["passed"]
    # A golden whose outputs are off: exit 1, not a pass.
    with np.load("golden.npz", allow_pickle=False) as data:
        wrong = {k: (data[k] * 2 + 1 if k.startswith("output/") else data[k]) for k in data.files}
    np.savez("wrong.npz", **wrong)
    assert not cli_json("verify", "cnn.onnx", *CPU, "--golden", "wrong.npz", "-q", rc=1)["passed"]


def check_compile() -> None:
    common = ["compile", "cnn.onnx", *CPU, "--batch", "1,2", "--cache-dir", "compiled", "-q"]
    first = cli_json(*common, "--out", "optimized.onnx")
    assert first["cache_hit"] is False and Path(first["artefact"]).is_file(), first
    onnx.checker.check_model(onnx.load("optimized.onnx"))
    assert cli_json(*common)["cache_hit"] is True


def check_cache() -> None:
    listed = cli_json("cache", "list", "--cache-dir", "compiled")
    assert listed["entries"] and all(e["backend"] == "ort" for e in listed["entries"]), listed
    assert "ort" in cli("cache", "list", "--cache-dir", "compiled").stdout
    assert cli_json("cache", "clear", "--cache-dir", "compiled")["removed"] == len(listed["entries"])
    assert cli_json("cache", "list", "--cache-dir", "compiled")["entries"] == []


def check_quantize() -> None:
    out = cli_json(
        "quantize", "cnn.onnx", "--precision", "int8", "--calibration", "calib.npz", "--out", "int8.onnx", "-q"
    )
    assert out["passed"] and out["verdict"] == "PASS", out
    ops = {n.op_type for n in onnx.load("int8.onnx").graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops, ops
    out = cli_json("quantize", "cnn.onnx", "--precision", "fp16", "--out", "fp16.onnx", "-q")
    assert out["passed"], out
    dtypes = {i.data_type for i in onnx.load("fp16.onnx").graph.initializer}
    assert onnx.TensorProto.FLOAT16 in dtypes, dtypes


def check_serve() -> None:
    assert "--host" in cli("serve", "--help").stdout
    try:
        importlib.metadata.distribution("kserve")
    except importlib.metadata.PackageNotFoundError:
        # The wheel's [cpu,vision] install has no KServe: one line naming the extra, exit 1, no traceback.
        failed = cli("serve", "cnn.onnx", rc=1).stderr
        assert failed.startswith("amdinfer serve: BackendUnavailableError:") and "Traceback" not in failed, failed
        assert "[serve]" in failed, failed


def check_predict() -> None:
    from PIL import Image

    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 48, 3), dtype=np.uint8)).save("img.png")
    out = cli_json("predict", "cnn.onnx", "img.png", "--task", "classify", *CPU, "--save-dir", "pred", "-q")
    assert out["items"] == 1 and Path(out["files"]["json"]).is_file() and Path(out["files"]["csv"]).is_file(), out
    rows = json.loads(Path(out["files"]["json"]).read_text())
    assert len(rows) == 1 and rows[0]["image"].endswith("img.png") and rows[0]["classes"], rows
    failed = cli("predict", "cnn.onnx", "missing.png", "--task", "classify", "-q", rc=1).stderr
    assert failed.startswith("amdinfer predict: ") and "Traceback" not in failed and "missing.png" in failed, failed


def check_val() -> None:
    failed = cli("val", "cnn.onnx", "missing-set", rc=1).stderr
    assert failed.startswith("amdinfer val: ") and "Traceback" not in failed and "missing-set" in failed, failed


CHECKS: dict[str, Callable[[], None]] = {
    "--version": check_version,
    "doctor": check_doctor,
    "inspect": check_inspect,
    "run": check_run,
    "bench": check_bench,
    "profile": check_profile,
    "verify": check_verify,
    "compile": check_compile,
    "cache": check_cache,
    "quantize": check_quantize,
    "serve": check_serve,
    "predict": check_predict,
    "val": check_val,
}


def readme_snippet(readme: Path) -> None:
    """README.md's first ``python`` block, run as written; each ``*.onnx`` it names is a tiny CNN at 224x224."""
    block = re.search(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.S)
    assert block, f"{readme}: no ```python block"
    code = block.group(1)
    names = set(re.findall(r"[\"']([\w./-]+\.onnx)[\"']", code))
    assert names, f"the README snippet names no .onnx file:\n{code}"
    for name in names:
        Path(name).write_bytes(tiny_cnn(image_size=224).SerializeToString())
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"README snippet failed:\n{code}\n{done.stdout}\n{done.stderr}"
    print(f"smoke  README snippet ({len(code.splitlines())} lines): ok -> {done.stdout.strip()[:200]}")


if __name__ == "__main__":
    main()
