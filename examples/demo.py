"""Quick-start demo: build ResNet-50 offline, run it through amdinfer on the best working backend,
print the top-5 classes and which providers really ran it, then prove the answer against the
NumPy reference.

    python examples/demo.py            # or: nox -s demo

The weights are seeded random numbers (nothing is downloaded), so the classes are meaningless;
the point is the path: load -> run -> explain -> verify.
"""

from __future__ import annotations

import time

import numpy as np

import amdinfer
from amdinfer.testing.models import resnet50


def main() -> None:
    t0 = time.perf_counter()
    model = resnet50(seed=0)
    print(f"built ResNet-50 (torchvision v1.5 graph, seeded weights) in {time.perf_counter() - t0:.1f} s")

    engine = amdinfer.load(model)  # backend="auto": MIGraphX -> ORT MIGraphX EP -> ROCm EP -> CUDA EP -> CPU
    info = engine.info
    print(f"backend: {info.backend} on {info.device}, providers used: {info.providers}")
    for name, why in info.short_skipped().items():  # full reasons: info.skipped, or `amdinfer doctor`
        print(f"  passed over {name}: {why}")

    rng = np.random.default_rng(0)
    image = rng.random((1, 3, 224, 224), dtype=np.float32)
    t0 = time.perf_counter()
    logits = engine.run({"input": image})["logits"][0]
    ms = (time.perf_counter() - t0) * 1000
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    top5 = np.argsort(-probs)[:5]
    print(f"top-5 ({ms:.1f} ms):")
    for rank, cls in enumerate(top5, 1):
        print(f"  {rank}. class {cls:4d}  p={probs[cls]:.4f}")

    try:
        from amdinfer import verify

        with amdinfer.load(model, backend="reference", precision="fp64") as oracle:
            report = verify.compare(engine.run({"input": image}), oracle.run({"input": image}))
        print(f"verified against the float64 NumPy reference: {report}")
    except (ImportError, amdinfer.BackendUnavailableError) as exc:  # reference engine not available
        print(f"(verification skipped: {exc})")
    engine.close()


if __name__ == "__main__":
    main()
