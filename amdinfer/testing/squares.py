"""A made test set for sliced inference: large dark images with bright squares planted at known boxes, and a tiny
ONNX detector (YOLOv8 output layout) that provably finds squares of one size and no others.

:func:`square_detector` looks at each anchor of a stride-8 grid through a window of ``3 * side`` pixels: the
bright pixels (channel mean above one half) inside it give the box by their moments (centre = mean, width =
``sqrt(12 * variance + 1)``, exact for an axis-aligned rectangle of whole pixels that lies in the window), and the
score is the bright share of the ``side x side`` core around the anchor less four times the bright share of the
ring around it. An isolated square of ``side`` pixels scores between 0.34 and 1 at the anchor nearest its centre;
a region larger than the window, a strip (of any width) or a square of a quarter of the size score 0 or little:
a 16-pixel square of a 3,000-pixel image, letterboxed whole to 640, is 3 pixels wide and lost, while a 640-pixel
tile sees it at full size. :func:`planted_squares` draws such images deterministically.

Example:
    >>> import numpy as np, amdinfer
    >>> image, boxes = planted_squares(640, 640, count=3, seed=0)
    >>> image.shape, boxes.shape
    ((640, 640, 3), (3, 4))
    >>> det = amdinfer.yolo(square_detector(image_size=640), providers=["cpu"])
    >>> found = det(image)  # at the model's scale: every square, its box exact
    >>> sorted(found.boxes.tolist()) == sorted(boxes.tolist())
    True
    >>> det.close()
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["SQUARE_SIDE", "planted_squares", "square_detector"]

#: the side (pixels, at the model's input scale) of the squares :func:`square_detector` finds by default
SQUARE_SIDE = 16
_STRIDE = 8


def _kernels(side: int) -> np.ndarray:
    """The window's six moment kernels ``(6, 1, K, K)``: ones, dx, dy, dx^2, dy^2, and the ``side`` core."""
    k = 3 * side
    offset = np.arange(k, dtype=np.float64) + 0.5 - k / 2  # pixel centre minus the anchor, along one axis
    dx = np.broadcast_to(offset[None, :], (k, k))
    dy = np.broadcast_to(offset[:, None], (k, k))
    core = np.zeros((k, k))
    lo = k // 2 - side // 2
    core[lo : lo + side, lo : lo + side] = 1
    w = np.stack([np.ones((k, k)), dx, dy, dx * dx, dy * dy, core])
    return w[:, None].astype(np.float32)


def _nodes(k: int, pad: int) -> list[onnx.NodeProto]:
    """The detector's nodes: brightness, the window's moments (one strided conv), box and score per anchor."""
    mk = helper.make_node
    nodes = [
        mk("Conv", ["images", "grey_w"], ["grey"]),
        mk("Sub", ["grey", "half"], ["g0"]),
        mk("Mul", ["g0", "two"], ["g1"]),
        mk("Relu", ["g1"], ["g2"]),
        mk("Min", ["g2", "one"], ["bright"]),
        mk("Conv", ["bright", "moments_w"], ["m4"], strides=[_STRIDE] * 2, pads=[pad] * 4, kernel_shape=[k, k]),
        mk("Reshape", ["m4", "shape"], ["m"]),
        mk("Split", ["m", "split"], ["m0", "mx", "my", "mxx", "myy", "inner"], axis=1),
        mk("Max", ["m0", "eps"], ["den"]),
        mk("Div", ["mx", "den"], ["ex"]),
        mk("Div", ["my", "den"], ["ey"]),
        mk("Add", ["ax", "ex"], ["cx"]),
        mk("Add", ["ay", "ey"], ["cy"]),
    ]
    for axis in ("x", "y"):  # width = sqrt(12 * (E[d^2] - E[d]^2) + 1): the extent of a run of whole pixels
        nodes += [
            mk("Div", [f"m{axis}{axis}", "den"], [f"e{axis}{axis}"]),
            mk("Mul", [f"e{axis}", f"e{axis}"], [f"sq{axis}"]),
            mk("Sub", [f"e{axis}{axis}", f"sq{axis}"], [f"var{axis}"]),
            mk("Relu", [f"var{axis}"], [f"v{axis}"]),
            mk("Mul", [f"v{axis}", "twelve"], [f"t{axis}"]),
            mk("Add", [f"t{axis}", "one"], [f"u{axis}"]),
            mk("Sqrt", [f"u{axis}"], [f"w{axis}"]),
        ]
    nodes += [
        mk("Mul", ["inner", "core_gain"], ["s0"]),
        mk("Mul", ["m0", "ring_gain"], ["s1"]),
        mk("Sub", ["s0", "s1"], ["s2"]),
        mk("Relu", ["s2"], ["s3"]),
        mk("Min", ["s3", "one"], ["score"]),
        mk("Concat", ["cx", "cy", "wx", "wy", "score"], ["output0"], axis=1),
    ]
    return nodes


