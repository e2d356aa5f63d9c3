"""JPEG decode rates: each decoder, LoadImage and LoadImage + Letterbox, on 1 thread and on all cores.

Files: ``--count`` synthetic document-like pages (text-like strokes, boxes, a little noise) of ``--size``
(``WIDTHxHEIGHT``), written with ``cv2.imencode`` (quality 90) to a temporary folder; every row reads the file
and decodes it, as ``det.map(paths)`` does. Threads: a ``ThreadPoolExecutor`` of ``--threads`` (default: the
cores this process may use) mapping over the files, as the executor's placement pool does.

Rows (images/s; best of ``--repeats`` passes, the rows taking turns):

* ``cv2 BGR``: ``cv2.imdecode(..., IMREAD_COLOR)``, the bare decode (the peer every ratio is against);
* ``cv2 BGR+cvtColor``: the same and an in-place ``cvtColor`` to RGB (what LoadImage did before, on OpenCV's pool);
* ``cv2 RGB``: ``IMREAD_COLOR_RGB`` (OpenCV >= 4.10; libjpeg-turbo writes RGB, what LoadImage does now);
* ``simplejpeg``/``turbojpeg``: ``simplejpeg.decode_jpeg`` / PyTurboJPEG, when installed (optional);
* ``pillow``: ``Image.open`` + ``convert("RGB")``;
* ``LoadImage`` and ``LoadImage+Letterbox(640)``, each with OpenCV's thread pool as found (``default``) and
  inside ``single_threaded_opencv()`` (``1 cv thread``), as ``Pipeline.map`` now runs its placement.

Every decoder's pixels are compared with ``cv2 RGB`` on every file (``identical``: all equal).

    python benchmarks/decode.py --count 512 --size 1000x800 --out decode.json
    python benchmarks/decode.py --json   # the JSON on stdout instead of the table
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2

from amdinfer.pipeline._executor import default_threads
from amdinfer.preprocess import Letterbox, LoadImage
from amdinfer.preprocess._cv_threads import single_threaded_opencv


def make_pages(folder: Path, count: int, width: int, height: int) -> list[str]:
    """``count`` page-like JPEGs of ``width x height`` in ``folder`` (deterministic)."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        page = np.full((height, width, 3), 245 - int(rng.integers(0, 20)), np.uint8)
        for _ in range(int(rng.integers(20, 40))):  # lines of "text"
            x, y = int(rng.integers(0, width * 3 // 4)), int(rng.integers(20, height))
            text = "".join(chr(int(c)) for c in rng.integers(65, 91, int(rng.integers(8, 30))))
            cv2.putText(page, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (20, 20, 20), 1, cv2.LINE_AA)
        for _ in range(3):  # figures
            x, y = int(rng.integers(0, width - 100)), int(rng.integers(0, height - 100))
            colour = tuple(int(c) for c in rng.integers(0, 255, 3))
            cv2.rectangle(page, (x, y), (x + int(rng.integers(40, 200)), y + int(rng.integers(40, 200))), colour, -1)
        page = cv2.add(page, rng.integers(0, 6, page.shape, dtype=np.uint8))
        ok, buf = cv2.imencode(".jpg", page, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        path = folder / f"page{i:05d}.jpg"
        path.write_bytes(buf.tobytes())
        paths.append(str(path))
    return paths


def _read(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8)


def decoders() -> dict[str, Callable[[str], np.ndarray]]:
    """The decoders installed here, each ``path -> RGB or BGR pixels``."""
    out: dict[str, Callable[[str], np.ndarray]] = {
        "cv2 BGR": lambda p: cv2.imdecode(_read(p), cv2.IMREAD_COLOR),
    }

    def bgr_cvt(p: str) -> np.ndarray:
        image = cv2.imdecode(_read(p), cv2.IMREAD_COLOR)
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=image)

    out["cv2 BGR+cvtColor"] = bgr_cvt
    if hasattr(cv2, "IMREAD_COLOR_RGB"):
        out["cv2 RGB"] = lambda p: cv2.imdecode(_read(p), cv2.IMREAD_COLOR_RGB)
    try:
        import simplejpeg

        out["simplejpeg"] = lambda p: simplejpeg.decode_jpeg(_read(p), "RGB")
    except ImportError:
        pass
    try:
        from turbojpeg import TJPF_RGB, TurboJPEG

        jpeg = TurboJPEG()
        out["turbojpeg"] = lambda p: jpeg.decode(_read(p).tobytes(), pixel_format=TJPF_RGB)
    except (ImportError, RuntimeError, OSError):  # the package, or its libturbojpeg, missing
        pass
    try:
        from PIL import Image

        def pillow(p: str) -> np.ndarray:
            with Image.open(p) as im:
                return np.asarray(im.convert("RGB"))

        out["pillow"] = pillow
    except ImportError:
        pass
    return out


def rate(fn: Callable[[str], Any], paths: list[str], threads: int, single_cv: bool) -> float:
    """Images per second of ``fn`` over ``paths`` on ``threads`` threads (1: here)."""
    with single_threaded_opencv(single_cv):
        t0 = time.perf_counter()
        if threads == 1:
            for p in paths:
                fn(p)
        else:
            with ThreadPoolExecutor(threads) as pool:
                for _ in pool.map(fn, paths):
                    pass
        return len(paths) / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=512, help="JPEG files to make (default 512)")
    ap.add_argument("--size", default="1000x800", help="WIDTHxHEIGHT of each page (default 1000x800)")
    ap.add_argument("--threads", type=int, default=default_threads(), help="threads of the all-cores rows")
    ap.add_argument("--repeats", type=int, default=3, help="passes per row, best kept (default 3)")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    args = ap.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))

    rows: dict[str, Callable[[str], Any]] = dict(decoders())
    load, letterbox = LoadImage(backend="opencv"), Letterbox(640)
    rows["LoadImage"] = lambda p: load(p).data
    rows["LoadImage+Letterbox(640)"] = lambda p: letterbox(load(p)).data
    with tempfile.TemporaryDirectory(prefix="amdinfer-decode-") as tmp:
        paths = make_pages(Path(tmp), args.count, width, height)
        truth = {p: cv2.imdecode(_read(p), cv2.IMREAD_COLOR)[..., ::-1] for p in paths}
        identical: dict[str, bool] = {}
        for name, fn in rows.items():
            if name.startswith("LoadImage+"):
                continue
            same = True
            for p in paths:
                got = fn(p)
                same &= bool(np.array_equal(got[..., ::-1] if name == "cv2 BGR" else got, truth[p]))
            identical[name] = same
        cases = [(name, n, cv) for n in sorted({1, args.threads}) for name in rows for cv in (False, True)]
        cases = [c for c in cases if c[2] is False or c[0].startswith("LoadImage") or c[0].startswith("cv2")]
        best: dict[tuple[str, int, bool], float] = {}
        for _ in range(args.repeats):
            for name, n, cv in cases:
                r = rate(rows[name], paths, n, cv)
                best[(name, n, cv)] = max(best.get((name, n, cv), 0.0), r)
    results = []
    for (name, n, cv), r in best.items():
        peer = best[("cv2 BGR", n, False)]
        results.append(
            {
                "row": name,
                "threads": n,
                "opencv_threads": "1" if cv else "default",
                "images_per_s": round(r, 1),
                "vs_cv2_bgr": round(r / peer, 3),
                "identical": identical.get(name),
            }
        )
    report = {
        "count": args.count,
        "size": [width, height],
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "opencv": cv2.__version__,
        "opencv_default_threads": cv2.getNumThreads(),
        "rows": results,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{args.count} JPEGs of {width}x{height}; OpenCV {cv2.__version__} ({cv2.getNumThreads()} threads)")
        print(f"{'row':28s} {'threads':>7s} {'cv threads':>10s} {'images/s':>9s} {'/ cv2 BGR':>9s} identical")
        for row in results:
            same = "" if row["identical"] is None else str(row["identical"])
            print(
                f"{row['row']:28s} {row['threads']:7d} {row['opencv_threads']:>10s} {row['images_per_s']:9.1f} "
                f"{row['vs_cv2_bgr']:9.3f} {same}"
            )
    return report


if __name__ == "__main__":
    main()
