"""The OCR recipe: :func:`ocr` builds PP-OCR's det -> cls -> rec cascade from amdinfer's own stages.

Example:
    >>> import amdinfer
    >>> callable(amdinfer.ocr)
    True
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..engines.base import Engine
from ..errors import InputError, ModelError, OptionError
from ..pipeline import Pipeline, SubPipeline
from ..preprocess import BgrToRgb, HwcToChw, LoadImage, Normalize, PadWidth
from ._det import DbPostprocess, DetPad, DetResize, PageFit, ReadingOrder
from ._text import AttachText, ClsRotate, CtcDecode, QuadCrop, TextResize, charset_from_model, fuse_ctc
from ._threads import cascade_load_options
from ._warm import WARM_PAGES, check_warm, ocr_warm_shapes, warm_cascade

__all__ = ["OcrCalibration", "OcrPipeline", "ocr", "ocr_calibration"]

log = logging.getLogger(__name__)

#: :func:`ocr`'s arguments that shape the cascade's stages (:func:`_build` reads them by these names).
_CASCADE_OPTIONS: tuple[str, ...] = ("charset", "det_limit", "det_limit_type", "thresh", "box_thresh", "unclip_ratio")
_CASCADE_OPTIONS += ("cls_threshold", "text_score", "batch_size", "rec_height", "rec_width", "cls_width")
_CASCADE_OPTIONS += ("shape_buckets", "fuse_ctc", "page_fit", "warm")

#: ``shape_buckets``: the detector's canvas multiple and the recogniser's width step (text lines are 48 high)
DET_CANVAS_MULTIPLE = 256
REC_WIDTH_STEP = 160


class OcrPipeline(Pipeline):
    """What :func:`ocr` returns: the detector's :class:`~amdinfer.Pipeline` whose postprocessing runs the
    classifier and recogniser steps (:class:`~amdinfer.pipeline.SubPipeline`); ``close()`` closes all three
    engines. ``__call__``, ``run_batch`` and ``map`` answer :class:`~amdinfer.results.TextLines` in reading order;
    ``run_batch`` (and ``__call__`` on a list, glob or folder) takes pages of different sizes: pages of one
    detector input shape share an engine call (:meth:`amdinfer.Pipeline.run_batch`), so DBNet sees each page as
    RapidOCR does, with no common canvas.

    Example:
        >>> import amdinfer
        >>> issubclass(OcrPipeline, amdinfer.Pipeline)
        True
    """

    _inner: tuple[Pipeline, ...] = ()
    #: what ``shape_buckets`` turned on: ``{"det_multiple": 256, "rec_width_step": 160, "batch_rows": 6}``, or
    #: ``None`` (every page and line batch keeps its own shape, as RapidOCR feeds them)
    shape_buckets: dict[str, int] | None = None
    #: whether the recogniser's graph ends in greedy CTC's per-step argmax (``ocr(fuse_ctc=True)``)
    ctc_in_graph: bool = False
    #: what ``warm`` did at load: ``{"seconds": s, "det": record, "cls": ..., "rec": ...}`` (each engine's
    #: ``info.settings["warm"]``), or ``None`` (not warmed)
    warmed: dict[str, Any] | None = None

    @property
    def steps(self) -> tuple[Pipeline, ...]:
        """The inner pipelines: ``(cls, rec)`` or ``(rec,)``."""
        return self._inner

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
    shape_buckets: bool | str = "auto",
    fuse_ctc: bool = True,
    page_fit: bool = True,
    warm: bool | str | Sequence[tuple[int, int]] = "auto",
    calibration: Iterable[Any] | None = None,
    det_quantizer: Any = None,
    cls_quantizer: Any = None,
    rec_quantizer: Any = None,
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
    padded to its widest line), :class:`~amdinfer.text.CtcDecode`, :class:`~amdinfer.text.AttachText`, after its
    page rules (``page_fit``: pages scaled within 30..2000 pixels, strips over 8:1 padded with black bands).

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
        shape_buckets: feed the engines a few shapes (pages padded to multiples of 256, line batches to 160-wide
            steps and ``batch_size`` rows; docs/pipeline.md): ``"auto"`` (on a GPU), ``True``, ``False``.
        fuse_ctc: greedy CTC's argmax in the recogniser's graph (:func:`~amdinfer.text.fuse_ctc`; not int8).
        page_fit: RapidOCR's page rules first (:class:`~amdinfer.text.PageFit`); ``False``: pages as they are.
        warm: each bucketed shape built and run at load (:mod:`amdinfer.text._warm`; ``pipe.warmed``): ``"auto"``
            (buckets on, off the CPU), ``True``, ``False``, or page sizes ``[(h, w), ...]`` to warm canvases of.
        calibration: with ``precision="int8"``: pages (paths, arrays) to calibrate the three models on; each input
            the fp32 cascade feeds its engines is a sample of its model's Int8Quantizer (:func:`ocr_calibration`).
        det_quantizer, cls_quantizer, rec_quantizer: a quantizer for one model (``quantizer=`` of its
            :func:`amdinfer.load`), e.g. from :meth:`OcrCalibration.quantizers`; not with ``calibration``.
        backend, **load_options: :func:`amdinfer.load` options for all three models (``threads=``, ``providers=``
            ...); ``precision="int8"`` needs ``calibration=`` or the three quantizers (one ``quantizer=`` is refused).
        keep_image: keep the page on each result (``plot()``); the crops are cut from it either way.

    Returns:
        An :class:`OcrPipeline`; ``pipe("page.png")`` -> :class:`~amdinfer.results.TextLines`.

    Raises:
        OptionError: bad options (``quantizer=``, ``precision="int8"`` without calibration, ``calibration``
            without ``precision="int8"`` or together with a quantizer). ModelError: no charset in the rec model
            and none given. StageError: (``calibration``) the fp32 cascade failed on a calibration page.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> ocr(tiny_cnn(), tiny_cnn(), charset=["a"], batch_size=0)
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: batch_size: got 0, expected an int >= 1
    """
    cascade_args = locals()  # the arguments only, before any other name is bound
    options = {k: cascade_args[k] for k in _CASCADE_OPTIONS}
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise OptionError(f"batch_size: got {batch_size!r}, expected an int >= 1")
    quantizers = {"det": det_quantizer, "cls": cls_quantizer, "rec": rec_quantizer}
    quantizers = _quantizers(det, rec, cls, calibration, quantizers, backend, options, load_options)
    return _build(det, rec, cls, options, quantizers, backend, keep_image, load_options, OcrPipeline, Pipeline)


