"""Calibration data as tensors, axis 0 = samples: an array, ``{input: array}`` or an ``.npz``, and its rank check.

The one tensor layout of calibration data (:class:`~amdinfer.quantize.Int8Quantizer`'s ``calibration=`` and
``amdinfer quantize --calibration data.npz``): :func:`tensor_rows` splits it into samples (a
:class:`TensorRows`, which remembers each tensor's shape) and :func:`check_rows` refuses, once the model is
known, arrays whose rank is neither the model's nor one more.

Example:
    >>> import numpy as np
    >>> rows = tensor_rows({"a": np.zeros((2, 4), np.float32)}, "calibration")
    >>> len(rows), rows[1]["a"].shape
    (2, (4,))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["TensorRows", "check_rows", "tensor_rows"]


def _fmt_dims(dims: Sequence[int | str | None]) -> str:
    shown = [str(d) if d is not None else "?" for d in dims]
    return "(" + ", ".join(shown) + ("," if len(shown) == 1 else "") + ")"


class TensorRows(list):  # type: ignore[type-arg]
    """Samples given as tensors (axis 0 = samples): the rows, and each tensor's shape for the layout check."""

    shapes: dict[str | None, tuple[int, ...]]


def _as_tensors(data: Any, what: str) -> dict[str | None, np.ndarray] | None:
    """``data`` as ``{input name (None: the one input): array}`` when it is a tensor layout, else ``None``.

    An array, a mapping of arrays (``{input: (samples, ...)}``) or a path to an ``.npz`` (one array per input).
    """
    import os

    if isinstance(data, (str, os.PathLike)) and str(data).lower().endswith(".npz"):
        from .._support._files import read_npz

        arrays = read_npz(str(data), what)
        if len(arrays) == 1:
            return {None: next(iter(arrays.values()))}
        return {str(k): v for k, v in arrays.items()}
    if isinstance(data, np.ndarray):
        return {None: data}
    if isinstance(data, Mapping) and data and all(isinstance(v, np.ndarray) for v in data.values()):
        return {str(k): v for k, v in data.items()}
    return None


def tensor_rows(data: Any, what: str) -> TensorRows | None:
    """The samples of a tensor layout (axis 0 = samples), or ``None`` when ``data`` is a list of samples.

    The one tensor layout of calibration data, for :class:`~amdinfer.quantize.Int8Quantizer` and
    ``amdinfer quantize --calibration data.npz``: an array ``(samples, ...)`` for a one-input model, a mapping
    ``{input: (samples, ...)}`` or an ``.npz`` with one such array per input. Row ``i`` of every array is
    sample ``i``; a row without the model's batch axis gets one (:func:`check_rows` checks the ranks once the
    model is known).

    Raises:
        InputError: the arrays disagree on the sample count (axis 0), or one has no axis 0.

    Example:
        >>> rows = tensor_rows(np.zeros((5, 3, 8, 8), np.float32), "calibration")
        >>> len(rows), rows[0].shape, rows.shapes
        (5, (3, 8, 8), {None: (5, 3, 8, 8)})
        >>> tensor_rows([np.zeros((3, 8, 8))], "calibration") is None
        True
    """
    tensors = _as_tensors(data, what)
    if tensors is None:
        return None
    counts = {k: (v.shape[0] if v.ndim else 0) for k, v in tensors.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        shown = {("the array" if k is None else k): v for k, v in counts.items()}
        raise InputError(
            f"{what}: got arrays whose sample counts (axis 0) are {shown}, expected one count >= 1 shared by "
            "all (axis 0 = samples)"
        )
    n = next(iter(counts.values()))
    rows = TensorRows(tensors[None][i] if None in tensors else {k: v[i] for k, v in tensors.items()} for i in range(n))
    rows.shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    return rows


def check_rows(rows: Any, dims: Mapping[str, Sequence[int | str | None] | None], what: str) -> None:
    """Refuse a tensor layout whose arrays do not have the model's rank or one more (axis 0 = samples).

    ``dims``: each input's declared shape (:func:`input_dims`). Rows of the model's rank keep their batch
    axis; rows of one less get one.

    Raises:
        InputError: names ``what``, the input, the shape received and the shapes expected.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> from amdinfer.quantize._data import input_dims
        >>> rows = tensor_rows(np.zeros((3, 32, 32), np.float32), "calibration")
        >>> check_rows(rows, input_dims(tiny_cnn()), "calibration")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: calibration: got an array of shape (3, 32, 32) for input 'input', expected ...
    """
    if not isinstance(rows, TensorRows):
        return
    for name, shape in rows.shapes.items():
        key = name if name is not None else (next(iter(dims)) if len(dims) == 1 else None)
        if key is None or key not in dims or dims[key] is None:
            continue  # to_feeds names what does not fit
        want = tuple(dims[key] or ())
        if len(shape) in (len(want), len(want) + 1):
            continue
        inner = _fmt_dims(want)[1:]
        raise InputError(
            f"{what}: got an array of shape {tuple(shape)} for input {key!r}, expected (samples, "
            f"{_fmt_dims(want[1:])[1:]} or (samples, {inner} (axis 0 = samples; one image is a list of one)"
        )


def _first(rows: TensorRows, n: int) -> TensorRows:
    out = TensorRows(rows[:n])
    out.shapes = rows.shapes
    return out
