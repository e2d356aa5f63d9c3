"""Per-node profile of an ONNX Runtime engine: where the time goes, and which nodes left the GPU.

The usual surprise on AMD GPUs is an operator the MIGraphX or ROCm EP does not take, which ONNX
Runtime quietly runs on the CPU (with two copies around it). :func:`profile` runs the engine's
model with ONNX Runtime's profiler and reports every node's kernel time and provider;
``report.cpu_nodes`` lists the nodes that ran on the CPU while a GPU provider was in use.

Example:
    >>> import amdinfer
    >>> from amdinfer.profile import profile
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> engine = amdinfer.load(tiny_cnn(), providers=["cpu"])
    >>> report = profile(engine, random_inputs(tiny_cnn()), runs=2)
    >>> report.by_op()[0].op_type in {"Conv", "MaxPool", "Gemm"}
    True
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._support._files import write_atomic
from ._support._progress import progress_bar
from .engines.base import Engine
from .errors import OptionError

__all__ = ["NodeTiming", "OpTiming", "ProfileReport", "profile"]


@dataclass(frozen=True)
class NodeTiming:
    """One node's mean kernel time.

    Example:
        >>> NodeTiming("conv1", "Conv", "CPUExecutionProvider", 120.0, 3).mean_us
        120.0
    """

    name: str
    op_type: str
    provider: str
    mean_us: float
    calls: int


@dataclass(frozen=True)
class OpTiming:
    """Time per operator type (summed over its nodes, mean per run).

    Example:
        >>> OpTiming("Conv", 12, 950.0, 0.8).share
        0.8
    """

    op_type: str
    nodes: int
    total_us: float
    share: float


@dataclass
class ProfileReport:
    """What :func:`profile` measured.

    Attributes:
        nodes: per-node timings, slowest first.
        providers: the session's providers, in priority order.
        runs: profiled runs.

    Example:
        >>> r = ProfileReport([NodeTiming("a", "Relu", "CPUExecutionProvider", 5.0, 1)], ["CPUExecutionProvider"], 1)
        >>> r.total_us, r.cpu_nodes
        (5.0, [])
    """

    nodes: list[NodeTiming]
    providers: list[str]
    runs: int
    notes: list[str] = field(default_factory=list)
    trace: str | None = None

    @property
    def total_us(self) -> float:
        """Sum of mean node times (µs per run)."""
        return sum(n.mean_us for n in self.nodes)

    @property
    def cpu_nodes(self) -> list[NodeTiming]:
        """Nodes that ran on the CPU although a GPU provider was in use (empty on a CPU-only session)."""
        if not self.providers or self.providers[0] == "CPUExecutionProvider":
            return []
        return [n for n in self.nodes if n.provider == "CPUExecutionProvider"]

    def by_op(self) -> list[OpTiming]:
        """Time per operator type, largest first."""
        total = self.total_us or 1.0
        acc: dict[str, list[float]] = defaultdict(list)
        for n in self.nodes:
            acc[n.op_type].append(n.mean_us)
        rows = [OpTiming(op, len(v), sum(v), sum(v) / total) for op, v in acc.items()]
        return sorted(rows, key=lambda r: -r.total_us)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {
            "providers": self.providers,
            "runs": self.runs,
            "total_us": self.total_us,
            "by_op": [vars(r) for r in self.by_op()],
            "nodes": [vars(n) for n in self.nodes],
            "cpu_nodes": [n.name for n in self.cpu_nodes],
            "notes": self.notes,
            "trace": self.trace,
        }

    def format(self, top: int = 10) -> str:
        """Text report: the ``top`` slowest nodes (time, share, provider), time per operator type, CPU nodes.

        Example:
            >>> node = NodeTiming("a", "Relu", "CPUExecutionProvider", 5.0, 1)
            >>> r = ProfileReport([node], ["CPUExecutionProvider"], 1)
            >>> print(r.format())  # doctest: +NORMALIZE_WHITESPACE
            ProfileReport(1 nodes, 0.005 ms/run, providers ['CPUExecutionProvider'])
              slowest nodes:
                node  op    provider  mean_us  share
                a     Relu  CPU           5.0  100.0%
              time per operator type:
                op    nodes  total_us  share
                Relu      1       5.0  100.0%
        """
        total = self.total_us or 1.0
        lines = [
            f"ProfileReport({len(self.nodes)} nodes, {self.total_us / 1000:.3f} ms/run, providers {self.providers})"
        ]
        shown = self.nodes[: max(0, top)]
        if shown:
            lines.append(
                f"  slowest nodes{f' ({len(shown)} of {len(self.nodes)})' if len(shown) < len(self.nodes) else ''}:"
            )
            rows = [
                [
                    n.name,
                    n.op_type,
                    n.provider.replace("ExecutionProvider", ""),
                    f"{n.mean_us:.1f}",
                    f"{100 * n.mean_us / total:.1f}%",
                ]
                for n in shown
            ]
            lines += _table(["node", "op", "provider", "mean_us", "share"], rows, right={3, 4})
        ops = self.by_op()[: max(top, 10)]
        if ops:
            lines.append("  time per operator type:")
            rows = [[r.op_type, str(r.nodes), f"{r.total_us:.1f}", f"{100 * r.share:.1f}%"] for r in ops]
            lines += _table(["op", "nodes", "total_us", "share"], rows, right={1, 2, 3})
        if self.cpu_nodes:
            names = ", ".join(f"{n.name} ({n.op_type})" for n in self.cpu_nodes[:10])
            lines.append(f"  ran on the CPU: {names}{' ...' if len(self.cpu_nodes) > 10 else ''}")
        lines += [f"  note: {n}" for n in self.notes]
        if self.trace:
            lines.append(f"  Chrome trace: {self.trace} (open in chrome://tracing or https://ui.perfetto.dev)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.format()


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "    " + "  ".join(cells).rstrip()

    return [fmt(header)] + [fmt(r) for r in rows]


def _node_events(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        events = json.load(f)
    return [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]


def _session_options(ort: Any, cfg: dict[str, Any], prefix: str | None) -> Any:
    """Session options like the engine's (``cfg``: its ``settings["session"]``), profiling to ``prefix``."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if cfg.get("intra_op_num_threads"):
        so.intra_op_num_threads = cfg["intra_op_num_threads"]
    if cfg.get("graph_optimization_level"):
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, cfg["graph_optimization_level"])
    if prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = prefix
    return so