def _quantizers(
    det: Any,
    rec: Any,
    cls: Any,
    calibration: Any,
    quantizers: dict[str, Any],
    backend: str,
    options: dict[str, Any],
    load_options: dict[str, Any],
) -> dict[str, Any]:
    """:func:`ocr`'s quantizer per model (``"det"``, ``"cls"``, ``"rec"``): the ones given, or with
    ``calibration``, Int8Quantizers on what the fp32 cascade fed each engine; the options checked first."""
    _check_int8(load_options, calibration, quantizers, cls is not None)
    if calibration is None:
        return quantizers
    fp32 = {k: v for k, v in load_options.items() if k != "precision"}
    cal = ocr_calibration(det, rec, cls, pages=calibration, backend=backend, **options, **fp32)
    calibrated = {k: v for k, v in cal.quantizers().items() if v is not None}
    return {k.removesuffix("_quantizer"): v for k, v in calibrated.items()}


def _check_int8(load_options: dict[str, Any], calibration: Any, quantizers: dict[str, Any], has_cls: bool) -> None:
    shared = load_options.get("quantizer")
    if shared is not None and getattr(shared.describe(), "calibration", False):
        raise OptionError(
            "quantizer: a calibrated quantizer cannot serve the det, cls and rec models (its data fits one of "
            "them); "
            "pass det_quantizer=, cls_quantizer=, rec_quantizer= (e.g. **ocr_calibration(...).quantizers()) or "
            "precision='int8', calibration=pages"
        )
    given = [f"{k}_quantizer" for k, v in quantizers.items() if v is not None]
    if not has_cls and quantizers["cls"] is not None:
        raise OptionError("cls_quantizer: given without a cls model")
    int8 = load_options.get("precision") == "int8"
    if calibration is not None:
        if given:
            raise OptionError(f"calibration: given together with {', '.join(given)}; pass one or the other")
        if not int8:
            raise OptionError(
                f"calibration: given with precision={load_options.get('precision', 'fp32')!r}, expected "
                "precision='int8' (the pages calibrate the int8 models)"
            )
        if isinstance(calibration, (str, bytes, np.ndarray)) or not isinstance(calibration, Iterable):
            raise OptionError(
                f"calibration: got {type(calibration).__name__}, expected a list of pages (arrays (H, W, 3) "
                "uint8 or paths)"
            )
    elif int8:
        needed = ["det_quantizer", "rec_quantizer"] + (["cls_quantizer"] if has_cls else [])
        missing = [k for k in needed if k not in given]
        if missing:
            raise OptionError(
                f"precision='int8': no calibration for {', '.join(missing)}; pass calibration=pages (the fp32 "
                "cascade collects each model's inputs from them) or a quantizer per model"
            )


