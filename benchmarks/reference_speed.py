"""How fast is the NumPy oracle? amdinfer's reference engine (fp32, fp64) vs ONNX Runtime on CPU, each timed in
isolation, on ResNet-50 b1 at 224 (two independent builds) and the YOLOv8-style model at 640.

Target (issues 3 and 16): the reference engine in fp32 within 2.5x of ORT CPU on ResNet-50 b1, in isolation.

Sections (``benchmarks/_isolation.py`` explains the method):

1. **isolated, default threads**: each runner in blocks with the others idle (ORT without spinning), NumPy's
   BLAS and ORT with their default thread counts (one per core);
2. **isolated, one thread each**: the same with NumPy's BLAS limited to 1 thread (threadpoolctl) and ORT's
   ``intra_op_num_threads=1``: the fairest figure on a loaded machine, where a second thread is a lottery;
3. **contended**: reference engine and ORT (ONNX Runtime's defaults: spinning on) called in turn, call by
   call, as this benchmark did before issue 16: what two runtimes sharing a small machine see;
4. **where the time goes**: per-operator time of the reference engine (1 thread), and the floor NumPy sets:
   the time of the convolutions' GEMMs alone (same shapes, same BLAS), against ORT's whole run;
5. the RMS of each runner's output against ORT's, and the plain ``onnx.reference.ReferenceEvaluator``'s
   time (one call) for scale.

Models: ``amdinfer.testing.models.resnet50()`` (BatchNorm nodes, seeded weights); ``torchvision_style_resnet50()``
below, built independently here with ``onnx.helper`` (bias-free convolutions, BatchNorm and ReLU as separate
nodes, torchvision's Kaiming fan-out initialisation and random running statistics); ``yolov8(image_size=640)``.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/reference_speed.py
    AMDINFER_BENCH_QUICK=1 python benchmarks/reference_speed.py      # smoke run
    python benchmarks/reference_speed.py --models resnet50,torchvision --rounds 7
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from _isolation import contended, isolated, loadavg, machine_lines, ort_session_options
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from threadpoolctl import threadpool_limits

import amdinfer
from amdinfer.testing.models import random_inputs, resnet50, yolov8
from amdinfer.verify import rms_error

QUICK = os.environ.get("AMDINFER_BENCH_QUICK") == "1"


# ------------------------------------------------------------------------------------------- the second ResNet-50
def torchvision_style_resnet50(seed: int = 1, image_size: int = 224) -> onnx.ModelProto:
    """torchvision's ResNet-50 v1.5 as an unfused export writes it, built here without amdinfer.testing.

    Conv (no bias) -> BatchNormalization -> Relu everywhere, stride on the 3x3 of each bottleneck, 1x1
    downsample + BatchNormalization, MaxPool 3x3/2, GlobalAveragePool, Flatten, Gemm. Weights: Kaiming
    normal with fan-out (torchvision's init); BatchNorm gamma U(0.2, 1), beta N(0, 0.1), running mean
    N(0, 0.1), running variance U(0.5, 1.5) (as trained statistics would be: not the identity).
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def init(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, name: str, relu: bool) -> str:
        std = np.sqrt(2.0 / (cout * k * k))
        w = init(f"{name}.w", rng.normal(0, std, (cout, cin, k, k)))
        nodes.append(
            helper.make_node(
                "Conv", [x, w], [f"{name}.c"], kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4
            )
        )
        params = [
            init(f"{name}.gamma", rng.uniform(0.2, 1.0, cout)),
            init(f"{name}.beta", rng.normal(0, 0.1, cout)),
            init(f"{name}.mean", rng.normal(0, 0.1, cout)),
            init(f"{name}.var", rng.uniform(0.5, 1.5, cout)),
        ]
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.c", *params], [f"{name}.bn"], epsilon=1e-5))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"]))
        return f"{name}.relu"

    x = conv_bn("input", 3, 64, 7, 2, "stem", relu=True)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
    x, cin = "pool", 64
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512]), 1):
        for b in range(blocks):
            name, stride = f"s{stage}b{b}", (2 if stage > 1 and b == 0 else 1)
            h = conv_bn(x, cin, width, 1, 1, f"{name}.a", relu=True)
            h = conv_bn(h, width, width, 3, stride, f"{name}.b", relu=True)
            h = conv_bn(h, width, width * 4, 1, 1, f"{name}.c", relu=False)
            short = conv_bn(x, cin, width * 4, 1, stride, f"{name}.down", relu=False) if b == 0 else x
            nodes.append(helper.make_node("Add", [h, short], [f"{name}.add"]))
            nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"]))
            x, cin = f"{name}.out", width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    bound = 1 / np.sqrt(cin)
    fc_w = init("fc.w", rng.uniform(-bound, bound, (1000, cin)))
    fc_b = init("fc.b", rng.uniform(-bound, bound, 1000))
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], transB=1))
    graph = helper.make_graph(
        nodes,
        "torchvision_style_resnet50",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, image_size, image_size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# --------------------------------------------------------------------------------------------------- runners
def _ort(model: onnx.ModelProto, threads: int | None, spinning: bool = False) -> ort.InferenceSession:
    so = ort_session_options(threads, spinning=spinning)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _limited(fn: Callable[[], np.ndarray], threads: int | None) -> Callable[[], np.ndarray]:
    if threads is None:
        return fn

    def run() -> np.ndarray:
        with threadpool_limits(threads):
            return fn()

    return run


def per_op_profile(engine: amdinfer.Engine, feeds: dict[str, np.ndarray], calls: int) -> dict[str, float]:
    """Thread CPU seconds per call by operator type, NumPy's BLAS on 1 thread."""
    acc: collections.Counter[str] = collections.Counter()
    nodes = engine.evaluator.rt_nodes_
    originals = [node.run for node in nodes]
    for node, orig in zip(nodes, originals):

        def wrapped(*a, _orig=orig, _op=node.op_type, **k):  # type: ignore[no-untyped-def]
            t0 = time.thread_time()
            out = _orig(*a, **k)
            acc[_op] += time.thread_time() - t0
            return out

        node.run = wrapped
    try:
        with threadpool_limits(1):
            engine.run(feeds)
            acc.clear()
            t0 = time.thread_time()
            for _ in range(calls):
                engine.run(feeds)
            acc["(whole run)"] = time.thread_time() - t0
    finally:
        for node, orig in zip(nodes, originals):
            node.run = orig
    return {k: v / calls for k, v in acc.most_common()}


def gemm_floor(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int | None) -> Callable[[], None]:
    """A callable doing only the convolutions' GEMMs (weights x im2col columns), same shapes, same BLAS."""
    with amdinfer.load(model, backend="reference") as engine:
        values = engine.run(feeds, outputs="all")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    gemms = []
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        w = inits[node.input[1]]
        y = values[node.output[0]]
        m, k, length = w.shape[0], int(np.prod(w.shape[1:])), int(np.prod(y.shape[2:])) * y.shape[0]
        cols = rng.random((k, length), dtype=np.float32)
        gemms.append((np.ascontiguousarray(w.reshape(m, k)), cols, np.empty((m, length), np.float32)))

    def run() -> None:
        for a, b, c in gemms:
            np.matmul(a, b, out=c)

    return _limited(run, threads)


def measure(key: str, model: onnx.ModelProto, rounds: int, block: int, *, plain: bool) -> dict[str, Any]:
    """Every section's figures for one model."""
    feeds = random_inputs(model, batch=1, seed=0)
    first = model.graph.output[0].name
    ref32 = amdinfer.load(model, backend="reference")
    ref64 = amdinfer.load(model, backend="reference", precision="fp64")
    sessions = {None: _ort(model, None), 1: _ort(model, 1)}
    outputs = {
        "reference fp32": ref32.run(feeds)[first],
        "reference fp64": ref64.run(feeds)[first],
        "ORT CPU": sessions[None].run(None, feeds)[0],
    }
    result: dict[str, Any] = {}
    for threads, section in ((None, "isolated"), (1, "one_thread")):
        session = sessions[threads]
        runners = {
            "reference fp32": _limited(lambda: ref32.run(feeds)[first], threads),
            "reference fp64": _limited(lambda: ref64.run(feeds)[first], threads),
            "ORT CPU": lambda session=session: session.run(None, feeds)[0],
        }
        load0 = loadavg()
        stats = isolated(runners, rounds=rounds, block=block)
        result[section] = (stats, load0, loadavg())
    spinning = _ort(model, None, spinning=True)
    result["contended"] = contended(
        {
            "reference fp32": lambda: ref32.run(feeds)[first],
            "ORT CPU (spinning on)": lambda: spinning.run(None, feeds)[0],
        },
        repeats=rounds * block,
    )
    result["plain_s"] = float("nan")
    if plain:
        evaluator = ReferenceEvaluator(model)
        t0 = time.perf_counter()
        outputs["onnx ReferenceEvaluator"] = evaluator.run(None, feeds)[0]
        result["plain_s"] = time.perf_counter() - t0
    result["rms"] = {n: rms_error(o, outputs["ORT CPU"]) for n, o in outputs.items()}
    if key != "yolov8":
        result["profile"] = per_op_profile(ref32, feeds, 2 if QUICK else 5)
        floor = {}
        for threads in (None, 1):
            session = sessions[threads]
            floor[threads] = isolated(
                {
                    "GEMMs only": gemm_floor(model, feeds, threads),
                    "ORT CPU": lambda session=session: session.run(None, feeds),
                },
                rounds=rounds,
                block=block,
            )
        result["floor"] = floor
    ref32.close()
    ref64.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,torchvision,yolov8", help="comma-separated subset")
    parser.add_argument("--rounds", type=int, default=2 if QUICK else 5, help="blocks per runner")
    parser.add_argument("--block", type=int, default=2 if QUICK else 5, help="timed calls per block")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain ReferenceEvaluator call")
    args = parser.parse_args()
    builders = {
        "resnet50": ("ResNet-50 b1 224, `amdinfer.testing.models.resnet50()`", resnet50),
        "torchvision": ("ResNet-50 b1 224, torchvision-style build (this file)", torchvision_style_resnet50),
        "yolov8": ("YOLOv8n-style b1 640", lambda: yolov8(image_size=640)),
    }
    print("Machine:")
    print()
    print("\n".join(machine_lines()))
    print()
    print(
        f"Isolated: {args.rounds} rounds x {args.block} timed calls per runner (after 1 warm-up call per block); "
        "cells: median ms (best ms)."
    )
    print()
    iso_rows, one_rows, cont_rows, rms_rows, profiles, floors = [], [], [], [], [], []
    for key in args.models.split(","):
        label, build = builders[key]
        r = measure(key, build(), args.rounds, args.block, plain=not args.no_plain and key != "yolov8")
        iso_rows.append((label, *r["isolated"]))
        one_rows.append((label, *r["one_thread"]))
        cont_rows.append((label, r["contended"]))
        rms_rows.append((label, r["rms"], r["plain_s"]))
        if "profile" in r:
            profiles.append((label, r["profile"]))
            floors.append((label, r["floor"]))

    def ratio_table(title: str, rows: list) -> None:
        print(title)
        print()
        print("| model | reference fp32 | reference fp64 | ORT CPU | fp32 / ORT (median) | fp32 / ORT (best) | load |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for label, s, l0, l1 in rows:
            r32, r64, o = s["reference fp32"], s["reference fp64"], s["ORT CPU"]
            print(
                f"| {label} | {r32.cell()} | {r64.cell()} | {o.cell()} | {r32.median / o.median:.2f}x | "
                f"{r32.best / o.best:.2f}x | {l0:.1f} -> {l1:.1f} |"
            )
        print()

    ratio_table("1. Isolated, default threads (NumPy's BLAS and ORT: one thread per core; ORT not spinning):", iso_rows)
    ratio_table("2. Isolated, one thread each (threadpoolctl limit 1; ORT intra_op_num_threads=1):", one_rows)
    print("3. Contended (call by call in turn; ORT with its defaults, spinning on), median ms (best ms):")
    print()
    print("| model | reference fp32 | ORT CPU | fp32 / ORT (median) | ORT contended / ORT isolated |")
    print("|---|---:|---:|---:|---:|")
    iso_ort = {label: s["ORT CPU"] for label, s, _, _ in iso_rows}
    for label, s in cont_rows:
        r, o = s["reference fp32"], s["ORT CPU (spinning on)"]
        print(
            f"| {label} | {r.cell()} | {o.cell()} | {r.median / o.median:.2f}x | "
            f"{o.median / iso_ort[label].median:.2f}x |"
        )
    print()
    print("4. Where the reference engine's time goes (thread CPU ms per call, BLAS on 1 thread):")
    print()
    for label, prof in profiles:
        whole = prof.pop("(whole run)")
        cells = ", ".join(f"{op} {t * 1e3:.1f}" for op, t in prof.items() if t * 1e3 >= 0.05)
        print(f"- {label}: whole run {whole * 1e3:.1f}; {cells}")
    print()
    print("The NumPy floor: the convolutions' GEMMs alone (same shapes and BLAS) vs ORT's whole run, isolated:")
    print()
    print("| model | threads | GEMMs only | ORT CPU | GEMMs / ORT (median) |")
    print("|---|---|---:|---:|---:|")
    for label, floor in floors:
        for threads, s in floor.items():
            g, o = s["GEMMs only"], s["ORT CPU"]
            print(f"| {label} | {threads or 'default'} | {g.cell()} | {o.cell()} | {g.median / o.median:.2f}x |")
    print()
    print("5. RMS (MIGraphX metric) of each output against ORT CPU's; the plain evaluator's time, one call:")
    print()
    names = ["reference fp32", "reference fp64", "onnx ReferenceEvaluator"]
    print("| model | " + " | ".join(names) + " | plain evaluator, s |")
    print("|---|" + "---:|" * (len(names) + 1))
    for label, rms, plain_s in rms_rows:
        cells = " | ".join(f"{rms[n]:.1e}" if n in rms else "-" for n in names)
        print(f"| {label} | {cells} | {plain_s:.2f} |")
    print()
    print(f"Load average (1 min) at the end: {loadavg():.2f}")


if __name__ == "__main__":
    main()
