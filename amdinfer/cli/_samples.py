"""Samples for calibration and evaluation: a folder of images or an ``.npz``; ``--mean``/``--std`` for images.

Images are decoded as RGB (or L for one channel), resized to the input's H x W, divided by 255 to [0, 1]
and then normalized per channel, ``(x / 255 - mean) / std``, as torchvision's ``ToTensor`` followed by
``Normalize(mean, std)`` does; the result is NCHW in the input's dtype. Re-exported by
:mod:`amdinfer.cli._common`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ._feeds import load_npz

__all__ = ["IMAGE_SUFFIXES", "Normalization", "add_normalization_args", "load_samples", "parse_normalization"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")

#: ``(mean, std)`` per channel after scaling to [0, 1]; ``None`` for either: not given.
Normalization = tuple[tuple[float, ...] | None, tuple[float, ...] | None]


def add_normalization_args(g: Any) -> None:
    """``--mean`` and ``--std`` (for image folders given as calibration or evaluation data)."""
    g.add_argument(
        "--mean",
        metavar="R,G,B",
        help="image folders: subtract this per channel after scaling pixels to [0, 1] (1 value or one per channel)",
    )
    g.add_argument(
        "--std",
        metavar="R,G,B",
        help="image folders: then divide by this per channel (values > 0); as torchvision's Normalize",
    )


def _numbers(text: str, flag: str) -> tuple[float, ...]:
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise OptionError(f"{flag}: got {text!r}, expected numbers separated by commas (0.485,0.456,0.406)") from None
    if not all(math.isfinite(v) for v in values):
        raise OptionError(f"{flag}: got {text!r}, expected finite numbers")
    return values


def parse_normalization(args: argparse.Namespace) -> Normalization:
    """``--mean``/``--std`` as numbers (``None`` where not given).

    Raises:
        OptionError: not numbers, not finite, or a ``--std`` value that is not > 0.

    Example:
        >>> parse_normalization(argparse.Namespace(mean="0.485,0.456,0.406", std="0.5"))
        ((0.485, 0.456, 0.406), (0.5,))
        >>> parse_normalization(argparse.Namespace(mean=None, std="0.2,0"))
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: --std: got '0.2,0', expected values > 0 (pixels are divided by them)
    """
    mean_text, std_text = getattr(args, "mean", None), getattr(args, "std", None)
    mean = _numbers(mean_text, "--mean") if mean_text is not None else None
    std = _numbers(std_text, "--std") if std_text is not None else None
    if std is not None and not all(v > 0 for v in std):
        raise OptionError(f"--std: got {std_text!r}, expected values > 0 (pixels are divided by them)")
    return mean, std


def _check_channels(norm: Normalization, channels: int, what: str, path: str) -> None:
    for flag, values in (("--mean", norm[0]), ("--std", norm[1])):
        if values is not None and len(values) not in (1, channels):
            raise OptionError(
                f"{flag}: got {len(values)} values {list(values)} for the {channels}-channel images of {what} "
                f"{path!r}, expected 1 or {channels}"
            )


def load_samples(
    path: str,
    specs: Sequence[Any],
    shapes: Mapping[str, tuple[int, ...]],
    what: str,
    normalization: Normalization = (None, None),
) -> list[Any]:
    """Samples from a folder of images (resized to the input's H x W, ``(x / 255 - mean) / std``, NCHW) or an ``.npz``.

    An ``.npz`` holds one array per input name in the one tensor calibration layout of
    :func:`amdinfer.quantize._data_rows.tensor_rows` (``Int8Quantizer`` takes the same): axis 0 indexes samples; a
    row of the model's rank keeps its batch axis (``(samples, 1, 3, H, W)``), a row of one less gets one
    (``(samples, 3, H, W)``, each sample a batch of one). Any other rank is refused naming the input and the shapes
    expected.

    Raises:
        InputError: an empty folder, a model that images cannot feed, arrays that do not match the inputs.
        OptionError: ``normalization`` given for an ``.npz``, or with a count other than 1 or the channels.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise InputError(f"{what}: folder {path!r} has no images ({', '.join(IMAGE_SUFFIXES)})")
        if len(specs) != 1:
            raise InputError(f"{what}: images feed one input, the model has {[s.name for s in specs]}; use an .npz")
        spec = specs[0]
        shape = shapes[spec.name]
        if len(shape) != 4 or shape[1] not in (1, 3):
            raise InputError(f"{what}: images need an NCHW input with 1 or 3 channels; input {spec.name!r} is {shape}")
        _check_channels(normalization, shape[1], what, path)
        from ..preprocess import HwcToChw, LoadImage, Normalize, Resize

        mode = "RGB" if shape[1] == 3 else "L"
        mean, std = normalization
        stages = [
            LoadImage(mode),
            Resize((shape[2], shape[3])),
            Normalize(mean=mean, std=std, scale=1 / 255.0, dtype=spec.dtype),
            HwcToChw(),
        ]
        out = []
        for f in files:
            x: Any = str(f)
            for stage in stages:
                x = stage(x)
            arr = getattr(x, "data", x)
            out.append({spec.name: np.ascontiguousarray(np.asarray(arr)[None])})
        return out
    if normalization != (None, None):
        raise OptionError(
            f"--mean/--std: apply to image folders; {what} {path!r} is an .npz, whose arrays are used as they are"
        )
    arrays = load_npz(path, what)
    names = [s.name for s in specs]
    if sorted(arrays) != sorted(names):
        if len(arrays) == 1 and len(names) == 1:
            arrays = {names[0]: next(iter(arrays.values()))}
        else:
            raise InputError(f"{what}: {path!r} has arrays {sorted(arrays)}, expected one per input {names}")
    n = {k: v.shape[0] if v.ndim else 0 for k, v in arrays.items()}
    if len(set(n.values())) != 1 or 0 in n.values():
        raise InputError(f"{what}: arrays of {path!r} disagree on the sample count (axis 0): {n}")
    from ..quantize._data_rows import check_rows, tensor_rows

    ranks = {s.name: len(s.shape) for s in specs}
    check_rows(tensor_rows(arrays, what), {s.name: tuple(s.shape) for s in specs}, what)
    count = next(iter(n.values()))
    return [
        {k: np.ascontiguousarray(v[i] if v.ndim == ranks[k] + 1 else v[i : i + 1]) for k, v in arrays.items()}
        for i in range(count)
    ]
