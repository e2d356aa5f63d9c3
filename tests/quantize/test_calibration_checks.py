"""Calibration data is checked before ONNX Runtime sees it, and ONNX Runtime's own failures come back typed.

Issue 20: one ``inf`` in int8 calibration data gave a model answering zeros, silently; NaN data or weights gave
``AssertionError: scale issue``; histogram calibrators raised bare ``ValueError``s; wrong shapes raised
ONNX Runtime's ``InvalidArgument``; a failing generator lost the sample index. Every case below asserts the
typed class, the sample index and the input (or initializer, or tensor) in the message, and the chained
cause where one exists. The truth for "a good calibration set still works" is onnx's ReferenceEvaluator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from _oracle import oracle
from onnx import TensorProto, helper, numpy_helper

import amdinfer
from amdinfer.engines._migraphx_quant import migraphx_plan
from amdinfer.errors import InputError, ModelError
from amdinfer.quantize import Fp16Quantizer, Int8Quantizer
from amdinfer.testing.models import random_inputs, tiny_cnn
from amdinfer.verify import rms_error

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("quiet_root_logger")]


@pytest.fixture(scope="module")
def cnn() -> onnx.ModelProto:
    return tiny_cnn(seed=3)


def _calib(model: onnx.ModelProto, n: int = 4) -> list[dict[str, np.ndarray]]:
    return [random_inputs(model, batch=2, seed=s) for s in range(n)]


def _int8(calibration, **kw) -> Int8Quantizer:
    kw.setdefault("progress", False)
    kw.setdefault("cache", False)
    return Int8Quantizer(calibration=calibration, **kw)


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _overflowing(tail: str) -> onnx.ModelProto:
    """x * 1e30 * 1e30 (inf for any |x| > 1e-22), then ``tail`` (MatMul: inf * 0 = NaN; Add: stays inf)."""
    inits = [numpy_helper.from_array(np.array(1e30, np.float32), "c")]
    if tail == "MatMul":
        inits.append(numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"))
        last = helper.make_node("MatMul", ["h2", "w"], ["y"], name="mm")
    else:
        inits.append(numpy_helper.from_array(np.ones(4, np.float32), "b"))
        last = helper.make_node("Add", ["h2", "b"], ["y"], name="add")
    nodes = [
        helper.make_node("Mul", ["x", "c"], ["h1"], name="mul1"),
        helper.make_node("Mul", ["h1", "c"], ["h2"], name="mul2"),
        last,
    ]
    return _model(nodes, [_vi("x", ["N", 4])], [_vi("y", ["N", 4])], inits)


class TestNonFiniteData:
    def test_one_inf_names_the_sample_the_input_and_the_index(self, cnn):
        calib = _calib(cnn)
        calib[2]["input"][1, 0, 5, 7] = np.inf
        with pytest.raises(InputError) as info:
            _int8(calib).quantize(cnn)
        assert str(info.value).startswith(
            "calibration sample 2, input 'input': 1 non-finite value (inf) of 6144, first at index (1, 0, 5, 7)"
        )

    def test_the_same_data_made_finite_gives_a_model_close_to_float(self, cnn):
        # The model the inf used to produce answered zeros; with the value finite it follows the float model.
        calib = _calib(cnn)
        calib[2]["input"][1, 0, 5, 7] = 0.5
        qmodel = _int8(calib).quantize(cnn)
        x = random_inputs(cnn, batch=8, seed=100)
        with amdinfer.load(qmodel, backend="ort", providers=["cpu"]) as engine:
            got = engine.run(x)["logits"]
        want = oracle(cnn, x)["logits"]
        assert np.abs(got).max() > 0.1 * np.abs(want).max()  # not the all-zeros model
        assert rms_error(got, want) < 0.05 * float(np.sqrt(np.mean(want.astype(np.float64) ** 2)))

    def test_all_nan_and_mixed_kinds_are_counted(self, cnn):
        calib = _calib(cnn)
        for feed in calib:
            feed["input"][...] = np.nan
        with pytest.raises(InputError, match=r"^calibration sample 0, input 'input': 6144 non-finite values \(NaN\)"):
            _int8(calib).quantize(cnn)
        calib = _calib(cnn)
        x = calib[1]["input"]
        x[0, 1, 2, 3], x[0, 2, 0, 0], x[1, 0, 0, 0] = -np.inf, np.nan, np.nan
        with pytest.raises(
            InputError,
            match=r"^calibration sample 1, input 'input': 3 non-finite values \(2 NaN, 1 -inf\) of 6144, "
            r"first at index \(0, 1, 2, 3\)",
        ):
            _int8(calib).quantize(cnn)

    @pytest.mark.parametrize(("method", "value", "kind"), [("percentile", np.nan, "NaN"), ("entropy", np.inf, "inf")])
    def test_histogram_calibrators(self, cnn, method, value, kind):
        calib = _calib(cnn)
        calib[3]["input"][0, 0, 0, 1] = value
        with pytest.raises(InputError, match=rf"^calibration sample 3, input 'input': 1 non-finite value \({kind}\)"):
            _int8(calib, method=method).quantize(cnn)

    def test_float16_input_is_checked_too(self):
        model = _model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N", 2])],
        )
        data = [np.ones((1, 2), np.float16), np.array([[1, 70000]], np.float32).astype(np.float16)]  # overflows
        with pytest.raises(InputError, match=r"^calibration sample 1, input 'x': 1 non-finite value \(inf\)"):
            _int8(data).calibration_feeds(model)

    def test_the_native_migraphx_plan_reads_the_same_checked_feeds(self, cnn):
        calib = _calib(cnn)
        calib[1]["input"][0, 0, 0, 0] = np.nan
        with pytest.raises(InputError, match=r"^calibration sample 1, input 'input': 1 non-finite value \(NaN\)"):
            migraphx_plan(_int8(calib), cnn)


class TestNonFiniteModel:
    def test_nan_weight_names_the_initializer_and_node(self, cnn):
        model = onnx.ModelProto()
        model.CopyFrom(cnn)
        init = next(t for t in model.graph.initializer if t.name == "conv2.weight")
        w = numpy_helper.to_array(init).copy()
        w[3, 1, 0, 2] = np.nan
        init.CopyFrom(numpy_helper.from_array(w, "conv2.weight"))
        with pytest.raises(
            ModelError,
            match=r"initializer 'conv2.weight' \(input 1 of Conv node 'conv2'\) holds 1 non-finite value \(NaN\) "
            rf"of {w.size}, first at index \(3, 1, 0, 2\); int8 cannot quantize it",
        ):
            _int8(_calib(cnn)).quantize(model)

    def test_a_deliberate_inf_mask_is_named_and_kept_float_on_request(self):
        # softmax(where(keep, x @ w, -inf)): the -inf is meant; quantized, it would break the model.
        rng = np.random.default_rng(0)
        inits = [
            numpy_helper.from_array(rng.normal(size=(4, 4)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array([True, True, False, True]), "keep"),
            numpy_helper.from_array(np.array(-np.inf, np.float32), "neg"),
        ]
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Where", ["keep", "h", "neg"], ["h2"], name="mask"),
            helper.make_node("Softmax", ["h2"], ["y"], name="softmax", axis=-1),
        ]
        model = _model(nodes, [_vi("x", ["N", 4])], [_vi("y", ["N", 4])], inits)
        data = [rng.normal(size=(2, 4)).astype(np.float32) for _ in range(4)]
        with pytest.raises(
            ModelError,
            match=r"initializer 'neg' \(input 2 of Where node 'mask'\) holds 1 non-finite value \(-inf\);.*"
            r"exclude_nodes=\['mask'\]",
        ):
            _int8(data).quantize(model)
        # The remedy the message names works: the mask stays float, the MatMul is quantized.
        qmodel = _int8(data, exclude_nodes=["mask"]).quantize(model)
        assert "QuantizeLinear" in {n.op_type for n in qmodel.graph.node}
        x = rng.normal(size=(3, 4)).astype(np.float32)
        with amdinfer.load(qmodel, backend="ort", providers=["cpu"]) as engine:
            got = engine.run({"x": x})["y"]
        want = oracle(model, {"x": x})["y"]
        assert np.all(got[:, 2] == 0) and np.abs(got - want).max() < 0.05

    def test_a_tensor_driven_to_nan_is_named_before_the_scale_assert(self):
        model = _overflowing("MatMul")
        data = [np.full((2, 4), 0.5, np.float32)]
        with pytest.raises(InputError, match=r"range of tensor 'h2' in model .* is \[inf, inf\], not finite") as info:
            _int8(data).quantize(model)
        assert isinstance(info.value.__cause__, AssertionError)  # ONNX Runtime's "scale issue", chained

    def test_an_inf_scale_is_refused_instead_of_a_model_answering_zeros(self):
        model = _overflowing("Add")
        with pytest.raises(InputError, match=r"int8 parameter 'h2_scale' of tensor 'h2' holds 1 non-finite value"):
            _int8([np.full((2, 4), 0.5, np.float32)]).quantize(model)

    @pytest.mark.parametrize("method", ["percentile", "entropy"])
    def test_histogram_calibrators_meeting_an_overflow(self, method):
        with pytest.raises(InputError, match=r"NaN or inf range in model .*not finite") as info:
            _int8([np.full((2, 4), 0.5, np.float32)], method=method).quantize(_overflowing("MatMul"))
        assert isinstance(info.value.__cause__, ValueError)


class TestShapesAndDtypes:
    def test_wrong_fixed_dim(self, cnn):
        calib = _calib(cnn)
        calib[1] = {"input": np.zeros((1, 3, 16, 16), np.float32)}
        with pytest.raises(
            InputError,
            match=r"^calibration sample 1, input 'input': got shape \(1, 3, 16, 16\), expected \(N, 3, 32, 32\) "
            r"\(axis 2 is 16, expected 32\)$",
        ):
            _int8(calib).quantize(cnn)

    def test_wrong_rank_and_empty_axis(self, cnn):
        with pytest.raises(InputError, match=r"^calibration sample 0, input 'input': got shape \(1, 1, 3, 32, 32\)"):
            _int8([np.zeros((1, 1, 3, 32, 32), np.float32)]).quantize(cnn)
        with pytest.raises(
            InputError, match=r"^calibration sample 0, input 'input': got shape \(0, 3, 32, 32\).*empty"
        ):
            _int8([np.zeros((0, 3, 32, 32), np.float32)]).quantize(cnn)

    def test_symbolic_dims_take_any_size_but_one_per_sample(self):
        model = _model(
            [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
            [_vi("a", ["N", 4]), _vi("b", ["N", 4])],
            [_vi("y", ["N", 4])],
        )
        good = [{"a": np.ones((n, 4), np.float32), "b": np.ones((n, 4), np.float32)} for n in (1, 3)]
        assert [f["a"].shape[0] for f in _int8(good).calibration_feeds(model)] == [1, 3]
        bad = [*good, {"a": np.ones((2, 4), np.float32), "b": np.ones((1, 4), np.float32)}]
        with pytest.raises(
            InputError,
            match=r"^calibration sample 2, input 'b': got shape \(1, 4\), expected \(N, 4\); "
            r"axis 0 \('N'\) is 1, but input 'a' has 'N' = 2",
        ):
            _int8(bad).quantize(model)

    @pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
    def test_wrong_dtype_is_refused_not_cast(self, cnn, dtype):
        calib = _calib(cnn)
        calib[2] = {"input": calib[2]["input"].astype(dtype)}
        with pytest.raises(
            InputError, match=rf"^calibration sample 2, input 'input': got dtype {np.dtype(dtype)}, expected float32"
        ):
            _int8(calib).quantize(cnn)

    def test_ragged_list_is_an_input_error(self, cnn):
        with pytest.raises(
            InputError, match=r"^calibration sample 0, input 'input': cannot be read as an array"
        ) as info:
            _int8([{"input": [[1.0, 2.0], [3.0]]}]).quantize(cnn)
        assert isinstance(info.value.__cause__, ValueError)

    def test_a_sample_onnx_runtime_cannot_run_is_named(self):
        # Shapes fit the declared (symbolic) spec; the Reshape inside the model refuses sample 1.
        inits = [numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")]
        inits.append(numpy_helper.from_array(np.eye(4, dtype=np.float32), "w"))
        nodes = [
            helper.make_node("Reshape", ["x", "shape"], ["h"], name="reshape"),
            helper.make_node("MatMul", ["h", "w"], ["y"], name="mm"),
        ]
        model = _model(nodes, [_vi("x", ["N", "L"])], [_vi("y", ["M", 4])], inits)
        data = [np.ones((2, 4), np.float32), np.ones((1, 3), np.float32), np.ones((2, 4), np.float32)]
        with pytest.raises(
            InputError, match=r"^calibration sample 1 \('x' \(1, 3\) float32\): ONNX Runtime failed running model"
        ) as info:
            _int8(data).quantize(model)
        assert info.value.__cause__ is not None


class TestIterables:
    @pytest.mark.parametrize("data", [[], (x for x in ())], ids=["list", "generator"])
    def test_empty(self, cnn, data):
        with pytest.raises(InputError, match=r"^calibration: the iterable gave no samples"):
            _int8(data).quantize(cnn)

    def test_a_raising_generator_names_the_sample_and_chains_the_cause(self, cnn):
        boom = RuntimeError("disk gone")

        def gen():
            yield from _calib(cnn, 2)
            raise boom

        q = _int8(gen())
        with pytest.raises(
            InputError, match=r"^calibration sample 2: the iterable raised RuntimeError while producing it: disk gone$"
        ) as info:
            q.quantize(cnn)
        assert info.value.__cause__ is boom
        # The one-shot generator is not read again (it would look empty): the same error comes back.
        with pytest.raises(InputError, match=r"calibration sample 2: the iterable raised") as again:
            q.quantize(cnn)
        assert again.value is info.value

    def test_a_failing_iter_is_an_input_error(self, cnn):
        class Broken:
            def __iter__(self):
                raise OSError("share unmounted")

        with pytest.raises(InputError, match=r"iter\(\) on the Broken raised OSError: share unmounted"):
            _int8(Broken()).quantize(cnn)


class TestOnnxRuntimeFailuresAreWrapped:
    def test_quantize_static_failing_before_calibration(self, cnn, monkeypatch):
        from onnxruntime import quantization

        def broken(*args, **kwargs):
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : boom")

        monkeypatch.setattr(quantization, "quantize_static", broken)
        with pytest.raises(
            ModelError,
            match=r"int8 quantizer failed while preparing the model for calibration \(RuntimeError: .*boom\)",
        ) as info:
            _int8(_calib(cnn)).quantize(cnn)
        assert isinstance(info.value.__cause__, RuntimeError)

    def test_fp16_converter_failure(self, cnn, monkeypatch):
        from amdinfer.quantize import _fp16

        class Module:
            @staticmethod
            def convert_float_to_float16(*args, **kwargs):
                raise ValueError("bad graph")

        quantizer = Fp16Quantizer()
        monkeypatch.setattr(_fp16, "_float16_module", lambda: Module)
        with pytest.raises(
            ModelError, match=r"fp16 quantization failed while converting to float16.*bad graph"
        ) as info:
            quantizer.quantize(cnn)
        assert isinstance(info.value.__cause__, ValueError)


def test_cli_quantize_with_an_inf_is_one_line(tmp_path: Path) -> None:
    model = tiny_cnn()
    onnx.save(model, tmp_path / "m.onnx")
    x = np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
    x[3, 0, 1, 2] = np.inf  # row 3: in the calibration part (the last quarter is held out for the report)
    np.savez(tmp_path / "bad.npz", input=x)
    env = dict(os.environ, AMDINFER_CACHE_DIR=str(tmp_path / "cache"))
    argv = ["quantize", "m.onnx", "--precision", "int8", "--calibration", "bad.npz", "--out", "q.onnx", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "amdinfer", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "Error" in line and "Warning" not in line]
    assert errors == [
        "amdinfer quantize: InputError: --calibration sample 3, input 'input': 1 non-finite value (inf) of 3072, "
        "first at index (0, 0, 1, 2); --calibration data must be finite (NaN or inf makes the int8 ranges and the "
        "report meaningless), clean or drop the sample"
    ], proc.stderr
    assert not (tmp_path / "q.onnx").exists()


class TestHeldOutData:
    """``evaluate`` and ``AutoMixedPrecision`` read held-out data through the same checks, NaN/inf included.

    Before: an ``inf`` there gave a report (or a search) over ``inf``/``NaN`` errors, silently.
    """

    def test_evaluate_names_the_sample_and_the_input(self, cnn):
        from amdinfer.quantize import evaluate

        held_out = _calib(cnn, 3)
        held_out[1]["input"][1, 0, 5, 7] = np.inf
        with pytest.raises(InputError) as info:
            evaluate(cnn, cnn, held_out, task="generic")
        assert str(info.value) == (
            "data sample 1, input 'input': 1 non-finite value (inf) of 6144, first at index (1, 0, 5, 7); data "
            "must be finite (NaN or inf makes the quantized and float outputs incomparable), clean or drop the sample"
        )

    def test_evaluate_checks_the_data_before_quantizing(self, cnn):
        # The quantizer's calibration would fail on its first read; the data's error comes first, so no
        # quantization ran for data that cannot be evaluated.
        def unreadable():
            raise OSError("calibration share unmounted")
            yield

        from amdinfer.quantize import evaluate

        held_out = [np.full((2, 3, 32, 32), np.nan, np.float32)]
        with pytest.raises(InputError, match=r"^data sample 0, input 'input': 6144 non-finite values \(NaN\)"):
            evaluate(_int8(unreadable()), cnn, held_out, task="generic")

    def test_evaluate_names_the_input_of_a_multi_input_model(self):
        from amdinfer.quantize import evaluate

        model = _model(
            [helper.make_node("Add", ["a", "b"], ["y"], name="add")],
            [_vi("a", ["N", 4]), _vi("b", ["N", 4])],
            [_vi("y", ["N", 4])],
        )
        ones = np.ones((2, 4), np.float32)
        b = ones.copy()
        b[1, 3] = -np.inf
        data = [{"a": ones, "b": ones}, {"a": ones, "b": b}]
        with pytest.raises(
            InputError, match=r"^data sample 1, input 'b': 1 non-finite value \(-inf\) of 8, first at index \(1, 3\)"
        ):
            evaluate(Fp16Quantizer(), model, data, task="generic")
        # The same data made finite is evaluated; 1 + 1 and 1 + 2 are exact in float16, so the error is 0.
        b[1, 3] = 2.0
        report = evaluate(Fp16Quantizer(), model, data, task="generic")
        assert report.samples == 2 and report.outputs["y"].rms == 0.0

    @pytest.mark.parametrize("call", ["search", "quantize"])
    def test_mixed_precision_names_the_sample_and_the_input(self, cnn, call):
        from amdinfer.quantize import AutoMixedPrecision

        data = _calib(cnn, 2)
        data[1]["input"][0, 2, 3, 4] = np.inf
        amp = AutoMixedPrecision(_int8(_calib(cnn)), data, tolerance=0.01, progress=False)
        with pytest.raises(
            InputError,
            match=r"^data sample 1, input 'input': 1 non-finite value \(inf\) of 6144, first at index \(0, 2, 3, 4\); "
            r"data must be finite",
        ):
            getattr(amp, call)(cnn)
        assert amp.result is None  # no search ran on the data
