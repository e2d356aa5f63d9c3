"""Start-up time with and without the compiled-model cache: ORT on ResNet-50, and native MIGraphX when it imports.

Each measurement is one fresh Python process that builds the engine with ``amdinfer.load`` and reports
the wall time of that call; the table shows the median over the processes. The processes run one after
the other, so no other runtime's threads are alive while one loads (the interference of issue 16 cannot
happen here); the report names the machine and the load average, which is what moves these figures.

* no cache: ``cache=False`` (ONNX Runtime optimizes the graph at every start).
* cold: an empty cache folder (optimize + write the optimized model / compile + save the ``.mxr``).
* cached: the entry exists (ORT loads the optimized model with graph optimizations off; MIGraphX loads
  the compiled program instead of compiling).

Usage::

    python benchmarks/cache_start.py                 # 5 processes per cell
    AMDINFER_BENCH_QUICK=1 python benchmarks/cache_start.py   # 2 processes per cell (smoke run)
    python benchmarks/cache_start.py --repeats 9 --json results.json

The model is built offline by ``amdinfer.testing.models.resnet50`` (seeded weights, 224x224, ~102 MB).
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
import amdinfer
options = json.loads(sys.argv[2])
t0 = time.perf_counter()
engine = amdinfer.load(sys.argv[1], **options)
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "cache_hit": engine.info.cache_hit,
                  "compile_seconds": engine.info.compile_seconds, "device": engine.info.device}))
engine.close()
"""


def _child(model: Path, options: dict) -> dict:
    env = dict(os.environ)
    env.pop("AMDINFER_CACHE_DIR", None)  # only the options given here decide
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), json.dumps(options)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child failed ({options}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: Path, base: dict, repeats: int, workdir: Path) -> dict[str, object]:
    """Median seconds (whole ``amdinfer.load``, and its session build / compile part) per cache state."""
    runs: dict[str, list[dict]] = {"no_cache": [], "cold": [], "cached": []}
    for i in range(repeats):
        runs["no_cache"].append(_child(model, {**base, "cache": False}))
        r = _child(model, {**base, "cache_dir": str(workdir / f"cold-{base['backend']}-{i}")})
        assert r["cache_hit"] is False, r
        runs["cold"].append(r)
    warm_dir = workdir / f"warm-{base['backend']}"
    _child(model, {**base, "cache_dir": str(warm_dir)})  # fill the cache
    for _ in range(repeats):
        r = _child(model, {**base, "cache_dir": str(warm_dir)})
        assert r["cache_hit"] is True, r
        runs["cached"].append(r)
    out: dict[str, object] = {"device": r["device"], "runs": runs}
    for state, rs in runs.items():
        out[state] = statistics.median(x["seconds"] for x in rs)
        out[state + "_build"] = statistics.median(x["compile_seconds"] for x in rs)
    return out


def migraphx_options(image_size: int) -> dict | None:
    """Options for the native MIGraphX engine when ``migraphx`` imports here, else None.

    The batch axis is symbolic, so a static shape is given: without one the engine compiles on the
    first run, not at load, and there would be no compile to cache or time.
    """
    from amdinfer.engines._migraphx_support import HipRuntime
    from amdinfer.engines.migraphx import probe

    if probe() is not None:
        return None
    hip = HipRuntime.find()
    target = "gpu" if hip is not None and hip.device_count() > 0 else "ref"
    return {"backend": "migraphx", "target": target, "shapes": {"input": [1, 3, image_size, image_size]}}


def main(argv: list[str] | None = None) -> int:
    quick = os.environ.get("AMDINFER_BENCH_QUICK") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2 if quick else 5, help="fresh processes per cell")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)

    from _isolation import loadavg, machine, machine_lines

    from amdinfer.testing.models import resnet50

    start = machine()  # before the child processes run: the load average they met
    rows = []
    with tempfile.TemporaryDirectory(prefix="amdinfer-cache-bench-") as tmp:
        workdir = Path(tmp)
        model = workdir / "resnet50.onnx"
        model.write_bytes(resnet50(image_size=args.image_size).SerializeToString())
        configs = [("ort (CPU EP)", {"backend": "ort", "providers": ["CPUExecutionProvider"]})]
        mgx = migraphx_options(args.image_size)
        if mgx is not None:
            configs.append((f"migraphx ({mgx['target']})", mgx))
        for label, options in configs:
            result = measure(model, options, args.repeats, workdir)
            rows.append((label, result))

    import onnxruntime

    print("\n".join(machine_lines(start)))
    print(f"- load average (1 min) at the end: {loadavg():.2f}")
    print()
    print(
        f"ResNet-50 {args.image_size}x{args.image_size} fp32, median of {args.repeats} fresh processes per cell; "
        f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"onnxruntime {onnxruntime.__version__}"
        + ("" if len(rows) > 1 else "; migraphx not importable here (not measured)")
    )
    print()
    print("Cells: whole `amdinfer.load` / the session build or compile inside it (`info.compile_seconds`), seconds.")
    print()
    print("| engine | no cache | cold (cache miss) | cached | speed-up, load | speed-up, build |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, r in rows:
        cells = " | ".join(f"{r[k]:.3f} / {r[k + '_build']:.3f}" for k in ("no_cache", "cold", "cached"))
        print(
            f"| {label} | {cells} | {r['no_cache'] / r['cached']:.2f}x | "
            f"{r['no_cache_build'] / r['cached_build']:.2f}x |"
        )
    if args.json:
        args.json.write_text(json.dumps({label: r for label, r in rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
