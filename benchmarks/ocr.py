"""OCR pages/s on the CPU: ``amdinfer.ocr`` against RapidOCR 3.10.0 with the same PP-OCR models and threads.

Both run the shipped pages ``tests/data/ocr_page*.png`` (``--repeat`` times), with ONNX Runtime's CPU EP and
``--threads`` intra-op threads each; RapidOCR runs in a subprocess of its own interpreter (``--rapidocr-python``,
which needs rapidocr 3.10.0 with its dependencies) so the two never share a process. amdinfer is timed
page by page (``__call__``) and streamed (``map``: the next page's detector overlaps this page's recogniser).
Before timing, both are checked to give the same lines. Prints one JSON object.

    python benchmarks/ocr.py --rapidocr-python /path/to/venv-with-rapidocr/bin/python
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "ocr"))

RAPID = r"""
import json, sys, time
from rapidocr import RapidOCR
paths, threads, repeat = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
eng = RapidOCR(params={"Global.log_level": "error", "EngineConfig.onnxruntime.intra_op_num_threads": threads,
                       "EngineConfig.onnxruntime.inter_op_num_threads": 1})
texts = [list(eng(p).txts or ()) for p in paths]
t = time.perf_counter()
for _ in range(repeat):
    for p in paths:
        eng(p)
print(json.dumps({"seconds": time.perf_counter() - t, "texts": texts}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rapidocr-python", default=None, help="interpreter with rapidocr 3.10.0 and its deps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from _models import DATA, PAGES, models  # tests/ocr/_models.py: the wheel's model files

    import amdinfer

    m = models()
    if m is None:
        sys.exit("needs the models of rapidocr==3.10.0: pip install --no-deps rapidocr==3.10.0")
    paths = [str(DATA / p) for p in PAGES]
    pipe = amdinfer.ocr(m["det"], m["rec"], m["cls"], providers=["CPUExecutionProvider"], threads=args.threads)
    ours = [pipe(p).texts for p in paths]
    t = time.perf_counter()
    for _ in range(args.repeat):
        for p in paths:
            pipe(p)
    call_s = time.perf_counter() - t
    t = time.perf_counter()
    with pipe.map(paths * args.repeat, batch_size=1, workers=2) as results:
        for _ in results:
            pass
    map_s = time.perf_counter() - t
    pipe.close()
    n = len(paths) * args.repeat
    out = {"pages": n, "threads": args.threads, "amdinfer_call_pages_s": n / call_s, "amdinfer_map_pages_s": n / map_s}
    if args.rapidocr_python:
        proc = subprocess.run(
            [args.rapidocr_python, "-c", RAPID, json.dumps(paths), str(args.threads), str(args.repeat)],
            capture_output=True,
            text=True,
            check=True,
        )
        rapid = json.loads(proc.stdout.strip().splitlines()[-1])
        out["rapidocr_pages_s"] = n / rapid["seconds"]
        out["same_lines"] = rapid["texts"] == ours
        out["time_ratio_call"] = call_s / rapid["seconds"]
        out["time_ratio_map"] = map_s / rapid["seconds"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
