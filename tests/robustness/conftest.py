"""The robustness corpus's tally, printed at the end of the run: cases tried / typed errors / other."""

from __future__ import annotations

import pytest
from _outcome import FUZZ, TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY:
        tried = sum(TALLY.values())
        terminalreporter.write_line(
            f"robustness corpus: {tried} cases tried / {TALLY['typed']} typed errors / "
            f"{TALLY['documented']} documented results / {TALLY['other']} other"
        )
    if FUZZ:
        terminalreporter.write_line(
            f"robustness fuzz (hypothesis, Engine.run): {sum(FUZZ.values())} feeds tried / {FUZZ['ran']} ran / "
            f"{FUZZ['typed']} typed errors / {FUZZ['other']} other"
        )
