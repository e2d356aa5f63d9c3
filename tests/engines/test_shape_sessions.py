"""``OrtEngine(shape_sessions=N)``: a session per input shape, answers equal to onnx's evaluator on every path."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import oracle
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.engines.ort._shape_sessions import ShapeSessions, resolve_shape_sessions
from amdinfer.errors import OptionError


def _fcn():
    """Conv 3->4 (3x3, pad 1) + Relu + GlobalAveragePool on ``(N, 3, H, W)``: every axis but C dynamic."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 1, 1])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "fcn", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SHAPES = [(1, 3, 8, 8), (1, 3, 8, 16), (2, 3, 8, 8), (1, 3, 16, 8), (1, 3, 8, 16), (1, 3, 24, 8)]


@pytest.mark.parametrize("io_binding", [False, True], ids=["session-run", "io-binding"])
def test_each_shape_answers_like_the_evaluator_and_gets_its_own_session(io_binding) -> None:
    model = _fcn()
    rng = np.random.default_rng(1)
    with amdinfer.load(model, providers=["cpu"], shape_sessions=3, io_binding=io_binding) as engine:
        for shape in SHAPES:
            x = rng.standard_normal(shape).astype(np.float32)
            got = engine.run(x)["y"]
            np.testing.assert_allclose(got, oracle(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)
        record = engine.info.settings["shape_sessions"]
        # the first three distinct shapes got a session each; (1, 3, 16, 8) and (1, 3, 24, 8) ran on the first one
        assert record["limit"] == 3
        assert [s["x"] for s in record["shapes"]] == [list(s) for s in SHAPES[:3]]
        assert record["overflow_calls"] == 2
        sessions = {id(engine._shapes.pick({"x": np.zeros(s, np.float32)})[0]) for s in SHAPES}
        assert len(sessions) == 3 and id(engine.session) in sessions


def test_prepared_runs_use_the_session_of_their_shape() -> None:
    model = _fcn()
    a, b = np.ones((1, 3, 8, 8), np.float32), np.full((1, 3, 8, 16), 2.0, np.float32)
    with amdinfer.load(model, providers=["cpu"], shape_sessions=4, io_binding=True) as engine:
        first, second = engine.prepare({"x": a}), engine.prepare({"x": b})
        for _ in range(2):
            np.testing.assert_allclose(np.from_dlpack(first()["y"]), oracle(model, {"x": a})["y"], rtol=1e-5)
            np.testing.assert_allclose(np.from_dlpack(second()["y"]), oracle(model, {"x": b})["y"], rtol=1e-5)
        assert len(engine.info.settings["shape_sessions"]["shapes"]) == 2


def test_run_many_streams_each_batch_to_the_session_of_its_shape() -> None:
    model = _fcn()
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal(s).astype(np.float32) for s in SHAPES[:4]]
    with amdinfer.load(model, providers=["cpu"], shape_sessions=8, io_binding=True) as engine:
        got = [
            np.from_dlpack(o["y"]) if not isinstance(o["y"], np.ndarray) else o["y"] for o in engine.run_many(batches)
        ]
        for x, y in zip(batches, got):
            np.testing.assert_allclose(y, oracle(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)
        assert len(engine.info.settings["shape_sessions"]["shapes"]) == 4  # not all on the engine's own session


def test_auto_is_off_on_the_cpu_and_for_batch_only_models() -> None:
    with amdinfer.load(_fcn(), providers=["cpu"]) as engine:
        engine.run(np.zeros((1, 3, 8, 8), np.float32))
        engine.run(np.zeros((1, 3, 8, 16), np.float32))
        assert engine.info.settings["shape_sessions"] == {"limit": 0, "shapes": [], "overflow_calls": 0, "warmed": 0}
    # what "auto" means where it applies (no CUDA EP here: the rule itself)
    assert resolve_shape_sessions("auto", "CUDAExecutionProvider", ("x[2]", "x[3]")) == 8
    assert resolve_shape_sessions("auto", "CUDAExecutionProvider", ()) == 0  # only the batch axis varies
    assert resolve_shape_sessions("auto", "MIGraphXExecutionProvider", ("x[2]",)) == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "many"])
def test_bad_values_are_refused_naming_the_option(bad) -> None:
    with pytest.raises(OptionError, match=r"shape_sessions: got .*expected 'auto' or an int >= 0"):
        amdinfer.load(_fcn(), providers=["cpu"], shape_sessions=bad)


def test_close_closes_the_extra_runners() -> None:
    closed = []

    class Runner:
        def close(self) -> None:
            closed.append(self)

    made = iter([("s1", Runner()), ("s2", Runner())])
    sessions = ShapeSessions(3, ("main", None), lambda: next(made), {})
    for n in (1, 2, 3, 4):
        sessions.pick({"x": np.zeros(n)})
    sessions.close()
    assert len(closed) == 2
