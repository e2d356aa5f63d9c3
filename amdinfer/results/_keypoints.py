"""Keypoints of a pose model (:class:`Keypoints`): ``(k, K, 3)`` x, y and visibility per detection, with
Ultralytics' forms (``xy``, ``xyn``, ``conf``) and its COCO 17-point skeleton and colours.

Example:
    >>> import numpy as np
    >>> kp = Keypoints(np.array([[[10, 20, 0.9], [30, 40, 0.1]]]), image_shape=(100, 200))
    >>> kp.xy.tolist(), kp.xyn.astype(float).round(2).tolist(), kp.conf.astype(float).round(2).tolist()
    ([[[10.0, 20.0], [30.0, 40.0]]], [[[0.05, 0.2], [0.15, 0.4]]], [[0.9, 0.1]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["KPT_COLORS", "LIMB_COLORS", "POSE_PALETTE", "SKELETON", "Keypoints"]

#: Ultralytics' pose palette (RGB).
POSE_PALETTE = np.array(
    [
        [255, 128, 0],
        [255, 153, 51],
        [255, 178, 102],
        [230, 230, 0],
        [255, 153, 255],
        [153, 204, 255],
        [255, 102, 255],
        [255, 51, 255],
        [102, 178, 255],
        [51, 153, 255],
        [255, 153, 153],
        [255, 102, 102],
        [255, 51, 51],
        [153, 255, 153],
        [102, 255, 102],
        [51, 255, 51],
        [0, 255, 0],
        [0, 0, 255],
        [255, 0, 0],
        [255, 255, 255],
    ],
    np.uint8,
)
#: The COCO 17-keypoint skeleton: pairs of keypoint indices (0-based) joined by a limb, in Ultralytics' order.
SKELETON = tuple(
    (a - 1, b - 1)
    for a, b in (
        (16, 14), (14, 12), (17, 15), (15, 13), (12, 13), (6, 12), (7, 13), (6, 7), (6, 8), (7, 9),
        (8, 10), (9, 11), (2, 3), (1, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7),
    )
)  # fmt: skip
#: RGB colour of each limb of :data:`SKELETON` and of each of the 17 keypoints (Ultralytics' choice).
LIMB_COLORS = POSE_PALETTE[[9, 9, 9, 9, 7, 7, 7, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16]]
KPT_COLORS = POSE_PALETTE[[16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9]]


class Keypoints:
    """Keypoints of each detection (``Detections.keypoints``), in pixels of ``image_shape``.

    Args:
        data: ``(k, K, 3)`` ``x, y, visibility`` (a pose model's sigmoid score) or ``(k, K, 2)`` ``x, y``.
        image_shape: ``(height, width)`` the coordinates refer to, for :attr:`xyn`.

    Attributes:
        data: ``float32 (k, K, 3)`` (or ``(k, K, 2)``).
        image_shape: ``(height, width)`` or ``None``.

    Raises:
        InputError: ``data`` is not ``(k, K, 2 or 3)``.

    Example:
        >>> Keypoints(np.zeros((2, 17, 3))).data.shape, Keypoints(np.zeros((0, 17, 3))).conf.shape
        ((2, 17, 3), (0, 17))
    """

    __slots__ = ("data", "image_shape")

    def __init__(self, data: Any, image_shape: tuple[int, int] | None = None) -> None:
        arr = np.asarray(data, np.float32)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3 or arr.shape[2] not in (2, 3):
            raise InputError(
                f"Keypoints: data: got shape {arr.shape}, expected (k, K, 3) x, y, visibility or (k, K, 2)"
            )
        self.data = np.ascontiguousarray(arr)
        self.image_shape = None if image_shape is None else (int(image_shape[0]), int(image_shape[1]))

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __repr__(self) -> str:
        return f"Keypoints({len(self)} x {self.data.shape[1]})"

    @property
    def has_visible(self) -> bool:
        """Whether there is a visibility channel (Ultralytics' ``Keypoints.has_visible``)."""
        return self.data.shape[2] == 3

    @property
    def xy(self) -> np.ndarray:
        """``float32 (k, K, 2)`` keypoint ``x, y`` in pixels (Ultralytics' ``Keypoints.xy``)."""
        return self.data[..., :2]

    @property
    def xyn(self) -> np.ndarray:
        """:attr:`xy` divided by the width (x) and height (y) of ``image_shape`` (Ultralytics' ``Keypoints.xyn``).

        Raises:
            InputError: ``image_shape`` is unknown.
        """
        if self.image_shape is None:
            raise InputError("Keypoints.xyn: got image_shape None, expected the (height, width) the keypoints refer to")
        h, w = self.image_shape
        return (self.xy / np.array([w, h], np.float32)).astype(np.float32)

    @property
    def conf(self) -> np.ndarray | None:
        """``float32 (k, K)`` visibility scores, or ``None`` without them (Ultralytics' ``Keypoints.conf``)."""
        return self.data[..., 2] if self.has_visible else None

    def select(self, index: np.ndarray) -> Keypoints:
        """The keypoints of the detections at ``index`` (int indices)."""
        return Keypoints(self.data[index], self.image_shape)
