"""OCR cold start: ``amdinfer.ocr(det, rec, cls=cls)`` load, first and second pass over 10 pages, in fresh processes.

Issue 38's row: on an H200 (CUDA EP) the first pass over 10 pages took 48 s (one compile per shape bucket) where a
warm pass takes well under a second per page; target: <= 5 s once the compiled-model cache holds the models. For
each configuration (``--configs``) two processes run one after the other on one cache folder: the first on an
empty folder (``cold cache``: every graph optimized, the cache written), the second on the folder the first left
(``warm cache``). Each process times the load (``ocr(...)``: three engines, the warm-up of the cascade's shape
buckets included, its seconds also alone), the first pass over the pages (``pipe(page)`` one after another, the
seconds of each page kept) and a second pass, and reports what each engine did: the warm record, the shapes that
got a session, calls over the limit, cuDNN's search, the cache hit. Answers: the texts of both passes must be equal,
and on the shipped pages equal to RapidOCR's (tests/data/ocr_rapidocr.json).

Configurations: ``default`` (what ``amdinfer.ocr`` does), ``no_warm`` (``warm=False``: shapes built on first
use, the old cold start), ``exhaustive`` (``exhaustive_tune=True``: cuDNN's exhaustive search, amdinfer's previous
default for these models), and, to find what a new shape costs on the CUDA EP, the same without warm-up and with
one knob changed each: ``one_session`` (``shape_sessions=0``), ``nchw`` (``prefer_nhwc=False``),
``nchw_one_session``; ``nchw_warm`` (the default warm-up, NCHW) (CUDA graphs are already off for inputs that vary).
Pages: the five shipped ``tests/data/ocr_page*.png`` and five text pages drawn here (letter portrait and landscape,
A4, a 720p screen, a 480x640 photo size; Pillow's bundled font, fixed seed). Models: the PP-OCR files of the
installed ``rapidocr==3.10.0`` wheel (tests/ocr/_models.py). Nothing is downloaded. Prints one JSON object and
writes it to ``--out``.

    python benchmarks/ocr_cold.py --out /tmp/ocr_cold.json                # CUDA EP, default and no_warm
    python benchmarks/ocr_cold.py --configs default,exhaustive --providers cuda --out ...
    python benchmarks/ocr_cold.py --providers cpu --configs default       # a CPU smoke run (no warm-up there)

On the H200 host, with benchmarks/ocr_h200.sh's environment (onnxruntime-gpu and the rapidocr wheel on the path):
``PYTHONPATH=$HOME/site:$HOME/ocrsite:$PWD python3 benchmarks/ocr_cold.py --out $OUT/ocr_cold.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "ocr"))
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "no_warm": {"warm": False},
    "exhaustive": {"exhaustive_tune": True},
    # what a new shape costs on the CUDA EP, knob by knob (no warm-up: each shape built on first use)
    "one_session": {"warm": False, "shape_sessions": 0},
    "nchw": {"warm": False, "prefer_nhwc": False},
    "nchw_one_session": {"warm": False, "prefer_nhwc": False, "shape_sessions": 0},
    "nchw_warm": {"prefer_nhwc": False},  # the warm-up at load, NCHW
}
PROVIDERS = {"cuda": "CUDAExecutionProvider", "cpu": "CPUExecutionProvider"}
#: generated pages: (height, width, font size)
DRAWN = [(1100, 850, 22), (850, 1100, 22), (1754, 1240, 30), (720, 1280, 26), (640, 480, 18)]
WORDS = (
    "the quick brown fox jumps over a lazy dog invoice total amount due 2024 page column cascade reading text "
    "detection recognition model engine warm cold start seconds shipped 1,280.50 EUR order no. 117"
).split()


def draw_pages(folder: Path) -> list[str]:
    """The five text pages, as PNG files in ``folder`` (deterministic for one Pillow build)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(38)
    paths = []
    for k, (h, w, size) in enumerate(DRAWN):
        im = Image.new("RGB", (w, h), (250, 250, 245))
        d = ImageDraw.Draw(im)
        try:
            font = ImageFont.load_default(size=size)  # Pillow >= 10.1 with FreeType
        except TypeError:
            font = ImageFont.load_default()
        y = size * 2
        while y < h - size * 2:
            words = rng.choice(WORDS, int(rng.integers(2, max(3, w // (size * 4)))))
            d.text((size * 2, y), " ".join(words), font=font, fill=(20, 20, 30))
            y += int(size * 1.9)
        path = folder / f"drawn_{k}_{h}x{w}.png"
        im.save(path)
        paths.append(str(path))
    return paths


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One process: load, two passes, the engines' records."""
    from _models import golden, models

    import amdinfer

    m = models()
    if m is None:
        sys.exit("needs the PP-OCR models of rapidocr==3.10.0: pip install --no-deps rapidocr==3.10.0")
    pages = json.loads(args.pages)
    extra = CONFIGS[args.config]
    t0 = time.perf_counter()
    pipe = amdinfer.ocr(
        m["det"], m["rec"], m["cls"], providers=[PROVIDERS[args.providers]], cache_dir=args.cache, **extra
    )
    load_s = time.perf_counter() - t0
    print(f"  [{args.config} / {args.label}] loaded in {load_s:.2f} s", file=sys.stderr, flush=True)
    passes, texts = [], []
    for n in range(2):
        per_page, got = [], []
        for page in pages:
            t = time.perf_counter()
            got.append(pipe(page).texts)
            per_page.append(round(time.perf_counter() - t, 4))
            print(
                f"  [{args.config} / {args.label}] pass {n + 1}: {Path(page).name} {per_page[-1]:.2f} s",
                file=sys.stderr,
                flush=True,
            )
        passes.append(per_page)
        texts.append(got)
    gold = golden()
    shipped = [(k, Path(p).name) for k, p in enumerate(pages) if Path(p).name in gold]
    engines = {"det": pipe.engine, "cls": pipe.steps[0].engine, "rec": pipe.steps[-1].engine}
    out = {
        "config": args.config,
        "cache": args.label,
        "load_s": round(load_s, 3),
        "warm_s": (pipe.warmed or {}).get("seconds"),
        "first_pass_s": round(sum(passes[0]), 3),
        "second_pass_s": round(sum(passes[1]), 3),
        "first_pass_pages_s": passes[0],
        "second_pass_pages_s": passes[1],
        "same_texts_both_passes": texts[0] == texts[1],
        "same_texts_as_rapidocr": sum(texts[0][k] == gold[name]["texts"] for k, name in shipped),
        "shipped_pages": len(shipped),
        "shape_buckets": pipe.shape_buckets,
        "engines": {},
    }
    for role, e in engines.items():
        s = e.info.settings
        provider = e.info.providers[0]
        search = s.get("tuning", {}).get(provider, {}).get("exhaustive_tune", {})
        out["engines"][role] = {
            "provider": provider,
            "compile_s": round(e.info.compile_seconds or 0.0, 3),
            "cache_hit": e.info.cache_hit,
            "warm": s.get("warm"),
            "shape_sessions": {k: v for k, v in s.get("shape_sessions", {}).items() if k != "shapes"},
            "sessions_shapes": [next(iter(x.values())) for x in s.get("shape_sessions", {}).get("shapes", [])],
            "exhaustive_tune": {"value": search.get("value"), "source": search.get("source")},
            "cudnn_conv_algo_search": s.get("provider_options", {}).get(provider, {}).get("cudnn_conv_algo_search"),
        }
    pipe.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the JSON object here too")
    ap.add_argument("--providers", choices=sorted(PROVIDERS), default="cuda")
    ap.add_argument("--configs", default="default,no_warm", help=f"comma-separated among {list(CONFIGS)}")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one process may take (then reported)")
    ap.add_argument("--cold-only", action="store_true", help="one process per configuration, on an empty cache")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--label", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pages", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        sys.exit(f"--configs: got {unknown}, expected names among {list(CONFIGS)}")
    from _models import DATA, PAGES

    work = Path(tempfile.mkdtemp(prefix="amdinfer-ocr-cold-"))
    pages = [str(DATA / p) for p in PAGES] + draw_pages(work)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("AMDINFER_CACHE_DIR", None)  # each configuration gets its own folder, empty at first
    runs = []
    for config in configs:
        cache = work / f"cache-{config}"
        for label in ("cold cache", "warm cache")[: 1 if args.cold_only else 2]:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                "--config",
                config,
                "--cache",
                str(cache),
                "--label",
                label,
                "--providers",
                args.providers,
                "--pages",
                json.dumps(pages),
            ]
            t = time.perf_counter()
            try:  # the child's progress (stderr) goes straight to ours: a timed-out run still shows how far it got
                proc = subprocess.run(
                    cmd, stdout=subprocess.PIPE, text=True, env=env, check=False, timeout=args.timeout
                )
            except subprocess.TimeoutExpired:
                print(f"{config:>10} {label:>10}: over --timeout {args.timeout:.0f} s", flush=True)
                continue
            if proc.returncode != 0:
                sys.exit(f"{config} ({label}) failed with exit status {proc.returncode} (its stderr is above)")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["process_s"] = round(time.perf_counter() - t, 3)
            runs.append(row)
            print(
                f"{config:>10} {label:>10}: load {row['load_s']:7.2f} s (warm-up {row['warm_s']}), first pass "
                f"{row['first_pass_s']:7.2f} s, second {row['second_pass_s']:6.2f} s over {len(pages)} pages; "
                f"same texts {row['same_texts_both_passes']}, RapidOCR's on {row['same_texts_as_rapidocr']}/"
                f"{row['shipped_pages']}",
                flush=True,
            )
    import onnxruntime

    result = {
        "issue": "38 part 4: OCR cold start",
        "target": "first pass over 10 pages <= 5 s on the H200 once cached",
        "onnxruntime": onnxruntime.__version__,
        "device": onnxruntime.get_device(),
        "pages": [Path(p).name for p in pages],
        "runs": runs,
        "first_pass_s": {f"{r['config']} / {r['cache']}": r["first_pass_s"] for r in runs},
        "load_plus_first_pass_s": {
            f"{r['config']} / {r['cache']}": round(r["load_s"] + r["first_pass_s"], 3) for r in runs
        },
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
