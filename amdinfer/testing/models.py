"""Offline builders for real-architecture ONNX test models with seeded random weights.

Every builder returns an :class:`onnx.ModelProto` (default ``ai.onnx`` opset 17) built with
``onnx.helper`` alone: nothing is downloaded and no framework is needed. Weights come from
``np.random.default_rng(seed)`` and are scaled (He-normal convolutions, near-identity batch norm, and for
the SiLU detectors a gain tracked through the graph) so that activations stay of order one through the deep
networks and the outputs are finite and plausible. The same seed and options always give the same
serialized bytes. Inputs and outputs have a symbolic batch dimension named ``"N"``.

Example:
    >>> from amdinfer.testing import models
    >>> model = models.tiny_cnn(seed=1)
    >>> feeds = models.random_inputs(model, batch=2)
    >>> feeds["input"].shape
    (2, 3, 32, 32)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "OPSET",
    "batch_dynamic",
    "random_inputs",
    "resnet50",
    "tiny_cnn",
    "transformer_encoder",
    "unet",
    "yolov5",
    "yolov8",
    "yolov8_pose",
    "yolov8_seg",
]

OPSET = 17
"""The ``ai.onnx`` opset of every built model (``LayerNormalization`` needs 17)."""

_BATCH = "N"
_BN_EPS = 1e-5
_DEFAULT_DIM = 16


# --------------------------------------------------------------------------------------------------------
# Graph construction helpers
# --------------------------------------------------------------------------------------------------------


class _Graph:
    """Collects nodes and initializers; a node's output tensor is named after the node by default."""

    def __init__(self, seed: int) -> None:
        _check_int("seed", seed, minimum=0)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._node_names: set[str] = set()
        self._tensor_names: set[str] = set()

    def init(self, name: str, array: np.ndarray) -> str:
        if name in self._tensor_names:
            raise AssertionError(f"duplicate initializer {name!r}")
        self._tensor_names.add(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, name: str, values: Sequence[float] | Sequence[int] | np.ndarray, dtype: Any) -> str:
        return self.init(name, np.asarray(values, dtype=dtype))

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        name: str,
        *,
        outputs: Sequence[str] | None = None,
        **attrs: Any,
    ) -> str:
        if name in self._node_names:
            raise AssertionError(f"duplicate node name {name!r}")
        self._node_names.add(name)
        outs = list(outputs) if outputs is not None else [name]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0]

    def model(
        self,
        name: str,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
        doc: str,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, list(inputs), list(outputs), initializer=self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="amdinfer.testing.models",
            doc_string=doc,
        )
        return model

    # --- weight initializers ------------------------------------------------------------------------

    def he_normal(self, shape: tuple[int, ...], fan_in: int, gain: float = 2.0) -> np.ndarray:
        std = math.sqrt(gain / fan_in)
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def batchnorm(self, channels: int, gamma_scale: float = 1.0) -> dict[str, np.ndarray]:
        """Eval-mode batch-norm parameters close to identity (gamma ~ 1, beta ~ 0, mean ~ 0, var ~ 1)."""
        rng = self.rng
        return {
            "weight": (gamma_scale * (1.0 + 0.1 * rng.standard_normal(channels))).astype(np.float32),
            "bias": (0.05 * rng.standard_normal(channels)).astype(np.float32),
            "running_mean": (0.05 * rng.standard_normal(channels)).astype(np.float32),
            "running_var": rng.uniform(0.8, 1.25, channels).astype(np.float32),
        }


