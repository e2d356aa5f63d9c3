"""The GPU data path measured: raw ONNX Runtime (naive and hand-tuned) against amdinfer's defaults.

For ResNet-50 (224) and the YOLOv8-style detector (640), fp32 and fp16, per batch size:

* ``raw-naive``: ``InferenceSession.run`` with NumPy in and out, the CUDA EP's default options.
* ``raw-best``: hand-tuned: IO bound once to device buffers, ``prefer_nhwc``, exhaustive cuDNN search,
  CUDA graphs (one per input buffer), and no copy per iteration (two inputs already on the device,
  rotated like every other mode's inputs, so none of them sits in the L2 cache).
* ``amd-dev``: ``amdinfer.load(...)`` with its defaults, ``engine.run`` with a device tensor in and
  a device array out (PyTorch tensor if torch is installed, else an ``OrtValue``).
* ``amd-np``: the same engine with NumPy in and out.
* ``amd-many``: the same engine through ``engine.run_many`` with host (NumPy) batches, three in flight:
  one batch's copies overlap another's compute.
* ``amd-dev16``/``amd-many16`` (fp16 only): ``fp16_io=True``, fp16 tensors in and out.
* ``torch``: PyTorch eager (torchvision ResNet-50, random weights; YOLOv8 has no torch model here).

fp16 raw baselines run the model converted by ONNX Runtime's float16 converter with fp16 IO; amdinfer's
``precision="fp16"`` keeps fp32 IO unless ``fp16_io=True``. Throughput is images/s from the median
time per batch (``amd-many``: total time over the stream). Results go to stdout as a Markdown table and,
with ``--out DIR`` (or ``$OUT``), to ``gpu_bench.jsonl`` and ``gpu_bench.md`` there, row by row, so a
run cut short keeps what it measured. ``--budget`` seconds bounds the run: cases that would start after
it are listed as skipped.

    python benchmarks/gpu.py                          # on a GPU machine with onnxruntime-gpu
    AMDINFER_BENCH_QUICK=1 python benchmarks/gpu.py --provider cpu   # smoke run anywhere
"""

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
import onnx
import onnxruntime as ort

import amdinfer
from amdinfer.quantize import precision_quantizer
from amdinfer.testing import models

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"
MODES = ("raw-naive", "raw-best", "amd-dev", "amd-np", "amd-many", "amd-dev16", "amd-many16", "torch")


