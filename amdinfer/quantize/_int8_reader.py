"""ONNX Runtime's side of ``Int8Quantizer``'s calibration: its quantization tools, a shape-grouped reader.

:func:`grouped_reader` (:mod:`amdinfer._support._calib_groups`'s, shared with the MIGraphX EP's calibration table)
hands ``quantize_static`` the calibration samples one shape group per calibrator pass (so samples of several
shapes calibrate in one run) and counts what it handed over, so a failure names its
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

from .._support._calib_groups import grouped_reader as _grouped_reader
from .._support._install import pip_extra
from ..errors import BackendUnavailableError

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


def grouped_reader(base: type, feeds: list[dict[str, np.ndarray]], *, progress: bool | None) -> Any:
    """:func:`amdinfer._support._calib_groups.grouped_reader` with progress logged to the ``amdinfer.quantize`` logger.

    Example:
        >>> a, b = {"x": np.zeros((1, 2), np.float32)}, {"x": np.zeros((1, 5), np.float32)}
        >>> reader = grouped_reader(object, [a, b, a], progress=False)
        >>> len(reader), reader.set_range(0, 1), [reader.get_next() is a for _ in range(2)]
        (2, None, [True, True])
    """
    return _grouped_reader(base, feeds, progress=progress, logger=log)


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
