"""Bundles with shape buckets beyond the batch axis (issue 39): ``--input-shapes`` with several H/W buckets writes one
optimized graph per bucket (each fixed to its bucket's shapes), loading routes each call to its bucket's session and
pads or refuses the rest (the bundle's ``on_new_shape``); the truth is onnx's ReferenceEvaluator on the source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.bundle import read_manifest, write_bundle
from amdinfer.cli import main

SHAPES = [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 24)}]


def fcn() -> onnx.ModelProto:
    """Conv 3->4 (3x3, pad 1) + Relu, then a global mean: input ``(N, 3, H, W)``, output ``(N, 4)``."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("ReduceMean", ["r"], ["y"], axes=[2, 3], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "fcn", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"x": x})[0]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMDINFER_CACHE_DIR", str(tmp_path / "cache"))


def test_one_graph_per_bucket_each_with_its_static_shapes(tmp_path: Path) -> None:
    folder = write_bundle(fcn(), tmp_path / "b", shapes=SHAPES, providers=["cpu"])
    data = read_manifest(folder)
    assert data["kind"] == "ORT optimized graph, one per bucket (static shapes)"
    assert [b["file"] for b in data["buckets"]] == ["ort/s1x3x8x8.optimized.onnx", "ort/s1x3x16x24.optimized.onnx"]
    for bucket in data["buckets"]:
        graph = onnx.load(str(folder / bucket["file"]))
        dims = [d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim]
        assert dims == list(bucket["shapes"]["x"])


def test_load_picks_the_bucket_by_shape_pads_the_batch_and_refuses_the_rest(tmp_path: Path) -> None:
    model = fcn()
    folder = write_bundle(model, tmp_path / "b", shapes=SHAPES, providers=["cpu"])
    rng = np.random.default_rng(1)
    with amdinfer.load(folder, verify=True) as engine:
        assert engine.info.settings["bundle"]["verify"]["passed"] is True
        sessions = engine.info.settings["per_bucket"]["sessions"]
        assert [s["inputs"]["x"] for s in sessions] == [[1, 3, 8, 8], [1, 3, 16, 24]]
        for shape in ((1, 3, 16, 24), (1, 3, 8, 8)):
            x = rng.random(shape, np.float32)
            np.testing.assert_allclose(engine.run(x)["y"], reference(model, x), rtol=1e-5, atol=1e-6)
        with pytest.raises(amdinfer.InputError, match=r"shape \(1, 3, 8, 9\) is not a prepared shape"):
            engine.run(np.zeros((1, 3, 8, 9), np.float32))  # H/W is not padded (not declared pad-safe)
        with pytest.raises(amdinfer.InputError, match=r"shape \(2, 3, 8, 8\) is not a prepared shape"):
            engine.run(np.zeros((2, 3, 8, 8), np.float32))  # no bucket holds 2 rows


def test_a_shape_bucket_bundle_from_the_cli_with_on_new_shape_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "fcn.onnx"
    onnx.save(fcn(), path)
    folder = tmp_path / "b"
    argv = ["compile", str(path), "--providers", "cpu", "--bundle", str(folder), "--shapes", "x:1x3x8x8,2x3x16x16",
            "--on-new-shape", "error"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("ORT optimized graph for the bucket's shapes written and run") == 2, err
    data = read_manifest(folder)
    assert data["on_new_shape"] == "error" and "--on-new-shape error" in data["rebuild"]
    assert "--shapes x:1x3x8x8,2x3x16x16" in data["rebuild"]
    with amdinfer.load(folder, verify=False) as engine:
        with pytest.raises(amdinfer.InputError, match=r"on_new_shape='error'"):
            engine.run(np.zeros((1, 3, 16, 16), np.float32))  # pad would fit it into 2x3x16x16; error refuses


def test_the_bundle_policy_is_the_default_and_the_caller_may_ask_for_another(tmp_path: Path) -> None:
    folder = write_bundle(fcn(), tmp_path / "b", shapes=[{"x": (1, 3, 8, 8)}, {"x": (4, 3, 8, 8)}], providers=["cpu"])
    assert read_manifest(folder)["kind"] == "ORT optimized graph, shared by the buckets"  # they differ in batch only
    with amdinfer.load(folder, verify=False) as engine:
        assert engine.info.settings["new_shapes"]["policy"] == "pad"
        x = np.random.default_rng(4).random((3, 3, 8, 8), np.float32)
        np.testing.assert_allclose(engine.run(x)["y"], reference(fcn(), x), rtol=1e-5, atol=1e-6)  # padded to 4
        assert engine.info.settings["new_shapes"]["padded_calls"] == 1
        with pytest.raises(amdinfer.InputError, match="is not a prepared shape"):
            engine.run(np.zeros((1, 3, 8, 16), np.float32))
    with amdinfer.load(folder, verify=False, on_new_shape="compile") as engine:
        assert engine.run(np.zeros((1, 3, 8, 16), np.float32))["y"].shape == (1, 4)  # the shared graph is dynamic
