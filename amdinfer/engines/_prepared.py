"""``Engine.prepare``: a run checked and bound once, repeated at the cost of the model alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import EngineClosedError, InputError

__all__ = ["PreparedRun"]


class PreparedRun:
    """A model run whose feeds were checked and bound once: each call reruns it on the same input memory.

    Made by :meth:`amdinfer.Engine.prepare`. Each call reads the feeds' memory as it is then: update the
    inputs in place between calls (``x[...] = new`` for NumPy, ``x.copy_(new)`` for PyTorch) and call again.
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