def _build(
    det: Any,
    rec: Any,
    cls: Any,
    options: dict[str, Any],
    quantizers: dict[str, Any],
    backend: str,
    keep_image: bool,
    load_options: dict[str, Any],
    outer: type[OcrPipeline],
    inner_kind: type[Pipeline],
) -> OcrPipeline:
    """The cascade: ``outer`` (the detector's pipeline) with ``inner_kind`` pipelines for cls and rec."""
    charset = options["charset"]
    batch_size = options["batch_size"]
    rec_height, rec_width, cls_width = options["rec_height"], options["rec_width"], options["cls_width"]
    _check_switches(options)
    det_pad, line_resize = DetPad(1), TextResize(rec_height, rec_width, grow=True)  # buckets set once loaded
    int8_rec = quantizers.get("rec") is not None or load_options.get("precision") == "int8"
    rec_model = rec
    if options["fuse_ctc"] and not int8_rec and not isinstance(rec, Engine):
        try:
            rec_model = fuse_ctc(rec)
        except ModelError as exc:  # an output layout fuse_ctc does not know: CtcDecode decodes the probabilities
            log.info("ocr: the recogniser runs without CTC in its graph (%s)", exc)
    subs: list[SubPipeline] = []
    chars = charset
    if chars is None:
        chars = charset_from_model(rec)
    decode = CtcDecode(chars)
    det_post = DbPostprocess(
        thresh=options["thresh"], box_thresh=options["box_thresh"], unclip_ratio=options["unclip_ratio"]
    )
    order = ReadingOrder()
    line_pre = [BgrToRgb(), Normalize(mean=0.5, std=0.5, scale=1 / 255), HwcToChw(), PadWidth()]
    common = {"backend": backend, **cascade_load_options(backend, load_options, (det, rec, cls))}

    def load_for(role: str) -> dict[str, Any]:
        q = quantizers.get(role)
        return {**common, "quantizer": q} if q is not None else common

    inner: list[Pipeline] = []
    try:
        steps: list[Any] = [det_post, order]
        if cls is not None:
            cls_pipe = inner_kind(
                preprocess=[TextResize(rec_height, cls_width), *line_pre], engine=cls, **load_for("cls")
            )
            inner.append(cls_pipe)
            rotate = ClsRotate(options["cls_threshold"])
            subs.append(SubPipeline(cls_pipe, fan_out=QuadCrop(), gather=rotate, batch_size=batch_size))
        rec_pipe = inner_kind(
            preprocess=[line_resize, *line_pre],
            engine=rec_model,
            postprocess=[decode],
            **load_for("rec"),
        )
        inner.append(rec_pipe)
        attach = AttachText(options["text_score"], keep_image=keep_image)
        subs.append(SubPipeline(rec_pipe, fan_out=QuadCrop(), gather=attach, batch_size=batch_size, order="aspect"))
        steps.extend(subs)
        pipe = outer(
            preprocess=[
                LoadImage(),
                *([PageFit()] if options["page_fit"] else []),
                DetResize(options["det_limit"], options["det_limit_type"]),
                BgrToRgb(),
                Normalize(mean=0.5, std=0.5, scale=1 / 255),
                HwcToChw(),
                det_pad,
            ],
            engine=det,
            postprocess=steps,
            keep_image=True,
            **load_for("det"),
        )
    except BaseException:
        for p in inner:
            p.close()
        raise
    pipe._inner = tuple(inner)
    pipe.ctc_in_graph = rec_model is not rec
    _shape_buckets(pipe, options["shape_buckets"], det_pad, line_resize, subs)
    _warm(pipe, options, cls is not None)
    return pipe


