"""EPContext bundles (issue 39): per-bucket models compiled by an EP through ONNX Runtime's compile API, copied to a
fresh folder and HOME and loaded in another process without compiling; ONNX Runtime's compatibility verdict, the
EP's version and the files checked first; each input shape routed to its bucket's model.

The device-bound tests need OpenVINO's plugin EP (``onnxruntime-ep-openvino``) with a device: the opt-in nox session
``openvino`` installs it (its CPU device exists on Intel CPUs only). Without it they skip, naming what is missing;
what can be checked without it (the refusals, the helpers) runs everywhere.
"""

from __future__ import annotations

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
from amdinfer.engines.ort import compile_epcontext, epcontext_nodes
from amdinfer.errors import BackendUnavailableError, BundleError, ModelError
from amdinfer.testing import models

OV = "OpenVINOExecutionProvider"


def _openvino_missing() -> str | None:
    """Why OpenVINO's plugin EP cannot compile here (``None``: it can)."""
    try:
        import onnxruntime as ort

        from amdinfer.engines.ort import epcontext_device

        epcontext_device(ort, OV, 0)
    except BackendUnavailableError as exc:  # before ImportError: it is one
        from amdinfer._support._hardware import cpu_description

        return f"OpenVINO's plugin EP cannot compile on {cpu_description()} (`nox -s openvino` on an Intel CPU): {exc}"
    except ImportError as exc:
        return f"onnxruntime cannot be imported ({exc})"
    return None


needs_openvino = pytest.mark.skipif(_openvino_missing() is not None, reason=str(_openvino_missing()))

#: The child process: load the copied bundle on a fresh HOME and cache, run 1, 3 and 4 rows, report what it used.
CHILD = r"""
import json, sys
import numpy as np
import amdinfer
from amdinfer.cache import CompiledModelCache
folder, feeds_path, out_path, cache = sys.argv[1:5]
engine = amdinfer.load(folder)
feeds = dict(np.load(feeds_path))
outs = {}
for n in (1, 3, 4):  # 3 rows: padded to the bucket of 4 and run on b4's model
    outs.update({f"{n}:{k}": v for k, v in engine.run({k: v[:n] for k, v in feeds.items()}).items()})
np.savez(out_path, **outs)
info = engine.info
print(json.dumps({
    "bundle": info.settings["bundle"],
    "epcontext": info.settings["epcontext"],
    "providers": info.providers,
    "compile_seconds": info.compile_seconds,
    "cache_entries": len(CompiledModelCache(cache).entries()),
    "type": type(engine).__name__,
}))
"""


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "build-cache"))


@pytest.fixture(scope="module")
def ov_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if _openvino_missing():
        pytest.skip(str(_openvino_missing()))
    folder = tmp_path_factory.mktemp("ov") / "bundle"
    write_bundle(models.tiny_cnn(), folder, batch_buckets=[1, 4], providers=["openvino"])
    return folder


def _reseal(folder: Path, edit: object) -> None:
    """Edit the manifest as a bundle built elsewhere would have it (valid digest and file hashes)."""
    data = json.loads((folder / MANIFEST).read_text())
    edit(data)  # type: ignore[operator]
    data["files"] = {name: file_sha256(folder / name) for name in data["files"]}
    (folder / MANIFEST).write_text(json.dumps(seal(data)))


@needs_openvino
def test_bundle_holds_one_epcontext_model_per_bucket_and_records_the_ep(ov_bundle: Path) -> None:
    data = read_manifest(ov_bundle)
    assert data["kind"].startswith("ORT EPContext model")
    assert [b["name"] for b in data["buckets"]] == ["b1", "b4"]
    for bucket in data["buckets"]:
        model = onnx.load(str(ov_bundle / bucket["file"]), load_external_data=False)
        # The compiled model is nothing but the EP's compiled partition: no source operator is left to compile.
        assert {n.op_type for n in model.graph.node} == {"EPContext"}
        nodes = epcontext_nodes(model)
        assert [n["source"] for n in nodes] == [OV] and nodes[0]["embed_mode"] == 0
        assert (ov_bundle / "ort" / nodes[0]["file"]).is_file()
        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        assert dims == bucket["shapes"]["input"]
        # ORT's compatibility info, as the EP wrote it into the model, is the one the manifest holds.
        meta = {p.key: p.value for p in model.metadata_props}
        assert meta[f"ep_compatibility_info.{OV}"] == data["compatibility"][bucket["name"]]
    ep = data["settings"]["ep"]
    assert ep["ep"] == OV and ep["vendor"] == "Intel" and ep["version"] == data["environment"]["ep_versions"][OV]
    assert ep["metadata"]["ov_device"] == "CPU"
    assert json.loads(data["providers"][0][1]["load_config"])["CPU"]["INFERENCE_PRECISION_HINT"] == "f32"
    assert data["environment"]["gpu"] is None


