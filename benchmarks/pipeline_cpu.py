"""amdinfer's YOLO pipeline on the CPU against Ultralytics on the same ONNX Runtime, model and photos.

Sides, each in its own process and measured in alternating blocks (never interleaved call by call: the
thread pools of two runtimes in one process disturb each other):

* ``amd-stages``: ``amdinfer.yolo(model)`` (host stages, OpenCV when installed), one image per call.
* ``amd-fused``: ``amdinfer.yolo(model, fuse=True)`` (letterbox on the host, the rest in the graph).
* ``amd-engine``: the engine alone on the letterboxed tensor (the floor).
* ``ultralytics``: ``YOLO(model)(image)`` in the Python given by ``--ultralytics-python`` (a separate venv
  with ``ultralytics`` and the same ``onnxruntime``).

Photos: scikit-image's bundled colour images. Model: ``--model`` (an Ultralytics-layout detector ONNX), by
default ``amdinfer.testing.models.yolov8(image_size=320)`` with Ultralytics-style metadata (random weights:
no trained YOLOv8n ships in any package reachable here). Reports the median ms per image per side, the ratio
to Ultralytics, and whether the detections agree (same kept set, boxes within 0.5 px, scores within 1e-3).

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


def side(name: str, model: str, conf: float, iters: int) -> dict[str, Any]:
    """Run one side in this process: per-image times and the detections of each photo."""
    images = photos()
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
        bgr = [np.ascontiguousarray(im[..., ::-1]) for im in images]  # Ultralytics takes arrays as BGR

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
            feeds = [det._preprocess_one(0, im).data[None] for im in images]

            def call(i: int) -> Any:
                return engine.run(feeds[i])

            def rows(r: Any) -> list[list[float]]:
                return []
        else:

            def call(i: int) -> Any:
                return det(images[i])

            def rows(r: Any) -> list[list[float]]:
                return np.concatenate([r.boxes, r.scores[:, None], r.classes[:, None]], 1).tolist()

    for i in range(len(images)):
        call(i)  # warm-up
    for _ in range(iters):
        for i in range(len(images)):
            t0 = time.perf_counter()
            call(i)
            times.append(time.perf_counter() - t0)
    dets = [rows(call(i)) for i in range(len(images))]
    return {"side": name, "ms": [t * 1e3 for t in times], "dets": dets}


def agree(a: list[list[float]], b: list[list[float]]) -> tuple[bool, float, float]:
    """Same kept set (classes), max box and score differences after matching by class then x1."""
    x, y = np.asarray(a).reshape(-1, 6), np.asarray(b).reshape(-1, 6)
    if len(x) != len(y):
        return False, float("inf"), float("inf")
    if not len(x):
        return True, 0.0, 0.0
    x, y = x[np.lexsort((x[:, 0], x[:, 5]))], y[np.lexsort((y[:, 0], y[:, 5]))]
    same = bool(np.array_equal(x[:, 5], y[:, 5]))
    return same, float(np.abs(x[:, :4] - y[:, :4]).max()), float(np.abs(x[:, 4] - y[:, 4]).max())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None)
    p.add_argument("--size", type=int, default=320)
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--ultralytics-python", default=None)
    p.add_argument("--out", default=os.environ.get("OUT"))
    args = p.parse_args(argv)
    if args.side:
        print(json.dumps(side(args.side, args.model, args.conf, args.iters)))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="amdinfer-bench-"))
    model = args.model or str(default_model(tmp / f"yolov8n_style_{args.size}.onnx", args.size))
    sides = {"amd-stages": sys.executable, "amd-fused": sys.executable, "amd-engine": sys.executable}
    if args.ultralytics_python:
        sides["ultralytics"] = args.ultralytics_python
    results: dict[str, dict[str, Any]] = {}
    for _ in range(args.blocks):
        for name, python in sides.items():
            cmd = [python, __file__, "--side", name, "--model", model, "--conf", str(args.conf)]
            cmd += ["--iters", str(args.iters)]
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                results.setdefault(name, {"ms": [], "error": proc.stderr.strip().splitlines()[-1:]})
                continue
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            entry = results.setdefault(name, {"ms": []})
            entry["ms"] += got["ms"]
            entry["dets"] = got["dets"]
    lines = [f"model: {model}; conf={args.conf}; photos: {len(photos())} from scikit-image", ""]
    lines += ["| side | ms/image (median) | vs ultralytics | detections agree |", "|---|---|---|---|"]
    ref = results.get("ultralytics", {})
    ref_ms = statistics.median(ref["ms"]) if ref.get("ms") else None
    for name, r in results.items():
        if not r.get("ms"):
            lines.append(f"| {name} | error: {r.get('error')} | | |")
            continue
        ms = statistics.median(r["ms"])
        ratio = f"{ms / ref_ms:.2f}x" if ref_ms else ""
        verdict = ""
        if ref.get("dets") and r.get("dets") and name != "amd-engine":
            checks = [agree(a, b) for a, b in zip(r["dets"], ref["dets"])]
            verdict = f"sets {all(c[0] for c in checks)}, box {max(c[1] for c in checks):.3g} px, "
            verdict += f"score {max(c[2] for c in checks):.3g}"
        elif name == "amd-fused" and results.get("amd-stages", {}).get("dets"):
            checks = [agree(a, b) for a, b in zip(r["dets"], results["amd-stages"]["dets"])]
            verdict = f"vs amd-stages: sets {all(c[0] for c in checks)}, box {max(c[1] for c in checks):.3g} px"
        n = sum(len(d) for d in r.get("dets", []))
        lines.append(f"| {name} | {ms:.2f} | {ratio} | {verdict} ({n} detections) |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "pipeline_cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
