"""The fused model: host stages split off, pre- and post-processing nodes around the model graph."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import onnx
from onnx import TensorProto, helper

from ...errors import OptionError
from ...postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode
from ...preprocess import (
    BgrToRgb,
    Cast,
    HwcToChw,
    Normalize,
)
from ...stages import Postprocessor, Preprocessor
from ._graph import _GEOMETRY, _MAX_CANDIDATES, _META_KEY, _MIN_OPSET, _NMS_MODES, _Graph
from ._post import _classify_post, _detect_post
from ._pre import _RESIZE_MODES, _Pre


# ---------------------------------------------------------------------------------------------- the fused model
def _dims(vi: onnx.ValueInfoProto) -> list[Any]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim]


def check_fixed_buckets(fixed: int | None, buckets: Sequence[int], what: str = "the model") -> None:
    """Refuse ``batch_buckets`` on a model with a fixed batch ``fixed``: its graph holds the batch (a batch-1
    Ultralytics export's Reshapes hold the 1), so a batch padded to a bucket other than ``fixed`` fails inside
    the graph; recipes and fused pipelines run chunks of ``fixed`` rows instead. ``(fixed,)`` itself is fine.

    Raises:
        OptionError: a bucket other than ``fixed``, naming the buckets and the fixed batch.

    Example:
        >>> check_fixed_buckets(None, (8, 16)); check_fixed_buckets(1, ()); check_fixed_buckets(2, (2,))
        >>> check_fixed_buckets(1, (8, 16))
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: batch_buckets: got [8, 16], expected none for the model, which has a fixed \
batch of 1 (it runs in chunks of 1; export it with a dynamic batch axis to batch more)
    """
    if fixed is None or all(int(b) == fixed for b in buckets):
        return
    raise OptionError(
        f"batch_buckets: got {[int(b) for b in buckets]}, expected none for {what}, which has a fixed batch of "
        f"{fixed} (it runs in chunks of {fixed}; export it with a dynamic batch axis to batch more)"
    )


def split_host_stages(
    preprocess: Sequence[Preprocessor], image_size: tuple[int, int] | None
) -> tuple[list[Preprocessor], list[Preprocessor]]:
    """Split preprocessing into ``(host, graph)`` stages: leading stages without an ONNX form (``LoadImage``,
    your own) always run on the host; geometry too when ``image_size`` is ``None``."""
    host: list[Preprocessor] = []
    rest = list(preprocess)
    fusable = (BgrToRgb, HwcToChw, Normalize, Cast) + (_GEOMETRY if image_size is not None else ())
    while rest and not isinstance(rest[0], fusable):
        host.append(rest.pop(0))
    if image_size is None and any(isinstance(s, _GEOMETRY) for s in rest):
        raise OptionError(
            "fuse: with image_size=None the geometric stages run on the host and must come first; "
            f"got {[type(s).__name__ for s in preprocess]}"
        )
    return host, rest


def fuse_model(
    model: onnx.ModelProto,
    preprocess: Sequence[Preprocessor],
    postprocess: Sequence[Postprocessor],
    *,
    image_size: tuple[int, int] | None = None,
    channels: int = 3,
    nms_mode: str = "per-class",
    max_candidates: int = _MAX_CANDIDATES,
    resize: str = "exact",
) -> onnx.ModelProto:
    """Build the fused ONNX graph: uint8 ``(N, H, W, C)`` images -> preprocessing -> ``model`` -> answers.

    Args:
        model: the model (one input).
        preprocess: the pipeline's preprocessing stages; leading host-only stages (``LoadImage``) are skipped
            (:class:`FusedPipeline` runs them), as are the geometric stages when ``image_size`` is ``None``.
        postprocess: ``YoloDecode, Nms[, ScaleBoxes]``, ``[Softmax,] TopK``, or nothing (the raw outputs).
        image_size: ``(height, width)`` of every input image: geometry runs in the graph. ``None``: the
            graph starts at the host-made canvas and takes ``affine``/``orig_shape`` inputs when boxes are
            scaled back.
        channels: channels of the input images.
        nms_mode: ``"per-class"``: one ``NonMaxSuppression`` class per object class, exact IoUs (the same
            answers as :class:`~amdinfer.postprocess.Nms`; fast on the CPU, slow on ORT's CUDA EP, which runs
            every (image, class) pair in turn); ``"offset"``: Ultralytics' trick, one NMS over boxes shifted
            by ``class * 7680`` (one pass; the shifted float32 coordinates lose bits, so a pair at the IoU
            threshold can flip); ``"host"``: the graph ends with the decoded candidates above the threshold
            and :class:`FusedPipeline` runs the pipeline's ``Nms`` and ``ScaleBoxes`` stages on them (the
            stage-by-stage answers exactly; for GPUs, where ORT's NMS kernel costs ~0.5 ms per image);
            ``"dense"``: the whole batch's greedy NMS as tensor ops (IoU matrices and a fixed-point ``Loop``;
            the same answers as the pipeline's ``Nms``, with its class arithmetic; no per-image host syncs:
            for GPUs). Adds an output ``candidates (N,)``: each image's candidate count.
        resize: how ``Letterbox``/``Resize`` resize in the graph: ``"exact"``, int32 arithmetic bit-exact with
            ``cv2.resize(INTER_LINEAR)`` on uint8 (about a dozen full-size int32 tensor ops); ``"fast"``, one
            ONNX ``Resize`` (linear, ``half_pixel``) on uint8, the same sampling in floating point: values within
            1 of OpenCV's (like the NumPy kernel), cheaper on a GPU for large outputs; ``"auto"``, fast for
            resized images of 200,000 pixels and more (e.g. 1024x576), exact below (measured on an H200).
        max_candidates: ``"dense"`` only: most candidates per image entering NMS (its IoU matrix is
            ``max_candidates**2`` per image); an image with more keeps its best ``max_candidates``.

    Returns:
        The fused model, checked by ``onnx.checker``; opset raised to 13 when lower.

    Raises:
        OptionError: a stage or combination has no fused form (the message names it).

    Example:
        >>> from amdinfer.preprocess import Resize, Normalize, HwcToChw
        >>> from amdinfer.postprocess import Softmax, TopK
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = fuse_model(tiny_cnn(), [Resize((32, 32)), Normalize(scale=1 / 255), HwcToChw()],
        ...                [Softmax(), TopK(3)], image_size=(40, 50))
        >>> [(o.name, _dims(o)) for o in m.graph.output]
        [('scores', ['N', 3]), ('indices', ['N', 3])]
    """
    _check_modes(nms_mode, resize, max_candidates)
    model, opset, model_input = _single_input_model(model)
    g = _Graph(opset)
    pre, inputs = _fuse_pre(g, preprocess, image_size, channels, model_input, resize)
    pre_out = pre.x
    body = _rewired_body(model.graph, model_input.name, pre_out)
    outputs = list(body.output)
    post = list(postprocess)
    kinds = [type(s) for s in post]
    host_post: list[str] = []
    if not post:
        out_names = [o.name for o in outputs]
    elif kinds in ([YoloDecode, Nms], [YoloDecode, Nms, ScaleBoxes]):
        out_names, host_post = _fuse_detect(g, post, outputs, pre, inputs, image_size, nms_mode, int(max_candidates))
    elif kinds in ([TopK], [Softmax, TopK]):
        out_names = _fuse_classify(g, post, outputs)
    else:
        raise OptionError(
            f"fuse: postprocessing {[k.__name__ for k in kinds]} has no fused form; fusable: YoloDecode, Nms"
            "[, ScaleBoxes] or [Softmax,] TopK, or none"
        )
    graph = _assemble(g, model, body, pre_out, inputs, out_names, post)
    info = {"host_post": host_post, "affine": list(pre.affine), "input_shape": list(pre.hw) if pre.hw else None}
    dims = model_input.type.tensor_type.shape.dim
    # A model exported with a fixed batch (Ultralytics' default is 1) keeps it inside (Reshape shapes): the
    # fused pipeline runs it in chunks of that size.
    info["batch"] = int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") else None
    if "candidates" in out_names:
        info["max_candidates"] = min(int(max_candidates), cast(Nms, post[1]).max_nms)
    return _finish_model(model, graph, opset, info)


def _assemble(
    g: _Graph,
    model: onnx.ModelProto,
    body: onnx.GraphProto,
    pre_out: str,
    inputs: list[onnx.ValueInfoProto],
    out_names: list[str],
    post: list[Postprocessor],
) -> onnx.GraphProto:
    """The fused graph: preprocessing nodes, the model's body, postprocessing nodes, in dependency order."""
    nodes = _toposort(
        list(g.nodes[: _count_pre(g, pre_out)]) + list(body.node) + list(g.nodes[_count_pre(g, pre_out) :]),
        {i.name for i in inputs} | {t.name for t in body.initializer} | {t.name for t in g.inits},
    )
    outputs_vi = _output_infos(out_names, body, post[-1].k if post and isinstance(post[-1], TopK) else None)
    return helper.make_graph(
        nodes,
        f"{model.graph.name or 'model'}_fused",
        inputs,
        outputs_vi,
        initializer=list(body.initializer) + g.inits,
    )


