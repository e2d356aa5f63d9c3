"""``Int8Quantizer``'s checks around ONNX Runtime's ``quantize_static``, and its failures as typed errors.

Before the call: the weights of the nodes that will be quantized must be finite (ONNX Runtime answers
``AssertionError: scale issue``). After it: ONNX Runtime's exception mapped to the step, sample (counted by
the reader, :func:`~amdinfer.quantize._int8_reader.grouped_reader`) or tensor that failed, and a quantized
model with a NaN/inf scale refused (it would answer zeros or NaN for every input). The calibration samples
themselves are checked earlier, by :func:`~amdinfer.quantize._data.to_feeds` (``finite=True``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import AmdinferError, InputError, ModelError
from ..model import ModelSource
from ._data import describe_nonfinite

__all__ = [
    "check_scales",
    "check_weights",
    "quantize_static_error",
    "quantized_nodes",
    "save_for_quantizer",
]

_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"


# ---------------------------------------------------------------------- before quantize_static
def _ort_quantizable_ops() -> set[str]:
    """The op types ``quantize_static`` quantizes when given none: its QOperator and QDQ registries."""
    try:
        from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry
    except ImportError:  # pragma: no cover - part of every onnxruntime wheel with quantize_static
        from ._prepare import WEIGHTED_OPS

        return set(WEIGHTED_OPS)
    return set(QLinearOpsRegistry) | set(QDQRegistry)


def quantized_nodes(
    prepared: onnx.ModelProto,
    *,
    op_types: Sequence[str] | None,
    excluded: Sequence[str],
    only: Sequence[str] | None,
) -> list[onnx.NodeProto]:
    """The nodes ONNX Runtime's quantizer will quantize: op type in ``op_types`` (default: its registries).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> [n.name for n in quantized_nodes(tiny_cnn(), op_types=["Conv"], excluded=["conv2"], only=None)]
        ['conv1']
    """
    types = set(op_types) if op_types is not None else _ort_quantizable_ops()
    skip = set(excluded)
    keep = None if only is None else set(only)
    return [
        n for n in prepared.graph.node if n.op_type in types and n.name not in skip and (keep is None or n.name in keep)
    ]


def check_weights(src: ModelSource, nodes: Iterable[onnx.NodeProto]) -> None:
    """Refuse NaN/inf weights of ``nodes`` (ONNX Runtime: ``AssertionError: scale issue``).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> model = tiny_cnn()
        >>> model.graph.initializer[0].float_data[:] = []
        >>> model.graph.initializer[0].raw_data = np.full(
        ...     tuple(model.graph.initializer[0].dims), np.nan, np.float32).tobytes()
        >>> check_weights(ModelSource.from_any(model, check=False), model.graph.node)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.ModelError: model ...: initializer 'conv1.weight' (input 1 of Conv node 'conv1') holds ...
    """
    inits = {t.name: t for t in src.proto.graph.initializer}
    seen: set[str] = set()
    for node in nodes:
        for k, name in enumerate(node.input):
            if name not in inits or name in seen:
                continue
            seen.add(name)
            tensor = inits[name]
            if tensor.data_type not in _FLOAT_TYPES:
                continue
            try:
                arr = numpy_helper.to_array(tensor)
            except Exception as exc:  # external data that is missing, a damaged tensor
                raise ModelError(
                    f"model {src.name}: initializer {name!r} (input {k} of {node.op_type} node {node.name!r}) "
                    f"cannot be read ({type(exc).__name__}: {_first_line(exc)})"
                ) from exc
            bad = describe_nonfinite(arr)
            if bad is not None:
                raise ModelError(
                    f"model {src.name}: initializer {name!r} (input {k} of {node.op_type} node {node.name!r}) "
                    f"holds {bad}; int8 cannot quantize it: fix the weights, or, for a deliberate inf (e.g. an "
                    f"attention mask), keep the node in float (exclude_nodes=[{node.name!r}])"
                )


def save_for_quantizer(src: ModelSource, path: Path) -> None:
    """Write ``src`` where ``quantize_static`` reads it; a failure (e.g. over protobuf's 2 GB) is a ``ModelError``."""
    try:
        onnx.save_model(src.proto, str(path))
    except Exception as exc:  # e.g. a model over protobuf's 2 GB limit
        raise ModelError(
            f"model {src.name}: saving it for ONNX Runtime's quantizer failed "
            f"({type(exc).__name__}: {_first_line(exc)})"
        ) from exc


# ---------------------------------------------------------------------- after quantize_static
def _nonfinite_ranges(path: Path | None, proto: onnx.ModelProto) -> list[tuple[str, str]]:
    """``(tensor, range)`` of the calibrated ranges that are not finite, in graph order (ONNX Runtime's cache)."""
    if path is None or not path.is_file():
        return []
    try:
        from onnxruntime.quantization.calibrate import load_tensors_data

        bad = {}
        for name, data in load_tensors_data(path).items():
            lo, hi = (np.asarray(v, np.float64).ravel() for v in getattr(data, "range_value", data))
            if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                show = lambda v: str(v[0]) if v.size == 1 else str(list(v))  # noqa: E731
                bad[name] = f"[{show(lo)}, {show(hi)}]"
    except Exception:  # the diagnosis is best effort: the original error is reported either way
        return []
    order = [i.name for i in proto.graph.input] + [o for n in proto.graph.node for o in n.output]
    rank = {name: k for k, name in enumerate(order)}
    return sorted(bad.items(), key=lambda item: rank.get(item[0], len(rank)))


def _overflow_hint(subject: str) -> str:
    return (
        f"on the calibration data the model drives {subject} to inf or NaN (e.g. inputs not normalized as the "
        "model expects, a layer that overflows float32, or a non-finite weight of a node kept in float); check "
        "the data's range"
    )


def quantize_static_error(
    exc: BaseException,
    src: ModelSource,
    reader: Any,
    ranges: Path | None,
    feeds: list[dict[str, np.ndarray]],
) -> AmdinferError:
    """ONNX Runtime's failure inside ``quantize_static`` as a typed error naming the step (and sample, tensor).

    ``reader`` is the :func:`~amdinfer.quantize._int8_reader.grouped_reader` given to it (``None`` when the
    ranges came from ``ranges``, ONNX Runtime's cache of calibrated ranges, ``None`` when it keeps none).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> src = ModelSource.from_any(tiny_cnn(), check=False)
        >>> err = quantize_static_error(RuntimeError("boom"), src, None, None, [])
        >>> type(err).__name__, str(err).split(": ", 1)[1]
        ('ModelError', "ONNX Runtime's int8 quantizer failed while computing ranges or quantizing (RuntimeError: boom)")
    """
    what = f"{type(exc).__name__}: {_first_line(exc)}"
    model = src.name
    if reader is not None and reader.handed and not reader.done:
        i = reader.handed - 1
        shapes = ", ".join(f"{k!r} {v.shape} {v.dtype}" for k, v in feeds[i].items())
        return InputError(
            f"calibration sample {i} ({shapes}): ONNX Runtime failed running model {model} on it while "
            f"calibrating ({what})"
        )
    bad = _nonfinite_ranges(ranges, src.proto)
    if bad:
        name, shown = bad[0]
        more = f" (and {len(bad) - 1} later tensor{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
        return InputError(
            f"calibration: the calibrated range of tensor {name!r} in model {model} is {shown}, not finite"
            f"{more}: {_overflow_hint(f'tensor {name!r}')} ({what})"
        )
    text = str(exc).lower()
    if "scale issue" in text or "not finite" in text:
        return InputError(
            f"calibration: ONNX Runtime's int8 quantizer met a NaN or inf range in model {model} ({what}); the "
            f"weights and calibration samples are finite, so {_overflow_hint('a tensor of the model')}"
        )
    if reader is not None and not reader.handed and not reader.done:
        step = "preparing the model for calibration"
    elif ranges is not None and ranges.is_file():
        step = "quantizing with the calibrated ranges"
    elif ranges is not None:
        step = "computing ranges from the calibration outputs"
    else:
        step = "computing ranges or quantizing"
    return ModelError(f"model {model}: ONNX Runtime's int8 quantizer failed while {step} ({what})")


def check_scales(quantized: onnx.ModelProto, prepared: onnx.ModelProto) -> None:
    """Refuse a quantized model with a NaN/inf scale: it answers zeros or NaN for every input, silently.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> check_scales(tiny_cnn(), tiny_cnn())  # no initializer added by quantization: nothing to check
    """
    before = {t.name for t in prepared.graph.initializer}
    quantizes = {n.input[1]: n.input[0] for n in quantized.graph.node if n.op_type == "QuantizeLinear"}
    for t in quantized.graph.initializer:
        if t.name in before or t.data_type not in _FLOAT_TYPES:
            continue
        arr = numpy_helper.to_array(t)
        bad = describe_nonfinite(arr)
        if bad is not None:
            tensor = quantizes.get(t.name, t.name.removesuffix("_scale"))
            raise InputError(
                f"calibration: the int8 parameter {t.name!r} of tensor {tensor!r} holds {bad} (the quantized "
                f"model would answer zeros or NaN): {_overflow_hint(f'tensor {tensor!r}')}"
            )
