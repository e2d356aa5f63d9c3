"""Re-measure the H200 fp16 figures now that ``precision="fp16"`` goes through ``Fp16Quantizer`` (issue 12).

Before, the ORT engine converted fp16 models with ONNX Runtime's ``convert_float_to_float16(keep_io_types=True)``
directly; now ``precision="fp16"`` means ``quantizer=Fp16Quantizer()`` (block list, cast round trips on
inputs removed, topological sort). For ResNet-50 (224) and the YOLOv8n-style detector (640) from
``amdinfer.testing.models`` (random weights), fp16, batch 1/64/256, images/s from the median time per batch:

* ``amd-dev``: ``amdinfer.load(model, precision="fp16")`` defaults, a device tensor in (fp32: the default
  keeps fp32 IO) and a device array out (a torch CUDA tensor when torch is there, else an ``OrtValue``).
* ``amd-np``: the same engine with NumPy in and out.
* ``raw-best``: a hand-tuned raw ONNX Runtime session on the *same* graph amdinfer runs
  (``Fp16Quantizer().quantize(model)``): IO bound once to device buffers, ``prefer_nhwc``, exhaustive cuDNN
  search, CUDA graphs; two input buffers rotated.
* ``raw-best-conv``: the same hand-tuned session on the previous path's graph
  (``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)``).
* ``amd-dev-conv``: amdinfer's defaults on that converter graph (loaded as is): what ``precision="fp16"``
  ran before the change.

Ratios: ``amd-dev/raw-best`` (the issue's >= 0.97x target), ``amd-dev/amd-dev-conv`` (did the fp16
figures move?) and ``raw-best/raw-best-conv`` (is the graph itself faster or slower?). Graph sizes
(nodes, Casts) and each graph's RMS error against the fp32 model at batch 1 are printed too.

Run on a GPU machine with onnxruntime-gpu on ``sys.path`` (the caller puts it there; ``torch`` is imported
before ``onnxruntime`` so its CUDA libraries are found)::

    python benchmarks/gpu_fp16_recheck.py                    # writes $OUT/gpu_fp16_recheck.md (and .jsonl)
    python benchmarks/gpu_fp16_recheck.py --cpu-smoke --out /tmp/x   # tiny shapes on the CPU EP: checks the script
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:  # before onnxruntime: torch's CUDA libraries are the ones onnxruntime-gpu then finds
    import torch
except ImportError:  # the CPU smoke run needs no torch
    torch = None

import numpy as np
import onnx
import onnxruntime as ort
from gpu import per_call  # benchmarks/gpu.py: the same median-per-call timing as the GPU data-path table

import amdinfer
from amdinfer.model import ModelSource
from amdinfer.quantize import Fp16Quantizer
from amdinfer.testing import models

MODES = ("amd-dev", "amd-np", "raw-best", "raw-best-conv", "amd-dev-conv")
RATIOS = (("amd-dev", "raw-best"), ("amd-dev", "amd-dev-conv"), ("raw-best", "raw-best-conv"))


class Recheck:
    def __init__(self, smoke: bool, out: Path | None) -> None:
        self.smoke = smoke
        self.gpu = not smoke
        self.out = out
        self.provider = "cpu" if smoke else "cuda"
        self.ep = "CPUExecutionProvider" if smoke else "CUDAExecutionProvider"
        self.dev = "cpu" if smoke else "cuda"
        self.torch = torch if (self.gpu and torch is not None and torch.cuda.is_available()) else None
        self.rows: list[dict[str, Any]] = []
        self.graphs: dict[str, Any] = {}

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        line = json.dumps(row)
        print(line, flush=True)
        if self.out is not None:
            with open(self.out / "gpu_fp16_recheck.jsonl", "a") as fh:
                fh.write(line + "\n")

    def timing(self, batch: int) -> dict[str, Any]:
        if self.smoke:
            return {"warmup": 1, "min_iters": 2, "min_seconds": 0.0}
        if batch >= 256:
            return {"warmup": 3, "min_iters": 5, "min_seconds": 0.8}
        return {"warmup": 5, "min_iters": 10, "min_seconds": 0.8}

    # ------------------------------------------------------------------ raw ONNX Runtime, hand-tuned
    def tuned_session(self, model: bytes) -> Any:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if not self.gpu:
            return ort.InferenceSession(model, so, providers=[self.ep])
        opts = {"device_id": "0", "prefer_nhwc": "1", "cudnn_conv_algo_search": "EXHAUSTIVE", "enable_cuda_graph": "1"}
        return ort.InferenceSession(model, so, providers=[(self.ep, opts)])

    def bound_runner(self, sess: Any, feeds: list[dict[str, np.ndarray]], graph_base: int) -> Callable[[], None]:
        """One IOBinding (and CUDA graph) per input buffer, inputs and outputs already on the device."""
        runs = []
        keep: list[Any] = []
        for k, feed in enumerate(feeds):
            binding = sess.io_binding()
            for name, arr in feed.items():
                ov = ort.OrtValue.ortvalue_from_numpy(arr, self.dev, 0)
                keep.append(ov)
                binding.bind_ortvalue_input(name, ov)
            first = ort.RunOptions()
            if self.gpu:
                first.add_run_config_entry("gpu_graph_id", "-1")  # a plain run for the output shapes
            for o in sess.get_outputs():
                binding.bind_output(o.name, self.dev, 0)
            sess.run_with_iobinding(binding, first)
            for o, ov in zip(sess.get_outputs(), binding.get_outputs()):
                dtype = {"tensor(float)": np.float32, "tensor(float16)": np.float16}[ov.data_type()]
                fixed = ort.OrtValue.ortvalue_from_shape_and_type(ov.shape(), dtype, self.dev, 0)
                keep.append(fixed)
                binding.bind_ortvalue_output(o.name, fixed)
            ro = ort.RunOptions()
            if self.gpu:
                ro.add_run_config_entry("gpu_graph_id", str(graph_base + k))
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


# ---------------------------------------------------------------------------------------------- graphs
def build(name: str, smoke: bool) -> onnx.ModelProto:
    if name == "resnet50":
        return models.resnet50(image_size=64 if smoke else 224)
    return models.yolov8(image_size=64 if smoke else 640)


def converter_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """The previous ``precision="fp16"`` path of the ORT engine, as it called ONNX Runtime's converter."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    return convert_float_to_float16(proto, keep_io_types=True, disable_shape_infer=False)


