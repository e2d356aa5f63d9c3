"""``amdinfer quantize``: an fp16 or calibrated int8 model, and what it cost in accuracy."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OptionError
from ..model import ModelSource
from ..quantize._tasks import TASKS
from ._certificate_out import add_certificate_args, check_certificate_paths, write_certificate
from ._common import (
    add_cache_args,
    add_normalization_args,
    add_output_args,
    emit,
    feed_shapes,
    load_samples,
    make_feeds,
    model_specs,
    note,
    parse_input_shapes,
    parse_normalization,
    positive_int,
    progress_enabled,
    quantizer_cache,
    warn,
)
from ._outputs import check_plot_path, check_writable, save_figure

TASK_CHOICES = ("auto", *TASKS)

NAME = "quantize"
HELP = "write an fp16 or int8 (calibrated) model and its accuracy report against the float model"

#: Below this many held-out samples the report's verdict rests on a few inputs: a warning says so.
MIN_EVAL_SAMPLES = 50
#: Exit codes: the report passed, failed (the model is written either way), or was not judged.
EXIT_PASS, EXIT_FAIL, EXIT_NOT_JUDGED = 0, 1, 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to a float .onnx file")
    p.add_argument("--precision", required=True, choices=["fp16", "int8"], help="fp16 or int8")
    p.add_argument("--out", required=True, metavar="OUT.onnx", help="where the quantized model goes")
    p.add_argument(
        "--calibration", metavar="PATH", help="int8 calibration data: a folder of images or an .npz (axis 0 = samples)"
    )
    p.add_argument(
        "--eval",
        metavar="PATH",
        help="held-out data for the report (images or .npz); default: the last quarter of --calibration "
        "(kept out of calibration), else seeded random inputs",
    )
    add_normalization_args(p)
    p.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"], help="int8 calibrator")
    p.add_argument("--keep-last", type=int, default=0, metavar="N", help="keep the last N weighted layers in float")
    p.add_argument(
        "--dynamic",
        action="store_true",
        help="int8 without calibration: MatMul weights in int8, activations quantized at run time "
        "(DynamicInt8Quantizer; for Transformers on the CPU)",
    )
    p.add_argument(
        "--task",
        default="auto",
        choices=list(TASK_CHOICES),
        help="the metric the verdict is judged in: detect (mAP50/F1 of the boxes), classify (top-1/top-5), "
        "ocr (CER of a recogniser), embed (cosine, retrieval), generic (each output on its scale); auto: from "
        "the model's task metadata or output layout",
    )
    p.add_argument(
        "--budget",
        metavar="METRIC>=VALUE[,...]",
        help="with --precision int8: search per-layer precisions (int8 / fp16 / fp32), fastest first, until the task "
        "metric meets this budget on the held-out data, e.g. 'map50>=0.98', 'f1>=0.95', 'top1>=0.99', "
        "'cer<=0.02', 'cosine>=0.99' (several joined by commas)",
    )
    p.add_argument(
        "--providers",
        help="with --budget: the ONNX Runtime providers the model will run on, e.g. migraphx,cpu; a GPU provider "
        "moves layers to fp16 first, the CPU (default) to fp32 (fp16 brings no speed on a CPU)",
    )
    p.add_argument("--per-layer", action="store_true", help="per-layer errors in the report (implied by --plot)")
    p.add_argument("--plot", metavar="OUT.png", help="per-layer error along the graph (matplotlib)")
    add_certificate_args(p)
    p.add_argument(
        "--input-shapes",
        type=parse_input_shapes,
        action="append",
        metavar="NAME:1x3x224x224,...",
        help="input shapes (image size for --calibration folders, random data)",
    )
    p.add_argument("--batch", type=positive_int, default=None, help="batch of the random evaluation inputs (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of random evaluation inputs")
    add_cache_args(p)
    add_output_args(p)


def _check_samples(proto: Any, calib: list[Any], held_out: list[Any] | None) -> None:
    """Every sample checked (shapes, dtypes, NaN/inf) before anything is quantized or written, named by its row
    in the file (the held-out part of --calibration included)."""
    from ..quantize._data import to_feeds

    for flag, samples in (("--calibration", calib), ("--eval", held_out or [])):
        if samples:
            to_feeds(samples, proto, what=flag, finite=True)


def _rows(samples: list[Any]) -> int:
    """Samples (rows along axis 0) in a list of feed dicts: an image or .npz row is one, a random batch N."""
    total = 0
    for feeds in samples:
        first = np.asarray(next(iter(feeds.values()))) if feeds else None
        total += int(first.shape[0]) if first is not None and first.ndim else 1
    return total


def _data(args: argparse.Namespace, source: Any) -> tuple[list[Any], list[Any], str, Any]:
    """Calibration samples, held-out samples, where the held-out ones come from, and the quantizer."""
    from ..quantize import Fp16Quantizer, Int8Quantizer

    if args.dynamic:
        _check_dynamic(args)  # before any data is read: a misplaced flag fails at once
    overrides: dict[str, tuple[int | None, ...]] = {}
    for v in args.input_shapes or []:
        overrides.update(v)
    shapes = feed_shapes(source.inputs, overrides, args.batch)
    norm = parse_normalization(args)
    if norm != (None, None) and not (args.calibration or args.eval):
        raise OptionError("--mean/--std: normalize --calibration and --eval image folders; neither is given")
    calib: list[Any] = []
    if args.calibration:
        calib = load_samples(args.calibration, source.inputs, shapes, "--calibration", norm)
    held_out: list[Any] | None = None
    if args.eval:
        held_out = load_samples(args.eval, source.inputs, shapes, "--eval", norm)
    data_note = f"--eval {args.eval}" if args.eval else ""
    _check_samples(source.proto, calib, held_out)
    quantizer: Any = None
    if args.dynamic:
        if held_out is None and calib:
            held_out, data_note = calib, f"--calibration {args.calibration}"
        calib = []
    elif args.precision == "int8":
        if not calib:
            raise OptionError(
                "--precision int8: give calibration data with --calibration FOLDER_OF_IMAGES or data.npz "
                "(uncalibrated int8 gives wrong answers)"
            )
        if held_out is None and len(calib) >= 4:
            cut = len(calib) - max(1, len(calib) // 4)
            calib, held_out = calib[:cut], calib[cut:]
            data_note = f"the last {len(held_out)} of --calibration, held out of calibration"
        quantizer = Int8Quantizer(
            calibration=calib,
            method=args.method,
            keep_last_n=args.keep_last,
            progress=progress_enabled(args),
            cache=quantizer_cache(args),
            low_accuracy="warn",  # the report below judges the model in its task's metric and sets the exit code
        )
    else:
        if args.cache_dir is not None:
            raise OptionError(f"--cache-dir {args.cache_dir!r}: only int8 quantization is cached, not fp16")
        if args.method != "minmax":
            raise OptionError("--method: only used with --precision int8")
        quantizer = Fp16Quantizer(keep_last_n=args.keep_last)
        if held_out is None and calib:
            held_out, data_note = calib, f"--calibration {args.calibration}"
    if held_out is None:
        held_out = [make_feeds(source.inputs, shapes, args.seed + i) for i in range(8)]
        data_note = f"8 batches of seeded random inputs, --batch {args.batch or 1}"
    if args.dynamic:  # its accuracy check runs on the samples the report uses
        from ..quantize import DynamicInt8Quantizer

        quantizer = DynamicInt8Quantizer(data=held_out, low_accuracy="warn")
    return calib, held_out, data_note, quantizer


def _check_dynamic(args: argparse.Namespace) -> None:
    """``--dynamic`` goes with ``--precision int8`` and without the calibration-only flags."""
    if args.precision != "int8":
        raise OptionError(f"--dynamic: only used with --precision int8, got --precision {args.precision}")
    for flag, given in (("--method", args.method != "minmax"), ("--keep-last", args.keep_last != 0)):
        if given:
            raise OptionError(f"{flag}: not an option of --dynamic (dynamic int8 has no calibration to tune)")


def _sample_warnings(rows: int, data_note: str) -> list[str]:
    """A warning when the held-out data is too small for the verdict to mean much."""
    if rows >= MIN_EVAL_SAMPLES:
        return []
    return [
        f"judging on {rows} sample{'s' if rows != 1 else ''} only ({data_note}): below {MIN_EVAL_SAMPLES}, "
        f"one or two samples decide pass or fail; give --eval with {MIN_EVAL_SAMPLES} or more held-out samples"
    ]


def _check_budget(args: argparse.Namespace) -> tuple[Any, ...]:
    """``--budget``'s bounds (empty without it), checked before any data is read."""
    from ..quantize._budget import parse_budget

    if args.budget is None:
        if args.providers is not None:
            raise OptionError("--providers: picks the precisions --budget moves layers to; give --budget")
        return ()
    if args.precision != "int8" or args.dynamic:
        got = "--dynamic" if args.dynamic else f"--precision {args.precision}"
        raise OptionError(
            f"--budget: searches calibrated int8 / fp16 / fp32 plans, used with --precision int8; got {got}"
        )
    return parse_budget(args.budget, "--budget")


