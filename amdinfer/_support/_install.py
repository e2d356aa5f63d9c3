"""One wording for every "how to install it" hint in error messages and notes.

``amdinfer-onnx`` is installed from a clone of the repository until it is on the package index; a hint names
both forms, so the command in an error message is one that works (README.md, "Install").
"""

from __future__ import annotations

__all__ = ["DISTRIBUTION", "pip_extra"]

#: The distribution's name (the import name is ``amdinfer``).
DISTRIBUTION = "amdinfer-onnx"


def pip_extra(*extras: str) -> str:
    """The pip command that installs ``amdinfer-onnx`` with ``extras``, from the package index or from a clone.

    Example:
        >>> pip_extra("cpu")
        "pip install 'amdinfer-onnx[cpu]' (from a clone of the repository: pip install '.[cpu]')"
        >>> pip_extra("cpu", "serve")
        "pip install 'amdinfer-onnx[cpu,serve]' (from a clone of the repository: pip install '.[cpu,serve]')"
    """
    spec = f"[{','.join(extras)}]" if extras else ""
    return f"pip install '{DISTRIBUTION}{spec}' (from a clone of the repository: pip install '.{spec}')"
