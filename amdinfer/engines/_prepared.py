"""``Engine.prepare``: a run checked and bound once, repeated at the cost of the model alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import EngineClosedError, InputError

__all__ = ["BoundFeeds", "PreparedRun"]


class PreparedRun:
    """A model run whose feeds were checked and bound once: each call reruns it on the same input memory.

    Made by :meth:`amdinfer.Engine.prepare`. Each call reads the feeds' memory as it is then: update the
    inputs in place between calls (``x[...] = new`` for NumPy, ``x.copy_(new)`` for PyTorch) and call again.
    The run keeps the arrays given to ``prepare``: putting another array into the feeds dict afterwards changes
    nothing, and an array whose shape or dtype changed in place (``x.resize(...)``, ``x.shape = ...``) is an
    :class:`~amdinfer.errors.InputError` naming the input and both shapes; prepare again for a new shape.
    The shape/dtype checks, output selection and, on a GPU, the binding of device buffers (and the CUDA graph
    capture) happen once, at :meth:`~amdinfer.Engine.prepare`; a call then costs the model's own run plus
    a few microseconds (on an H200: 0.97x a hand-tuned ONNX Runtime session at batch 1, docs/gpu.md).

    On an ONNX Runtime GPU engine with CUDA/HIP graphs, a call's device outputs are the engine's own output
    buffers for this input: the next call (or an ``engine.run`` with the same input tensor) overwrites them,
    so copy what you keep (``torch.from_dlpack(out["y"]).clone()``). Other engines return new arrays.

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"])
        >>> x = np.zeros((1, 3, 32, 32), np.float32)
        >>> step = engine.prepare({"input": x})
        >>> first = step()["logits"]
        >>> x[...] = 1.0  # new contents, same memory
        >>> bool(np.allclose(step()["logits"], engine.run({"input": x})["logits"]))
        True
        >>> bool(np.allclose(first, step()["logits"]))
        False
    """

    __slots__ = ("_call", "_engine", "_inputs", "_outputs")

    def __init__(self, engine: Any, call: Callable[[], dict[str, Any]], inputs: list[str], outputs: list[str]):
        self._engine = engine
        self._call = call
        self._inputs = inputs
        self._outputs = outputs

    @property
    def inputs(self) -> list[str]:
        """The bound input names."""
        return list(self._inputs)

    @property
    def outputs(self) -> list[str]:
        """The output names each call returns."""
        return list(self._outputs)

    def __call__(self) -> dict[str, Any]:
        """Run the model on the bound inputs' current contents.

        Returns:
            ``{output name: array}``, as :meth:`amdinfer.Engine.run` returns them.

        Raises:
            EngineClosedError: the engine was closed.
        """
        if self._engine.closed:
            raise EngineClosedError(f"{type(self._engine).__name__}: engine is closed; prepare again on a new one")
        return self._call()

    def __repr__(self) -> str:
        return f"<PreparedRun {self._inputs} -> {self._outputs} on {self._engine!r}>"


def check_bound_in_place(given: Mapping[str, Any], checked: Mapping[str, Any]) -> None:
    """Refuse NumPy feeds the checks had to copy (non-contiguous): a prepared run would never see updates."""
    for name, value in checked.items():
        src = given[name]
        if type(value) is np.ndarray and isinstance(src, np.ndarray) and not np.shares_memory(value, src):
            raise InputError(
                f"input {name!r}: got a non-contiguous array, which engine.run copies; a prepared run must read "
                "the caller's memory, so pass a C-contiguous array (np.ascontiguousarray) and update that one"
            )


class BoundFeeds:
    """The shape and dtype of each NumPy feed at ``prepare`` time, checked again before each prepared call.

    ``ndarray.resize`` and assigning ``.shape``/``.dtype`` change an array in place; a prepared run bound to its
    old shape would hand the runtime the wrong number of bytes.

    Example:
        >>> x = np.zeros((2, 3), np.float32)
        >>> bound = BoundFeeds({"x": x})
        >>> bound.check()
        >>> x.resize((1, 3), refcheck=False)
        >>> bound.check()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: input 'x': prepared with shape (2, 3) float32, now shape (1, 3) float32 (...)...
    """

    __slots__ = ("_arrays",)

    def __init__(self, feeds: Mapping[str, Any]) -> None:
        self._arrays = [(name, a, a.shape, a.dtype) for name, a in feeds.items() if isinstance(a, np.ndarray)]

    def check(self) -> None:
        """Raise :class:`~amdinfer.errors.InputError` for an array resized or re-typed since ``prepare``."""
        for name, a, shape, dtype in self._arrays:
            if a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
                now = "" if a.flags.c_contiguous else ", no longer C-contiguous"
                raise InputError(
                    f"input {name!r}: prepared with shape {shape} {dtype}, now shape {a.shape} {a.dtype}{now} "
                    "(changed in place after engine.prepare); prepare again for the new shape"
                )
