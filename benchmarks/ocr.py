"""OCR pages/s: ``amdinfer.ocr`` against RapidOCR 3.10.0 with the same PP-OCR models, threads and ORT EP.

Both run the shipped pages ``tests/data/ocr_page*.png`` (``--repeat`` times), with ONNX Runtime's CPU EP and
``--threads`` intra-op threads each; RapidOCR runs in a subprocess of its own interpreter (``--rapidocr-python``,
which needs rapidocr 3.10.0 with its dependencies) so the two never share a process; it waits while amdinfer
runs. Each of ``--repeat`` rounds times one pass over the pages per side, in alternating order (amdinfer page by
page (``__call__``), streamed (``map``: the next page's detector overlaps this page's recogniser), RapidOCR; then
the reverse), so that a noisy machine meets every side alike; the median of the per-round ratios is printed
beside the totals, with RapidOCR's own seconds per stage. ``--options``: extra options for amdinfer's side.
Before timing, both are checked to give the same lines. Prints one JSON object (``--json`` also writes it,
``--markdown`` appends a table row). ``--providers cuda``: both on ONNX Runtime's CUDA EP (RapidOCR through its
``EngineConfig.onnxruntime.use_cuda``, which it honours when ``onnxruntime.get_device()`` is ``"GPU"``; the
sessions' providers are reported). ``--int8``: also the int8 cascade calibrated on the pages (CPU).
``benchmarks/ocr_h200.sh`` runs the CPU (2 pinned cores) and CUDA comparisons on a GPU machine.

    python benchmarks/ocr.py --rapidocr-python /path/to/venv-with-rapidocr/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "ocr"))

RAPID = r"""
import json, sys, time
from rapidocr import RapidOCR
paths, threads, cuda = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "cuda"
eng = RapidOCR(params={"Global.log_level": "error", "EngineConfig.onnxruntime.intra_op_num_threads": threads,
                       "EngineConfig.onnxruntime.inter_op_num_threads": 1,
                       "EngineConfig.onnxruntime.use_cuda": cuda})
texts = [list(eng(p).txts or ()) for p in paths]  # also the warm-up (CUDA: cuDNN's algorithm search per shape)
def _sessions(obj, seen=None, depth=0):
    import onnxruntime
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return []
    seen.add(id(obj))
    if isinstance(obj, onnxruntime.InferenceSession):
        return [obj]
    out = []
    for v in getattr(obj, "__dict__", {}).values():
        out += _sessions(v, seen, depth + 1)
    return out
providers = sorted({str(s.get_providers()[0]) for s in _sessions(eng)})
print(json.dumps({"texts": texts, "providers": providers}), flush=True)
for line in sys.stdin:  # one line per timed pass over the pages (the parent alternates passes with amdinfer's)
    if line.strip() != "pass":
        break
    elapse = [0.0, 0.0, 0.0]
    t = time.perf_counter()
    for p in paths:
        r = eng(p)
        if len(r.elapse_list or ()) == 3:  # an empty output (a page whose lines were all dropped) has none
            elapse = [a + (b or 0.0) for a, b in zip(elapse, r.elapse_list)]
    print(json.dumps({"seconds": time.perf_counter() - t, "elapse": elapse}), flush=True)
"""


class _Rapid:
    """RapidOCR in its own interpreter, timing one pass over the pages per :meth:`timed_pass` (the parent waits)."""

    def __init__(self, python: str, paths: list[str], threads: int, providers: str) -> None:
        args = [python, "-c", RAPID, json.dumps(paths), str(threads), providers]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"RapidOCR's process ended (exit {self.proc.wait()}); see its stderr above")
        return json.loads(line)

    def timed_pass(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("pass\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _time_cascade(pipe: Any, paths: list[str], repeat: int, rapid: _Rapid | None = None) -> dict[str, Any]:
    """A warm-up pass (its lines), then ``repeat`` rounds of one pass each: ``__call__`` page by page, ``map``, and
    with ``rapid`` RapidOCR's, in alternating order (ABC, CBA, ...) so that each side meets the same machine."""
    t = time.perf_counter()
    texts = [pipe(p).texts for p in paths]  # also the warm-up (on a GPU: each new shape's first call)
    first_s = time.perf_counter() - t
    passes: dict[str, list[float]] = {"call": [], "map": [], "rapid": []}
    rapid_elapse = [0.0, 0.0, 0.0]
    for r in range(repeat):
        sides = ["call", "map"] + (["rapid"] if rapid is not None else [])
        for side in sides[::-1] if r % 2 else sides:
            t = time.perf_counter()
            if side == "rapid":
                assert rapid is not None
                answer = rapid.timed_pass()
                passes["rapid"].append(answer["seconds"])
                rapid_elapse = [x + y for x, y in zip(rapid_elapse, answer["elapse"])]
                continue
            if side == "call":
                for p in paths:
                    pipe(p)
            else:
                with pipe.map(paths, batch_size=1, workers=2) as results:
                    for _ in results:
                        pass
            passes[side].append(time.perf_counter() - t)
    out = {"texts": texts, "call_s": sum(passes["call"]), "map_s": sum(passes["map"]), "first_pass_s": first_s}
    out["passes"] = passes
    if rapid is not None:
        out["rapid_s"] = sum(passes["rapid"])
        out["rapid_stages_s_per_page"] = [round(x / (repeat * len(paths)), 4) for x in rapid_elapse]
    return out