def _fold_bn(
    weight: np.ndarray, bias: np.ndarray | None, bn: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Folds eval-mode batch norm into the preceding convolution, as torch.onnx constant folding does."""
    scale = bn["weight"].astype(np.float64) / np.sqrt(bn["running_var"].astype(np.float64) + _BN_EPS)
    conv_bias = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64)
    new_weight = weight.astype(np.float64) * scale[:, None, None, None]
    new_bias = (conv_bias - bn["running_mean"]) * scale + bn["bias"]
    return new_weight.astype(np.float32), new_bias.astype(np.float32)


def _conv_attrs(kernel: int, stride: int, pad: int, groups: int = 1) -> dict[str, Any]:
    return {
        "dilations": [1, 1],
        "group": groups,
        "kernel_shape": [kernel, kernel],
        "pads": [pad, pad, pad, pad],
        "strides": [stride, stride],
    }


def _check_int(name: str, value: object, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: got {type(value).__name__} {value!r}, expected int")
    if value < minimum:
        raise ValueError(f"{name}: got {value}, expected an int >= {minimum}")


def _check_positive_float(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: got {type(value).__name__} {value!r}, expected float")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: got {value}, expected a finite float > 0")


def _image_input(name: str, channels: int, image_size: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [_BATCH, channels, image_size, image_size])


# --------------------------------------------------------------------------------------------------------
# Tiny CNN
# --------------------------------------------------------------------------------------------------------


def tiny_cnn(seed: int = 0, *, image_size: int = 32, channels: int = 3, num_classes: int = 10) -> onnx.ModelProto:
    """Builds a two-convolution classifier, small enough for any backend and the reference evaluator.

    Graph: Conv 3x3 (16) + Relu, MaxPool 2x2, Conv 3x3 (32) + Relu, GlobalAveragePool, Flatten, Gemm.

    Args:
        seed: Seed of the weight generator.
        image_size: Height and width of the input (at least 2).
        channels: Number of input channels.
        num_classes: Number of output logits.

    Returns:
        A model with input ``"input"`` of shape ``(N, channels, image_size, image_size)`` and output
        ``"logits"`` of shape ``(N, num_classes)``, both float32.

    Raises:
        TypeError: An option is not an int.
        ValueError: An option is out of range.

    Example:
        >>> model = tiny_cnn(seed=0, num_classes=5)
        >>> [o.name for o in model.graph.output]
        ['logits']
    """
    _check_int("image_size", image_size, minimum=2)
    _check_int("channels", channels)
    _check_int("num_classes", num_classes)
    g = _Graph(seed)
    widths = (16, 32)

    w1 = g.init("conv1.weight", g.he_normal((widths[0], channels, 3, 3), channels * 9))
    b1 = g.init("conv1.bias", (0.01 * g.rng.standard_normal(widths[0])).astype(np.float32))
    x = g.node("Conv", ["input", w1, b1], "conv1", **_conv_attrs(3, 1, 1))
    x = g.node("Relu", [x], "relu1")
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    w2 = g.init("conv2.weight", g.he_normal((widths[1], widths[0], 3, 3), widths[0] * 9))
    b2 = g.init("conv2.bias", (0.01 * g.rng.standard_normal(widths[1])).astype(np.float32))
    x = g.node("Conv", [x, w2, b2], "conv2", **_conv_attrs(3, 1, 1))
    x = g.node("Relu", [x], "relu2")
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    wf = g.init("fc.weight", g.he_normal((num_classes, widths[1]), widths[1], gain=1.0))
    bf = g.init("fc.bias", np.zeros(num_classes, np.float32))
    g.node("Gemm", [x, wf, bf], "fc", outputs=["logits"], alpha=1.0, beta=1.0, transB=1)

    return g.model(
        "tiny_cnn",
        [_image_input("input", channels, image_size)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_BATCH, num_classes])],
        f"tiny_cnn(seed={seed}, image_size={image_size}, channels={channels}, num_classes={num_classes})",
    )


# --------------------------------------------------------------------------------------------------------
# ResNet-50
# --------------------------------------------------------------------------------------------------------


class _ResNetBuilder:
    def __init__(self, g: _Graph, batchnorm: bool) -> None:
        self.g = g
        self.batchnorm = batchnorm

    def conv_bn(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        stride: int,
        conv_name: str,
        bn_name: str,
        *,
        gamma_scale: float = 1.0,
    ) -> str:
        g = self.g
        weight = g.he_normal((cout, cin, kernel, kernel), cin * kernel * kernel)
        bn = g.batchnorm(cout, gamma_scale)
        attrs = _conv_attrs(kernel, stride, (kernel - 1) // 2)
        if self.batchnorm:
            w = g.init(f"{conv_name}.weight", weight)
            y = g.node("Conv", [x, w], conv_name, **attrs)
            params = [g.init(f"{bn_name}.{key}", bn[key]) for key in _BN_KEYS]
            return g.node("BatchNormalization", [y, *params], bn_name, epsilon=_BN_EPS, momentum=0.9)
        folded_w, folded_b = _fold_bn(weight, None, bn)
        w = g.init(f"{conv_name}.weight", folded_w)
        b = g.init(f"{conv_name}.bias", folded_b)
        return g.node("Conv", [x, w, b], conv_name, **attrs)

    def bottleneck(self, x: str, prefix: str, cin: int, width: int, stride: int) -> str:
        g = self.g
        cout = width * 4
        y = self.conv_bn(x, cin, width, 1, 1, f"{prefix}.conv1", f"{prefix}.bn1")
        y = g.node("Relu", [y], f"{prefix}.relu")
        y = self.conv_bn(y, width, width, 3, stride, f"{prefix}.conv2", f"{prefix}.bn2")
        y = g.node("Relu", [y], f"{prefix}.relu_1")
        # A small last gamma keeps the residual stream from doubling its variance in every block.
        y = self.conv_bn(y, width, cout, 1, 1, f"{prefix}.conv3", f"{prefix}.bn3", gamma_scale=_RESNET_LAST_GAMMA)
        if stride != 1 or cin != cout:
            x = self.conv_bn(x, cin, cout, 1, stride, f"{prefix}.downsample.0", f"{prefix}.downsample.1")
        y = g.node("Add", [y, x], f"{prefix}.add")
        return g.node("Relu", [y], f"{prefix}.relu_2")


_BN_KEYS = ("weight", "bias", "running_mean", "running_var")
_RESNET_LAST_GAMMA = 0.3
_RESNET_LAYERS = (3, 4, 6, 3)
_RESNET_WIDTHS = (64, 128, 256, 512)


def resnet50(
    seed: int = 0, *, num_classes: int = 1000, image_size: int = 224, batchnorm: bool = True
) -> onnx.ModelProto:
    """Builds the torchvision ResNet-50 v1.5 graph with seeded random weights.

    Layers ``[3, 4, 6, 3]`` of bottlenecks (1x1, 3x3 with the stride, 1x1 expanding by 4), a 1x1
    convolution + batch norm downsample on the first block of each stage, a 7x7 stride-2 stem, max pool
    3x3 stride 2, global average pool and a fully connected layer. Node and initializer names follow the
    torchvision module paths (``"layer1.0.conv1"``, ``"layer1.0.conv1.weight"``, ``"fc.bias"``). At 224
    it has 25,557,032 parameters (convolutions, batch-norm scale and shift, fc) and about 4.09 GMACs.

    Args:
        seed: Seed of the weight generator.
        num_classes: Number of output logits.
        image_size: Height and width of the input (at least 32).
        batchnorm: Keep explicit ``BatchNormalization`` nodes, as an unfused export does. ``False`` folds
            them into convolution weights and biases, as ``torch.onnx`` with constant folding does; with
            the same seed both variants compute the same function.

    Returns:
        A model with input ``"input"`` of shape ``(N, 3, image_size, image_size)`` and output
        ``"logits"`` of shape ``(N, num_classes)``, both float32.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range.

    Example:
        >>> model = resnet50(num_classes=10, image_size=64)
        >>> ops = [n.op_type for n in model.graph.node]
        >>> ops.count("Conv"), ops.count("BatchNormalization"), ops.count("Add")
        (53, 53, 16)
    """
    _check_int("num_classes", num_classes)
    _check_int("image_size", image_size, minimum=32)
    if not isinstance(batchnorm, bool):
        raise TypeError(f"batchnorm: got {type(batchnorm).__name__} {batchnorm!r}, expected bool")
    g = _Graph(seed)
    rb = _ResNetBuilder(g, batchnorm)

    x = rb.conv_bn("input", 3, 64, 7, 2, "conv1", "bn1")
    x = g.node("Relu", [x], "relu")
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], ceil_mode=0)
    cin = 64
    for stage, (blocks, width) in enumerate(zip(_RESNET_LAYERS, _RESNET_WIDTHS, strict=True), 1):
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            x = rb.bottleneck(x, f"layer{stage}.{block}", cin, width, stride)
            cin = width * 4
    x = g.node("GlobalAveragePool", [x], "avgpool")
    x = g.node("Flatten", [x], "flatten", axis=1)
    # torchvision's nn.Linear default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    bound = 1.0 / math.sqrt(cin)
    wf = g.init("fc.weight", g.rng.uniform(-bound, bound, (num_classes, cin)).astype(np.float32))
    bf = g.init("fc.bias", g.rng.uniform(-bound, bound, num_classes).astype(np.float32))
    g.node("Gemm", [x, wf, bf], "fc", outputs=["logits"], alpha=1.0, beta=1.0, transB=1)

    return g.model(
        "resnet50",
        [_image_input("input", 3, image_size)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_BATCH, num_classes])],
        f"resnet50(seed={seed}, num_classes={num_classes}, image_size={image_size}, batchnorm={batchnorm})",
    )


# --------------------------------------------------------------------------------------------------------
# YOLO building blocks (Conv = Conv2d + folded BatchNorm + SiLU, as in an Ultralytics export)
# --------------------------------------------------------------------------------------------------------


class _YoloBuilder:
    """Ultralytics blocks that track each tensor's channels and estimated second moment ``E[x^2]``.

    SiLU networks initialised blindly either fade to their biases or blow up with depth, because
    ``E[SiLU(z)^2] / E[z^2]`` grows with the scale of ``z``. So each convolution scales its He-normal
    weights by the tracked second moment of its input, aiming at pre-activations of standard deviation
    ``_PREACT_STD``: there SiLU is nearly linear for positive inputs, the ratio is nearly flat, and an
    error in the estimate hardly grows from layer to layer. The estimate is analytic, so the weights
    depend on nothing but the seed and the options.
    """

    def __init__(self, g: _Graph, image: str) -> None:
        self.g = g
        self.channels: dict[str, int] = {image: 3}
        self.moment: dict[str, float] = {image: 1.0 / 3.0}  # uniform [0, 1) pixels

    def _out(self, name: str, channels: int, moment: float) -> str:
        self.channels[name] = channels
        self.moment[name] = moment
        return name

    def conv(
        self,
        x: str,
        cout: int,
        kernel: int,
        stride: int,
        name: str,
        *,
        pad: int | None = None,
        gamma_scale: float = 1.0,
    ) -> str:
        g = self.g
        cin = self.channels[x]
        pad = kernel // 2 if pad is None else pad
        gain = _PREACT_STD**2 / self.moment[x]
        weight = g.he_normal((cout, cin, kernel, kernel), cin * kernel * kernel, gain)
        folded_w, folded_b = _fold_bn(weight, None, g.batchnorm(cout, gamma_scale))
        w = g.init(f"{name}.conv.weight", folded_w)
        b = g.init(f"{name}.conv.bias", folded_b)
        y = g.node("Conv", [x, w, b], f"{name}.conv", **_conv_attrs(kernel, stride, pad))
        sig = g.node("Sigmoid", [y], f"{name}.act.sigmoid")
        out = g.node("Mul", [y, sig], f"{name}.act")
        return self._out(out, cout, _SILU_M2[gamma_scale])

    def plain_conv(self, x: str, cout: int, name: str, logit_std: float, bias: np.ndarray) -> str:
        """A 1x1 head convolution whose outputs vary by about ``logit_std`` around ``bias``."""
        g = self.g
        cin = self.channels[x]
        std = logit_std / math.sqrt(cin * self.moment[x])
        weight = std * g.rng.standard_normal((cout, cin, 1, 1))
        w = g.init(f"{name}.weight", weight.astype(np.float32))
        b = g.init(f"{name}.bias", bias.astype(np.float32))
        return g.node("Conv", [x, w, b], name, **_conv_attrs(1, 1, 0))

    def add(self, a: str, b: str, name: str) -> str:
        moment = self.moment[a] + self.moment[b]
        return self._out(self.g.node("Add", [a, b], name), self.channels[a], moment)

    def concat(self, xs: Sequence[str], name: str) -> str:
        chans = [self.channels[x] for x in xs]
        moment = sum(self.moment[x] * c for x, c in zip(xs, chans, strict=True)) / sum(chans)
        return self._out(self.g.node("Concat", list(xs), name, axis=1), sum(chans), moment)

    def bottleneck(self, x: str, cout: int, name: str, *, shortcut: bool, kernels: tuple[int, int]) -> str:
        add = shortcut and self.channels[x] == cout
        y = self.conv(x, cout, kernels[0], 1, f"{name}.cv1")
        # A smaller last gain keeps stacked residuals from doubling the variance each time.
        y = self.conv(y, cout, kernels[1], 1, f"{name}.cv2", gamma_scale=0.5 if add else 1.0)
        return self.add(x, y, f"{name}.add") if add else y

    def c2f(self, x: str, cout: int, n: int, name: str, *, shortcut: bool) -> str:
        g = self.g
        c = int(cout * 0.5)
        y = self.conv(x, 2 * c, 1, 1, f"{name}.cv1")
        split = g.const(f"{name}.split", [c, c], np.int64)
        parts = [self._out(f"{name}.chunk_{i}", c, self.moment[y]) for i in range(2)]
        g.node("Split", [y, split], f"{name}.chunk", outputs=parts, axis=1)
        for i in range(n):
            parts.append(self.bottleneck(parts[-1], c, f"{name}.m.{i}", shortcut=shortcut, kernels=(3, 3)))
        return self.conv(self.concat(parts, f"{name}.cat"), cout, 1, 1, f"{name}.cv2")

    def c3(self, x: str, cout: int, n: int, name: str, *, shortcut: bool) -> str:
        hidden = int(cout * 0.5)
        y = self.conv(x, hidden, 1, 1, f"{name}.cv1")
        for i in range(n):
            y = self.bottleneck(y, hidden, f"{name}.m.{i}", shortcut=shortcut, kernels=(1, 3))
        z = self.conv(x, hidden, 1, 1, f"{name}.cv2")
        return self.conv(self.concat([y, z], f"{name}.cat"), cout, 1, 1, f"{name}.cv3")

    def sppf(self, x: str, cout: int, name: str, k: int = 5) -> str:
        hidden = self.channels[x] // 2
        parts = [self.conv(x, hidden, 1, 1, f"{name}.cv1")]
        for i in range(3):
            y = self.g.node(
                "MaxPool",
                [parts[-1]],
                f"{name}.m" if i == 0 else f"{name}.m_{i}",
                kernel_shape=[k, k],
                pads=[k // 2] * 4,
                strides=[1, 1],
                ceil_mode=0,
            )
            parts.append(self._out(y, hidden, self.moment[parts[-1]] * _MAXPOOL_GROWTH[i]))
        return self.conv(self.concat(parts, f"{name}.cat"), cout, 1, 1, f"{name}.cv2")

    def upsample(self, x: str, name: str) -> str:
        scales = self.g.const(f"{name}.scales", [1.0, 1.0, 2.0, 2.0], np.float32)
        y = self.g.node(
            "Resize",
            [x, "", scales],
            name,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
            cubic_coeff_a=-0.75,
        )
        return self._out(y, self.channels[x], self.moment[x])


_PREACT_STD = 3.0
# E[SiLU(z)^2] for z ~ N(0, (_PREACT_STD * gamma_scale)^2), by gamma_scale.
_SILU_M2 = {1.0: 4.2478, 0.5: 0.9152}
# Growth of E[x^2] through each of SPPF's three chained 5x5 max pools (measured on these features).
_MAXPOOL_GROWTH = (1.8, 1.15, 1.07)


def _make_divisible(x: float, divisor: int = 8) -> int:
    return int(math.ceil(x / divisor) * divisor)


def _yolo_scaling(width: float, depth: float, max_channels: int = 1024) -> tuple[Any, Any]:
    def ch(c: int) -> int:
        return _make_divisible(min(c, max_channels) * width, 8)

    def n(k: int) -> int:
        return max(round(k * depth), 1)

    return ch, n


def _check_yolo_options(num_classes: int, image_size: int, width: float, depth: float) -> None:
    _check_int("num_classes", num_classes)
    _check_int("image_size", image_size, minimum=32)
    if image_size % 32:
        raise ValueError(f"image_size: got {image_size}, expected a multiple of 32 (the largest stride)")
    _check_positive_float("width", width)
    _check_positive_float("depth", depth)


_STRIDES = (8, 16, 32)


def _yolo_backbone(yb: _YoloBuilder, ch: Any, n: Any, *, v8: bool) -> list[str]:
    """Returns the outputs of layers 0..9 of the Ultralytics yaml."""
    if v8:
        outs = [yb.conv("images", ch(64), 3, 2, "model.0")]
    else:
        outs = [yb.conv("images", ch(64), 6, 2, "model.0", pad=2)]
    block = yb.c2f if v8 else yb.c3
    for i, (c, k) in enumerate([(128, 3), (256, 6), (512, 6 if v8 else 9), (1024, 3)]):
        outs.append(yb.conv(outs[-1], ch(c), 3, 2, f"model.{1 + 2 * i}"))
        outs.append(block(outs[-1], ch(c), n(k), f"model.{2 + 2 * i}", shortcut=True))
    outs.append(yb.sppf(outs[-1], ch(1024), "model.9"))
    return outs


def _anchor_grid(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Anchor centres (2, A) in grid units and strides (1, A), as Ultralytics ``make_anchors``."""
    points, strides = [], []
    for s in _STRIDES:
        h = w = image_size // s
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        points.append(np.stack([sx.ravel(), sy.ravel()], 0))
        strides.append(np.full(h * w, s))
    return (
        np.concatenate(points, 1).astype(np.float32),
        np.concatenate(strides)[None].astype(np.float32),
    )


def yolov8(
    seed: int = 0,
    *,
    num_classes: int = 80,
    image_size: int = 640,
    width: float = 0.25,
    depth: float = 0.33,
) -> onnx.ModelProto:
    """Builds a YOLOv8-style detector (yolov8n at the defaults) with the Ultralytics export layout.

    Backbone of Conv (Conv2d with folded batch norm, SiLU) and C2f blocks with SPPF, an FPN/PAN neck with
    nearest ``Resize`` (scale 2, ``asymmetric``/``floor``, as PyTorch exports ``nn.Upsample``), and the
    anchor-free Detect head at strides 8/16/32: a box branch of ``4 * 16`` distribution bins decoded by
    DFL (softmax over the bins, 1x1 conv with ``arange(16)``) and ``dist2bbox`` into centre-x, centre-y,
    width, height in input pixels, and a class branch through Sigmoid. Random weights give boxes of a
    plausible size (a few strides wide, centred near their anchor) and sparse class scores.

    Args:
        seed: Seed of the weight generator.
        num_classes: Number of classes.
        image_size: Height and width of the square input, a multiple of 32.
        width: Channel multiplier (0.25 for n, 0.5 for s, ...).
        depth: Block-count multiplier (0.33 for n and s, ...).

    Returns:
        A model with input ``"images"`` of shape ``(N, 3, image_size, image_size)`` and output
        ``"output0"`` of shape ``(N, 4 + num_classes, A)`` with
        ``A = sum((image_size // s) ** 2 for s in (8, 16, 32))`` (8400 at 640); rows are
        ``x, y, w, h`` then the class scores.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range.

    Example:
        >>> model = yolov8(image_size=160)
        >>> [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
        ['N', 84, 525]
    """
    _check_yolo_options(num_classes, image_size, width, depth)
    g = _Graph(seed)
    yb = _YoloBuilder(g, "images")
    ch, n = _yolo_scaling(width, depth)
    reg_max = 16

    outs = _yolo_backbone(yb, ch, n, v8=True)
    x = yb.concat([yb.upsample(outs[9], "model.10"), outs[6]], "model.11")
    p4 = yb.c2f(x, ch(512), n(3), "model.12", shortcut=False)
    x = yb.concat([yb.upsample(p4, "model.13"), outs[4]], "model.14")
    p3 = yb.c2f(x, ch(256), n(3), "model.15", shortcut=False)
    x = yb.concat([yb.conv(p3, ch(256), 3, 2, "model.16"), p4], "model.17")
    n4 = yb.c2f(x, ch(512), n(3), "model.18", shortcut=False)
    x = yb.concat([yb.conv(n4, ch(512), 3, 2, "model.19"), outs[9]], "model.20")
    n5 = yb.c2f(x, ch(1024), n(3), "model.21", shortcut=False)

    c2 = max(16, ch(256) // 4, reg_max * 4)
    c3 = max(ch(256), min(num_classes, 100))
    # Decaying bin logits favour short distances: boxes a few strides wide, as objects at that level.
    box_bias = np.tile(-_DFL_BIN_DECAY * np.arange(reg_max), 4)
    flat = []
    for i, feat in enumerate((p3, n4, n5)):
        p = f"model.22.cv2.{i}"
        box = yb.conv(feat, c2, 3, 1, f"{p}.0")
        box = yb.conv(box, c2, 3, 1, f"{p}.1")
        box = yb.plain_conv(box, 4 * reg_max, f"{p}.2", 1.0, box_bias)
        p = f"model.22.cv3.{i}"
        cls = yb.conv(feat, c3, 3, 1, f"{p}.0")
        cls = yb.conv(cls, c3, 3, 1, f"{p}.1")
        # Biased low so that, as in a real model, only a few scores pass a 0.25 threshold.
        cls = yb.plain_conv(cls, num_classes, f"{p}.2", 1.0, np.full(num_classes, _YOLOV8_CLS_BIAS))
        y = g.node("Concat", [box, cls], f"model.22.cat_{i}", axis=1)
        shape = g.const(f"model.22.view_{i}.shape", [0, 4 * reg_max + num_classes, -1], np.int64)
        flat.append(g.node("Reshape", [y, shape], f"model.22.view_{i}"))
    x = g.node("Concat", flat, "model.22.cat", axis=2)
    split = g.const("model.22.split", [4 * reg_max, num_classes], np.int64)
    box, cls = "model.22.box", "model.22.cls"
    g.node("Split", [x, split], "model.22.split_box_cls", outputs=[box, cls], axis=1)

    # DFL: (N, 64, A) -> (N, 4, 16, A) -> (N, 16, 4, A) -> softmax over bins -> expectation -> (N, 4, A).
    shape = g.const("model.22.dfl.view.shape", [0, 4, reg_max, -1], np.int64)
    y = g.node("Reshape", [box, shape], "model.22.dfl.view")
    y = g.node("Transpose", [y], "model.22.dfl.transpose", perm=[0, 2, 1, 3])
    y = g.node("Softmax", [y], "model.22.dfl.softmax", axis=1)
    w = g.const("model.22.dfl.conv.weight", np.arange(reg_max).reshape(1, reg_max, 1, 1), np.float32)
    y = g.node("Conv", [y, w], "model.22.dfl.conv", **_conv_attrs(1, 1, 0))
    shape = g.const("model.22.dfl.view_1.shape", [0, 4, -1], np.int64)
    dist = g.node("Reshape", [y, shape], "model.22.dfl.view_1")

    # dist2bbox(xywh=True) * strides
    anchors, strides = _anchor_grid(image_size)
    anchor_points = g.init("model.22.anchors", anchors)
    stride_row = g.init("model.22.strides", strides)
    split = g.const("model.22.dist.split", [2, 2], np.int64)
    lt, rb = "model.22.lt", "model.22.rb"
    g.node("Split", [dist, split], "model.22.dist.chunk", outputs=[lt, rb], axis=1)
    x1y1 = g.node("Sub", [anchor_points, lt], "model.22.x1y1")
    x2y2 = g.node("Add", [anchor_points, rb], "model.22.x2y2")
    c_xy = g.node("Add", [x1y1, x2y2], "model.22.cxy_sum")
    half = g.const("model.22.half", 0.5, np.float32)  # type: ignore[arg-type]
    c_xy = g.node("Mul", [c_xy, half], "model.22.cxy")
    wh = g.node("Sub", [x2y2, x1y1], "model.22.wh")
    dbox = g.node("Concat", [c_xy, wh], "model.22.dbox", axis=1)
    dbox = g.node("Mul", [dbox, stride_row], "model.22.dbox_pixels")
    scores = g.node("Sigmoid", [cls], "model.22.cls_sigmoid")
    g.node("Concat", [dbox, scores], "model.22.output", outputs=["output0"], axis=1)

    num_anchors = anchors.shape[1]
    return g.model(
        "yolov8",
        [_image_input("images", 3, image_size)],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [_BATCH, 4 + num_classes, num_anchors])],
        f"yolov8(seed={seed}, num_classes={num_classes}, image_size={image_size}, width={width}, depth={depth})",
    )


