"""``OrtEngine.warm`` / ``warm_shapes=``: each listed shape built and run once before the first request, the
sessions of other shapes started from the engine's optimized graph, and the cuDNN search rule for shape-varying
models (a pure function, driven with provider names: no GPU here)."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import oracle

import amdinfer
from amdinfer.engines.ort import OrtEngine, provider_options
from amdinfer.engines.ort._tuning import plan_tuning
from amdinfer.errors import InputError, OptionError
from amdinfer.testing.models import transformer_encoder

CUDA, ROCM, MIGRAPHX = "CUDAExecutionProvider", "ROCMExecutionProvider", "MIGraphXExecutionProvider"
SHAPES = [(1, 8, 64), (2, 16, 64), (1, 24, 64)]


@pytest.fixture(scope="module")
def model():
    return transformer_encoder()  # input (N, S, 64): the sequence axis varies


@pytest.fixture
def counted(monkeypatch):
    """Counts of the sessions made for new shapes and of the engine's runs, per input shape."""
    counts: dict[str, object] = {"made": 0, "runs": []}
    make, run = OrtEngine._session_like, OrtEngine._run

    def session_like(self):
        counts["made"] += 1
        return make(self)

    def counting_run(self, feeds, outputs):
        counts["runs"].append(tuple(feeds["input"].shape))
        return run(self, feeds, outputs)

    monkeypatch.setattr(OrtEngine, "_session_like", session_like)
    monkeypatch.setattr(OrtEngine, "_run", counting_run)
    return counts


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("io_binding", [False, True], ids=["session-run", "io-binding"])
def test_each_listed_shape_is_built_and_run_once_before_the_first_request(model, counted, io_binding) -> None:
    with amdinfer.load(model, providers=["cpu"], shape_sessions=4, io_binding=io_binding) as engine:
        record = engine.warm([*SHAPES, SHAPES[0]])  # a shape listed twice is warmed once
        assert counted["made"] == 2  # the first shape on the engine's own session, the others one each
        assert sorted(counted["runs"]) == sorted(SHAPES)
        assert record["shapes"] == [list(s) for s in SHAPES] and record["sessions"] == 2
        assert engine.info.settings["warm"] is record and record["seconds"] >= 0
        assert engine.info.settings["shape_sessions"]["warmed"] == 2
        for k, shape in enumerate(SHAPES):  # the requests find their sessions made; answers are the model's
            x = _x(shape, k)
            got = np.from_dlpack(engine.run(x)["output"]) if io_binding else engine.run(x)["output"]
            np.testing.assert_allclose(got, oracle(model, {"input": x})["output"], rtol=1e-4, atol=1e-5)
        assert counted["made"] == 2


def test_load_warms_the_shapes_it_is_given(model, counted) -> None:
    with amdinfer.load(model, providers=["cpu"], shape_sessions=8, warm_shapes=SHAPES) as engine:
        assert counted["made"] == 2 and sorted(counted["runs"]) == sorted(SHAPES)
        assert engine.info.settings["warm"]["shapes"] == [list(s) for s in SHAPES]
        assert engine.info.load_seconds >= engine.info.settings["warm"]["seconds"]
        assert engine.info.options.warm_shapes == tuple(SHAPES)


def test_warmed_shapes_do_not_count_against_the_limit(model, counted) -> None:
    with amdinfer.load(model, providers=["cpu"], shape_sessions=2, warm_shapes=SHAPES) as engine:
        assert counted["made"] == 2
        engine.run(_x((1, 32, 64)))  # limit 2: one session on first use besides the warmed ones
        engine.run(_x((1, 40, 64)))  # over the limit: the engine's own session
        record = engine.info.settings["shape_sessions"]
        assert counted["made"] == 3 and record["overflow_calls"] == 1 and len(record["shapes"]) == 4


def test_with_one_session_each_shape_just_runs_once(model, counted) -> None:
    with amdinfer.load(model, providers=["cpu"]) as engine:  # the CPU: shape_sessions "auto" is off
        record = engine.warm(SHAPES)
        assert counted["made"] == 0 and counted["runs"] == SHAPES
        assert record["sessions"] == 0 and engine.info.settings["shape_sessions"]["limit"] == 0


@pytest.mark.parametrize(
    ("shapes", "error", "pattern"),
    [
        ([(1, 8, 64), (1, "S", 64)], OptionError, r"warm_shapes\[1\]: got \(1, 'S', 64\), expected a shape"),
        ("1,8,64", OptionError, r"warm_shapes: got '1,8,64', expected a list of shapes"),
        ([(1, 8)], InputError, r"warm_shapes\[0\]: \{'input': \[1, 8\]\}: .*rank"),
        ([(1, 8, 64), (1, 8, 32)], InputError, r"warm_shapes\[1\]: \{'input': \[1, 8, 32\]\}: .*64"),
        ([{"ids": (1, 8)}], InputError, r"warm_shapes\[0\]: got inputs \['ids'\], expected every tensor input"),
    ],
    ids=["not-ints", "a-string", "rank", "fixed-size", "unknown-input"],
)
def test_bad_shapes_are_refused_naming_them(model, shapes, error, pattern) -> None:
    with amdinfer.load(model, providers=["cpu"], shape_sessions=4) as engine:
        with pytest.raises(error, match=pattern):
            engine.warm(shapes)
    with pytest.raises(error, match=pattern):
        amdinfer.load(model, providers=["cpu"], shape_sessions=4, warm_shapes=shapes)


