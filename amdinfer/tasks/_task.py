"""Which YOLO task a model answers: :func:`detect_task` (Ultralytics' ``task`` metadata, else the outputs)."""

from __future__ import annotations

import ast
from typing import Any

import onnx

from ..errors import ModelError, OptionError

__all__ = ["TASKS", "detect_task", "kpt_shape"]

#: The tasks :func:`amdinfer.yolo` builds (``"auto"``: :func:`detect_task`).
TASKS = ("auto", "detect", "segment", "pose")


def _meta(proto: onnx.ModelProto, key: str) -> str | None:
    return next((p.value for p in proto.metadata_props if p.key == key), None)


def kpt_shape(proto: onnx.ModelProto) -> tuple[int, int] | None:
    """The ``kpt_shape`` metadata of an Ultralytics pose export (``"[17, 3]"``), or ``None``.

    Example:
        >>> from amdinfer.testing.models import yolov8_pose
        >>> kpt_shape(yolov8_pose(image_size=64))
        (17, 3)
    """
    raw = _meta(proto, "kpt_shape")
    try:
        value = ast.literal_eval(raw) if raw is not None else None
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    return None


def _rank(value: onnx.ValueInfoProto) -> int:
    return len(value.type.tensor_type.shape.dim)


def detect_task(proto: onnx.ModelProto, task: Any = "auto") -> str:
    """The task of a YOLO model: ``task`` when it is not ``"auto"``; else Ultralytics' ``task`` metadata
    (``detect``, ``segment``, ``pose``); else its outputs: a second output of rank 4 (the prototypes) is
    ``"segment"``, a ``kpt_shape`` metadata ``"pose"``, anything else ``"detect"``.

    Raises:
        OptionError: ``task`` is not one of :data:`TASKS`.
        ModelError: the metadata names a task amdinfer does not build (``obb``, ``classify``), or ``task`` asks for
            one whose outputs the model does not have.

    Example:
        >>> from amdinfer.testing.models import yolov8, yolov8_seg
        >>> detect_task(yolov8(image_size=64)), detect_task(yolov8_seg(image_size=64))
        ('detect', 'segment')
    """
    if task not in TASKS:
        raise OptionError(f"task: got {task!r}, expected one of {TASKS}")
    outputs = list(proto.graph.output)
    has_protos = len(outputs) >= 2 and _rank(outputs[1]) == 4
    if task == "auto":
        task = _meta(proto, "task") or ("segment" if has_protos else "pose" if kpt_shape(proto) else "detect")
        if task not in TASKS[1:]:
            raise ModelError(
                f"model metadata task={task!r}: amdinfer.yolo builds {TASKS[1:]}; pass task= to read it as one of them"
            )
    if task == "segment" and not has_protos:
        raise ModelError(
            f"task='segment': the model has outputs {[o.name for o in outputs]}, expected two (predictions and "
            "rank-4 prototypes, as Ultralytics' -seg exports)"
        )
    return str(task)
