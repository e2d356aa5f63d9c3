"""OrtEngine.run vs raw onnxruntime InferenceSession.run: what amdinfer's checks cost per call.

Interleaved in one run (the two alternate call by call, so drift hits both alike); medians and ratio.
Targets: ratio <= 1.02 on ResNet-50 b1, <= 15 us added per call on a one-node model.

    python benchmarks/engine_overhead.py            # AMDINFER_BENCH_QUICK=1 for a smoke run
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import amdinfer
from amdinfer.testing.models import random_inputs, resnet50

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"


def one_node() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def interleaved(model: onnx.ModelProto, feeds: dict[str, np.ndarray], n: int, threads: int) -> tuple[float, float]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    raw = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    engine = amdinfer.load(model, backend="ort", providers=["CPUExecutionProvider"], threads=threads)
    raw_t, eng_t = [], []
    for _ in range(max(3, n // 10)):  # warm-up
        raw.run(None, feeds)
        engine.run(feeds)
    for _ in range(n):
        t0 = time.perf_counter()
        raw.run(None, feeds)
        t1 = time.perf_counter()
        engine.run(feeds)
        t2 = time.perf_counter()
        raw_t.append(t1 - t0)
        eng_t.append(t2 - t1)
    return statistics.median(raw_t), statistics.median(eng_t)


def main() -> None:
    rows = []
    cases = [
        ("one-node Relu (1, 4)", one_node(), {"x": np.ones((1, 4), np.float32)}, 200 if QUICK else 20000, 1),
        ("ResNet-50 b1 224", resnet50(), random_inputs(resnet50(), batch=1), 5 if QUICK else 60, 0),
    ]
    for name, model, feeds, n, threads in cases:
        raw, eng = interleaved(model, feeds, n, threads)
        rows.append((name, n, raw, eng))
    print(f"onnxruntime {ort.__version__}, amdinfer {amdinfer.__version__}, {os.cpu_count()} CPUs")
    print()
    print("| model | calls | raw session.run (median) | OrtEngine.run (median) | added per call | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, raw, eng in rows:
        unit, scale = ("us", 1e6) if raw < 1e-3 else ("ms", 1e3)
        print(
            f"| {name} | {n} | {raw * scale:.2f} {unit} | {eng * scale:.2f} {unit} | "
            f"{(eng - raw) * 1e6:+.1f} us | {eng / raw:.3f} |"
        )


if __name__ == "__main__":
    main()
