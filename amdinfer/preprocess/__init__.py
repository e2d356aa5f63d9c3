"""Preprocessing stages: image decoding, geometry, colour order, layout, normalization, dtype, batching.

Each stage checks its parameters when built and calls a NumPy kernel of :mod:`amdinfer.reference` (or a
one-line NumPy expression) on one image. Geometric stages (:class:`Letterbox`, :class:`Resize`,
:class:`CenterCrop`) take uint8 ``(H, W, C)`` or ``(H, W)`` images (:func:`check_image`, the rule a fused
graph's input follows too; other dtypes are an ``InputError`` saying how to convert) and record in the
sample's metadata how they moved pixels, so :class:`~amdinfer.postprocess.ScaleBoxes` can map boxes back to
the original image.
The stages live in private modules (``_decode``, ``_geometry``, ``_pixels``, ``_batch``, ``_common``);
this package re-exports them. ``_image_header`` reads an encoded image's declared size before it is decoded
(:func:`read_image_header`, :func:`check_image_pixels`): the pixel limit of :class:`LoadImage` and the server.

Example:
    >>> import numpy as np
    >>> from amdinfer.preprocess import Letterbox, HwcToChw, Normalize
    >>> sample = Letterbox(64)(np.zeros((48, 32, 3), np.uint8))
    >>> sample.data.shape, sample.meta["orig_shape"], sample.meta["letterbox"]["pad"]
    ((64, 64, 3), (48, 32), (10.5, 0.0))
    >>> HwcToChw()(Normalize(scale=1 / 255)(sample)).data.shape
    (3, 64, 64)
"""

from __future__ import annotations

from ._batch import stack
from ._common import _hw as _hw  # re-exported: recipes.py and pipeline.py use it
from ._common import check_image, opencv_available
from ._decode import LoadImage
from ._geometry import CenterCrop, Letterbox, LetterboxGeometry, PadWidth, Resize, letterbox_geometry, letterbox_into
from ._image_header import DEFAULT_MAX_IMAGE_PIXELS, ImageHeader, check_image_pixels, read_image_header
from ._pixels import BgrToRgb, Cast, HwcToChw, Normalize

__all__ = [
    "DEFAULT_MAX_IMAGE_PIXELS",
    "BgrToRgb",
    "Cast",
    "CenterCrop",
    "HwcToChw",
    "ImageHeader",
    "Letterbox",
    "LetterboxGeometry",
    "LoadImage",
    "Normalize",
    "PadWidth",
    "Resize",
    "check_image",
    "check_image_pixels",
    "letterbox_geometry",
    "letterbox_into",
    "opencv_available",
    "read_image_header",
    "stack",
]