_YOLOV8_CLS_BIAS = -4.0
_DFL_BIN_DECAY = 0.25

_YOLOV5_ANCHORS = (
    ((10, 13), (16, 30), (33, 23)),
    ((30, 61), (62, 45), (59, 119)),
    ((116, 90), (156, 198), (373, 326)),
)


def yolov5(
    seed: int = 0,
    *,
    num_classes: int = 80,
    image_size: int = 640,
    width: float = 0.25,
    depth: float = 0.33,
) -> onnx.ModelProto:
    """Builds a YOLOv5-style detector (yolov5n v6+ at the defaults) with the export layout of ``detect``.

    Backbone of Conv (folded batch norm, SiLU) with a 6x6 stem, C3 blocks and SPPF; PAN neck with nearest
    ``Resize``; anchor-based Detect head at strides 8/16/32 with the real yolov5 anchors, decoded in the
    graph: ``xy = (2 * sigmoid - 0.5 + grid) * stride`` and ``wh = (2 * sigmoid) ** 2 * anchor``, then
    objectness and class scores through Sigmoid.

    Args:
        seed: Seed of the weight generator.
        num_classes: Number of classes.
        image_size: Height and width of the square input, a multiple of 32.
        width: Channel multiplier (0.25 for n, 0.5 for s, ...).
        depth: Block-count multiplier (0.33 for n and s, ...).

    Returns:
        A model with input ``"images"`` of shape ``(N, 3, image_size, image_size)`` and output
        ``"output0"`` of shape ``(N, 3 * A, 5 + num_classes)`` with
        ``A = sum((image_size // s) ** 2 for s in (8, 16, 32))`` (25200 rows at 640); columns are
        ``x, y, w, h`` in input pixels, objectness, then the class scores. Rows go stride by stride,
        anchor by anchor, then row-major over the grid.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range.

    Example:
        >>> model = yolov5(image_size=160, num_classes=3)
        >>> [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
        ['N', 1575, 8]
    """
    _check_yolo_options(num_classes, image_size, width, depth)
    g = _Graph(seed)
    yb = _YoloBuilder(g, "images")
    ch, n = _yolo_scaling(width, depth, max_channels=1 << 30)

    outs = _yolo_backbone(yb, ch, n, v8=False)
    h10 = yb.conv(outs[9], ch(512), 1, 1, "model.10")
    x = yb.concat([yb.upsample(h10, "model.11"), outs[6]], "model.12")
    x = yb.c3(x, ch(512), n(3), "model.13", shortcut=False)
    h14 = yb.conv(x, ch(256), 1, 1, "model.14")
    x = yb.concat([yb.upsample(h14, "model.15"), outs[4]], "model.16")
    p3 = yb.c3(x, ch(256), n(3), "model.17", shortcut=False)
    x = yb.concat([yb.conv(p3, ch(256), 3, 2, "model.18"), h14], "model.19")
    p4 = yb.c3(x, ch(512), n(3), "model.20", shortcut=False)
    x = yb.concat([yb.conv(p4, ch(512), 3, 2, "model.21"), h10], "model.22")
    p5 = yb.c3(x, ch(1024), n(3), "model.23", shortcut=False)

    na, no = 3, 5 + num_classes
    rows = []
    for i, (feat, stride) in enumerate(zip((p3, p4, p5), _STRIDES, strict=True)):
        p = f"model.24.m.{i}"
        # yolov5's Detect._initialize_biases sets objectness to log(8 / cells) and classes to
        # log(0.6 / (nc - 1)); both are raised here so that random weights still give a few
        # confident rows for post-processing to work on.
        bias = np.zeros((na, no))
        bias[:, 4] = math.log(8.0 / (640 / stride) ** 2) + _YOLOV5_OBJ_SHIFT
        bias[:, 5:] = _YOLOV5_CLS_BIAS
        y = yb.plain_conv(feat, na * no, p, _YOLOV5_LOGIT_STD, bias.ravel())
        ny = nx = image_size // stride
        shape = g.const(f"{p}.view.shape", [0, na, no, ny, nx], np.int64)
        y = g.node("Reshape", [y, shape], f"{p}.view")
        y = g.node("Transpose", [y], f"{p}.permute", perm=[0, 1, 3, 4, 2])
        y = g.node("Sigmoid", [y], f"{p}.sigmoid")
        split = g.const(f"{p}.split", [2, 2, num_classes + 1], np.int64)
        xy, wh, conf = f"{p}.xy_raw", f"{p}.wh_raw", f"{p}.conf"
        g.node("Split", [y, split], f"{p}.split_xywh", outputs=[xy, wh, conf], axis=4)
        yv, xv = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
        grid = np.stack([xv, yv], -1)[None, None] - 0.5  # (1, 1, ny, nx, 2)
        two = g.const(f"{p}.two", 2.0, np.float32)  # type: ignore[arg-type]
        xy = g.node("Mul", [xy, two], f"{p}.xy_mul")
        xy = g.node("Add", [xy, g.const(f"{p}.grid", grid, np.float32)], f"{p}.xy_grid")
        xy = g.node("Mul", [xy, g.const(f"{p}.stride", float(stride), np.float32)], f"{p}.xy")  # type: ignore[arg-type]
        wh = g.node("Mul", [wh, two], f"{p}.wh_mul")
        wh = g.node("Pow", [wh, two], f"{p}.wh_pow")
        anchor_grid = np.asarray(_YOLOV5_ANCHORS[i], np.float32).reshape(1, na, 1, 1, 2)
        wh = g.node("Mul", [wh, g.const(f"{p}.anchor_grid", anchor_grid, np.float32)], f"{p}.wh")
        y = g.node("Concat", [xy, wh, conf], f"{p}.cat", axis=4)
        shape = g.const(f"{p}.rows.shape", [0, na * ny * nx, no], np.int64)
        rows.append(g.node("Reshape", [y, shape], f"{p}.rows"))
    g.node("Concat", rows, "model.24.cat", outputs=["output0"], axis=1)

    total = na * sum((image_size // s) ** 2 for s in _STRIDES)
    return g.model(
        "yolov5",
        [_image_input("images", 3, image_size)],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [_BATCH, total, no])],
        f"yolov5(seed={seed}, num_classes={num_classes}, image_size={image_size}, width={width}, depth={depth})",
    )


