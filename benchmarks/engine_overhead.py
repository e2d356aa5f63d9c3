"""OrtEngine.run vs raw onnxruntime InferenceSession.run: what amdinfer's checks cost per call.

Both sides are ONNX Runtime sessions with the same thread count and intra-op spinning off
(``spin_wait=False`` / ``session.intra_op.allow_spinning=0``), timed in isolated blocks that alternate
(``benchmarks/_isolation.py``): timed call by call, each session's spinning pool would steal the cores from
the other's next call (issue 16). The contended figure (call by call, ONNX Runtime's default spinning) is
printed as well for ResNet-50. Medians and ratio. Targets: ratio <= 1.02 on ResNet-50 b1, <= 15 us added
per call on a one-node model.

    python benchmarks/engine_overhead.py            # AMDINFER_BENCH_QUICK=1 for a smoke run
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
from _isolation import Stats, contended, isolated, loadavg, machine, machine_lines, ort_session_options
from onnx import TensorProto, helper

import amdinfer
from amdinfer.testing.models import random_inputs, resnet50

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"


def one_node() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def measure(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], n: int, threads: int, spinning: bool, isolate: bool
) -> tuple[Stats, Stats]:
    """(raw session, OrtEngine) per-call times: isolated blocks of n // 10 calls, or call by call."""
    raw = ort.InferenceSession(
        model.SerializeToString(), ort_session_options(threads or None, spinning=spinning), ["CPUExecutionProvider"]
    )
    engine = amdinfer.load(
        model, backend="ort", providers=["CPUExecutionProvider"], threads=threads, spin_wait=spinning
    )
    runners = {"raw": lambda: raw.run(None, feeds), "engine": lambda: engine.run(feeds)}
    if isolate:
        block = max(1, n // 10)
        stats = isolated(runners, rounds=10, block=block, warmup=max(1, block // 10))
    else:
        stats = contended(runners, repeats=n, warmup=max(3, n // 10))
    engine.close()
    return stats["raw"], stats["engine"]


def main() -> None:
    start = machine()  # the load average before the runs
    resnet = resnet50()
    cases = [
        ("one-node Relu (1, 4)", one_node(), {"x": np.ones((1, 4), np.float32)}, 200 if QUICK else 20000, 1),
        ("ResNet-50 b1 224", resnet, random_inputs(resnet, batch=1), 10 if QUICK else 60, 0),
    ]
    rows = []
    for name, model, feeds, n, threads in cases:
        raw, eng = measure(model, feeds, n, threads, spinning=False, isolate=True)
        rows.append((f"{name}, isolated", n, raw, eng))
        if threads != 1:
            raw, eng = measure(model, feeds, n, threads, spinning=True, isolate=False)
            rows.append((f"{name}, contended (call by call, spinning on)", n, raw, eng))
    print("\n".join(machine_lines(start)))
    print()
    print("| model, method | calls | raw session.run (median) | OrtEngine.run (median) | added per call | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, n, raw_s, eng_s in rows:
        raw, eng = raw_s.median, eng_s.median
        unit, scale = ("us", 1e6) if raw < 1e-3 else ("ms", 1e3)
        print(
            f"| {name} | {n} | {raw * scale:.2f} {unit} | {eng * scale:.2f} {unit} | "
            f"{(eng - raw) * 1e6:+.1f} us | {eng / raw:.3f} |"
        )
    print()
    print(f"Load average (1 min) at the end: {loadavg():.2f}")


if __name__ == "__main__":
    main()
