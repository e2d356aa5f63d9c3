"""Load + first answer from a native MIGraphX ``.mxr`` bundle against a cold compile and amdinfer's cache (issue 39).

Three ways to get the first answer in a fresh Python process, on MIGraphX's ``ref`` target (the CPU-only build;
``--target gpu`` on an AMD GPU):

* cold: ``amdinfer.load(model, backend="migraphx", cache=False, shapes=...)``: parse, compile, then one ``run``;
* cache: the same with ``cache_dir=`` whose ``.mxr`` entry an earlier (unmeasured) process wrote;
* bundle: ``amdinfer.load(bundle_folder, verify=False)`` on a bundle ``write_bundle`` wrote beforehand (unmeasured):
  the manifest, every file's SHA-256 and MIGraphX's version/target/architecture are checked, each bucket's ``.mxr``
  is read with ``migraphx.load``; nothing is parsed or compiled (the goldens ran once, at the first load).

Not counted, the same for all three: ``import amdinfer, migraphx``. Each cell is the median over ``--repeats``
processes run one after the other; "first run" is the first ``engine.run`` on seeded inputs of the bucket's shape
(``--no-run``: load only, for models whose ``ref`` run takes minutes: its convolution is a naive loop).

Usage (the CPU-only build; see docs/migraphx.md)::

    PYTHONPATH=~/.cache/migraphx-ref/build/lib LD_LIBRARY_PATH=~/.cache/migraphx-ref/build/lib \\
        /tmp/mxr-venv/bin/python benchmarks/bundle_mxr.py --model tiny --repeats 3
    ... benchmarks/bundle_mxr.py --model resnet50 --image-size 224 --no-run --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
import migraphx
import amdinfer, amdinfer.bundle, amdinfer.engines.migraphx  # imported before the clock starts
target, options, shape, run = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4] == "1"
t0 = time.perf_counter()
engine = amdinfer.load(target, **options)
t1 = time.perf_counter()
if run:
    engine.run(np.random.default_rng(0).random(shape, np.float32))
t2 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "first": t2 - t1, "total": t2 - t0, "compile": engine.info.compile_seconds,
                  "cache_hit": engine.info.cache_hit, "migraphx": str(migraphx.__version__)}))
"""


def _child(target: str, options: dict, shape: list[int], run: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "AMDINFER_CACHE_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, target, json.dumps(options), json.dumps(shape), "1" if run else "0"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"child failed ({target}, {options}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: Path, shape: list[int], target: str, repeats: int, run: bool, work: Path) -> dict[str, dict]:
    from amdinfer.bundle import write_bundle

    base = {"backend": "migraphx", "target": target, "shapes": {"input": shape}}
    folder = write_bundle(model, work / "bundle", backend="migraphx", target=target, shapes=[{"input": tuple(shape)}],
                          cache=False)  # fmt: skip
    bundle_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
    cache = work / "cache"
    _child(str(model), {**base, "cache_dir": str(cache)}, shape, False)  # fills the cache
    _child(str(folder), {"verify": True}, shape, False)  # the goldens, once per machine (not measured)
    runs: dict[str, list[dict]] = {"cold": [], "cache": [], "bundle": []}
    for _ in range(repeats):
        runs["cold"].append(_child(str(model), {**base, "cache": False}, shape, run))
        runs["cache"].append(_child(str(model), {**base, "cache_dir": str(cache)}, shape, run))
        runs["bundle"].append(_child(str(folder), {"verify": False}, shape, run))
    assert all(r["cache_hit"] for r in runs["cache"]), runs["cache"]
    assert all(r["compile"] == 0.0 for r in runs["bundle"]), runs["bundle"]
    out = {k: {m: statistics.median(r[m] for r in rs) for m in ("load", "first", "total")} for k, rs in runs.items()}
    out["meta"] = {"bundle_mb": round(bundle_mb, 1), "migraphx": runs["bundle"][0]["migraphx"], "runs": runs}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "resnet50"], default="tiny")
    parser.add_argument("--image-size", type=int, default=None, help="default 32 (tiny) / 224 (resnet50)")
    parser.add_argument("--target", default="ref", choices=["ref", "gpu"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-run", action="store_true", help="load only (no first answer)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from amdinfer.testing import models

    size = args.image_size or (32 if args.model == "tiny" else 224)
    proto = models.tiny_cnn(image_size=size) if args.model == "tiny" else models.resnet50(image_size=size)
    shape = [1, 3, size, size]
    with tempfile.TemporaryDirectory(prefix="amdinfer-mxr-bench-") as tmp:
        work = Path(tmp)
        model = work / f"{args.model}.onnx"
        model.write_bytes(proto.SerializeToString())
        r = measure(model, shape, args.target, args.repeats, not args.no_run, work)
    meta = r.pop("meta")
    print(f"{args.model} {size}x{size} fp32, MIGraphX {meta['migraphx']} target {args.target}, bundle "
          f"{meta['bundle_mb']} MB; median of {args.repeats} fresh processes; {platform.machine()} "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print()
    print("| start | load (s) | first run (s) | load + first answer (s) | vs cold |")
    print("|---|---:|---:|---:|---:|")
    for k in ("cold", "cache", "bundle"):
        c = r[k]
        print(f"| {k} | {c['load']:.3f} | {c['first']:.3f} | {c['total']:.3f} | "
              f"{r['cold']['total'] / c['total']:.2f}x |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({**r, "meta": meta}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
