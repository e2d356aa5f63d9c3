"""Native MIGraphX ``.mxr`` bundles (issue 39).

Two kinds of tests, as in tests/engines/test_migraphx.py:

* ``TestGlueWithStandIn``: the bundle's Python glue against that file's labelled stand-in for ``migraphx`` (NOT
  MIGraphX: it records the calls and computes with onnx's ReferenceEvaluator): one ``.mxr`` per bucket written
  through the engine's builder, loading calls ``migraphx.load`` once per bucket and never parse or compile, the
  manifest's version/target/architecture checked first. Skipped where the real ``migraphx`` imports.
* ``TestWithRealMigraphx``: the same against AMD's module on the CPU-only ``ref`` target (run with python3.11,
  ``PYTHONPATH``/``LD_LIBRARY_PATH`` of the ref build; see docs/migraphx.md): copied to a fresh folder and HOME and
  loaded in another process without compiling, outputs against onnx's ReferenceEvaluator.
"""

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
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.bundle import read_manifest, write_bundle
from amdinfer.bundle._manifest import seal
from amdinfer.engines._migraphx_build import ProgramBuilder
from amdinfer.engines.migraphx import probe
from amdinfer.testing import models

MIGRAPHX_PROBLEM = probe()
ENGINE_TESTS = Path(__file__).parents[1] / "engines" / "test_migraphx.py"


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))


