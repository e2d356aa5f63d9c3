"""Write (or read) the outputs of the builder models on the CPU build of ONNX Runtime.

The AMD-wheel sessions compare their results with these: `onnxruntime-migraphx` and
`onnxruntime-rocm` without a GPU must give the CPU build's answers.

    python tests/engines/amd_wheel_outputs.py --write .nox/_cpu_outputs.npz
"""

from __future__ import annotations

import argparse

import numpy as np

import amdinfer
from amdinfer.testing import models

CASES = {
    "tiny_cnn": lambda: models.tiny_cnn(),
    "transformer_encoder": lambda: models.transformer_encoder(),
    "yolov8": lambda: models.yolov8(image_size=64, num_classes=8),
}


def feeds_for(name: str) -> dict[str, np.ndarray]:
    return models.random_inputs(CASES[name](), batch=2, seed=7)


def compute() -> dict[str, np.ndarray]:
    out = {}
    for name, make in CASES.items():
        with amdinfer.load(make(), backend="ort", providers=["CPUExecutionProvider"]) as engine:
            for k, v in engine.run(feeds_for(name)).items():
                out[f"{name}/{k}"] = v
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", required=True)
    path = parser.parse_args().write
    np.savez(path, **compute())
    print(f"wrote CPU-build outputs of {list(CASES)} to {path}")
