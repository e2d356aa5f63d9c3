"""Output files of the subcommands: paths checked before any work, files written by ``write_atomic``.

Every file a subcommand writes (``run --save``, ``verify --save-golden``, ``compile --out``, ``quantize --out``
and ``--plot``, ``bench --plot``, ``profile --trace``) goes through :func:`check_writable` before the model
runs (an existing folder, not a folder itself, not one of the command's inputs or another output) and is
written to a temporary file beside it and renamed over it (:func:`amdinfer._support._files.write_atomic`): a symbolic
link at the path is replaced, never followed. See ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OptionError

__all__ = ["check_plot_path", "check_writable", "copy_file", "save_figure", "save_npz"]

#: The options whose files a command reads: an output may not be one of them.
_INPUT_OPTIONS = (("model", "the input model"), ("inputs", "--inputs"), ("calibration", "--calibration"),
                  ("eval", "--eval"), ("golden", "--golden"))  # fmt: skip
_PLOT_SUFFIXES = (".png", ".svg", ".svgz", ".pdf", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".eps", ".ps")


def check_writable(path: str, what: str, args: argparse.Namespace | None = None) -> Path:
    """An output path whose folder exists, checked before any work is done.

    With ``args``, the path may not be the same file as one the command reads (the model, ``--inputs``,
    ``--calibration``, ``--eval``, ``--golden``) or as another output checked before it: the output is written
    by :func:`~amdinfer._support._files.write_atomic`, which would replace that input.

    Raises:
        OptionError: a folder, a missing folder, or the same file as an input or another output.
    """
    from .._support._files import check_path, same_file

    p = check_path(path, what).expanduser()
    if p.is_dir() and not p.is_symlink():
        raise OptionError(f"{what}: got {path!r}, a folder; expected a file path")
    if not p.parent.is_dir():
        raise OptionError(f"{what}: got {path!r}, but folder '{p.parent}' does not exist; expected a file path")
    if args is not None:
        taken: list[tuple[str, Any]] = [(label, getattr(args, attr, None)) for attr, label in _INPUT_OPTIONS]
        taken += getattr(args, "outputs_checked", [])
        for label, other in taken:
            if other and same_file(p, other):
                raise OptionError(
                    f"{what}: got {path!r}, the same file as {label} ({str(other)!r}); "
                    "expected a different path (writing it would replace that file)"
                )
        args.outputs_checked = [*getattr(args, "outputs_checked", []), (what, p)]
    return p


def check_plot_path(path: str, what: str, args: argparse.Namespace) -> Path:
    """:func:`check_writable` for a matplotlib figure: the suffix names the format."""
    p = check_writable(path, what, args)
    if p.suffix.lower() not in _PLOT_SUFFIXES:
        raise OptionError(f"{what}: got {path!r}, expected a file name ending in {', '.join(_PLOT_SUFFIXES)}")
    return p


def save_figure(fig: Any, path: Path, what: str) -> None:
    """Write a matplotlib figure to ``path`` (format from its suffix) through ``_files.write_atomic``; the saved
    area is what was drawn (``bbox_inches="tight"``), so a long label is never cut at the canvas's edge."""
    from .._support._files import write_atomic

    fmt = path.suffix[1:].lower()
    write_atomic(path, lambda f: fig.savefig(f, format=fmt, bbox_inches="tight"), argument=what)


def save_npz(path: Path, arrays: Mapping[str, Any], what: str) -> None:
    """Write ``arrays`` as an ``.npz`` at exactly ``path`` (no ``.npz`` appended), through ``write_atomic``."""
    from .._support._files import write_atomic

    named = {k: np.asarray(v) for k, v in arrays.items()}
    write_atomic(path, lambda f: np.savez(f, **named), argument=what)  # type: ignore[arg-type]


def copy_file(src: Path, path: Path, what: str) -> None:
    """Copy ``src`` to ``path`` through ``_files.write_atomic``, never through a link at ``path``."""
    import shutil

    from .._support._files import write_atomic

    def copy(f: Any) -> None:
        with open(src, "rb") as g:
            shutil.copyfileobj(g, f, 1 << 20)

    write_atomic(path, copy, argument=what)
