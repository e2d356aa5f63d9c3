"""A bundle's goldens: seeded inputs per bucket, the source model's outputs on the NumPy reference, and the check.

Example:
    >>> agrees(np.ones(3, np.float32), np.ones(3), {"rtol": 1e-3, "atol": 1e-4})
    (True, 0.0)
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, BundleError, UnsupportedOperatorError
from ..model import ModelSource

__all__ = ["agrees", "check_goldens", "golden_feeds", "write_goldens"]

log = logging.getLogger("amdinfer")


def golden_feeds(source: ModelSource, shapes: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs of the given shapes: floats uniform in [0, 1), ints in [0, 4), bools half true.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> feeds = golden_feeds(ModelSource.from_any(tiny_cnn()), {"input": (2, 3, 32, 32)}, 0)
        >>> feeds["input"].shape, feeds["input"].dtype.name
        ((2, 3, 32, 32), 'float32')
    """
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for spec in source.inputs:
        shape = tuple(int(d) for d in shapes[spec.name])
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feeds[spec.name] = rng.random(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[spec.name] = rng.integers(0, 4, shape).astype(dtype)
        else:
            feeds[spec.name] = (rng.random(shape) > 0.5).astype(dtype)
    return feeds


#: fp32 on an EP that runs its convolutions and GEMMs in TF32 (the CUDA EP's default; 10-bit mantissa, each
#: product's relative error about 5e-4): measured on an H200, a seeded ResNet-50's logits differ from the NumPy
#: reference by up to 1.8e-3 there, against the strict fp32 tolerance's 1e-4 (atol relative to the largest output).
TF32_TOLERANCE = {"rtol": 1e-2, "atol": 5e-3}


def runs_tf32(providers: Any) -> bool:
    """Whether a bundle's providers (``[(name, options)]``, as built) run fp32 in TF32: the CUDA EP unless its
    ``use_tf32`` option is off (amdinfer's ``tf32=False``).

    Example:
        >>> runs_tf32([("CUDAExecutionProvider", {})]), runs_tf32([("CUDAExecutionProvider", {"use_tf32": "0"})])
        (True, False)
        >>> runs_tf32([("CPUExecutionProvider", {})])
        False
    """
    for entry in providers or ():
        name, opts = (entry, {}) if isinstance(entry, str) else (entry[0], dict(entry[1] or {}))
        if name == "CUDAExecutionProvider" and str(opts.get("use_tf32", "1")).lower() not in ("0", "false"):
            return True
    return False


def _tolerance(precision: str, tf32: bool = False) -> dict[str, float]:
    if precision in ("fp32", "fp64"):
        # atol relative to the output's largest magnitude
        return dict(TF32_TOLERANCE) if tf32 else {"rtol": 1e-3, "atol": 1e-4}
    return {"min_cosine": 0.99}  # reduced precision: the direction of each output, as the quantizers judge


def _golden_engine(source: ModelSource) -> tuple[Any, str]:
    """The NumPy reference on the source model, or ONNX Runtime's CPU EP where the reference lacks an operator."""
    from ..engines.registry import get_backend

    try:
        return get_backend("reference").build(source, {}), "reference"
    except (UnsupportedOperatorError, BackendUnavailableError) as exc:
        log.info("bundle goldens: reference engine passed over (%s); ONNX Runtime's CPU EP", exc)
        cpu = {"providers": ["CPUExecutionProvider"], "cache": False}
        return get_backend("ort").build(source, cpu), "ort-cpu"


def write_goldens(
    source: ModelSource, work: Path, plans: list[dict[str, Any]], seed: int, precision: str, tf32: bool = False
) -> dict[str, Any]:
    """``golden/<bucket>.npz`` per bucket (``in:<name>`` and ``out:<name>`` arrays) under ``work``; ``tf32``: the
    bundle's EP runs fp32 in TF32, judged with :data:`TF32_TOLERANCE`."""
    (work / "golden").mkdir(exist_ok=True)
    engine, name = _golden_engine(source)
    files: dict[str, str] = {}
    with engine:
        for plan in plans:
            feeds = golden_feeds(source, plan["shapes"], seed)
            outputs = engine.run(feeds)
            arrays = {f"in:{k}": v for k, v in feeds.items()}
            arrays.update({f"out:{k}": np.asarray(v) for k, v in outputs.items()})
            rel = f"golden/{plan['name']}.npz"
            np.savez(work / rel, **arrays)  # type: ignore[arg-type]
            files[plan["name"]] = rel
    return {"files": files, "engine": name, "tolerance": _tolerance(precision, tf32), "seed": seed}


def agrees(got: np.ndarray, want: np.ndarray, tolerance: dict[str, float]) -> tuple[bool, float]:
    """Whether an output matches its golden, and the figure judged (max abs difference, or cosine).

    Example:
        >>> agrees(np.array([1.0, 0.0]), np.array([0.0, 1.0]), {"min_cosine": 0.99})
        (False, 0.0)
    """
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got64.shape != want64.shape:
        return False, float("inf")
    if "min_cosine" in tolerance:
        a, b = got64.ravel(), want64.ravel()
        denom = float(np.linalg.norm(a) * np.linalg.norm(b))
        cos = float(a @ b / denom) if denom else float(np.array_equal(a, b))
        return cos >= tolerance["min_cosine"], cos
    diff = float(np.max(np.abs(got64 - want64))) if got64.size else 0.0
    scale = max(1.0, float(np.max(np.abs(want64)))) if want64.size else 1.0
    ok = bool(np.allclose(got64, want64, rtol=tolerance["rtol"], atol=tolerance["atol"] * scale))
    return ok, diff


def check_goldens(engine: Any, folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Run every bucket's golden inputs on ``engine`` and compare; the record for ``info.settings``.

    Raises:
        BundleError: an output that does not match its golden (naming bucket, output, figure, tolerance).
    """
    t0 = time.perf_counter()
    tolerance = data["golden"]["tolerance"]
    worst: dict[str, float] = {}
    for bucket in data["buckets"]:
        with np.load(folder / bucket["golden"], allow_pickle=False) as z:
            feeds = {k[3:]: z[k] for k in z.files if k.startswith("in:")}
            want = {k[4:]: z[k] for k in z.files if k.startswith("out:")}
        got = engine.run(feeds)
        for name, value in want.items():
            ok, figure = agrees(got[name], value, tolerance)
            if not ok:
                raise BundleError(
                    f"bundle '{folder}': bucket {bucket['name']} output {name!r} does not match its golden "
                    f"({'cosine' if 'min_cosine' in tolerance else 'max abs difference'} {figure:.6g}, tolerance "
                    f"{tolerance}); the compiled model computes something else here; rebuild it: {data.get('rebuild')}",
                    field=f"golden {bucket['name']}/{name}",
                    rebuild=data.get("rebuild"),
                )
            worst[name] = (
                max(worst.get(name, 0.0), figure) if "rtol" in tolerance else min(worst.get(name, 1.0), figure)
            )
    n = len(data["buckets"])
    return {
        "ran": True,
        "passed": True,
        "buckets": n,
        "figures": worst,
        "seconds": round(time.perf_counter() - t0, 4),
        "summary": f"passed ({n} bucket(s) against the {data['golden']['engine']} outputs)",
    }
