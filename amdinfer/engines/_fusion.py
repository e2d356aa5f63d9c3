"""What a fused pipeline's ``"auto"`` modes build for one backend or ONNX Runtime provider: a small frozen record.

The facts live with the thing they are about: each ONNX Runtime provider's record
(:class:`~amdinfer.engines.ort.ExecutionProvider`, ``fusion``) and each backend's registry entry
(:class:`~amdinfer.engines.registry.BackendEntry`, ``fusion``). :meth:`Pipeline.fuse <amdinfer.Pipeline.fuse>`
reads them; it never matches provider or backend names.

Example:
    >>> FusionDefaults(nms="dense", resize="auto").nms
    'dense'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FusionDefaults"]


@dataclass(frozen=True)
class FusionDefaults:
    """The fused model's default NMS and Resize forms on one backend or provider, and why.

    Attributes:
        nms: ``Pipeline.fuse(nms_mode=)``'s form there: ``"dense"`` (a greedy loop that stays on the device),
            ``"host"`` (the runtime pads NonMaxSuppression/NonZero outputs to static shapes, so NMS runs on the
            host), ``"per-class"`` (ONNX's NonMaxSuppression per class; an ``Nms`` stage with a ``class_offset``
            takes ``"offset"`` instead) or ``"offset"`` (one NonMaxSuppression over class-offset boxes).
        resize: ``Pipeline.fuse(resize=)``'s form there: ``"auto"`` (``fuse_model``'s size rule) or ``"exact"``
            (the reference's Resize).
        reason: why, in one line.

    Example:
        >>> FusionDefaults().nms, FusionDefaults().resize
        ('offset', 'exact')
    """

    nms: str = "offset"
    resize: str = "exact"
    reason: str = ""
