"""Sliced inference throughput: the tiles of large images through amdinfer's SlicedPipeline against the engine alone.

Per device (``--device cuda`` on the H200 with onnxruntime-gpu, ``cpu``, or both): ``--images`` synthetic images of
``--size`` (default 6,000 x 4,000, 16-pixel squares planted; amdinfer.testing.squares) are cut into ``--tile`` tiles
with ``--overlap`` (SAHI's geometry; 97 pieces per 6,000 x 4,000 image at 640 and 0.2: 96 tiles and the whole image)
and answered by ``amdinfer.yolo(model, tiles=...)``'s SlicedPipeline:

* ``engine``: the model's engine alone (``amdinfer.load``, NumPy in and out) on the very tensors the pipeline feeds it
  (each piece letterboxed, ``/ 255``, CHW, made beforehand), in batches of ``--batch``: the target rate.
* ``sliced-map``: ``sliced.map(images, batch_size=--batch)``: decode, tiling, preprocessing on the executor's
  worker threads, the tiles of consecutive images sharing engine batches, NMS per tile, the SAHI merge per image.
* ``sliced-run_batch``: ``sliced.run_batch(images)``: all tiles in one call (sub-batches streamed on a GPU).
* ``detector-map``: the detector's own ``map`` on the very pieces the pipeline feeds it (tiles and the whole
  images' canvases, cut beforehand): what slicing and merging add on top of it.

tiles/s = pieces / seconds (best of ``--repeat``), and the ratio to ``engine`` (the issue's target: >= 0.7 on the
H200). ``--model yolov8`` (default) is the YOLOv8n-size builder with random weights at the tile size, 80 classes;
``--model squares`` the tiny square detector (then the pipeline's host work dominates); ``--model-path`` a trained
detector (the DocLayNet YOLOv8n at ``--tile 1024`` on the H200): random weights flood the fused NMS with every
anchor of some pieces (8,400 candidates, capped at 2,048), which no trained detector does on these images.
``--fuse``: the recipe's ``fuse`` (``auto``: fused on the GPU, stage by stage on the CPU). The recall of the
planted squares is printed too (meaningful with ``--model squares``). Rows also go to ``sliced.jsonl`` under
``--out`` (or ``$OUT``).

    python benchmarks/sliced.py --device cuda cpu --out "$OUT"       # the H200: CUDA EP, then the CPU
    python benchmarks/sliced.py --quick                                # a small CPU smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

try:  # torch first: it loads the CUDA libraries onnxruntime-gpu links against (the H200 run)
    import torch  # noqa: F401
except ImportError:  # the CPU run
    pass
import amdinfer
from amdinfer.preprocess import HwcToChw, Letterbox, Normalize
from amdinfer.reference import box_iou
from amdinfer.testing.models import yolov8
from amdinfer.testing.squares import planted_squares, square_detector


def _best(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _engine_rate(model: Any, provider: str, pieces: list[np.ndarray], tile: int, batch: int, repeat: int) -> float:
    """Seconds for the engine alone on the pieces' model inputs, in batches of ``batch`` (NumPy IO)."""
    stages = [Letterbox((tile, tile)), Normalize(scale=1 / 255), HwcToChw()]
    tensors = []
    for p in pieces:
        x = p
        for s in stages:
            x = s(x).data
        tensors.append(x)
    batches = [np.ascontiguousarray(np.stack(tensors[k : k + batch])) for k in range(0, len(tensors), batch)]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    if dims and dims[0].HasField("dim_value") and dims[0].dim_value == 1 and batch > 1:  # a batch-1 export
        from amdinfer._support._dynamic_batch import make_batch_dynamic

        model = make_batch_dynamic(model)  # as the recipe runs it on an accelerator (proven there)
    with amdinfer.load(model, providers=[provider]) as engine:
        name = engine.inputs[0].name
        engine.run({name: batches[0]})  # warm up (CUDA kernels, arena)

        def run() -> None:
            for b in batches:
                engine.run({name: b})

        return _best(run, repeat)


def _feed(fused: Any, pieces: list[np.ndarray]) -> tuple[np.ndarray, dict[str, Any]]:
    """The host batch of ``pieces`` (tile-size already) and the fused engine's feed made of it."""
    host = np.stack(pieces)
    return host, fused._feed(host, [{"orig_shape": tuple(p.shape[:2])} for p in pieces])