_YOLOV5_OBJ_SHIFT = 3.0
_YOLOV5_CLS_BIAS = -3.0
# The tracked feature moments underestimate the deep yolov5 features, so aim low.
_YOLOV5_LOGIT_STD = 0.5


# --------------------------------------------------------------------------------------------------------
# Transformer encoder
# --------------------------------------------------------------------------------------------------------


def transformer_encoder(
    seed: int = 0,
    *,
    d_model: int = 64,
    num_heads: int = 4,
    ffn_dim: int = 256,
    seq_len: int | None = None,
    num_layers: int = 1,
) -> onnx.ModelProto:
    """Builds a post-norm transformer encoder (BERT / ``nn.TransformerEncoderLayer`` layout) from primitives.

    Each layer: Q, K, V projections (MatMul + Add), Reshape/Transpose to heads, ``Q K^T`` scaled by
    ``Div(sqrt(head_dim))``, Softmax, MatMul with V, Transpose/Reshape back, output projection, residual
    Add, ``LayerNormalization``, FFN MatMul + Add, exact Gelu spelled ``0.5 * x * (1 + Erf(x / sqrt(2)))``,
    MatMul + Add, residual Add, ``LayerNormalization``. Projection weights are stored ``(in, out)``.

    Args:
        seed: Seed of the weight generator.
        d_model: Model width; a multiple of ``num_heads``.
        num_heads: Number of attention heads.
        ffn_dim: Hidden width of the feed-forward block.
        seq_len: Fixed sequence length, or ``None`` for a symbolic ``"S"`` dimension.
        num_layers: Number of stacked layers.

    Returns:
        A model with input ``"input"`` and output ``"output"``, both float32 of shape ``(N, S, d_model)``.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range or ``d_model`` is not a multiple of ``num_heads``.

    Example:
        >>> model = transformer_encoder(d_model=32, num_heads=2, seq_len=8)
        >>> [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        ['N', 8, 32]
    """
    _check_int("d_model", d_model)
    _check_int("num_heads", num_heads)
    _check_int("ffn_dim", ffn_dim)
    _check_int("num_layers", num_layers)
    if seq_len is not None:
        _check_int("seq_len", seq_len)
    if d_model % num_heads:
        raise ValueError(f"d_model: got {d_model}, expected a multiple of num_heads={num_heads}")
    g = _Graph(seed)
    rng = g.rng
    head_dim = d_model // num_heads

    def linear(x: str, name: str, fan_in: int, fan_out: int) -> str:
        # Xavier-normal weights keep the projections near unit variance.
        std = math.sqrt(2.0 / (fan_in + fan_out))
        w = g.init(f"{name}.weight", (std * rng.standard_normal((fan_in, fan_out))).astype(np.float32))
        b = g.init(f"{name}.bias", (0.02 * rng.standard_normal(fan_out)).astype(np.float32))
        y = g.node("MatMul", [x, w], f"{name}.matmul")
        return g.node("Add", [y, b], name)

    def layer_norm(x: str, name: str, output: str | None = None) -> str:
        scale = g.init(f"{name}.weight", (1.0 + 0.05 * rng.standard_normal(d_model)).astype(np.float32))
        bias = g.init(f"{name}.bias", (0.02 * rng.standard_normal(d_model)).astype(np.float32))
        outputs = None if output is None else [output]
        return g.node("LayerNormalization", [x, scale, bias], name, outputs=outputs, axis=-1, epsilon=1e-5)

    heads_shape = g.const("heads_shape", [0, 0, num_heads, head_dim], np.int64)
    merge_shape = g.const("merge_shape", [0, 0, d_model], np.int64)
    sqrt_dk = g.const("sqrt_head_dim", math.sqrt(head_dim), np.float32)  # type: ignore[arg-type]
    sqrt2 = g.const("sqrt2", math.sqrt(2.0), np.float32)  # type: ignore[arg-type]
    one = g.const("one", 1.0, np.float32)  # type: ignore[arg-type]
    half = g.const("half", 0.5, np.float32)  # type: ignore[arg-type]

    x = "input"
    for layer in range(num_layers):
        p = f"layers.{layer}"
        a = f"{p}.self_attn"
        heads = {}
        for proj, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            y = linear(x, f"{a}.{proj}_proj", d_model, d_model)
            y = g.node("Reshape", [y, heads_shape], f"{a}.{proj}_heads")
            heads[proj] = g.node("Transpose", [y], f"{a}.{proj}_transpose", perm=perm)
        scores = g.node("MatMul", [heads["q"], heads["k"]], f"{a}.scores")
        scores = g.node("Div", [scores, sqrt_dk], f"{a}.scaled_scores")
        probs = g.node("Softmax", [scores], f"{a}.softmax", axis=-1)
        ctx = g.node("MatMul", [probs, heads["v"]], f"{a}.context")
        ctx = g.node("Transpose", [ctx], f"{a}.context_transpose", perm=[0, 2, 1, 3])
        ctx = g.node("Reshape", [ctx, merge_shape], f"{a}.context_merge")
        attn = linear(ctx, f"{a}.out_proj", d_model, d_model)
        x = g.node("Add", [x, attn], f"{p}.residual1")
        x = layer_norm(x, f"{p}.norm1")

        h = linear(x, f"{p}.linear1", d_model, ffn_dim)
        e = g.node("Div", [h, sqrt2], f"{p}.gelu.div")
        e = g.node("Erf", [e], f"{p}.gelu.erf")
        e = g.node("Add", [e, one], f"{p}.gelu.add")
        e = g.node("Mul", [h, e], f"{p}.gelu.mul")
        h = g.node("Mul", [e, half], f"{p}.gelu")
        h = linear(h, f"{p}.linear2", ffn_dim, d_model)
        x = g.node("Add", [x, h], f"{p}.residual2")
        x = layer_norm(x, f"{p}.norm2", "output" if layer == num_layers - 1 else None)

    seq: str | int = "S" if seq_len is None else seq_len
    return g.model(
        "transformer_encoder",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [_BATCH, seq, d_model])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [_BATCH, seq, d_model])],
        f"transformer_encoder(seed={seed}, d_model={d_model}, num_heads={num_heads}, "
        f"ffn_dim={ffn_dim}, seq_len={seq_len}, num_layers={num_layers})",
    )


