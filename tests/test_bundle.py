"""Deployable bundles (issue 39): compiled once, copied to a fresh folder and HOME, loaded in another process
without compiling, outputs equal to the NumPy reference on the source model; tampered and incompatible bundles
refused naming what differs and the rebuild command; ``amdinfer compile --bundle`` prints a line per bucket."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import amdinfer
from amdinfer.bundle import MANIFEST, read_manifest, write_bundle
from amdinfer.bundle._manifest import file_sha256, seal
from amdinfer.cli import main
from amdinfer.testing import models

BUILDERS = {
    "cnn": lambda: models.tiny_cnn(),
    "yolov8": lambda: models.yolov8(image_size=64, num_classes=4),
}

#: The child process: load the copied bundle, prove nothing was compiled, run fresh feeds, save the outputs.
CHILD = r"""
import json, sys
import numpy as np
import amdinfer
from amdinfer.cache import CompiledModelCache
folder, feeds_path, out_path, cache = sys.argv[1:5]
engine = amdinfer.load(folder)
info = engine.info
feeds = dict(np.load(feeds_path))
outs = {}
for n in (1, 3, 4):  # 3 rows: padded to the bucket of 4
    got = engine.run({k: v[:n] for k, v in feeds.items()})
    outs.update({f"{n}:{k}": v for k, v in got.items()})
np.savez(out_path, **outs)
again = amdinfer.load(folder)
print(json.dumps({
    "bundle": info.settings["bundle"],
    "session": info.settings["session"],
    "model_path": str(engine.model.path),
    "cache_entries": len(CompiledModelCache(cache).entries()),
    "second_verify": again.info.settings["bundle"]["verify"],
    "buckets": list(engine.batch_buckets),
}))
"""


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "build-cache"))


@pytest.fixture(scope="module")
def cnn_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cnn") / "bundle"
    write_bundle(models.tiny_cnn(), folder, batch_buckets=[1, 4])
    return folder


def _copy(bundle: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copied" / "bundle"
    shutil.copytree(bundle, target)
    return target


def _reseal(folder: Path, **changes: object) -> None:
    """Edit the manifest as a bundle built elsewhere would have it: changed fields, a valid digest and file hashes."""
    data = json.loads((folder / MANIFEST).read_text())
    env = {**data["environment"], **changes}
    data["environment"] = env
    data["files"] = {name: file_sha256(folder / name) for name in data["files"]}
    (folder / MANIFEST).write_text(json.dumps(seal(data)))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_copied_bundle_loads_elsewhere_without_compiling_and_matches_the_reference(name: str, tmp_path: Path) -> None:
    source = BUILDERS[name]()
    built = write_bundle(source, tmp_path / "build" / "bundle", batch_buckets=[1, 4])
    copied = _copy(built, tmp_path)
    shutil.rmtree(built)  # nothing of the build machine's folder is left to lean on
    feeds = models.random_inputs(source, batch=4, seed=7)  # not the goldens' inputs
    np.savez(tmp_path / "feeds.npz", **feeds)
    home, cache = tmp_path / "home", tmp_path / "fresh-cache"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "AMDINFER_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(home / ".cache")}
    args = [str(copied), str(tmp_path / "feeds.npz"), str(tmp_path / "out.npz"), str(cache)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # Loaded from the copied bundle's compiled graph, with ONNX Runtime's optimizations off: nothing re-optimized.
    assert report["bundle"]["dir"] == str(copied.resolve())
    assert report["bundle"]["manifest_sha256"] == read_manifest(copied)["manifest_sha256"]
    assert Path(report["model_path"]).resolve().is_relative_to(copied.resolve())
    assert report["session"]["graph_optimization_level"] == "ORT_DISABLE_ALL"
    assert report["session"]["optimized_model_filepath"] is None
    assert report["cache_entries"] == 0  # the fresh machine's cache holds no compiled model
    assert report["buckets"] == [1, 4]
    # First load on this "machine" ran the goldens; the second one remembers it.
    assert report["bundle"]["verify"]["ran"] and report["bundle"]["verify"]["passed"]
    assert report["second_verify"]["ran"] is False
    outs = np.load(tmp_path / "out.npz")
    with amdinfer.load(source, backend="reference") as ref:
        for n in (1, 3, 4):
            want = ref.run({k: v[:n] for k, v in feeds.items()})
            for k, v in want.items():
                np.testing.assert_allclose(outs[f"{n}:{k}"], v, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(v).max())))


def test_the_bundled_graph_is_the_optimized_one(cnn_bundle: Path) -> None:
    """The bundle holds ORT's optimized graph (fused ops the source model lacks), not a copy of the source."""
    data = read_manifest(cnn_bundle)
    graph = onnx.load(str(cnn_bundle / data["buckets"][0]["file"]))
    source_ops = {n.op_type for n in models.tiny_cnn().graph.node}
    assert {n.op_type for n in graph.graph.node} != source_ops
    assert data["model"]["sha256"] == amdinfer.ModelSource.from_any(models.tiny_cnn()).sha256
    assert data["environment"]["onnxruntime"] == __import__("onnxruntime").__version__
    assert [b["batch"] for b in data["buckets"]] == [1, 4]
    assert set(data["files"]) == {"ort/model.optimized.onnx", "golden/b1.npz", "golden/b4.npz"}


