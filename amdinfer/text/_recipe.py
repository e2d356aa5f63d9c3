"""The OCR recipe: :func:`ocr` builds PP-OCR's det -> cls -> rec cascade from amdinfer's own stages.

Example:
    >>> import amdinfer
    >>> callable(amdinfer.ocr)
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import OptionError
from ..pipeline import Pipeline, SubPipeline
from ..preprocess import BgrToRgb, HwcToChw, LoadImage, Normalize, PadWidth
from ._det import DbPostprocess, DetResize, ReadingOrder
from ._text import AttachText, ClsRotate, CtcDecode, QuadCrop, TextResize, charset_from_model

__all__ = ["OcrPipeline", "ocr"]


class OcrPipeline(Pipeline):
    """What :func:`ocr` returns: the detector's :class:`~amdinfer.Pipeline` whose postprocessing runs the
    classifier and recogniser steps (:class:`~amdinfer.pipeline.SubPipeline`); ``close()`` closes all three
    engines. ``__call__``, ``run_batch`` and ``map`` answer :class:`~amdinfer.results.TextLines` in reading order;
    ``run_batch`` (and ``__call__`` on a list, glob or folder) takes pages of different sizes.

    Example:
        >>> import amdinfer
        >>> issubclass(OcrPipeline, amdinfer.Pipeline)
        True
    """

    _inner: tuple[Pipeline, ...] = ()

    @property
    def steps(self) -> tuple[Pipeline, ...]:
        """The inner pipelines: ``(cls, rec)`` or ``(rec,)``."""
        return self._inner

    def run_batch(self, images: Iterable[Any]) -> list[Any]:
        """Run many pages and return their lines in order; pages of one detector input shape share an engine
        call, pages of different sizes run in separate calls (no common canvas: DBNet sees each page as
        RapidOCR does).

        Raises:
            StageError: a stage failed (naming the page's index and the stage) or an engine failed.
        """
        samples = [self._preprocess_one(i, item) for i, item in enumerate(images)]
        groups: dict[Any, list[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault((s.data.shape, s.data.dtype.str), []).append(i)
        results: list[Any] = [None] * len(samples)
        for idx in groups.values():
            outs = self._infer_samples(idx[0], [samples[i] for i in idx])
            for i, out in zip(idx, outs):
                results[i] = self._postprocess_one(i, out)
        return results

    def close(self) -> None:
        """Close the detector's engine and the inner pipelines'."""
        super().close()
        for p in self._inner:
            p.close()


def ocr(
    det: Any,
    rec: Any,
    cls: Any = None,
    *,
    charset: Sequence[str] | str | Path | None = None,
    det_limit: int = 736,
    det_limit_type: str = "min",
    thresh: float = 0.3,
    box_thresh: float = 0.5,
    unclip_ratio: float = 1.6,
    cls_threshold: float = 0.9,
    text_score: float = 0.5,
    batch_size: int = 6,
    rec_height: int = 48,
    rec_width: int = 320,
    cls_width: int = 192,
    backend: str = "auto",
    keep_image: bool = True,
    **load_options: Any,
) -> OcrPipeline:
    """PP-OCR text detection -> direction classification (optional) -> recognition, as one pipeline.

    The models are PaddleOCR's exports as RapidOCR and PaddleOCR ship them (det: DBNet ``(N, 3, H, W)`` ->
    ``(N, 1, H, W)``; cls: ``(N, 3, 48, 192)`` -> ``(N, 2)``; rec: ``(N, 3, 48, W)`` -> ``(N, T, classes)``),
    all fed BGR ``(x / 255 - 0.5) / 0.5``. The steps are RapidOCR's: :class:`~amdinfer.text.DetResize`,
    :class:`~amdinfer.text.DbPostprocess`, :class:`~amdinfer.text.ReadingOrder`, :class:`~amdinfer.text.QuadCrop`,
    classifier batches with :class:`~amdinfer.text.ClsRotate`, recogniser batches sorted by aspect ratio (each
    padded to its widest line), :class:`~amdinfer.text.CtcDecode`, :class:`~amdinfer.text.AttachText`. RapidOCR's
    page-level rescaling of pages over 2000 pixels or under 30, and its vertical padding of strips wider than
    8:1, are not applied.

    Args:
        det, rec, cls: the models (paths, bytes, ``onnx.ModelProto``); ``cls=None`` skips the classifier.
        charset: the recogniser's characters (a list or a dictionary file); ``None`` reads them from the
            rec model's ``"character"`` metadata (:func:`~amdinfer.text.charset_from_model`).
        det_limit, det_limit_type: :class:`~amdinfer.text.DetResize`.
        thresh, box_thresh, unclip_ratio: :class:`~amdinfer.text.DbPostprocess`.
        cls_threshold: :class:`~amdinfer.text.ClsRotate`.
        text_score: lines recognised with a lower score are dropped.
        batch_size: text lines per classifier/recogniser engine call (RapidOCR: 6).
        rec_height, rec_width, cls_width: the text-line input sizes (PP-OCR: 48, 320, 192).
        backend, **load_options: :func:`amdinfer.load` options, applied to all three models (``threads=``,
            ``providers=``, ``precision=``, ``quantizer=`` ...).
        keep_image: keep the page on each result (``plot()``); the crops are cut from it either way.

    Returns:
        An :class:`OcrPipeline`; ``pipe("page.png")`` -> :class:`~amdinfer.results.TextLines`.

    Raises:
        OptionError: bad options. ModelError: no charset in the rec model and none given.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import tiny_cnn
        >>> ocr(tiny_cnn(), tiny_cnn(), charset=["a"], batch_size=0)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: batch_size: got 0, expected an int >= 1
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise OptionError(f"batch_size: got {batch_size!r}, expected an int >= 1")
    chars = charset
    if chars is None:
        chars = charset_from_model(rec)
    decode = CtcDecode(chars)
    det_post = DbPostprocess(thresh=thresh, box_thresh=box_thresh, unclip_ratio=unclip_ratio)
    order = ReadingOrder()
    line_pre = [BgrToRgb(), Normalize(mean=0.5, std=0.5, scale=1 / 255), HwcToChw(), PadWidth()]
    common = {"backend": backend, **load_options}
    inner: list[Pipeline] = []
    try:
        steps: list[Any] = [det_post, order]
        if cls is not None:
            cls_pipe = Pipeline(preprocess=[TextResize(rec_height, cls_width), *line_pre], engine=cls, **common)
            inner.append(cls_pipe)
            steps.append(
                SubPipeline(cls_pipe, fan_out=QuadCrop(), gather=ClsRotate(cls_threshold), batch_size=batch_size)
            )
        rec_pipe = Pipeline(
            preprocess=[TextResize(rec_height, rec_width, grow=True), *line_pre],
            engine=rec,
            postprocess=[decode],
            **common,
        )
        inner.append(rec_pipe)
        steps.append(
            SubPipeline(
                rec_pipe,
                fan_out=QuadCrop(),
                gather=AttachText(text_score, keep_image=keep_image),
                batch_size=batch_size,
                order="aspect",
            )
        )
        pipe = OcrPipeline(
            preprocess=[
                LoadImage(),
                DetResize(det_limit, det_limit_type),
                BgrToRgb(),
                Normalize(mean=0.5, std=0.5, scale=1 / 255),
                HwcToChw(),
            ],
            engine=det,
            postprocess=steps,
            keep_image=True,
            **common,
        )
    except BaseException:
        for p in inner:
            p.close()
        raise
    pipe._inner = tuple(inner)
    return pipe
