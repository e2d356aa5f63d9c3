"""Error metrics between an actual and an expected tensor, and the default tolerances per precision.

All metrics run in float64 over the positions where both tensors are finite; NaN and Inf positions are
accounted for separately by :func:`nonfinite_counts` (a NaN must sit where the expected NaN sits, an
Inf must equal the expected Inf).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import InputError, OptionError

__all__ = [
    "DEFAULT_TOLERANCES",
    "Tolerance",
    "cosine_similarity",
    "default_tolerance",
    "max_abs_error",
    "max_rel_error",
    "nonfinite_counts",
    "rms_error",
    "topk_agreement",
    "within_tolerance",
]

# MIGraphX's rms_range keeps the denominator away from zero with std::numeric_limits<double>::min().
_DBL_MIN = float(np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class Tolerance:
    """What "agrees" means for one tensor: an RMS bound and an elementwise ``atol``/``rtol`` bound.

    Attributes:
        rms: bound on :func:`rms_error` (MIGraphX's ``rms_tol``).
        atol: absolute part of ``|a - b| <= atol + rtol * |b|``.
        rtol: relative part of the same.

    Example:
        >>> Tolerance(rms=1e-3, atol=1e-3, rtol=1e-3).to_dict()
        {'rms': 0.001, 'atol': 0.001, 'rtol': 0.001}
    """

    rms: float
    atol: float
    rtol: float

    def to_dict(self) -> dict[str, float]:
        """A plain dict."""
        return asdict(self)


#: Default tolerances per precision of the engine under test.
#:
#: * ``fp32``: ``migraphx-driver verify``'s defaults (``rms_tol``, ``atol``, ``rtol`` all 1e-3).
#: * ``fp16``/``bf16``: what the driver switches to when the program holds 16-bit instructions or is
#:   quantized to fp16/bf16 (``rms_tol`` 8e-2, ``atol``/``rtol`` 4e-2; ``src/driver/verify.cpp``).
#: * ``fp64``: amdinfer's choice, 1e-10 each: far below float32's epsilon (1.2e-7), so one stray float32
#:   rounding fails, while summation-order differences between float64 kernels (~1e-15) pass.
#: * ``int8``: amdinfer's choice, 1e-1 each: a loose default because int8 error depends on the
#:   calibration; set explicit tolerances for a real acceptance check.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "fp64": Tolerance(rms=1e-10, atol=1e-10, rtol=1e-10),
    "fp32": Tolerance(rms=1e-3, atol=1e-3, rtol=1e-3),
    "fp16": Tolerance(rms=8e-2, atol=4e-2, rtol=4e-2),
    "bf16": Tolerance(rms=8e-2, atol=4e-2, rtol=4e-2),
    "int8": Tolerance(rms=1e-1, atol=1e-1, rtol=1e-1),
}


def default_tolerance(precision: str) -> Tolerance:
    """The default :class:`Tolerance` for a precision (see :data:`DEFAULT_TOLERANCES`).

    Args:
        precision: ``"fp64"``, ``"fp32"``, ``"fp16"``, ``"bf16"`` or ``"int8"`` (aliases such as
            ``"float16"`` are accepted).

    Raises:
        OptionError: an unknown precision.

    Example:
        >>> default_tolerance("fp16").rms
        0.08
    """
    from ..types import normalize_precision

    return DEFAULT_TOLERANCES[normalize_precision(precision)]


def as_float64(x: Any, what: str = "tensor") -> np.ndarray:
    """``x`` as a float64 ndarray (bool and integers included); complex, string and object are refused."""
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    kind = arr.dtype.kind
    if kind in "fiub":
        return arr.astype(np.float64, copy=False)
    if kind == "V" and arr.dtype.names is None:  # ml_dtypes' bfloat16 / float8 types
        try:
            return arr.astype(np.float32).astype(np.float64)
        except (TypeError, ValueError):
            pass
    raise InputError(f"{what}: got dtype {arr.dtype}, expected a real numeric tensor (float, int or bool)")


def _pair(actual: Any, expected: Any) -> tuple[np.ndarray, np.ndarray]:
    a = as_float64(actual, "actual")
    b = as_float64(expected, "expected")
    if a.shape != b.shape:
        raise InputError(f"actual has shape {a.shape}, expected shape {b.shape} (no broadcasting)")
    return a, b


def _finite(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values at positions where both are finite (a view-free copy only when needed)."""
    mask = np.isfinite(a) & np.isfinite(b)
    if mask.all():
        return a.ravel(), b.ravel()
    return a[mask], b[mask]


def max_abs_error(actual: Any, expected: Any) -> float:
    """``max |a - b|`` over positions where both are finite (0.0 when there are none).

    Example:
        >>> max_abs_error([1.0, 2.0, np.nan], [1.5, 2.0, np.nan])
        0.5
    """
    a, b = _finite(*_pair(actual, expected))
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def max_rel_error(actual: Any, expected: Any) -> float:
    """``max |a - b| / |b|`` over positions where both are finite and ``b != 0`` (0.0 when there are none).

    Positions where the expected value is zero have no relative error; :func:`max_abs_error` covers them.

    Example:
        >>> max_rel_error([1.1, 0.5], [1.0, 0.0])
        0.10000000000000009
    """
    a, b = _finite(*_pair(actual, expected))
    return _max_rel(np.abs(a - b), b)


def _max_rel(absdiff: np.ndarray, b: np.ndarray) -> float:
    """:func:`max_rel_error` from ``|a - b|`` and ``b`` (finite values)."""
    nz = b != 0
    if not nz.any():
        return 0.0
    return float(np.max(absdiff[nz] / np.abs(b[nz])))


def rms_error(actual: Any, expected: Any) -> float:
    """MIGraphX's RMS metric: ``sqrt(sum((a - b)^2)) / (sqrt(n) * max(max|a|, max|b|))``.

    As ``migraphx::verify::rms_range`` (``src/include/migraphx/verify.hpp``): the root mean square of the
    difference, divided by the largest magnitude in either tensor, so it is scale-free. When both tensors
    are all zeros the denominator is kept from zero by the smallest normal double (as MIGraphX does), so
    the result is 0.0. Computed over the positions where both are finite; an empty tensor gives 0.0.

    Example:
        >>> rms_error([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 2.0])  # sqrt(4) / (sqrt(4) * 4)
        0.25
    """
    a, b = _finite(*_pair(actual, expected))
    if a.size == 0:
        return 0.0
    return _rms(a, b, a - b)


def _rms(a: np.ndarray, b: np.ndarray, diff: np.ndarray) -> float:
    """:func:`rms_error` of finite, flat, non-empty ``a`` and ``b``, given ``diff = a - b``."""
    mag = max(float(np.max(np.abs(a))), float(np.max(np.abs(b))), _DBL_MIN)
    return float(math.sqrt(float(np.dot(diff, diff))) / (math.sqrt(a.size) * mag))


def cosine_similarity(actual: Any, expected: Any) -> float:
    """``a . b / (|a| |b|)`` over positions where both are finite, flattened.

    Two all-zero tensors are identical (1.0); one all-zero tensor against a non-zero one gives 0.0.

    Example:
        >>> cosine_similarity([1.0, 0.0], [0.0, 2.0])
        0.0
    """
    return _cosine(*_finite(*_pair(actual, expected)))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """:func:`cosine_similarity` of finite, flat ``a`` and ``b``."""
    na = float(np.linalg.norm(a))
    nb = float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def within_tolerance(actual: Any, expected: Any, atol: float, rtol: float) -> np.ndarray:
    """Elementwise ``|a - b| <= atol + rtol * |b|`` (numpy's ``isclose`` rule, MIGraphX's ``allclose``).

    NaN agrees with NaN at the same position; an Inf agrees only with an equal Inf.

    Returns:
        A bool array of the input shape.

    Example:
        >>> within_tolerance([1.0, 2.0, np.nan], [1.0005, 2.1, np.nan], atol=1e-3, rtol=0.0).tolist()
        [True, False, True]
    """
    a, b = _pair(actual, expected)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(a - b) <= atol + rtol * np.abs(b)
    nonfinite = ~(np.isfinite(a) & np.isfinite(b))
    if nonfinite.any():
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        ok = np.where(nonfinite, same, ok)
    return ok


def nonfinite_counts(actual: Any, expected: Any) -> dict[str, int]:
    """NaN and Inf accounting between two tensors.

    Returns:
        ``nan_actual``, ``nan_expected``, ``inf_actual``, ``inf_expected`` (counts in each tensor),
        ``nan_mismatch`` (positions where exactly one is NaN) and ``inf_mismatch`` (positions where
        either is ±Inf, neither is NaN, and they differ).

    Example:
        >>> nonfinite_counts([np.nan, np.inf, 1.0], [np.nan, 1.0, np.nan])["nan_mismatch"]
        1
    """
    a, b = _pair(actual, expected)
    na, nb = np.isnan(a), np.isnan(b)
    ia, ib = np.isinf(a), np.isinf(b)
    return {
        "nan_actual": int(na.sum()),
        "nan_expected": int(nb.sum()),
        "nan_mismatch": int((na != nb).sum()),
        "inf_actual": int(ia.sum()),
        "inf_expected": int(ib.sum()),
        "inf_mismatch": int(((ia | ib) & ~(na | nb) & (a != b)).sum()),
    }


def topk_agreement(actual: Any, expected: Any, k: int = 5, axis: int = -1) -> float:
    """Mean overlap of the top-``k`` index sets along ``axis``: ``|topk(a) ∩ topk(b)| / k`` averaged over rows.

    With ``k=1`` it is the top-1 agreement (the fraction of rows whose arg-max agrees). Ties are broken
    towards the lower index; NaN ranks lowest.

    Args:
        actual: scores, e.g. logits of shape ``(N, classes)``.
        expected: scores of the same shape.
        k: how many top entries to compare; at most the size of ``axis``.
        axis: the class axis.

    Raises:
        OptionError: ``k`` is not in ``[1, size of axis]``.

    Example:
        >>> topk_agreement([[0.1, 0.7, 0.2]], [[0.2, 0.6, 0.1]], k=2)
        0.5
    """
    a, b = _pair(actual, expected)
    if a.ndim == 0:
        raise InputError("topk_agreement: got a scalar, expected a tensor with a class axis")
    size = a.shape[axis]
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= size:
        raise OptionError(f"k: got {k!r}, expected an int in [1, {size}] (the size of axis {axis})")
    a = np.moveaxis(a, axis, -1).reshape(-1, size)
    b = np.moveaxis(b, axis, -1).reshape(-1, size)
    if a.shape[0] == 0:
        return 1.0
    # Stable sort on the negated scores: ties go to the lower index; NaN (sorted last) ranks lowest.
    ta = np.argsort(-a, axis=-1, kind="stable")[:, :k]
    tb = np.argsort(-b, axis=-1, kind="stable")[:, :k]
    hits = (ta[:, :, None] == tb[:, None, :]).any(axis=-1).sum(axis=-1)
    return float(np.mean(hits / k))
