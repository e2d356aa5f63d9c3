"""Equal frames: the vision recipes' ``geometry="auto"``, the resize and crop of a stream of equal frames in the graph.

A recipe fused with the host geometry (``Pipeline.fuse()``, ``image_size=None``) resizes and crops every image on
the host and sends the canvas; fused with ``image_size=(H, W)`` the graph takes the frames themselves (uint8
``(N, H, W, 3)``) and resizes them on the device, bit-exact with ``cv2.resize`` (``resize="exact"``). On an H200
with ResNet-50 fp16 and 640x480 frames the second ran at 0.48-0.67x of the device-tensor engine, the first at
0.30-0.32x. :class:`FramePipeline` is the host-geometry fused pipeline that, for windows of equal-sized arrays,
builds (once per size, at most :data:`MAX_SIZES` sizes) and runs the fused pipeline of that size instead.

The decisions are pure functions, testable with fake device strings: :func:`geometry_plan` (which form a recipe
returns), :func:`frame_size` (the one ``(H, W)`` of a window, if any) and :func:`route` (which engine a window
runs on).

Example:
    >>> geometry_plan("auto", "auto", "cuda:0").graph, geometry_plan("auto", "auto", "cpu").fuse
    (True, False)
    >>> import numpy as np
    >>> frame_size([np.zeros((480, 640, 3), np.uint8)] * 2), frame_size(["a.jpg"])
    ((480, 640), None)
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._support._recipes import GEOMETRIES
from ..errors import AmdinferError, OptionError
from ..pipeline import FusedPipeline, PipelineMap
from ..pipeline._map import map_options

__all__ = ["MAX_SIZES", "FramePipeline", "GeometryPlan", "frame_size", "geometry_plan", "route"]

log = logging.getLogger("amdinfer.recipes")

#: Frame sizes that get a fused engine of their own (each one an engine and its device memory); more sizes run
#: on the host geometry.
MAX_SIZES = 4
#: Images of one size seen (in one window, or over calls) before ``"auto"`` builds that size's engine: a single
#: photo of a size never seen again is not worth a compile.
MIN_FRAMES = 2
#: Measured on this project's 2-core AMD EPYC (tiny_cnn at 224, 640x480 frames, ``map(batch_size=8)``): the
#: stages 286-434 frames/s, fused with the host geometry 327-345, with the geometry in the graph 92-104
#: (ONNX Runtime's CPU EP runs the exact int32 resize slower than OpenCV's SIMD).
CPU_RULE = "on the CPU the host geometry is faster (the in-graph resize measured 0.3x of OpenCV's on 2 cores)"


class GeometryPlan(NamedTuple):
    """What a recipe returns: ``fuse`` (the fused graph, else stage by stage), ``graph`` (equal frames get the
    geometry in the graph: a :class:`FramePipeline`) and why (for the record and the log)."""

    fuse: bool
    graph: bool
    why: str


def geometry_plan(geometry: Any, fuse: Any, device: str) -> GeometryPlan:
    """The form a recipe takes for ``geometry`` and ``fuse`` on an engine running on ``device``
    (``engine.info.device``): fused on an accelerator (``fuse="auto"``), and there the geometry of equal frames
    in the graph (``geometry="auto"``); on the CPU the stages (:data:`CPU_RULE`) unless ``geometry="graph"``.

    Raises:
        OptionError: ``geometry`` is not one of ``auto``, ``host``, ``graph``, or ``graph`` with ``fuse=False``.

    Example:
        >>> geometry_plan("auto", "auto", "rocm:0")
        GeometryPlan(fuse=True, graph=True, why='on rocm equal frames run the geometry in the graph')
        >>> geometry_plan("graph", "auto", "cpu").graph, geometry_plan("host", True, "cuda:0").graph
        (True, False)
        >>> geometry_plan("graph", False, "cpu")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: geometry: got 'graph' with fuse=False, expected 'auto' or 'host' (the geometry \
runs in the graph only when fused)
    """
    if not isinstance(geometry, str) or geometry not in GEOMETRIES:
        raise OptionError(f"geometry: got {geometry!r}, expected one of {list(GEOMETRIES)}")
    kind = str(device).split(":")[0]
    if fuse is False:
        if geometry == "graph":
            raise OptionError(
                "geometry: got 'graph' with fuse=False, expected 'auto' or 'host' (the geometry runs in the graph "
                "only when fused)"
            )
        return GeometryPlan(False, False, "stage by stage (fuse=False)")
    if geometry == "graph":
        return GeometryPlan(True, True, "geometry='graph'")
    if kind == "cpu":
        return GeometryPlan(fuse is True, False, "geometry='host'" if geometry == "host" else CPU_RULE)
    if geometry == "host":
        return GeometryPlan(True, False, "geometry='host'")
    return GeometryPlan(True, True, f"on {kind} equal frames run the geometry in the graph")


def frame_size(items: Sequence[Any], channels: int | None = 3) -> tuple[int, int] | None:
    """The one ``(H, W)`` of ``items`` when every one is a uint8 ``(H, W, channels)`` array of that size, else
    ``None`` (mixed sizes, paths, bytes, Pillow images: their size is known only once decoded, and a file's header
    gives it before the EXIF rotation, so files keep the host geometry).

    Example:
        >>> import numpy as np
        >>> frame_size([np.zeros((4, 6, 3), np.uint8), np.zeros((4, 6, 3), np.uint8)])
        (4, 6)
        >>> frame_size([np.zeros((4, 6, 3), np.uint8), np.zeros((6, 4, 3), np.uint8)]) is None
        True
        >>> frame_size([np.zeros((4, 6, 3), np.float32)]) is None, frame_size([]) is None
        (True, True)
    """
    size = None
    for item in items:
        shape = getattr(item, "shape", None)
        if (
            not isinstance(item, np.ndarray)
            or item.dtype != np.uint8
            or len(shape or ()) != 3
            or (channels is not None and item.shape[2] != channels)
        ):
            return None
        hw = (int(item.shape[0]), int(item.shape[1]))
        if size is not None and hw != size:
            return None
        size = hw
    return size


def route(size: tuple[int, int] | None, seen: int, fused: Iterable[tuple[int, int]], *, minimum: int) -> str:
    """Which engine a window runs on: ``"graph"`` (the fused engine of ``size``: already built, or buildable when
    fewer than :data:`MAX_SIZES` are and ``seen``, the images of that size met so far, reaches ``minimum``), else
    ``"host"``.

    Example:
        >>> route((480, 640), 64, [], minimum=2), route((480, 640), 1, [], minimum=2), route(None, 64, [], minimum=1)
        ('graph', 'host', 'host')
        >>> full = [(i, i) for i in range(MAX_SIZES)]
        >>> route((480, 640), 64, full, minimum=2), route((1, 1), 1, full, minimum=2)
        ('host', 'graph')
    """
    built = list(fused)
    if size is None:
        return "host"
    if size in built:
        return "graph"
    return "graph" if len(built) < MAX_SIZES and seen >= minimum else "host"


_WHERE = re.compile(r"^(items? )([\d, .]+?)(: | \(one batch\))")


def _shifted(exc: BaseException, offset: int) -> BaseException:
    """``exc`` naming items of the whole stream: a run that starts at item ``offset`` counts its items from 0."""
    match = _WHERE.match(str(exc)) if offset and isinstance(exc, AmdinferError) else None
    if match is None:
        return exc
    numbers = re.sub(r"\d+", lambda m: str(int(m.group()) + offset), match.group(2))
    try:
        err = type(exc)(f"{match.group(1)}{numbers}{str(exc)[len(match.group(1)) + len(match.group(2)) :]}")
    except TypeError:  # pragma: no cover - an error class with other constructor arguments
        return exc
    for name in ("index", "stage"):
        if hasattr(exc, name):
            value = getattr(exc, name)
            setattr(err, name, value + offset if name == "index" and isinstance(value, int) else value)
    err.__cause__ = exc.__cause__
    return err


class FramePipeline(FusedPipeline):
    """A recipe's fused pipeline (host geometry) that runs windows of equal frames on a fused engine of their size.

    Built by the recipes (``geometry="auto"`` on an accelerator, or ``"graph"``); everything else is the
    :class:`~amdinfer.pipeline.fuse.FusedPipeline` it is. ``run_batch`` (and one-image calls) look at the images,
    ``map`` at each window of ``max(batch_size, 8)`` items (64 for ``"auto"``): when all are uint8 arrays of one
    ``(H, W)`` (:func:`frame_size`) and :func:`route` says so, they run on
    ``base.fuse(image_size=(H, W), resize="exact")``, built once per size (at most :data:`MAX_SIZES`) and closed
    by :meth:`close`; other windows run on the host geometry. Answers equal the host geometry's (the exact
    in-graph resize is bit-exact with ``cv2.resize`` when shrinking; enlarging, edge rows may differ by 1).
    :attr:`geometry` (also ``engine.info.settings["geometry"]``) records which geometry ran for which size, and
    each size's choice is logged once on INFO (``amdinfer.recipes``).

    Args:
        host: the host-geometry fused pipeline (its engine is taken over; it is closed).
        base: the stage-by-stage pipeline it was fused from (closed is fine: it fuses from its model and records).
        plan: the recipe's :class:`GeometryPlan`.
        minimum: images of a size before its engine is built (:data:`MIN_FRAMES`; ``geometry="graph"``: 1).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> clf = amdinfer.classify(tiny_cnn(), geometry="graph", providers=["CPUExecutionProvider"])
        >>> frames = [np.full((48, 64, 3), v, np.uint8) for v in (0, 90, 200)]
        >>> [r.indices[0] for r in clf.map(frames, batch_size=2)] == [r.indices[0] for r in clf.run_batch(frames)]
        True
        >>> clf.geometry["sizes"]
        {'48x64': 'graph'}
        >>> clf.close()
    """

    def __init__(self, host: FusedPipeline, base: Any, plan: GeometryPlan, *, minimum: int = MIN_FRAMES) -> None:
        super().__init__(
            host.model,
            host.engine,
            host._host,
            image_size=None,
            labels=host._labels,
            host_post=host._host_post,
            keep_image=host._keep_image,
        )
        host._owns_engine = False  # this pipeline owns the engine now
        host.close()
        self._base = base
        self._plan = plan
        self._minimum = minimum
        self._fused: dict[tuple[int, int], FusedPipeline] = {}
        self._seen: dict[tuple[int, int], int] = {}
        self._sizes: dict[str, str] = {}
        self._threads_set: int | None = None
        self._lock = threading.Lock()
        self._record()

    @property
    def geometry(self) -> dict[str, Any]:
        """Which geometry ran for which size: ``{"mode", "why", "sizes": {"HxW": "graph" | "host"}}``."""
        return {"mode": "auto" if self._minimum > 1 else "graph", "why": self._plan.why, "sizes": dict(self._sizes)}

    @property
    def fused_sizes(self) -> tuple[tuple[int, int], ...]:
        """The frame sizes with a fused engine of their own, in the order they were built."""
        return tuple(self._fused)

    def _record(self) -> None:
        settings = getattr(getattr(self.engine, "info", None), "settings", None)
        if isinstance(settings, dict):
            settings["geometry"] = self.geometry

    # ------------------------------------------------------------------ the choice per window
    def _target(self, items: Sequence[Any]) -> FusedPipeline | None:
        """The fused pipeline of the items' one frame size (built now if :func:`route` says so), else ``None``
        (the host geometry)."""
        size = frame_size(items, self._channels)
        with self._lock:
            if size is None:
                if "mixed" not in self._sizes:
                    self._sizes["mixed"] = "host"
                    self._record()
                return None
            if size not in self._fused:
                if len(self._seen) > 64:  # a stream of ever new sizes: forget the counts
                    self._seen.clear()
                self._seen[size] = self._seen.get(size, 0) + len(items)
            choice = route(size, self._seen.get(size, 0), self._fused, minimum=self._minimum)
            if choice == "graph" and size not in self._fused:
                self._fused[size] = self._build(size)
            self._note(size, choice)
            return self._fused.get(size) if choice == "graph" else None

    def _continues(self, items: Sequence[Any], target: FusedPipeline | None) -> bool:
        """Whether ``items`` run on ``target`` too, as :meth:`_target` would decide (a size whose engine is still
        to be built does not: the run ends there, and the next run builds it)."""
        size = frame_size(items, self._channels)
        if size is None:
            return target is None
        with self._lock:
            built = self._fused.get(size)
            if built is not None:
                return built is target
            seen = self._seen.get(size, 0) + len(items)
            if target is not None or route(size, seen, self._fused, minimum=self._minimum) == "graph":
                return False
            self._seen[size] = seen
            self._note(size, "host")
            return True

    def _build(self, size: tuple[int, int]) -> FusedPipeline:
        fused: FusedPipeline = self._base.fuse(image_size=size, resize="exact")
        if self._threads_set is not None:
            fused.threads = self._threads_set
        return fused

    def _note(self, size: tuple[int, int], choice: str) -> None:
        """Record (and log once) a size's geometry: every size in the graph; on the host, the sizes past the bound."""
        key = f"{size[0]}x{size[1]}"
        if key in self._sizes:
            return
        if choice == "graph":
            self._sizes[key] = choice
            log.info(
                "frames of %s: the geometry runs in the graph (a fused engine for this size; %s)", key, self._plan.why
            )
        elif len(self._fused) >= MAX_SIZES and self._seen.get(size, 0) >= self._minimum and len(self._sizes) < 64:
            self._sizes[key] = choice
            log.info(
                "frames of %s: the geometry runs on the host (%d sizes have fused engines, the most)", key, MAX_SIZES
            )
        else:
            return
        self._record()

    # ------------------------------------------------------------------ running
    def run_batch(self, images: Iterable[Any]) -> list[Any]:
        """As :meth:`FusedPipeline.run_batch <amdinfer.pipeline.fuse.FusedPipeline.run_batch>`; images of one
        size may run on that size's fused engine (see the class)."""
        items = self._items(images)
        target = self._target(items)
        return target.run_batch(items) if target is not None else super().run_batch(items)

    def map(
        self, items: Iterable[Any], *, batch_size: int | str | None = None, workers: int | None = None
    ) -> PipelineMap:
        """As :meth:`FusedPipeline.map <amdinfer.pipeline.fuse.FusedPipeline.map>`, each window of equal frames on
        its size's fused engine (see the class): consecutive windows of one engine run as one stream on it; where
        the engine changes, the stream before it finishes first. Results in input order; errors name the item's
        index in ``items``."""
        size, _ = map_options(items, batch_size, workers, what="images")
        window = max(size or 64, 8)  # "auto" (None): 64, the accelerators' batch size
        return PipelineMap(self._runs(iter(items), window, batch_size, workers))

    def _runs(self, source: Iterator[Any], window: int, batch_size: Any, workers: Any) -> Iterator[Any]:
        pending = _take(source, window)
        offset = 0
        while pending:
            target = self._target(pending)
            run = _Run(pending, source, window, lambda w, t=target: self._continues(w, t))
            runner = target.map if target is not None else self._host_map
            inner = runner(run, batch_size=batch_size, workers=workers)
            try:
                yield from inner
            except AmdinferError as exc:
                raise _shifted(exc, offset) from exc.__cause__
            finally:
                inner.close()
            offset += run.count
            pending = run.stash

    def _host_map(self, items: Iterable[Any], *, batch_size: Any, workers: Any) -> PipelineMap:
        return super().map(items, batch_size=batch_size, workers=workers)

    @property
    def threads(self) -> int:
        """Placement threads of the host geometry and of every fused size (settable)."""
        return self._executor.threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        FusedPipeline.threads.fset(self, value)  # type: ignore[attr-defined]
        self._threads_set = value
        for fused in self._fused.values():
            fused.threads = value

    def close(self) -> None:
        """Close every fused size's pipeline, then this one (its engine)."""
        with self._lock:
            fused, self._fused = list(self._fused.values()), {}
        for f in fused:
            f.close()
        super().close()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}: {v}" for k, v in self._sizes.items()) or "no frames yet"
        return f"FramePipeline(geometry={self.geometry['mode']} [{sizes}], {super().__repr__()})"


def _take(source: Iterator[Any], n: int) -> list[Any]:
    out = []
    for item in source:
        out.append(item)
        if len(out) == n:
            break
    return out


class _Run(Iterator[Any]):
    """The items of consecutive windows that run on one engine: ``first``, then the windows of ``source`` that
    ``same`` accepts; the first window it refuses is kept in :attr:`stash` for the next run. Read on the inner
    map's engine thread; :attr:`stash` and :attr:`count` are read after that map has ended."""

    def __init__(self, first: list[Any], source: Iterator[Any], window: int, same: Any) -> None:
        self._buffer = iter(first)
        self._source = source
        self._window = window
        self._same = same
        self.stash: list[Any] = []
        self.count = 0
        self._done = False

    def __next__(self) -> Any:
        while True:
            item = next(self._buffer, _END)
            if item is not _END:
                self.count += 1
                return item
            if self._done:
                raise StopIteration
            window = _take(self._source, self._window)
            if not window:
                self._done = True
                raise StopIteration
            if not self._same(window):
                self.stash, self._done = window, True
                raise StopIteration
            self._buffer = iter(window)


_END = object()
