"""Model loading: every way a model file can be wrong gives a ModelError naming the file."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.model import ModelSource, min_ir_version
from amdinfer.testing import models


def test_path_bytes_and_proto_give_the_same_model(tmp_path) -> None:
    proto = models.tiny_cnn()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    a = ModelSource.from_any(path)
    b = ModelSource.from_any(path.read_bytes())
    c = ModelSource.from_any(proto)
    assert a.sha256 == b.sha256 == c.sha256 == hashlib.sha256(proto.SerializeToString()).hexdigest()
    assert [s.name for s in a.inputs] == ["input"] and a.inputs[0].shape[1:] == (3, 32, 32)
    assert a.name == "m.onnx" and b.name == "<bytes>"


def test_initializers_are_not_inputs() -> None:
    proto = models.tiny_cnn()
    extra = helper.make_tensor_value_info(proto.graph.initializer[0].name, TensorProto.FLOAT, None)
    proto.graph.input.append(extra)  # old exporters list initializers as inputs
    assert [s.name for s in ModelSource.from_any(proto, check=False).inputs] == ["input"]


def test_missing_file() -> None:
    with pytest.raises(amdinfer.ModelError, match=r"model '/no/such/model.onnx': file not found"):
        amdinfer.load("/no/such/model.onnx")


def test_directory(tmp_path) -> None:
    with pytest.raises(amdinfer.ModelError, match=r"is a directory, expected an .onnx file"):
        amdinfer.load(tmp_path)


def test_empty_file(tmp_path) -> None:
    (tmp_path / "e.onnx").write_bytes(b"")
    with pytest.raises(amdinfer.ModelError, match=r"e.onnx': empty \(0 bytes\)"):
        amdinfer.load(tmp_path / "e.onnx")


def test_garbage_file(tmp_path) -> None:
    path = tmp_path / "g.onnx"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(amdinfer.ModelError, match=r"g.onnx'.*(truncated, corrupt or not ONNX|failed ONNX validation)"):
        amdinfer.load(path)


def test_text_file(tmp_path) -> None:
    path = tmp_path / "t.onnx"
    path.write_text("this is not a model\n" * 10)
    with pytest.raises(amdinfer.ModelError, match=r"t.onnx'"):
        amdinfer.load(path)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9])
def test_truncated_file(tmp_path, keep: float) -> None:
    data = models.tiny_cnn().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(amdinfer.ModelError, match=r"cut.onnx'"):
        amdinfer.load(path)


def test_missing_external_data(tmp_path) -> None:
    proto = models.tiny_cnn()
    path = tmp_path / "ext.onnx"
    onnx.save(
        proto, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0
    )
    ModelSource.from_any(path)  # loads while the data is there
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(amdinfer.ModelError, match=r"external data file 'weights.bin' for initializer '.+' not found"):
        amdinfer.load(path)


def test_external_data_outside_model_folder_is_refused(tmp_path) -> None:
    proto = models.tiny_cnn()
    t = proto.graph.initializer[0]
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    t.external_data.add(key="location", value="../../etc/passwd")
    t.ClearField("raw_data")
    t.ClearField("float_data")
    path = tmp_path / "evil.onnx"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(amdinfer.ModelError, match=r"outside the model's folder"):
        amdinfer.load(path)


def test_external_data_model_runs(tmp_path) -> None:
    proto = models.tiny_cnn()
    path = tmp_path / "ext.onnx"
    onnx.save(proto, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    assert (tmp_path / "w.bin").stat().st_size > 1000
    x = models.random_inputs(proto)["input"]
    a = amdinfer.load(path, backend="ort", providers=["cpu"]).run(x)["logits"]
    b = amdinfer.load(models.tiny_cnn(), backend="ort", providers=["cpu"]).run(x)["logits"]
    np.testing.assert_array_equal(a, b)


def test_invalid_graph_names_the_problem() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(amdinfer.ModelError, match=r"failed ONNX validation"):
        amdinfer.load(model)


def test_wrong_type_of_model_argument() -> None:
    with pytest.raises(amdinfer.ModelError, match=r"model: got int, expected a path, bytes or onnx.ModelProto"):
        amdinfer.load(42)


class TestIrVersion:
    def test_lowering_when_opsets_allow(self) -> None:
        proto = models.tiny_cnn()
        proto.ir_version = 14
        low = ModelSource.from_any(proto).with_ir_version(10)
        assert low.ir_version == 10 and low.proto.graph == proto.graph

    def test_min_ir_follows_opset_table(self) -> None:
        # onnx's own table: opset 17 -> IR 8, opset 21 -> IR 10.
        for opset, ir in [(13, 7), (17, 8), (21, 10)]:
            proto = helper.make_model(
                helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("", opset)]
            )
            assert min_ir_version(proto) == ir

    def test_refuses_when_a_dtype_needs_newer_ir(self) -> None:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [2])
        graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)], "g", [x], [y])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        with pytest.raises(amdinfer.ModelError, match=r"needs IR >= 9"):
            ModelSource.from_any(proto).with_ir_version(8)

    def test_initializer_dtype_counts(self) -> None:
        w = numpy_helper.from_array(np.zeros(2, np.float32), "w")
        w.data_type = TensorProto.INT4
        proto = helper.make_model(helper.make_graph([], "g", [], [], [w]), opset_imports=[helper.make_opsetid("", 17)])
        assert min_ir_version(proto) == 10


def test_exporter_unknown_dims_are_independent() -> None:
    """Paddle2ONNX writes unknown dims as "?" or -1: each is its own unknown dim."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 3, "?", -1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", 3, "?", -1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    src = ModelSource.from_any(model)
    assert src.inputs[0].shape == (None, 3, None, None)
    engine = amdinfer.load(model, backend="ort", providers=["cpu"])
    x = np.ones((2, 3, 48, 192), np.float32)  # the two unknown dims differ: fine
    np.testing.assert_array_equal(engine.run(x)["y"], x)