def _node_timings(events: list[dict[str, Any]], runs: int) -> list[NodeTiming]:
    """Per-node mean times over ``runs`` runs, slowest first, from a profiled session's kernel events."""
    # Drop the new session's first run (one-time work) from every node's events.
    seen: set[str] = set()
    kept = []
    for e in events:
        if e["name"] in seen:
            kept.append(e)
        else:
            seen.add(e["name"])
    acc: dict[str, list[Any]] = {}
    for e in kept:
        name = e["name"][: -len("_kernel_time")]
        args = e.get("args", {})
        entry = acc.setdefault(name, [args.get("op_name", "?"), args.get("provider", "?"), 0.0, 0])
        entry[2] += float(e.get("dur", 0))
        entry[3] += 1
    nodes = [NodeTiming(n, op, prov, total / runs, calls) for n, (op, prov, total, calls) in acc.items()]
    nodes.sort(key=lambda n: -n.mean_us)
    return nodes


def profile(
    engine: Engine,
    feeds: Mapping[str, Any] | Any,
    *,
    runs: int = 10,
    warmup: int = 2,
    trace: str | os.PathLike[str] | None = None,
    progress: bool | None = False,
) -> ProfileReport:
    """Profile an ONNX Runtime engine's model with its providers and provider options.

    A separate profiling session is created (profiling slows every call), so ``engine`` is untouched.

    Args:
        engine: an engine from ``amdinfer.load(..., backend="ort")``.
        feeds: inputs, as for ``engine.run``.
        runs: profiled runs (node times are averaged over them).
        warmup: runs before profiling starts counting.
        trace: write ONNX Runtime's profile of the measured runs here: Chrome trace event format, for
            ``chrome://tracing`` or Perfetto. Written to a temporary file beside it and renamed over it, so a
            symbolic link at ``trace`` is replaced, never followed.
        progress: a tqdm bar over the profiled runs: ``True`` on stderr (also into a pipe), ``None`` only when
            stderr is a terminal, ``False`` (default) none.

    Raises:
        OptionError: the engine is not an ONNX Runtime engine, or ``trace`` cannot be written.

    Example:
        >>> import amdinfer
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> rep = profile(amdinfer.load(tiny_cnn(), providers=["cpu"]), random_inputs(tiny_cnn()), runs=1, warmup=0)
        >>> rep.providers
        ['CPUExecutionProvider']
    """
    if engine.info.backend != "ort":
        raise OptionError(f"engine: got backend {engine.info.backend!r}, expected an ONNX Runtime engine ('ort')")
    if runs < 1 or warmup < 0:
        raise OptionError(f"runs/warmup: got {runs}/{warmup}, expected runs >= 1 and warmup >= 0")
    import onnxruntime as ort

    checked = engine._check_feeds(feeds)  # same checks as run(), without running
    providers = list(engine.info.providers)
    opts = [engine.info.settings.get("provider_options", {}).get(p, {}) for p in providers]
    cfg = engine.info.settings.get("session", {})

    model = engine.model.to_bytes()
    with tempfile.TemporaryDirectory(prefix="amdinfer-profile-") as tmp:
        prefix = os.path.join(tmp, "prof")
        # The first profiled session absorbs one-time work (allocations, algorithm search).
        warm = ort.InferenceSession(
            model, _session_options(ort, cfg, prefix), providers=providers, provider_options=opts
        )
        for _ in range(max(1, warmup)):
            warm.run(None, checked)
        first = len(_node_events(warm.end_profiling()))
        prof = ort.InferenceSession(
            model, _session_options(ort, cfg, prefix), providers=providers, provider_options=opts
        )
        prof.run(None, checked)
        with progress_bar("amdinfer profile", total=runs, unit="run", enabled=progress) as bar:
            for _ in range(runs):
                prof.run(None, checked)
                bar.update()
        prof_file = prof.end_profiling()
        events = _node_events(prof_file)
        if trace is not None:
            # A temporary file beside ``trace``, renamed over it: a symbolic link there is replaced, not followed.
            with open(prof_file, "rb") as src:
                write_atomic(trace, lambda f: shutil.copyfileobj(src, f, 1 << 20), argument="trace")
    nodes = _node_timings(events, runs)
    notes = [] if first else ["the provider reported no per-node events (fused into one compiled graph?)"]
    return ProfileReport(nodes, providers, runs, notes, os.fspath(trace) if trace is not None else None)
