"""``resize="fast"``: in-graph geometry with one ONNX ``Resize``, against the exact (cv2-bit-exact) form."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_fuse import CPU, _identity_uint8, _images

import amdinfer
from amdinfer.errors import OptionError
from amdinfer.pipeline.fuse import fuse_model
from amdinfer.pipeline.fuse._options import _auto_resize
from amdinfer.preprocess import BgrToRgb, CenterCrop, HwcToChw, Letterbox, Normalize, Resize

ENGINES = [CPU, {"backend": "reference"}]


def _identity_float_nchw(h: int, w: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, h, w])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _both(model, pre, image_size, images, load):
    """The fused preprocessing's output with resize="exact" and "fast" (and the fast graph)."""
    out = []
    for mode in ("exact", "fast"):
        fused = fuse_model(model, pre, [], image_size=image_size, resize=mode)
        engine = amdinfer.load(fused, **load)
        out.append(engine.run({"images": np.stack(images)})["y"])
        engine.close()
    return out[0], out[1], fused


@pytest.mark.parametrize("load", ENGINES, ids=["ort", "reference"])
@pytest.mark.parametrize(
    ("pre", "model", "unit"),
    [
        # letterbox (pad) + flip + normalise + layout: the fast form stays NCHW, HwcToChw costs nothing
        ([Letterbox(64), BgrToRgb(), Normalize(scale=1 / 255), HwcToChw()], _identity_float_nchw(64, 64), 1 / 255),
        # per-channel normalisation after the fast geometry (channel axis 1 while still logically HWC)
        (
            [Letterbox(64), Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], scale=1 / 255), HwcToChw()],
            _identity_float_nchw(64, 64),
            1 / 255 / 0.224,
        ),
        # no HwcToChw: the graph goes back to uint8 NHWC at the end
        ([Resize(40), CenterCrop(32)], _identity_uint8(32, 32), 1),
    ],
    ids=["letterbox-chw", "mean-std", "resize-crop-hwc"],
)
def test_fast_is_within_one_pixel_of_exact(pre, model, unit, load) -> None:
    images = _images([(48, 80)] * 2, seed=4)
    exact, fast, graph = _both(model, pre, (48, 80), images, load)
    assert exact.shape == fast.shape and exact.dtype == fast.dtype
    diff = np.abs(exact.astype(np.float64) - fast.astype(np.float64))
    # Property: float sampling rounded to whole pixels vs OpenCV's 11-bit fixed point differ by at most one
    # pixel level, on a minority of values (about 10 % on these images; the NumPy kernel's own bound).
    assert diff.max() <= unit * (1 + 1e-5)
    assert 0 < np.mean(diff > 1e-6) < 0.25
    assert "Resize" in {n.op_type for n in graph.graph.node}


def test_auto_resize_and_bad_mode() -> None:
    assert _auto_resize({"backend": "ort", "providers": ["CUDAExecutionProvider"]}) == "auto"
    assert _auto_resize({"backend": "ort", "providers": ["ROCMExecutionProvider"]}) == "auto"
    assert _auto_resize({"backend": "ort", "providers": ["CPUExecutionProvider"]}) == "exact"
    assert _auto_resize({"backend": "migraphx"}) == "exact"
    with pytest.raises(OptionError, match="resize: got 'bicubic'"):
        fuse_model(_identity_uint8(32, 32), [Resize(32)], [], image_size=(40, 40), resize="bicubic")
    pipe = amdinfer.Pipeline(preprocess=[Resize((32, 32))], engine=_identity_uint8(32, 32), **CPU)
    with pipe.fuse(image_size=(40, 50)) as fused:  # auto on the CPU: exact, no Resize node
        assert "Resize" not in {n.op_type for n in fused.model.graph.node}
    pipe.close()


@pytest.mark.parametrize(("out_hw", "fast"), [((448, 448), True), ((256, 256), False)])
def test_auto_picks_by_output_size(out_hw, fast) -> None:
    model = fuse_model(_identity_uint8(*out_hw), [Resize(out_hw)], [], image_size=(300, 400), resize="auto")
    assert ("Resize" in {n.op_type for n in model.graph.node}) is fast
