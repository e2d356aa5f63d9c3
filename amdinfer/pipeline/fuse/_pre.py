"""Preprocessing stages as ONNX nodes (the uint8 ``cv2.resize`` included)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

from ...errors import OptionError
from ...preprocess import (
    BgrToRgb,
    Cast,
    CenterCrop,
    HwcToChw,
    Letterbox,
    Normalize,
    Resize,
    letterbox_geometry,
)
from ...reference import linear_taps_fixed
from ...stages import Preprocessor
from ._graph import _GEOMETRY, _Graph


# ---------------------------------------------------------------------------------------------- preprocessing
def _resize_cv2(g: _Graph, x: str, hw: tuple[int, int], new_hw: tuple[int, int]) -> str:
    """``cv2.resize(INTER_LINEAR)`` of an int32 NHWC tensor, bit-exact with OpenCV's uint8 SIMD path.

    Horizontal pass ``S = src[x0] * a0 + src[x1] * a1`` with 11-bit weights; vertical pass as OpenCV's
    ``VResizeLinearVec_32s8u``: ``((((S0 >> 4) * b0) >> 16) + (((S1 >> 4) * b1) >> 16) + 2) >> 2``.
    """
    (h, w), (nh, nw) = hw, new_hw
    if (h, w) == (nh, nw):
        return x
    x0, x1, a0, a1 = linear_taps_fixed(w, nw)
    y0, y1, b0, b1 = linear_taps_fixed(h, nh)
    c = g.const
    s = g.op(
        "Add",
        g.op("Mul", g.gather(x, x0, 2), c(a0.reshape(1, 1, -1, 1), np.int32)),
        g.op("Mul", g.gather(x, x1, 2), c(a1.reshape(1, 1, -1, 1), np.int32)),
    )
    sixteen, hi = c(16, np.int32), c(65536, np.int32)

    def half(index: np.ndarray, beta: np.ndarray) -> str:
        rows = g.op("Div", g.gather(s, index, 1), sixteen)
        return g.op("Div", g.op("Mul", rows, c(beta.reshape(1, -1, 1, 1), np.int32)), hi)

    total = g.op("Add", g.op("Add", half(y0, b0), half(y1, b1)), c(2, np.int32))
    return g.op("Div", total, c(4, np.int32))


def _resize_onnx(g: _Graph, x: str, new_hw: tuple[int, int]) -> str:
    """Bilinear resize of a float32 NCHW tensor of whole pixel values with one ONNX ``Resize``
    (``half_pixel``, no antialiasing: the sampling of ``cv2.resize(INTER_LINEAR)``, in floating point),
    rounded to whole values: within 1 of OpenCV's uint8 result."""
    sizes = g.op("Concat", g.dims(x, 0, 2), g.const(list(new_hw), np.int64), axis=0)
    resized = g.op("Resize", x, "", "", sizes, mode="linear", coordinate_transformation_mode="half_pixel")
    return g.op("Round", resized)


_RESIZE_MODES = ("exact", "fast", "auto")
#: ``resize="auto"``: the one-``Resize`` form from this output size up. Measured on an H200 (ORT 1.31 CUDA EP,
#: batch 64; docs/performance.md): the exact form's dozen int32 ops scale with the output and lose from
#: 590k pixels up (1024x576: 1.38x slower, 1024x768: 1.54x), tie at 307k (640x480), win below 120k
#: (ResNet's 455x256 and 341x256: the fast form's float copy of the whole source costs more there).
_FAST_RESIZE_PIXELS = 200_000


