"""Progress bars for long work: tqdm on a terminal's stderr when installed, nothing otherwise.

Example:
    >>> from amdinfer._progress import progress_bar
    >>> with progress_bar("timing", total=3, enabled=False) as bar:
    ...     for _ in range(3):
    ...         bar.update()
    >>> bar.count
    3
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


class _Bar:
    """A counter that drives a tqdm bar when there is one."""

    def __init__(self, desc: str, total: float | None, unit: str, enabled: bool) -> None:
        self.desc, self.total, self.unit, self.enabled = desc, total, unit, enabled
        self.count: float = 0
        self._bar: Any = None

    def __enter__(self) -> _Bar:
        # tqdm's disable=None turns the bar off when stderr is not a terminal (pipes, CI logs, tests).
        if self.enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return self
            self._bar = tqdm(
                total=self.total, desc=self.desc, unit=self.unit, file=sys.stderr, leave=False, disable=None
            )
        return self

    def update(self, n: float = 1) -> None:
        """Count ``n`` more."""
        self.count += n
        if self._bar is not None:
            self._bar.update(n)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def progress_bar(desc: str, total: float | None = None, *, unit: str = "it", enabled: bool = True) -> _Bar:
    """A context manager with ``update(n)``: a tqdm bar on a terminal, silent elsewhere or when disabled."""
    return _Bar(desc, total, unit, enabled)
