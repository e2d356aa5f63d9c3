"""amdinfer's default graph capture stays off for models whose inputs vary beyond the batch axis (a graph per
shape; ORT's CUDA-graph replays faulted with an illegal memory access on an OCR cascade of many page and line
sizes on an H200), and stays on for fixed frames with a dynamic batch; a caller's ``gpu_graphs=True`` still wins."""

from __future__ import annotations

from onnx import TensorProto, helper

from amdinfer.engines.ort._tuning import plan_tuning, varying_inputs
from amdinfer.testing.models import tiny_cnn


def _model(shape: list) -> object:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]))


def test_varying_inputs_names_each_dynamic_dim_beyond_the_batch_axis() -> None:
    assert varying_inputs(_model(["N", 3, 224, 224])) == ()
    assert varying_inputs(_model(["N", 3, "H", "W"])) == ("x[2]", "x[3]")
    assert varying_inputs(_model([1, 3, 48, None])) == ("x[3]",)
    assert varying_inputs(tiny_cnn()) == ()


def test_default_capture_is_off_for_varying_shapes_with_the_reason() -> None:
    plan = plan_tuning("CUDAExecutionProvider", io_bound=True, varying=("x[2]", "x[3]"))
    choice = plan.choices["gpu_graphs"]
    assert (choice.value, choice.source) == (False, "amdinfer")
    assert "x[2], x[3]" in choice.reason


def test_fixed_frames_keep_the_tuned_default_and_the_caller_wins() -> None:
    fixed = plan_tuning("CUDAExecutionProvider", io_bound=True, varying=()).choices["gpu_graphs"]
    assert (fixed.value, fixed.source) == (True, "amdinfer")
    asked = plan_tuning("CUDAExecutionProvider", io_bound=True, varying=("x[3]",), user={"gpu_graphs": True})
    assert (asked.choices["gpu_graphs"].value, asked.choices["gpu_graphs"].source) == (True, "user")


def test_varying_inputs_run_nchw_on_the_cuda_ep_unless_asked() -> None:
    """A new shape costs twice as long to build in NHWC (measured on an H200, issue 38): varying inputs get NCHW on the
    CUDA EP; fixed ones keep NHWC; the caller's value wins; other providers are left alone."""
    varying = plan_tuning("CUDAExecutionProvider", io_bound=True, varying=("x[3]",)).choices["prefer_nhwc"]
    assert (varying.value, varying.source) == (False, "amdinfer")
    assert "x[3]" in varying.reason and "prefer_nhwc=True" in varying.reason
    fixed = plan_tuning("CUDAExecutionProvider", io_bound=True, varying=()).choices["prefer_nhwc"]
    assert (fixed.value, fixed.source) == (True, "amdinfer")
    asked = plan_tuning("CUDAExecutionProvider", varying=("x[3]",), user={"prefer_nhwc": True}).choices["prefer_nhwc"]
    assert (asked.value, asked.source) == (True, "user")
    rocm = plan_tuning("ROCMExecutionProvider", varying=("x[3]",)).choices["prefer_nhwc"]
    assert rocm.source != "amdinfer" or rocm.value is not False