class _Pre:
    """Compiles the preprocessing stages; tracks the layout (channel axis) and dtype of the running tensor."""

    def __init__(self, g: _Graph, x: str, hw: tuple[int, int] | None, resize: str = "exact") -> None:
        self.resize = resize
        self.g = g
        self.x = x
        self.hw = hw  # (H, W) while geometry is still in the graph; None once it is not known
        self.channel_axis = 3
        self.dtype: np.dtype[Any] = np.dtype(np.uint8)
        self.affine = (1.0, 1.0, 0.0, 0.0)
        self.orig_hw = hw
        self.pixels = True  # the values are still whole uint8 pixel values (in uint8, int32 or float32)
        # resize="fast": geometry runs on a float32 NCHW copy (ORT's CUDA Resize scales the innermost axes)
        # while the stages still see HWC; HwcToChw then costs nothing, and finish() transposes back if needed.
        self.hwc_as_chw = False

    def _int32(self) -> None:
        if self.dtype != np.int32:
            if not self.pixels:
                raise OptionError("fuse: geometric stages must come before Normalize/Cast to be fused")
            self.x = self.g.op("Cast", self.x, to=TensorProto.INT32)
            self.dtype = np.dtype(np.int32)

    def _float(self) -> None:
        self.pixels = False
        if self.dtype.kind != "f":
            self.x = self.g.op("Cast", self.x, to=TensorProto.FLOAT)
            self.dtype = np.dtype(np.float32)

    def _geometry(self, stage: Preprocessor) -> None:
        if self.hw is None:
            raise OptionError(
                f"fuse: {type(stage).__name__} after a non-geometric stage cannot run in the graph without "
                "image_size; pass image_size=(H, W) or move it first"
            )
        if self.channel_axis != 3 and not self.hwc_as_chw:
            raise OptionError(f"fuse: {type(stage).__name__} after HwcToChw cannot be fused (it expects HWC)")
        g, (h, w) = self.g, self.hw
        geo = letterbox_geometry((h, w), stage) if isinstance(stage, Letterbox) else None
        if geo is not None:
            new_hw = (int(geo.resized[0]), int(geo.resized[1]))
        else:
            new_hw = stage.target(h, w) if isinstance(stage, Resize) else (h, w)
        resizing = new_hw != (h, w)  # Letterbox/Resize to another size (CenterCrop never)
        fast = self.resize == "fast" or (
            self.resize == "auto" and resizing and new_hw[0] * new_hw[1] >= _FAST_RESIZE_PIXELS
        )
        if fast and not self.hwc_as_chw and self.dtype == np.uint8:
            self.x = g.op("Cast", g.op("Transpose", self.x, perm=[0, 3, 1, 2]), to=TensorProto.FLOAT)
            self.dtype, self.channel_axis, self.hwc_as_chw = np.dtype(np.float32), 1, True
        if not self.hwc_as_chw:
            self._int32()
        hw_axes = [2, 3] if self.hwc_as_chw else [1, 2]
        if resizing:
            self.x = _resize_onnx(g, self.x, new_hw) if self.hwc_as_chw else _resize_cv2(g, self.x, (h, w), new_hw)
        if geo is not None:
            assert isinstance(stage, Letterbox)
            if any(geo.pads):
                if len(set(stage.color)) != 1:
                    raise OptionError(f"fuse: Letterbox(color={stage.color}) must use one value for every channel")
                top, bottom, left, right = geo.pads
                pads = [0] * 8  # begins of the 4 axes, then ends
                for axis, before, after in zip(hw_axes, (top, left), (bottom, right)):
                    pads[axis], pads[4 + axis] = before, after
                # Pad in float32 (whole numbers, exact): ORT's CUDA EP has no int32 Pad and would run it on the CPU.
                if self.dtype != np.float32:
                    self.x = g.op("Cast", self.x, to=TensorProto.FLOAT)
                    self.dtype = np.dtype(np.float32)
                fill = g.const(float(round(stage.color[0])), np.float32)
                self.x = g.op("Pad", self.x, g.const(pads, np.int64), fill, mode="constant")
            sx, sy, tx, ty = geo.affine
            self.hw = geo.shape
        elif isinstance(stage, Resize):
            th, tw = new_hw
            sx, sy, tx, ty = tw / w, th / h, 0.0, 0.0
            self.hw = (th, tw)
        else:
            assert isinstance(stage, CenterCrop)
            th, tw = stage.size
            if th > h or tw > w:
                raise OptionError(f"fuse: CenterCrop{stage.size} is larger than the image {self.hw}")
            top, left = round((h - th) / 2.0), round((w - tw) / 2.0)
            c = g.const
            self.x = g.op(
                "Slice", self.x, c([top, left], np.int64), c([top + th, left + tw], np.int64), c(hw_axes, np.int64)
            )
            sx, sy, tx, ty = 1.0, 1.0, -float(left), -float(top)
            self.hw = (th, tw)
        ax, ay, bx, by = self.affine
        self.affine = (ax * sx, ay * sy, bx * sx + tx, by * sy + ty)

    def add(self, stage: Preprocessor) -> None:
        g = self.g
        if isinstance(stage, _GEOMETRY):
            self._geometry(stage)
        elif isinstance(stage, BgrToRgb):
            self.x = g.gather(self.x, [2, 1, 0], self.channel_axis)
        elif isinstance(stage, HwcToChw):
            if self.hwc_as_chw:
                self.hwc_as_chw = False  # the tensor is NCHW already
            else:
                self.x = g.op("Transpose", self.x, perm=[0, 3, 1, 2])
            self.channel_axis = 1
        elif isinstance(stage, Normalize):
            self._float()
            if stage.dtype != np.float32:
                raise OptionError(f"fuse: Normalize(dtype={stage.dtype}) cannot be fused; use float32 and Cast")
            divisor = stage.divisor
            if divisor is not None:
                self.x = g.op("Div", self.x, g.const(divisor, np.float32))
            elif stage.scale != 1.0:
                self.x = g.op("Mul", self.x, g.const(stage.scale, np.float32))
            for values, op in ((stage.mean, "Sub"), (stage.std, "Div")):
                if values is None:
                    continue
                v = np.asarray(values, np.float32)
                if v.size > 1:
                    if stage.channel_axis not in (-1, 0):
                        raise OptionError(f"fuse: Normalize(channel_axis={stage.channel_axis}) cannot be fused")
                    shape = [1, 1, 1, 1]
                    shape[self.channel_axis] = v.size
                    v = v.reshape(shape)
                self.x = g.op(op, self.x, g.const(v))
        elif isinstance(stage, Cast):
            self.pixels = False
            to = helper.np_dtype_to_tensor_dtype(stage.dtype)
            self.x = g.op("Cast", self.x, to=to)
            self.dtype = stage.dtype
        else:
            raise OptionError(
                f"fuse: {type(stage).__name__} has no ONNX form; put it before the fusable stages (it then runs on "
                "the host) or use the stage-by-stage Pipeline"
            )

    def finish(self) -> None:
        if self.hwc_as_chw:  # no HwcToChw followed the fast geometry: back to the HWC the stages produce
            self.x = self.g.op("Transpose", self.x, perm=[0, 2, 3, 1])
            self.channel_axis, self.hwc_as_chw = 3, False
        if self.pixels and self.dtype != np.uint8:  # geometry only: the model takes what the host path gives
            self.x = self.g.op("Cast", self.x, to=TensorProto.UINT8)
            self.dtype = np.dtype(np.uint8)