def square_detector(*, image_size: int = 640, side: int = SQUARE_SIDE) -> onnx.ModelProto:
    """A one-class detector (class ``"square"``) of bright squares of ``side`` pixels, in the YOLOv8 export layout.

    Input ``"images"`` ``(N, 3, image_size, image_size)`` float32 in ``[0, 1]`` (the recipes' ``/ 255``); output
    ``"output0"`` ``(N, 5, A)``, rows ``cx, cy, w, h, score``, ``A = (image_size / 8) ** 2`` anchors at the centres
    of a stride-8 grid. A pixel is bright where its channel mean is above 0.5 (the letterbox's grey 114 is not).
    Metadata: ``names`` ``{0: 'square'}``, ``stride`` 8.

    Args:
        image_size: the square input size, a multiple of 8.
        side: the squares' side in input pixels, an even number >= 8 (the window is ``3 * side``).

    Raises:
        ValueError: a size out of range.

    Example:
        >>> import numpy as np
        >>> from onnx.reference import ReferenceEvaluator
        >>> x = np.zeros((1, 3, 64, 64), np.float32)
        >>> x[:, :, 20:36, 8:24] = 1.0  # a 16-pixel square at x 8..24, y 20..36
        >>> (out,) = ReferenceEvaluator(square_detector(image_size=64)).run(None, {"images": x})
        >>> best = out[0, :, out[0, 4].argmax()]
        >>> [round(float(v), 3) for v in best]  # centre 16, 28; 16 x 16; the anchor at (12, 28)
        [16.0, 28.0, 16.0, 16.0, 0.625]
    """
    if not isinstance(image_size, int) or image_size < _STRIDE or image_size % _STRIDE:
        raise ValueError(f"image_size: got {image_size!r}, expected a multiple of {_STRIDE}")
    if not isinstance(side, int) or side < 8 or side % 2:
        raise ValueError(f"side: got {side!r}, expected an even int >= 8")
    k, n = 3 * side, image_size // _STRIDE
    pad = k // 2 - _STRIDE // 2  # window j covers [8j + 4 - k/2, 8j + 4 + k/2)
    centres = (np.arange(n, dtype=np.float32) + 0.5) * _STRIDE
    ax = np.broadcast_to(centres[None, :], (n, n)).reshape(1, 1, -1)
    ay = np.broadcast_to(centres[:, None], (n, n)).reshape(1, 1, -1)
    core, ring = float(side * side), float(k * k - side * side)
    inits = {
        "grey_w": np.full((1, 3, 1, 1), 1 / 3, np.float32),
        "half": np.array(0.5, np.float32),
        "two": np.array(2.0, np.float32),
        "one": np.array(1.0, np.float32),
        "twelve": np.array(12.0, np.float32),
        "eps": np.array(1e-6, np.float32),
        "moments_w": _kernels(side),
        "shape": np.array([0, 6, -1], np.int64),
        "split": np.ones(6, np.int64),
        "ax": ax.astype(np.float32),
        "ay": ay.astype(np.float32),
        "core_gain": np.array(1 / core + 4 / ring, np.float32),
        "ring_gain": np.array(4 / ring, np.float32),
    }
    nodes = _nodes(k, pad)
    graph = helper.make_graph(
        nodes,
        "square_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, image_size, image_size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 5, n * n])],
        [numpy_helper.from_array(np.ascontiguousarray(v), name) for name, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="amdinfer.testing")
    model.ir_version = 8
    for key, value in (("names", "{0: 'square'}"), ("stride", "8")):
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    return model


def planted_squares(
    height: int,
    width: int,
    *,
    count: int = 20,
    side: int = SQUARE_SIDE,
    seed: int = 0,
    spacing: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A dark ``(height, width, 3)`` uint8 image with ``count`` white squares of ``side`` pixels: ``(image, boxes)``.

    The background is seeded noise in ``[0, 60]``; the squares are 255, at whole-pixel positions drawn with
    ``np.random.default_rng(seed)``, at least ``spacing`` pixels apart edge to edge (default ``3 * side``, so no
    two share a detector window) and ``side`` from the border. ``boxes`` is ``(count, 4)`` float32 ``x1, y1, x2,
    y2`` with ``x2 = x1 + side`` (exclusive ends: the squares' exact extents).

    Raises:
        ValueError: the squares do not fit (too many for the image).

    Example:
        >>> image, boxes = planted_squares(200, 300, count=2, side=20, seed=1)
        >>> x1, y1, x2, y2 = boxes[0].astype(int)
        >>> int(image[y1:y2, x1:x2].min()), int(image[y1 - 1, x1 - 1].max()) <= 60, int(x2 - x1)
        (255, True, 20)
    """
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 61, (height, width, 3), dtype=np.uint8)
    gap = 3 * side if spacing is None else spacing
    boxes: list[tuple[int, int]] = []
    for _ in range(count * 200):
        if len(boxes) == count:
            break
        x, y = int(rng.integers(side, width - 2 * side)), int(rng.integers(side, height - 2 * side))
        if all(abs(x - bx) >= side + gap or abs(y - by) >= side + gap for bx, by in boxes):
            boxes.append((x, y))
    if len(boxes) < count:
        raise ValueError(f"count: {count} squares of {side} px do not fit in {height}x{width} (placed {len(boxes)})")
    for x, y in boxes:
        image[y : y + side, x : x + side] = 255
    out = np.array([[x, y, x + side, y + side] for x, y in boxes], np.float32).reshape(-1, 4)
    return image, out
