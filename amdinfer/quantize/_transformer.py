"""What int8 must leave alone in a Transformer: the attention-mask path, and how to tell a Transformer.

The attention mask reaches the scores as ``(1 - mask) * c`` with ``c`` the float32 minimum (``-3.4e38``,
PyTorch exports), ``-10000`` (older BERT exports) or ``-inf``, added to the scaled scores before Softmax.
Calibrated, the tensor after that ``Add`` spans ``[-3.4e38, 10]``: one uint8 step is ``1.3e36``, every score
rounds to the same value, and attention becomes uniform (the trained MiniLM's sentence embeddings end at
cosine 0.67 to the float ones). :func:`mask_path_nodes` finds the nodes that read such a tensor so that the
int8 quantizers keep them in float on a Transformer (:func:`is_transformer`; elsewhere a deliberate ``-inf``
is named by the weight check, which says to exclude its node).

Example:
    >>> from amdinfer.testing.models import tiny_cnn, transformer_encoder
    >>> is_transformer(tiny_cnn()), is_transformer(transformer_encoder())
    (False, True)
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["HUGE", "TRANSFORMER_OPS", "is_transformer", "mask_path_nodes"]

#: A float constant with a magnitude at least this (or inf) is a mask value, not data.
HUGE = 1e4
#: Ops only Transformers have: normalization over the hidden axis and ONNX Runtime's fused contrib ops.
TRANSFORMER_OPS = frozenset(
    {
        "LayerNormalization",
        "SkipLayerNormalization",
        "SimplifiedLayerNormalization",
        "EmbedLayerNormalization",
        "Attention",
        "MultiHeadAttention",
        "GroupQueryAttention",
    }
)
# Ops through which a mask value travels unchanged in kind (elementwise, broadcasting, reshaping).
_CARRY = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Neg",
        "Where",
        "Cast",
        "Expand",
        "Unsqueeze",
        "Squeeze",
        "Reshape",
        "Transpose",
        "Concat",
        "Tile",
        "Min",
        "Max",
        "Identity",
    }
)
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)


def _huge(tensor: onnx.TensorProto) -> bool:
    if tensor.data_type not in _FLOATS:
        return False
    try:
        arr = numpy_helper.to_array(tensor)
    except Exception:  # external data not loaded: not a mask constant (those are scalars)
        return False
    # NaN is a broken weight, not a mask value: check_weights names it
    return bool(arr.size) and bool(np.any(np.abs(arr.astype(np.float64)) >= HUGE))


def mask_path_nodes(proto: onnx.ModelProto) -> list[str]:
    """Names of the nodes that read a tensor derived from a huge float constant (an attention mask value).

    A tensor is on the mask path when it is a float constant with a value of magnitude >= :data:`HUGE` (or
    inf), or the output of an elementwise or reshaping op (``Mul``, ``Add``, ``Where``, ``Expand``, ...) with
    such an input; every node reading one is listed (the path stops at ``Softmax``, whose output is bounded).

    Example:
        >>> from onnx import helper, TensorProto
        >>> big = numpy_helper.from_array(np.array(-3.4e38, np.float32), "big")
        >>> g = helper.make_graph(
        ...     [helper.make_node("Mul", ["m", "big"], ["bias"], name="scale"),
        ...      helper.make_node("Add", ["s", "bias"], ["sc"], name="add_mask"),
        ...      helper.make_node("Softmax", ["sc"], ["p"], name="softmax"),
        ...      helper.make_node("MatMul", ["p", "s"], ["y"], name="mm")],
        ...     "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in ("m", "s")],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [big])
        >>> mask_path_nodes(helper.make_model(g))
        ['scale', 'add_mask', 'softmax']
    """
    g = proto.graph
    marked = {t.name for t in g.initializer if _huge(t)}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value" and _huge(n.attribute[0].t):
            marked.add(n.output[0])
    out: list[str] = []
    for n in g.node:  # prepared models are topologically sorted
        if not any(i in marked for i in n.input if i):
            continue
        out.append(n.name)
        if n.op_type in _CARRY:
            marked.update(o for o in n.output if o)
    return out


def is_transformer(proto: onnx.ModelProto) -> bool:
    """Whether ``proto`` looks like a Transformer: a :data:`TRANSFORMER_OPS` op, or a ``Softmax`` fed by a
    ``MatMul`` of two activations (scaled dot-product attention spelt out), possibly through a scale and a mask.

    Example:
        >>> from amdinfer.testing.models import transformer_encoder
        >>> is_transformer(transformer_encoder())
        True
    """
    g = proto.graph
    if any(n.op_type in TRANSFORMER_OPS for n in g.node):
        return True
    consts = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    producer = {o: n for n in g.node for o in n.output}
    for n in g.node:
        if n.op_type != "Softmax":
            continue
        frontier, hops = [n.input[0]], 0
        while frontier and hops < 4:
            nodes = [producer[t] for t in frontier if t in producer]
            if any(p.op_type == "MatMul" and not (set(p.input) & consts) for p in nodes):
                return True
            frontier = [i for p in nodes if p.op_type in _CARRY for i in p.input if i not in consts]
            hops += 1
    return False


def float_readers_read_float(quantized: onnx.ModelProto, quantized_nodes: set[str]) -> int:
    """Let the nodes that were not quantized read the float tensor instead of its quantize/dequantize copy.

    ONNX Runtime's QDQ quantizer rewires *every* reader of a quantized activation to the dequantized copy, so
    in a Transformer the residual ``Add`` next to a quantized ``MatMul`` adds int8 rounding to the residual
    stream, layer after layer (on MiniLM: mean cosine 0.9945 instead of 0.9972). Returns how many inputs were
    rewired; quantize/dequantize nodes left without readers are removed. Modifies ``quantized`` in place.

    Example:
        >>> from onnx import helper, TensorProto
        >>> g = helper.make_graph(
        ...     [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        ...      helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
        ...      helper.make_node("MatMul", ["xd", "w"], ["y"], name="mm"),
        ...      helper.make_node("Add", ["xd", "y"], ["out"], name="residual")],
        ...     "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        ...     [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2])])
        >>> m = helper.make_model(g)
        >>> float_readers_read_float(m, {"mm"}), [list(n.input) for n in m.graph.node if n.name == "residual"]
        (1, [['x', 'y']])
    """
    g = quantized.graph
    q_input = {n.output[0]: n.input[0] for n in g.node if n.op_type == "QuantizeLinear"}
    source = {
        n.output[0]: q_input[n.input[0]] for n in g.node if n.op_type == "DequantizeLinear" and n.input[0] in q_input
    }
    rewired = 0
    for node in g.node:
        if node.name in quantized_nodes or node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        for k, name in enumerate(node.input):
            if name in source:
                node.input[k] = source[name]
                rewired += 1
    for op in ("DequantizeLinear", "QuantizeLinear"):  # dequantize first: it is the quantize node's reader
        used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
        dead = [
            n
            for n in g.node
            if n.op_type == op
            and n.output[0] not in used
            and n.output[0] in (source if op == "DequantizeLinear" else q_input)
        ]
        for n in dead:
            g.node.remove(n)
    return rewired
