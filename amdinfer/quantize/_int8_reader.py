"""ONNX Runtime's side of ``Int8Quantizer``'s calibration: its quantization tools, a shape-grouped reader.

:func:`grouped_reader` hands ``quantize_static`` the calibration samples one shape group per calibrator pass
(so samples of several shapes calibrate in one run) and counts what it handed over, so a failure names its
sample; :func:`_ort_prints_to_log` sends the calibrators' progress prints to the debug log.

Example:
    >>> import numpy as np
    >>> feeds = [{"x": np.zeros((1, 2), np.float32)}, {"x": np.zeros((1, 5), np.float32)}]
    >>> len(grouped_reader(object, feeds, progress=False))
    2
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._install import pip_extra
from ..errors import BackendUnavailableError
from ._data import Progress, shape_groups

__all__ = ["grouped_reader"]

log = logging.getLogger("amdinfer.quantize")


def _import_quantization() -> Any:
    try:
        from onnxruntime import quantization
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        fix = (
            f"pip install {missing} (this onnxruntime's quantization tools import it)"
            if missing and not missing.startswith("onnxruntime")
            else pip_extra("cpu")
        )
        raise BackendUnavailableError(
            f"Int8Quantizer needs onnxruntime.quantization, which cannot be imported ({exc}); {fix}",
            backend="ort",
            cause=str(exc),
        ) from exc
    return quantization


def grouped_reader(base: type, feeds: list[dict[str, np.ndarray]], *, progress: bool) -> Any:
    """A ``base`` (ONNX Runtime's ``CalibrationDataReader``) over ``feeds`` in groups of one shape.

    ``len(reader)`` is the number of groups and ``set_range(k, k + 1)`` selects group ``k``, which is how
    ``quantize_static`` walks a reader with ``extra_options={"CalibStridedMinMax": 1}``: one
    ``collect_data`` call per group. ONNX Runtime's histogram calibrators stack what one call collects, so
    samples of several shapes (text lines of several widths, pages of several sizes, for a model with dynamic
    axes) calibrate in one run; min/max ranges and histograms merge across the calls.

    ``handed`` is one more than the index (in ``feeds``) of the sample ONNX Runtime got last, 0 before the
    first; ``done`` is true once it has been told that the current group has no more samples (so a failure
    then is not that sample's).

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
            self._bar: Progress | None = Progress("amdinfer: calibrating int8", len(feeds), enabled=progress)
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


@contextlib.contextmanager
def _ort_prints_to_log() -> Iterator[None]:
    """ONNX Runtime's histogram calibrators print progress to stdout; send it to the debug log instead."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    text = buf.getvalue().strip()
    if text:
        log.debug("onnxruntime.quantization: %s", text)


def _ort_version() -> str:
    try:
        import onnxruntime

        return str(onnxruntime.__version__)
    except ImportError:  # pragma: no cover
        return "none"
