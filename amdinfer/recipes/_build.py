"""What the vision recipes share: load the model, build the pipeline of a recipe's stages, calibrate int8 on the
recipe's own preprocessing, fuse when asked; and the class names of a model's metadata."""

from __future__ import annotations

import ast
from typing import Any

import onnx

from .._support._recipes import DECODERS
from ..errors import OptionError
from ..model import ModelLike, ModelSource

__all__ = ["class_names"]

_CHANNELS = ("RGB", "BGR")


def _check_fuse(fuse: Any) -> None:
    if fuse is not True and fuse is not False and not (isinstance(fuse, str) and fuse == "auto"):
        raise OptionError(f"fuse: got {fuse!r}, expected True, False or 'auto'")


def _finish(pipe: Any, fuse: bool | str, load_options: dict[str, Any], geometry: str = "auto") -> Any:
    """The recipe's result: ``pipe`` itself (stage by stage), its fused form, or, where equal frames get the
    geometry in the graph, a :class:`~amdinfer.recipes._frames.FramePipeline` (``pipe`` closed; it fuses from it)."""
    from ._dynamic_batch import carry_record
    from ._frames import MIN_FRAMES, FramePipeline, geometry_plan

    pipe._owns_engine = True
    pipe._load_options = dict(load_options)  # the fused engine is loaded with the caller's options too
    device = str(pipe.engine.info.device).split(":")[0]
    try:
        plan = geometry_plan(geometry, fuse, device)
    except OptionError:
        pipe.close()
        raise
    if not plan.fuse:
        return pipe
    try:
        fused = pipe.fuse()
    except OptionError as exc:
        pipe.close()
        if fuse != "auto":
            raise
        raise OptionError(f"{exc} (fuse='auto' fuses on {device}; fuse=False runs stage by stage)") from exc
    pipe.close()
    carry_record(pipe.engine, fused.engine)  # settings["dynamic_batch"] on the engine the user holds
    if not plan.graph:
        return fused
    try:
        return FramePipeline(fused, pipe, plan, minimum=1 if geometry == "graph" else MIN_FRAMES)
    except BaseException:
        fused.close()
        raise


def class_names(model: ModelLike) -> tuple[str, ...] | None:
    """Class names from the model's ONNX metadata ``names`` (what Ultralytics exports write:
    ``"{0: 'person', 1: 'bicycle', ...}"``), or ``None`` when there are none.

    Raises:
        ModelError: the model cannot be read.

    Example:
        >>> from amdinfer.testing.models import tiny_cnn
        >>> m = tiny_cnn()
        >>> _ = m.metadata_props.add(key="names", value="{0: 'cat', 1: 'dog'}")
        >>> class_names(m)
        ('cat', 'dog')
    """
    proto = model if isinstance(model, onnx.ModelProto) else ModelSource.from_any(model).proto
    raw = next((p.value for p in proto.metadata_props if p.key == "names"), None)
    if raw is None:
        return None
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, dict) and sorted(value) == list(range(len(value))):
        return tuple(str(value[k]) for k in range(len(value)))
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return None


def _decoder(choice: str = "auto") -> str:
    """The recipes' image decoder (``LoadImage``'s backend): for ``"auto"``, OpenCV when installed (what
    Ultralytics decodes with; on the H200 host's 16 cores 1,292 JPEG pages/s against Pillow's 496), else Pillow;
    otherwise the one named (``"nvjpeg"``: JPEG files on the GPU)."""
    from ..preprocess import opencv_available

    if choice not in DECODERS:
        raise OptionError(f"decoder: got {choice!r}, expected one of {DECODERS}")
    if choice != "auto":
        return choice
    return "opencv" if opencv_available() else "auto"