# ---------------------------------------------------------------------------------------------- timing
def per_call(fn: Callable[[], Any], *, warmup: int, min_iters: int, min_seconds: float) -> tuple[float, int]:
    """Median seconds per call of a synchronous ``fn`` after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    t_end = time.perf_counter() + min_seconds
    while len(times) < min_iters or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= 10 * min_iters and time.perf_counter() >= t_end:
            break
    return statistics.median(times), len(times)


class Bench:
    def __init__(self, provider: str, out: Path | None, budget: float) -> None:
        self.provider = provider
        self.gpu = provider != "cpu"
        self.out = out
        self.budget = budget
        self.t0 = time.perf_counter()
        self.rows: list[dict[str, Any]] = []
        self.torch = _torch() if self.gpu else None
        self.dev = "cuda" if self.gpu else "cpu"
        self.ep = "CUDAExecutionProvider" if self.gpu else "CPUExecutionProvider"

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        line = json.dumps(row)
        print(line, flush=True)
        if self.out is not None:
            with open(self.out / "gpu_bench.jsonl", "a") as fh:
                fh.write(line + "\n")

    def timing(self, batch: int) -> dict[str, Any]:
        if QUICK:
            return {"warmup": 2, "min_iters": 3, "min_seconds": 0.05}
        if batch >= 256:
            return {"warmup": 3, "min_iters": 5, "min_seconds": 0.8}
        return {"warmup": 5, "min_iters": 10, "min_seconds": 0.8}

    # ------------------------------------------------------------------ sessions
    def raw_session(self, model: bytes, tuned: bool) -> Any:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if not self.gpu:
            return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        opts: dict[str, str] = {"device_id": "0"}
        if tuned:
            opts.update(prefer_nhwc="1", cudnn_conv_algo_search="EXHAUSTIVE", enable_cuda_graph="1")
        return ort.InferenceSession(model, so, providers=[(self.ep, opts)])

    def raw_best_fn(self, sess: Any, feeds: list[dict[str, np.ndarray]], graph_id: int) -> Callable[[], Any]:
        """Hand-tuned loop: one IOBinding (and CUDA graph) per input buffer, inputs already on the device.

        Two input buffers are rotated, as every other mode rotates two inputs: a single buffer that
        fits in the 60 MB L2 cache would flatter this baseline.
        """
        runs = []
        keep: list[Any] = []
        for k, feed in enumerate(feeds):
            binding = sess.io_binding()
            for name, arr in feed.items():
                ov = ort.OrtValue.ortvalue_from_numpy(arr, self.dev, 0)
                keep.append(ov)
                binding.bind_ortvalue_input(name, ov)
            # output shapes from one plain run (graph id -1), then fixed device outputs for the graph
            ro0 = ort.RunOptions()
            if self.gpu:
                ro0.add_run_config_entry("gpu_graph_id", "-1")
            for o in sess.get_outputs():
                binding.bind_output(o.name, self.dev, 0)
            sess.run_with_iobinding(binding, ro0)
            for o, ov in zip(sess.get_outputs(), binding.get_outputs()):
                fixed = ort.OrtValue.ortvalue_from_shape_and_type(ov.shape(), _np_type(ov.data_type()), self.dev, 0)
                keep.append(fixed)
                binding.bind_ortvalue_output(o.name, fixed)
            ro = ort.RunOptions()
            if self.gpu:
                ro.add_run_config_entry("gpu_graph_id", str(graph_id * len(feeds) + k))
            runs.append((binding, ro))
        counter = iter(range(10**9))

        def run() -> None:
            binding, ro = runs[next(counter) % len(runs)]
            sess.run_with_iobinding(binding, ro)

        run.keep = keep  # type: ignore[attr-defined]
        return run

    def device_tensor(self, arr: np.ndarray) -> Any:
        if self.torch is not None:
            return self.torch.from_numpy(arr).to("cuda")
        return ort.OrtValue.ortvalue_from_numpy(arr, self.dev, 0)


def _np_type(t: str) -> Any:
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16}[t]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_resnet50(torch: Any, precision: str) -> Any:
    try:
        import torchvision
    except ImportError:
        return None
    net = torchvision.models.resnet50(weights=None).eval().cuda()
    return net.half() if precision == "fp16" else net


# ---------------------------------------------------------------------------------------------- cases
def build(name: str) -> onnx.ModelProto:
    if name == "resnet50":
        return models.resnet50(image_size=64 if QUICK else 224)
    return models.yolov8(image_size=64 if QUICK else 640)


def run_case(b: Bench, name: str, precision: str, batches: list[int], state: dict[str, Any]) -> None:
    """All modes for one model and precision, one session/engine per mode shared across batch sizes."""
    model = build(name)
    model.ir_version = min(model.ir_version, 10)  # onnxruntime <= 1.31 reads IR <= 13; the graphs need 8+
    fp32_bytes = model.SerializeToString()
    fp16 = precision_quantizer("fp16", keep_io_types=False)
    raw_bytes = fp16.quantize(model).SerializeToString() if precision == "fp16" else fp32_bytes
    in_name = model.graph.input[0].name
    naive = b.raw_session(raw_bytes, tuned=False)
    best = b.raw_session(raw_bytes, tuned=True)
    t_load = time.perf_counter()
    engine = amdinfer.load(model, backend="ort", providers=[b.provider], precision=precision)
    load_s = time.perf_counter() - t_load
    engine16 = None
    if precision == "fp16" and name == "resnet50":
        engine16 = amdinfer.load(model, backend="ort", providers=[b.provider], precision="fp16", fp16_io=True)
    state.setdefault("info", {})[f"{name}-{precision}"] = {
        "tuning": engine.info.settings.get("tuning", {}).get(b.ep),
        "data_path": engine.info.settings.get("data_path"),
        "provider_options": engine.info.settings.get("provider_options", {}).get(b.ep),
        "notes": engine.info.notes,
        "load_seconds": round(load_s, 2),
    }
    net = None
    if b.torch is not None and name == "resnet50":
        net = torch_resnet50(b.torch, precision)
    for gid, batch in enumerate(batches):
        if b.elapsed() > b.budget:
            b.record({"model": name, "precision": precision, "batch": batch, "skipped": "time budget"})
            continue
        sessions = {"naive": naive, "best": best, "engine": engine, "engine16": engine16, "net": net}
        b.record(measure_batch(b, name, precision, batch, gid, in_name, sessions))
    engine.close()
    if engine16 is not None:
        engine16.close()


def measure_batch(
    b: Bench, name: str, precision: str, batch: int, gid: int, in_name: str, s: dict[str, Any]
) -> dict[str, Any]:
    """Every mode at one batch size; a mode that fails records its error and the others go on."""
    naive, best, engine, engine16, net = s["naive"], s["best"], s["engine"], s["engine16"], s["net"]
    io_dtype = np.float16 if precision == "fp16" else np.float32
    rng = np.random.default_rng(batch)
    size = 64 if QUICK else (224 if name == "resnet50" else 640)
    x32 = [rng.random((batch, 3, size, size), dtype=np.float32) for _ in range(2)]
    xio = [x.astype(io_dtype) for x in x32]
    timing = b.timing(batch)
    row: dict[str, Any] = {"model": name, "precision": precision, "batch": batch}

    def measure(mode: str, fn: Callable[[], Any], **kw: Any) -> None:
        try:
            t, n = per_call(fn, **{**timing, **kw})
            row[mode] = round(batch / t, 1)
            row[mode + "_n"] = n
        except Exception as exc:  # one failing mode must not lose the others
            row[mode] = None
            row[mode + "_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    t_case = time.perf_counter()
    # raw naive
    feeds_np = [{in_name: x} for x in xio]
    it = iter(range(10**9))
    measure("raw-naive", lambda: naive.run(None, feeds_np[next(it) % 2]))
    # raw best
    try:
        best_fn = b.raw_best_fn(best, feeds_np, gid)
        measure("raw-best", best_fn)
    except Exception as exc:
        row["raw-best"] = None
        row["raw-best_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    # amdinfer default: device tensors
    if b.gpu:
        xd = [b.device_tensor(x) for x in x32]
        measure("amd-dev", lambda: engine.run({in_name: xd[next(it) % 2]}))
        if engine16 is not None:
            xd16 = [b.device_tensor(x) for x in xio]
            measure("amd-dev16", lambda: engine16.run({in_name: xd16[next(it) % 2]}))
    # amdinfer default: NumPy in/out
    measure("amd-np", lambda: engine.run({in_name: x32[next(it) % 2]}))

    # amdinfer batch API with host batches
    def stream(eng: Any, xs: list[np.ndarray], n: int) -> float:
        gen = ({in_name: xs[i % 2]} for i in range(n))
        t0 = time.perf_counter()
        for _ in eng.run_many(gen, prefetch=2):
            pass
        return time.perf_counter() - t0

    for mode, eng, xs in (("amd-many", engine, x32), ("amd-many16", engine16, xio)):
        if eng is None:
            continue
        try:
            stream(eng, xs, 4 if QUICK else 7)  # warm-up: each ring slot's first run and graph capture
            n = 4 if QUICK else (8 if batch >= 256 else (16 if batch >= 64 else 200))
            total = stream(eng, xs, n)
            row[mode] = round(n * batch / total, 1)
            row[mode + "_n"] = n
        except Exception as exc:
            row[mode] = None
            row[mode + "_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    # PyTorch eager
    if net is not None:
        torch = b.torch
        tdt = torch.float16 if precision == "fp16" else torch.float32
        xt = [torch.from_numpy(x).to("cuda", tdt) for x in x32]

        def eager() -> None:
            with torch.inference_mode():
                net(xt[next(it) % 2])
            torch.cuda.synchronize()

        measure("torch", eager)
    row["seconds"] = round(time.perf_counter() - t_case, 1)
    for a, c in (
        ("amd-dev", "raw-best"),
        ("amd-dev", "raw-naive"),
        ("amd-many", "amd-dev"),
        ("amd-np", "raw-naive"),
    ):
        if row.get(a) and row.get(c):
            row[f"{a}/{c}"] = round(row[a] / row[c], 3)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["model", "precision", "batch", *MODES, "amd-dev/raw-best", "amd-dev/raw-naive", "amd-many/amd-dev"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['model']} | {r['precision']} | {r['batch']} | skipped: {r['skipped']} |")
            continue
        cells = []
        for c in cols:
            v = r.get(c)
            if v is None:
                v = "err" if f"{c}_error" in r else "–"
            elif isinstance(v, float) and c in MODES:
                v = f"{v:,.0f}"
            cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(b: Bench) -> dict[str, Any]:
    env: dict[str, Any] = {
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "numpy": np.__version__,
        "onnx": onnx.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    if b.torch is not None:
        env["gpu"] = b.torch.cuda.get_device_name(0)
        env["torch"] = b.torch.__version__
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out", default=os.environ.get("OUT"))
    p.add_argument("--budget", type=float, default=420.0, help="seconds after which no new case starts")
    p.add_argument("--models", default="resnet50,yolov8")
    p.add_argument("--plan", default=None, help="cases as model:precision:b1,b2;... (default: all)")
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    b = Bench(args.provider, out, args.budget)
    env = environment(b)
    print(json.dumps({"environment": env}), flush=True)
    state: dict[str, Any] = {}
    plan = []
    if QUICK:
        plan = [(m, p, [1, 2]) for m in ("resnet50", "yolov8") for p in ("fp16", "fp32")]
    else:
        plan = [
            ("resnet50", "fp16", [64, 256, 1]),
            ("resnet50", "fp32", [64, 256, 1]),
            ("yolov8", "fp16", [64, 1, 256]),
            ("yolov8", "fp32", [64, 1, 256]),
        ]
    if args.plan:
        plan = [(m, pr, [int(x) for x in bs.split(",")]) for m, pr, bs in (c.split(":") for c in args.plan.split(";"))]
    wanted = args.models.split(",")
    for name, precision, batches in plan:
        if name not in wanted:
            continue
        if b.elapsed() > b.budget:
            for batch in batches:
                b.record({"model": name, "precision": precision, "batch": batch, "skipped": "time budget"})
            continue
        try:
            run_case(b, name, precision, batches, state)
        except Exception as exc:
            b.record({"model": name, "precision": precision, "batch": 0, "skipped": f"{type(exc).__name__}: {exc}"})
    md = table(b.rows)
    header = f"GPU: {env.get('gpu', args.provider)}; onnxruntime {env['onnxruntime']}; images/s (median)"
    print("\n" + header + "\n" + md)
    if out is not None:
        (out / "gpu_bench.md").write_text(header + "\n\n" + md + "\n")
        (out / "gpu_bench_info.json").write_text(json.dumps({"environment": env, **state}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
