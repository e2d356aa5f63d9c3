"""Issue 38's table: what a user gets with no arguments beside the best setting, one run, side by side.

Each row is one line a user writes, timed with its defaults (``default``) and with the best setting known for it
(``best``, the setting named in the row), against the engine alone on device tensors (``engine``: the target).
The rows:

* ``map(stream)``: ``det.map(stream of pages)`` (``batch_size`` left out: ``"auto"``) against
  ``map(..., batch_size=64)``, fp32 and fp16;
* ``det(list of 64)``: one call on a list against a long ``map(batch_size=64)`` stream;
* ``512 pages``: a short stream (fill and drain count) with the defaults against ``batch_size=64``;
* ``jpeg map``: ``det.map(jpeg paths)`` against ``batch_size=64`` and against ``decoder="nvjpeg"``, with the
  decode rate of the host beside it;
* ``fixed batch 1``: the model file as exported (batch axis fixed to 1), no options, ``map(stream)``, against the
  batch-1 engine;
* ``classify 640x480``: ``amdinfer.classify(resnet50).map(frames)`` against ``fuse(image_size=(480, 640))``,
  against the ResNet-50 engine on device tensors.

    python benchmarks/datapath_defaults.py --model yolov8n-doclaynet.onnx --out $OUT     # an NVIDIA GPU, torch

``benchmarks/datapath_gpu.py`` runs the same rows first (``--defaults``); this file is also a script of its own.
Results: ``datapath_defaults.md``/``.json`` under ``--out``.
"""

# ruff: noqa: B023  (the timed lambdas run before the loop moves on)
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

try:  # torch first: it loads CUDA's cuBLAS/cuDNN that onnxruntime-gpu links against
    import torch
except ImportError:  # the CPU smoke run
    torch = None  # type: ignore[assignment]

import amdinfer
from amdinfer.testing import models
from amdinfer.testing.models import batch_dynamic

ROOT = Path(__file__).resolve().parents[1]