def _recipe(
    model: ModelLike, stages: Any, args: dict[str, Any], channels: str, fuse: Any, backend: str, load: dict[str, Any]
) -> Any:
    """Load ``model`` (its batch axis made dynamic as ``args["dynamic_batch"]`` says:
    :mod:`amdinfer.recipes._dynamic_batch`), build the pipeline of ``stages(engine, args, channels)``, fuse it when
    asked."""
    from ..pipeline import Pipeline
    from ..pipeline._source_images import check_keep
    from ..pipeline.fuse._model import check_fixed_buckets
    from ._dynamic_batch import check_dynamic_batch, load_engine
    from ._frames import geometry_plan

    if channels not in _CHANNELS:
        raise OptionError(f"channels: got {channels!r}, expected one of {_CHANNELS}")
    _check_fuse(fuse)
    check_dynamic_batch(args.get("dynamic_batch", "auto"))
    geometry_plan(args.get("geometry", "auto"), fuse, "cpu")  # a bad geometry is refused before the model loads
    keep = check_keep(args["keep_image"])
    from .._load import _check_load_options
    from ..quantize._data import check_calibration

    _check_load_options(load, backend, also=list(args))  # a misspelt keyword: the closest names, the recipe's too

    if check_calibration(args["calibration"], load):
        model = ModelSource.from_any(model)  # read once: the calibration's stages and the engine share it
        load = {**load, "quantizer": _calibrated(model, stages, args, channels)}
    engine = load_engine(model, args.get("dynamic_batch", "auto"), backend, load)
    try:
        check_fixed_buckets(_fixed_batch(engine), engine.batch_buckets)
        preprocess, postprocess = stages(engine, args, channels)
        pipe = Pipeline(preprocess=preprocess, engine=engine, postprocess=postprocess, keep_image=keep)
    except Exception:
        engine.close()
        raise
    return _finish(pipe, fuse, load, args.get("geometry", "auto"))


def _fixed_batch(engine: Any) -> int | None:
    """The model's fixed batch: axis 0 of its first input when that is a number (a batch-1 export), else ``None``."""
    shape = engine.inputs[0].shape if engine.inputs else ()
    first = shape[0] if shape else None
    return int(first) if isinstance(first, int) and not isinstance(first, bool) else None


def _calibrated(source: ModelSource, stages: Any, args: dict[str, Any], channels: str) -> Any:
    """An :class:`~amdinfer.quantize.Int8Quantizer` on ``args["calibration"]`` run through the recipe's own
    preprocessing (built for the float model's inputs, which int8 keeps)."""
    from types import SimpleNamespace

    from ..quantize import Int8Quantizer
    from ..quantize._data import materialize
    from ..stages import Sample

    spec = SimpleNamespace(model=source, inputs=source.inputs, outputs=source.outputs)
    preprocess, _ = stages(spec, args, channels)
    samples = materialize(args["calibration"], what="calibration", preprocess=[Sample.wrap, *preprocess])
    return Int8Quantizer(calibration=samples, progress=False)


def _literal(raw: str | None) -> Any:
    try:
        return None if raw is None else ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return None


def _slicing(tiles: Any, overlap: Any, merge: Any, agnostic: bool) -> Any:
    """A detector recipe's ``tiles=``/``tile_overlap=``/``tile_merge=``: ``(Tiles, MergeTiles)``, or ``None`` for
    whole-image inference (checked before the model loads)."""
    if tiles is None:
        return None
    from ..pipeline._slices import MergeTiles, Tiles
    from ..preprocess import _hw

    if isinstance(tiles, Tiles):
        tiler = tiles
    else:
        h, w = _hw("tiles", tiles)
        pair = overlap if isinstance(overlap, (tuple, list)) and len(overlap) == 2 else (overlap, overlap)
        tiler = Tiles(h, w, overlap_height_ratio=pair[0], overlap_width_ratio=pair[1])
    if isinstance(merge, MergeTiles):
        return tiler, merge
    if not isinstance(merge, str):
        raise OptionError(f"tile_merge: got {merge!r}, expected 'GREEDYNMM', 'NMS' or an amdinfer.pipeline.MergeTiles")
    return tiler, MergeTiles(postprocess_type=merge, postprocess_class_agnostic=bool(agnostic))


def _sliced(pipe: Any, slicing: Any) -> Any:
    """``pipe``, or with ``slicing`` (:func:`_slicing`) a :class:`~amdinfer.pipeline.SlicedPipeline` that owns it."""
    if slicing is None:
        return pipe
    from ..pipeline._slices import SlicedPipeline

    return SlicedPipeline(pipe, tiles=slicing[0], merge=slicing[1], owns_detector=True)
