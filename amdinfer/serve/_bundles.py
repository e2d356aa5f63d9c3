"""Bundles in the server: a folder written by ``amdinfer compile --bundle`` is served as it was built.

``amdinfer serve DIR`` on a bundle folder, a repository's ``NAME/`` holding a bundle, and Triton's ``NAME/<version>/``
holding one all load it with :func:`amdinfer.load` (:func:`~amdinfer.bundle.load_bundle`: checked first, nothing
compiled); the manifest's batch buckets become the server's buckets, its largest bucket the batch limit, and
shapes outside the buckets follow the bundle's ``on_new_shape`` (``pad`` or ``error``). Buckets other than the
bundle's are refused: a bundle is not recompiled for them.

Example:
    >>> bundle_folder(Path("/nonexistent/manifest.json")) is None
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..bundle import MANIFEST, is_bundle, read_manifest
from ..errors import OptionError

__all__ = ["bundle_batching", "bundle_folder"]


def bundle_folder(path: Any) -> Path | None:
    """The bundle folder ``path`` names (the folder, or its ``manifest.json``), else ``None``."""
    if not isinstance(path, (str, Path)):
        return None
    p = Path(path)
    if p.name == MANIFEST and is_bundle(p.parent):
        return p.parent
    return p if is_bundle(p) else None


def bundle_batching(folder: Path, batch_buckets: Sequence[int] | None = None, where: str = "") -> dict[str, Any]:
    """How the server batches for a bundle: ``{"batch_buckets": the manifest's, "max_batch_size": the largest bucket
    (for shape buckets, the smallest batch they hold)}``.

    Raises:
        BundleError: an unreadable or edited manifest.
        OptionError: ``batch_buckets`` given and other than the bundle's.

    Example:
        >>> import tempfile
        >>> from amdinfer.bundle import write_bundle
        >>> from amdinfer.testing.models import tiny_cnn
        >>> folder = write_bundle(tiny_cnn(), tempfile.mkdtemp() + "/b", batch_buckets=[1, 4])
        >>> bundle_batching(folder)
        {'batch_buckets': (1, 4), 'max_batch_size': 4}
        >>> bundle_batching(folder, [8], "models.toml: [models.b]")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: models.toml: [models.b]: batch_buckets [8], but the bundle ... for [1, 4]...
    """
    data = read_manifest(folder)
    buckets = tuple(int(b) for b in data.get("batch_buckets") or ())
    if batch_buckets and tuple(int(b) for b in batch_buckets) != buckets:
        raise OptionError(
            f"{where + ': ' if where else ''}batch_buckets {list(batch_buckets)}, but the bundle {folder} was built "
            f"for {list(buckets) or 'shape buckets'} (a bundle is served as built); drop batch_buckets, or rebuild "
            f"it: {data.get('rebuild')}"
        )
    if buckets:
        rows = max(buckets)
    else:  # shape buckets: a batch of more rows than every bucket holds would be refused or padded
        rows = min(_rows(b["shapes"]) for b in data["buckets"])
    return {"batch_buckets": buckets, "max_batch_size": rows}


def _rows(shapes: dict[str, Sequence[int]]) -> int:
    return min((int(s[0]) for s in shapes.values() if len(s)), default=1)
