"""``Int8Quantizer``'s calibration data: read once, checked once per model, shared with mixed-precision copies.

:class:`CalibrationData` keeps the samples after ``preprocess`` (a one-shot iterable is read once; one that
failed is not read again: the same error is raised) and their feed dicts per model input spec, so that a
quantizer and the copies that mixed-precision search makes of it read the data once; it also holds the
scratch folder where ONNX Runtime keeps calibrated ranges between those copies' runs.

Example:
    >>> import numpy as np
    >>> from amdinfer.testing.models import tiny_cnn
    >>> data = CalibrationData()
    >>> items = data.items([np.zeros((3, 32, 32), np.float32)], preprocess=None, max_samples=None, progress=False)
    >>> [f["input"].shape for f in data.feeds(tiny_cnn(), items=lambda: items, input_name=None)]
    [(1, 3, 32, 32)]
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AmdinferError, InputError, StageError
from ..model import ModelSource
from ._data import check_rows, input_dims, input_specs, materialize, to_feeds

__all__ = ["CalibrationData"]


class CalibrationData:
    """State shared by a quantizer and its mixed-precision copies: the data, a scratch folder for ranges."""

    def __init__(self) -> None:
        self.items_read: list[Any] | None = None
        self.read_error: AmdinferError | None = None  # a one-shot iterable that failed is not read again
        self.feeds_by_spec: dict[str, list[dict[str, np.ndarray]]] = {}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def scratch(self) -> Path:
        """A folder that lives as long as this object (ONNX Runtime's calibrated ranges)."""
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="amdinfer-int8-")
        return Path(self._tmp.name)

    def items(
        self,
        calibration: Iterable[Any],
        *,
        preprocess: Sequence[Callable[[Any], Any]] | None,
        max_samples: int | None,
        progress: bool | None,
    ) -> list[Any]:
        """The samples of ``calibration`` after ``preprocess``, read on the first call and kept."""
        if self.read_error is not None:
            raise self.read_error
        if self.items_read is None:
            try:
                self.items_read = materialize(
                    calibration,
                    what="calibration",
                    preprocess=preprocess,
                    max_samples=max_samples,
                    progress=progress,
                )
            except (InputError, StageError) as exc:  # the data's fault: reading again would not fix it
                self.read_error = exc
                raise
        return self.items_read

    def feeds(
        self, model: Any, *, items: Callable[[], list[Any]], input_name: str | None
    ) -> list[dict[str, np.ndarray]]:
        """The samples that ``items()`` gives as checked feed dicts for ``model``, kept per input spec."""
        proto = ModelSource.from_any(model, check=False).proto
        key = repr(sorted((name, str(dtype), rank) for name, dtype, rank in input_specs(proto)))
        if key not in self.feeds_by_spec:
            samples = items()
            check_rows(samples, input_dims(proto), "calibration")
            self.feeds_by_spec[key] = to_feeds(samples, proto, what="calibration", input_name=input_name, finite=True)
        return self.feeds_by_spec[key]
