"""Which tiles flood the fused NMS on a GPU, and is it the model or the data path? (issue 41 diagnostic)

The sliced detector's fused engine (``amdinfer.yolo(model, tiles=...)``: the tile-size FusedPipeline, dense NMS) runs
each batch of ``--batch`` pieces of ``--images`` planted-squares images in turn; per batch: its milliseconds and
each piece's ``candidates`` (anchors above the confidence threshold). For the piece with the most candidates, the
bare model's best class score is computed on the same piece three ways: on this device through ``amdinfer.load``
(float input, letterboxed and scaled on the host), on the CPU EP, and (with ``--cpu-fused``) the fused graph on
the CPU EP. A flood the CPU does not see points at the GPU data path, not the model. JSON on stdout and in
``$OUT/sliced_candidates.json``.

    python benchmarks/sliced_candidates.py --provider cuda          # the H200
    python benchmarks/sliced_candidates.py --provider cpu --images 1 --batch 8   # a CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

try:  # torch first: it loads the CUDA libraries onnxruntime-gpu links against (the H200 run)
    import torch  # noqa: F401
except ImportError:
    pass
import amdinfer
from amdinfer.preprocess import HwcToChw, Letterbox, Normalize
from amdinfer.testing.models import yolov8
from amdinfer.testing.squares import planted_squares


def _best_score(model: Any, provider: str, piece: np.ndarray, tile: int) -> float:
    x = piece
    for s in (Letterbox((tile, tile)), Normalize(scale=1 / 255), HwcToChw()):
        x = s(x).data
    with amdinfer.load(model, providers=[provider]) as eng:
        out = next(iter(eng.run({eng.inputs[0].name: np.ascontiguousarray(x[None])}).values()))
    return float(np.asarray(out)[0, 4:].max())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--provider", default="cuda")
    p.add_argument("--images", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--tile", type=int, default=640)
    p.add_argument("--cpu-fused", action="store_true")
    args = p.parse_args()
    model = yolov8(image_size=args.tile)
    images = [planted_squares(4000, 6000, count=60, seed=i)[0] for i in range(args.images)]
    sliced = amdinfer.yolo(model, tiles=(args.tile, args.tile), tile_overlap=0.2, providers=[args.provider])
    out: dict[str, Any] = {"provider": args.provider, "batches": []}
    try:
        sliced.run_batch(images[:1])  # warm-up; builds the tile-size fused engine
        det = sliced.detector
        fused = getattr(det, "_fused", {}).get((args.tile, args.tile))
        out["detector"] = type(det).__name__
        if fused is None or "candidates" not in [o.name for o in fused.engine.outputs]:
            out["note"] = "no tile-size fused engine with a candidates output (dense NMS) on this provider"
            print(json.dumps(out))
            return 0
        fed = [q.data for im in images for q in sliced._split(0, im)[1].items]
        worst = (-1, 0)
        for k in range(0, len(fed), args.batch):
            chunk = fed[k : k + args.batch]
            feed = fused._feed(np.stack(chunk), [{"orig_shape": tuple(q.shape[:2])} for q in chunk])
            fused.engine.run(feed)
            t0 = time.perf_counter()
            res = fused.engine.run(feed)
            ms = (time.perf_counter() - t0) * 1e3
            cands = np.asarray(res["candidates"]).astype(int).tolist()
            again = np.asarray(fused.engine.run(feed)["candidates"]).astype(int).tolist()
            out["batches"].append({"first": k, "ms": round(ms, 1), "candidates": cands, "same_again": cands == again})
            _save(out)  # as it goes: a run cut short keeps its batches
            j = int(np.argmax(cands))
            if cands[j] > worst[0]:
                worst = (cands[j], k + j)
        out["worst_piece"] = {"index": worst[1], "candidates": worst[0], "shape": list(fed[worst[1]].shape)}
        piece = fed[worst[1]]
        out["worst_piece"]["best_score_device"] = _best_score(model, args.provider, piece, args.tile)
        out["worst_piece"]["best_score_cpu"] = _best_score(model, "cpu", piece, args.tile)
        out["worst_piece"]["pixels"] = {"min": int(piece.min()), "max": int(piece.max()), "mean": float(piece.mean())}
        single = fused._feed(np.stack([piece]), [{"orig_shape": tuple(piece.shape[:2])}])
        out["worst_piece"]["fused_alone_candidates"] = np.asarray(fused.engine.run(single)["candidates"]).tolist()
        if args.cpu_fused:
            st = amdinfer.yolo(model, providers=["cpu"], fuse=False)
            cpu = st.fuse(nms_mode="dense", image_size=(args.tile, args.tile), providers=["cpu"])
            out["worst_piece"]["fused_cpu_candidates"] = np.asarray(cpu.engine.run(single)["candidates"]).tolist()
            cpu.close()
            st.close()
    finally:
        sliced.close()
    print(json.dumps(out))
    _save(out)
    return 0


def _save(out: dict[str, Any]) -> None:
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "sliced_candidates.json").write_text(json.dumps(out))


if __name__ == "__main__":
    raise SystemExit(main())