def _parts(sliced: Any, fed: list[np.ndarray], batch: int, repeat: int) -> dict[str, Any]:
    """Where the detector's time goes on one batch of pieces, each part alone (the GPU run): the fused engine of the
    tile size on a host uint8 batch and on one already on the device, the bare model on a float batch on the
    device, filling one batch from the tile views (one thread), and the host-to-device copy (pageable, pinned).
    Each figure is the best of ``repeat`` in pieces per second."""
    out: dict[str, Any] = {}
    det = sliced.detector
    fused = getattr(det, "_fused", {}).get(tuple(fed[0].shape[:2]))
    if fused is None and hasattr(det, "_feed") and getattr(det, "image_size", None) is None:
        fused = det  # one fused engine with host geometry (the CPU smoke run; pieces are already tile-size)
    if fused is None:
        return {"parts": "no fused engine of the tile size"}
    pieces = fed[:batch]
    host, feed = _feed(fused, pieces)
    eng = fused.engine
    eng.run(feed)

    def rate(fn: Any) -> float:
        fn()
        return round(len(pieces) / _best(fn, max(repeat, 5)), 1)

    out["fused_engine_host_batch"] = rate(lambda: eng.run(feed))
    out["fill_one_thread"] = rate(lambda: np.stack(pieces, out=host))
    try:  # the spans of one map over all the pieces: placement, engine runs, finishing (one_call_split's timeline)
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from one_call_split import timeline

        out["map_timeline"] = timeline(fused, lambda: list(det.map(fed, batch_size=batch)))
        out["map_timeline"]["pieces"] = len(fed)
    except Exception as exc:
        out["map_timeline"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    try:
        out["stream_variants"] = _stream_variants(det, fused, fed, batch, repeat)
    except Exception as exc:
        out["stream_variants"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    out["fused_precision"] = getattr(eng.info, "precision", None)
    out["fused_outputs"] = {k: list(np.shape(v)) for k, v in eng.run(feed).items()}
    out["fused_settings"] = {k: str(v)[:80] for k, v in (getattr(eng.info, "settings", {}) or {}).items()}
    try:
        import torch

        dev = {k: torch.from_numpy(np.ascontiguousarray(v)).to("cuda") for k, v in feed.items()}
        out["fused_engine_device_batch"] = rate(lambda: eng.run(dev))
        pinned = torch.from_numpy(host).pin_memory()

        def copy(src: Any) -> Any:
            def go() -> None:
                src.to("cuda", non_blocking=True)
                torch.cuda.synchronize()

            return go

        out["h2d_pinned"] = rate(copy(pinned))
        out["h2d_pageable"] = rate(copy(torch.from_numpy(host)))
    except Exception as exc:  # the CPU run, or a part that fails: the others stay
        out["device_parts"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def _stream_variants(det: Any, fused: Any, fed: list[np.ndarray], batch: int, repeat: int) -> dict[str, Any]:
    """The fused engine on every batch of the pieces (distinct data, as the map feeds them), run the ways the map
    could run them, and the map with its knobs turned: which one loses the engine's rate (pieces/s, best of
    ``repeat``). ``serial_run``: ``engine.run`` in turn (bound buffers, graph replay where on); ``run_many_p1``:
    what the map does (``run_many(prefetch=1)``: batches over ``overlap_bytes`` run as host-bound runs on two
    threads); ``run_many_bound``: the same with ``overlap_bytes`` raised (every batch on the bound path);
    ``host_run_serial``: host-bound runs in turn (no concurrency)."""
    eng = fused.engine
    runner = getattr(eng, "_runner", None)
    feeds = [_feed(fused, fed[k : k + batch])[1] for k in range(0, len(fed), batch)]
    n = len(fed)
    out: dict[str, Any] = {"batches": [int(next(iter(f.values())).shape[0]) for f in feeds]}
    if runner is not None:
        out["runner"] = {"overlap_bytes": runner.overlap_bytes, "graphs": bool(getattr(runner, "_graphs", None))}
        out["batch_bytes"] = int(sum(v.nbytes for v in feeds[0].values()))

    def rate(name: str, fn: Any) -> None:
        try:
            fn()
            out[name] = round(n / _best(fn, max(repeat, 3)), 1)
        except Exception as exc:
            out[name] = f"{type(exc).__name__}: {str(exc)[:200]}"

    rate("serial_run", lambda: [eng.run(f) for f in feeds])
    rate("run_many_p1", lambda: list(eng.run_many(iter(feeds), prefetch=1)))
    rate("run_many_p2", lambda: list(eng.run_many(iter(feeds), prefetch=2)))
    if runner is not None:
        names = list(runner._output_names)
        rate("host_run_serial", lambda: [runner._host_run(f, names, False) for f in feeds])
        saved = runner.overlap_bytes
        runner.overlap_bytes = 1 << 62
        try:
            rate("run_many_bound", lambda: list(eng.run_many(iter(feeds), prefetch=1)))
            rate("map_bound", lambda: list(det.map(fed, batch_size=batch)))
        finally:
            runner.overlap_bytes = saved
    rate("map", lambda: list(det.map(fed, batch_size=batch)))
    threads = fused.threads
    for t in (2, 4):
        fused.threads = t
        rate(f"map_threads{t}", lambda: list(det.map(fed, batch_size=batch)))
    fused.threads = threads
    rate("map_batch64", lambda: list(det.map(fed, batch_size=2 * batch)))
    return out


def _recall(truths: list[np.ndarray], answers: list[Any]) -> float:
    hits = [(box_iou(t, a.boxes).max(axis=1) >= 0.9).sum() if len(a) else 0 for t, a in zip(truths, answers)]
    return float(sum(hits)) / max(1, sum(len(t) for t in truths))


def _page_mosaic(h: int, w: int, seed: int) -> np.ndarray:
    """An ``h x w`` image filled with the shipped DocLayNet-style pages (tests/data/doclayout_page*.png, RGB), in
    a grid from a rotated start: content the trained DocLayNet detector sees as documents."""
    import cv2

    root = Path(__file__).resolve().parents[1] / "tests" / "data"
    pages = [cv2.imread(str(p))[..., ::-1] for p in sorted(root.glob("doclayout_page*.png"))]
    out = np.full((h, w, 3), 255, np.uint8)
    k, y = seed, 0
    while y < h:
        x, row = 0, 0
        while x < w:
            page = pages[k % len(pages)]
            k += 1
            ph, pw = min(page.shape[0], h - y), min(page.shape[1], w - x)
            out[y : y + ph, x : x + pw] = page[:ph, :pw]
            x, row = x + pw, max(row, ph)
        y += row
    return out


def _detector(model: Any, args: argparse.Namespace, provider: str) -> Any:
    """``amdinfer.yolo(model, tiles=...)``; with ``--nms-mode`` other than auto, the recipe's stages fused by hand
    with that NMS (host geometry) and wrapped in a SlicedPipeline."""
    fuse: Any = {"auto": "auto", "true": True, "false": False}[args.fuse]
    if args.nms_mode == "auto":
        return amdinfer.yolo(
            model, tiles=(args.tile, args.tile), tile_overlap=args.overlap, providers=[provider], fuse=fuse,
            conf=args.conf,
        )  # fmt: skip
    from amdinfer.pipeline import SlicedPipeline, Tiles

    stages = amdinfer.yolo(model, providers=[provider], fuse=False, conf=args.conf)
    fused = stages.fuse(nms_mode=args.nms_mode, providers=[provider])  # host geometry (identity on the tiles)
    stages.close()
    tiles = Tiles(args.tile, args.tile, overlap_height_ratio=args.overlap, overlap_width_ratio=args.overlap)
    return SlicedPipeline(fused, tiles=tiles, owns_detector=True)


def run_device(args: argparse.Namespace, provider: str) -> list[dict[str, Any]]:
    h, w = args.size
    if args.model_path:  # a trained detector: its candidates are a real detector's, not random weights' flood
        import onnx

        model = onnx.load(args.model_path)
        args.model = Path(args.model_path).name
    else:
        model = square_detector(image_size=args.tile) if args.model == "squares" else yolov8(image_size=args.tile)
    if args.pages:
        images, truths = [_page_mosaic(h, w, i) for i in range(args.images)], [np.zeros((0, 4))] * args.images
    else:
        data = [planted_squares(h, w, count=args.squares, seed=i) for i in range(args.images)]
        images, truths = [d[0] for d in data], [d[1] for d in data]
    sliced = _detector(model, args, provider)
    rows: list[dict[str, Any]] = []
    try:
        cut = [sliced.tiles(im).data.items for im in images]
        pieces = [p.data for items in cut for p in items]
        n = len(pieces)
        sliced.run_batch(images[:1])  # warm up
        base = _engine_rate(model, provider, pieces, args.tile, args.batch, args.repeat)
        answers: list[Any] = []

        def by_map() -> None:
            answers[:] = list(sliced.map(images, batch_size=args.batch))

        t_map = _best(by_map, args.repeat)
        recall = _recall(truths, answers)
        t_batch = _best(lambda: sliced.run_batch(images), args.repeat)
        # the detector alone on the same pieces (the tiles and the whole images, letterboxed as the pipeline feeds
        # them): what the slicing and the merge add on top of the detector's own stream
        fed = [p.data for im in images for p in sliced._split(0, im)[1].items]
        t_det = _best(lambda: list(sliced.detector.map(fed, batch_size=args.batch)), args.repeat)
        kind = type(sliced.detector).__name__
        geometry = getattr(sliced.detector, "geometry", None)
        print(f"# {provider}: detector {kind}, geometry {geometry}", flush=True)
        if args.parts:
            parts = _parts(sliced, fed, args.batch, args.repeat)
            print(f"# {provider} parts (pieces/s): {json.dumps(parts)}", flush=True)
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                with (Path(args.out) / "sliced_parts.jsonl").open("a") as f:
                    f.write(json.dumps({"device": provider, "model": args.model, "tile": args.tile, **parts}) + "\n")
        modes = (("engine", base), ("detector-map", t_det), ("sliced-map", t_map), ("sliced-run_batch", t_batch))
        for mode, seconds in modes:
            rows.append(
                {
                    "device": provider,
                    "mode": mode,
                    "detector": kind,
                    "model": args.model,
                    "image": f"{w}x{h}",
                    "images": len(images),
                    "pieces": n,
                    "batch": args.batch,
                    "seconds": round(seconds, 4),
                    "tiles_per_s": round(n / seconds, 1),
                    "ratio": round(base / seconds, 3),
                    "recall": recall if mode != "engine" else None,
                    "content": "pages" if args.pages else "squares",
                    "nms_mode": args.nms_mode,
                }
            )
    finally:
        sliced.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", nargs="+", default=None, choices=["cuda", "cpu"], help="default: cuda cpu")
    p.add_argument("--quick", action="store_true", help="CPU only, two 1,500 x 1,000 images, the square model")
    p.add_argument("--images", type=int, default=4)
    p.add_argument("--size", default="4000x6000", help="HxW of the images")
    p.add_argument("--tile", type=int, default=640)
    p.add_argument("--overlap", type=float, default=0.2)
    p.add_argument("--batch", type=int, default=None, help="tiles per engine call (default: 32 on cuda, 8 on cpu)")
    p.add_argument("--model", default="yolov8", choices=["yolov8", "squares"])
    p.add_argument("--model-path", help="a trained detector's .onnx instead (--tile: its input size)")
    p.add_argument("--conf", type=float, default=0.25, help="the recipe's confidence threshold (default 0.25)")
    p.add_argument("--pages", action="store_true", help="images of document pages (for --model-path DocLayNet)")
    p.add_argument("--nms-mode", default="auto", help="fuse's nms_mode (dense, host, ...; default: the recipe's)")
    p.add_argument("--fuse", default="auto", choices=["auto", "true", "false"])
    p.add_argument("--squares", type=int, default=60, help="planted squares per image")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--parts", action="store_true", help="also time the detector's parts alone (see _parts)")
    p.add_argument("--out", default=os.environ.get("OUT"))
    args = p.parse_args(argv)
    if args.quick:
        args.device, args.images, args.size, args.tile, args.model, args.repeat = (
            ["cpu"],
            2,
            "1000x1500",
            320,
            "squares",
            2,
        )
        args.squares = 20
    args.size = tuple(int(v) for v in args.size.lower().split("x"))
    print(f"# amdinfer {amdinfer.__version__}, {platform.node()}, {platform.processor() or platform.machine()}")
    print("| device | mode | detector | model | image | images | pieces | batch | s | tiles/s | vs engine | recall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    for device in args.device or ["cuda", "cpu"]:
        ns = argparse.Namespace(**vars(args))
        ns.batch = args.batch or (32 if device == "cuda" else 8)
        for r in run_device(ns, device):
            rows.append(r)
            recall = "" if r["recall"] is None else f"{r['recall']:.3f}"
            print(
                f"| {r['device']} | {r['mode']} | {r['detector']} | {r['model']} | {r['image']} | {r['images']} | "
                f"{r['pieces']} | {r['batch']} | {r['seconds']} | {r['tiles_per_s']} | {r['ratio']}x | {recall} |",
                flush=True,
            )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "sliced.jsonl").open("a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
