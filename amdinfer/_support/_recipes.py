"""The recipe registry: one frozen :class:`Recipe` per recipe (``yolo``, ``classify``, ``ocr``, ``segment``,
``embed``).

Each record says what builds it (a dotted path, imported on first use, so that this table costs nothing to
import), the task its answers are judged in (:func:`amdinfer.quantize.task_from_model`), and the options the
server takes for it: the builder's options with their types, which of them are ``amdinfer serve`` flags, the
second models it loads (``ocr``'s ``rec`` and ``cls``) and the server's own options (``pipeline_threads``,
``max_image_pixels``). The Python API (``amdinfer.yolo`` ...), ``amdinfer serve --recipe``, ``serve(recipe=...)``,
the model repository and :mod:`amdinfer.quantize` all read this table; it lives here, below all of them, so
that none imports upward to reach it.

Example:
    >>> get_recipe("ocr").task, [o.name for o in get_recipe("ocr").models]
    ('ocr', ['rec', 'cls'])
    >>> get_recipe("yolo").check_options({"conf": 0.3, "max_image_pixels": 4096}, "recipe_options")
    {'conf': 0.3, 'max_image_pixels': 4096}
    >>> get_recipe("yolov9")
    Traceback (most recent call last):
    ...
    amdinfer.errors.OptionError: recipe: got 'yolov9', expected one of ['yolo', 'classify', 'ocr', 'segment', 'embed']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

__all__ = [
    "DECODERS", "GEOMETRIES", "RECIPES", "SERVED_RECIPES", "Recipe", "RecipeOption", "get_recipe", "parse_size",
]  # fmt: skip


@dataclass(frozen=True)
class RecipeOption:
    """One option of a recipe that the server takes (``serve(recipe_options=...)``, ``models.toml``, a flag).

    Attributes:
        name: the builder's keyword argument and the flag's argparse dest (``max_det``: ``--max-det``).
        kinds: the Python types a value may have; the first parses the flag's text. An int is taken for a
            float, a bool only where ``bool`` is listed.
        help: what it is, for ``--help`` and messages.
        choices: the values it may take (empty: any value of ``kinds``).
        flag: an ``amdinfer serve`` flag (else ``recipe_options=`` and ``models.toml`` only).
        model: a path to a further model the recipe loads (in a model repository: a path inside its folder).
        required: the recipe cannot be built without it.
        parse: turns a value of :attr:`kinds` into the builder's (``"640x480"`` -> ``(640, 480)``), or raises
            ``ValueError`` saying what it takes (``None``: the value as it is).

    Example:
        >>> RecipeOption("max_det", (int,), "boxes per image at most").cli
        '--max-det'
    """

    name: str
    kinds: tuple[type, ...]
    help: str
    choices: tuple[Any, ...] = ()
    flag: bool = True
    model: bool = False
    required: bool = False
    parse: Callable[[Any], Any] | None = None

    @property
    def cli(self) -> str:
        """The flag: ``--`` and the name with dashes."""
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any, where: str) -> Any:
        """``value`` when it is one of :attr:`kinds` (and :attr:`choices`); else an ``OptionError``.

        Example:
            >>> RecipeOption("conf", (float,), "confidence threshold").check(True, "recipe_options")
            Traceback (most recent call last):
            ...
            amdinfer.errors.OptionError: recipe_options: option 'conf' got True, expected a float
        """
        kinds = (*self.kinds, int) if float in self.kinds else self.kinds
        ok = isinstance(value, kinds) and (bool in self.kinds or not isinstance(value, bool))
        if ok and self.choices:
            ok = any(value is c or (type(value) is type(c) and value == c) for c in self.choices)
        if not ok:
            named = [("an " if k.__name__[0] in "aeiou" else "a ") + k.__name__ for k in self.kinds]
            expected = f"one of {list(self.choices)}" if self.choices else " or ".join(named)
            raise OptionError(f"{where}: option {self.name!r} got {repr(value)[:80]}, expected {expected}")
        if self.parse is not None:
            try:
                return self.parse(value)
            except ValueError as exc:
                raise OptionError(f"{where}: option {self.name!r} got {repr(value)[:80]}, expected {exc}") from None
        return value


@dataclass(frozen=True)
class Recipe:
    """One recipe: what builds it, what task judges it, and the options the server takes for it.

    Attributes:
        name: ``amdinfer serve --recipe NAME``, ``serve(recipe=NAME)``, ``recipe = "NAME"`` in ``models.toml``.
        builder: ``"module:function"``, imported on first use (:meth:`builder_function`).
        summary: one line for ``--help``: the public function and what the served model is.
        task: the task its answers are judged in (``detect``, ``classify``, ``ocr``, ``embed``).
        options: the builder's options the server takes (:class:`RecipeOption`), further models included.
        server_options: the server's own options for it (``pipeline_threads``, ``max_image_pixels``; bounded by
            :mod:`amdinfer.serve._bounds`).
        not_served: why the server does not serve it (empty: it does).

    Example:
        >>> yolo = get_recipe("yolo")
        >>> yolo.builder, yolo.task, yolo.flags[:2]
        ('amdinfer.recipes:yolo', 'detect', ('conf', 'iou'))
    """

    name: str
    builder: str
    summary: str
    task: str
    options: tuple[RecipeOption, ...] = ()
    server_options: tuple[str, ...] = ()
    not_served: str = ""

    @property
    def models(self) -> tuple[RecipeOption, ...]:
        """The options that name further models (``ocr``: ``rec``, ``cls``)."""
        return tuple(o for o in self.options if o.model)

    @property
    def flags(self) -> tuple[str, ...]:
        """The ``amdinfer serve`` flags (argparse dests) of this recipe: its flag options, then the server's."""
        return (*(o.name for o in self.options if o.flag), *self.server_options)

    @property
    def accepts(self) -> tuple[str, ...]:
        """Every name ``recipe_options`` may hold (flags or not)."""
        return (*(o.name for o in self.options), *self.server_options)

    def builder_function(self) -> Callable[..., Any]:
        """The builder, imported now (``amdinfer.recipes:yolo`` -> :func:`amdinfer.yolo`).

        Example:
            >>> import amdinfer
            >>> get_recipe("classify").builder_function() is amdinfer.classify
            True
        """
        module, _, attr = self.builder.partition(":")
        return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]

    def check_options(self, options: Mapping[str, Any], where: str) -> dict[str, Any]:
        """``options`` as a dict (values parsed: ``tiles="640x480"`` -> ``(640, 480)``) when every name is one
        this recipe takes, every builder option has its type, and every required model is given; else an
        ``OptionError`` naming what is wrong and what it takes. The server's options are left to the server's bounds.

        Example:
            >>> get_recipe("classify").check_options({"conf": 0.5}, "recipe_options")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            amdinfer.errors.OptionError: recipe_options: got option 'conf' for recipe 'classify', expected ... 'topk']
            >>> get_recipe("ocr").check_options({}, "recipe_options")
            Traceback (most recent call last):
            ...
            amdinfer.errors.OptionError: recipe_options: 'ocr' needs rec (the recogniser model; cls, the \
classifier, is optional)
        """
        by_name = {o.name: o for o in self.options}
        out = dict(options)
        for key, value in out.items():
            if key not in self.accepts:
                raise OptionError(
                    f"{where}: got option {str(key)[:80]!r} for recipe {self.name!r}, expected options among "
                    f"{sorted(self.accepts)}"
                )
            if key in by_name and value is not None:
                out[key] = by_name[key].check(value, where)
        missing = [m for m in self.models if m.required and out.get(m.name) is None]
        if missing:
            optional = [f"{m.name}, {m.help}, is optional" for m in self.models if not m.required]
            what = "; ".join([*(m.help for m in missing), *optional])
            raise OptionError(f"{where}: {self.name!r} needs {', '.join(m.name for m in missing)} ({what})")
        return out


