"""The same data-path rows on two source trees, alternating in fresh processes: is a change faster, or the host?

The H200 host's speed moves 10-25 % between leases, so a figure from an earlier lease cannot tell a regression
from a slower host. This script runs each tree (``--tree NAME=PATH``, a folder holding the ``amdinfer`` package)
``--rounds`` times, alternating, each run a fresh process that loads the recipes and times:

* ``map64``: ``amdinfer.yolo(batch-dynamic model).map(stream of pages, batch_size=64)`` (fp32);
* ``list64``: ``det(list of 64 pages)``, one call;
* ``jpeg64``: ``det.map(stream of JPEG paths, batch_size=64)``;
* ``frames64``: ``amdinfer.classify(resnet50, fuse=False).fuse(image_size=(480, 640)).map(frames, batch_size=64)``
  (fp16);
* ``engine``: the YOLO engine alone on a device tensor of 64.

    python benchmarks/datapath_ab.py --model yolov8n-doclaynet.onnx --tree old=/tmp/old --tree new=. --out $OUT

Prints one JSON line per run and a table of medians (and new/old ratios) at the end; writes ``datapath_ab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(model: str, n: int) -> dict:
    try:
        import torch
    except ImportError:
        torch = None
    import tempfile

    import numpy as np
    import onnx

    import amdinfer
    from amdinfer.testing import models
    from amdinfer.testing.models import batch_dynamic

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from datapath_defaults import pages_and_jpegs  # type: ignore[import-not-found]

    gpu = torch is not None and torch.cuda.is_available()
    load = {} if gpu else {"providers": ["CPUExecutionProvider"]}
    images, jpegs = pages_and_jpegs(Path(tempfile.mkdtemp(prefix="amdinfer-ab-")))
    proto = batch_dynamic(onnx.load(model))
    side = int(proto.graph.input[0].type.tensor_type.shape.dim[-1].dim_value)
    out: dict = {"amdinfer": str(Path(amdinfer.__file__).parent)}

    def timed(key: str, fn, items: int, rounds: int = 3) -> None:
        fn()
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[key] = round(items / statistics.median(times), 1)

    with amdinfer.load(proto, **load) as eng:
        x = np.random.default_rng(0).random((64, 3, side, side), dtype=np.float32)
        xd = torch.from_numpy(x).to("cuda") if gpu else x
        timed("engine", lambda: eng.run({eng.inputs[0].name: xd}), 64, rounds=10)
    det = amdinfer.yolo(proto, **load)
    batch = [images[i % len(images)] for i in range(64)]
    timed("map64", lambda: sum(1 for _ in det.map((images[i % 5] for i in range(n)), batch_size=64)), n)
    timed("list64", lambda: det(batch), 64, rounds=7)
    timed("jpeg64", lambda: sum(1 for _ in det.map((jpegs[i % 5] for i in range(n)), batch_size=64)), n)
    det.close()
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (480, 640, 3), np.uint8) for _ in range(64)]
    with amdinfer.classify(models.resnet50(), size=256, crop=224, precision="fp16", fuse=False, **load) as staged:
        fused = staged.fuse(image_size=(480, 640))
        timed("frames64", lambda: sum(1 for _ in fused.map((frames[i % 64] for i in range(n)), batch_size=64)), n)
        fused.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--tree", action="append", default=[], help="NAME=PATH (a folder with the amdinfer package)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--items", type=int, default=1024)
    p.add_argument("--out", default=os.environ.get("OUT"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a.model, a.items)), flush=True)
        return 0
    trees = dict(t.split("=", 1) for t in a.tree) or {"here": str(ROOT)}
    runs: list[dict] = []
    for r in range(a.rounds):
        for name, path in trees.items() if r % 2 == 0 else reversed(list(trees.items())):
            env = dict(
                os.environ, PYTHONPATH=os.pathsep.join([str(Path(path).resolve()), os.environ.get("PYTHONPATH", "")])
            )
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                "--model",
                a.model,
                "--items",
                str(a.items),
            ]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            row = {"tree": name, "round": r, **(json.loads(line[7:]) if line else {"error": proc.stderr[-800:]})}
            runs.append(row)
            print(json.dumps(row), flush=True)
            if a.out:
                Path(a.out).mkdir(parents=True, exist_ok=True)
                (Path(a.out) / "datapath_ab.json").write_text(json.dumps(runs, indent=1))
    keys = ["engine", "map64", "list64", "jpeg64", "frames64"]
    med = {
        n: {k: statistics.median([x[k] for x in runs if x["tree"] == n and k in x] or [0]) for k in keys} for n in trees
    }
    print("| tree | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for n in trees:
        print(f"| {n} | " + " | ".join(f"{med[n][k]:.0f}" for k in keys) + " |")
    names = list(trees)
    if len(names) == 2 and all(med[names[0]][k] for k in keys):
        print(
            f"| {names[1]}/{names[0]} | "
            + " | ".join(f"{med[names[1]][k] / med[names[0]][k]:.2f}" for k in keys)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
