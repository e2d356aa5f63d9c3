"""What an engine is: :class:`EngineInfo` and its short, readable repr."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from typing import Any

from ._options import EngineOptions

__all__ = ["EngineInfo"]


@dataclass
class EngineInfo:
    """What an engine really is: backend, device, providers in use, precision, timings and cache state.

    Attributes:
        backend: registry name of the backend (``"ort"``, ``"migraphx"``, ``"reference"``).
        device: where it runs, e.g. ``"cpu"``, ``"cuda:0"``, ``"rocm:0"``.
        providers: ONNX Runtime providers the session really uses (empty for other backends).
        requested_providers: the providers asked for (after ``"auto"`` expansion).
        skipped: backend or provider name -> why it was passed over.
        precision: ``"fp32"``, ``"fp16"``, ``"int8"``, ...
        load_seconds: wall time of the whole load (reading, checking, compiling).
        compile_seconds: time spent building the session/program (0 on a cache hit for MIGraphX).
        cache_hit: whether a compiled artefact came from the cache.
        target: the backend's target (MIGraphX ``"gpu"``/``"ref"``), if any.
        runtime_version: version of the runtime library.
        settings: the options really applied (provider options, session options, tuning knobs).
        notes: anything the user should know (IR lowered, options that could not be honoured...).
        options: the backend's option record the engine was built with (:class:`~amdinfer.engines.EngineOptions`;
            set by the engine); the repr shows the options not at their default.

    Example:
        >>> EngineInfo(backend="ort", device="cpu").skipped
        {}
    """

    backend: str
    device: str = "cpu"
    providers: list[str] = field(default_factory=list)
    requested_providers: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    load_seconds: float = 0.0
    compile_seconds: float = 0.0
    cache_hit: bool = False
    target: str | None = None
    runtime_version: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    options: EngineOptions | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy (the option record as :meth:`EngineOptions.describe` shows it).

        Example:
            >>> EngineInfo(backend="x", options=EngineOptions(device=1)).to_dict()["options"]["device"]
            1
        """
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "options"}
        out["options"] = None if self.options is None else self.options.describe()
        return out

    def short_skipped(self, width: int = 100) -> dict[str, str]:
        """:attr:`skipped` with each reason cut to its first line or sentence (at most ``width`` characters).

        The full reasons stay in :attr:`skipped` (and ``amdinfer doctor`` prints them); this is what the
        command line and the demo show.

        Example:
            >>> info = EngineInfo(backend="ort", skipped={"migraphx": "cannot import migraphx. Install it: ..."})
            >>> info.short_skipped()
            {'migraphx': 'cannot import migraphx'}
        """
        return {name: _first_sentence(why, width) for name, why in self.skipped.items()}

    def __repr__(self) -> str:
        compile_part = f"compile {self.compile_seconds:.3f} s, cache {'hit' if self.cache_hit else 'miss'}"
        rows = [
            ("backend", self.backend + (f" (target {self.target})" if self.target else "")),
            ("device", self.device),
            ("providers", ", ".join(self.providers) or "-"),
            ("precision", self.precision),
            ("load", f"{self.load_seconds:.3f} s ({compile_part})"),
            ("runtime", self.runtime_version or "-"),
        ]
        if self.requested_providers and self.requested_providers != self.providers:
            rows.append(("requested", ", ".join(self.requested_providers)))
        rows += [("skipped", f"{k}: {v}") for k, v in self.short_skipped().items()]
        rows += [("note", _first_sentence(n, 100)) for n in self.notes]
        if self.options is not None:
            given = self.options.describe(changed_only=True)
            rows.append(("options", ", ".join(f"{k}={v!r}" for k, v in given.items()) or "defaults"))
        if self.settings:
            rows.append(("settings", ", ".join(sorted(self.settings)) + " (see .settings)"))
        return "EngineInfo(\n" + "\n".join(f"  {k:<10} {v}" for k, v in rows) + "\n)"


def _first_sentence(text: str, width: int) -> str:
    """The first line of ``text`` up to its first sentence end, cut to ``width`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    for stop in (". ", "; "):
        if stop in line:
            line = line.split(stop, 1)[0]
    line = line.rstrip(".:; ")
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"
