"""One ``shapes=`` / ``batch_buckets=`` vocabulary across engines: padded results equal unpadded ones.

Every engine kind available here (ORT CPU, the NumPy reference engine, MIGraphX's ``ref`` target where
``migraphx`` imports) runs the same checks; the truth for a padded run is the same engine run without
buckets. A shape-recording engine checks that a per-shape-compiling backend sees one shape per bucket.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.engines.base import Engine, EngineInfo
from amdinfer.engines.migraphx import probe as migraphx_problem
from amdinfer.testing import models
from amdinfer.types import TensorSpec

KINDS = {
    "ort": {"backend": "ort", "providers": ["cpu"], "threads": 1},
    "reference": {"backend": "reference"},
    "migraphx-ref": {"backend": "migraphx", "target": "ref", "cache": False},
}
BOUNDS = {"input": [(1, 3, 32, 32), (8, 3, 32, 32)]}


def available(kind: str) -> str | None:
    if kind == "migraphx-ref":
        why = migraphx_problem()
        return None if why is None else f"migraphx not importable: {why}"
    try:
        amdinfer.load(models.tiny_cnn(), **KINDS[kind]).close()
    except (amdinfer.BackendUnavailableError, ImportError) as exc:
        return f"{kind}: {exc}"
    return None


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    why = available(request.param)
    if why is not None:
        pytest.skip(why)
    return request.param


@pytest.fixture(scope="module")
def cnn():
    return models.tiny_cnn()


@pytest.fixture(scope="module")
def x11(cnn):
    return models.random_inputs(cnn, batch=11, seed=7)["input"]


def two_input_model():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [3])
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Tanh", ["ab"], ["y"]),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array([5, 6, 7], np.float32))),
    ]
    graph = helper.make_graph(nodes, "two", [a, b], [y, c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class TestAcrossEngines:
    def test_padded_equals_unpadded(self, kind: str, cnn, x11) -> None:
        with amdinfer.load(cnn, **KINDS[kind]) as plain:
            want = plain.run(x11)["logits"]
        with amdinfer.load(cnn, shapes=BOUNDS, batch_buckets=[1, 2, 4, 8], **KINDS[kind]) as padded:
            assert padded.batch_buckets == (1, 2, 4, 8)
            for n in (1, 2, 3, 5, 7, 8, 9, 11):  # 9 and 11: one full bucket of 8, then the rest padded
                got = padded.run(x11[:n])["logits"]
                assert got.shape == (n, 10)
                np.testing.assert_allclose(got, want[:n], rtol=1e-5, atol=1e-5)

    def test_two_inputs_and_a_constant_output(self, kind: str) -> None:
        model = two_input_model()
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 6, 4)).astype(np.float32)
        with amdinfer.load(model, **KINDS[kind]) as plain:
            want = plain.run({"a": a, "b": b})
        with amdinfer.load(model, batch_buckets=[4], **KINDS[kind]) as padded:
            for n in (1, 3, 4, 6):
                got = padded.run({"a": a[:n], "b": b[:n]})
                np.testing.assert_allclose(got["y"], want["y"][:n], rtol=1e-6, atol=1e-6)
                # axis 0 of 'c' is fixed (3): it is neither cut to the batch nor repeated per chunk
                np.testing.assert_array_equal(got["c"], [5, 6, 7])

    def test_bounds_are_enforced(self, kind: str, cnn, x11) -> None:
        with amdinfer.load(cnn, shapes=BOUNDS, **KINDS[kind]) as engine:
            with pytest.raises(amdinfer.InputError, match=r"got shape \(9, 3, 32, 32\), expected between"):
                engine.run(x11[:9])
        with amdinfer.load(cnn, shapes=BOUNDS, batch_buckets=[16], **KINDS[kind]) as engine:
            with pytest.raises(amdinfer.InputError, match="padded to bucket 16"):
                engine.run(x11[:3])

    def test_inputs_must_agree_on_the_batch(self, kind: str) -> None:
        with amdinfer.load(two_input_model(), batch_buckets=[4], **KINDS[kind]) as engine:
            with pytest.raises(amdinfer.InputError, match="axis 0"):
                engine.run({"a": np.ones((2, 4), np.float32), "b": np.ones((3, 4), np.float32)})


class ShapeRecorder(Engine):
    """Records the input shapes ``_run`` receives: what a compile-per-shape backend would compile for."""

    backend_name = "recorder"

    def _load(self, source):
        self.seen: set[tuple[int, ...]] = set()
        return source.inputs, source.outputs, EngineInfo(backend="recorder")

    def _run(self, feeds, outputs):
        self.seen.add(feeds["input"].shape)
        return {"logits": np.zeros((feeds["input"].shape[0], 10), np.float32)}


def test_one_shape_per_bucket(cnn) -> None:
    engine = ShapeRecorder(cnn, shapes=BOUNDS, batch_buckets=[1, 2, 4, 8])
    for n in range(1, 21):
        assert engine.run(np.zeros((n, 3, 32, 32), np.float32))["logits"].shape == (n, 10)
    assert {s[0] for s in engine.seen} == {1, 2, 4, 8}


def test_without_buckets_every_batch_is_a_new_shape(cnn) -> None:
    engine = ShapeRecorder(cnn)
    for n in range(1, 6):
        engine.run(np.zeros((n, 3, 32, 32), np.float32))
    assert len(engine.seen) == 5


@pytest.mark.parametrize(
    ("buckets", "match"),
    [([0, 2], "positive ints"), ([], "non-empty"), (["a"], "list of positive ints")],
)
def test_bad_buckets(cnn, buckets, match) -> None:
    with pytest.raises(amdinfer.OptionError, match=match):
        ShapeRecorder(cnn, batch_buckets=buckets)


def test_spec_names_are_kept(cnn) -> None:
    engine = ShapeRecorder(cnn, shapes={"input": (2, 3, 32, 32)})
    assert engine.shape_bounds["input"].is_static
    assert isinstance(engine.inputs[0], TensorSpec)
