"""Images in, answers out on a GPU: fused pipelines against the engine's device-IO rate (one run, one table).

Models, batch 64, uint8 host images of 640x480 and 1920x1080: the YOLOv8n-style builder (640, random weights,
random images), ResNet-50 (224), and with ``--trained`` a trained Ultralytics YOLOv8n export (made
batch-dynamic by :func:`batch_dynamic`) on ``--pages`` (an .npz of RGB images per ``"HxW"`` key):

* ``engine-dev``: ``engine.run`` with a device tensor in and device arrays out (the model alone; the target).
* ``fused-np``/``fused-pinned``: the fused pipeline (:meth:`amdinfer.Pipeline.fuse` with ``image_size``, GPU
  defaults) on one pre-stacked uint8 batch, pageable or pinned (:class:`PinnedStaging`), to per-image results.
* ``fused-run_batch``/``fused-map``: ``FusedPipeline.run_batch(list)`` / ``.map(stream)`` (host stacking
  included).
* ``fused-dev``: the fused graph with the uint8 batch already on the device; ``fused-dev-exact`` the same with
  ``resize="exact"``; ``fused-dev-offset``/``fused-pinned-offset`` (detectors) with ORT's CUDA
  ``NonMaxSuppression`` (``nms_mode="offset"``) instead of the dense NMS; ``fused-pre-dev`` only the
  preprocessing fused (raw outputs left on the device).
* parity columns: fused vs stage-by-stage, dense vs offset NMS, fast vs exact resize, candidate counts.

and at batch 1: ``engine.run`` with device IO and ``engine.prepare(...)()`` against the hand-tuned session
(IO bound once, CUDA graph, outputs read in place), with the per-piece timings of ``engine.run`` (yolov8);
NumPy IO against a plain ``InferenceSession.run``. Throughput is images/s from the median time per call.
Results: stdout, and ``pipeline_gpu.md``/``.jsonl`` (+ profiles) under ``--out`` (or ``$OUT``).

``--devices 0 0,1`` (issue 25) runs instead, per device set: one stage-by-stage pipeline per GPU (a thread each) over
host images of mixed sizes, and each GPU's engine fed device tensors on its own GPU; items/s, the ratio to the first
set, and whether every GPU's answers equal the first GPU's on the same images.

    python benchmarks/pipeline_gpu.py --trained yolov8n-doclaynet.onnx --pages pages.npz   # GPU + torch
    AMDINFER_BENCH_QUICK=1 python benchmarks/pipeline_gpu.py --provider cpu   # smoke run anywhere
    python benchmarks/pipeline_gpu.py --devices 0 0,1 --out /tmp/out           # two GPUs (issue 25)
"""

# ruff: noqa: B023  (the timed lambdas run before the loop moves on)
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

import amdinfer
from amdinfer.engines._staging import PinnedStaging
from amdinfer.postprocess import Nms, ScaleBoxes, Softmax, TopK, YoloDecode
from amdinfer.preprocess import CenterCrop, HwcToChw, Letterbox, Normalize, Resize
from amdinfer.testing import models
from amdinfer.testing.models import batch_dynamic

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"


def per_call(fn: Callable[[], Any], *, warmup: int = 3, min_iters: int = 10, min_seconds: float = 1.0) -> float:
    for _ in range(warmup):
        fn()
    times: list[float] = []
    t_end = time.perf_counter() + min_seconds
    while len(times) < min_iters or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 20 * min_iters:
            break
    return statistics.median(times)


def pipeline_for(name: str, model: Any, providers: list[str], precision: str, device: int = 0) -> amdinfer.Pipeline:
    if name == "yolov8":
        size = 64 if QUICK else 640
        pre = [Letterbox(size), Normalize(scale=1 / 255), HwcToChw()]
        post = [YoloDecode(conf_threshold=0.25), Nms(iou_threshold=0.7, max_det=300), ScaleBoxes()]
    else:
        size = 224
        pre = [Resize(256), CenterCrop(size)]
        pre += [Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], scale=1 / 255), HwcToChw()]
        post = [Softmax(), TopK(5)]
    return amdinfer.Pipeline(
        preprocess=pre,
        engine=model,
        postprocess=post,
        backend="ort",
        providers=providers,
        precision=precision,
        device=device,
    )


def _answers(result: Any) -> dict[str, np.ndarray]:
    from amdinfer.serve._answers import result_tensors  # the served layout: one comparable dict per answer

    return result_tensors(result)


