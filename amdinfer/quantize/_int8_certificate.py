"""The int8 accuracy check, run once per quantized model: its figures go into the model's precision certificate,
and a model that already carries one for itself (a cache hit) reuses the stored verdict instead of running the
check again.

:class:`~amdinfer.quantize.Int8Quantizer` calls :func:`check_once` after quantizing. A model quantized anew
has no certificate: the check runs (:func:`~amdinfer.quantize._agreement.measure`) and its certificate
(:func:`~amdinfer.quantize._certify.certify_check`) is attached to the model, which the quantizer's cache then
stores with it (the entry's manifest holds it too). A model read back from the cache carries that
certificate: when it is bound to the model (its hash), was made by the check at the same ``min_cosine`` and on
the same samples (their SHA-256), its figures are taken as they are.

Example:
    >>> from amdinfer.testing.models import tiny_cnn, random_inputs
    >>> from amdinfer.quantize import Int8Quantizer
    >>> model = tiny_cnn()
    >>> q = Int8Quantizer(calibration=[random_inputs(model, batch=2, seed=s) for s in range(2)], progress=False,
    ...                   cache=False, min_cosine=None)
    >>> qmodel = q.quantize(model)
    >>> feeds = q.calibration_feeds(model)
    >>> cert, check, reused = check_once(qmodel, model, feeds, 0.9, float_sha256="0" * 64, quantizer=q)
    >>> reused, check_once(qmodel, model, feeds, 0.9, float_sha256="0" * 64, quantizer=q)[2]
    (False, True)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from .._certificate._core import PrecisionCertificate
from .._certificate._io import inspect_certificate
from ..errors import CertificateError
from ._agreement import AgreementCheck, measure, spread
from ._certify import CHECK, agreement_from_certificate, certify_check
from ._data import data_hash

__all__ = ["check_once", "stored_check"]

log = logging.getLogger("amdinfer.quantize")


def stored_check(
    quantized: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], threshold: float
) -> tuple[PrecisionCertificate, AgreementCheck] | None:
    """The certificate ``quantized`` carries for itself and the check it recorded, when it was made by the int8
    check at ``threshold`` on ``feeds``' samples; else ``None`` (the check must run)."""
    cert, problem = inspect_certificate(quantized)
    if problem is not None:  # never trusted: the check runs and its certificate replaces this one
        log.warning("model %s: %s; the int8 accuracy check runs again", quantized.graph.name or "<ModelProto>", problem)
    if cert is None or cert.judged_by != CHECK or cert.check is None:
        return None
    if cert.check.get("threshold") != threshold or cert.data.sha256 != data_hash(spread(feeds)):
        return None
    try:
        return cert, agreement_from_certificate(cert)
    except CertificateError as exc:
        log.warning("int8 accuracy check: the stored figures cannot be used (%s); running it again", exc)
        return None


def check_once(
    quantized: onnx.ModelProto,
    reference: onnx.ModelProto,
    feeds: Sequence[Mapping[str, np.ndarray]],
    threshold: float,
    *,
    float_sha256: str,
    quantizer: Any,
) -> tuple[PrecisionCertificate, AgreementCheck, bool]:
    """``(certificate, check, reused)``: the stored verdict of ``quantized`` (:func:`stored_check`), else the
    check run now on ``reference`` and ``feeds``, its certificate attached to ``quantized`` (in place)."""
    stored = stored_check(quantized, feeds, threshold)
    if stored is not None:
        return stored[0], stored[1], True
    check = measure(quantized, reference, feeds, threshold)
    cert = certify_check(
        check, float_model=float_sha256, quantized_model=quantized, feeds=spread(feeds), quantizer=quantizer
    )
    cert.attach(quantized)
    return cert, check, False