#: --variants: amdinfer's tuned GPU defaults turned off one at a time (and all at once), to find what costs time
#: when every page and every line batch is a new shape.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("tuning=False", {"tuning": False}),
    ("exhaustive_tune=False", {"exhaustive_tune": False}),
    ("prefer_nhwc=False", {"prefer_nhwc": False}),
    ("io_binding=False", {"io_binding": False}),
]


def _stage_times(pipe: Any, paths: list[str], repeat: int) -> dict[str, float]:
    """Seconds per page inside each engine's ``run`` (det, then the sub-pipelines' engines in order)."""
    engines = {"det": pipe.engine, **{f"step{i}": s.engine for i, s in enumerate(pipe.steps)}}
    spent = dict.fromkeys(engines, 0.0)
    originals = {}
    for key, e in engines.items():
        originals[key] = e.run

        def timed(*a: Any, _run: Any = e.run, _key: str = key, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return _run(*a, **k)
            finally:
                spent[_key] += time.perf_counter() - t

        e.run = timed
    t0 = time.perf_counter()
    try:
        for _ in range(repeat):
            for p in paths:
                pipe(p)
    finally:
        for key, e in engines.items():
            e.run = originals[key]
    pages = repeat * len(paths)
    total = time.perf_counter() - t0
    out = {k: round(v / pages, 4) for k, v in spent.items()}
    out["outside_engines"] = round((total - sum(spent.values())) / pages, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rapidocr-python", default=None, help="interpreter with rapidocr 3.10.0 and its deps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--providers", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--int8", action="store_true", help="also the int8 cascade, calibrated on the pages")
    ap.add_argument("--json", default=None, help="also write the JSON object here")
    ap.add_argument("--markdown", default=None, help="append a Markdown table row here (header if new)")
    ap.add_argument(
        "--variants",
        action="store_true",
        help="also time amdinfer.ocr with each tuned data-path default turned off in turn (tuning=False, "
        "exhaustive_tune=False, prefer_nhwc=False, io_binding=False) and the time per stage (det, cls, rec)",
    )
    ap.add_argument("--stages", action="store_true", help="also the seconds per page in each engine (det, cls, rec)")
    ap.add_argument(
        "--plain-ctc",
        action="store_true",
        help="also amdinfer.ocr with fuse_ctc=False (the recogniser's probabilities decoded on the host)",
    )
    ap.add_argument(
        "--options",
        default="{}",
        help="JSON object of extra amdinfer.ocr/load options for amdinfer's side (e.g. '{\"spin_wait\": false}')",
    )
    args = ap.parse_args()

    from _models import DATA, PAGES, models  # tests/ocr/_models.py: the wheel's model files

    import amdinfer

    m = models()
    if m is None:
        sys.exit("needs the models of rapidocr==3.10.0: pip install --no-deps rapidocr==3.10.0")
    paths = [str(DATA / p) for p in PAGES]
    ep = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}[args.providers]
    load = {"providers": [ep], "threads": args.threads, **json.loads(args.options)}
    # RapidOCR in its own process, started first (its warm-up then does not overlap amdinfer's timing)
    rapid = _Rapid(args.rapidocr_python, paths, args.threads, args.providers) if args.rapidocr_python else None
    pipe = amdinfer.ocr(m["det"], m["rec"], m["cls"], **load)
    ours = _time_cascade(pipe, paths, args.repeat, rapid)
    engines = [pipe.engine, *(s.engine for s in pipe.steps)]
    n = len(paths) * args.repeat
    out: dict[str, Any] = {
        "pages": n,
        "threads": args.threads,
        "ep": ep,
        "amdinfer_providers": sorted({e.info.providers[0] for e in engines}),
        "amdinfer_call_pages_s": n / ours["call_s"],
        "amdinfer_map_pages_s": n / ours["map_s"],
        "amdinfer_first_pass_s": round(ours["first_pass_s"], 2),
        "options": load,
        "shape_buckets": pipe.shape_buckets,
        "shape_sessions": [e.info.settings.get("shape_sessions") for e in engines],
    }
    if args.variants or args.stages:
        out["stages_s_per_page"] = _stage_times(pipe, paths, args.repeat)
    out["ctc_in_graph"] = pipe.ctc_in_graph
    pipe.close()

    def variant(label: str, extra: dict[str, Any]) -> dict[str, Any]:
        """amdinfer.ocr with ``extra`` options: its rates, whether its lines are the defaults', time per stage."""
        with amdinfer.ocr(m["det"], m["rec"], m["cls"], **load, **extra) as v:
            t = _time_cascade(v, paths, args.repeat)
            row = {"call_pages_s": n / t["call_s"], "map_pages_s": n / t["map_s"]}
            row.update(same_lines=t["texts"] == ours["texts"], stages_s_per_page=_stage_times(v, paths, args.repeat))
        print(label, row, flush=True)
        return row

    if args.plain_ctc:
        out["plain_ctc"] = variant("plain_ctc", {"fuse_ctc": False})
    if args.variants:
        out["variants"] = {label: variant(label, extra) for label, extra in VARIANTS}
    if args.int8:
        with amdinfer.ocr(m["det"], m["rec"], m["cls"], precision="int8", calibration=paths, **load) as q:
            int8 = _time_cascade(q, paths, args.repeat)
        out["int8_call_pages_s"] = n / int8["call_s"]
        out["int8_map_pages_s"] = n / int8["map_s"]
        out["int8_same_lines_as_fp32"] = int8["texts"] == ours["texts"]
    if rapid is not None:
        rapid.close()
        out["rapidocr_providers"] = rapid.ready["providers"]
        out["rapidocr_pages_s"] = n / ours["rapid_s"]
        out["rapidocr_stages_s_per_page"] = dict(zip(("det", "cls", "rec"), ours["rapid_stages_s_per_page"]))
        out["same_lines"] = rapid.ready["texts"] == ours["texts"]
        if not out["same_lines"]:  # how far: exact lines and character error rate against RapidOCR's
            from test_ocr_int8 import accuracy  # tests/ocr: the one definition of both figures

            exact, cer = accuracy(rapid.ready["texts"], ours["texts"])
            out["exact_line_rate_vs_rapidocr"], out["cer_vs_rapidocr"] = round(exact, 3), round(cer, 4)
            out["lines_differing"] = [
                [a, b] for ra, rb in zip(rapid.ready["texts"], ours["texts"]) for a, b in zip(ra, rb) if a != b
            ]
        out["time_ratio_call"] = ours["call_s"] / ours["rapid_s"]
        out["time_ratio_map"] = ours["map_s"] / ours["rapid_s"]
        # each round's passes ran back to back: the median of the per-round ratios is the least noisy figure
        per_round = ours["passes"]
        for side in ("call", "map"):
            ratios = [a / b for a, b in zip(per_round[side], per_round["rapid"])]
            out[f"time_ratio_{side}_median_of_rounds"] = statistics.median(ratios)
        out["seconds_per_pass"] = {k: [round(x, 3) for x in v] for k, v in per_round.items()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    if args.markdown:
        _markdown_row(Path(args.markdown), out)


def _markdown_row(path: Path, out: dict[str, Any]) -> None:
    """One row of the comparison table (the header when the file is new)."""
    cols = ["ep", "threads", "pages", "amdinfer_call_pages_s", "amdinfer_map_pages_s", "rapidocr_pages_s"]
    cols += ["time_ratio_call", "time_ratio_map", "same_lines", "int8_map_pages_s", "int8_same_lines_as_fp32"]
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else ("-" if v is None else str(v))  # noqa: E731
    lines = [] if path.is_file() else ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines.append("| " + " | ".join(fmt(out.get(c)) for c in cols) + " |")
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