def graph_stats(proto: onnx.ModelProto) -> dict[str, int]:
    ops = [n.op_type for n in proto.graph.node]
    return {"nodes": len(ops), "casts": ops.count("Cast")}


def rms_vs_fp32(r: Recheck, graphs: dict[str, bytes], fp32: bytes, x: np.ndarray, in_name: str) -> dict[str, float]:
    """Each fp16 graph's RMS error against the fp32 model on the same provider (first output, batch 1)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(fp32, so, providers=[r.ep]).run(None, {in_name: x})[0].astype(np.float64)
    out = {}
    for label, data in graphs.items():
        got = ort.InferenceSession(data, so, providers=[r.ep]).run(None, {in_name: x})[0].astype(np.float64)
        out[label] = float(np.sqrt(np.mean((got - ref) ** 2)))
    return out


# ---------------------------------------------------------------------------------------------- cases
def run_model(r: Recheck, name: str, batches: list[int]) -> None:
    model = build(name, r.smoke)
    model.ir_version = min(model.ir_version, 10)  # onnxruntime <= 1.31 reads IR <= 10 here; the graphs need 8+
    quant = Fp16Quantizer().quantize(model)  # what amdinfer's precision="fp16" runs now
    conv = converter_graph(model)
    for g in (quant, conv):
        g.ir_version = min(g.ir_version, 10)
    in_name = model.graph.input[0].name
    quant_bytes, conv_bytes = quant.SerializeToString(), conv.SerializeToString()
    size = 64 if r.smoke else (224 if name == "resnet50" else 640)
    x1 = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    r.graphs[name] = {
        "fp16-quantizer": graph_stats(quant),
        "converter": graph_stats(conv),
        "rms_vs_fp32": rms_vs_fp32(
            r, {"fp16-quantizer": quant_bytes, "converter": conv_bytes}, model.SerializeToString(), x1, in_name
        ),
    }
    print(json.dumps({name: r.graphs[name]}), flush=True)
    sessions = {"raw-best": r.tuned_session(quant_bytes), "raw-best-conv": r.tuned_session(conv_bytes)}
    engine = amdinfer.load(model, backend="ort", providers=[r.provider], precision="fp16")
    # The converter leaves input casts out of topological order (the reason Fp16Quantizer sorts); the old
    # path handed its graph straight to ONNX Runtime, so it is loaded unchecked here.
    conv_source = ModelSource.from_any(conv, check=False)
    engine_conv = amdinfer.load(conv_source, backend="ort", providers=[r.provider])
    r.graphs[name]["amdinfer"] = {
        "precision": engine.info.precision,
        "tuning": engine.info.settings.get("tuning", {}).get(r.ep),
        "provider_options": engine.info.settings.get("provider_options", {}).get(r.ep),
        "notes": engine.info.notes,
    }
    try:
        for gid, batch in enumerate(batches):
            r.record(measure(r, name, batch, gid, in_name, engine, engine_conv, sessions))
    finally:
        engine.close()
        engine_conv.close()


def measure(
    r: Recheck,
    name: str,
    batch: int,
    gid: int,
    in_name: str,
    engine: Any,
    engine_conv: Any,
    sessions: dict[str, Any],
) -> dict[str, Any]:
    """Every mode at one batch size; a mode that fails records its error and the others go on."""
    rng = np.random.default_rng(batch)
    size = 64 if r.smoke else (224 if name == "resnet50" else 640)
    xs = [rng.random((batch, 3, size, size), dtype=np.float32) for _ in range(2)]
    row: dict[str, Any] = {"model": name, "precision": "fp16", "batch": batch}
    it = iter(range(10**9))

    def timed(mode: str, make: Callable[[], Callable[[], Any]]) -> None:
        try:
            t, n = per_call(make(), **r.timing(batch))
            row[mode] = round(batch / t, 1)
            row[mode + "_n"] = n
        except Exception as exc:  # one failing mode must not lose the others
            row[mode] = None
            row[mode + "_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    t0 = time.perf_counter()
    xd = [r.device_tensor(x) for x in xs] if r.gpu else xs
    timed("amd-dev", lambda: lambda: engine.run({in_name: xd[next(it) % 2]}))
    timed("amd-np", lambda: lambda: engine.run({in_name: xs[next(it) % 2]}))
    feeds = [{in_name: x} for x in xs]
    for k, mode in enumerate(("raw-best", "raw-best-conv")):
        timed(mode, lambda mode=mode, k=k: r.bound_runner(sessions[mode], feeds, (gid * 2 + k) * len(feeds)))
    timed("amd-dev-conv", lambda: lambda: engine_conv.run({in_name: xd[next(it) % 2]}))
    row["seconds"] = round(time.perf_counter() - t0, 1)
    for a, c in RATIOS:
        if row.get(a) and row.get(c):
            row[f"{a}/{c}"] = round(row[a] / row[c], 3)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["model", "precision", "batch", *MODES, *(f"{a}/{c}" for a, c in RATIOS)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        cells = []
        for c in cols:
            v = row.get(c)
            if v is None:
                v = "err" if f"{c}_error" in row else "–"
            elif isinstance(v, float) and c in MODES:
                v = f"{v:,.0f}"
            cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(r: Recheck) -> dict[str, Any]:
    env: dict[str, Any] = {
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "amdinfer": amdinfer.__version__,
        "numpy": np.__version__,
        "onnx": onnx.__version__,
        "python": platform.python_version(),
    }
    if r.torch is not None:
        env["gpu"] = r.torch.cuda.get_device_name(0)
        env["torch"] = r.torch.__version__
    return env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes and batches on the CPU EP (checks the script)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_fp16_recheck.md/.jsonl ($OUT)")
    p.add_argument("--models", default="resnet50,yolov8")
    p.add_argument("--batches", default=None, help="comma-separated (default 1,64,256; smoke 1,2)")
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    r = Recheck(args.cpu_smoke, out)
    if r.gpu and "CUDAExecutionProvider" not in ort.get_available_providers():
        print("CUDAExecutionProvider is not available: put onnxruntime-gpu first on sys.path, or use --cpu-smoke")
        return 2
    batches = [int(b) for b in args.batches.split(",")] if args.batches else ([1, 2] if r.smoke else [1, 64, 256])
    env = environment(r)
    print(json.dumps({"environment": env}), flush=True)
    for name in args.models.split(","):
        try:
            run_model(r, name, batches)
        except Exception as exc:
            r.record({"model": name, "precision": "fp16", "batch": 0, "error": f"{type(exc).__name__}: {exc}"[:500]})
    header = (
        f"fp16 recheck on {env.get('gpu', r.ep)}; onnxruntime {env['onnxruntime']}; amdinfer {env['amdinfer']}; "
        "images/s (median per batch)"
    )
    md = header + "\n\n" + table(r.rows) + "\n\nGraphs:\n\n```json\n" + json.dumps(r.graphs, indent=1, default=str)
    md += "\n```\n"
    print("\n" + md)
    if out is not None:
        (out / "gpu_fp16_recheck.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
