"""What the recipes' ``__call__`` accepts: one image, or a list, a glob or a folder of them.

:func:`expand` turns what the caller passed into the items a pipeline runs and says whether the answer is one
result or a list. It reads nothing but names: a glob lists its matches, a folder its own files with a known
image suffix; decoding stays with ``LoadImage`` (and its errors, which name the path).

Example:
    >>> import numpy as np
    >>> items, many = expand(np.zeros((2, 2, 3), np.uint8))
    >>> len(items), many
    (1, False)
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["IMAGE_SUFFIXES", "expand"]

#: The suffixes (lower case) a folder's files must have to be taken as images.
IMAGE_SUFFIXES = (".bmp", ".jpeg", ".jpg", ".pbm", ".pgm", ".png", ".ppm", ".tif", ".tiff", ".webp")
_MAGIC = ("*", "?", "[")


def expand(source: Any) -> tuple[list[Any], bool]:
    """The items named by ``source`` and whether they answer as a list.

    * a numpy array, a Pillow image, encoded ``bytes``, or a path of a file: one item (``False``);
    * a folder (``str`` or :class:`~pathlib.Path`): its files with a suffix in :data:`IMAGE_SUFFIXES` (any case),
      sorted by name, not its subfolders and not other files (a list);
    * a glob (a ``str`` with ``*``, ``?`` or ``[`` that is not itself an existing path; ``**`` recurses): its
      matches that are not folders, sorted (a list);
    * a ``list`` or ``tuple`` of the above: each one's items in order, folders and globs expanded in place (a
      list, empty for an empty list).

    Raises:
        InputError: a folder or glob that gives no image (naming it, and what it holds), or a list inside a
            list.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> for name in ("b.png", "a.JPG", "notes.txt"):
        ...     _ = (d / name).write_bytes(b"")
        >>> [pathlib.Path(p).name for p in expand(d)[0]]
        ['a.JPG', 'b.png']
        >>> [pathlib.Path(p).name for p in expand(str(d / "*.png"))[0]]
        ['b.png']
        >>> try:
        ...     expand(str(d / "*.gif"))
        ... except InputError as exc:
        ...     print(str(exc).replace(str(d), "D"))
        source: the glob 'D/*.gif' matched no file, expected at least one image
    """
    if isinstance(source, (list, tuple)):
        items: list[Any] = []
        for i, entry in enumerate(source):
            if isinstance(entry, (list, tuple)):
                raise InputError(
                    f"source[{i}]: got a {type(entry).__name__} inside a list, expected an image, a path, a glob or "
                    "a folder (flatten the list)"
                )
            items += _one(entry)[0]
        return items, True
    return _one(source)


def _one(source: Any) -> tuple[list[Any], bool]:
    if not isinstance(source, (str, os.PathLike)):
        return [source], False
    path = Path(os.fspath(source))
    if path.is_dir():
        return _folder(path), True
    if isinstance(source, str) and not path.exists() and any(c in source for c in _MAGIC):
        return _glob(source), True
    return [source], False


def _folder(path: Path) -> list[str]:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        count = sum(1 for _ in path.iterdir())
        raise InputError(
            f"source: the folder {str(path)!r} holds no image file ({count} entries, none a file ending in "
            f"{', '.join(IMAGE_SUFFIXES)}), expected at least one"
        )
    return [str(p) for p in files]


def _glob(pattern: str) -> list[str]:
    matches = sorted(m for m in glob.glob(pattern, recursive=True) if not os.path.isdir(m))
    if not matches:
        raise InputError(f"source: the glob {pattern!r} matched no file, expected at least one image")
    return matches
