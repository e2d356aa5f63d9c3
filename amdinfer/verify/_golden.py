"""Golden files: a run's inputs and outputs in one ``.npz`` that a later comparison replays.

One format for everything that saves a run (``amdinfer run --save``, ``amdinfer verify --save-golden``) and
everything that reads one back (``amdinfer verify --golden``): ``input/<name>`` and ``output/<name>`` arrays
and a ``meta`` array holding a JSON string (who made it). No pickled objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["Golden", "load_golden", "save_golden"]


@dataclass(frozen=True)
class Golden:
    """The contents of a golden file.

    Attributes:
        inputs: input name -> array (the feeds to replay).
        outputs: output name -> array (the expected answers).
        meta: what wrote it (``engine``, ``model_sha256``, ``amdinfer``, ...); ``{}`` when absent.

    Example:
        >>> import numpy as np
        >>> Golden({"x": np.ones(2)}, {"y": np.zeros(2)}).meta
        {}
    """

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


def save_golden(
    path: str | Path,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
    *,
    what: str = "path",
) -> Path:
    """Write ``inputs`` and ``outputs`` (and ``meta`` as JSON) at exactly ``path``, through a file renamed over it.

    Args:
        path: the file; no ``.npz`` is appended.
        inputs: input name -> array.
        outputs: output name -> array.
        meta: JSON-serialisable facts about the run.
        what: the option that named ``path``, for errors (``"--save"``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import numpy as np, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "golden")
        >>> _ = save_golden(path, {"x": np.ones(2)}, {"y": np.zeros(2)}, {"engine": "numpy"})
        >>> g = load_golden(path)
        >>> g.inputs["x"].tolist(), g.outputs["y"].tolist(), g.meta
        ([1.0, 1.0], [0.0, 0.0], {'engine': 'numpy'})
    """
    from .._support._files import write_atomic

    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(dict(meta or {}), default=str))}
    arrays.update({f"input/{k}": np.asarray(v) for k, v in inputs.items()})
    arrays.update({f"output/{k}": np.asarray(v) for k, v in outputs.items()})
    return write_atomic(path, lambda f: np.savez(f, **arrays), argument=what)  # type: ignore[arg-type]


def load_golden(path: str | Path, what: str = "golden file") -> Golden:
    """Read a file written by :func:`save_golden` (``amdinfer run --save``, ``amdinfer verify --save-golden``).

    Raises:
        InputError: not a readable ``.npz``, pickled arrays, or no ``input/<name>`` and ``output/<name>`` arrays.

    Example:
        >>> import numpy as np, tempfile, os
        >>> bare = os.path.join(tempfile.mkdtemp(), "bare.npz")
        >>> np.savez(bare, logits=np.zeros(3))
        >>> load_golden(bare)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.InputError: golden file: '...bare.npz' has arrays ['logits'], expected input/<name> and ...
    """
    from .._support._files import read_npz

    data = read_npz(path, what)
    inputs = {k[6:]: v for k, v in data.items() if k.startswith("input/")}
    outputs = {k[7:]: v for k, v in data.items() if k.startswith("output/")}
    if not inputs or not outputs:
        raise InputError(
            f"{what}: {str(path)!r} has arrays {sorted(data)}, expected input/<name> and output/<name> "
            "(a file written by amdinfer run --save or amdinfer verify --save-golden)"
        )
    meta: dict[str, Any] = {}
    if "meta" in data:
        try:
            loaded = json.loads(str(data["meta"]))
        except ValueError:
            loaded = None
        meta = loaded if isinstance(loaded, dict) else {}
    return Golden(inputs, outputs, meta)