def fcn() -> onnx.ModelProto:
    """Conv 3->4 (3x3, pad 1) + Relu on ``(N, 3, H, W)``: every axis but C dynamic (H/W buckets)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "fcn", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reseal(folder: Path, edit) -> None:
    data = read_manifest(folder)
    edit(data)
    (folder / "manifest.json").write_text(json.dumps(seal({k: v for k, v in data.items() if k != "manifest_sha256"})))


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "build-cache"))


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch):
    if MIGRAPHX_PROBLEM is None:
        pytest.skip("the real migraphx imports here: TestWithRealMigraphx covers the bundles")
    spec = importlib.util.spec_from_file_location("_migraphx_engine_tests", ENGINE_TESTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fake = module._StandInMigraphx()
    monkeypatch.setitem(sys.modules, "migraphx", fake)
    return fake


class TestGlueWithStandIn:
    """The bundle glue on the stand-in (not MIGraphX)."""

    def test_a_program_per_bucket_then_loaded_without_parsing_or_compiling(
        self, stand_in, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        model = models.tiny_cnn()
        lines: list[str] = []
        folder = write_bundle(model, tmp_path / "b", backend="migraphx", target="ref", batch_buckets=[1, 4],
                              progress=lines.append)  # fmt: skip
        data = read_manifest(folder)
        assert sorted(data["files"]) == ["golden/b1.npz", "golden/b4.npz", "migraphx/b1.mxr", "migraphx/b4.mxr",
                                         "migraphx/model.onnx"]  # fmt: skip
        assert data["settings"]["target"] == "ref" and data["settings"]["arch"] == "ref"
        assert data["environment"]["migraphx"] == "stand-in" and data["environment"]["gpu"] is None
        assert data["on_new_shape"] == "pad" and data["batch_buckets"] == [1, 4]
        assert stand_in.calls.count("compile:ref:True:True:False") == 2
        assert "compiled for target 'ref' and saved" in lines[0] and "goldens passed" in lines[-1]
        # copied to a fresh folder, HOME and cache: loaded as built
        copy = tmp_path / "elsewhere" / "b"
        shutil.copytree(folder, copy)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "fresh-cache"))
        stand_in.calls.clear()
        with amdinfer.load(copy) as engine:
            assert stand_in.calls == ["load:msgpack", "load:msgpack", "run", "run"]  # + the goldens (first load)
            assert engine.info.compile_seconds == 0.0 and engine.programs == 2
            assert [p["bundle"] for p in engine.info.settings["programs"]] == ["b1.mxr", "b4.mxr"]
            assert engine.info.settings["bundle"]["verify"]["passed"] is True
            x = models.random_inputs(model, batch=4, seed=5)["input"]
            want = reference(model, {"input": x})["logits"]
            for n in (1, 3, 4):  # 3: padded to the bucket of 4
                np.testing.assert_allclose(engine.run(x[:n])["logits"], want[:n], rtol=1e-5, atol=1e-6)
        assert not [c for c in stand_in.calls if c.startswith(("compile", "parse"))]
        assert not (tmp_path / "fresh-cache").exists() or not list((tmp_path / "fresh-cache").rglob("*.mxr"))

    def test_shape_buckets_pick_their_program_and_refuse_others(self, stand_in, tmp_path: Path) -> None:
        model = fcn()
        shapes = [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 8)}]
        folder = write_bundle(model, tmp_path / "b", backend="migraphx", target="ref", shapes=shapes,
                              on_new_shape="error")  # fmt: skip
        assert [b["file"] for b in read_manifest(folder)["buckets"]] == ["migraphx/s1x3x8x8.mxr",
                                                                         "migraphx/s1x3x16x8.mxr"]  # fmt: skip
        stand_in.calls.clear()
        with amdinfer.load(folder, verify=False) as engine:
            rng = np.random.default_rng(2)
            for shape in ((1, 3, 16, 8), (1, 3, 8, 8)):
                x = rng.random(shape, np.float32)
                np.testing.assert_allclose(engine.run(x)["y"], reference(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)
            with pytest.raises(amdinfer.InputError, match=r"shape \(1, 3, 8, 16\) is not a prepared shape"):
                engine.run(np.zeros((1, 3, 8, 16), np.float32))
        assert stand_in.calls.count("load:msgpack") == 2 and not [c for c in stand_in.calls if "compile" in c]

    @pytest.mark.parametrize(
        ("edit", "field", "match"),
        [
            (lambda d: d["environment"].update(migraphx="2.15.0"), "migraphx", "MIGraphX migraphx is '2.15.0' in"),
            (lambda d: d["settings"].update(target="gpu", arch="gfx942:304cu"), "arch",
             "arch is 'gfx942:304cu' in the bundle, 'unknown' here"),
            (lambda d: d["settings"].update(migraphx_env={"MIGRAPHX_DISABLE_MLIR": "1"}), "MIGRAPHX_DISABLE_MLIR",
             "MIGRAPHX_DISABLE_MLIR='1' when the bundle was compiled, None here"),
        ],
    )  # fmt: skip
    def test_another_version_architecture_or_environment_is_refused(
        self, stand_in, tmp_path: Path, edit, field: str, match: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("MIGRAPHX_DISABLE_MLIR", raising=False)
        folder = write_bundle(models.tiny_cnn(), tmp_path / "b", backend="migraphx", target="ref")
        reseal(folder, edit)
        stand_in.calls.clear()
        with pytest.raises(amdinfer.BundleError, match=match) as caught:
            amdinfer.load(folder)
        assert caught.value.field == field
        assert "amdinfer compile MODEL.onnx --bundle" in str(caught.value) and "--backend migraphx" in str(caught.value)
        assert stand_in.calls == []  # refused before anything loaded

    def test_another_target_is_refused(self, stand_in, tmp_path: Path) -> None:
        folder = write_bundle(models.tiny_cnn(), tmp_path / "b", backend="migraphx", target="ref")
        with pytest.raises(amdinfer.BundleError, match="target is 'ref' in the bundle, 'gpu' here") as caught:
            amdinfer.load(folder, target="gpu")
        assert caught.value.field == "target"

    def test_a_tampered_program_is_refused(self, stand_in, tmp_path: Path) -> None:
        folder = write_bundle(models.tiny_cnn(), tmp_path / "b", backend="migraphx", target="ref")
        program = folder / "migraphx" / "b1.mxr"
        program.write_bytes(program.read_bytes()[:-1] + b"\0")
        with pytest.raises(amdinfer.BundleError, match=r"file 'migraphx/b1\.mxr' changed since the bundle was written"):
            amdinfer.load(folder)

    def test_compile_when_asked_builds_a_new_shape_from_the_shipped_model(self, stand_in, tmp_path: Path) -> None:
        model = fcn()
        folder = write_bundle(model, tmp_path / "b", backend="migraphx", target="ref", shapes=[{"x": (1, 3, 8, 8)}])
        with amdinfer.load(folder, verify=False, on_new_shape="compile") as engine:
            stand_in.calls.clear()
            x = np.random.default_rng(3).random((2, 3, 8, 4), np.float32)
            np.testing.assert_allclose(engine.run(x)["y"], reference(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)
            assert "compile:ref:True:True:False" in stand_in.calls
            assert engine.info.settings["new_shapes"]["compiled"] == [{"x": [2, 3, 8, 4]}]


# ---------------------------------------------------------------------------------------------- real migraphx
#: The child process: load the copied bundle with compiling made impossible, run fresh feeds, save the outputs.
CHILD = r"""
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import amdinfer
from amdinfer.engines._migraphx_build import ProgramBuilder
def refuse(*a, **k):
    raise AssertionError("the bundle compiled or parsed a program")
