"""``on_new_shape="compile"|"pad"|"error"``: what an engine does with a shape it was not prepared for.

The truth for a padded run is the same model run at the exact shape on another engine (the NumPy reference, or
ONNX Runtime loaded without the policy); refusals are checked for the input, the shape and the prepared shapes
they must name."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import amdinfer
from amdinfer.engines._new_shapes import PAD_AXES_KEY
from amdinfer.errors import InputError, OptionError
from amdinfer.testing.models import tiny_cnn, transformer_encoder

CPU = ["CPUExecutionProvider"]


def _pointwise(declare: bool) -> onnx.ModelProto:
    """A 1x1 convolution (N, 3, H, W) -> (N, 4, H, W): padding H and W then cutting the answer back is exact."""
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, (4, 3, 1, 1), rng.standard_normal((4, 3, 1, 1)).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, (4,), rng.standard_normal(4))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"])],
        "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])],
        [w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if declare:
        model.metadata_props.add(key=PAD_AXES_KEY, value=json.dumps({"x": [2, 3]}))
    return model


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def reference():
    with amdinfer.load(tiny_cnn(), backend="reference") as engine:
        yield engine


def test_pad_batch_matches_the_exact_shape_on_the_reference(reference) -> None:
    with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(8, 3, 32, 32)], on_new_shape="pad") as engine:
        for n in (1, 3, 8):
            x = _x(n, 3, 32, 32, seed=n)
            got = engine.run(x)["logits"]
            assert got.shape == (n, 10)
            np.testing.assert_allclose(got, reference.run(x)["logits"], rtol=1e-4, atol=1e-5)
        record = engine.info.settings["new_shapes"]
    assert record["policy"] == "pad"
    assert record["padded_calls"] == 2 and record["compiled_calls"] == 0  # 1 and 3 padded; 8 prepared
    assert record["prepared"] == [{"input": [8, 3, 32, 32]}]


def test_pad_picks_the_smallest_prepared_shape_that_holds_it(monkeypatch) -> None:
    seen = []
    with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(2, 3, 32, 32), (8, 3, 32, 32), (4, 3, 32, 32)],
                       on_new_shape="pad") as engine:  # fmt: skip
        run = type(engine)._run
        monkeypatch.setattr(
            type(engine), "_run", lambda self, f, o: seen.append(f["input"].shape[0]) or run(self, f, o)
        )
        for n in (1, 3, 5):
            engine.run(_x(n, 3, 32, 32))
    assert seen == [2, 4, 8]


def test_pad_beyond_the_largest_prepared_shape_is_refused_naming_it() -> None:
    with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(4, 3, 32, 32)], on_new_shape="pad") as engine:
        with pytest.raises(InputError) as caught:
            engine.run(_x(5, 3, 32, 32))
    text = str(caught.value)
    assert "input 'input'" in text and "(5, 3, 32, 32)" in text and "(4, 3, 32, 32)" in text and "'pad'" in text


def test_pad_along_an_axis_the_model_does_not_declare_is_refused() -> None:
    # the sequence axis of an attention block: padding it changes every answer, so it is never padded
    with amdinfer.load(transformer_encoder(), providers=CPU, warm_shapes=[(1, 16, 64)], on_new_shape="pad") as engine:
        with pytest.raises(InputError, match=r"shape \(1, 8, 64\) is not a prepared shape .*axes padding keeps exact"):
            engine.run(_x(1, 8, 64))
        assert engine.info.settings["new_shapes"]["pad_axes"] == {"input": [0]}


def test_pad_along_declared_spatial_axes_cuts_the_answer_back() -> None:
    model = _pointwise(declare=True)
    with (
        amdinfer.load(model, backend="reference") as truth,
        amdinfer.load(model, providers=CPU, warm_shapes=[(4, 3, 16, 16)], on_new_shape="pad") as engine,
    ):
        for shape in [(1, 3, 16, 16), (3, 3, 9, 13), (4, 3, 1, 16)]:
            x = _x(*shape)
            got = engine.run({"x": x})["y"]
            assert got.shape == (shape[0], 4, *shape[2:])
            np.testing.assert_allclose(got, truth.run({"x": x})["y"], rtol=1e-5, atol=1e-5)
        assert engine.info.settings["new_shapes"]["pad_axes"] == {"x": [0, 2, 3]}
    # the same model without the declaration: spatial padding refused
    with amdinfer.load(_pointwise(declare=False), providers=CPU, warm_shapes=[(4, 3, 16, 16)],
                       on_new_shape="pad") as engine:  # fmt: skip
        with pytest.raises(InputError, match=r"\(3, 3, 9, 13\)"):
            engine.run({"x": _x(3, 3, 9, 13)})


def test_a_bad_pad_declaration_is_an_option_error() -> None:
    model = _pointwise(declare=False)
    model.metadata_props.add(key=PAD_AXES_KEY, value=json.dumps({"x": [1]}))  # the channel axis is fixed
    with pytest.raises(OptionError, match=r"input 'x' axes \[1\] are not dynamic"):
        amdinfer.load(model, providers=CPU, on_new_shape="pad")


def test_error_names_the_tensor_the_shape_and_the_buckets() -> None:
    warm = [(1, 8, 64), (4, 8, 64)]
    with amdinfer.load(transformer_encoder(), providers=CPU, batch_buckets=[1, 4], warm_shapes=warm,
                       on_new_shape="error") as engine:  # fmt: skip
        name = engine.outputs[0].name
        assert engine.run(_x(3, 8, 64))[name].shape == (3, 8, 64)  # padded to bucket 4, prepared
        with pytest.raises(InputError) as caught:
            engine.run(_x(1, 12, 64))
        record = engine.info.settings["new_shapes"]
    text = str(caught.value)
    # the batch padded to bucket 1 first: the shape named is the bucketed one; both warmed buckets listed
    assert "input 'input'" in text and "(1, 12, 64)" in text and "on_new_shape='error'" in text
    assert "prepared: (1, 8, 64), (4, 8, 64)" in text
    assert record["refused_calls"] == 1


def test_error_with_batch_buckets_and_fixed_dims_never_refuses() -> None:
    # every bucket is prepared when only the batch axis is dynamic: batches pad to a bucket, as before
    with amdinfer.load(tiny_cnn(), providers=CPU, batch_buckets=[2, 4], on_new_shape="error") as engine:
        assert [engine.run(_x(n, 3, 32, 32))["logits"].shape[0] for n in (1, 3, 4, 9)] == [1, 3, 4, 9]
        assert engine.info.settings["new_shapes"]["refused_calls"] == 0


def test_error_with_nothing_prepared_refuses_and_says_how_to_prepare() -> None:
    with amdinfer.load(tiny_cnn(), providers=CPU, on_new_shape="error") as engine:
        with pytest.raises(InputError, match=r"prepared: none\. Prepare it \(batch_buckets=, warm_shapes="):
            engine.run(_x(1, 3, 32, 32))
        engine.warm([(1, 3, 32, 32)])  # warming prepares it
        assert engine.run(_x(1, 3, 32, 32))["logits"].shape == (1, 10)


def test_compile_is_the_default_runs_the_shape_records_and_logs_it(reference, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="amdinfer.engine"):
        with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(2, 3, 32, 32)]) as engine:
            x = _x(3, 3, 32, 32)
            np.testing.assert_allclose(engine.run(x)["logits"], reference.run(x)["logits"], rtol=1e-4, atol=1e-5)
            engine.run(x)  # once prepared, not again
            record = engine.info.settings["new_shapes"]
            assert engine.info.options.on_new_shape == "compile"
    assert record["policy"] == "compile" and "just work" in record["why"]
    assert record["compiled"] == [{"input": [3, 3, 32, 32]}] and record["compiled_calls"] == 1
    lines = [r.getMessage() for r in caplog.records if "new input shape" in r.getMessage()]
    assert len(lines) == 1 and "(3, 3, 32, 32)" in lines[0]  # the warmed shape is not one


def test_on_new_shape_is_checked() -> None:
    with pytest.raises(OptionError, match="on_new_shape: got 'always'"):
        amdinfer.load(tiny_cnn(), providers=CPU, on_new_shape="always")


def test_prepare_refuses_what_it_would_have_to_pad() -> None:
    with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(4, 3, 32, 32)], on_new_shape="pad") as engine:
        with pytest.raises(InputError, match=r"prepare\(\).*would be padded"):
            engine.prepare(_x(2, 3, 32, 32))
        assert engine.prepare(_x(4, 3, 32, 32))()["logits"].shape == (4, 10)


def test_run_many_follows_the_policy() -> None:
    with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(4, 3, 32, 32)], on_new_shape="pad") as engine:
        assert [o["logits"].shape for o in engine.run_many(_x(n, 3, 32, 32) for n in (4, 2))] == [(4, 10), (2, 10)]
    with amdinfer.load(tiny_cnn(), providers=CPU, warm_shapes=[(4, 3, 32, 32)], on_new_shape="error") as engine:
        with pytest.raises(InputError, match=r"\(2, 3, 32, 32\)"):
            list(engine.run_many(_x(n, 3, 32, 32) for n in (4, 2)))