def _check_modes(nms_mode: str, resize: str, max_candidates: Any) -> None:
    if nms_mode not in _NMS_MODES:
        raise OptionError(f"nms_mode: got {nms_mode!r}, expected one of {_NMS_MODES}")
    if resize not in _RESIZE_MODES:
        raise OptionError(f"resize: got {resize!r}, expected one of {_RESIZE_MODES}")
    if not isinstance(max_candidates, (int, np.integer)) or isinstance(max_candidates, bool) or max_candidates < 1:
        raise OptionError(f"max_candidates: got {max_candidates!r}, expected an int >= 1")


def _rewired_body(graph: onnx.GraphProto, old: str, new: str) -> onnx.GraphProto:
    """A copy of ``graph`` whose nodes read ``new`` where they read ``old`` (the model input)."""
    body = onnx.GraphProto()
    body.CopyFrom(graph)
    for node in body.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
    return body


def _single_input_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int, onnx.ValueInfoProto]:
    """``model`` (converted to opset 13 when lower), its default-domain opset and its one input."""
    if (
        len(model.graph.input) - len({i.name for i in model.graph.initializer} & {i.name for i in model.graph.input})
        != 1
    ):
        raise OptionError("fuse: the model must have exactly one input")
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < _MIN_OPSET:
        from onnx import version_converter

        model = version_converter.convert_version(model, _MIN_OPSET)
        opset = _MIN_OPSET
    model_input = next(i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
    return model, opset, model_input


def _fuse_pre(
    g: _Graph,
    preprocess: Sequence[Preprocessor],
    image_size: tuple[int, int] | None,
    channels: int,
    model_input: onnx.ValueInfoProto,
    resize: str = "exact",
) -> tuple[_Pre, list[onnx.ValueInfoProto]]:
    """The preprocessing nodes from the ``images`` input, checked against the model input; and the graph inputs."""
    _, graph_stages = split_host_stages(preprocess, image_size)
    if image_size is not None:
        h, w = int(image_size[0]), int(image_size[1])
        inputs = [helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", h, w, channels])]
    else:
        inputs = [helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", "H", "W", channels])]
    pre = _Pre(g, "images", None if image_size is None else (int(image_size[0]), int(image_size[1])), resize)
    for stage in graph_stages:
        pre.add(stage)
    pre.finish()
    want = helper.tensor_dtype_to_np_dtype(model_input.type.tensor_type.elem_type)
    if pre.dtype != want:
        raise OptionError(
            f"fuse: the preprocessing ends in {pre.dtype}, the model input {model_input.name!r} expects {want}; "
            "add Normalize/Cast so the stage-by-stage pipeline would feed the model too"
        )
    in_dims = _dims(model_input)
    if len(in_dims) == 4 and pre.hw is not None:
        model_hw = tuple(in_dims[2:4]) if pre.channel_axis == 1 else tuple(in_dims[1:3])
        if all(isinstance(d, int) for d in model_hw) and model_hw != pre.hw:
            raise OptionError(f"fuse: the preprocessing makes images of {pre.hw}, the model expects {model_hw}")
    return pre, inputs


def _fuse_detect(
    g: _Graph,
    post: list[Postprocessor],
    outputs: list[onnx.ValueInfoProto],
    pre: _Pre,
    inputs: list[onnx.ValueInfoProto],
    image_size: tuple[int, int] | None,
    nms_mode: str,
    max_candidates: int = _MAX_CANDIDATES,
) -> tuple[list[str], list[str]]:
    """``YoloDecode, Nms[, ScaleBoxes]`` as nodes (adds ``affine``/``orig_shape`` to ``inputs`` when the
    host makes the canvas); returns the output names and the stages left to the host."""
    decode, nms = cast(YoloDecode, post[0]), cast(Nms, post[1])
    scale = cast(ScaleBoxes, post[2]) if len(post) == 3 else None
    pred_vi = next((o for o in outputs if o.name == decode.output), outputs[0]) if decode.output else outputs[0]
    if decode.output is None and len(outputs) != 1:
        raise OptionError(f"fuse: the model has outputs {[o.name for o in outputs]}; give YoloDecode(output=...)")
    affine = orig = None
    if scale is not None and nms_mode != "host":
        if image_size is not None:
            affine = g.const(np.asarray([pre.affine], np.float32), hint="affine")
            orig = g.const(np.asarray([image_size], np.float32), hint="orig_shape")
            affine = g.op(
                "Expand",
                affine,
                g.op("Concat", g.dims("images", 0, 1), g.const([4], np.int64), axis=0),
            )
            orig = g.op(
                "Expand",
                orig,
                g.op("Concat", g.dims("images", 0, 1), g.const([2], np.int64), axis=0),
            )
        else:
            inputs.append(helper.make_tensor_value_info("affine", TensorProto.FLOAT, ["N", 4]))
            inputs.append(helper.make_tensor_value_info("orig_shape", TensorProto.FLOAT, ["N", 2]))
            affine, orig = "affine", "orig_shape"
    if nms_mode == "host":
        affine = orig = None  # ScaleBoxes runs on the host
    out_names = _detect_post(
        g,
        pred_vi.name,
        _dims(pred_vi),
        decode,
        nms,
        None if nms_mode == "host" else scale,
        pre.hw,
        affine,
        orig,
        nms_mode,
        max_candidates,
    )
    return out_names, ([type(t).__name__ for t in post[1:]] if nms_mode == "host" else [])


def _fuse_classify(g: _Graph, post: list[Postprocessor], outputs: list[onnx.ValueInfoProto]) -> list[str]:
    """``[Softmax,] TopK`` as nodes on the class-score output; returns the output names."""
    topk = cast(TopK, post[-1])
    softmax = cast(Softmax, post[0]) if len(post) == 2 else None
    chosen = topk.output or (softmax.output if softmax is not None else None)
    vi = next((o for o in outputs if o.name == chosen), None) if chosen else outputs[0]
    if vi is None or (chosen is None and len(outputs) != 1):
        raise OptionError(f"fuse: pick the class-score output with TopK(output=...); got {[o.name for o in outputs]}")
    return _classify_post(g, vi.name, softmax, topk)


def _finish_model(model: onnx.ModelProto, graph: onnx.GraphProto, opset: int, info: dict[str, Any]) -> onnx.ModelProto:
    """The fused model around ``graph``: ``model``'s other opsets and metadata, the fuse record, checked."""
    fused = helper.make_model(
        graph,
        opset_imports=[o for o in model.opset_import if o.domain not in ("", "ai.onnx")]
        + [helper.make_opsetid("", opset)],
        ir_version=max(model.ir_version, 8),
        producer_name="amdinfer.pipeline.fuse",
    )
    for prop in model.metadata_props:
        fused.metadata_props.append(prop)
    fused.metadata_props.add(key=_META_KEY, value=json.dumps(info))
    onnx.checker.check_model(fused)
    return fused


def _toposort(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """Nodes in an order where each comes after its inputs' producers (converters may append nodes)."""
    done = set(available) | {""}
    out: list[onnx.NodeProto] = []
    pending = nodes
    while pending:
        rest = []
        for node in pending:
            if all(i in done for i in node.input):
                out.append(node)
                done.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # subgraph-captured names or a cycle: keep the given order
            return out + rest
        pending = rest
    return out


def _count_pre(g: _Graph, pre_out: str) -> int:
    """How many builder nodes are preprocessing (those up to the one producing ``pre_out``)."""
    for i, node in enumerate(g.nodes):
        if pre_out in node.output:
            return i + 1
    return 0


def _output_infos(names: list[str], body: onnx.GraphProto, k: int | None) -> list[onnx.ValueInfoProto]:
    known = {o.name: o for o in body.output}
    specs: dict[str, tuple[int, list[Any] | None]] = {
        "boxes": (TensorProto.FLOAT, ["K", 4]),
        "scores": (TensorProto.FLOAT, None),
        "classes": (TensorProto.INT64, ["K"]),
        "batch_index": (TensorProto.INT64, ["K"]),
        "candidates": (TensorProto.INT64, ["N"]),
        "candidate_boxes": (TensorProto.FLOAT, ["N", "A", 4]),
        "candidate_scores": (TensorProto.FLOAT, ["N", "A"]),
        "candidate_classes": (TensorProto.INT64, ["N", "A"]),
        "candidate_mask": (TensorProto.BOOL, ["N", "A"]),
        "indices": (TensorProto.INT64, None),
    }
    out = []
    for name in names:
        if name in known:
            out.append(known[name])
            continue
        dtype, shape = specs[name]
        if shape is None:
            shape = ["K"] if "batch_index" in names else ["N", k]
        out.append(helper.make_tensor_value_info(name, dtype, shape))
    return out
