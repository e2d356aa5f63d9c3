"""``Engine.prepare``: checked and bound once, rerun on the feeds' current contents (against onnx's evaluator)."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle import oracle
from onnx import TensorProto, helper

import amdinfer
from amdinfer.engines import DeviceArray, DlpackOnly, PreparedRun
from amdinfer.errors import EngineClosedError, InputError
from amdinfer.testing.models import tiny_cnn

LOADS = {
    "ort-cpu": {"backend": "ort", "providers": ["CPUExecutionProvider"]},
    "ort-cpu-iobinding": {"backend": "ort", "providers": ["CPUExecutionProvider"], "io_binding": True},
    "ort-cpu-device-outputs": {
        "backend": "ort",
        "providers": ["CPUExecutionProvider"],
        "io_binding": True,
        "outputs_on": "device",
    },
    "reference": {"backend": "reference"},
    "buckets": {"backend": "ort", "providers": ["CPUExecutionProvider"], "batch_buckets": [1, 4]},
}


def _host(value):
    return np.from_dlpack(value) if isinstance(value, DeviceArray) else value


@pytest.mark.parametrize("load", LOADS.values(), ids=LOADS.keys())
def test_each_call_reads_the_current_contents(load) -> None:
    model = tiny_cnn()
    x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    with amdinfer.load(model, **load) as engine:
        step = engine.prepare({"input": x})
        assert isinstance(step, PreparedRun) and step.inputs == ["input"] and step.outputs == ["logits"]
        seen = []
        for seed in range(3):
            x[...] = np.random.default_rng(seed + 1).random(x.shape, dtype=np.float32)
            got = _host(step()["logits"])
            np.testing.assert_allclose(got, oracle(model, {"input": x})["logits"], rtol=1e-4, atol=1e-5)
            seen.append(np.array(got))
        assert not np.allclose(seen[0], seen[1])  # the updates were read, not the first contents


def _two_inputs():
    a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b"))
    s, m = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("sum", "product"))
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Mul", ["a", "b"], ["product"])]
    return helper.make_model(
        helper.make_graph(nodes, "two", [a, b], [s, m]), opset_imports=[helper.make_opsetid("", 17)]
    )


def test_dlpack_feed_and_output_selection() -> None:
    model = _two_inputs()
    feeds = {"a": np.full((2, 3), 2.0, np.float32), "b": np.arange(6, dtype=np.float32).reshape(2, 3)}
    with amdinfer.load(model, backend="ort", providers=["CPUExecutionProvider"]) as engine:
        step = engine.prepare({k: DlpackOnly(v) for k, v in feeds.items()}, outputs=["product"])
        feeds["a"] *= 3.0
        out = step()
        assert list(out) == ["product"] and step.outputs == ["product"]
        np.testing.assert_array_equal(out["product"], 6.0 * feeds["b"])  # hand-computed: (2 * 3) * b


def test_checks_happen_at_prepare() -> None:
    with amdinfer.load(tiny_cnn(), backend="reference") as engine:
        with pytest.raises(InputError, match=r"input 'input': got dtype float64, expected float32"):
            engine.prepare(np.zeros((1, 3, 32, 32)))
        strided = np.zeros((1, 3, 32, 64), np.float32)[..., ::2]
        with pytest.raises(InputError, match=r"input 'input': got a non-contiguous array.*np.ascontiguousarray"):
            engine.prepare(strided)
        step = engine.prepare(np.zeros((1, 3, 32, 32), np.float32))
    with pytest.raises(EngineClosedError, match="engine is closed"):
        step()
    with pytest.raises(EngineClosedError):
        engine.prepare(np.zeros((1, 3, 32, 32), np.float32))


# ----------------------------------------------------------------------------------- feeds changed after prepare
RESIZABLE = LOADS  # every way to prepare: IO-bound, plain, bucketed, reference


@pytest.mark.parametrize("load", RESIZABLE.values(), ids=RESIZABLE.keys())
def test_feed_resized_in_place_is_an_input_error(load) -> None:
    x = np.zeros((2, 3, 32, 32), np.float32)
    with amdinfer.load(tiny_cnn(), **load) as engine:
        step = engine.prepare({"input": x})
        step()
        x.resize((1, 3, 32, 32), refcheck=False)  # ONNX Runtime alone: "The input size of numpy arrays does not match"
        with pytest.raises(
            InputError,
            match=r"^input 'input': prepared with shape \(2, 3, 32, 32\) float32, now shape \(1, 3, 32, 32\) float32 ",
        ):
            step()
        y = np.zeros((2, 3, 32, 32), np.float32)
        step = engine.prepare({"input": y})
        y.dtype = np.int32  # re-typed in place, same bytes
        with pytest.raises(InputError, match=r"prepared with shape \(2, 3, 32, 32\) float32, now .* int32"):
            step()


@pytest.mark.parametrize("load", RESIZABLE.values(), ids=RESIZABLE.keys())
def test_replacing_the_dict_entry_keeps_the_bound_array(load) -> None:
    model = tiny_cnn()
    x = np.random.default_rng(1).random((2, 3, 32, 32), dtype=np.float32)
    feeds = {"input": x}
    with amdinfer.load(model, **load) as engine:
        step = engine.prepare(feeds)
        feeds["input"] = np.zeros((3, 3, 32, 32), np.float32)  # documented: the run keeps the array it was given
        got = _host(step()["logits"])
    np.testing.assert_allclose(got, oracle(model, {"input": x})["logits"], rtol=1e-4, atol=1e-5)