def _budget_search(args: argparse.Namespace, quantizer: Any, source: Any, held_out: list[Any]) -> Any:
    """The budget search's result (its model is the quantized model)."""
    from ..quantize import AutoMixedPrecision

    providers = [p.strip() for p in args.providers.split(",")] if args.providers else None
    amp = AutoMixedPrecision(
        quantizer, held_out, budget=args.budget, task=args.task, providers=providers, progress=progress_enabled(args)
    )
    return amp.search(source.proto)


def run(args: argparse.Namespace) -> int:
    from ..quantize import AccuracyTolerance, evaluate

    out = check_writable(args.out, "--out", args)
    bounds = _check_budget(args)
    plot = check_plot_path(args.plot, "--plot", args) if args.plot else None
    cert_paths = check_certificate_paths(args)
    if args.keep_last < 0:
        raise OptionError(f"--keep-last: got {args.keep_last}, expected an int >= 0")
    source = model_specs(args.model)
    calib, held_out, data_note, quantizer = _data(args, source)
    rows = _rows(held_out)
    warnings = _sample_warnings(rows, data_note)
    for w in warnings:
        warn(args, w)
    note(
        args,
        f"quantizing {source.name} to {args.precision}" + (f" with {len(calib)} calibration samples" if calib else ""),
    )
    t0 = time.perf_counter()
    searched = _budget_search(args, quantizer, source, held_out) if bounds else None
    qmodel = searched.model if searched is not None else quantizer.quantize(source)  # its name names the entry
    seconds = time.perf_counter() - t0
    import onnx

    from .._support._files import write_atomic

    note(args, f"evaluating on {len(held_out)} samples")
    report = evaluate(
        ModelSource(qmodel, name=f"{Path(source.name).stem}.{args.precision}.onnx"),
        source,
        held_out,
        task=searched.verdict.task if searched is not None else args.task,
        tolerance=AccuracyTolerance(**{b.metric: b.value for b in bounds}) if bounds else None,
        per_layer=bool(args.per_layer or plot),
        precision=args.precision,
    )
    cert, cert_lines = write_certificate(
        args, report, source=source, qmodel=qmodel, held_out=held_out, data_note=data_note, quantizer=quantizer,
        search=searched, paths=cert_paths,
    )  # fmt: skip
    write_atomic(out, lambda f: onnx.save_model(qmodel, f), argument="--out")  # the certificate in its metadata
    if plot is not None:
        save_figure(report.plot(), plot, "--plot")
    size_in = source.path.stat().st_size if source.path else len(source.to_bytes())
    size_out = out.stat().st_size
    lines = [
        f"quantize  {source.name} -> {out} ({args.precision}, {seconds:.2f} s)",
        f"size      {size_in / 1e6:.2f} MB -> {size_out / 1e6:.2f} MB ({size_out / size_in:.0%})",
        f"data      calibration: {f'{len(calib)} samples' if calib else 'none'}; report on {data_note}",
        repr(report),
    ]
    if searched is not None:
        lines.insert(3, "budget    " + repr(searched).replace("\n", "\n          "))
    if plot is not None:
        lines.append(f"plot      {plot}")
    lines += cert_lines
    lines.append("result    " + _result_line(report))
    payload = {
        "model": source.name,
        "precision": args.precision,
        "out": str(out),
        "quantize_s": seconds,
        "size_bytes": {"in": size_in, "out": size_out},
        "calibration_samples": len(calib),
        "eval_data": data_note,
        "eval_samples": rows,
        "warnings": warnings,
        "settings": quantizer.settings() if callable(getattr(quantizer, "settings", None)) else {},
        "passed": report.passed,
        "verdict": report.verdict,
        "report": report.to_dict(),
        "budget": searched.to_dict() if searched is not None else None,
        "plot": str(plot) if plot else None,
        "certificate": cert.to_dict(),
        "certificate_path": str(cert_paths[0]) if cert_paths else None,
    }
    emit(args, payload, "\n".join(lines))
    if report.passed:
        return EXIT_PASS
    return EXIT_FAIL if report.judged else EXIT_NOT_JUDGED


def _result_line(report: Any) -> str:
    """The last line: PASSED, FAILED or NOT JUDGED, with the exit code."""
    if report.passed:
        return "PASSED"
    if report.judged:
        return f"FAILED the {report.task} metric (exit {EXIT_FAIL}); the model was written"
    reason = report.failures[0] if report.failures else "too little held-out data"
    return f"NOT JUDGED: {reason} (exit {EXIT_NOT_JUDGED}); the model was written, give --eval with more data"
