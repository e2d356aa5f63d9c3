"""How a precision certificate travels with its model: the ONNX metadata key, the hash that binds them, reading.

The certificate is JSON under one ``metadata_props`` key (:data:`CERTIFICATE_KEY`). It names the quantized
model by :func:`model_sha256`, the SHA-256 of the model serialized *without* that key, so attaching it does
not change the hash it states. On read (:func:`read_certificate`) a certificate is trusted only when it parses,
has this layout and states the model's own hash; otherwise it is a
:class:`~amdinfer.errors.CertificateError` (``strict=True``) or ignored with a WARNING on the
``amdinfer.quantize`` logger. :func:`show_certificate` is what engines call to put it in ``engine.info``.

Example:
    >>> import onnx
    >>> from amdinfer.testing.models import tiny_cnn
    >>> from amdinfer._certificate._core import example_certificate
    >>> import dataclasses
    >>> model = tiny_cnn()
    >>> cert = dataclasses.replace(example_certificate(), quantized_sha256=model_sha256(model))
    >>> _ = attach_certificate(model, cert)
    >>> read_certificate(model) == cert, model_sha256(model) == cert.quantized_sha256
    (True, True)
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
from collections.abc import Mapping
from typing import Any

import onnx

from ..errors import CertificateError
from ._core import PrecisionCertificate
from ._hash import CERTIFICATE_KEY, certificate_entries, model_sha256

__all__ = [
    "CERTIFICATE_KEY",
    "attach_certificate",
    "certificate_meta",
    "inspect_certificate",
    "model_sha256",
    "read_certificate",
    "show_certificate",
    "versions",
]

log = logging.getLogger("amdinfer.quantize")

#: What the cache manifest's ``meta`` holds the certificate under.
META_KEY = "precision_certificate"


def attach_certificate(model: onnx.ModelProto, certificate: PrecisionCertificate) -> onnx.ModelProto:
    """Store ``certificate`` in ``model``'s ``metadata_props`` (in place; one already there is replaced).

    Raises:
        CertificateError: ``model``'s hash is not the certificate's ``quantized_sha256`` (another model).

    Example:
        >>> import dataclasses
        >>> from amdinfer.testing.models import tiny_cnn
        >>> from amdinfer._certificate._core import example_certificate
        >>> attach_certificate(tiny_cnn(), example_certificate())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.CertificateError: precision certificate for model bbbbbbbbbbbb…: this model is ...
    """
    if not isinstance(certificate, PrecisionCertificate):
        raise CertificateError(f"certificate: got {type(certificate).__name__}, expected a PrecisionCertificate")
    return certificate.attach(model)


def inspect_certificate(model: onnx.ModelProto) -> tuple[PrecisionCertificate | None, str | None]:
    """``(certificate, None)`` when ``model`` carries a sound one for itself, ``(None, problem)`` when it carries
    one that cannot be trusted, ``(None, None)`` when it carries none.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = tiny_cnn()
        >>> inspect_certificate(m)
        (None, None)
        >>> _ = m.metadata_props.add(key=CERTIFICATE_KEY, value="{not json")
        >>> inspect_certificate(m)[1]
        'precision certificate: not valid JSON (truncated or damaged)'
    """
    found = certificate_entries(model)
    if not found:
        return None, None
    if len(found) > 1:
        return None, f"precision certificate: the model has {len(found)} entries {CERTIFICATE_KEY!r}, expected one"
    try:
        cert = PrecisionCertificate.from_json(model.metadata_props[found[0]].value)
    except CertificateError as exc:
        return None, str(exc)
    own = model_sha256(model)
    if own != cert.quantized_sha256:
        return None, (
            f"precision certificate: it is for model {cert.quantized_sha256[:12]}…, this model is {own[:12]}… "
            "(changed after it was certified, or the certificate was copied from another model)"
        )
    return cert, None


def read_certificate(model: onnx.ModelProto, *, strict: bool = False) -> PrecisionCertificate | None:
    """The certificate ``model`` carries for itself, or ``None``.

    Args:
        model: the quantized model.
        strict: raise on a certificate that cannot be trusted; by default it is ignored with a WARNING.

    Raises:
        CertificateError: with ``strict=True``, a damaged, foreign or mismatched certificate (the message
            says which).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> read_certificate(tiny_cnn()) is None
        True
    """
    cert, problem = inspect_certificate(model)
    if problem is not None:
        if strict:
            raise CertificateError(problem)
        log.warning("model %s: %s; ignored", model.graph.name or "<ModelProto>", problem)
    return cert


def certificate_meta(model: onnx.ModelProto) -> dict[str, Any]:
    """``{"precision_certificate": {...}}`` for a cache manifest's ``meta`` when ``model`` carries a sound
    certificate, else ``{}``.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> certificate_meta(tiny_cnn())
        {}
    """
    cert, _ = inspect_certificate(model)
    return {} if cert is None else {META_KEY: cert.to_dict()}


def meta_certificate(meta: Mapping[str, Any]) -> tuple[PrecisionCertificate | None, str | None]:
    """The certificate in a cache manifest's ``meta``: ``(certificate, None)``, ``(None, problem)`` or
    ``(None, None)`` when there is none.

    Example:
        >>> meta_certificate({"model": "m.onnx"}), meta_certificate({META_KEY: []})[1][:22]
        ((None, None), 'precision certificate:')
    """
    if META_KEY not in meta:
        return None, None
    try:
        return PrecisionCertificate.from_dict(meta[META_KEY]), None
    except CertificateError as exc:
        return None, str(exc)


def show_certificate(info: Any, model: onnx.ModelProto) -> PrecisionCertificate | None:
    """Put the certificate ``model`` carries into an ``EngineInfo``: ``settings["precision_certificate"]`` (its
    summary, verdict, task, metrics, hashes) and the verdict in ``notes``; one that cannot be trusted gives a
    note and a WARNING instead. Returns the trusted certificate, or ``None``.

    Example:
        >>> from amdinfer.engines import EngineInfo
        >>> from amdinfer.testing.models import tiny_cnn
        >>> info = EngineInfo("ort")
        >>> show_certificate(info, tiny_cnn()) is None, "precision_certificate" in info.settings
        (True, False)
    """
    if not certificate_entries(model):
        return None
    cert, problem = inspect_certificate(model)
    if cert is None:
        text = f"{problem}; not trusted, not shown"
        if text not in info.notes:
            log.warning("model %s: %s", model.graph.name or "<ModelProto>", text)
            info.notes.append(text)
        info.settings["precision_certificate"] = {"trusted": False, "problem": problem}
        return None
    info.settings["precision_certificate"] = {
        "trusted": True,
        "summary": cert.summary(),
        "verdict": cert.verdict,
        "task": cert.task,
        "precision": cert.precision,
        "judged_by": cert.judged_by,
        "metrics": dict(cert.metrics),
        "data_sha256": cert.data.sha256,
        "float_sha256": cert.float_sha256,
        "quantized_sha256": cert.quantized_sha256,
    }
    note = f"precision certificate: {cert.summary()}"
    info.notes[:] = [n for n in info.notes if not n.startswith("precision certificate: ")] + [note]
    return cert


def _dist_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


#: The distributions that provide ``import onnxruntime``.
_ORT_DISTS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-openvino")


def versions() -> dict[str, str]:
    """amdinfer, onnxruntime, onnx and numpy versions (``"not installed"`` where absent), without importing
    onnxruntime when it is not imported yet.

    Example:
        >>> sorted(versions())
        ['amdinfer', 'numpy', 'onnx', 'onnxruntime']
    """
    import numpy as np

    ours = getattr(sys.modules.get("amdinfer"), "__version__", None) or _dist_version(("amdinfer",))
    ort = sys.modules.get("onnxruntime")
    ort_version = getattr(ort, "__version__", None) or _dist_version(_ORT_DISTS)
    return {
        "amdinfer": ours or "unknown",
        "onnxruntime": ort_version or "not installed",
        "onnx": onnx.__version__,
        "numpy": np.__version__,
    }