@needs_openvino
def test_copied_bundle_loads_elsewhere_from_the_epcontext_models_and_matches_the_reference(
    ov_bundle: Path, tmp_path: Path
) -> None:
    copied = tmp_path / "copied" / "bundle"
    shutil.copytree(ov_bundle, copied)
    source = models.tiny_cnn()
    feeds = models.random_inputs(source, batch=4, seed=7)  # not the goldens' inputs
    np.savez(tmp_path / "feeds.npz", **feeds)
    home, cache = tmp_path / "home", tmp_path / "fresh-cache"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "AMDINFER_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(home / ".cache")}
    args = [str(copied), str(tmp_path / "feeds.npz"), str(tmp_path / "out.npz"), str(cache)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["type"] == "BundledEpContextEngine" and report["providers"][0] == OV
    assert report["bundle"]["dir"] == str(copied.resolve())
    assert report["bundle"]["compatibility"] == {"b1": "EP_SUPPORTED_OPTIMAL", "b4": "EP_SUPPORTED_OPTIMAL"}
    assert report["bundle"]["verify"]["ran"] and report["bundle"]["verify"]["passed"]  # first load here
    sessions = report["epcontext"]["sessions"]
    assert [s["file"] for s in sessions] == ["b1.ctx.onnx", "b4.ctx.onnx"]
    for s in sessions:  # each session was made from its EPContext model and OpenVINO took its one node
        assert [n["source"] for n in s["epcontext_nodes"]] == [OV]
        assert s["nodes_per_provider"] == {OV: 1}
    assert report["compile_seconds"] == 0.0 and report["cache_entries"] == 0
    outs = np.load(tmp_path / "out.npz")
    with amdinfer.load(source, backend="reference") as ref:
        for n in (1, 3, 4):
            want = ref.run({k: v[:n] for k, v in feeds.items()})
            for k, v in want.items():
                np.testing.assert_allclose(outs[f"{n}:{k}"], v, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(v).max())))


@needs_openvino
def test_a_bundle_compiled_for_another_cpu_is_refused_by_onnx_runtimes_verdict(ov_bundle: Path, tmp_path: Path) -> None:
    copied = tmp_path / "b"
    shutil.copytree(ov_bundle, copied)

    def other_isa(data: dict) -> None:
        for bucket, text in data["compatibility"].items():
            info = json.loads(text)
            head, _, _ = info["ov_compat_string"].partition("isa=")
            data["compatibility"][bucket] = json.dumps({**info, "ov_compat_string": head + "isa=AVX2"})

    _reseal(copied, other_isa)
    with pytest.raises(BundleError, match="EP_UNSUPPORTED") as err:
        amdinfer.load(copied)
    assert err.value.field == "compatibility" and "amdinfer compile" in str(err.value) and "--force" in str(err.value)


@needs_openvino
def test_another_plugin_version_is_refused_naming_both(ov_bundle: Path, tmp_path: Path) -> None:
    copied = tmp_path / "b"
    shutil.copytree(ov_bundle, copied)
    _reseal(copied, lambda data: data["settings"]["ep"].update(version="1.7.0"))
    with pytest.raises(BundleError, match=r"version is '1.7.0' in the bundle") as err:
        amdinfer.load(copied)
    assert err.value.field == "ep version" and err.value.rebuild


@needs_openvino
def test_a_tampered_compiled_blob_is_refused_before_loading(ov_bundle: Path, tmp_path: Path) -> None:
    copied = tmp_path / "b"
    shutil.copytree(ov_bundle, copied)
    blob = next((copied / "ort").glob("b4.ctx_*.bin"))
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    blob.write_bytes(bytes(raw))
    with pytest.raises(BundleError, match="changed since the bundle was written") as err:
        amdinfer.load(copied)
    assert err.value.field == f"ort/{blob.name}"


@needs_openvino
def test_shapes_outside_the_buckets_are_refused_with_on_new_shape_error(ov_bundle: Path) -> None:
    with amdinfer.load(ov_bundle, on_new_shape="error") as engine:
        assert engine.run({"input": np.zeros((1, 3, 32, 32), np.float32)})["logits"].shape == (1, 10)
        with pytest.raises(amdinfer.errors.InputError):
            engine.run({"input": np.zeros((1, 3, 16, 16), np.float32)})


def test_asking_for_openvino_without_its_plugin_names_the_package(tmp_path: Path) -> None:
    if _openvino_missing() is None:
        pytest.skip("OpenVINO's plugin EP offers a device here: the refusal without it is not reachable")
    with pytest.raises(BackendUnavailableError, match=r"onnxruntime-ep-openvino"):
        write_bundle(models.tiny_cnn(), tmp_path / "b", batch_buckets=[1], providers=["openvino"])
    assert not (tmp_path / "b").exists()


def test_the_cpu_ep_compiles_nothing_and_compile_epcontext_says_so(tmp_path: Path) -> None:
    import onnxruntime as ort

    with pytest.raises(ModelError, match="CPUExecutionProvider could not compile"):
        compile_epcontext(
            ort, models.tiny_cnn().SerializeToString(), tmp_path / "m.ctx.onnx", "CPUExecutionProvider", {}, 0
        )


@needs_openvino
def test_a_pickled_engine_is_the_bundle_loaded_again(ov_bundle: Path) -> None:
    import pickle

    feeds = models.random_inputs(models.tiny_cnn(), batch=3, seed=3)
    with amdinfer.load(ov_bundle, verify=False) as engine:
        copy = pickle.loads(pickle.dumps(engine))
        with copy:
            assert copy.info.settings["bundle"]["dir"] == str(ov_bundle.resolve())
            np.testing.assert_array_equal(copy.run(feeds)["logits"], engine.run(feeds)["logits"])