# --------------------------------------------------------------------------------------------------------
# Feeds
# --------------------------------------------------------------------------------------------------------

_FLOAT_TYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
}


def random_inputs(
    model: onnx.ModelProto,
    *,
    batch: int = 1,
    seed: int = 0,
    dims: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Makes seeded random feeds for every graph input of ``model``.

    Rank-4 inputs are taken as images and drawn uniform in ``[0, 1)``; other inputs are standard normal.
    A symbolic or unknown first dimension becomes ``batch``; any other symbolic dimension becomes
    ``dims[name]``, or 16 when ``dims`` does not name it.

    Args:
        model: The model whose inputs to feed (initializers listed as inputs are skipped).
        batch: Size of a symbolic first dimension.
        seed: Seed of the generator.
        dims: Sizes of other symbolic dimensions by name, e.g. ``{"S": 128}``.

    Returns:
        A dict from input name to a C-contiguous array of the input's float dtype.

    Raises:
        TypeError: An input is not a tensor, or not of a float type.
        ValueError: ``batch`` or a size in ``dims`` is not a positive int.

    Example:
        >>> feeds = random_inputs(transformer_encoder(), batch=2, dims={"S": 10})
        >>> feeds["input"].shape, feeds["input"].dtype
        ((2, 10, 64), dtype('float32'))
    """
    _check_int("batch", batch)
    _check_int("seed", seed, minimum=0)
    dims = dict(dims or {})
    for key, value in dims.items():
        _check_int(f"dims[{key!r}]", value)
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for value_info in model.graph.input:
        if value_info.name in initializers:
            continue
        if value_info.type.WhichOneof("value") != "tensor_type":
            raise TypeError(
                f"input {value_info.name!r}: got a {value_info.type.WhichOneof('value')}, expected a tensor "
                "(random_inputs makes tensors only; build sequence and optional feeds yourself)"
            )
        tensor_type = value_info.type.tensor_type
        dtype = _FLOAT_TYPES.get(tensor_type.elem_type)
        if dtype is None:
            type_name = TensorProto.DataType.Name(tensor_type.elem_type)
            raise TypeError(
                f"input {value_info.name!r}: got element type {type_name}, expected FLOAT, FLOAT16 or DOUBLE"
            )
        shape = []
        for axis, dim in enumerate(tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            elif axis == 0:
                shape.append(batch)
            else:
                shape.append(dims.get(dim.dim_param, _DEFAULT_DIM))
        if len(shape) == 4:
            data = rng.random(shape, dtype=np.float32)
        else:
            data = rng.standard_normal(shape, dtype=np.float32)
        feeds[value_info.name] = data.astype(dtype, copy=False)
    return feeds


def batch_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a batch-1 export (Ultralytics' default) with a dynamic batch axis ``N``.

    Such exports hold the 1 inside: every ``Reshape`` whose constant shape starts with 1 gets 0 there (copy the
    input's batch), inputs and outputs get ``N`` on axis 0, and the intermediate shapes recorded at batch 1 are
    dropped. The product's rewrite, :func:`amdinfer._support._dynamic_batch.make_batch_dynamic` (what the recipes'
    ``dynamic_batch`` applies after proving it), without the proof; checked against per-image runs on the trained
    YOLOv8n by the tests (tests/pipeline/test_executor.py, tests/pipeline/test_dynamic_batch.py).

    Example:
        >>> m = helper.make_model(helper.make_graph(
        ...     [helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
        ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
        ...     [numpy_helper.from_array(np.array([1, 6], np.int64), "s")]))
        >>> d = batch_dynamic(m)
        >>> d.graph.input[0].type.tensor_type.shape.dim[0].dim_param, numpy_helper.to_array(d.graph.initializer[0])
        ('N', array([0, 6]))
    """
    from .._support._dynamic_batch import make_batch_dynamic

    return make_batch_dynamic(model)


# --------------------------------------------------------------------------------------------------------
# UNet (semantic segmentation, dynamic height and width)
# --------------------------------------------------------------------------------------------------------

#: ``unet``'s classes and the colour rule that decides them: logits ``2 * (A @ rgb + b)`` for ``rgb`` in [0, 1]
UNET_CLASSES = ("dark", "bright", "red", "green", "blue")
_UNET_RULE = np.array([[-2, -2, -2], [2, 2, 2], [2, -1, -1], [-1, 2, -1], [-1, -1, 2]], np.float32) * 2
_UNET_BIAS = np.array([1.5, -4.0, 0.0, 0.0, 0.0], np.float32) * 2
_UNET_OFFSET = 16.0  # keeps the rule's channels above zero through the first Relu (they range over [-12, 12])


def _unet_conv(g: _Graph, x: str, cin: int, cout: int, name: str) -> str:
    w = g.init(f"{name}.weight", g.he_normal((cout, cin, 3, 3), cin * 9))
    b = g.init(f"{name}.bias", (0.01 * g.rng.standard_normal(cout)).astype(np.float32))
    return g.node("Relu", [g.node("Conv", [x, w, b], name, **_conv_attrs(3, 1, 1))], f"{name}.relu")


def unet(
    seed: int = 0, *, depth: int = 2, width: int = 8, context: float = 0.1, image_size: int | None = None
) -> onnx.ModelProto:
    """Builds a UNet-style segmenter with dynamic height and width whose answers are known by hand.

    Graph: an encoder of ``depth`` levels (Conv 3x3 + Relu, MaxPool 2x2), a bottleneck Conv, a decoder
    (Resize nearest x2, Concat with the encoder's skip, Conv 3x3 + Relu) and a 1x1 Conv head over the first
    level's features and the decoder's. Five of the first level's channels hold a colour rule (their centre tap
    only): the head reads them back, so each pixel's logits are ``2 * (A @ rgb + b)`` for the pixel's ``rgb``
    in [0, 1] (:data:`UNET_CLASSES`: dark, bright, red, green, blue; a pure colour wins by a margin of 2 or
    more) plus ``context`` times seeded decoder features, which depend on the neighbourhood (a receptive field
    of ``4 * 2**depth - 3`` pixels each side: 5, 13, 29, 61 for depths 1 to 4) and stay below that margin.
    Height and width must be multiples of the stride ``2**depth`` (metadata ``stride``; the Concat of a skip
    and an upsampled map fails otherwise). Metadata ``names`` (the classes), ``stride`` and ``task`` =
    ``semantic-segmentation`` (not Ultralytics' ``segment``, which names instance segmentation).

    Args:
        seed: Seed of the weight generator.
        depth: Encoder levels (1 to 5); the stride is ``2**depth``.
        width: Channels of the first level (at least 8; doubled per level, up to 64).
        context: Scale of the decoder's share of the logits (0: the colour rule alone).
        image_size: ``None`` (the default): height and width dynamic (``H``, ``W``); an int (a multiple of the
            stride): that fixed size.

    Returns:
        A model with input ``"images"`` ``(N, 3, H, W)`` (values in [0, 1]) and output ``"logits"``
        ``(N, 5, H, W)``, both float32.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range.

    Example:
        >>> import onnx.reference
        >>> m = unet(depth=2)
        >>> x = np.zeros((1, 3, 8, 12), np.float32); x[0, 0, :, 6:] = 1  # black left, red right
        >>> logits = onnx.reference.ReferenceEvaluator(m).run(None, {"images": x})[0]
        >>> logits.shape, logits[0].argmax(0)[0].tolist()
        ((1, 5, 8, 12), [0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2])
    """
    _check_int("depth", depth)
    if depth > 5:
        raise ValueError(f"depth: got {depth}, expected 1 to 5")
    _check_int("width", width, minimum=8)
    if isinstance(context, bool) or not isinstance(context, (int, float)) or not 0 <= context < 1:
        raise ValueError(f"context: got {context!r}, expected a float in [0, 1)")
    if image_size is not None:
        _check_int("image_size", image_size, minimum=2**depth)
        if image_size % 2**depth:
            raise ValueError(f"image_size: got {image_size}, expected a multiple of the stride {2**depth}")
    g = _Graph(seed)
    widths = [min(width * 2**i, 64) for i in range(depth + 1)]
    # level 0: random 3x3 features, the colour rule's channels in front (centre tap, offset to stay positive)
    w0 = g.he_normal((widths[0], 3, 3, 3), 27)
    w0[:5] = 0
    w0[:5, :, 1, 1] = _UNET_RULE
    b0 = (0.01 * g.rng.standard_normal(widths[0])).astype(np.float32)
    b0[:5] = _UNET_BIAS + _UNET_OFFSET
    w0_name, b0_name = g.init("enc0.weight", w0), g.init("enc0.bias", b0)
    conv = g.node("Conv", ["images", w0_name, b0_name], "enc0", **_conv_attrs(3, 1, 1))
    skips = [g.node("Relu", [conv], "enc0.relu")]
    # the rule's large channels feed the rest scaled down, so the decoder's features stay of order one
    damp = np.ones((1, widths[0], 1, 1), np.float32)
    damp[0, :5] = 1 / _UNET_OFFSET
    x = g.node("Mul", [skips[0], g.init("enc0.damp", damp)], "enc0.damped")
    for i in range(1, depth + 1):
        x = g.node("MaxPool", [x], f"pool{i}", kernel_shape=[2, 2], strides=[2, 2])
        x = _unet_conv(g, x, widths[i - 1], widths[i], f"enc{i}")
        skips.append(x)
    scales = g.const("up.scales", [1, 1, 2, 2], np.float32)
    for i in range(depth - 1, -1, -1):
        up = g.node("Resize", [x, "", scales], f"up{i}", mode="nearest")
        cat = g.node("Concat", [up, skips[i] if i else "enc0.damped"], f"cat{i}", axis=1)
        x = _unet_conv(g, cat, widths[i + 1] + widths[i], widths[i], f"dec{i}")
    head = np.zeros((5, 2 * widths[0], 1, 1), np.float32)
    head[:, :5, 0, 0] = np.eye(5)
    head[:, widths[0] :, 0, 0] = context * g.rng.standard_normal((5, widths[0])) / math.sqrt(widths[0])
    bias = np.full(5, -_UNET_OFFSET, np.float32)
    feats = g.node("Concat", [skips[0], x], "head.cat", axis=1)
    g.node("Conv", [feats, g.init("head.weight", head), g.init("head.bias", bias)], "head", outputs=["logits"])
    h, w = ("H", "W") if image_size is None else (image_size, image_size)
    model = g.model(
        "unet",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [_BATCH, 3, h, w])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [_BATCH, 5, h, w])],
        f"unet(seed={seed}, depth={depth}, width={width}, context={context}, image_size={image_size})",
    )
    names = "{" + ", ".join(f"{i}: {n!r}" for i, n in enumerate(UNET_CLASSES)) + "}"
    helper.set_model_props(model, {"names": names, "stride": str(2**depth), "task": "semantic-segmentation"})
    return model


