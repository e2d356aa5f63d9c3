"""How fast is the NumPy oracle? Plain ``onnx.reference.ReferenceEvaluator`` vs amdinfer's reference engine
(fast kernels, fp32 and fp64) vs ONNX Runtime on CPU, on ResNet-50 b1 at 224 and the YOLOv8-style model at 640.

The runners are interleaved in one run (each repeat calls every runner in turn, so machine drift hits all
alike); the table gives medians and ratios, and the RMS of each runner's output against ORT's.
Target (issue 3): the reference engine in fp32 within 2.5x of ORT CPU on ResNet-50 b1.

    python benchmarks/reference_speed.py            # AMDINFER_BENCH_QUICK=1 for a smoke run
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

import amdinfer
from amdinfer.testing.models import random_inputs, resnet50, yolov8
from amdinfer.verify import rms_error

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"
REPEATS = 1 if QUICK else 7


def runners(model: onnx.ModelProto) -> dict[str, Callable[[dict[str, np.ndarray]], np.ndarray]]:
    """Each runner returns the model's first output."""
    plain = ReferenceEvaluator(model)
    fast32 = amdinfer.load(model, backend="reference")
    fast64 = amdinfer.load(model, backend="reference", precision="fp64")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    first = model.graph.output[0].name
    return {
        "onnx ReferenceEvaluator": lambda f: plain.run(None, f)[0],
        "amdinfer reference fp32": lambda f: fast32.run(f)[first],
        "amdinfer reference fp64": lambda f: fast64.run(f)[first],
        "ORT CPU": lambda f: session.run(None, f)[0],
    }


def measure(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[dict[str, float], dict[str, float]]:
    run = runners(model)
    outputs: dict[str, np.ndarray] = {}
    if not QUICK:
        outputs = {name: fn(feeds) for name, fn in run.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in run}
    for _ in range(REPEATS):
        for name, fn in run.items():
            t0 = time.perf_counter()
            outputs[name] = fn(feeds)
            times[name].append(time.perf_counter() - t0)
    medians = {name: statistics.median(t) for name, t in times.items()}
    rms = {name: rms_error(out, outputs["ORT CPU"]) for name, out in outputs.items()}
    return medians, rms


def main() -> None:
    cases = [
        ("ResNet-50 b1 224", resnet50()),
        ("YOLOv8n-style b1 640", yolov8(image_size=640)),
    ]
    rows = []
    for label, model in cases:
        medians, rms = measure(model, random_inputs(model, batch=1, seed=0))
        rows.append((label, medians, rms))
    mode = " (quick mode: no warm-up)" if QUICK else " after a warm-up"
    print(
        f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs, {REPEATS} interleaved repeat(s){mode}"
    )
    print()
    names = list(rows[0][1])
    print("| model | " + " | ".join(f"{n} (median s)" for n in names) + " | fp32 / ORT | evaluator / fp32 |")
    print("|---|" + "---:|" * (len(names) + 2))
    for label, med, _ in rows:
        cells = " | ".join(f"{med[n]:.3f}" for n in names)
        ratio_ort = med["amdinfer reference fp32"] / med["ORT CPU"]
        speedup = med["onnx ReferenceEvaluator"] / med["amdinfer reference fp32"]
        print(f"| {label} | {cells} | {ratio_ort:.2f}x | {speedup:.1f}x |")
    print()
    print("RMS (MIGraphX metric) of each runner's first output against ORT CPU's:")
    print()
    print("| model | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label, _, rms in rows:
        print(f"| {label} | " + " | ".join(f"{rms[n]:.1e}" for n in names) + " |")


if __name__ == "__main__":
    main()