def stream_rate(make: Callable[[int], Iterator[Any]], n: int, rounds: int = 3) -> float:
    """Items per second of consuming ``make(n)`` (median of ``rounds``, after one pass of ``n // 4`` to warm)."""
    for _ in make(max(1, n // 4)):
        pass
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        count = sum(1 for _ in make(n))
        times.append(time.perf_counter() - t0)
        assert count == n, (count, n)
    return n / statistics.median(times)


def call_rate(fn: Callable[[], Any], n: int, seconds: float = 1.0) -> float:
    """Items per second of ``fn()`` (``n`` items per call), median call time after two warm calls."""
    fn()
    fn()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < 5 or (time.perf_counter() < end and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def device_engine_rate(engine: Any, shape: tuple[int, ...]) -> float:
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    feed = torch.from_numpy(x).to("cuda") if torch is not None and torch.cuda.is_available() else x
    name = engine.inputs[0].name
    return call_rate(lambda: engine.run({name: feed}), shape[0])


def rows(model_path: str, images: list[np.ndarray], jpegs: list[str], *, gpu: bool, quick: bool) -> list[dict]:
    """The table's rows (each: ``what``, ``default``, ``best``, ``best_setting``, ``engine``, ``chosen``)."""
    load: dict[str, Any] = {} if gpu else {"providers": ["CPUExecutionProvider"]}
    B = 8 if quick else 64
    n = 16 if quick else 2048
    short_n = 16 if quick else 512
    proto = batch_dynamic(onnx.load(model_path))
    side = int(proto.graph.input[0].type.tensor_type.shape.dim[-1].dim_value)
    out: list[dict] = []

    def stream(data: list[Any]) -> Callable[[int], Iterator[Any]]:
        return lambda k: (data[i % len(data)] for i in range(k))

    def add(what: str, default: float | None, best: float | None, setting: str, engine: float, **extra: Any) -> None:
        row = {"what": what, "default": default, "best": best, "best_setting": setting, "engine": engine, **extra}
        for key in ("default", "best"):
            if isinstance(row[key], float):
                row[key] = round(row[key], 1)
                row[f"{key}/engine"] = round(row[key] / engine, 2) if engine else None
        row["engine"] = round(engine, 1)
        out.append(row)
        print(json.dumps(row), flush=True)

    def guarded(fn: Callable[[], float]) -> float | None:
        try:
            return fn()
        except Exception as exc:  # one failing cell must not lose the others
            print(f"  failed: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr, flush=True)
            return None

    batch = [images[i % len(images)] for i in range(B)]
    for precision in ("fp32", "fp16"):
        with amdinfer.load(proto, precision=precision, **load) as eng:
            engine = device_engine_rate(eng, (B, 3, side, side))
        det = amdinfer.yolo(proto, **({"precision": precision} if precision != "fp32" else {}), **load)
        pages = stream(images)
        default = guarded(lambda: stream_rate(lambda k: det.map(pages(k)), n))
        best = guarded(lambda: stream_rate(lambda k: det.map(pages(k), batch_size=B), n))
        chosen = det.engine.info.settings.get("map_batch_size")
        add(f"det.map(stream) {precision}", default, best, "batch_size=64", engine, chosen=chosen)
        one = guarded(lambda: call_rate(lambda: det(batch), B))
        add(f"det(list of 64) {precision}", one, best, "map(batch_size=64), long stream", engine)
        short = guarded(lambda: stream_rate(lambda k: det.map(pages(k)), short_n))
        short_best = guarded(lambda: stream_rate(lambda k: det.map(pages(k), batch_size=B), short_n))
        add(f"stream of 512 pages {precision}", short, short_best, "batch_size=64", engine)
        if precision == "fp32":
            files = stream(jpegs)
            default = guarded(lambda: stream_rate(lambda k: det.map(files(k)), n))
            best = guarded(lambda: stream_rate(lambda k: det.map(files(k), batch_size=B), n))
            add("det.map(jpeg paths) fp32", default, best, "batch_size=64", engine)
            if gpu:
                nv = amdinfer.yolo(proto, decoder="nvjpeg", **load)
                best_nv = guarded(lambda: stream_rate(lambda k: nv.map(files(k)), n))
                add("det.map(jpeg paths) fp32", default, best_nv, 'decoder="nvjpeg"', engine)
                nv.close()
        det.close()

    # the model file as exported: batch axis fixed to 1, no options at all
    with amdinfer.load(model_path, **load) as eng:
        engine1 = device_engine_rate(eng, (1, 3, side, side))
    fixed = amdinfer.yolo(model_path, **load)
    default = guarded(lambda: stream_rate(lambda k: fixed.map(stream(images)(k)), n // 4))
    one = guarded(lambda: call_rate(lambda: fixed(images[0]), 1))
    add(
        "fixed-batch-1 export, map(stream)",
        default,
        one,
        "det(page), one at a time",
        engine1,
        chosen=fixed.engine.info.settings.get("map_batch_size"),
    )
    fixed.close()

    # fixed-size frames through the classify recipe
    h, w = (48, 64) if quick else (480, 640)
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(B)]
    resnet = models.resnet50()
    with amdinfer.load(resnet, precision="fp16", **load) as eng:
        engine = device_engine_rate(eng, (B, 3, 224, 224))
    cls = amdinfer.classify(resnet, size=256, crop=224, precision="fp16", **load)
    default = guarded(lambda: stream_rate(lambda k: cls.map(stream(frames)(k)), n))
    settings = {k: v for k, v in cls.engine.info.settings.items() if k in ("geometry", "map_batch_size")}
    cls.close()
    with amdinfer.classify(resnet, size=256, crop=224, precision="fp16", fuse=False, **load) as staged:
        fused = staged.fuse(image_size=(h, w))
        best = guarded(lambda: stream_rate(lambda k: fused.map(stream(frames)(k), batch_size=B), n))
        fused.close()
    add(
        f"classify {w}x{h} frames fp16, map",
        default,
        best,
        f"fuse(image_size=({h}, {w})), batch_size=64",
        engine,
        chosen=settings,
    )
    return out


def table(found: list[dict], env: dict[str, Any]) -> str:
    lines = [
        f"datapath_defaults: {json.dumps(env)}",
        "",
        "| what the user writes | default | ÷ engine | best setting | best | ÷ engine | engine | chosen |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in found:
        lines.append(
            f"| {r['what']} | {r['default']} | {r.get('default/engine')} | {r['best_setting']} | {r['best']} | "
            f"{r.get('best/engine')} | {r['engine']} | {json.dumps(r.get('chosen')) if r.get('chosen') else ''} |"
        )
    return "\n".join(lines) + "\n"


def pages_and_jpegs(tmp: Path) -> tuple[list[np.ndarray], list[str]]:
    """The five shipped pages (RGB) and the same pages as JPEG files (quality 95) under ``tmp``."""
    import cv2

    found = sorted((ROOT / "tests" / "data").glob("doclayout_page*.png"))
    images = [np.ascontiguousarray(cv2.imread(str(p))[..., ::-1]) for p in found]
    jpegs = []
    for p, img in zip(found, images):
        path = tmp / (p.stem + ".jpg")
        cv2.imwrite(str(path), img[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
        jpegs.append(str(path))
    return images, jpegs


def run(model: str, out: Path | None, *, gpu: bool, quick: bool) -> list[dict]:
    import tempfile

    import onnxruntime as ort

    env = {
        "onnxruntime": ort.__version__,
        "amdinfer": amdinfer.__version__,
        "cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if gpu and torch is not None else None,
    }
    images, jpegs = pages_and_jpegs(Path(tempfile.mkdtemp(prefix="amdinfer-defaults-")))
    found = rows(model, images, jpegs, gpu=gpu, quick=quick)
    md = table(found, env)
    print(md, flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "datapath_defaults.md").write_text(md)
        (out / "datapath_defaults.json").write_text(json.dumps({"env": env, "rows": found}, indent=1))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the trained Ultralytics YOLOv8n export (yolov8n-doclaynet.onnx)")
    p.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="short streams, small frames (a smoke run)")
    p.add_argument("--out", default=os.environ.get("OUT"))
    args = p.parse_args(argv)
    run(args.model, Path(args.out) if args.out else None, gpu=args.provider == "cuda", quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
