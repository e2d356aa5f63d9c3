"""`amdinfer bench` against a plain ONNX Runtime loop: do they report the same throughput?

Each measurement is a block run in its own fresh process, one at a time (never both at once):

* A: ``python -m amdinfer bench MODEL --providers cpu --iterations N --warmup W --json -q``, which reports
  throughput as items / wall time of its timed phase;
* B: a plain loop: ``InferenceSession(MODEL)`` with default options, W untimed calls, then N calls of
  ``sess.run(None, feeds)`` timed as a whole (items / wall time) and one by one.

Blocks alternate A B B A A B ... so a drift in the machine's load hits both sides alike; the figure is
the median over blocks of each side's throughput, and their ratio. Both use the same seeded inputs
(``np.random.default_rng(0).random(shape, dtype=float32)``, what the CLI makes) and the same session
options (amdinfer's CPU defaults are ONNX Runtime's: ``engine.info.settings["session"]``).

Run: ``python benchmarks/bench_vs_raw.py`` (``AMDINFER_BENCH_QUICK=1`` for a smoke run; ``THREADS=1`` sets
ONNX Runtime's intra-op threads on both sides, ``BLOCKS=20`` the blocks per side).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

from amdinfer.testing import models

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"

RAW = r"""
import json, sys, time
import numpy as np, onnxruntime as ort
path, shape, n, warmup = sys.argv[1], tuple(json.loads(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
so = ort.SessionOptions()
so.intra_op_num_threads = int(sys.argv[5])  # 0: ONNX Runtime's default, as amdinfer's
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
name = sess.get_inputs()[0].name
feeds = {name: np.random.default_rng(0).random(shape, dtype=np.float32)}
sess.run(None, feeds)  # the first call, as amdinfer bench makes it before its warm-up
for _ in range(warmup):
    sess.run(None, feeds)
lat = []
t0 = time.perf_counter()
for _ in range(n):
    c = time.perf_counter()
    sess.run(None, feeds)
    lat.append((time.perf_counter() - c) * 1000)
wall = time.perf_counter() - t0
print(json.dumps({"throughput_per_s": n * shape[0] / wall, "p50_ms": float(np.median(lat)),
                  "mean_ms": float(np.mean(lat))}))
"""


def run_amdinfer(path: Path, input_shapes: str, batch: int, n: int, warmup: int, threads: int) -> dict:
    cmd = [sys.executable, "-m", "amdinfer", "bench", str(path), "--providers", "cpu", "--input-shapes", input_shapes]
    cmd += ["--threads", str(threads)] if threads else []
    cmd += ["--batch", str(batch), "--iterations", str(n), "--warmup", str(warmup), "--json", "-q"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    (r,) = json.loads(out)["results"]
    return {"throughput_per_s": r["throughput_per_s"], "p50_ms": r["p50_ms"], "mean_ms": r["mean_ms"]}


def run_raw(path: Path, shape: tuple[int, ...], n: int, warmup: int, threads: int) -> dict:
    cmd = [sys.executable, "-c", RAW, str(path), json.dumps(list(shape)), str(n), str(warmup), str(threads)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def compare(
    name: str, proto: onnx.ModelProto, shape: tuple[int, ...], blocks: int, n: int, warmup: int, threads: int
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        onnx.save(proto, path)
        input_name = proto.graph.input[0].name
        shapes = f"{input_name}:{'x'.join(map(str, shape))}"
        a, b = [], []
        for i in range(blocks):
            order = ("A", "B") if i % 2 == 0 else ("B", "A")
            for side in order:
                if side == "A":
                    a.append(run_amdinfer(path, shapes, shape[0], n, warmup, threads))
                else:
                    b.append(run_raw(path, shape, n, warmup, threads))
    ta = statistics.median(r["throughput_per_s"] for r in a)
    tb = statistics.median(r["throughput_per_s"] for r in b)
    spread = lambda rs: (  # noqa: E731 - min..max of the blocks' throughput, relative to their median
        (max(r["throughput_per_s"] for r in rs) - min(r["throughput_per_s"] for r in rs))
        / statistics.median(r["throughput_per_s"] for r in rs)
    )
    return {
        "model": name,
        "shape": shape,
        "threads": threads or "default",
        "blocks": blocks,
        "calls": n,
        "amdinfer_items_per_s": ta,
        "raw_items_per_s": tb,
        "ratio": ta / tb,
        "amdinfer_p50_ms": statistics.median(r["p50_ms"] for r in a),
        "raw_p50_ms": statistics.median(r["p50_ms"] for r in b),
        "amdinfer_block_spread": spread(a),
        "raw_block_spread": spread(b),
        # The best block of each side: the least disturbed by other work on the machine (timeit's min).
        "best_ratio": max(r["throughput_per_s"] for r in a) / max(r["throughput_per_s"] for r in b),
        "blocks_a": [round(r["throughput_per_s"], 2) for r in a],
        "blocks_b": [round(r["throughput_per_s"], 2) for r in b],
    }


def main() -> None:
    blocks, n, warmup = (2, 5, 1) if QUICK else (int(os.environ.get("BLOCKS", 12)), 30, 5)
    threads = int(os.environ.get("THREADS", 0))  # ORT intra-op threads on both sides; 0: the runtime's default
    cases = [
        ("resnet50-112", models.resnet50(image_size=112), (1, 3, 112, 112)),
        ("encoder-s128", models.transformer_encoder(), (8, 128, 64)),
    ]
    t0 = time.perf_counter()
    rows = [compare(name, proto, shape, blocks, n, warmup, threads) for name, proto, shape in cases]
    print(
        f"# {blocks} alternating blocks per side, {n} timed calls + {warmup} warm-up each, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    print(
        "| model | input | intra-op threads | amdinfer bench (items/s) | plain ORT loop (items/s) | ratio "
        "| best-block ratio | p50 amdinfer / raw (ms) | block spread amdinfer / raw |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['model']} | {'x'.join(map(str, r['shape']))} | {r['threads']} | {r['amdinfer_items_per_s']:.1f} | "
            f"{r['raw_items_per_s']:.1f} | {r['ratio']:.3f} | {r['best_ratio']:.3f} | "
            f"{r['amdinfer_p50_ms']:.2f} / {r['raw_p50_ms']:.2f} | "
            f"{r['amdinfer_block_spread']:.0%} / {r['raw_block_spread']:.0%} |"
        )
    for r in rows:
        print(f"{r['model']} blocks (items/s) amdinfer {r['blocks_a']}")
        print(f"{r['model']} blocks (items/s) raw      {r['blocks_b']}")
    worst = max(abs(r["ratio"] - 1) for r in rows)
    best = max(abs(r["best_ratio"] - 1) for r in rows)
    print(
        f"\nlargest difference of the medians {worst:.1%} ({'within' if worst <= 0.03 else 'NOT within'} 3 %), "
        f"of the best blocks {best:.1%} ({'within' if best <= 0.03 else 'NOT within'} 3 %)"
    )


if __name__ == "__main__":
    main()