def yolov8_seg(
    seed: int = 0,
    *,
    num_classes: int = 80,
    image_size: int = 640,
    width: float = 0.25,
    depth: float = 0.33,
    num_masks: int = 32,
) -> onnx.ModelProto:
    """Builds a YOLOv8-seg-style instance segmenter (yolov8n-seg at the defaults) with Ultralytics' export layout:
    :func:`yolov8` plus the ``Segment`` head (``amdinfer.testing._yolo_heads``) and the metadata Ultralytics writes
    (``task='segment'``, ``names``, ``stride``, ``imgsz``, ...).

    Returns:
        A model with outputs ``"output0"`` ``(N, 4 + num_classes + num_masks, A)`` (box, class scores, mask
        coefficients) and ``"output1"`` ``(N, num_masks, image_size / 4, image_size / 4)`` (the prototypes).

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range.

    Example:
        >>> model = yolov8_seg(image_size=64, num_classes=2)
        >>> [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]
        [['N', 38, 84], ['N', 32, 16, 16]]
    """
    from ._yolo_heads import add_seg_head

    _check_int("num_masks", num_masks)
    base = yolov8(seed, num_classes=num_classes, image_size=image_size, width=width, depth=depth)
    model = add_seg_head(base, seed, num_classes, image_size, num_masks)
    model.doc_string = f"yolov8_seg(seed={seed}, num_classes={num_classes}, image_size={image_size}, nm={num_masks})"
    return model


