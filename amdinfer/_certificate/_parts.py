"""The parts of a precision certificate: :class:`Threshold`, :class:`LayerPrecision`, :class:`DataRecord`,
:class:`SpeedRecord`, and the field checks every part's ``from_dict`` uses (a mistyped field is a
:class:`~amdinfer.errors.CertificateError` naming it).

Example:
    >>> Threshold.from_dict(Threshold("f1", ">=", 0.95, 0.9).to_dict()).holds
    False
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import CertificateError

__all__ = ["DataRecord", "LayerPrecision", "SpeedRecord", "Threshold"]

SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def _finite(value: Any) -> float | None:
    """A JSON-safe float: NaN and inf become ``None``."""
    if value is None:
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _need(d: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], what: str) -> Any:
    """``d[key]``, checked to be of ``kinds`` (bool is no number), else a :class:`CertificateError`."""
    if not isinstance(d, Mapping):
        raise CertificateError(f"precision certificate: {what} is a {type(d).__name__}, expected an object")
    if key not in d:
        raise CertificateError(f"precision certificate: {what} lacks {key!r}")
    v = d[key]
    numeric = kinds in (int, float, (int, float))
    if not isinstance(v, kinds) or (numeric and isinstance(v, bool)):
        raise CertificateError(
            f"precision certificate: {what}.{key} is {v!r} ({type(v).__name__}), expected {_kind_name(kinds)}"
        )
    return v


def _kind_name(kinds: type | tuple[type, ...]) -> str:
    ks = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(
        {"str": "a string", "int": "an int", "float": "a number", "dict": "an object"}.get(k.__name__, k.__name__)
        for k in ks
    )


def _number_or_none(d: Mapping[str, Any], key: str, what: str) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise CertificateError(f"precision certificate: {what}.{key} is {v!r}, expected a number or null")
    return float(v)


@dataclass(frozen=True)
class Threshold:
    """One bound of the verdict and the value measured against it: ``f1 >= 0.95``, measured 0.97.

    Example:
        >>> Threshold("f1", ">=", 0.95, 0.97).holds
        True
    """

    metric: str
    op: str
    bound: float
    value: float | None

    @property
    def holds(self) -> bool:
        """Whether the measured value meets the bound (``None`` never does)."""
        if self.value is None:
            return False
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound

    def __str__(self) -> str:
        shown = "n/a" if self.value is None else f"{self.value:.4f}"
        return f"{self.metric} {shown} ({self.op} {self.bound:g})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (``holds`` included, recomputed on read)."""
        return {
            "metric": self.metric,
            "op": self.op,
            "bound": self.bound,
            "value": _finite(self.value),
            "holds": self.holds,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Threshold:
        """Read one back (see :meth:`PrecisionCertificate.from_dict`)."""
        op = _need(d, "op", str, "threshold")
        if op not in (">=", "<="):
            raise CertificateError(f"precision certificate: threshold op is {op!r}, expected '>=' or '<='")
        bound = float(_need(d, "bound", (int, float), "threshold"))
        return cls(_need(d, "metric", str, "threshold"), op, bound, _number_or_none(d, "value", "threshold"))


@dataclass(frozen=True)
class LayerPrecision:
    """The precision one layer runs at in the quantized model, why, and how sensitive it is where known.

    Attributes:
        node: the node's name in the quantized model.
        op_type: its operator.
        precision: ``"int8"``, ``"fp16"`` or ``"fp32"``.
        reason: why it has that precision (``"quantized"``, ``"detector head"``, ``"excluded"``, ``"kept by the
            mixed-precision search"``...).
        sensitivity: the metric error of the model with this layer alone quantized
            (:class:`~amdinfer.quantize.AutoMixedPrecision`), ``None`` where not measured.

    Example:
        >>> LayerPrecision("conv1", "Conv", "int8", "quantized").to_dict()["precision"]
        'int8'
    """

    node: str
    op_type: str
    precision: str
    reason: str = ""
    sensitivity: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "node": self.node,
            "op_type": self.op_type,
            "precision": self.precision,
            "reason": self.reason,
            "sensitivity": _finite(self.sensitivity),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LayerPrecision:
        """Read one back (see :meth:`PrecisionCertificate.from_dict`)."""
        w = "layer"
        return cls(
            _need(d, "node", str, w),
            _need(d, "op_type", str, w),
            _need(d, "precision", str, w),
            str(d.get("reason", "")),
            _number_or_none(d, "sensitivity", w),
        )


@dataclass(frozen=True)
class DataRecord:
    """The data the verdict rests on: how many items, their SHA-256, where they came from.

    Attributes:
        items: items judged (images, rows, lines).
        samples: feed dicts (batches) run.
        sha256: SHA-256 over every array's name, dtype, shape and bytes
            (:func:`amdinfer.quantize._data.data_hash`).
        source: what the data was (``"--eval pages/"``, ``"calibration samples (not held out)"``).

    Example:
        >>> DataRecord(8, 2, "0" * 64, "held-out").held_out
        True
    """

    items: int
    samples: int
    sha256: str
    source: str = ""

    @property
    def held_out(self) -> bool:
        """Whether the data was kept out of calibration (``False`` for the int8 check's calibration samples)."""
        return "calibration samples" not in self.source

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"items": self.items, "samples": self.samples, "sha256": self.sha256, "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DataRecord:
        """Read one back (see :meth:`PrecisionCertificate.from_dict`)."""
        sha = _need(d, "sha256", str, "data")
        if not SHA_RE.match(sha):
            raise CertificateError(f"precision certificate: data.sha256 is {sha!r}, expected 64 lowercase hex digits")
        return cls(_need(d, "items", int, "data"), _need(d, "samples", int, "data"), sha, str(d.get("source", "")))


@dataclass(frozen=True)
class SpeedRecord:
    """Latency of the quantized model against the float one, measured on one provider.

    Example:
        >>> SpeedRecord(10.0, 5.0, "CPUExecutionProvider").speedup
        2.0
    """

    fp32_ms: float
    quantized_ms: float
    provider: str
    batch: int = 1

    @property
    def speedup(self) -> float:
        """``fp32_ms / quantized_ms``."""
        return self.fp32_ms / self.quantized_ms if self.quantized_ms > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "fp32_ms": self.fp32_ms,
            "quantized_ms": self.quantized_ms,
            "provider": self.provider,
            "batch": self.batch,
            "speedup": _finite(self.speedup),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SpeedRecord:
        """Read one back (see :meth:`PrecisionCertificate.from_dict`)."""
        w = "speed"
        return cls(
            float(_need(d, "fp32_ms", (int, float), w)),
            float(_need(d, "quantized_ms", (int, float), w)),
            _need(d, "provider", str, w),
            int(d.get("batch", 1)),
        )
