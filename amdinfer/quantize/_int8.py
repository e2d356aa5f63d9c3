"""``Int8Quantizer``: calibrated static int8 through ONNX Runtime's ``quantize_static``, mapped to MIGraphX."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from .._certificate._core import PrecisionCertificate
from .._certificate._io import META_KEY
from .._support._progress import check_progress
from ..errors import CacheError, ModelError, OptionError
from ..model import ModelSource
from ._agreement import AgreementCheck, check_low_accuracy, check_min_cosine, enforce
from ._base import QuantizationSpec, QuantizerBase
from ._data import data_hash
from ._detector_head import DetectorHead, detector_head
from ._fp16 import _check_nodes, _str_list
from ._int8_certificate import check_once
from ._int8_checks import check_weights, quantized_nodes
from ._int8_data import CalibrationData
from ._int8_reader import _import_quantization, _ort_version
from ._int8_static import (
    CALIBRATION_METHODS,
    QUANT_FORMATS,
    QUANT_TYPES,
    TRANSFORMER_OP_TYPES,
    run_quantize_static,
)
from ._options import choice, flag, reduce_range_choice, resolve_cache
from ._prepare import prepare_model, tail_nodes
from ._transformer import float_readers_read_float, is_transformer, mask_path_nodes

__all__ = ["CALIBRATION_METHODS", "INT8_KIND", "QUANT_FORMATS", "QUANT_TYPES", "Int8Quantizer"]

log = logging.getLogger("amdinfer.quantize")

#: The ``kind`` part of the cache entries the quantizer writes (``amdinfer cache list`` shows it).
INT8_KIND = "int8 quantized model"


class Int8Quantizer(QuantizerBase):
    """Static int8 quantization with calibration data, through ONNX Runtime's ``quantize_static``.

    Calibration data is required: int8 without it gives wrong answers. The defaults are the fastest
    configuration on an AVX2 CPU that keeps accuracy (see ``docs/quantization.md``): QDQ format,
    per-channel int8 weights, uint8 activations, no range reduction, ``Softmax``/``Sigmoid`` in float. On a
    Transformer (``transformer=None`` detects one) only ``MatMul``/``Gemm`` are quantized and their outputs
    stay in float, and so do the nodes that read an attention-mask value (a float constant of magnitude
    >= 1e4, e.g. ``-3.4e38``; see ``docs/quantization.md#transformers``). On a YOLO v5/v8/v11 detector
    (``detector_head=None`` finds its decode head:
    :func:`amdinfer.quantize._detector_head.detector_head`) the head stays in float: the last convolution of
    each branch and the decode after it, whose final ``Concat`` puts box coordinates (0 to the image size)
    next to class scores (0 to 1), so that one int8 scale would round every score to 0 (see
    ``docs/quantization.md#int8-on-detectors``); what was kept is logged and in ``describe().notes``
    (:attr:`head`).

    The result is checked: the quantized and the float model run on (up to 16 of) the calibration samples and
    each float output must keep a mean cosine similarity of at least ``min_cosine`` with the float model's,
    else :meth:`quantize` raises :class:`~amdinfer.quantize.AgreementError` naming the output and the figure
    (the figures are in :attr:`agreement`).

    Args:
        calibration: the samples, in one of two layouts. A list (any iterable; a one-shot generator is read
            once and kept) of samples: feed dicts, arrays (single-input models; each one sample, or one batch
            when it has the model's batch axis) or, with ``preprocess``, images. Or one tensor layout, axis
            0 = samples (what ``amdinfer quantize --calibration data.npz`` reads too): an array
            ``(samples, ...)``, a mapping ``{input: (samples, ...)}`` or an ``.npz`` path with one such array
            per input; row ``i`` is sample ``i``, with or without the model's batch axis (an array whose
            rank is neither the model's nor one more is an :class:`~amdinfer.errors.InputError` naming
            ``calibration``, the shape received and the shapes expected).
        preprocess: callables applied in turn to each calibration sample (e.g. ``amdinfer.preprocess``
            stages); the last returns an array, a pipeline ``Sample`` (its ``.data``) or an object with
            ``.array``. A missing batch axis is added.
        input_name: the input arrays feed, for models with several inputs.
        method: ``"minmax"``, ``"entropy"`` or ``"percentile"`` (ONNX Runtime's calibrators).
        percentile: the percentile kept by ``method="percentile"``.
        per_channel: one scale per output channel of each weight.
        symmetric_activations: zero point 0 for activations (needs ``activation_type="int8"`` to be useful).
        reduce_range: 7-bit weights (avoids ``vpmaddubsw`` saturation on CPUs without VNNI, costs accuracy);
            ``"auto"`` (the default): 7-bit on an x86 CPU without VNNI or AMX, else 8-bit (``reduce_range_why``).
        activation_type: ``"uint8"`` or ``"int8"``.
        weight_type: ``"int8"`` or ``"uint8"``.
        format: ``"qdq"`` (QuantizeLinear/DequantizeLinear around float ops) or ``"qoperator"``
            (QLinearConv, QLinearMatMul...).
        op_types: op types to quantize (``None``: every type ONNX Runtime can quantize).
        exclude_nodes: node names kept in float.
        exclude_op_types: op types kept in float (default ``Softmax`` and ``Sigmoid``: their outputs are
            probabilities whose small values int8 cannot resolve).
        keep_last_n: keep the last ``n`` weighted layers and every node after the first of them (the head,
            e.g. a detection head) in float.
        max_samples: read at most this many calibration samples.
        detector_head: ``None`` (default) keeps a YOLO decode head in float when the model has one;
            ``True`` requires one (a model without is a :class:`~amdinfer.errors.ModelError`); ``False``
            quantizes the head like the rest.
        progress: a progress bar (tqdm when installed, else INFO lines on the ``amdinfer.quantize``
            logger) while preprocessing and calibrating: ``None`` (default) only when stderr is a terminal,
            ``True``/``False`` always/never.
        cache: where the quantized model is kept (key: prepared model SHA-256 + settings + calibration data
            hash + onnxruntime version), opt-in like every cache but MIGraphX's (``docs/cache.md``): ``None``
            (default) caches only when ``$AMDINFER_CACHE_DIR`` is set, ``True`` in the default cache folder,
            a folder path or a ``CompiledModelCache`` there, ``False`` never.
        prepare: run :func:`~amdinfer.quantize.prepare_model` first.
        transformer: ``None`` (default) detects a Transformer (LayerNormalization, fused attention ops, or a
            Softmax over a product of two activations); ``True``/``False`` force it. When on, ``op_types=None``
            means ``("MatMul", "Gemm")`` and the outputs of those ops are not quantized (a layer whose output
            has an outlier of 200 next to values of 1, BERT's second feed-forward layer, loses them otherwise).
        min_cosine: the least mean cosine similarity each float output must keep with the float model on the
            calibration samples; ``None`` skips the check.
        low_accuracy: ``"raise"`` (default) refuses a model below ``min_cosine``; ``"warn"`` hands it over
            with a WARNING on the ``amdinfer.quantize`` logger.

    On MIGraphX native the quantizer maps to ``migraphx.quantize_int8(prog, target, calibration=[...],
    ins_names=["dot", "convolution"])``, on the ONNX Runtime MIGraphX EP to ``migraphx_int8_enable`` with a
    calibration table computed from the same data; settings they cannot express are reported.

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn, random_inputs
        >>> model = tiny_cnn()
        >>> data = [random_inputs(model, batch=2, seed=s) for s in range(4)]
        >>> q = Int8Quantizer(calibration=data, progress=False, cache=False)
        >>> qmodel = q.quantize(model)
        >>> "QuantizeLinear" in {n.op_type for n in qmodel.graph.node}
        True
        >>> engine = amdinfer.load(model, providers=["cpu"], quantizer=q)
        >>> engine.info.precision, engine.run(data[0])["logits"].shape
        ('int8', (2, 10))
    """

    precision = "int8"

    def __init__(
        self,
        calibration: Iterable[Any],
        *,
        preprocess: Sequence[Callable[[Any], Any]] | None = None,
        input_name: str | None = None,
        method: str = "minmax",
        percentile: float = 99.999,
        per_channel: bool = True,
        symmetric_activations: bool = False,
        reduce_range: bool | str = "auto",
        activation_type: str = "uint8",
        weight_type: str = "int8",
        format: str = "qdq",
        op_types: Sequence[str] | None = None,
        exclude_nodes: Sequence[str] = (),
        exclude_op_types: Sequence[str] = ("Softmax", "Sigmoid"),
        keep_last_n: int = 0,
        max_samples: int | None = None,
        detector_head: bool | None = None,
        progress: bool | None = None,
        cache: Any = None,
        prepare: bool = True,
        transformer: bool | None = None,
        min_cosine: float | None = 0.98,
        low_accuracy: str = "raise",
    ) -> None:
        if calibration is None:
            raise OptionError(
                "calibration: got None, expected an iterable of feed dicts, arrays or images; int8 needs "
                "calibration data (uncalibrated int8 gives wrong answers)"
            )
        if preprocess is not None and (callable(preprocess) or isinstance(preprocess, (str, bytes))):
            preprocess = [preprocess]  # type: ignore[list-item]
        if preprocess is not None and not all(callable(p) for p in preprocess):
            raise OptionError(f"preprocess: got {preprocess!r}, expected a list of callables")
        self._calibration = calibration
        self.preprocess = list(preprocess) if preprocess is not None else None
        if input_name is not None and not isinstance(input_name, str):
            raise OptionError(f"input_name: got {input_name!r}, expected a string")
        self.input_name = input_name
        self.method = choice("method", method, CALIBRATION_METHODS)
        if (
            not isinstance(percentile, (int, float))
            or isinstance(percentile, bool)
            or not math.isfinite(percentile)
            or not 50.0 < percentile <= 100.0
        ):
            raise OptionError(f"percentile: got {percentile!r}, expected a float in (50, 100]")
        self.percentile = float(percentile)
        self.per_channel = flag("per_channel", per_channel)
        self.symmetric_activations = flag("symmetric_activations", symmetric_activations)
        self.reduce_range, self.reduce_range_why = reduce_range_choice(reduce_range)
        self.activation_type = choice("activation_type", activation_type, QUANT_TYPES)
        self.weight_type = choice("weight_type", weight_type, QUANT_TYPES)
        self.format = choice("format", format, QUANT_FORMATS)
        self.op_types = None if op_types is None else _str_list("op_types", op_types)
        self.exclude_nodes = _str_list("exclude_nodes", exclude_nodes)
        self.exclude_op_types = _str_list("exclude_op_types", exclude_op_types)
        if not isinstance(keep_last_n, int) or isinstance(keep_last_n, bool) or keep_last_n < 0:
            raise OptionError(f"keep_last_n: got {keep_last_n!r}, expected an int >= 0")
        self.keep_last_n = keep_last_n
        if max_samples is not None and (
            not isinstance(max_samples, int) or isinstance(max_samples, bool) or max_samples < 1
        ):
            raise OptionError(f"max_samples: got {max_samples!r}, expected a positive int or None")
        self.max_samples = max_samples
        self.detector_head = None if detector_head is None else flag("detector_head", detector_head)
        #: The YOLO head kept in float on the last :meth:`quantize` (``None`` before it, or when there was none).
        self.head: DetectorHead | None = None
        self.progress = check_progress(progress)
        self.prepare = flag("prepare", prepare)
        self.transformer = None if transformer is None else flag("transformer", transformer)
        self.min_cosine = check_min_cosine(min_cosine)
        self.low_accuracy = check_low_accuracy(low_accuracy)
        #: What the accuracy check measured on the last :meth:`quantize` (``None`` before it, or without a check).
        self.agreement: AgreementCheck | None = None
        #: The last :meth:`quantize`'s precision certificate (the check's verdict, attached to the model it returned).
        self.certificate: PrecisionCertificate | None = None
        self._reused = False  # the last check's figures were the cached model's certificate's
        self._model_name: str | None = None  # the file quantize() was given, for its cache entry
        self._fresh: tuple[PrecisionCertificate, AgreementCheck] | None = None
        self._cache = resolve_cache(cache)
        self._only: list[str] | None = None
        self._shared = CalibrationData()

    # ------------------------------------------------------------------ data
    def calibration_items(self) -> list[Any]:
        """The calibration samples after ``preprocess`` (read once, then kept).

        Example:
            >>> q = Int8Quantizer(calibration=(np.zeros((3, 4, 4), np.float32) for _ in range(2)), progress=False)
            >>> len(q.calibration_items()), len(q.calibration_items())
            (2, 2)
        """
        return self._shared.items(
            self._calibration, preprocess=self.preprocess, max_samples=self.max_samples, progress=self.progress
        )

    def calibration_feeds(self, model: Any) -> list[dict[str, np.ndarray]]:
        """The calibration samples as feed dicts for ``model``'s inputs, checked (the one place every path reads).

        Each sample is checked once against the model's input spec (names; dtype, never cast; shape, with
        symbolic dims taking any size) and for NaN and inf. ``quantize``, the native MIGraphX plan and the
        ONNX Runtime MIGraphX EP's calibration table all read the data through here.

        Raises:
            InputError: the iterable gave no sample or raised while producing one, or a sample does not fit
                the model's inputs or holds a non-finite value; the message names the sample's index and
                the input.

        Example:
            >>> from amdinfer.testing.models import tiny_cnn
            >>> bad = np.zeros((1, 3, 32, 32), np.float32); bad[0, 0, 0, 0] = np.inf
            >>> q = Int8Quantizer(calibration=[np.zeros_like(bad), bad], progress=False)
            >>> q.calibration_feeds(tiny_cnn())  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            amdinfer.errors.InputError: calibration sample 1, input 'input': 1 non-finite value (inf) of 3072, ...
        """
        return self._shared.feeds(model, items=self.calibration_items, input_name=self.input_name)

    # ------------------------------------------------------------------ protocol
    def settings(self) -> dict[str, Any]:
        """The settings that change the quantized model (the calibration data is hashed separately).

        Example:
            >>> Int8Quantizer(calibration=[np.zeros((1, 3, 8, 8), np.float32)], cache=False).settings()["format"]
            'qdq'
        """
        out: dict[str, Any] = {
            "kind": "int8",
            "method": self.method,
            "percentile": self.percentile if self.method == "percentile" else None,
            "per_channel": self.per_channel,
            "symmetric_activations": self.symmetric_activations,
            "reduce_range": self.reduce_range,
            "activation_type": self.activation_type,
            "weight_type": self.weight_type,
            "format": self.format,
            "op_types": self.op_types,
            "exclude_nodes": list(self.exclude_nodes),
            "exclude_op_types": list(self.exclude_op_types),
            "keep_last_n": self.keep_last_n,
            "detector_head": self.detector_head,
            "prepare": self.prepare,
            "transformer": self.transformer,
        }
        if self._only is not None:
            out["only_nodes"] = list(self._only)
        return out

    def quantize(self, model: Any) -> onnx.ModelProto:
        """Return the int8 model (QDQ or QOperator, per ``format``).

        Args:
            model: path, bytes, ``onnx.ModelProto`` or :class:`~amdinfer.ModelSource`.

        Raises:
            ModelError: the model cannot be prepared (see :func:`~amdinfer.quantize.prepare_model`), a
                weight that would be quantized holds NaN or inf (the message names the initializer and its
                node), or ONNX Runtime's quantizer failed (the message names the step).
            InputError: a calibration sample does not fit the model's inputs or holds NaN or inf, ONNX
                Runtime failed running one (the message names the sample), or the calibration drives a
                tensor of the model to inf or NaN (the message names the tensor).
            OptionError: ``exclude_nodes`` names a node the model does not have.
            AgreementError: a float output's mean cosine similarity with the float model on the calibration
                samples is below ``min_cosine`` (with ``low_accuracy="raise"``); the message names the output,
                the figure and what to try.

        Example:
            >>> from amdinfer.testing.models import tiny_cnn, random_inputs
            >>> q = Int8Quantizer(calibration=[random_inputs(tiny_cnn())], progress=False, cache=False)
            >>> sorted({i.type.tensor_type.elem_type for i in q.quantize(tiny_cnn()).graph.input})
            [1]
        """
        prepared = prepare_model(model, optimize=self.prepare)
        source = ModelSource.from_any(model, check=False)
        float_sha = source.sha256
        self._model_name = source.name if not source.name.startswith("<") else None  # the cache entry's name
        quantized = self._quantize_prepared(prepared, check=(prepared, float_sha))
        if self.min_cosine is not None:
            self.agreement = self._check(quantized, prepared, float_sha)
            hints = (
                "DynamicInt8Quantizer() (activations quantized at run time), op_types=['MatMul', 'Gemm'] "
                "(and transformer=True for a Transformer), exclude_nodes= for the layers that lose most "
                "(evaluate(..., per_layer=True) or AutoMixedPrecision find them), method='percentile', more "
                "calibration samples, or Fp16Quantizer()"
            )
            name = prepared.graph.name or "<ModelProto>"
            enforce(self.agreement, what="int8 (static)", model=name, low_accuracy=self.low_accuracy, hints=hints)
        return quantized

    def _check(self, quantized: onnx.ModelProto, prepared: onnx.ModelProto, float_sha: str) -> AgreementCheck:
        """The accuracy check of ``quantized``, run once: a cached model's certificate gives its stored figures
        (:func:`~amdinfer.quantize._int8_certificate.check_once`); the certificate is attached to ``quantized``."""
        fresh, self._fresh = self._fresh, None
        if fresh is not None and fresh[0].matches(quantized):  # measured while the cache entry was built
            self.certificate, self._reused = fresh[0], False
            return fresh[1]
        feeds = self.calibration_feeds(prepared)
        assert self.min_cosine is not None
        self.certificate, check, self._reused = check_once(
            quantized, prepared, feeds, self.min_cosine, float_sha256=float_sha, quantizer=self
        )
        if self._reused:
            log.info("int8 accuracy check of %s: the cached model's stored verdict (%s) is reused, not run again",
                     prepared.graph.name or "<ModelProto>", self.certificate.verdict)  # fmt: skip
        return check

    def _transformer_on(self, prepared: onnx.ModelProto) -> bool:
        return is_transformer(prepared) if self.transformer is None else self.transformer

    def _op_types(self, prepared: onnx.ModelProto) -> list[str] | None:
        if self.op_types is None and self._transformer_on(prepared):
            return list(TRANSFORMER_OP_TYPES)
        return self.op_types

    def _find_head(self, prepared: onnx.ModelProto) -> DetectorHead | None:
        """The YOLO head to keep in float (``detector_head``), logged once per model."""
        if self.detector_head is False:
            return None
        head = detector_head(prepared)
        if head is None and self.detector_head:
            raise ModelError(
                f"detector_head=True: model {prepared.graph.name or '<ModelProto>'} has no YOLO decode head (an "
                "output made by a Concat of box and score decode ops after the last convolutions); pass "
                "detector_head=None or exclude_nodes= for the nodes to keep in float"
            )
        if head is not None and head != self.head:
            log.info("int8: %s (%s ... %s)", head.summary(), head.float_nodes[0], head.float_nodes[-1])
        return head

    def _excluded(self, prepared: onnx.ModelProto) -> list[str]:
        _check_nodes("exclude_nodes", self.exclude_nodes, prepared)
        out = list(self.exclude_nodes) + (mask_path_nodes(prepared) if self._transformer_on(prepared) else [])
        out += [n.name for n in prepared.graph.node if n.op_type in self.exclude_op_types]
        out += tail_nodes(prepared, self.keep_last_n)
        self.head = self._find_head(prepared)
        out += list(self.head.float_nodes) if self.head is not None else []
        return list(dict.fromkeys(out))

    def _calibration_cache_path(self, sha: str, feeds_hash: str, op_types: list[str] | None) -> Path:
        from ..cache import CompiledModelCache

        key = CompiledModelCache.key(
            model=sha, data=feeds_hash, method=self.method, percentile=self.percentile, op_types=op_types
        )
        return self._shared.scratch() / f"ranges-{key}.json"

    def _quantize_prepared(
        self, prepared: onnx.ModelProto, check: tuple[onnx.ModelProto, str] | None = None
    ) -> onnx.ModelProto:
        feeds = self.calibration_feeds(prepared)
        excluded = self._excluded(prepared)
        if self._only is not None:
            _check_nodes("only", self._only, prepared)
        src = ModelSource.from_any(prepared, check=False)
        feeds_hash = data_hash(feeds)
        if self._cache is None:
            return self._run_quantize_static(src, feeds, feeds_hash, excluded)
        parts = {
            "kind": INT8_KIND,
            "backend": "ort",  # onnxruntime.quantization wrote it
            "precision": "int8",
            "model": src.sha256,
            "settings": self.settings_hash(),
            "calibration": feeds_hash,
            "onnxruntime": _ort_version(),
        }
        key = self._cache.key(**parts)

        def build(tmp: Path) -> onnx.ModelProto:
            proto = self._run_quantize_static(src, feeds, feeds_hash, excluded)
            onnx.save_model(proto, str(tmp))  # first: a check that raises must not look like a vanished file
            if check is not None and self.min_cosine is not None:  # the entry stores the model with its verdict
                self._fresh = None
                agreement = self._check(proto, *check)
                self._fresh = (self.certificate, agreement) if self.certificate is not None else None
                onnx.save_model(proto, str(tmp))
            return proto

        def load(path: Path) -> onnx.ModelProto:
            return onnx.load_model(str(path))

        def meta() -> dict[str, Any]:
            fresh = {META_KEY: self._fresh[0].to_dict()} if self._fresh is not None else {}
            name = self._model_name or src.proto.graph.name or "<ModelProto>"
            return {"model": name, **fresh}  # the file's name, as the engines' entries (`amdinfer cache list`)

        try:
            proto, hit = self._cache.get_or_build(key, parts=parts, build=build, load=load, suffix=".onnx", meta=meta)
        except CacheError as exc:
            log.warning("int8 cache unusable (%s); quantizing without it", exc)
            return self._run_quantize_static(src, feeds, feeds_hash, excluded)
        if hit:
            log.info("int8 model for %s taken from the cache (%s)", src.sha256[:12], key)
        return proto

    def _run_quantize_static(
        self, src: ModelSource, feeds: list[dict[str, np.ndarray]], feeds_hash: str, excluded: list[str]
    ) -> onnx.ModelProto:
        _import_quantization()  # ONNX Runtime's tools load before anything is checked
        op_types = self._op_types(src.proto)
        nodes = quantized_nodes(src.proto, op_types=op_types, excluded=excluded, only=self._only)
        check_weights(src, nodes)
        ranges = self._calibration_cache_path(src.sha256, feeds_hash, op_types)
        transformer = self._transformer_on(src.proto)
        quantized = run_quantize_static(
            self,
            src,
            feeds,
            op_types=op_types,
            excluded=excluded,
            only=self._only,
            transformer=transformer,
            ranges=ranges,
        )
        if transformer:  # the residual stream stays float (format="qdq"; a no-op otherwise)
            float_readers_read_float(quantized, {n.name for n in nodes})
        return quantized

    # ------------------------------------------------------------------ description
    def describe(self) -> QuantizationSpec:
        """What this quantizer asks for, for engines with native int8 knobs (calibration data included).

        Example:
            >>> q = Int8Quantizer(calibration=[np.ones((1, 3, 4, 4), np.float32)], progress=False, cache=False)
            >>> spec = q.describe()
            >>> spec.precision, spec.calibration, spec.method
            ('int8', True, 'minmax')
        """
        return QuantizationSpec(
            precision="int8",
            node_block_list=tuple(self.exclude_nodes),
            keep_last_n=self.keep_last_n,
            mixed=self._only is not None,
            calibration=True,
            method=self.method,
            percentile=self.percentile if self.method == "percentile" else None,
            per_channel=self.per_channel,
            reduce_range=self.reduce_range,
            activation_type=self.activation_type,
            weight_type=self.weight_type,
            format=self.format,
            op_types=None if self.op_types is None else tuple(self.op_types),
            notes=self._notes(),
        )

    def _notes(self) -> tuple[str, ...]:
        notes = []
        if self.head is not None:
            notes.append(f"int8: {self.head.summary()} (its one Concat mixes box coordinates and class scores)")
        if self.agreement is not None:
            reused = " (the cached model's stored verdict, not run again)" if self._reused else ""
            notes.append(f"int8 accuracy check: {self.agreement.summary()}{reused}")
        return tuple(notes)

    def _with_float_nodes(self, keep: Sequence[str] = (), only: Sequence[str] | None = None) -> Int8Quantizer:
        clone = object.__new__(Int8Quantizer)
        clone.__dict__.update(self.__dict__)
        clone.exclude_nodes = list(dict.fromkeys(list(self.exclude_nodes) + list(keep)))
        clone._only = None if only is None else list(only)
        return clone  # shares _shared: the data is read once and calibration ranges are reused