def _warm(pipe: OcrPipeline, options: dict[str, Any], has_cls: bool) -> None:
    """``warm``: the bucketed shapes built and run once (``"auto"``: with buckets, off the CPU)."""
    warm = options["warm"]
    if warm is False or (warm == "auto" and (pipe.shape_buckets is None or _on_cpu(pipe.engine))):
        return
    if pipe.shape_buckets is None:
        raise OptionError(
            f"warm: got {warm!r} with shape_buckets=False; the shapes are known in advance only when pages and "
            "lines are padded to buckets: pass shape_buckets=True or warm=False"
        )
    pages = WARM_PAGES if isinstance(warm, (bool, str)) else warm
    shapes = ocr_warm_shapes(
        batch_size=options["batch_size"],
        pages=pages,
        det_limit=options["det_limit"],
        det_limit_type=options["det_limit_type"],
        page_fit=options["page_fit"],
        rec_height=options["rec_height"],
        rec_width=options["rec_width"],
        cls_width=options["cls_width"],
    )
    steps = pipe.steps
    engines = {"det": pipe.engine, **({"cls": steps[0].engine} if has_cls else {}), "rec": steps[-1].engine}
    try:
        pipe.warmed = warm_cascade(engines, shapes)
    except BaseException:
        pipe.close()
        raise


def _on_cpu(engine: Any) -> bool:
    return str(engine.info.device or "cpu").split(":")[0] == "cpu"


def _check_switches(options: dict[str, Any]) -> None:
    if options["shape_buckets"] != "auto" and not isinstance(options["shape_buckets"], bool):
        raise OptionError(f"shape_buckets: got {options['shape_buckets']!r}, expected 'auto', True or False")
    if not isinstance(options["page_fit"], bool):
        raise OptionError(f"page_fit: got {options['page_fit']!r}, expected True or False")
    options["warm"] = check_warm(options["warm"])


def _shape_buckets(
    pipe: OcrPipeline, buckets: bool | str, det_pad: DetPad, line_resize: TextResize, subs: list[SubPipeline]
) -> None:
    """Turn ``shape_buckets`` on in the built cascade (``"auto"``: when the detector's engine is not on the CPU)."""
    if buckets == "auto":
        buckets = not _on_cpu(pipe.engine)
    if buckets:
        det_pad.multiple, line_resize.width_step = DET_CANVAS_MULTIPLE, REC_WIDTH_STEP
        for sub in subs:
            sub.pad_batch = True
        pipe.shape_buckets = {"det_multiple": DET_CANVAS_MULTIPLE, "rec_width_step": REC_WIDTH_STEP}
        pipe.shape_buckets["batch_rows"] = subs[-1].batch_size


@dataclass(frozen=True)
class OcrCalibration:
    """What each engine of the fp32 cascade was fed on the calibration pages: int8 calibration samples.

    Every entry is one engine call's input (a batch): ``det`` the pages (``(1, 3, H, W)``, one size per
    page), ``cls`` the classifier's line batches, ``rec`` the recogniser's (``(n, 3, 48, W)``, ``W`` the
    batch's widest line). :class:`~amdinfer.quantize.Int8Quantizer` takes samples of several shapes.

    Example:
        >>> cal = OcrCalibration(det=[np.zeros((1, 3, 32, 64), np.float32)], cls=[], rec=[])
        >>> cal.quantizers(method="percentile")["det_quantizer"].method
        'percentile'
        >>> cal.quantizers()["cls_quantizer"] is None  # no classifier samples
        True
    """

    det: list[np.ndarray] = field(default_factory=list)
    cls: list[np.ndarray] = field(default_factory=list)
    rec: list[np.ndarray] = field(default_factory=list)

    def quantizers(self, **int8_options: Any) -> dict[str, Any]:
        """``{"det_quantizer": ..., "cls_quantizer": ..., "rec_quantizer": ...}`` for :func:`ocr`: one
        :class:`~amdinfer.quantize.Int8Quantizer` per model with its samples and ``int8_options``
        (``method=``, ``per_channel=`` ...); ``None`` for a model without samples (no classifier).

        Example:
            >>> OcrCalibration().quantizers()
            {'det_quantizer': None, 'cls_quantizer': None, 'rec_quantizer': None}
        """
        from ..quantize import Int8Quantizer

        int8_options.setdefault("progress", False)
        out: dict[str, Any] = {}
        for role in ("det", "cls", "rec"):
            samples = getattr(self, role)
            out[f"{role}_quantizer"] = Int8Quantizer(calibration=samples, **int8_options) if samples else None
        return out


