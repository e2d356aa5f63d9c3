"""The segmentation and pose heads of Ultralytics' YOLOv8/11, added to the graph of
:func:`amdinfer.testing.models.yolov8` (``yolov8_seg`` and ``yolov8_pose`` there call these).

Segment: ``Proto`` (3x3 conv, 2x ``ConvTranspose``, 3x3 conv, 1x1 conv, each with SiLU) on the stride-8 features
gives ``output1`` ``(N, nm, H / 4, W / 4)``; a ``cv4`` branch per level (two 3x3 convs, a 1x1 conv) gives ``nm``
mask coefficients per anchor, appended to the detection rows of ``output0``. Pose: a ``cv4`` branch per level gives
``K * 3`` raw keypoint values per anchor, decoded in the graph as Ultralytics' ``kpts_decode``
(``x = (2 * raw + anchor - 0.5) * stride``, the same for ``y``, the visibility through Sigmoid).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["add_pose_head", "add_seg_head"]

_FEATURES = ("model.15.cv2.act", "model.18.cv2.act", "model.21.cv2.act")  # P3, N4, N5 of yolov8()
_STRIDES = (8, 16, 32)
_M2 = 4.25  # second moment of a SiLU output of the backbone's convolutions (models._SILU_M2)


class _Head:
    def __init__(self, model: onnx.ModelProto, seed: int) -> None:
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.channels = _feature_channels(model)

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, name: str, *, act: bool = True, std: float = 3.0) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) * std / math.sqrt(cin * k * k * _M2)
        b = 0.05 * self.rng.standard_normal(cout)
        attrs = {"kernel_shape": [k, k], "pads": [k // 2] * 4, "strides": [1, 1]}
        y = self.node(
            "Conv",
            [x, self.init(f"{name}.weight", w.astype(np.float32)), self.init(f"{name}.bias", b.astype(np.float32))],
            name,
            **attrs,
        )
        if not act:
            return y
        sig = self.node("Sigmoid", [y], f"{name}.sigmoid")
        return self.node("Mul", [y, sig], f"{name}.act")

    def branch(self, prefix: str, cmid: int, cout: int, std: float) -> str:
        """Two 3x3 convs and a 1x1 conv on each level, flattened and concatenated: ``(N, cout, A)``."""
        flat = []
        for i, feat in enumerate(_FEATURES):
            y = self.conv(feat, self.channels[feat], cmid, 3, f"{prefix}.{i}.0")
            y = self.conv(y, cmid, cmid, 3, f"{prefix}.{i}.1")
            y = self.conv(y, cmid, cout, 1, f"{prefix}.{i}.2", act=False, std=std)
            shape = self.init(f"{prefix}.view_{i}.shape", np.array([0, cout, -1], np.int64))
            flat.append(self.node("Reshape", [y, shape], f"{prefix}.view_{i}"))
        return self.node("Concat", flat, f"{prefix}.cat", axis=2)

    def finish(self, extra: str, outputs: list[onnx.ValueInfoProto], meta: dict[str, str]) -> onnx.ModelProto:
        g = self.model.graph
        last = next(n for n in g.node if "output0" in n.output)
        last.output[list(last.output).index("output0")] = "model.22.detections"
        self.nodes.append(
            helper.make_node("Concat", ["model.22.detections", extra], ["output0"], name="output0", axis=1)
        )
        g.node.extend(self.nodes)
        g.initializer.extend(self.inits)
        del g.output[:]
        g.output.extend(outputs)
        for key, value in meta.items():
            self.model.metadata_props.add(key=key, value=value)
        return self.model


def _feature_channels(model: onnx.ModelProto) -> dict[str, int]:
    """Output channels of the feature maps: those of the conv whose SiLU makes each."""
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    out = {}
    for name in _FEATURES:
        conv = next(n for n in model.graph.node if n.name == name.replace(".act", ".conv"))
        out[name] = int(weights[conv.input[1]][0])
    return out


def _anchors(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    points, strides = [], []
    for s in _STRIDES:
        n = image_size // s
        sy, sx = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        points.append(np.stack([sx.ravel(), sy.ravel()], 0))
        strides.append(np.full(n * n, s))
    return np.concatenate(points, 1).astype(np.float32), np.concatenate(strides).astype(np.float32)


def _meta(task: str, image_size: int, names: dict[int, str]) -> dict[str, str]:
    return {
        "task": task,
        "stride": "32",
        "batch": "1",
        "imgsz": f"[{image_size}, {image_size}]",
        "names": repr(names),
        "channels": "3",
    }


def add_seg_head(
    model: onnx.ModelProto, seed: int, num_classes: int, image_size: int, num_masks: int
) -> onnx.ModelProto:
    """``model`` (a :func:`~amdinfer.testing.models.yolov8` graph) with Ultralytics' ``Segment`` head."""
    h = _Head(model, seed + 7919)
    p3 = _FEATURES[0]
    c = h.channels[p3]
    y = h.conv(p3, c, c, 3, "model.22.proto.cv1")
    w = h.rng.standard_normal((c, c, 2, 2)) * 1.0 / math.sqrt(c * _M2)
    up = h.node(
        "ConvTranspose",
        [
            y,
            h.init("model.22.proto.upsample.weight", w.astype(np.float32)),
            h.init("model.22.proto.upsample.bias", np.zeros(c, np.float32)),
        ],
        "model.22.proto.upsample",
        kernel_shape=[2, 2],
        strides=[2, 2],
    )
    y = h.conv(up, c, c, 3, "model.22.proto.cv2", std=3.0 * math.sqrt(_M2 / 1.0))
    proto = h.conv(y, c, num_masks, 1, "model.22.proto.cv3")
    h.nodes.append(helper.make_node("Identity", [proto], ["output1"], name="output1"))
    coef = h.branch("model.22.cv4", max(c // 4, num_masks), num_masks, std=1.0)
    a = sum((image_size // s) ** 2 for s in _STRIDES)
    q = image_size // 4
    outputs = [
        helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + num_classes + num_masks, a]),
        helper.make_tensor_value_info("output1", TensorProto.FLOAT, ["N", num_masks, q, q]),
    ]
    names = {i: f"class{i}" for i in range(num_classes)}
    return h.finish(coef, outputs, _meta("segment", image_size, names))


def add_pose_head(
    model: onnx.ModelProto, seed: int, num_classes: int, image_size: int, kpt_shape: tuple[int, int]
) -> onnx.ModelProto:
    """``model`` (a :func:`~amdinfer.testing.models.yolov8` graph) with Ultralytics' ``Pose`` head."""
    h = _Head(model, seed + 104729)
    k, d = kpt_shape
    c = h.channels[_FEATURES[0]]
    raw = h.branch("model.22.cv4", max(c // 4, k * d), k * d, std=1.0)
    anchors, strides = _anchors(image_size)
    shape = h.init("model.22.kpts.shape", np.array([0, k, d, -1], np.int64))
    y = h.node("Reshape", [raw, shape], "model.22.kpts.view")
    sizes = h.init("model.22.kpts.split", np.array([2, d - 2] if d == 3 else [2], np.int64))
    parts = ["model.22.kpts.xy", "model.22.kpts.v"][: 1 + (d == 3)]
    h.nodes.append(helper.make_node("Split", [y, sizes], parts, name="model.22.kpts.split_xyv", axis=2))
    two = h.init("model.22.kpts.two", np.array(2.0, np.float32))
    grid = h.init("model.22.kpts.grid", (anchors - 0.5)[None, None])  # (1, 1, 2, A)
    stride = h.init("model.22.kpts.stride", strides[None, None, None])  # (1, 1, 1, A)
    xy = h.node("Mul", [parts[0], two], "model.22.kpts.xy2")
    xy = h.node("Add", [xy, grid], "model.22.kpts.xy_grid")
    xy = h.node("Mul", [xy, stride], "model.22.kpts.xy_pixels")
    if d == 3:
        v = h.node("Sigmoid", [parts[1]], "model.22.kpts.v_sigmoid")
        xy = h.node("Concat", [xy, v], "model.22.kpts.xyv", axis=2)
    flat = h.init("model.22.kpts.flat", np.array([0, k * d, -1], np.int64))
    kpts = h.node("Reshape", [xy, flat], "model.22.kpts")
    a = anchors.shape[1]
    outputs = [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 4 + num_classes + k * d, a])]
    names = {0: "person"} if num_classes == 1 else {i: f"class{i}" for i in range(num_classes)}
    meta = {**_meta("pose", image_size, names), "kpt_shape": f"[{k}, {d}]"}
    return h.finish(kpts, outputs, meta)
