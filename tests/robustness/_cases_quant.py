"""Issue 20's robustness cases: quant (registered into the corpus by ``_corpus.py``).

Int8 calibration data that is not finite, of the wrong shape or dtype, empty, or produced by a generator that
fails; weights that are NaN. Each gives a typed error naming the calibration sample and the input (or the
initializer and its node), never a model answering zeros or a raw ONNX Runtime / NumPy exception.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from _corpus import CliResult, case, run_cli
from onnx import numpy_helper

from amdinfer.errors import InputError, ModelError
from amdinfer.quantize import Int8Quantizer
from amdinfer.testing.models import random_inputs, tiny_cnn


def _calib(n: int = 4) -> list[dict[str, np.ndarray]]:
    model = tiny_cnn()
    return [random_inputs(model, batch=2, seed=s) for s in range(n)]


def _quantize(calibration: object, model: onnx.ModelProto | None = None, **kw: object) -> onnx.ModelProto:
    q = Int8Quantizer(calibration=calibration, progress=False, cache=False, **kw)  # type: ignore[arg-type]
    return q.quantize(model if model is not None else tiny_cnn())


@case("quantization", InputError, r"^calibration sample 3, input 'input': 1 non-finite value \(inf\) of 6144")
def calib_one_inf(d: Path) -> object:
    calib = _calib()
    calib[3]["input"][0, 1, 2, 3] = np.inf
    return _quantize(calib)


@case("quantization", InputError, r"^calibration sample 0, input 'input': 6144 non-finite values \(NaN\)")
def calib_all_nan(d: Path) -> object:
    calib = _calib()
    for feed in calib:
        feed["input"][...] = np.nan
    return _quantize(calib)


@case(
    "quantization",
    ModelError,
    r"initializer 'conv1.weight' \(input 1 of Conv node 'conv1'\) holds 1 non-finite value \(NaN\)",
)
def nan_weights(d: Path) -> object:
    model = tiny_cnn()
    init = next(t for t in model.graph.initializer if t.name == "conv1.weight")
    w = numpy_helper.to_array(init).copy()
    w.flat[5] = np.nan
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    return _quantize(_calib(), model)


@case("quantization", InputError, r"^calibration sample 1, input 'input': 1 non-finite value \(NaN\)")
def calib_percentile_nan(d: Path) -> object:
    calib = _calib()
    calib[1]["input"][1, 0, 0, 0] = np.nan
    return _quantize(calib, method="percentile")


@case("quantization", InputError, r"^calibration sample 2, input 'input': 2 non-finite values \(1 inf, 1 -inf\)")
def calib_entropy_inf(d: Path) -> object:
    calib = _calib()
    calib[2]["input"][0, 0, 0, 0] = np.inf
    calib[2]["input"][0, 0, 0, 1] = -np.inf
    return _quantize(calib, method="entropy")


@case(
    "quantization",
    InputError,
    r"^calibration sample 1, input 'input': got shape \(2, 3, 16, 16\), expected \(N, 3, 32, 32\) "
    r"\(axis 2 is 16, expected 32\)",
)
def calib_wrong_shape(d: Path) -> object:
    calib = _calib()
    calib[1] = {"input": np.zeros((2, 3, 16, 16), np.float32)}
    return _quantize(calib)


@case("quantization", InputError, r"^calibration sample 2, input 'input': got dtype float64, expected float32")
def calib_wrong_dtype(d: Path) -> object:
    calib = _calib()
    calib[2] = {"input": calib[2]["input"].astype(np.float64)}
    return _quantize(calib)


@case("quantization", InputError, r"^calibration: the iterable gave no samples, expected at least one")
def calib_empty(d: Path) -> object:
    return _quantize(x for x in ())


@case("quantization", InputError, r"^calibration sample 2: the iterable raised OSError while producing it: disk gone")
def calib_generator_raises(d: Path) -> object:
    boom = OSError("disk gone")

    def gen():
        yield from _calib(2)
        raise boom

    try:
        return _quantize(gen())
    except InputError as exc:
        assert exc.__cause__ is boom, exc.__cause__  # the user's exception is chained, not swallowed
        raise


@case(
    "command line",
    CliResult,
    r"^exit 1: amdinfer quantize: InputError: --calibration sample 3, input 'input': 1 non-finite value \(inf\) "
    r"of 3072, first at index \(0, 0, 1, 2\)[^\n]*$",
)
def cli_quantize_calib_inf(d: Path) -> object:
    folder = d / "case-cli-quantize-calib-inf"
    folder.mkdir(exist_ok=True)
    x = np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
    x[3, 0, 1, 2] = np.inf  # row 3 is calibration (the CLI holds the last quarter out for its report)
    np.savez(folder / "bad.npz", input=x)
    out = folder / "q.onnx"
    try:
        run_cli(
            d,
            "quantize",
            "m.onnx",
            "--precision",
            "int8",
            "--calibration",
            str(folder / "bad.npz"),
            "--out",
            str(out),
            "-q",
        )
    finally:
        assert not out.exists()
    return None


@case("quantization", InputError, r"int8 parameter 'h2_scale' of tensor 'h2' holds 1 non-finite value \(inf\)")
def calib_overflow_in_model(d: Path) -> object:
    """Finite data that the model itself overflows (x * 1e30 * 1e30): an inf scale, the all-zeros model."""
    from onnx import TensorProto, helper

    inits = [
        numpy_helper.from_array(np.array(1e30, np.float32), "c"),
        numpy_helper.from_array(np.ones(4, np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "c"], ["h1"], name="mul1"),
        helper.make_node("Mul", ["h1", "c"], ["h2"], name="mul2"),
        helper.make_node("Add", ["h2", "b"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 9
    return _quantize([np.full((2, 4), 0.5, np.float32)], model)


@case(
    "command line",
    CliResult,
    r"^exit 1: amdinfer quantize: InputError: --calibration sample 7, input 'input': 1 non-finite value \(NaN\)",
)
def cli_quantize_held_out_nan(d: Path) -> object:
    """A NaN in the held-out quarter of --calibration: refused with its row in the file, before anything is written."""
    folder = d / "case-cli-quantize-held-out-nan"
    folder.mkdir(exist_ok=True)
    x = np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
    x[7, 0, 0, 0] = np.nan  # row 7: the held-out part (rows 6 and 7), counted as a row of the file
    np.savez(folder / "bad.npz", input=x)
    out = folder / "q.onnx"
    try:
        run_cli(d, "quantize", "m.onnx", "--precision", "int8", "--calibration", str(folder / "bad.npz"),
                "--out", str(out), "-q")  # fmt: skip
    finally:
        assert not out.exists()
    return None