@pytest.mark.parametrize("target", ["ort/model.optimized.onnx", "golden/b4.npz"])
def test_a_changed_file_is_refused_naming_it(cnn_bundle: Path, tmp_path: Path, target: str) -> None:
    copied = _copy(cnn_bundle, tmp_path)
    path = copied / target
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(amdinfer.BundleError, match="changed since the bundle was written") as exc:
        amdinfer.load(copied)
    assert exc.value.field == target and target in str(exc.value)
    assert "amdinfer compile" in str(exc.value) and "--bundle" in str(exc.value)


def test_a_missing_or_added_file_is_refused(cnn_bundle: Path, tmp_path: Path) -> None:
    copied = _copy(cnn_bundle, tmp_path)
    (copied / "golden" / "b1.npz").unlink()
    with pytest.raises(amdinfer.BundleError, match=r"'golden/b1\.npz' is missing"):
        amdinfer.load(copied)
    copied = _copy(cnn_bundle, tmp_path / "2")
    (copied / "ort" / "extra.onnx").write_bytes(b"x")
    with pytest.raises(amdinfer.BundleError, match=r"'ort/extra\.onnx' is not in the manifest"):
        amdinfer.load(copied)


def test_an_edited_manifest_is_refused(cnn_bundle: Path, tmp_path: Path) -> None:
    copied = _copy(cnn_bundle, tmp_path)
    data = json.loads((copied / MANIFEST).read_text())
    data["precision"] = "fp16"
    (copied / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(amdinfer.BundleError, match=r"manifest\.json was edited") as exc:
        amdinfer.load(copied)
    assert exc.value.field == MANIFEST
    assert exc.value.rebuild is not None and exc.value.rebuild.startswith("amdinfer compile ")


@pytest.mark.parametrize(
    ("field", "value"),
    [("onnxruntime", "1.31.0"), ("cpu", "x86_64:000000000000"), ("machine", "aarch64"), ("amdinfer", "0.0.1")],
)
def test_a_bundle_for_another_runtime_or_machine_is_refused(
    cnn_bundle: Path, tmp_path: Path, field: str, value: str
) -> None:
    copied = _copy(cnn_bundle, tmp_path)
    _reseal(copied, **{field: value})
    with pytest.raises(amdinfer.BundleError) as exc:
        amdinfer.load(copied)
    text = str(exc.value)
    assert exc.value.field == field
    assert f"{field} is {value!r} in the bundle" in text
    assert "rebuild it on this machine: amdinfer compile " in text and "--bundle" in text and "--batch 1,4" in text


def test_a_golden_that_no_longer_matches_is_an_error(cnn_bundle: Path, tmp_path: Path) -> None:
    copied = _copy(cnn_bundle, tmp_path)
    path = copied / "golden" / "b4.npz"
    arrays = dict(np.load(path))
    out = next(k for k in arrays if k.startswith("out:"))
    arrays[out] = arrays[out] + 1.0
    np.savez(path, **arrays)
    _reseal(copied)  # hashes made valid: only the goldens' check can tell
    with pytest.raises(amdinfer.BundleError, match=r"bucket b4 output .* does not match its golden") as exc:
        amdinfer.load(copied, verify=True)
    assert exc.value.field == f"golden b4/{out[4:]}"
    engine = amdinfer.load(copied, verify=False)  # asked not to check: loads, and says so
    assert engine.info.settings["bundle"]["verify"] == {
        "ran": False,
        "passed": None,
        "summary": "not run (verify=False)",
    }


def test_asking_for_other_settings_is_refused(cnn_bundle: Path) -> None:
    with pytest.raises(amdinfer.BundleError, match="built at precision 'fp32', 'fp16' was asked for") as exc:
        amdinfer.load(cnn_bundle, precision="fp16")
    assert exc.value.field == "precision"
    with pytest.raises(amdinfer.BundleError, match="built for backend 'ort'"):
        amdinfer.load(cnn_bundle, backend="reference")
    with pytest.raises(amdinfer.OptionError, match="batch_buckets: a bundle is loaded as it was built"):
        amdinfer.load(cnn_bundle, batch_buckets=[2])


def test_write_refuses_a_folder_that_is_not_a_bundle(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(amdinfer.OptionError, match="non-empty folder that is not a bundle"):
        write_bundle(models.tiny_cnn(), tmp_path / "busy")
    write_bundle(models.tiny_cnn(), tmp_path / "b")
    with pytest.raises(amdinfer.OptionError, match="already holds a bundle; pass overwrite=True"):
        write_bundle(models.tiny_cnn(), tmp_path / "b")
    assert write_bundle(models.tiny_cnn(), tmp_path / "b", overwrite=True, batch_buckets=[2]) == tmp_path / "b"
    assert [b["name"] for b in read_manifest(tmp_path / "b")["buckets"]] == ["b2"]


def test_migraphx_bundle_without_migraphx_is_refused(tmp_path: Path) -> None:
    if importlib.util.find_spec("migraphx") is not None:
        pytest.skip("MIGraphX is installed: test_migraphx_bundle_writes_a_program_per_bucket covers it")
    with pytest.raises(amdinfer.BackendUnavailableError, match="backend 'migraphx' needs MIGraphX"):
        write_bundle(models.tiny_cnn(), tmp_path / "b", backend="migraphx")
    assert not (tmp_path / "b").exists()


def test_migraphx_bundle_writes_a_program_per_bucket(tmp_path: Path) -> None:
    pytest.importorskip("migraphx", reason="MIGraphX is not installed here: the .mxr path is not exercised")
    folder = write_bundle(models.tiny_cnn(), tmp_path / "b", backend="migraphx", batch_buckets=[1, 4])
    data = read_manifest(folder)
    assert [b["file"] for b in data["buckets"]] == ["migraphx/b1.mxr", "migraphx/b4.mxr"]


def test_cli_compile_bundle_prints_a_line_per_bucket_then_run_and_bench_load_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(models.tiny_cnn(), model)
    folder = tmp_path / "D"
    assert main(["compile", str(model), "--bundle", str(folder), "--batch", "1,4"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if ": bucket " in line]
    assert len(lines) == 2 and "bucket b1 (input 1x3x32x32)" in lines[0] and "bucket b4" in lines[1]
    assert all(" s (elapsed " in line for line in lines)
    assert f"bundle    {folder}" in captured.out
    assert read_manifest(folder)["rebuild"] == f"amdinfer compile {model} --bundle {folder} --batch 1,4 --force"
    assert main(["run", str(folder), "--batch", "4"]) == 0
    assert "loaded from bundle" in capsys.readouterr().out
    assert main(["bench", str(folder), "--batch", "1,4", "--iterations", "3", "--warmup", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["command"] == "bench"
    assert main(["compile", str(model), "--bundle", str(folder), "--batch", "1"]) == 1  # exists: one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a bundle" in err[0] and "Traceback" not in err[0]
    (folder / "golden" / "b1.npz").write_bytes(b"tampered")
    assert main(["run", str(folder)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "BundleError" in err[0] and "'golden/b1.npz' changed" in err[0]


def test_fp16_bundle_holds_an_fp16_graph_and_its_goldens_pass_by_cosine(tmp_path: Path) -> None:
    folder = write_bundle(models.tiny_cnn(), tmp_path / "b", batch_buckets=[2], precision="fp16")
    data = read_manifest(folder)
    assert data["precision"] == "fp16" and data["golden"]["tolerance"] == {"min_cosine": 0.99}
    engine = amdinfer.load(folder, verify=True)
    assert engine.info.precision == "fp16" and engine.info.settings["bundle"]["verify"]["passed"]
    feeds = models.random_inputs(models.tiny_cnn(), batch=2, seed=3)
    with amdinfer.load(models.tiny_cnn(), backend="reference") as ref:
        want = ref.run(feeds)["logits"]
    got = engine.run(feeds)["logits"]
    cosine = float(np.sum(got * want) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cosine > 0.999 and not np.allclose(got, want, rtol=0, atol=1e-7)  # fp16 rounding, same answer


def test_int8_bundle_carries_its_certificate(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from amdinfer.quantize import Int8Quantizer

    rng = np.random.default_rng(0)
    quantizer = Int8Quantizer(calibration=[{"input": rng.random((4, 3, 32, 32), dtype=np.float32)}])
    folder = write_bundle(models.tiny_cnn(), tmp_path / "b", batch_buckets=[1], precision="int8", quantizer=quantizer)
    data = read_manifest(folder)
    cert = json.loads((folder / "certificate.json").read_text())
    assert data["certificate"] == {"path": "certificate.json", "sha256": file_sha256(folder / "certificate.json")}
    assert cert["float_sha256"] == data["model"]["sha256"]  # it certifies the quantization of the source model
    caplog.clear()
    engine = amdinfer.load(folder, verify=True)
    assert engine.info.settings["bundle"]["certificate"] == data["certificate"]
    assert not [r for r in caplog.records if "not trusted" in r.getMessage()]


def test_a_tf32_bundle_is_judged_by_the_tf32_tolerance_and_a_cpu_one_by_strict_fp32(tmp_path: Path) -> None:
    """The CUDA EP runs fp32 in TF32 by default (10-bit mantissa): its goldens are judged by TF32_TOLERANCE, which
    takes an error of TF32's size (2e-3 of the largest output, as measured on an H200) that strict fp32 refuses;
    a CPU bundle keeps the strict tolerance, and a real error (5% of the scale) fails both."""
    from amdinfer.bundle._golden import TF32_TOLERANCE, agrees, runs_tf32

    assert runs_tf32([("CUDAExecutionProvider", {"use_tf32": "1", "device_id": "0"})])
    assert not runs_tf32([("CUDAExecutionProvider", {"use_tf32": "0"}), ("CPUExecutionProvider", {})])
    folder = write_bundle(models.tiny_cnn(), tmp_path / "b", batch_buckets=[2])
    strict = read_manifest(folder)["golden"]["tolerance"]
    assert strict == {"rtol": 1e-3, "atol": 1e-4}
    want = np.random.default_rng(0).normal(size=1000) * 3
    scale = np.abs(want).max()
    tf32_like = want + 2e-3 * scale * np.sign(np.random.default_rng(1).normal(size=1000))
    assert agrees(tf32_like, want, TF32_TOLERANCE)[0] and not agrees(tf32_like, want, strict)[0]
    wrong = want.copy()
    wrong[7] += 0.05 * scale
    assert not agrees(wrong, want, TF32_TOLERANCE)[0]