def test_workers_must_be_a_positive_int(model) -> None:
    with amdinfer.load(model, providers=["cpu"]) as engine:
        with pytest.raises(OptionError, match=r"workers: got 0, expected None or an int >= 1"):
            engine.warm(SHAPES, workers=0)


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
def test_sessions_of_other_shapes_load_the_optimized_graph_with_optimizations_off(model, tmp_path, cache) -> None:
    import onnxruntime as ort

    options = {"cache_dir": str(tmp_path)} if cache else {"cache": False}
    with amdinfer.load(model, providers=["cpu"], shape_sessions=8, **options) as engine:
        builder, calls = engine._builder, []
        new = builder.new_session

        def spy(graph, so, names, opts):
            calls.append((type(graph).__name__, so.graph_optimization_level, bool(so.optimized_model_filepath)))
            return new(graph, so, names, opts)

        builder.new_session = spy
        engine.warm(SHAPES)
        off = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if cache:  # the graph of the cache entry the engine loaded: every shape starts from it
            assert [(level, path) for _, level, path in calls] == [(off, False), (off, False)]
        else:  # optimized once more (written to a private folder), then loaded
            assert calls[0][1] != off and calls[0][2] and calls[1][1:] == (off, False)
        assert engine.info.settings["shape_sessions"]["graph"] == "optimized once, loaded with optimizations off"
        for k, shape in enumerate(SHAPES):
            x = _x(shape, k)
            np.testing.assert_allclose(
                engine.run(x)["output"], oracle(model, {"input": x})["output"], rtol=1e-4, atol=1e-5
            )


def test_a_graph_that_does_not_load_falls_back_to_the_model(model) -> None:
    with amdinfer.load(model, providers=["cpu"], shape_sessions=8, cache=False) as engine:
        engine._builder._optimized = b"not an onnx model"
        engine.warm(SHAPES[:2])
        x = _x(SHAPES[1])
        np.testing.assert_allclose(engine.run(x)["output"], oracle(model, {"input": x})["output"], rtol=1e-4, atol=1e-5)
        assert any(n.startswith("shape sessions: the optimized graph did not load") for n in engine.info.notes)


# ------------------------------------------------------------------ the cuDNN search rule (pure)
def test_exhaustive_search_is_off_by_default_only_for_shape_varying_models_on_the_cuda_ep() -> None:
    varying = plan_tuning(CUDA, varying=["x[2]", "x[3]"]).choices["exhaustive_tune"]
    assert (varying.value, varying.source) == (False, "amdinfer") and "every new shape" in varying.reason
    assert plan_tuning(CUDA).choices["exhaustive_tune"].value is True  # fixed shapes (or the batch only): search
    assert plan_tuning(CUDA, user={"exhaustive_tune": True}, varying=["x[2]"]).knobs()["exhaustive_tune"] is True
    assert plan_tuning(ROCM, varying=["x[2]"]).knobs()["exhaustive_tune"] is True  # MIOpen keeps its results
    assert plan_tuning(MIGRAPHX, varying=["x[2]"]).knobs()["exhaustive_tune"] is True
    assert plan_tuning(CUDA, tuning=False, varying=["x[2]"]).knobs()["exhaustive_tune"] is None
    mapped = provider_options(CUDA, exhaustive_tune=varying.value)
    assert mapped["cudnn_conv_algo_search"] == "HEURISTIC"


def test_with_batch_buckets_the_padded_shapes_are_warmed(model, counted) -> None:
    with amdinfer.load(model, providers=["cpu"], shape_sessions=4, batch_buckets=[2, 4]) as engine:
        engine.warm([(1, 8, 64), (3, 8, 64)])  # run as (2, 8, 64) and (4, 8, 64)
        assert sorted(counted["runs"]) == [(2, 8, 64), (4, 8, 64)] and counted["made"] == 1
        shapes = [s["input"] for s in engine.info.settings["shape_sessions"]["shapes"]]
        assert shapes == [[2, 8, 64], [4, 8, 64]]
        x = _x((3, 8, 64))
        np.testing.assert_allclose(engine.run(x)["output"], oracle(model, {"input": x})["output"], rtol=1e-4, atol=1e-5)
        assert counted["made"] == 1
