"""The hash that binds a precision certificate to its model, and the ``metadata_props`` key it travels under.

Example:
    >>> from amdinfer.testing.models import tiny_cnn
    >>> len(model_sha256(tiny_cnn()))
    64
"""

from __future__ import annotations

import hashlib

import onnx

from ..errors import CertificateError

__all__ = ["CERTIFICATE_KEY", "certificate_entries", "model_sha256"]

#: The ``metadata_props`` key a quantized model carries its certificate under (JSON).
CERTIFICATE_KEY = "amdinfer.precision_certificate"


def certificate_entries(model: onnx.ModelProto) -> list[int]:
    """Indices of ``model``'s ``metadata_props`` entries under :data:`CERTIFICATE_KEY`."""
    return [i for i, p in enumerate(model.metadata_props) if p.key == CERTIFICATE_KEY]


def model_sha256(model: onnx.ModelProto) -> str:
    """Hex SHA-256 of ``model`` serialized without its certificate entry: the hash a certificate states.

    The model is not changed (the entry is taken out for the serialization and put back in place).

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = tiny_cnn()
        >>> before = model_sha256(m)
        >>> _ = m.metadata_props.add(key=CERTIFICATE_KEY, value="{}")
        >>> model_sha256(m) == before
        True
    """
    if not isinstance(model, onnx.ModelProto):
        raise CertificateError(f"model: got {type(model).__name__}, expected an onnx.ModelProto")
    found = certificate_entries(model)
    if not found:
        return hashlib.sha256(model.SerializeToString()).hexdigest()
    props = [(p.key, p.value) for p in model.metadata_props]
    del model.metadata_props[:]
    try:
        for key, value in props:
            if key != CERTIFICATE_KEY:
                model.metadata_props.add(key=key, value=value)
        return hashlib.sha256(model.SerializeToString()).hexdigest()
    finally:
        del model.metadata_props[:]
        for key, value in props:
            model.metadata_props.add(key=key, value=value)