#: the recipes' image decoders (``LoadImage`` backends; ``auto``: OpenCV when installed, else Pillow)
DECODERS = ("auto", "opencv", "pillow", "nvjpeg")
_DECODER = RecipeOption(
    "decoder", (str,), "the image decoder (default auto: OpenCV when installed, else Pillow)", choices=DECODERS
)
_FUSE = RecipeOption(
    "fuse", (bool, str), "the fused graph (true), stage by stage (false) or auto (fused on an accelerator)",
    choices=(True, False, "auto"), flag=False,
)  # fmt: skip
#: where the vision recipes resize and crop equal frames (``auto``: in the graph on an accelerator, one fused
#: engine per frame size; ``host``; ``graph``; see :mod:`amdinfer.recipes._frames`)
GEOMETRIES = ("auto", "host", "graph")
_GEOMETRY = RecipeOption(
    "geometry", (str,), "where equal frames are resized and cropped: auto (in the graph on an accelerator), host "
    "or graph", choices=GEOMETRIES, flag=False,
)  # fmt: skip
#: whether a batch-1 export gets a dynamic batch (auto: on an accelerator, when proven; recipes._dynamic_batch)
_DYNAMIC_BATCH = RecipeOption(
    "dynamic_batch", (bool, str), "a batch-1 export made batch-dynamic: auto (on an accelerator, when proven), true "
    "(any device) or false (never)", choices=(True, False, "auto"), flag=False,
)  # fmt: skip
_SIZE = "an int N (N x N), 'HxW' (e.g. '640x480') or [H, W] of positive ints"


