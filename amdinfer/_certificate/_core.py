"""The precision certificate: what a quantized model was judged on, and by what, in one JSON record.

:class:`PrecisionCertificate` is public as :class:`amdinfer.quantize.PrecisionCertificate`; it lives here,
below the engines and the cache, because they read it (``engine.info``, ``amdinfer cache list``) and must
not import :mod:`amdinfer.quantize`. Its builders (from a :class:`~amdinfer.quantize.QuantizationReport`,
an int8 accuracy check) are in :mod:`amdinfer.quantize._certify`; how it travels with a model (ONNX
``metadata_props``, the hash that binds it to the model) is in :mod:`amdinfer._certificate._io`.

A certificate read back is checked field by field (:meth:`PrecisionCertificate.from_dict`): a damaged or
foreign one is a :class:`~amdinfer.errors.CertificateError`, never half-trusted.

Example:
    >>> cert = PrecisionCertificate.from_json(example_certificate().to_json())
    >>> cert == example_certificate(), cert.verdict
    (True, 'PASS')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CertificateError
from ._hash import CERTIFICATE_KEY, certificate_entries, model_sha256
from ._parts import (
    SHA_RE,
    DataRecord,
    LayerPrecision,
    SpeedRecord,
    Threshold,
    _finite,
    _need,
    _number_or_none,
)

__all__ = [
    "CERTIFICATE_FORMAT",
    "CERTIFICATE_VERSION",
    "DataRecord",
    "LayerPrecision",
    "PrecisionCertificate",
    "SpeedRecord",
    "Threshold",
    "example_certificate",
]

#: The ``format`` field every certificate carries; anything else is foreign.
CERTIFICATE_FORMAT = "amdinfer.precision_certificate"
#: The layout version this amdinfer reads and writes.
CERTIFICATE_VERSION = 1
#: The verdicts a certificate can state.
VERDICTS = ("PASS", "FAIL", "NOT JUDGED")
#: A certificate larger than this (JSON bytes) is refused on read: no record of a model needs more.
MAX_CERTIFICATE_BYTES = 4 << 20


@dataclass(frozen=True)
class PrecisionCertificate:
    """What a quantized model was judged on and what it measured: travels with the model, checked on read.

    Built from a :class:`~amdinfer.quantize.QuantizationReport` by :func:`amdinfer.quantize.certify` (the
    CLI ``amdinfer quantize`` does it), or by :class:`~amdinfer.quantize.Int8Quantizer` from its accuracy
    check. Stored in the quantized model's ONNX ``metadata_props`` under
    :data:`~amdinfer.quantize.CERTIFICATE_KEY` (:meth:`attach`) and in the cache entry's manifest; shown by
    ``engine.info``, ``amdinfer inspect`` and ``amdinfer cache list``. The model hash binds it: a
    certificate whose ``quantized_sha256`` is not the model's own (tampered, or the model changed) is not
    trusted.

    Attributes:
        precision: the quantized model's precision (``"int8"``, ``"fp16"``).
        task: the task metric of the verdict (``"detect"``, ``"classify"``, ...).
        verdict: ``"PASS"``, ``"FAIL"`` or ``"NOT JUDGED"``.
        judged_by: what produced the verdict: ``"evaluate"`` (held-out data, the task metric) or
            ``"int8 accuracy check"`` (the quantizer's guard on calibration samples).
        metrics: every metric measured (``None`` where it does not apply).
        thresholds: each bound of the verdict with the value measured against it.
        answers: ``(float model's answers, quantized model's answers)``, in ``unit``.
        unit: what an answer is (``"boxes"``, ``"items"``, ``"lines"``).
        reasons: why it failed or was not judged.
        data: the data the verdict rests on (size and hash).
        layers: per layer: the precision chosen and, where known, its sensitivity.
        float_sha256: SHA-256 of the float model (as amdinfer read it, ``ModelSource.sha256``).
        quantized_sha256: SHA-256 of the quantized model without its certificate
            (:func:`~amdinfer.quantize.model_sha256`).
        versions: amdinfer, onnxruntime, onnx and numpy versions that judged it.
        speed: latency against fp32, ``None`` when not measured.
        task_reason: why that task (named, metadata, output layout).
        quantizer: the quantizer's settings.
        check: the int8 accuracy check's figures (``AgreementCheck.to_dict()``), when it produced the verdict.
        created: when it was made (ISO 8601, UTC).

    Example:
        >>> cert = example_certificate()
        >>> print(cert.summary().replace("; ", "\\n"))
        int8 detect PASS (evaluate): map50 0.9800 (>= 0.95), f1 0.9700 (>= 0.95)
        97 boxes against the float model's 100
        12 items (data 6d3f8e1a9c2b)
        2 int8, 1 fp32 layers
        speed not measured
    """

    precision: str
    task: str
    verdict: str
    judged_by: str
    metrics: dict[str, float | None]
    thresholds: tuple[Threshold, ...]
    answers: tuple[int, int]
    unit: str
    reasons: tuple[str, ...]
    data: DataRecord
    layers: tuple[LayerPrecision, ...]
    float_sha256: str
    quantized_sha256: str
    versions: dict[str, str]
    speed: SpeedRecord | None = None
    task_reason: str = ""
    quantizer: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] | None = None
    created: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise CertificateError(f"precision certificate: verdict {self.verdict!r}, expected one of {list(VERDICTS)}")
        for name in ("float_sha256", "quantized_sha256"):
            v = getattr(self, name)
            if not isinstance(v, str) or not SHA_RE.match(v):
                raise CertificateError(f"precision certificate: {name} is {v!r}, expected 64 lowercase hex digits")

    # ------------------------------------------------------------------ reading
    @property
    def passed(self) -> bool:
        """``verdict == "PASS"``."""
        return self.verdict == "PASS"

    def layer_counts(self) -> dict[str, int]:
        """Layers per precision, e.g. ``{"int8": 60, "fp32": 4}``."""
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.precision] = out.get(layer.precision, 0) + 1
        return out

    def summary(self) -> str:
        """One line: precision, task, verdict, the thresholds, answers, data, layers, speed."""
        shown = ", ".join(str(t) for t in self.thresholds) or "no bound"
        f, q = self.answers
        order = {"int8": 0, "fp16": 1, "fp32": 2}
        counts = sorted(self.layer_counts().items(), key=lambda kv: (order.get(kv[0], 3), kv[0]))
        layers = (", ".join(f"{n} {p}" for p, n in counts) + " layers") if self.layers else "layers not recorded"
        speed = (
            "speed not measured" if self.speed is None else f"{self.speed.speedup:.2f}x fp32 on {self.speed.provider}"
        )
        why = f" [{self.reasons[0]}]" if self.reasons and not self.passed else ""
        return (
            f"{self.precision} {self.task} {self.verdict} ({self.judged_by}): {shown}; {q} {self.unit} against the "
            f"float model's {f}; {self.data.items} items (data {self.data.sha256[:12]}); {layers}; {speed}{why}"
        )

    def __str__(self) -> str:
        return self.summary()

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict, ``format`` and ``version`` first; ``speed`` is ``"not measured"`` when absent."""
        return {
            "format": CERTIFICATE_FORMAT,
            "version": CERTIFICATE_VERSION,
            "precision": self.precision,
            "task": self.task,
            "task_reason": self.task_reason,
            "verdict": self.verdict,
            "judged_by": self.judged_by,
            "metrics": {k: _finite(v) for k, v in self.metrics.items()},
            "thresholds": [t.to_dict() for t in self.thresholds],
            "answers": {"float": self.answers[0], "quantized": self.answers[1], "unit": self.unit},
            "reasons": list(self.reasons),
            "data": self.data.to_dict(),
            "layers": [layer.to_dict() for layer in self.layers],
            "float_sha256": self.float_sha256,
            "quantized_sha256": self.quantized_sha256,
            "versions": dict(self.versions),
            "speed": "not measured" if self.speed is None else self.speed.to_dict(),
            "quantizer": _json_safe(self.quantizer),
            "check": None if self.check is None else _json_safe(self.check),
            "created": self.created,
        }

    def to_json(self, indent: int | None = None) -> str:
        """Strict JSON (NaN and inf as ``null``)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: Any) -> PrecisionCertificate:
        """Read a certificate back, every field checked.

        Raises:
            CertificateError: not an object, another ``format`` or ``version``, a missing field or one of the
                wrong type; the message names the field.
        """
        if not isinstance(d, Mapping):
            raise CertificateError(f"precision certificate: got a {type(d).__name__}, expected a JSON object")
        fmt = d.get("format")
        if fmt != CERTIFICATE_FORMAT:
            raise CertificateError(f"precision certificate: format {fmt!r}, expected {CERTIFICATE_FORMAT!r}")
        if d.get("version") != CERTIFICATE_VERSION or isinstance(d.get("version"), bool):
            raise CertificateError(
                f"precision certificate: version {d.get('version')!r}, this amdinfer reads {CERTIFICATE_VERSION}"
            )
        try:
            return cls(**_fields_of(d))
        except (TypeError, ValueError) as exc:  # a mistyped nested value that the checks above let through
            if isinstance(exc, CertificateError):
                raise
            raise CertificateError(f"precision certificate: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> PrecisionCertificate:
        """Parse and check (:meth:`from_dict`).

        Raises:
            CertificateError: not JSON, too large, or not a sound certificate.
        """
        if len(text) > MAX_CERTIFICATE_BYTES:
            raise CertificateError(f"precision certificate: {len(text)} bytes, more than {MAX_CERTIFICATE_BYTES}")
        try:
            d = json.loads(text)
        except (ValueError, RecursionError):
            raise CertificateError("precision certificate: not valid JSON (truncated or damaged)") from None
        return cls.from_dict(d)

    def save(self, path: str | Path) -> Path:
        """Write the JSON to ``path`` (atomically; a symbolic link there is replaced, not followed)."""
        from .._support._files import write_atomic

        return write_atomic(path, (self.to_json(indent=1) + "\n").encode(), argument="path")

    # ------------------------------------------------------------------ the model
    def attach(self, model: Any) -> Any:
        """Store the certificate in ``model``'s ``metadata_props`` (an ``onnx.ModelProto``, changed in place
        and returned); a certificate already there is replaced.

        Raises:
            CertificateError: ``model`` is not the model this certificate is for (its hash differs from
                ``quantized_sha256``).
        """
        own = model_sha256(model)
        if own != self.quantized_sha256:
            raise CertificateError(
                f"precision certificate for model {self.quantized_sha256[:12]}…: this model is {own[:12]}…; "
                "a certificate is attached only to the model it was made for"
            )
        found = certificate_entries(model)
        for i in reversed(found[1:]):
            del model.metadata_props[i]
        if found:
            model.metadata_props[found[0]].value = self.to_json()
        else:
            model.metadata_props.add(key=CERTIFICATE_KEY, value=self.to_json())
        return model

    def matches(self, model: Any) -> bool:
        """Whether ``model`` (an ``onnx.ModelProto``) is the model this certificate is for."""
        return model_sha256(model) == self.quantized_sha256

    def plot(self, path: str | Path | None = None) -> Any:
        """The certificate as a figure: each threshold with the measured value, and the precision (and
        sensitivity, where known) of each layer along the graph (needs matplotlib).

        Args:
            path: save it there (PNG, SVG, PDF by suffix); ``None`` only returns it.

        Returns:
            The ``matplotlib.figure.Figure``.

        Raises:
            ImportError: matplotlib is not installed (``pip install matplotlib``).
        """
        from ._plot import plot_certificate

        return plot_certificate(self, path)


def _fields_of(d: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor's arguments from a certificate dict, each checked."""
    w = "certificate"
    answers = _need(d, "answers", dict, w)
    speed = d.get("speed")
    check = d.get("check")
    if check is not None and not isinstance(check, dict):
        raise CertificateError(f"precision certificate: check is a {type(check).__name__}, expected an object")
    metrics = _need(d, "metrics", dict, w)
    for k in metrics:
        _number_or_none(metrics, k, "metrics")
    versions = _need(d, "versions", dict, w)
    return {
        "precision": _need(d, "precision", str, w),
        "task": _need(d, "task", str, w),
        "verdict": _need(d, "verdict", str, w),
        "judged_by": _need(d, "judged_by", str, w),
        "metrics": {str(k): _finite(v) for k, v in metrics.items()},
        "thresholds": tuple(Threshold.from_dict(t) for t in _need(d, "thresholds", list, w)),
        "answers": (_need(answers, "float", int, "answers"), _need(answers, "quantized", int, "answers")),
        "unit": _need(answers, "unit", str, "answers"),
        "reasons": tuple(str(r) for r in _need(d, "reasons", list, w)),
        "data": DataRecord.from_dict(_need(d, "data", dict, w)),
        "layers": tuple(LayerPrecision.from_dict(x) for x in _need(d, "layers", list, w)),
        "float_sha256": _need(d, "float_sha256", str, w),
        "quantized_sha256": _need(d, "quantized_sha256", str, w),
        "versions": {str(k): str(v) for k, v in versions.items()},
        "speed": None if speed in (None, "not measured") else SpeedRecord.from_dict(_need(d, "speed", dict, w)),
        "task_reason": str(d.get("task_reason", "")),
        "quantizer": dict(d.get("quantizer") or {}),
        "check": check,
        "created": str(d.get("created", "")),
    }


def _json_safe(value: Any) -> Any:
    """``value`` with NaN/inf as ``None``, tuples as lists and unknown objects as strings."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def example_certificate() -> PrecisionCertificate:
    """A small certificate for examples and tests (a detector that passed).

    Example:
        >>> example_certificate().task
        'detect'
    """
    return PrecisionCertificate(
        precision="int8",
        task="detect",
        verdict="PASS",
        judged_by="evaluate",
        metrics={"map50": 0.98, "f1": 0.97, "precision": 0.98, "recall": 0.96},
        thresholds=(Threshold("map50", ">=", 0.95, 0.98), Threshold("f1", ">=", 0.95, 0.97)),
        answers=(100, 97),
        unit="boxes",
        reasons=(),
        data=DataRecord(12, 12, "6d3f8e1a9c2b" + "0" * 52, "held-out"),
        layers=(
            LayerPrecision("conv1", "Conv", "int8", "quantized", 0.001),
            LayerPrecision("conv2", "Conv", "int8", "quantized", 0.004),
            LayerPrecision("head", "Conv", "fp32", "detector head"),
        ),
        float_sha256="a" * 64,
        quantized_sha256="b" * 64,
        versions={"amdinfer": "0.1.0"},
    )
