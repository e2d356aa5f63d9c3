"""Comparing one pair of tensors: tolerances per output, errors over finite positions, NaN/Inf accounting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..reference._metrics import DEFAULT_TOLERANCES, Tolerance, _cosine, _max_rel, _rms, as_float64, topk_agreement
from ._report import TensorReport

#: A tolerance for every output, or one per output name (names not listed get the default).
TolSpec = float | Mapping[str, float] | None


def _is_16bit(arr: np.ndarray) -> bool:
    return arr.dtype == np.float16 or arr.dtype.name == "bfloat16"


def _pick(spec: TolSpec, name: str, default: float, what: str) -> float:
    if spec is None:
        return default
    if isinstance(spec, Mapping):
        value = spec.get(name, default)
    else:
        value = spec
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or value < 0:
        raise OptionError(f"{what}: got {value!r} for {name!r}, expected a number >= 0")
    return float(value)


def _to_numpy(x: Any, what: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(x)
    except Exception as exc:  # device tensors (CuPy, CUDA torch) refuse implicit copies
        raise InputError(
            f"{what}: got {type(x).__name__} that NumPy cannot read ({exc}); copy it to the host"
        ) from None


def _kind(arr: np.ndarray) -> str:
    """``"f"`` for floats (bfloat16 and other ml_dtypes included), ``"i"`` for integers, else the dtype's kind."""
    kind = arr.dtype.kind
    return "f" if kind in "fV" else ("i" if kind in "iu" else kind)


def _compare_one(
    name: str,
    actual: Any,
    expected: Any,
    *,
    precision: str | None,
    atol: TolSpec,
    rtol: TolSpec,
    rms_tol: TolSpec,
    elementwise: bool,
    topk: int | None,
) -> TensorReport:
    """Compare one pair of tensors (the body of :func:`~amdinfer.verify.compare`)."""
    a_raw, b_raw, kind = _comparable_pair(name, actual, expected)
    a = as_float64(a_raw, f"actual {name!r}")
    b = as_float64(b_raw, f"expected {name!r}")
    prec, tol = _tolerance_for(name, a_raw, b_raw, kind, precision, atol=atol, rtol=rtol, rms_tol=rms_tol)
    na, nb = np.isnan(a), np.isnan(b)
    ia, ib = np.isinf(a), np.isinf(b)
    err = _finite_errors(a, b, ~(na | nb | ia | ib), tol)
    nan_mismatch = int(np.count_nonzero(na != nb))
    inf_mismatch = int(np.count_nonzero((ia | ib) & ~(na | nb) & (a != b)))

    reasons = []
    if err.rms > tol.rms:
        reasons.append(f"rms {err.rms:.3e} > rms_tol {tol.rms:.3e}")
    if elementwise and err.bad_elems:
        reasons.append(
            f"{err.bad_elems}/{a.size} elements outside atol {tol.atol:.1e} + rtol {tol.rtol:.1e}*|expected|"
        )
    if nan_mismatch:
        reasons.append(f"NaN at {nan_mismatch} position(s) where the other has none")
    if inf_mismatch:
        reasons.append(f"Inf differs at {inf_mismatch} position(s)")

    return TensorReport(
        name=name,
        shape=tuple(a.shape),
        actual_dtype=str(a_raw.dtype),
        expected_dtype=str(b_raw.dtype),
        size=int(a.size),
        max_abs=err.max_abs,
        max_rel=err.max_rel,
        rms=err.rms,
        cosine=err.cosine,
        mismatches=err.bad_elems + nan_mismatch + inf_mismatch,
        worst_index=err.worst_index,
        worst_actual=err.worst_actual,
        worst_expected=err.worst_expected,
        nan_actual=int(na.sum()),
        nan_expected=int(nb.sum()),
        nan_mismatch=nan_mismatch,
        inf_actual=int(ia.sum()),
        inf_expected=int(ib.sum()),
        inf_mismatch=inf_mismatch,
        rms_tol=tol.rms,
        atol=tol.atol,
        rtol=tol.rtol,
        precision=prec if kind == "f" else "exact",
        elementwise=elementwise,
        topk=topk,
        topk_agreement=None if topk is None else topk_agreement(a, b, k=topk),
        passed=not reasons,
        reasons=reasons,
    )


def _comparable_pair(name: str, actual: Any, expected: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """Both tensors as NumPy arrays and their common kind; shapes and kinds must agree."""
    a_raw = _to_numpy(actual, f"actual {name!r}")
    b_raw = _to_numpy(expected, f"expected {name!r}")
    if a_raw.shape != b_raw.shape:
        raise InputError(f"output {name!r}: actual has shape {a_raw.shape}, expected shape {b_raw.shape}")
    ka, kb = _kind(a_raw), _kind(b_raw)
    if ka != kb:
        raise InputError(
            f"output {name!r}: actual has dtype {a_raw.dtype}, expected {b_raw.dtype}; "
            "float, integer and bool tensors are not comparable with each other"
        )
    return a_raw, b_raw, ka


def _tolerance_for(
    name: str,
    a_raw: np.ndarray,
    b_raw: np.ndarray,
    kind: str,
    precision: str | None,
    *,
    atol: TolSpec,
    rtol: TolSpec,
    rms_tol: TolSpec,
) -> tuple[str, Tolerance]:
    """(precision, tolerance) for one output: the precision's defaults, exact for integers, overridden per name."""
    if precision is None:
        prec = "fp16" if (_is_16bit(a_raw) or _is_16bit(b_raw)) else "fp32"
    else:
        prec = precision
    default = DEFAULT_TOLERANCES[prec]
    if kind != "f":  # integer and bool tensors agree exactly unless told otherwise
        default = Tolerance(rms=0.0, atol=0.0, rtol=0.0)
    tol = Tolerance(
        rms=_pick(rms_tol, name, default.rms, "rms_tol"),
        atol=_pick(atol, name, default.atol, "atol"),
        rtol=_pick(rtol, name, default.rtol, "rtol"),
    )
    return prec, tol


@dataclass(frozen=True)
class _Errors:
    """Error statistics over the positions where both tensors are finite."""

    max_abs: float
    max_rel: float
    rms: float
    cosine: float | None
    bad_elems: int
    worst_index: tuple[int, ...] | None
    worst_actual: float | None
    worst_expected: float | None


def _finite_errors(a: np.ndarray, b: np.ndarray, finite: np.ndarray, tol: Tolerance) -> _Errors:
    all_finite = bool(finite.all())
    af, bf = (a.ravel(), b.ravel()) if all_finite else (a[finite], b[finite])
    if not af.size:
        return _Errors(0.0, 0.0, 0.0, None if a.size == 0 else 1.0, 0, None, None, None)
    diff = af - bf
    absdiff = np.abs(diff)
    worst = int(np.argmax(absdiff))
    flat_pos = worst if all_finite else int(np.flatnonzero(finite.ravel())[worst])
    return _Errors(
        max_abs=float(absdiff[worst]),
        max_rel=_max_rel(absdiff, bf),
        rms=_rms(af, bf, diff),
        cosine=_cosine(af, bf),
        bad_elems=int(np.count_nonzero(absdiff > tol.atol + tol.rtol * np.abs(bf))),
        worst_index=tuple(int(i) for i in np.unravel_index(flat_pos, a.shape)) if a.ndim else (),
        worst_actual=float(af[worst]),
        worst_expected=float(bf[worst]),
    )
