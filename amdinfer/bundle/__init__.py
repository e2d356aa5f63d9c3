"""Deployable bundles: compile once on a build machine, ship one folder, load it elsewhere without compiling.

:func:`write_bundle` (``amdinfer compile MODEL --bundle DIR --batch 1,8,32``) writes the backend's compiled form
per shape bucket, golden inputs and outputs, and a ``manifest.json`` holding the source model's hash, the versions,
providers, machine, buckets, precision and the hash of every file. :func:`amdinfer.load` on the folder
(:func:`load_bundle`) checks all of it first and refuses a tampered or incompatible bundle with a
:class:`~amdinfer.errors.BundleError` naming what differs and the command that rebuilds it. See ``docs/deploy.md``.

Example:
    >>> import tempfile, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> folder = write_bundle(tiny_cnn(), tempfile.mkdtemp() + "/bundle", batch_buckets=[1, 4])
    >>> is_bundle(folder), sorted(p.name for p in folder.iterdir())
    (True, ['golden', 'manifest.json', 'ort'])
    >>> amdinfer.load(folder).info.settings["bundle"]["buckets"]
    ['b1', 'b4']
"""

from __future__ import annotations

from ._manifest import FORMAT, MANIFEST, read_manifest
from ._open import bundled_model, is_bundle, load_bundle
from ._write import rebuild_command, write_bundle

__all__ = [
    "FORMAT",
    "MANIFEST",
    "bundled_model",
    "is_bundle",
    "load_bundle",
    "read_manifest",
    "rebuild_command",
    "write_bundle",
]
