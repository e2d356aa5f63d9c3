"""The semantic segmentation recipe: :func:`segment` builds a :class:`Segmenter` (a class per pixel, any image size,
large images in blended patches; the geometry is :mod:`amdinfer.recipes._segment_plan`)."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Any

import numpy as np

from ..errors import OptionError
from ..model import ModelLike
from ..pipeline._executor import ByShape
from ._build import _decoder, _literal, class_names
from ._segment_plan import BLENDS, ImagePlan, blend_weights, plan_image

__all__ = ["Segmenter", "segment"]

#: what ``engine.info.settings`` holds the recipe's geometry and the shapes it fed under
SETTINGS_KEY = "segment"
#: ``size_step="auto"`` off the CPU: a canvas step of this many pixels (rounded up to the stride), so that a GPU
#: engine (ORT's CUDA EP builds per-shape state; MIGraphX compiles per shape) meets few shapes
_ACCELERATOR_STEP = 128
_DEFAULT_STRIDE = 32


def segment(
    model: ModelLike,
    *,
    stride: int | None = None,
    size_step: int | str = "auto",
    max_size: int | tuple[int, int] | None = None,
    patch: int | tuple[int, int] | None = None,
    patch_overlap: float = 0.25,
    blend: str = "linear",
    batch_size: int = 8,
    mean: Any = None,
    std: Any = None,
    labels: Any = None,
    channels: str = "RGB",
    probabilities: bool = False,
    decoder: str = "auto",
    keep_image: bool = True,
    backend: Any = "auto",
    **load_options: Any,
) -> Segmenter:
    """A semantic segmenter in one call: ``LoadImage -> pad -> Normalize(mean, std, 1/255) -> HwcToChw -> model ->
    blend -> cut -> argmax``, the classes back in the image's own pixels. Sizes: the model takes ``(N, 3, H, W)``
    with ``H`` and ``W`` multiples of its ``stride`` (argument, else metadata ``stride``, else 32) and answers
    ``(N, C, H, W)`` logits. Each image is **padded, never resized**, at the bottom and right (its edge pixels
    repeated) to the next multiple of ``size_step``, and the logits cut back: resizing would change the pixels the
    model sees and blur the map at thin structures, padding leaves every pixel as it is and changes the answers
    only within the receptive field of the padded edge. ``size_step`` (``"auto"``: the stride on the CPU, 128
    rounded up to the stride on an accelerator) is the bucket: every image of one step runs at one engine shape,
    so one engine serves many sizes without recompiling (the shapes fed are counted in
    ``engine.info.settings["segment"]``; :meth:`Segmenter.warm` prepares them).

    Large images: when the padded canvas exceeds the bound (``max_size``, else the engine's ``shapes=`` bound, else
    a fixed model's size; no bound: always whole), or when ``patch`` is given, the image runs in overlapping
    patches of ``patch`` pixels (default: the bound), origins on the stride so each patch's pooling grid is the
    image's, batched ``batch_size`` at a time through the pipeline executor; the logits are blended (``linear``
    ramps over each overlap, ``gaussian`` as nnU-Net, or ``mean``) and cut back. Where every patch that covers a
    pixel holds the pixel's whole receptive field, the blend equals the whole-image logits (tested).

    Args:
        model: the ONNX segmenter (path, bytes, ``onnx.ModelProto``), one input, one output.
        stride, size_step: see above (``size_step`` a multiple of the stride).
        max_size: the largest canvas run whole (an int for a square).
        patch: the patch ``(h, w)`` (an int for a square), multiples of the stride within the bound.
        patch_overlap: the fraction of a patch shared with its neighbour, in ``[0, 1)`` (rounded to the stride).
        blend: one of ``"linear"``, ``"gaussian"``, ``"mean"``.
        batch_size: patches (or whole images of one shape) per engine call (at most ``shapes=``' batch bound).
        mean, std: per-channel normalisation in fractions of 255 (default: metadata ``mean``/``std``, else none:
            pixels / 255).
        labels: class names (default: metadata ``names``).
        channels: the order of the arrays you pass, ``"RGB"`` or ``"BGR"``; the model gets RGB.
        probabilities, decoder, keep_image: keep the per-class softmax on each result; as for :func:`yolo`.
        backend, **load_options: :func:`amdinfer.load`'s arguments; an :class:`~amdinfer.Engine` as ``backend``
            runs as it is and stays yours (segmenters can share one; their ``close()`` leaves it open).

    Returns:
        A :class:`Segmenter`: call it on an image (array, path, bytes) or a list; results are
        :class:`~amdinfer.results.SegmentationMap`.

    Raises:
        OptionError: a bad argument (naming it), or a model that is not ``(N, 3, H, W) -> (N, C, H, W)``.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import unet
        >>> seg = segment(unet(), providers=["CPUExecutionProvider"])
        >>> image = np.zeros((30, 50, 3), np.uint8); image[:, 25:, 2] = 255  # dark left, blue right
        >>> result = seg(image)
        >>> result.image_shape, result.labels[result.classes[0, 0]], result.labels[result.classes[0, 49]]
        ((30, 50), 'dark', 'blue')
        >>> seg.close()
    """
    from .._load import load

    options = _options(blend, patch_overlap, batch_size, probabilities, keep_image, channels, decoder)

    engine = load(model, backend=backend, **load_options)
    owns = isinstance(backend, str)  # an Engine passed as backend runs as it is, and stays the caller's
    try:
        seg = Segmenter(engine, options, stride, size_step, max_size, patch, (mean, std, labels))
    except BaseException:
        if owns:
            engine.close()
        raise
    seg._owns_engine = owns
    return seg


def _options(
    blend: Any, overlap: Any, batch_size: Any, probs: Any, keep: Any, channels: Any, decoder: Any
) -> dict[str, Any]:
    """:func:`segment`'s options that need no model, checked."""
    from ..pipeline._source_images import check_keep

    if channels not in ("RGB", "BGR"):
        raise OptionError(f"channels: got {channels!r}, expected 'RGB' or 'BGR'")
    if blend not in BLENDS:
        raise OptionError(f"blend: got {blend!r}, expected one of {list(BLENDS)}")
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or not 0 <= overlap < 1:
        raise OptionError(f"patch_overlap: got {overlap!r}, expected a fraction in [0, 1)")
    if not isinstance(probs, bool):
        raise OptionError(f"probabilities: got {probs!r}, expected True or False")
    options = {"blend": blend, "overlap": float(overlap), "batch_size": _positive("batch_size", batch_size)}
    options.update(probs=probs, keep=check_keep(keep), channels=channels, decoder=_decoder(decoder))
    return options


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise OptionError(f"{name}: got {value!r}, expected an int >= 1")
    return int(value)


def _hw_arg(name: str, value: Any, stride: int) -> tuple[int, int] | None:
    if value is None:
        return None
    pair = (value, value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise OptionError(f"{name}: got {value!r}, expected an int or (height, width)")
    h, w = (_positive(name, v) for v in pair)
    if h < stride or w < stride:
        raise OptionError(f"{name}: got {(h, w)}, expected at least the stride {stride} on both sides")
    return (h, w)


class Segmenter:
    """What :func:`segment` returns: call it on an image or a list of them; results are
    :class:`~amdinfer.results.SegmentationMap`.

    Attributes:
        stride, size_step: the model's stride and the canvas step (see :func:`segment`).
        bound: the largest canvas ``(H, W)`` run whole, or ``None``.
        image_size: the nominal image ``(H, W)`` a server warms up at (see the property), or ``None``.
        patch: the patch size given, or ``None`` (the bound's when an image exceeds it).
        pipeline: the inner :class:`~amdinfer.Pipeline` (normalise, CHW, engine) that runs canvases and patches.

    Example:
        >>> import numpy as np
        >>> from amdinfer.testing.models import unet
        >>> with segment(unet(), patch=32, providers=["CPUExecutionProvider"]) as seg:
        ...     print(seg.plan((40, 70)).windows[:2], seg(np.zeros((40, 70, 3), np.uint8)).counts.tolist())
        ((0, 0, 32, 32), (0, 24, 32, 56)) [2800, 0, 0, 0, 0]
    """

    def __init__(
        self,
        engine: Any,
        options: dict[str, Any],
        stride: Any,
        size_step: Any,
        max_size: Any,
        patch: Any,
        norm: tuple[Any, Any, Any],
    ) -> None:
        from ..pipeline import Pipeline
        from ..preprocess import Cast, HwcToChw, LoadImage, Normalize

        self._options = options
        spec, fixed, classes = _check_model(engine)
        meta = {p.key: p.value for p in engine.model.proto.metadata_props}
        self.stride = _stride(stride, meta)
        self._nominal = _imgsz(meta, self.stride)
        self.size_step = _size_step(size_step, self.stride, engine)
        bounds = engine.shape_bounds.get(spec.name)
        limit = fixed or (tuple(bounds.max[2:4]) if bounds else None)  # what the engine takes at most
        self.bound = _hw_arg("max_size", max_size, self.stride) or limit
        self._minimum = fixed or (tuple(bounds.min[2:4]) if bounds else (1, 1))
        self.patch = _hw_arg("patch", patch, self.stride)
        self._check_sizes(fixed, limit, spec.name, bounds)
        self.labels = _labels(labels=norm[2], proto=engine.model.proto, classes=classes)
        mean, std = _fractions("mean", norm[0], meta), _fractions("std", norm[1], meta)
        stages: list[Any] = [Normalize(mean=mean, std=std, scale=1 / 255), HwcToChw()]
        stages += [Cast("float16")] if str(spec.dtype) == "float16" else []
        self.pipeline = Pipeline(preprocess=stages, engine=engine)
        self._load = LoadImage(options["channels"], backend=options["decoder"])
        self._lock = threading.Lock()
        self._owns_engine = True
        fed = engine.info.settings.get(SETTINGS_KEY, {}).get("shapes", {})  # an engine shared by segmenters
        engine.info.settings[SETTINGS_KEY] = {
            "stride": self.stride,
            "size_step": self.size_step,
            "bound": None if self.bound is None else list(self.bound),
            "patch": None if self.patch is None else list(self.patch),
            "blend": options["blend"],
            "shapes": fed,
        }

    def _check_sizes(self, fixed: tuple[int, int] | None, limit: Any, name: str, bounds: Any) -> None:
        rows = self._options["batch_size"]
        if bounds and bounds.max[0] < rows:  # refused here, not at the first image with that many patches
            raise OptionError(
                f"batch_size: got {rows}, expected at most {bounds.max[0]} (the batch bound of input {name!r}'s "
                f"shapes=); pass batch_size={bounds.max[0]} or widen shapes="
            )
        if limit is not None and self.bound is not None and (self.bound[0] > limit[0] or self.bound[1] > limit[1]):
            raise OptionError(f"max_size: got {self.bound}, expected at most {limit} (the model's size or shapes=)")
        low = self._minimum
        if self.patch is not None and (self.patch[0] < low[0] or self.patch[1] < low[1]):
            raise OptionError(f"patch: got {self.patch}, expected at least {low} (the engine's shapes= minimum)")
        if self.patch is not None and (self.patch[0] % self.stride or self.patch[1] % self.stride):
            raise OptionError(f"patch: got {self.patch}, expected multiples of the model's stride {self.stride}")
        if fixed is not None and self.patch is not None and self.patch != fixed:
            raise OptionError(f"patch: got {self.patch}, expected the model's fixed size {fixed} (or None)")
        big = self.patch is not None and self.bound is not None
        if big and (self.patch[0] > self.bound[0] or self.patch[1] > self.bound[1]):  # type: ignore[index]
            raise OptionError(f"patch: got {self.patch}, expected at most the bound {self.bound} (max_size, shapes=)")

    @property
    def image_size(self) -> tuple[int, int] | None:
        """The nominal image ``(H, W)``, the size a server warms up at (``PipelineWorker.warmup``): the patch, else
        the bound rounded down to the stride (the shape large images run at), else metadata ``imgsz``, else
        ``None`` (no bound: any size runs whole; the worker's small default picture).

        Example:
            >>> from amdinfer.testing.models import unet
            >>> with segment(unet(), max_size=102, providers=["CPUExecutionProvider"]) as seg:  # stride 4
            ...     print(seg.image_size, seg.plan(seg.image_size).windows, seg.plan((300, 200)).windows[0])
            (100, 100) ((0, 0, 100, 100),) (0, 0, 100, 100)
        """
        if self.patch is not None:
            return self.patch
        if self.bound is not None:
            return (self.bound[0] // self.stride * self.stride, self.bound[1] // self.stride * self.stride)
        return self._nominal

    @property
    def engine(self) -> Any:
        """The engine (the recipe's own: :meth:`close` closes it)."""
        return self.pipeline.engine

    def plan(self, shape: tuple[int, int]) -> ImagePlan:
        """Where an image of ``shape`` ``(h, w)`` runs: its canvas and windows
        (:class:`~amdinfer.recipes._segment_plan.ImagePlan`)."""
        h, w = (_positive("shape", v) for v in shape)
        return plan_image(
            h, w, stride=self.stride, size_step=self.size_step, bound=self.bound, patch=self.patch,
            overlap=self._options["overlap"], minimum=self._minimum,
        )  # fmt: skip

    def __call__(self, image: Any) -> Any:
        """One :class:`~amdinfer.results.SegmentationMap` for one image (array, path, bytes), a list for a list
        (a glob or a folder)."""
        from ..pipeline._source_images import call

        return call(self.run_batch, image)

    def run_batch(self, images: Any) -> list[Any]:
        """One result per image, in order; canvases and patches of one shape share engine calls."""
        from ..stages import Sample

        pictures, plans, items, owner = [], [], [], []
        for k, image in enumerate(images):
            rgb = self._load(Sample.wrap(image)).data
            rgb = rgb[..., ::-1] if self._options["channels"] == "BGR" else rgb
            plan = self.plan(rgb.shape[:2])
            canvas = _pad(rgb, plan.canvas)
            pictures.append(rgb)
            plans.append(plan)
            for y0, x0, y1, x1 in plan.windows:
                items.append(Sample(canvas[y0:y1, x0:x1], {}))
                owner.append(k)
        self._count(items)
        logits = self.pipeline._run_call(items, ByShape(size=self._options["batch_size"]))
        out, start = [], 0
        for k, plan in enumerate(plans):
            n = len(plan.windows)
            out.append(self._result(pictures[k], plan, logits[start : start + n]))
            start += n
        return out

    def warm(self, sizes: Any) -> list[tuple[int, int, int]]:
        """Run the engine once at each shape that images of ``sizes`` (``(h, w)`` pairs) meet, so those are its
        prepared shapes (``on_new_shape``: with ``"error"`` any other shape is refused, never compiled on the
        request path): each canvas or patch shape at the engine's ``batch_buckets`` (else 1 and ``batch_size``
        rows). Returns the ``(rows, H, W)`` run.

        Example:
            >>> import amdinfer
            >>> from amdinfer.testing.models import unet
            >>> engine = amdinfer.load(unet(), providers=["CPUExecutionProvider"], on_new_shape="error",
            ...                        batch_buckets=[1, 4])
            >>> seg = segment(unet(), backend=engine, size_step=32, batch_size=4)
            >>> seg.warm([(30, 50), (60, 60)])
            [(1, 32, 64), (4, 32, 64), (1, 64, 64), (4, 64, 64)]
            >>> seg(np.zeros((20, 40, 3), np.uint8)).image_shape  # a warmed shape: runs
            (20, 40)
            >>> seg(np.zeros((100, 100, 3), np.uint8))  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            amdinfer.errors.StageInputError: ... shape (1, 3, 128, 128) is not a prepared shape ...
            >>> engine.close()
        """
        from ..stages import Sample

        shapes = sorted({(y1 - y0, x1 - x0) for hw in sizes for y0, x0, y1, x1 in self.plan(hw).windows})
        rows = self.engine.batch_buckets or tuple(sorted({1, self._options["batch_size"]}))
        done = []
        new_shapes = getattr(self.engine, "_new_shapes", None)  # the engine's warm-up block (prepared shapes)
        with new_shapes.warm() if new_shapes is not None else contextlib.nullcontext():
            for h, w in shapes:
                for n in rows:
                    items = [Sample(np.zeros((h, w, 3), np.uint8), {}) for _ in range(n)]
                    self.pipeline._run_items(items, ByShape(size=n))
                    done.append((int(n), h, w))
        return done

    def map(self, source: Any, *, batch_size: int | str | None = "auto") -> _Results:
        """Results for an iterable of images (or a glob, a folder), in order, ``batch_size`` images per
        :meth:`run_batch` (``"auto"``/``None``: one; their patches batch by ``batch_size`` of :func:`segment`);
        a context manager, as :meth:`amdinfer.Pipeline.map`'s.

        Example:
            >>> import numpy as np
            >>> from amdinfer.testing.models import unet
            >>> with segment(unet(), providers=["CPUExecutionProvider"]) as seg:
            ...     with seg.map([np.zeros((8, 8, 3), np.uint8)] * 3, batch_size=2) as results:
            ...         print([r.image_shape for r in results])
            [(8, 8), (8, 8), (8, 8)]
        """
        from ..pipeline._sources import expand

        n = 1 if batch_size in ("auto", None) else _positive("batch_size", batch_size)
        items = expand(source)[0] if isinstance(source, (str, bytes)) or hasattr(source, "__fspath__") else source
        return _Results(self, iter(items), n)

    def _count(self, items: list[Any]) -> None:
        shapes = Counter(f"{s.data.shape[0]}x{s.data.shape[1]}" for s in items)
        with self._lock:
            fed = self.engine.info.settings[SETTINGS_KEY]["shapes"]
            for key, n in shapes.items():
                fed[key] = fed.get(key, 0) + n

    def _result(self, rgb: np.ndarray, plan: ImagePlan, logits: list[np.ndarray]) -> Any:
        from ..results import SegmentationMap

        h, w = plan.size
        if plan.patched:
            acc = np.zeros((logits[0].shape[0], *plan.canvas), np.float32)
            total = np.zeros(plan.canvas, np.float32)
            for i, (y0, x0, y1, x1) in enumerate(plan.windows):
                weight = blend_weights(plan, i, self._options["blend"])
                acc[:, y0:y1, x0:x1] += weight * np.asarray(logits[i], np.float32)
                total[y0:y1, x0:x1] += weight
            full = acc[:, :h, :w] / total[:h, :w]
        else:
            full = np.asarray(logits[0], np.float32)[:, :h, :w]
        probs = None
        if self._options["probs"]:
            e = np.exp(full - full.max(axis=0, keepdims=True))
            probs = e / e.sum(axis=0, keepdims=True)
        image = np.ascontiguousarray(rgb) if self._options["keep"] else None
        return SegmentationMap(full.argmax(axis=0), probabilities=probs, labels=self.labels, image=image,
                               num_classes=full.shape[0])  # fmt: skip

    def close(self) -> None:
        """Close the engine (unless it was passed in as ``backend``)."""
        self.pipeline.close()
        if self._owns_engine:
            self.engine.close()

    def __enter__(self) -> Segmenter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Segmenter({type(self.engine).__name__}, stride={self.stride}, size_step={self.size_step}, "
            f"bound={self.bound}, patch={self.patch}, blend={self._options['blend']!r})"
        )


class _Results:
    """:meth:`Segmenter.map`'s iterator: chunks of ``n`` images through ``run_batch``; closing stops it."""

    def __init__(self, seg: Segmenter, items: Any, n: int) -> None:
        self._seg, self._items, self._n = seg, items, n
        self._ready: Any = iter(())

    def __iter__(self) -> _Results:
        return self

    def __next__(self) -> Any:
        for result in self._ready:
            return result
        chunk = [x for _, x in zip(range(self._n), self._items)]
        if not chunk:
            raise StopIteration
        self._ready = iter(self._seg.run_batch(chunk))
        return next(self._ready)

    def close(self) -> None:
        self._items = iter(())

    def __enter__(self) -> _Results:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_model(engine: Any) -> tuple[Any, tuple[int, int] | None, int | None]:
    """The image input, its fixed ``(H, W)`` (``None`` when dynamic) and the class count (``None``: dynamic)."""
    if len(engine.inputs) != 1 or len(engine.outputs) != 1:
        raise OptionError(
            f"model: got inputs {[s.name for s in engine.inputs]} and outputs {[s.name for s in engine.outputs]}, "
            "expected one image input (N, 3, H, W) and one logits output (N, C, H, W)"
        )
    spec, out = engine.inputs[0], engine.outputs[0]
    dims, odims = list(spec.shape), list(out.shape)
    if len(dims) != 4 or (isinstance(dims[1], int) and dims[1] != 3) or len(odims) != 4:
        raise OptionError(
            f"model: input {spec.name!r} {tuple(dims)} and output {out.name!r} {tuple(odims)}, expected "
            "(N, 3, H, W) -> (N, C, H, W) logits"
        )
    h, w = dims[2], dims[3]
    fixed = (h, w) if isinstance(h, int) and isinstance(w, int) else None
    return spec, fixed, odims[1] if isinstance(odims[1], int) else None


def _stride(stride: Any, meta: dict[str, str]) -> int:
    if stride is not None:
        return _positive("stride", stride)
    raw = _literal(meta.get("stride"))
    if isinstance(raw, (list, tuple)) and raw:
        raw = max(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
        return raw
    return _DEFAULT_STRIDE


def _imgsz(meta: dict[str, str], stride: int) -> tuple[int, int] | None:
    """Metadata ``imgsz`` (Ultralytics: an int or ``[h, w]``) as ``(H, W)`` on the stride, or ``None``."""
    raw = _literal(meta.get("imgsz"))
    raw = [raw, raw] if isinstance(raw, int) else raw
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= stride for v in raw):
        return None
    return (raw[0] // stride * stride, raw[1] // stride * stride)


def _size_step(size_step: Any, stride: int, engine: Any) -> int:
    if isinstance(size_step, str) and size_step == "auto":
        on_cpu = str(engine.info.device).split(":")[0] == "cpu"
        return stride if on_cpu else -(-_ACCELERATOR_STEP // stride) * stride
    step = _positive("size_step", size_step) if not isinstance(size_step, str) else None
    if step is None or step % stride:
        raise OptionError(f"size_step: got {size_step!r}, expected 'auto' or a multiple of the stride {stride}")
    return step


def _labels(*, labels: Any, proto: Any, classes: int | None) -> list[str] | None:
    names = class_names(proto) if labels is None else labels
    if names is None:
        return None
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names)]
    out = [str(n) for n in names]
    if classes is not None and len(out) != classes:
        raise OptionError(f"labels: got {len(out)} names, expected {classes} (the model's output has {classes})")
    return out


def _fractions(name: str, value: Any, meta: dict[str, str]) -> Any:
    from ._classify import _fractions as read

    return read(name, value, meta, None)


def _pad(image: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
    """``image`` padded at the bottom and right to ``canvas``, its edge pixels repeated (a view when it fits)."""
    h, w = image.shape[:2]
    if (h, w) == canvas:
        return image
    pads = [(0, canvas[0] - h), (0, canvas[1] - w)] + [(0, 0)] * (image.ndim - 2)
    return np.pad(image, pads, mode="edge")
