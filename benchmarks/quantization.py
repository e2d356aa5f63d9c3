"""fp32 vs fp16 vs int8 on ONNX Runtime CPU: throughput ratios and accuracy in one run.

Models: ResNet-50 batch 8 (``amdinfer.testing.models.resnet50``, batch norms folded as a torch export
writes it; random weights, so its accuracy figures are output errors, not a task metric) and, when
``rapidocr-onnxruntime`` and scikit-image are installed, the trained PP-OCRv4 text detector with real and
rendered pages (task metric: F1 of the detected text boxes against fp32's, and the IoU of the text masks).
Then a search over int8 configurations for ResNet-50 b8 (format, per-channel, reduce_range, activation /
weight types, graph optimization level) measuring speed and error of each.

Timing on a shared CPU: each engine is timed in isolated blocks (``benchmarks/_isolation.py``: a pause, a
warm-up call, then timed calls, with the other engines idle and ORT's intra-op spinning off), the blocks
alternating over rounds in a rotating order; the figure is the median. Timed call by call, each session's
spinning thread pool would steal the cores from the next engine's call (issue 16).
Set ``AMDINFER_BENCH_QUICK=1`` for a short run (fewer rounds, a shorter configuration
search); ``AMDINFER_BENCH_THREADS`` sets the intra-op threads (default 2);
``AMDINFER_BENCH_SECTIONS=resnet50,ppocr,search`` picks sections. Run from the repository
root: ``python benchmarks/quantization.py``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _isolation import isolated, loadavg, machine_lines

import amdinfer
from amdinfer.quantize import Fp16Quantizer, Int8Quantizer, box_agreement, evaluate
from amdinfer.testing.models import random_inputs, resnet50
from amdinfer.verify import rms_error, topk_agreement

QUICK = os.environ.get("AMDINFER_BENCH_QUICK", "") not in ("", "0")
THREADS = int(os.environ.get("AMDINFER_BENCH_THREADS", "2"))
ROUNDS = 3 if QUICK else 7

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _load(model: Any, graph_optimization: str = "all") -> Any:
    return amdinfer.load(
        model,
        backend="ort",
        providers=["cpu"],
        threads=THREADS,
        graph_optimization=graph_optimization,
        spin_wait=False,
    )


def _time_isolated(engines: dict[str, Any], feeds: dict[str, np.ndarray], rounds: int) -> dict[str, float]:
    """Median seconds per run of each engine, timed in isolated blocks that alternate over the rounds."""
    runners = {name: (lambda e=e: e.run(feeds)) for name, e in engines.items()}
    stats = isolated(runners, rounds=rounds, block=3 if QUICK else 5)
    return {name: s.median for name, s in stats.items()}


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def resnet50_section() -> list[str]:
    model = resnet50(seed=0, batchnorm=False)
    calib = [random_inputs(model, batch=1, seed=s) for s in range(4 if QUICK else 8)]
    held_out = random_inputs(model, batch=8, seed=1234)
    t0 = time.perf_counter()
    m16 = Fp16Quantizer().quantize(model)
    t16 = time.perf_counter() - t0
    t0 = time.perf_counter()
    m8 = Int8Quantizer(calibration=calib, progress=False, cache=False).quantize(model)
    t8 = time.perf_counter() - t0
    engines = {"fp32": _load(model), "fp16": _load(m16), "int8": _load(m8)}
    secs = _time_isolated(engines, held_out, ROUNDS)
    ref = engines["fp32"].run(held_out)["logits"]
    lines = [
        f"ResNet-50 batch 8, ORT CPU {THREADS} threads, median of {ROUNDS} isolated rounds "
        "(random weights: accuracy as output error)",
        "",
        _row(["precision", "ms / batch", "img/s", "speed-up vs fp32", "quantize s", "rms vs fp32", "top-1 agree"]),
        _row(["---"] * 7),
    ]
    for name, e in engines.items():
        out = e.run(held_out)["logits"]
        qs = {"fp32": 0.0, "fp16": t16, "int8": t8}[name]
        lines.append(
            _row(
                [
                    name,
                    f"{secs[name] * 1000:.0f}",
                    f"{8 / secs[name]:.1f}",
                    f"{secs['fp32'] / secs[name]:.2f}x",
                    f"{qs:.1f}",
                    f"{rms_error(out, ref):.2e}",
                    f"{topk_agreement(out, ref, k=1):.3f}",
                ]
            )
        )
        e.close()
    return lines


def ppocr_section() -> list[str]:
    try:
        import ppocr_data as P
    except ImportError:
        return ["PP-OCR: tests/ppocr_data.py not found (run from the repository root)"]
    missing = P.missing_packages()
    if missing:
        return [f"PP-OCR det: skipped, needs {missing} (pip install rapidocr-onnxruntime scikit-image)"]
    from amdinfer.quantize._evaluate import _load_cpu

    path = P.model_path()
    calib = P.det_calibration()
    held = P.det_held_out()
    ref_engine = _load_cpu(path)
    ref_out = [ref_engine.run(x) for x in held]
    quantizers = {
        "fp16": Fp16Quantizer(),
        "int8": Int8Quantizer(calibration=calib, method="percentile", progress=False, cache=False),
    }
    models = {"fp32": None}
    quant_s = {"fp32": 0.0}
    for name, q in quantizers.items():
        t0 = time.perf_counter()
        models[name] = q.quantize(path)
        quant_s[name] = time.perf_counter() - t0
    fixed = ref_engine.model  # -1/'?' dims renamed, so the engine accepts any size
    engines = {"fp32": _load(fixed), **{k: _load(v) for k, v in models.items() if v is not None}}
    x = held[2]  # the 640-wide real page
    secs = _time_isolated(engines, {"x": x}, ROUNDS)
    lines = [
        "",
        f"PP-OCRv4 det (trained, rapidocr-onnxruntime wheel), {len(held)} held-out pages, timing on "
        f"{tuple(x.shape)}; int8 with percentile calibration",
        "",
        _row(
            ["precision", "ms / page", "speed-up vs fp32", "quantize s", "box F1 vs fp32", "P / R", "mask IoU", "rms"]
        ),
        _row(["---"] * 8),
    ]
    for name, e in engines.items():
        outs = [e.run(xx) for xx in held]
        p, r, f1, n = box_agreement(
            [b for o in outs for b in P.det_boxes(o)], [b for o in ref_out for b in P.det_boxes(o)]
        )
        rms = rms_error(
            np.concatenate([o["sigmoid_0.tmp_0"].ravel() for o in outs]),
            np.concatenate([o["sigmoid_0.tmp_0"].ravel() for o in ref_out]),
        )
        lines.append(
            _row(
                [
                    name,
                    f"{secs[name] * 1000:.0f}",
                    f"{secs['fp32'] / secs[name]:.2f}x",
                    f"{quant_s[name]:.1f}",
                    f"{f1:.4f} ({n} boxes)",
                    f"{p:.3f} / {r:.3f}",
                    f"{P.text_mask_iou(outs, ref_out):.4f}",
                    f"{rms:.3g}",
                ]
            )
        )
        e.close()
    report = evaluate(_load(models["int8"]), ref_engine, held, boxes=P.det_boxes)
    lines += ["", "```", repr(report), "```"]
    return lines


#: (label, Int8Quantizer options, graph optimization level). The first is the library default.
SEARCH: list[tuple[str, dict[str, Any], str]] = [
    ("default: QDQ, per-channel, U8S8", {}, "all"),
    ("QDQ, per-tensor, U8S8", {"per_channel": False}, "all"),
    ("QDQ, per-channel, U8S8, reduce_range", {"reduce_range": True}, "all"),
    ("QDQ, per-tensor, U8U8", {"per_channel": False, "weight_type": "uint8"}, "all"),
    ("QDQ, per-channel, S8S8 symmetric", {"activation_type": "int8", "symmetric_activations": True}, "all"),
    ("QOperator, per-channel, U8S8", {"format": "qoperator"}, "all"),
    ("QOperator, per-tensor, U8S8", {"format": "qoperator", "per_channel": False}, "all"),
    ("QDQ, per-channel, U8S8, graph opt basic", {}, "basic"),
    ("QDQ, per-channel, U8S8, graph opt extended", {}, "extended"),
    ("QDQ, per-channel, U8S8, Conv/Gemm only", {"op_types": ["Conv", "ConvTranspose", "Gemm"]}, "all"),
]
QUICK_SEARCH = [0, 1, 5, 9]


def int8_search_section() -> list[str]:
    """Speed of each configuration on ResNet-50 b8 and, when installed, on the trained PP-OCR detector
    (percentile calibration there), with the error each costs."""
    model = resnet50(seed=0, batchnorm=False)
    calib = [random_inputs(model, batch=1, seed=s) for s in range(4 if QUICK else 8)]
    held_out = random_inputs(model, batch=8, seed=1234)
    chosen = [SEARCH[i] for i in QUICK_SEARCH] if QUICK else SEARCH
    det: Any = None
    try:
        import ppocr_data as P

        if not P.missing_packages():
            det = P
    except ImportError:
        pass
    r_engines = {"fp32": _load(model)}
    d_engines: dict[str, Any] = {}
    quant_s: dict[str, float] = {}
    if det is not None:
        from amdinfer.quantize._evaluate import _load_cpu

        d_ref = _load_cpu(det.model_path())
        d_engines["fp32"] = _load(d_ref.model)
        d_calib, d_held = det.det_calibration(), det.det_held_out()
        d_ref_boxes = [b for x in d_held for b in det.det_boxes(d_ref.run(x))]
    for label, opts, level in chosen:
        t0 = time.perf_counter()
        m8 = Int8Quantizer(calibration=calib, progress=False, cache=False, **opts).quantize(model)
        quant_s[label] = time.perf_counter() - t0
        r_engines[label] = _load(m8, graph_optimization=level)
        if det is not None:
            q = Int8Quantizer(calibration=d_calib, method="percentile", progress=False, cache=False, **opts)
            d_engines[label] = _load(q.quantize(det.model_path()), graph_optimization=level)
    secs = _time_isolated(r_engines, held_out, ROUNDS)
    ref = r_engines["fp32"].run(held_out)["logits"]
    d_secs = _time_isolated(d_engines, {"x": d_held[2]}, ROUNDS) if det is not None else {}
    header = ["configuration", "R50 ms / b8", "R50 speed-up", "R50 rms vs fp32", "quantize s"]
    if det is not None:
        header += ["det ms / page", "det speed-up", "det box F1 vs fp32"]
    lines = [
        "",
        f"int8 configurations on ORT CPU ({THREADS} threads, median of {ROUNDS} isolated rounds): ResNet-50 "
        "batch 8" + (f"; PP-OCRv4 det on {tuple(d_held[2].shape)}, percentile calibration" if det else ""),
        "",
        _row(header),
        _row(["---"] * len(header)),
        _row(
            ["fp32", f"{secs['fp32'] * 1000:.0f}", "1.00x", "0", "-"]
            + ([f"{d_secs['fp32'] * 1000:.0f}", "1.00x", "1.0000"] if det else [])
        ),
    ]
    for label, _, _ in chosen:
        out = r_engines[label].run(held_out)["logits"]
        cells = [
            label,
            f"{secs[label] * 1000:.0f}",
            f"{secs['fp32'] / secs[label]:.2f}x",
            f"{rms_error(out, ref):.2e}",
            f"{quant_s[label]:.1f}",
        ]
        if det is not None:
            boxes = [b for x in d_held for b in det.det_boxes(d_engines[label].run(x))]
            f1 = box_agreement(boxes, d_ref_boxes)[2]
            cells += [f"{d_secs[label] * 1000:.0f}", f"{d_secs['fp32'] / d_secs[label]:.2f}x", f"{f1:.4f}"]
        lines.append(_row(cells))
    for e in [*r_engines.values(), *d_engines.values()]:
        e.close()
    return lines


def main() -> None:
    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's advice on the root logger
    import onnxruntime

    print(f"# amdinfer quantization benchmark ({'quick' if QUICK else 'full'}; onnxruntime {onnxruntime.__version__})")
    print()
    print("\n".join(machine_lines()))
    print()
    sections = {"resnet50": resnet50_section, "ppocr": ppocr_section, "search": int8_search_section}
    wanted = [w for w in os.environ.get("AMDINFER_BENCH_SECTIONS", ",".join(sections)).split(",") if w]
    unknown = [w for w in wanted if w not in sections]
    if unknown:
        raise SystemExit(f"AMDINFER_BENCH_SECTIONS: unknown {unknown}, expected names among {list(sections)}")
    for section in (sections[w] for w in wanted):
        for line in section():
            print(line)
        sys.stdout.flush()
    print(f"Load average (1 min) at the end: {loadavg():.2f}")


if __name__ == "__main__":
    main()