class _Recording(Pipeline):
    """A :class:`~amdinfer.Pipeline` that keeps a copy of every batch it feeds its engine (its items, not the rows
    that pad it to a bucket or a fixed batch)."""

    fed: list[np.ndarray]

    def _engine_feed(self, chunk: np.ndarray, real: int) -> dict[str, Any]:
        self.fed.append(np.array(chunk[:real]))
        return super()._engine_feed(chunk, real)


class _RecordingOcr(OcrPipeline, _Recording):
    pass


def ocr_calibration(
    det: Any, rec: Any, cls: Any = None, *, pages: Iterable[Any], backend: str = "auto", **options: Any
) -> OcrCalibration:
    """Run the fp32 cascade of :func:`ocr` on ``pages`` and keep what each engine was fed (int8 calibration).

    Args:
        det, rec, cls: the models, as for :func:`ocr`.
        pages: the calibration pages (paths, arrays, anything ``LoadImage`` reads), ideally like the pages the
            int8 cascade will read; each one runs through the fp32 cascade once.
        backend, **options: :func:`ocr`'s options (thresholds, sizes, ``providers=``, ``threads=`` ...);
            ``precision`` and quantizers are refused (the samples come from the fp32 models).

    Returns:
        An :class:`OcrCalibration`; ``ocr(det, rec, cls, **cal.quantizers(), precision="int8")`` is what
        ``ocr(..., precision="int8", calibration=pages)`` builds.

    Raises:
        OptionError: ``precision``/quantizer options, or no page. InputError: the pages gave no text line
            (the recogniser would have no calibration sample). StageError: the cascade failed on a page.

    Example:
        >>> ocr_calibration(None, None, pages=[], precision="int8")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: precision: ocr_calibration runs the fp32 models; got 'int8'
    """
    if options.get("precision", "fp32") != "fp32":
        raise OptionError(f"precision: ocr_calibration runs the fp32 models; got {options['precision']!r}")
    quantizing = ("quantizer", "calibration", "det_quantizer", "cls_quantizer", "rec_quantizer")
    refused = [k for k in quantizing if k in options]
    if refused:
        raise OptionError(f"{', '.join(refused)}: ocr_calibration runs the fp32 models; pass no quantizer")
    if isinstance(pages, (str, bytes)) or not isinstance(pages, Iterable):
        raise OptionError(f"pages: got {type(pages).__name__}, expected an iterable of pages")
    page_list = list(pages)
    if not page_list:
        raise OptionError("pages: got no page, expected at least one calibration page")
    defaults = inspect.signature(ocr).parameters
    cascade = {k: options.pop(k, defaults[k].default) for k in _CASCADE_OPTIONS}
    options.pop("keep_image", None)
    pipe = _build(det, rec, cls, cascade, {}, backend, False, options, _RecordingOcr, _Recording)
    recorders: list[Any] = [pipe, *pipe.steps]
    for r in recorders:
        r.fed = []
    try:
        for page in page_list:
            pipe(page)
    finally:
        pipe.close()
    fed = [r.fed for r in recorders]
    cal = OcrCalibration(det=fed[0], cls=fed[1] if cls is not None else [], rec=fed[-1])
    if not cal.rec:
        raise InputError(
            f"pages: the fp32 cascade found no text line on the {len(page_list)} calibration page(s), so the "
            "recogniser has no calibration sample; pass pages with text"
        )
    return cal
