"""A model rewrite (fp16 conversion, int8 quantization, transformer fusion) kept in the compiled-model cache.

Example:
    >>> import tempfile
    >>> from amdinfer.cache import CompiledModelCache
    >>> from amdinfer.testing.models import tiny_cnn
    >>> source = ModelSource(tiny_cnn(), name="cnn.onnx")
    >>> cache = CompiledModelCache(tempfile.mkdtemp())
    >>> parts = {"kind": "example model", "model": source.sha256}
    >>> cached_rewrite(cache, parts, source, lambda: source, "example model")[1:]  # (key, hit)
    (..., False)
    >>> cached_rewrite(cache, parts, source, lambda: source, "example model")[2]
    True
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._certificate._io import certificate_meta
from ...errors import ModelError
from ...model import ModelSource

__all__ = ["cached_rewrite"]


def cached_rewrite(
    cache: Any, parts: dict[str, Any], source: ModelSource, make: Callable[[], ModelSource], what: str
) -> tuple[ModelSource, str, bool]:
    """``make()``'s rewrite of ``source``, read from ``cache`` under the key of ``parts`` or built and stored.

    A rewrite that carries a precision certificate (ONNX ``metadata_props``, see
    :class:`~amdinfer.quantize.PrecisionCertificate`) also puts it in the entry's manifest (``meta``), where
    ``amdinfer cache list`` reads its verdict.

    Returns:
        ``(model, key, hit)``.

    Raises:
        CacheError: the cache cannot be used (the caller decides whether to rewrite without it).
        ModelError: a stored model whose inputs are not ``source``'s (``what`` names it in the message).
    """
    key = cache.key(**parts)

    def build(tmp: Path) -> ModelSource:
        rewritten = make()
        tmp.write_bytes(rewritten.to_bytes())
        return rewritten

    def load(path: Path) -> ModelSource:
        stored = source.derived(path.read_bytes(), check=False)
        if [s.name for s in stored.inputs] != [s.name for s in source.inputs]:
            raise ModelError(f"stored {what} has inputs {[s.name for s in stored.inputs]}")
        return stored

    built: list[ModelSource] = []

    def meta() -> dict[str, Any]:  # after build: a rewrite that carries a precision certificate puts it in the manifest
        return {"model": source.name, **(certificate_meta(built[0].proto) if built else {})}

    def build_kept(tmp: Path) -> ModelSource:
        built.append(build(tmp))
        return built[-1]

    model, hit = cache.get_or_build(key, parts=parts, build=build_kept, load=load, suffix=".onnx", meta=meta)
    return model, key, hit