def yolov8_pose(
    seed: int = 0,
    *,
    num_classes: int = 1,
    image_size: int = 640,
    width: float = 0.25,
    depth: float = 0.33,
    kpt_shape: tuple[int, int] = (17, 3),
) -> onnx.ModelProto:
    """Builds a YOLOv8-pose-style keypoint detector (yolov8n-pose at the defaults) with Ultralytics' export
    layout: :func:`yolov8` plus the ``Pose`` head, keypoints decoded in the graph, and the metadata Ultralytics
    writes (``task='pose'``, ``kpt_shape``, ``names``, ...).

    Returns:
        A model with output ``"output0"`` ``(N, 4 + num_classes + K * D, A)``: box, class scores, then per
        keypoint ``x, y`` in input pixels and (``D = 3``) the visibility score.

    Raises:
        TypeError: An option has the wrong type.
        ValueError: An option is out of range.

    Example:
        >>> model = yolov8_pose(image_size=64)
        >>> [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
        ['N', 56, 84]
    """
    from ._yolo_heads import add_pose_head

    if not (isinstance(kpt_shape, tuple) and len(kpt_shape) == 2 and kpt_shape[1] in (2, 3)):
        raise ValueError(f"kpt_shape: got {kpt_shape!r}, expected (K, 3) or (K, 2)")
    _check_int("kpt_shape[0]", kpt_shape[0])
    base = yolov8(seed, num_classes=num_classes, image_size=image_size, width=width, depth=depth)
    model = add_pose_head(base, seed, num_classes, image_size, kpt_shape)
    model.doc_string = f"yolov8_pose(seed={seed}, num_classes={num_classes}, image_size={image_size}, kpt={kpt_shape})"
    return model
