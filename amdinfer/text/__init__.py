"""OCR as a cascade: PP-OCR text detection -> direction classification -> recognition (:func:`ocr`), and the
stages it is built from, usable on their own.

=========================  ===========================================================================
:class:`PageFit`           RapidOCR's page rules: pages scaled within 30..2000 pixels, wide strips padded.
:class:`DetResize`         PP-OCR's detector resize (a side to ``limit``, sides multiples of 32).
:class:`DbPostprocess`     DBNet's probability map -> :class:`~amdinfer.results.TextLines` (quads).
:class:`ReadingOrder`      lines sorted top to bottom, rows left to right.
:class:`QuadCrop`          fan-out: one upright crop per line (perspective warp).
:class:`TextResize`        a line to height 48, width rounded up; ``PadWidth`` pads after normalising.
:class:`ClsRotate`         gather: turn the crops the direction classifier finds upside down.
:class:`CtcDecode`         greedy CTC with the dictionary from the model's metadata or a file.
:class:`AttachText`        gather: the recognised text and scores onto the lines.
:func:`ocr_calibration`    int8 calibration samples for all three models, from pages run through fp32.
=========================  ===========================================================================

Sentence embeddings (:func:`embed`; docs/text.md):

=========================  ===========================================================================
:func:`embed`              tokenizer -> encoder -> masked pooling -> normalised vectors (a :class:`TextEmbedder`).
:class:`Tokenize`          a text -> ids and attention mask, padded to its length bucket (``tokenizers``).
:class:`Pool`              token embeddings -> one vector (masked mean or ``[CLS]``; :func:`pool_tokens`).
:class:`Embeddings`        the vectors and texts; ``similarity()``, ``search()`` -> :class:`Matches`.
=========================  ===========================================================================

The cascade's batching, fan-out and gather are :class:`~amdinfer.pipeline.SubPipeline`'s. OpenCV is needed
(contours, warps: ``pip install opencv-python-headless``); pyclipper is not (the polygon offset is
:mod:`amdinfer.text._clipper`).

Example:
    >>> import numpy as np
    >>> from amdinfer.text import db_boxes, reading_order
    >>> prob = np.zeros((64, 64), np.float32); prob[40:50, 5:60] = 0.9; prob[10:20, 5:60] = 0.8
    >>> quads, scores = db_boxes(prob, (64, 64))
    >>> quads[reading_order(quads)][:, 0, 1].tolist()  # the upper line first
    [2.0, 32.0]
"""

from __future__ import annotations

from ..results._embed import Embedding, Embeddings, Match, Matches
from ._det import DbPostprocess, DetPad, DetResize, PageFit, ReadingOrder, db_boxes, reading_order
from ._embed import EmbedPipeline, TextEmbedder, embed
from ._embed_stages import DEFAULT_BUCKETS, Pool, Tokenize, bucket_sizes, load_tokenizer, pool_tokens
from ._recipe import OcrCalibration, OcrPipeline, ocr, ocr_calibration
from ._text import (
    AttachText,
    ClsRotate,
    CtcDecode,
    QuadCrop,
    TextResize,
    charset_from_model,
    ctc_greedy,
    ctc_steps,
    fuse_ctc,
    quad_crop,
)

__all__ = [
    "DEFAULT_BUCKETS",
    "AttachText",
    "ClsRotate",
    "CtcDecode",
    "DbPostprocess",
    "DetPad",
    "DetResize",
    "EmbedPipeline",
    "Embedding",
    "Embeddings",
    "Match",
    "Matches",
    "OcrCalibration",
    "OcrPipeline",
    "PageFit",
    "Pool",
    "QuadCrop",
    "ReadingOrder",
    "TextEmbedder",
    "TextResize",
    "Tokenize",
    "bucket_sizes",
    "charset_from_model",
    "ctc_greedy",
    "ctc_steps",
    "db_boxes",
    "embed",
    "fuse_ctc",
    "load_tokenizer",
    "ocr",
    "ocr_calibration",
    "pool_tokens",
    "quad_crop",
    "reading_order",
]
