"""Classify what one corpus case did: ``typed`` (the expected amdinfer error, located), ``documented`` (the
documented result) or ``other`` (anything else: a wrong class, an unlocated message, a bare exception)."""

from __future__ import annotations

import re
import traceback
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the corpus imports most of amdinfer: conftest.py (which imports this) stays light
    from _corpus import Case

#: kind -> count, filled by the corpus and fuzz tests of this session and printed by conftest.py.
TALLY: Counter[str] = Counter()
FUZZ: Counter[str] = Counter()


def outcome(case: Case, scratch: Path, *, setup: bool = False) -> dict[str, Any]:
    if setup and case.setup is not None:
        case.setup(scratch)
    try:
        result = case.run(scratch)
    except BaseException as exc:
        text = str(exc)
        if case.expect is None:
            return {"kind": "other", "detail": f"{type(exc).__name__}: {text}\n{traceback.format_exc()[-1500:]}"}
        if not isinstance(exc, case.expect):
            return {"kind": "other", "detail": f"expected {case.expect.__name__}, got {type(exc).__name__}: {text}"}
        if not re.search(case.match, text, flags=re.S):
            return {"kind": "other", "detail": f"{type(exc).__name__} does not match {case.match!r}: {text}"}
        return {"kind": "typed", "detail": f"{type(exc).__name__}: {text}"}
    if case.expect is not None:
        return {"kind": "other", "detail": f"expected {case.expect.__name__}, got a result: {str(result)[:300]}"}
    return {"kind": "documented", "detail": str(result)}