def _same_answers(a: list[Any], b: list[Any], atol: float = 1e-3) -> bool:
    for x, y in zip(a, b, strict=True):
        tx, ty = _answers(x), _answers(y)
        if tx.keys() != ty.keys():
            return False
        for k in tx:
            u, v = np.asarray(tx[k]), np.asarray(ty[k])
            if u.shape != v.shape or not np.allclose(u.astype(np.float64), v.astype(np.float64), atol=atol):
                return False
    return True


def _rate_threads(devices: list[int], work: Callable[[int, int], int], seconds: float) -> float:
    """Items/s of one thread per device, each calling ``work(device, k)`` (k = its call count) for ``seconds``."""
    import threading

    done = dict.fromkeys(devices, 0)
    errors: list[str] = []
    stop = time.perf_counter() + seconds

    def loop(d: int) -> None:
        k = 0
        try:
            while time.perf_counter() < stop:
                done[d] += work(d, k)
                k += 1
        except Exception as exc:  # reported, not raised in a thread
            errors.append(f"device {d}: {type(exc).__name__}: {str(exc)[:200]}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(d,)) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return sum(done.values()) / (time.perf_counter() - t0)


def multi_device(
    device_sets: list[list[int]], ep: str, precision: str, torch: Any, batch: int, seconds: float, record: Any
) -> None:
    """Issue 25, item 2: a pipeline per GPU (a thread each) over host images of mixed sizes, and each GPU's engine
    fed device tensors on its own GPU; items/s per device set, its ratio to the first set, answers against
    device ``first``'s on the same images."""
    rng = np.random.default_rng(1)
    sizes = [(48, 64), (60, 100), (40, 40)] if QUICK else [(480, 640), (720, 1280), (1080, 1920)]
    images = [rng.integers(0, 256, (*sizes[i % len(sizes)], 3), np.uint8) for i in range(3 * batch)]
    chunks = [images[k : k + batch] for k in range(0, len(images), batch)]
    everyone = sorted({d for s in device_sets for d in s})
    for name in ("resnet50", "yolov8"):
        model = models.resnet50() if name == "resnet50" else models.yolov8(image_size=64 if QUICK else 640)
        pipes = {d: pipeline_for(name, model, [ep], precision, device=d) for d in everyone}
        try:
            first = everyone[0]
            reference = [pipes[first].run_batch(c) for c in chunks]
            engine0 = pipes[first].engine
            spec = engine0.inputs[0]
            shape = (batch, *(int(x) if isinstance(x, int) else 640 for x in spec.shape[1:]))
            dev = {d: rng.random(shape, dtype=np.float32) for d in everyone}
            if torch is not None:
                dev = {d: torch.from_numpy(x).to(f"cuda:{d}") for d, x in dev.items()}
            base = None
            for devs in device_sets:
                row: dict[str, Any] = {"case": "multi-device", "model": name, "devices": devs, "batch": batch}
                # every chunk on every device once: the answers to compare, and each device's warm-up
                answers = [(pipes[d].run_batch(c), ref) for d in devs for c, ref in zip(chunks, reference)]
                row["same_answers_as_device_" + str(first)] = all(_same_answers(a, ref) for a, ref in answers)

                def host(d: int, k: int) -> int:
                    chunk = chunks[(k + d) % len(chunks)]
                    pipes[d].run_batch(chunk)
                    return len(chunk)

                def device(d: int, k: int) -> int:
                    pipes[d].engine.run({spec.name: dev[d]})
                    return batch

                row["host_mixed_img_s"] = round(_rate_threads(devs, host, seconds), 1)
                row["device_tensors_img_s"] = round(_rate_threads(devs, device, seconds), 1)
                if base is None:
                    base = row
                else:
                    for k in ("host_mixed_img_s", "device_tensors_img_s"):
                        row[k + "_vs_first_set"] = round(row[k] / base[k], 2)
                record(row)
        finally:
            for p in pipes.values():
                p.close()


def trained_pipeline(path: str, providers: list[str], precision: str) -> amdinfer.Pipeline:
    """``amdinfer.yolo`` on a trained Ultralytics export made batch-dynamic (its own size, conf 0.25, iou 0.7)."""
    import onnx

    return amdinfer.yolo(
        batch_dynamic(onnx.load(path)), backend="ort", providers=providers, precision=precision, channels="RGB"
    )


def profile_calls(fn: Callable[[], Any], n: int) -> str:
    """cProfile of ``n`` calls: the top functions by own time (where the per-call cost goes)."""
    import cProfile
    import io
    import pstats

    for _ in range(20):
        fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(22)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out", default=os.environ.get("OUT"))
    p.add_argument("--batch", type=int, default=4 if QUICK else 64)
    p.add_argument("--budget", type=float, default=400.0)
    p.add_argument("--trained", default=None, help="a trained Ultralytics YOLO export (batch 1 is made dynamic)")
    p.add_argument("--pages", default=None, help=".npz of uint8 RGB images per size key 'HxW' for --trained")
    p.add_argument("--only", default=None, help="comma-separated model names to run (yolov8,resnet50,trained)")
    p.add_argument(
        "--devices",
        nargs="+",
        default=None,
        help="instead of the one-GPU table: a pipeline and an engine per listed GPU, e.g. --devices 0 0,1 "
        "(issue 25: host images of mixed sizes and device tensors on each GPU, answers against the first GPU's)",
    )
    p.add_argument("--seconds", type=float, default=1.0 if QUICK else 5.0, help="--devices: seconds per rate")
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    gpu = args.provider == "cuda"
    ep = "CUDAExecutionProvider" if gpu else "CPUExecutionProvider"
    precision = "fp16" if gpu else "fp32"
    torch = None
    if gpu:
        import torch  # type: ignore[no-redef]
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    env = {
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
        "provider": ep,
        "gpu": torch.cuda.get_device_name(0) if torch is not None else None,
        "torch": getattr(torch, "__version__", None),
    }
    print(json.dumps(env), flush=True)

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            with open(out / "pipeline_gpu.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")

    def timed(row: dict[str, Any], key: str, fn: Callable[[], Any], batch: int) -> None:
        try:
            row[key] = round(batch / per_call(fn, min_seconds=0.3 if QUICK else 1.0), 1)
        except Exception as exc:  # one failing mode must not lose the others
            row[key] = None
            row[key + "_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    b = args.batch
    if args.devices:
        sets = [[int(d) for d in text.split(",")] for text in args.devices]
        multi_device(sets, ep, precision, torch, b, args.seconds, record)
        return 0
    sizes = [(48, 64), (60, 100)] if QUICK else [(480, 640), (1080, 1920)]
    rng = np.random.default_rng(0)
    names = ["yolov8", "resnet50"] + (["trained"] if args.trained else [])
    if args.only:  # in the order given
        names = [n for n in args.only.split(",") if n in names]
    pages = dict(np.load(args.pages)) if args.pages else {}
    for name in names:
        if name == "trained":
            pipe = trained_pipeline(args.trained, [ep], precision)
        else:
            model = models.yolov8(image_size=64 if QUICK else 640) if name == "yolov8" else models.resnet50()
            pipe = pipeline_for(name, model, [ep], precision)
        engine = pipe.engine
        in_name = engine.inputs[0].name
        side = (
            int(engine.inputs[0].shape[-1])
            if name == "trained"
            else (64 if QUICK else 640)
            if name == "yolov8"
            else 224
        )
        x = rng.random((b, 3, side, side), dtype=np.float32)
        xd = torch.from_numpy(x).to("cuda") if torch is not None else x
        base: dict[str, Any] = {"model": name, "precision": precision, "batch": b}
        timed(base, "engine-dev", lambda: engine.run({in_name: xd}), b)
        timed(base, "engine-np", lambda: engine.run({in_name: x}), b)
        for h, w in sizes:
            if time.perf_counter() - t_start > args.budget:
                record({"model": name, "image": f"{w}x{h}", "skipped": "budget"})
                continue
            row = {**base, "image": f"{w}x{h}"}
            if name == "trained" and f"{h}x{w}" in pages:
                src = pages[f"{h}x{w}"]
                images = [np.ascontiguousarray(src[i % len(src)]) for i in range(b)]
            else:
                images = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(b)]
            batch = np.stack(images)
            try:
                fused = pipe.fuse(image_size=(h, w))
            except Exception as exc:
                row["error"] = f"fuse: {type(exc).__name__}: {str(exc)[:300]}"
                record(row)
                continue
            fe = fused.engine
            _, samples = fused.feeds(images)
            timed(row, "fused-np", lambda: fused.results(fe.run({"images": batch}), samples), b)
            staging = PinnedStaging(depth=2)
            pinned = staging.next(batch.shape, np.uint8)
            np.copyto(pinned, batch)
            row["pinned"] = staging.pinned
            timed(row, "fused-pinned", lambda: fused.results(fe.run({"images": pinned}), samples), b)
            timed(row, "fused-run_batch", lambda: fused.run_batch(images), b)

            def stream(n: int) -> float:
                t0 = time.perf_counter()
                for _ in fused.map((images[i % b] for i in range(n * b)), batch_size=b):
                    pass
                return time.perf_counter() - t0

            try:
                stream(2)
                n = 2 if QUICK else 8
                row["fused-map"] = round(n * b / stream(n), 1)
            except Exception as exc:
                row["fused-map"] = None
                row["fused-map_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            if torch is not None:
                bd = torch.from_numpy(batch).to("cuda")
                timed(row, "fused-dev", lambda: fe.run({"images": bd}), b)
                try:  # the cv2-exact in-graph resize (int32 arithmetic) instead of resize="fast"
                    ex = pipe.fuse(image_size=(h, w), resize="exact")
                    timed(row, "fused-dev-exact", lambda: ex.engine.run({"images": bd}), b)
                    ua, ub = ex.run_batch(images[:8]), fused.run_batch(images[:8])
                    if name == "resnet50":
                        row["fast_vs_exact_top1_equal"] = sum(int(u.indices[0] == v.indices[0]) for u, v in zip(ua, ub))
                    else:
                        row["fast_vs_exact_counts"] = [(len(u), len(v)) for u, v in zip(ua, ub)]
                    if name == "trained" and out is not None:  # per-op times of both fused graphs (ORT profiler)
                        for tag, fp in (("fast", fused), ("exact", ex)):
                            rep = amdinfer.profile.profile(fp.engine, {"images": batch}, runs=3, warmup=1)
                            (out / f"profile_fused_{name}_{w}x{h}_{tag}.txt").write_text(rep.format(top=25))
                    ex.close()
                except Exception as exc:
                    row["fused-dev-exact_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                if name != "resnet50":  # ORT's CUDA NonMaxSuppression (one class-offset pass) instead of "dense"
                    try:
                        off = pipe.fuse(image_size=(h, w), nms_mode="offset")
                        timed(row, "fused-dev-offset", lambda: off.engine.run({"images": bd}), b)
                        timed(
                            row,
                            "fused-pinned-offset",
                            lambda: off.results(off.engine.run({"images": pinned}), samples),
                            b,
                        )
                        same = [
                            (
                                len(u),
                                len(v),
                                float(np.abs(u.boxes - v.boxes).max(initial=0)) if len(u) == len(v) else None,
                            )
                            for u, v in zip(fused.run_batch(images[:8]), off.run_batch(images[:8]))
                        ]
                        row["dense_vs_offset"] = same
                        cand = fe.run({"images": pinned}).get("candidates")
                        if cand is not None:
                            row["candidates_max"] = int(np.max(cand))
                            row["candidates_median"] = float(np.median(cand))
                        off.close()
                    except Exception as exc:
                        row["fused-offset_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                tuning = fe.info.settings.get("tuning") if hasattr(fe.info, "settings") else None
                row["fused-tuning"] = str(tuning)[:300]
                # where the time goes: the preprocessing alone fused (raw model outputs, left on the device)
                try:
                    pre_only = amdinfer.Pipeline(preprocess=pipe.preprocess, engine=engine).fuse(image_size=(h, w))
                    timed(row, "fused-pre-dev", lambda: pre_only.engine.run({"images": bd}), b)
                    pre_only.close()
                except Exception as exc:
                    row["fused-pre-dev_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            for key in ("fused-np", "fused-pinned", "fused-run_batch", "fused-map", "fused-dev"):
                if row.get(key) and row.get("engine-dev"):
                    row[f"{key}/engine-dev"] = round(row[key] / row["engine-dev"], 3)
            # parity on this batch: fused against stage by stage (the host path), first 4 images
            try:
                a, s = fused.run_batch(images[:4]), pipe.run_batch(images[:4])
                if name != "resnet50":
                    row["parity_counts"] = [(len(u), len(v)) for u, v in zip(a, s)]
                    row["parity_max_box_px"] = max(
                        (float(np.abs(u.boxes - v.boxes).max(initial=0)) for u, v in zip(a, s) if len(u) == len(v)),
                        default=None,
                    )
                else:
                    row["parity_top5_equal"] = all(u.indices.tolist() == v.indices.tolist() for u, v in zip(a, s))
            except Exception as exc:
                row["parity_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            record(row)
            fused.close()
        # batch 1: engine call overhead against the hand-tuned session
        if time.perf_counter() - t_start < args.budget:
            row1: dict[str, Any] = {"model": name, "precision": precision, "batch": 1, "image": "-"}
            x1 = x[:1].copy()
            proto = engine.model.proto
            if precision == "fp16" and not any(t.data_type == 10 for t in proto.graph.initializer):
                from amdinfer.quantize import precision_quantizer

                proto = precision_quantizer("fp16").quantize(proto)
            so = ort.SessionOptions()
            so.log_severity_level = 3
            opts = {"device_id": "0"}
            naive = ort.InferenceSession(proto.SerializeToString(), so, providers=[(ep, opts)])
            timed(row1, "raw-naive", lambda: naive.run(None, {in_name: x1}), 1)
            timed(row1, "engine-np", lambda: engine.run({in_name: x1}), 1)
            if gpu:
                best_opts = {**opts, "prefer_nhwc": "1", "enable_cuda_graph": "1"}
                best = ort.InferenceSession(proto.SerializeToString(), so, providers=[(ep, best_opts)])
                binding = best.io_binding()
                xin = ort.OrtValue.ortvalue_from_numpy(x1, "cuda", 0)
                binding.bind_ortvalue_input(in_name, xin)
                for o in best.get_outputs():
                    binding.bind_output(o.name, "cuda", 0)
                best.run_with_iobinding(binding)
                fixed = [
                    ort.OrtValue.ortvalue_from_shape_and_type(ov.shape(), np.float32, "cuda", 0)
                    for ov in binding.get_outputs()
                ]
                for o, ov in zip(best.get_outputs(), fixed):
                    binding.bind_ortvalue_output(o.name, ov)
                timed(row1, "raw-best", lambda: best.run_with_iobinding(binding), 1)
                x1d = torch.from_numpy(x1).to("cuda")
                timed(row1, "engine-dev", lambda: engine.run({in_name: x1d}), 1)
                step = engine.prepare({in_name: x1d})  # checks and binding once (Engine.prepare)
                timed(row1, "engine-prepared", step, 1)
                if name == "yolov8":  # where the per-call time goes, piece by piece (no profiler overhead)
                    from amdinfer.engines._dlpack import device_feed

                    runner = engine._runner
                    checked = engine._check_feeds({in_name: x1d})
                    row1["us_device_feed"] = round(per_call(lambda: device_feed(in_name, x1d)) * 1e6, 1)
                    row1["us_check_feeds"] = round(per_call(lambda: engine._check_feeds({in_name: x1d})) * 1e6, 1)
                    row1["us_fence"] = round(per_call(runner._fence) * 1e6, 1)
                    row1["us_runner_run"] = round(per_call(lambda: runner.run(checked, None, "auto")) * 1e6, 1)
                    row1["us_engine_run"] = round(per_call(lambda: engine.run({in_name: x1d})) * 1e6, 1)
                    row1["us_raw_best"] = round(per_call(lambda: best.run_with_iobinding(binding)) * 1e6, 1)
                    text = profile_calls(lambda: engine.run({in_name: x1d}), 2000)
                    print(text, flush=True)
                    if out is not None:
                        (out / "profile_b1_engine_dev.txt").write_text(text)
                    text = profile_calls(lambda: best.run_with_iobinding(binding), 2000)
                    if out is not None:
                        (out / "profile_b1_raw_best.txt").write_text(text)
            for a, c in (("engine-dev", "raw-best"), ("engine-prepared", "raw-best"), ("engine-np", "raw-naive")):
                if row1.get(a) and row1.get(c):
                    row1[f"{a}/{c}"] = round(row1[a] / row1[c], 3)
            record(row1)
        pipe.close()
    md = table(rows, env)
    print(md)
    if out is not None:
        (out / "pipeline_gpu.md").write_text(md)
    return 0


def table(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    cols = [
        "model",
        "image",
        "batch",
        "engine-dev",
        "engine-np",
        "fused-np",
        "fused-pinned",
        "fused-run_batch",
        "fused-map",
        "fused-dev",
        "fused-pre-dev",
        "fused-dev-exact",
        "fused-dev-offset",
        "fused-pinned-offset",
        "candidates_median",
        "fused-pinned/engine-dev",
        "fused-map/engine-dev",
        "raw-best",
        "raw-naive",
        "engine-prepared",
        "engine-dev/raw-best",
        "engine-prepared/raw-best",
        "engine-np/raw-naive",
    ]
    lines = [f"<!-- {json.dumps(env)} -->", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
