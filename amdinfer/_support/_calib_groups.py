"""Calibration samples of several shapes: grouping by shape, and a reader that hands ONNX Runtime one group per pass.

ONNX Runtime's histogram calibrators (entropy, percentile) stack the outputs of the samples one
``collect_data`` call collects, so samples of several shapes (text-line crops of several widths, pages of
several sizes, for a model with dynamic axes) go in one call per shape group; min/max ranges and histograms
merge across the calls. Both :mod:`amdinfer.quantize` (``Int8Quantizer``) and the engines (the MIGraphX EP's
int8 calibration table) use this module, which sits below both.

Example:
    >>> import numpy as np
    >>> a, b = np.zeros((1, 2), np.float32), np.zeros((1, 5), np.float32)
    >>> shape_groups([{"x": a}, {"x": b}, {"x": a}])
    [[0, 2], [1]]
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ._progress import _Bar

__all__ = ["grouped_reader", "shape_groups"]


def shape_groups(feeds: Sequence[Mapping[str, np.ndarray]]) -> list[list[int]]:
    """The indices of ``feeds`` grouped by the shapes of their arrays, groups in order of their first sample.

    ONNX Runtime's histogram calibrators (entropy, percentile) stack the outputs of the samples they collect in
    one call, so each call gets one group; their histograms merge across calls (text-line crops of several
    widths, pages of several sizes calibrate one model with dynamic axes).

    Example:
        >>> a, b = np.zeros((1, 3, 48, 96), np.float32), np.zeros((1, 3, 48, 160), np.float32)
        >>> shape_groups([{"x": a}, {"x": b}, {"x": a}])
        [[0, 2], [1]]
    """
    groups: dict[Any, list[int]] = {}
    for i, feed in enumerate(feeds):
        groups.setdefault(tuple(sorted((k, v.shape) for k, v in feed.items())), []).append(i)
    return list(groups.values())


def grouped_reader(
    base: type,
    feeds: list[dict[str, np.ndarray]],
    *,
    progress: bool | None,
    logger: logging.Logger | None = None,
) -> Any:
    """A ``base`` (ONNX Runtime's ``CalibrationDataReader``) over ``feeds`` in groups of one shape.

    ``len(reader)`` is the number of groups and ``set_range(k, k + 1)`` selects group ``k``, which is how
    ``quantize_static`` walks a reader with ``extra_options={"CalibStridedMinMax": 1}``: one
    ``collect_data`` call per group (a caller driving a calibrator itself does the same). ONNX Runtime's
    histogram calibrators stack what one call collects, so samples of several shapes calibrate in one run;
    min/max ranges and histograms merge across the calls.

    ``handed`` is one more than the index (in ``feeds``) of the sample ONNX Runtime got last, 0 before the
    first; ``done`` is true once it has been told that the current group has no more samples (so a failure
    then is not that sample's). ``progress`` drives a bar over the samples (``None``: only on a terminal),
    logged to ``logger`` when tqdm is not installed.

    Example:
        >>> a, b = {"x": np.zeros((1, 2), np.float32)}, {"x": np.zeros((1, 5), np.float32)}
        >>> reader = grouped_reader(object, [a, b, a], progress=False)
        >>> len(reader)
        2
        >>> reader.set_range(1, 2); reader.get_next()["x"].shape, reader.handed, reader.get_next(), reader.done
        ((1, 5), 2, None, True)
        >>> reader.set_range(0, 1); [reader.get_next() is a for _ in range(2)], reader.handed
        ([True, True], 3)
    """
    groups = shape_groups(feeds)

    class _Reader(base):  # type: ignore[valid-type, misc]
        def __init__(self) -> None:
            self._order: Iterator[int] = iter(range(len(feeds)))  # without set_range: every sample in order
            self._bar: _Bar | None = _Bar("amdinfer: calibrating int8", len(feeds), "sample", progress, logger)
            self._bar.__enter__()
            self._given = 0
            self.done = False
            self.handed = 0

        def set_range(self, start_index: int, end_index: int) -> None:
            self._order = iter([i for g in groups[start_index:end_index] for i in g])
            self.done = False

        def get_next(self) -> dict[str, np.ndarray] | None:
            i = next(self._order, None)
            if i is None:
                self.done = True
                if self._given == len(feeds) and self._bar is not None:
                    self._bar.__exit__(None, None, None)
                    self._bar = None
                return None
            self.handed = i + 1
            self._given += 1
            if self._bar is not None:
                self._bar.update()
            return feeds[i]

        def __len__(self) -> int:
            return len(groups)

    return _Reader()
