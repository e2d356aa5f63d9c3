"""One call on a list of 64 pages: one engine batch, or sub-batches streamed through the executor? Measured, warm.

Issue 38 asks one call of 64 (``det(list of 64)``) to reach 0.8x the engine. The rule in
``amdinfer.pipeline._auto.split_size`` runs such a call as one engine batch (its items placed in parallel), because
an earlier lease measured a 4 x 16 split at 0.36x; that figure may have included cuDNN's first search for the new
batch shapes. This script measures it again with every shape warmed first, alternating the forms in rounds:

* ``one batch``: the rule as it is (``split_size`` gives ``None`` for 64 items);
* ``2 x 32`` and ``4 x 16``: ``split_size`` forced to 32 / 16 (the executor streams the sub-batches, placing k+1
  while the engine runs k);
* the engine alone on device tensors at 64, 32 and 16 rows (how the engine's own rate moves with the batch);
* one call of each form under :func:`timeline`: the busy milliseconds of placement, engine and finishing, and how much
  placement ran while the engine did (the cause of a gap: what the call waits on).

    python benchmarks/one_call_split.py --model yolov8n-doclaynet.onnx --out $OUT     # an NVIDIA GPU, torch

On the CPU a call is never split (every form runs as one batch there: a smoke run).
Prints one JSON line per measurement and a table (``one_call_split.md`` under ``--out``).
"""

# ruff: noqa: B023  (the timed lambdas run before the loop moves on)
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datapath_defaults as dd

import amdinfer
from amdinfer.pipeline.fuse import _pipeline as fused_module
from amdinfer.testing.models import batch_dynamic


def forms(batch: int) -> dict[str, int | None]:
    """The forms timed for one call of ``batch`` items: the sub-batch each forces (``None``: the rule as shipped)."""
    return {"one batch": None, f"2 x {batch // 2}": batch // 2, f"4 x {batch // 4}": batch // 4}


def forced(sub: int | None) -> Any:
    """A ``split_size`` that always answers ``sub`` (``None``: the rule as shipped)."""
    original = fused_module.split_size
    if sub is None:
        return original
    return lambda n, batch, buckets=(), fixed=None: sub if n >= 2 * sub else None


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _busy(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in _union(spans))


def _overlap(x: list[tuple[float, float]], y: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in _union(x) for c, d in _union(y))


def timeline(det: Any, call: Any) -> dict[str, Any]:
    """Where one call's time goes: the spans of the host placement (per item, any thread), the engine (its runs,
    host batches included) and the finishing (results), recorded around one call; their busy times (ms, union of
    spans), the placement that overlapped the engine, and the wall time. One batch: place then run, no overlap;
    a split call hides placement only where ``overlap`` is large."""
    spans: dict[str, list[tuple[float, float]]] = {"place": [], "engine": [], "finish": []}
    ex, eng = det._executor, det.engine
    runner = getattr(eng, "_runner", None)
    patched: list[tuple[Any, str, Any]] = []

    def wrap(obj: Any, attr: str, kind: str) -> None:
        fn = getattr(obj, attr, None)
        if fn is None:
            return

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spans[kind].append((t0, time.perf_counter()))

        patched.append((obj, attr, fn))
        setattr(obj, attr, timed)

    wrap(ex, "_place", "place")
    wrap(ex, "_finish", "finish")
    for name in ("_host_run", "run"):
        wrap(runner, name, "engine")
    if runner is None:
        wrap(eng, "_run", "engine")
    try:
        t0 = time.perf_counter()
        call()
        wall = time.perf_counter() - t0
    finally:
        for obj, attr, fn in reversed(patched):
            setattr(obj, attr, fn)
    ms = {k: round(1e3 * _busy(v), 2) for k, v in spans.items()}
    return {
        "wall_ms": round(1e3 * wall, 2),
        "busy_ms": ms,
        "place_overlapping_engine_ms": round(1e3 * _overlap(spans["place"], spans["engine"]), 2),
        "engine_calls": len(spans["engine"]),
        "idle_engine_ms": round(1e3 * wall - ms["engine"], 2),
    }


def measure(model_path: str, *, gpu: bool, rounds: int, batch: int) -> list[dict[str, Any]]:
    load: dict[str, Any] = {} if gpu else {"providers": ["CPUExecutionProvider"]}
    proto = batch_dynamic(onnx.load(model_path))
    side = int(proto.graph.input[0].type.tensor_type.shape.dim[-1].dim_value)
    images, _ = dd.pages_and_jpegs(Path(os.environ.get("TMPDIR", "/tmp")))
    items = [images[i % len(images)] for i in range(batch)]
    rows: list[dict[str, Any]] = []
    FORMS = forms(batch)
    original = fused_module.split_size
    for precision in ("fp32", "fp16"):
        engine: dict[int, float] = {}
        with amdinfer.load(proto, precision=precision, **load) as eng:
            for rows_n in (batch, batch // 2, batch // 4):
                engine[rows_n] = dd.device_engine_rate(eng, (rows_n, 3, side, side))
        det = amdinfer.yolo(proto, **({"precision": precision} if precision != "fp32" else {}), **load)
        rates: dict[str, list[float]] = {name: [] for name in FORMS}
        answers: dict[str, Any] = {}
        try:
            for name, sub in FORMS.items():  # warm every form's shapes (cuDNN's search runs on a shape's first call)
                fused_module.split_size = forced(sub)
                answers[name] = [len(r) for r in det(items)]
                det(items)
            for _ in range(rounds):
                for name, sub in FORMS.items():
                    fused_module.split_size = forced(sub)
                    rates[name].append(dd.call_rate(lambda: det(items), batch, seconds=1.5))
            lines: dict[str, Any] = {}
            for name, sub in FORMS.items():
                fused_module.split_size = forced(sub)
                lines[name] = timeline(det, lambda: det(items))
                print(json.dumps({"precision": precision, "form": name, "timeline": lines[name]}), flush=True)
        finally:
            fused_module.split_size = original
            det.close()
        same = all(a == answers["one batch"] for a in answers.values())
        for name in FORMS:
            rate = statistics.median(rates[name])
            row = {
                "precision": precision,
                "form": name,
                "pages_s": round(rate, 1),
                "rounds": [round(r, 1) for r in rates[name]],
                "engine_64": round(engine[batch], 1),
                "÷ engine": round(rate / engine[batch], 2),
                "engine_by_rows": {k: round(v, 1) for k, v in engine.items()},
                "same_box_counts": same,
                "timeline": lines.get(name),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _line(t: dict[str, Any] | None) -> str:
    if not t:
        return "-"
    b = t["busy_ms"]
    return f"{t['wall_ms']} / {b['place']} / {b['engine']} / {b['finish']} / {t['place_overlapping_engine_ms']}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the trained Ultralytics YOLOv8n export (yolov8n-doclaynet.onnx)")
    p.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--out", default=os.environ.get("OUT"))
    args = p.parse_args(argv)
    rows = measure(args.model, gpu=args.provider == "cuda", rounds=args.rounds, batch=args.batch)
    lines = [
        "| precision | form | pages/s | ÷ engine (64) | engine rows/s by batch | same boxes | one call: wall / place / "
        "engine / finish / place under engine (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['precision']} | {r['form']} | {r['pages_s']:,} | {r['÷ engine']} | "
            f"{json.dumps(r['engine_by_rows'])} | {r['same_box_counts']} | {_line(r.get('timeline'))} |"
        )
    md = "\n".join(lines) + "\n"
    print(md, flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "one_call_split.md").write_text(md)
        (Path(args.out) / "one_call_split.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