ProgramBuilder._compile = ProgramBuilder._parse = refuse
folder, feeds_path, out_path = sys.argv[1:4]
engine = amdinfer.load(folder)
feeds = dict(np.load(feeds_path))
first = engine.run({k: v[:1] for k, v in feeds.items()})
seconds = time.perf_counter() - t0
outs = {}
for n in (1, 3, 4):
    outs.update({f"{n}:{k}": v for k, v in engine.run({k: v[:n] for k, v in feeds.items()}).items()})
np.savez(out_path, **outs)
print(json.dumps({"bundle": engine.info.settings["bundle"], "programs": engine.info.settings["programs"],
                  "compile_seconds": engine.info.compile_seconds, "seconds": seconds}))
"""


@pytest.mark.skipif(MIGRAPHX_PROBLEM is not None, reason=f"migraphx not importable: {MIGRAPHX_PROBLEM}")
class TestWithRealMigraphx:
    """AMD's MIGraphX, CPU-only ``ref`` target (16x16 images: its ref convolution is a naive loop)."""

    def test_copied_bundle_loads_in_another_process_without_compiling(self, tmp_path: Path) -> None:
        model = models.tiny_cnn(image_size=16)
        folder = write_bundle(model, tmp_path / "b", backend="migraphx", target="ref", batch_buckets=[1, 4])
        data = read_manifest(folder)
        import migraphx

        assert data["environment"]["migraphx"] == str(migraphx.__version__)
        assert (data["settings"]["target"], data["settings"]["arch"]) == ("ref", "ref")
        copy = tmp_path / "elsewhere" / "b"
        shutil.copytree(folder, copy)
        x = models.random_inputs(model, batch=4, seed=7)["input"]
        np.savez(tmp_path / "feeds.npz", input=x)
        env = {**os.environ, "HOME": str(tmp_path / "home"), "AMDINFER_CACHE_DIR": str(tmp_path / "fresh-cache")}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(copy), str(tmp_path / "feeds.npz"), str(tmp_path / "out.npz")],
            env=env, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["bundle"]["verify"]["passed"] is True and report["compile_seconds"] == 0.0
        assert [p["bundle"] for p in report["programs"]] == ["b1.mxr", "b4.mxr"]
        want = reference(model, {"input": x})["logits"]
        with np.load(tmp_path / "out.npz") as got:
            for n in (1, 3, 4):
                np.testing.assert_allclose(got[f"{n}:logits"], want[:n], rtol=1e-4, atol=1e-5)

    def test_shape_buckets_and_refusals(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        model = fcn()
        shapes = [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 8)}]
        folder = write_bundle(model, tmp_path / "b", backend="migraphx", target="ref", shapes=shapes,
                              on_new_shape="error")  # fmt: skip
        monkeypatch.setattr(ProgramBuilder, "_compile", lambda *a: pytest.fail("compiled at load"))
        with amdinfer.load(folder) as engine:
            for shape in ((1, 3, 16, 8), (1, 3, 8, 8)):
                x = np.random.default_rng(1).random(shape, np.float32)
                np.testing.assert_allclose(engine.run(x)["y"], reference(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)
            with pytest.raises(amdinfer.InputError, match="is not a prepared shape"):
                engine.run(np.zeros((1, 3, 8, 16), np.float32))
        reseal(folder, lambda d: d["environment"].update(migraphx="0.0.0-other"))
        with pytest.raises(amdinfer.BundleError, match=r"MIGraphX migraphx is '0\.0\.0-other' in the bundle") as caught:
            amdinfer.load(folder)
        assert caught.value.field == "migraphx" and "--backend migraphx" in str(caught.value)