def parse_size(value: Any) -> int | tuple[int, int]:
    """A size option's value as the builder takes it: an int, or ``(h, w)`` from ``"HxW"``, ``"H,W"``, ``"N"``
    (a flag's text, or ``str()`` of a list carried to a server process) or a two-int list.

    Raises:
        ValueError: anything else, saying what it takes.

    Example:
        >>> parse_size("640x480"), parse_size("[320, 320]"), parse_size(512), parse_size([64, 96])
        ((640, 480), (320, 320), 512, (64, 96))
    """
    parts: list[Any]
    if isinstance(value, str):
        text = value.strip().strip("[]()").replace("x", ",").replace("X", ",")
        parts = [p.strip() for p in text.split(",")]
        if not all(p.isdigit() for p in parts):
            raise ValueError(_SIZE)
        parts = [int(p) for p in parts]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        parts = [value]
    ok = len(parts) in (1, 2) and all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in parts)
    if not ok:
        raise ValueError(_SIZE)
    return int(parts[0]) if len(parts) == 1 else (int(parts[0]), int(parts[1]))


def _fraction(value: Any) -> float:
    """An overlap: a float in ``[0, 1)``."""
    if not 0 <= float(value) < 1:
        raise ValueError("a fraction in [0, 1)")
    return float(value)


