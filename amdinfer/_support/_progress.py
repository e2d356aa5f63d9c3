"""Progress bars for long work: tqdm on a terminal's stderr, nothing in pipes, logs and CI.

One rule decides whether a bar is drawn (:func:`show_progress`): an explicit ``progress=True``/``False``
wins; left at ``None`` a bar is drawn only when stderr is a terminal. A bar that is asked for where tqdm is
not installed becomes a line on the given logger every ~10% (or nothing without a logger).

Example:
    >>> from amdinfer._support._progress import progress_bar
    >>> with progress_bar("timing", total=3, enabled=False) as bar:
    ...     for _ in range(3):
    ...         bar.update()
    >>> bar.count
    3
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

__all__ = ["check_progress", "progress_bar", "show_progress"]


def show_progress(progress: bool | None = None) -> bool:
    """Whether to draw a progress bar: ``progress`` when given, else whether stderr is a terminal.

    ``None`` keeps bars out of pipes, log files, CI and Jupyter (whose stderr is not a terminal; pass
    ``progress=True`` there for tqdm's notebook widget).

    Example:
        >>> show_progress(True), show_progress(False)
        (True, False)
        >>> import io, sys
        >>> from unittest import mock
        >>> with mock.patch.object(sys, "stderr", io.StringIO()):
        ...     show_progress()
        False
    """
    if progress is not None:
        return bool(progress)
    stream = sys.stderr
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # a closed or replaced stream
        return False


def check_progress(value: Any, name: str = "progress") -> bool | None:
    """``value`` if it is ``True``, ``False`` or ``None`` (the terminal decides), else :class:`OptionError`.

    Example:
        >>> check_progress(None) is None, check_progress(False)
        (True, False)
    """
    if value is None or isinstance(value, bool):
        return value
    from ..errors import OptionError

    raise OptionError(f"{name}: got {value!r}, expected True, False or None (a bar only when stderr is a terminal)")


class _Bar:
    """A counter that drives a tqdm bar (or log lines) when :func:`show_progress` says so."""

    def __init__(
        self, desc: str, total: float | None, unit: str, enabled: bool | None, logger: logging.Logger | None
    ) -> None:
        self.desc, self.total, self.unit, self.enabled = desc, total, unit, enabled
        self.count: float = 0
        self._log = logger
        self._bar: Any = None
        self._logging = False
        self._next_log = 0.1
        self._t0 = time.perf_counter()

    def __enter__(self) -> _Bar:
        if not show_progress(self.enabled):
            return self
        try:
            from tqdm.auto import tqdm
        except ImportError:
            if self._log is not None:
                self._logging = True
                shown = self.total if self.total is not None else "?"
                self._log.info("%s: started (%s %ss)", self.desc, shown, self.unit)
            return self
        self._bar = tqdm(
            total=self.total, desc=self.desc, unit=self.unit, file=sys.stderr, leave=False, bar_format=self.format()
        )
        return self

    def format(self) -> str | None:
        """tqdm's ``bar_format`` for a bar that counts seconds (``unit="s"``): ``4.2/6.0 s`` with one decimal,
        not tqdm's ``4.219196839999995/6.0``; ``None`` (tqdm's own) for counts.

        Example:
            >>> _Bar("bench", 6.0, "s", False, None).format()
            '{l_bar}{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}]'
            >>> _Bar("bench", 50, "call", False, None).format() is None
            True
        """
        if self.unit != "s":
            return None
        return "{l_bar}{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}]"

    def update(self, n: float = 1) -> None:
        """Count ``n`` more."""
        self.count += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._logging and self._log is not None and self.total:
            frac = self.count / self.total
            if frac >= self._next_log or self.count == self.total:
                self._log.info("%s: %d/%d (%.0f%%)", self.desc, self.count, self.total, 100 * frac)
                while self._next_log <= frac:
                    self._next_log += 0.1

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._logging and self._log is not None:
            self._logging = False
            self._log.info("%s: %d %ss in %.1f s", self.desc, self.count, self.unit, time.perf_counter() - self._t0)


def progress_bar(
    desc: str,
    total: float | None = None,
    *,
    unit: str = "it",
    enabled: bool | None = None,
    logger: logging.Logger | None = None,
) -> _Bar:
    """A context manager with ``update(n)``: a tqdm bar where :func:`show_progress` allows one.

    Args:
        desc: what is being counted.
        total: the expected count, if known.
        unit: what one count is (``"sample"``, ``"layer"``, ``"run"``): tqdm shows ``<unit>/s``.
        enabled: ``True``/``False`` force the bar on/off; ``None`` draws it only on a terminal.
        logger: where a bar that is on goes when tqdm is not installed (INFO lines every ~10%).
    """
    return _Bar(desc, total, unit, enabled, logger)
