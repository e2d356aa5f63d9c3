"""The fast Resize against ONNX's backend test data (every ``test_resize_*`` node case) and hand-computed values.

The Resize spec (opset 19, ``coordinate_transformation_mode``) defines ``scale = length_resized / length_original``
and notes that the target length "can be a fractional number when it is calculated out of a scale factor": with
``scales`` given, ``length_resized = scale * length_original`` unfloored, so ``align_corners`` divides by
``scale * length_original - 1`` and ``pytorch_half_pixel`` tests ``scale * length_original > 1``. ONNX's own
conformance data (``test_resize_downsample_scales_linear_align_corners``: 3.142857, not 4.0) is built that way;
ONNX Runtime's CPU kernel uses the integer output length there and skips that case in its own backend test run.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import numpy as np
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops.op_resize import Resize as OnnxResize

from amdinfer.reference import fast_ops
from amdinfer.reference._resize import resize

#: Node cases the fast kernel computes itself; the others (cubic, antialias, axes, tf_crop_and_resize,
#: half_pixel_symmetric, keep_aspect_ratio_policy) go to onnx's kernel.
_FAST = {
    "test_resize_upsample_scales_nearest",
    "test_resize_downsample_scales_nearest",
    "test_resize_upsample_sizes_nearest",
    "test_resize_downsample_sizes_nearest",
    "test_resize_upsample_scales_linear",
    "test_resize_upsample_scales_linear_align_corners",
    "test_resize_downsample_scales_linear",
    "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_resize_upsample_sizes_nearest_floor_align_corners",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel",
}


def _resize_cases() -> dict[str, Any]:
    # Importing only the Resize case module builds its ~40 cases (1-2 s) where load_model_tests(kind="node")
    # builds all ~1,900 (15 s); expect() records each case in the package's _NodeTestCases list.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module("onnx.backend.test.case.node.resize")
    from onnx.backend.test.case import node

    cases = {c.name: c for c in node._NodeTestCases if c.name.startswith("test_resize_")}
    missing = _FAST - set(cases)
    assert not missing, f"onnx's Resize node cases lack {sorted(missing)}: the test would no longer cover them"
    return cases


_CASES = _resize_cases()


@pytest.mark.parametrize("name", sorted(_CASES))
def test_conformance_case(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _CASES[name]
    deferred: list[str] = []
    onnx_run = OnnxResize._run

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        deferred.append(name)
        return onnx_run(self, *args, **kwargs)

    monkeypatch.setattr(OnnxResize, "_run", spy)
    evaluator = ReferenceEvaluator(case.model, new_ops=fast_ops())
    names = [i.name for i in case.model.graph.input]
    assert case.data_sets, name
    for inputs, expected in case.data_sets:
        feeds = {n: v if isinstance(v, np.ndarray) else numpy_helper.to_array(v) for n, v in zip(names, inputs)}
        got = evaluator.run(None, feeds)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            e = e if isinstance(e, np.ndarray) else numpy_helper.to_array(e)
            assert g.dtype == e.dtype, (g.dtype, e.dtype)
            assert g.shape == e.shape, (g.shape, e.shape)
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
    assert (not deferred) == (name in _FAST), f"{name}: fast kernel used: {not deferred}, expected {name in _FAST}"


_X = np.arange(4, dtype=np.float32).reshape(1, 4)


@pytest.mark.parametrize(
    ("scale", "mode", "ctm", "nearest_mode", "expected"),
    [
        # length_resized = 0.6 * 4 = 2.4: coordinates 0 and 1 * 3 / 1.4 (the integer length would give 0 and 3)
        (0.6, "linear", "align_corners", "round_prefer_floor", [0.0, 3 / 1.4]),
        (0.6, "nearest", "align_corners", "round_prefer_floor", [0.0, 2.0]),
        # length_resized = 0.3 * 4 = 1.2 > 1: coordinate 0.5 / 0.3 - 0.5 (the integer length 1 would give 0)
        (0.3, "linear", "pytorch_half_pixel", "round_prefer_floor", [0.5 / 0.3 - 0.5]),
        (0.3, "nearest", "pytorch_half_pixel", "ceil", [2.0]),
        # integral length_resized: unchanged
        (0.5, "linear", "align_corners", "round_prefer_floor", [0.0, 3.0]),
        (0.5, "linear", "pytorch_half_pixel", "round_prefer_floor", [0.5, 2.5]),
        (0.25, "linear", "pytorch_half_pixel", "round_prefer_floor", [0.0]),
        (1.5, "linear", "align_corners", "round_prefer_floor", [0.0, 0.6, 1.2, 1.8, 2.4, 3.0]),
    ],
)
def test_fractional_length_resized(scale: float, mode: str, ctm: str, nearest_mode: str, expected: list) -> None:
    got = resize(
        _X,
        scales=[1.0, float(np.float32(scale))],
        mode=mode,
        coordinate_transformation_mode=ctm,
        nearest_mode=nearest_mode,
    )
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [expected], rtol=1e-6, atol=1e-6)


def test_sizes_use_the_integer_length() -> None:
    # With sizes the resized length is the size itself: pytorch_half_pixel maps a length-1 output to coordinate 0.
    got = resize(_X, sizes=[1, 1], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    np.testing.assert_array_equal(got, [[0.0]])
    got = resize(_X, sizes=[1, 2], mode="linear", coordinate_transformation_mode="align_corners")
    np.testing.assert_array_equal(got, [[0.0, 3.0]])


def test_empty_axes() -> None:
    """An axis of 0 elements stays empty (ONNX Runtime agrees for 0 -> 0); 0 -> n has nothing to sample from:
    a ValueError naming the axis, not Python's ZeroDivisionError."""
    assert resize(np.zeros((2, 0), np.float32), sizes=[4, 0], mode="linear").shape == (4, 0)
    assert resize(np.zeros((0, 3), np.uint8), sizes=[0, 6], mode="nearest").shape == (0, 6)
    with pytest.raises(ValueError, match=r"resize: axis 1 has 0 elements, expected at least 1 to resize it to 3"):
        resize(np.zeros((2, 0), np.float32), sizes=[2, 3], mode="linear")


def test_linear_taps_need_a_pixel_on_both_sides() -> None:
    """The 8-bit taps a fused graph's resize is built from: 0 pixels (a letterbox side that once rounded to 0)
    is a ValueError, not a ZeroDivisionError; 3 -> 1 samples the middle pixel (half-pixel centres: 1.5 - 0.5)."""
    from amdinfer.reference import linear_taps_fixed

    with pytest.raises(ValueError, match=r"resize taps: got 3 -> 0 pixels"):
        linear_taps_fixed(3, 0)
    assert [a.tolist() for a in linear_taps_fixed(3, 1)] == [[1], [2], [2048], [0]]