def _step(value: Any) -> int | str:
    """``size_step``: ``"auto"`` or a positive int (a flag's text too)."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise ValueError("'auto' or a positive int")
    return value


def _labels(value: Any) -> list[str]:
    """Class names: a list of strings."""
    if not all(isinstance(v, str) for v in value):
        raise ValueError("a list of class names (strings)")
    return list(value)


_DETECT_TILES = (
    RecipeOption(
        "tiles", (str, int, list, tuple), "sliced inference (SAHI's): tiles of HxW pixels (or N: square), each "
        "answered, plus the whole image, merged back (default: the whole image only)", parse=parse_size,
    ),
    RecipeOption("tile_overlap", (float,), "with --tiles: the tiles' overlap, a fraction in [0, 1) (default 0.2)",
                 parse=_fraction),
    RecipeOption("tile_merge", (str,), "with tiles: GREEDYNMM (SAHI's default) or NMS", choices=("GREEDYNMM", "NMS"),
                 flag=False),
)  # fmt: skip
_SEGMENT = (
    RecipeOption("patch", (str, int, list, tuple), "large images in overlapping patches of HxW pixels (or N), "
                 "multiples of the stride (default: whole, up to max_size)", parse=parse_size),
    RecipeOption("patch_overlap", (float,), "the patches' overlap, a fraction in [0, 1) (default 0.25)",
                 parse=_fraction),
    RecipeOption("size_step", (str, int), "images padded to a multiple of this (default auto: the stride on the "
                 "CPU, 128 on an accelerator)", parse=_step),
    RecipeOption("max_size", (str, int, list, tuple), "the largest canvas run whole, HxW (or N); larger images run "
                 "in patches (default: the engine's bound)", parse=parse_size),
    _DECODER,
    RecipeOption("blend", (str,), "how patches are blended: linear, gaussian or mean (default linear)",
                 choices=("linear", "gaussian", "mean"), flag=False),
    RecipeOption("batch_size", (int,), "patches per engine call (default 8)", flag=False),
    RecipeOption("stride", (int,), "the model's stride (default: metadata stride, else 32)", flag=False),
    RecipeOption("labels", (list,), "class names (default: metadata names)", flag=False, parse=_labels),
)  # fmt: skip
#: what every image recipe's server options are: its decode threads and the pixel limit of its images
_IMAGE_SERVER = ("pipeline_threads", "max_image_pixels")

#: Every recipe, by name, in the order ``--help`` lists them.
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "yolo",
            "amdinfer.recipes:yolo",
            "amdinfer.yolo, a YOLO detector",
            "detect",
            (
                RecipeOption("conf", (float,), "confidence threshold (default 0.25)"),
                RecipeOption("iou", (float,), "NMS IoU threshold (default 0.7)"),
                RecipeOption("imgsz", (int,), "letterbox size (default 640)"),
                RecipeOption("max_det", (int,), "boxes per image at most (default 300)"),
                _DECODER,
                RecipeOption("agnostic", (bool,), "class-agnostic NMS (default false)", flag=False),
                _FUSE,
                _GEOMETRY,
                _DYNAMIC_BATCH,
                RecipeOption(
                    "task",
                    (str,),
                    "auto (the model's metadata, else its outputs), detect, segment (masks) or pose (keypoints)",
                    choices=("auto", "detect", "segment", "pose"),
                    flag=False,
                ),
                RecipeOption(
                    "retina_masks", (bool,), "segment: masks made at the image's size (default false)", flag=False
                ),
                *_DETECT_TILES,
            ),
            _IMAGE_SERVER,
        ),
        Recipe(
            "classify",
            "amdinfer.recipes:classify",
            "amdinfer.classify, an image classifier",
            "classify",
            (RecipeOption("topk", (int,), "classes per image (default 5)"), _DECODER, _FUSE, _GEOMETRY, _DYNAMIC_BATCH),
            _IMAGE_SERVER,
        ),
        Recipe(
            "ocr",
            "amdinfer.text:ocr",
            "amdinfer.ocr, PP-OCR's det -> cls -> rec cascade (the model: the text detector)",
            "ocr",
            (
                RecipeOption("rec", (str,), "the recogniser model", model=True, required=True),
                RecipeOption("cls", (str,), "the classifier", model=True),
                RecipeOption("text_score", (float,), "lowest line score kept (default 0.5)"),
            ),
            _IMAGE_SERVER,
        ),
        Recipe(
            "segment",
            "amdinfer.recipes:segment",
            "amdinfer.segment, a semantic segmenter (a class per pixel)",
            "generic",  # quantize's tasks judge per-pixel logits by cosine/rms: no class-map metric yet
            _SEGMENT,
            _IMAGE_SERVER,
        ),
        Recipe(
            "embed",
            "amdinfer.text:embed",
            "amdinfer.embed, sentence embeddings",
            "embed",
            not_served="it reads texts through a tokenizer, and the server serves image recipes",
        ),
    )
}
#: The recipes the server serves (``amdinfer serve --recipe``'s choices, ``models.toml``'s ``recipe``).
SERVED_RECIPES = tuple(name for name, r in RECIPES.items() if not r.not_served)


def get_recipe(name: Any, *, served: bool = False, where: str = "recipe") -> Recipe:
    """The :class:`Recipe` called ``name``; ``served=True``: only one the server serves.

    Raises:
        OptionError: no such recipe (or, with ``served``, one the server does not serve), naming it and listing
            the known ones.

    Example:
        >>> get_recipe("embed", served=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: recipe: got 'embed', expected one of ['yolo', 'classify', 'ocr', 'segment'] ...
    """
    known = SERVED_RECIPES if served else tuple(RECIPES)
    if isinstance(name, str) and name in known:
        return RECIPES[name]
    why = ""
    if isinstance(name, str) and name in RECIPES:
        why = f" ({name} is not served: {RECIPES[name].not_served})"
    raise OptionError(f"{where}: got {repr(name)[:80]}, expected one of {list(known)}{why}")
