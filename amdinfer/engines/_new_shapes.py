"""What an engine does with an input shape it was not prepared for: ``on_new_shape="compile"|"pad"|"error"``.

An engine is *prepared* for the shapes it was told about: its ``batch_buckets`` (every bucket, when the inputs
have no other dynamic axis), its static ``shapes=`` bounds, and every shape it ran while warming
(``warm_shapes=``, :meth:`OrtEngine.warm <amdinfer.engines.ort.OrtEngine.warm>`, the server's warm-up). On a
backend that compiles per input shape (MIGraphX, the MIGraphX EP, TensorRT) any other shape compiles inside
``run``: tens of seconds in the middle of a request. The policy says what happens instead:

- ``"compile"`` (the default of :func:`amdinfer.load`): run it (and compile it where the backend does); the shape
  is prepared from then on. Logged (``amdinfer.engine``, INFO) and counted in ``info.settings["new_shapes"]``;
  the server logs it as a WARNING (docs/serving.md).
- ``"pad"``: pad the feeds to the prepared shape that holds them with the fewest extra elements and cut the
  answers back. Only along axes where padding is exact: the batch axis (axis 0 when every input has it dynamic;
  rows are independent, the extra rows copies of the last one) and the axes the model declares safe in its
  metadata (``amdinfer.pad_axes``: JSON ``{"input": [axis, ...]}``, padded by repeating the edge value, each
  output axis that carries the same named dimension cut back). No prepared shape holds it: an ``InputError``.
- ``"error"``: an ``InputError`` naming the input, its shape and the prepared shapes.

Example:
    >>> import numpy as np
    >>> from amdinfer.types import TensorSpec
    >>> spec = TensorSpec("x", "float32", ("N", 4))
    >>> shapes = NewShapes("pad", [spec], [spec], record={})
    >>> shapes.prepare({"x": np.zeros((4, 4), np.float32)})
    >>> plan = shapes.route({"x": np.ones((3, 4), np.float32)})
    >>> plan.feeds["x"].shape, plan.cut
    ((4, 4), {'x': (3, 4)})
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError, OptionError
from ..types import TensorSpec

__all__ = [
    "ON_NEW_SHAPE",
    "PAD_AXES_KEY",
    "NewShapes",
    "PadPlan",
    "check_on_new_shape",
    "new_shapes_for",
    "pad_axes_from",
]

log = logging.getLogger("amdinfer.engine")

#: the policies ``on_new_shape=`` takes
ON_NEW_SHAPE = ("compile", "pad", "error")
#: the model metadata key that declares input axes where padding leaves the answers exact
PAD_AXES_KEY = "amdinfer.pad_axes"
#: shapes listed in ``info.settings["new_shapes"]["compiled"]`` at most (the count goes on)
_LISTED = 64

Key = tuple[tuple[str, tuple[int, ...]], ...]
Listener = Callable[[str, dict[str, tuple[int, ...]]], None]


def check_on_new_shape(value: Any) -> str:
    """``on_new_shape=``: one of :data:`ON_NEW_SHAPE`.

    Example:
        >>> check_on_new_shape("pad")
        'pad'
        >>> check_on_new_shape("recompile")
        Traceback (most recent call last):
        ...
        amdinfer.errors.OptionError: on_new_shape: got 'recompile', expected one of ('compile', 'pad', 'error')
    """
    if not isinstance(value, str) or value not in ON_NEW_SHAPE:
        raise OptionError(f"on_new_shape: got {value!r}, expected one of {ON_NEW_SHAPE}")
    return value


def pad_axes_from(metadata: Mapping[str, str], inputs: Sequence[TensorSpec]) -> dict[str, tuple[int, ...]]:
    """The axes a model declares safe to pad (metadata :data:`PAD_AXES_KEY`), checked against its inputs.

    Raises:
        OptionError: the value is not JSON ``{"input": [axis, ...]}``, names no input, or an axis that is not a
            dynamic axis of it.

    Example:
        >>> spec = TensorSpec("x", "float32", ("N", 3, "H", "W"))
        >>> pad_axes_from({PAD_AXES_KEY: '{"x": [2, 3]}'}, [spec])
        {'x': (2, 3)}
    """
    text = metadata.get(PAD_AXES_KEY)
    if text is None:
        return {}
    specs = {s.name: s for s in inputs if s.is_tensor}
    try:
        given = json.loads(text)
        out = {str(k): tuple(sorted({int(a) for a in v})) for k, v in given.items()}
    except (ValueError, TypeError, AttributeError):
        raise OptionError(
            f"model metadata {PAD_AXES_KEY}: got {text!r}, expected JSON {{input: [axis, ...]}}"
        ) from None
    for name, axes in out.items():
        spec = specs.get(name)
        bad = [a for a in axes if spec is None or not 0 <= a < spec.rank or isinstance(spec.shape[a], int)]
        if bad:
            raise OptionError(
                f"model metadata {PAD_AXES_KEY}: input {name!r} axes {bad} are not dynamic axes of "
                f"{'no input' if spec is None else spec.shape} (inputs: {sorted(specs)})"
            )
    return out


@dataclass
class PadPlan:
    """Feeds padded to a prepared shape, and how to cut the answers back.

    Attributes:
        feeds: the padded feeds.
        cut: the real shape of each padded input.
        outputs: per output, ``(axis, input, input axis)`` to cut back to the input's real size.
    """

    feeds: dict[str, Any]
    cut: dict[str, tuple[int, ...]]
    outputs: dict[str, list[tuple[int, str, int]]]

    def crop(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` with each padded output axis cut back (outputs of another size on that axis kept)."""
        out = dict(result)
        for name, axes in self.outputs.items():
            value = out.get(name)
            if value is None or not hasattr(value, "ndim"):
                continue
            index = [slice(None)] * value.ndim
            for axis, inp, in_axis in axes:
                if axis < value.ndim and value.shape[axis] == self.feeds[inp].shape[in_axis]:
                    index[axis] = slice(0, self.cut[inp][in_axis])
            out[name] = value[tuple(index)]
        return out


def _shape(value: Any) -> tuple[int, ...]:
    shape = value.shape
    return tuple(int(d) for d in (shape() if callable(shape) else shape))  # OrtValue.shape is a method


def _key(feeds: Mapping[str, Any]) -> Key:
    return tuple((n, _shape(v)) for n, v in sorted(feeds.items()) if hasattr(v, "shape"))


def _show(key: Key) -> str:
    return "{" + ", ".join(f"{n!r}: {s}" for n, s in key) + "}"


class NewShapes:
    """The prepared shapes of one engine and its ``on_new_shape`` policy (``engine._new_shapes``).

    Args:
        policy: ``"compile"``, ``"pad"`` or ``"error"``.
        inputs: the engine's input specs; outputs: its output specs (which axes to cut back).
        buckets: the engine's ``batch_buckets`` (every bucket is prepared when no other axis is dynamic).
        static: shapes prepared at load (``{input: shape}`` each).
        pad_axes: the model's declared pad-safe axes (:func:`pad_axes_from`).
        record: ``info.settings["new_shapes"]``, kept up to date.
    """

    def __init__(
        self,
        policy: str,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        *,
        buckets: Sequence[int] = (),
        static: Sequence[Mapping[str, Sequence[int]]] = (),
        pad_axes: Mapping[str, tuple[int, ...]] | None = None,
        record: dict[str, Any],
    ) -> None:
        self.policy = check_on_new_shape(policy)
        tensors = [s for s in inputs if s.is_tensor]
        self._inputs = {s.name: s for s in tensors}
        batch = bool(tensors) and all(s.shape and not isinstance(s.shape[0], int) for s in tensors)
        self._pad: dict[str, set[int]] = {s.name: ({0} if batch else set()) for s in tensors}
        for name, axes in (pad_axes or {}).items():
            self._pad.setdefault(name, set()).update(axes)
        self._outputs = _output_axes(tensors, outputs, self._pad, batch)
        self._prepared: set[Key] = set()
        self._lock = threading.Lock()
        self._warming = 0  # warm-ups in progress (any thread: a warm-up may run its shapes on a pool)
        self.listeners: list[Listener] = []
        fixed_rest = all(isinstance(d, int) for s in tensors for d in s.shape[1:])
        for b in buckets if batch and fixed_rest else ():
            rows = [(s.name, (int(b), *(int(d) for d in s.shape[1:] if isinstance(d, int)))) for s in tensors]
            self._prepared.add(tuple(sorted(rows)))
        for shapes in static:
            self._prepared.add(tuple(sorted((n, tuple(map(int, s))) for n, s in shapes.items())))
        self.record = record
        why = {
            "compile": "a shape not prepared compiles on first use (amdinfer.load's default: things just work; "
            "logged, and a WARNING when served)",
            "pad": "a shape not prepared is padded to the nearest prepared one that holds it, or refused",
            "error": "a shape not prepared is refused",
        }[self.policy]
        record.update(policy=self.policy, why=why, prepared=self._listed(), compiled=[], compiled_calls=0)
        record.update(padded_calls=0, refused_calls=0, pad_axes={n: sorted(a) for n, a in self._pad.items() if a})

    def _listed(self) -> list[dict[str, list[int]]]:
        return [{n: list(s) for n, s in key} for key in sorted(self._prepared)][:_LISTED]

    @property
    def warming(self) -> bool:
        """Whether a :meth:`warm` block is running (the shapes run meanwhile are prepared, not new)."""
        return self._warming > 0

    @contextmanager
    def warm(self) -> Iterator[None]:
        """Within it, every shape the engine runs (from any thread) is prepared, whatever the policy."""
        with self._lock:
            self._warming += 1
        try:
            yield
        finally:
            with self._lock:
                self._warming -= 1

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        """Count these feeds' shapes as prepared."""
        key = _key(feeds)
        with self._lock:
            if key not in self._prepared:
                self._prepared.add(key)
                self.record["prepared"] = self._listed()

    def route(self, feeds: Mapping[str, Any]) -> PadPlan | None:
        """``None``: run ``feeds`` as they are; a :class:`PadPlan`: run its feeds and crop. Raises for ``"error"``
        (and for ``"pad"`` with no prepared shape that holds them)."""
        key = _key(feeds)
        if key in self._prepared:
            return None
        if self.warming:
            self.prepare(feeds)
            return None
        if self.policy == "compile":
            self._compiled(key)
            return None
        if self.policy == "pad":
            target = self._holder(key)
            if target is not None:
                with self._lock:
                    self.record["padded_calls"] += 1
                return self._plan(feeds, key, target)
        with self._lock:
            self.record["refused_calls"] += 1
        raise self._refusal(key)

    def _compiled(self, key: Key) -> None:
        with self._lock:
            if key in self._prepared:
                return
            self._prepared.add(key)
            self.record["compiled_calls"] += 1
            if len(self.record["compiled"]) < _LISTED:
                self.record["compiled"].append({n: list(s) for n, s in key})
            self.record["prepared"] = self._listed()
        log.info(
            "new input shape %s: run unprepared: it compiles now where the backend compiles per shape "
            "(on_new_shape='compile')",
            _show(key),
        )
        for listener in list(self.listeners):
            listener("compile", dict(key))

    def _holder(self, key: Key) -> Key | None:
        """The prepared key that holds ``key`` along padable axes only, with the fewest extra elements."""
        best: tuple[int, Key] | None = None
        shapes = dict(key)
        for cand in self._prepared:
            c = dict(cand)
            if c.keys() != shapes.keys():
                continue
            if all(self._holds(n, c[n], s) for n, s in shapes.items()):
                extra = sum(math.prod(c[n]) - math.prod(s) for n, s in shapes.items())
                if best is None or (extra, cand) < best:
                    best = (extra, cand)
        return None if best is None else best[1]

    def _holds(self, name: str, big: tuple[int, ...], small: tuple[int, ...]) -> bool:
        axes = self._pad.get(name, ())
        return len(big) == len(small) and all(
            b == d or (b > d and i in axes) for i, (b, d) in enumerate(zip(big, small))
        )

    def _plan(self, feeds: Mapping[str, Any], key: Key, target: Key) -> PadPlan:
        shapes, goal = dict(key), dict(target)
        padded: dict[str, Any] = dict(feeds)
        for name, shape in shapes.items():
            if goal[name] == shape:
                continue
            value = feeds[name]
            if type(value) is not np.ndarray:
                raise InputError(
                    f"input {name!r}: on_new_shape='pad' pads host arrays; got a {type(value).__name__} of shape "
                    f"{shape}, to be padded to {goal[name]} (send the prepared shape, or a NumPy array)"
                )
            padded[name] = np.pad(value, [(0, g - d) for g, d in zip(goal[name], shape)], mode="edge")
        cut = {n: s for n, s in shapes.items() if goal[n] != s}
        outputs = {
            o: [(a, n, ia) for a, n, ia in axes if n in cut and cut[n][ia] != goal[n][ia]]
            for o, axes in self._outputs.items()
        }
        return PadPlan(padded, cut, {o: a for o, a in outputs.items() if a})

    def _refusal(self, key: Key) -> InputError:
        shapes = dict(key)
        prepared = [dict(k) for k in sorted(self._prepared)]
        name = next((n for n in shapes if all(p.get(n) != shapes[n] for p in prepared)), next(iter(shapes), "?"))
        shown = sorted({p[name] for p in prepared if name in p})
        listed = ", ".join(map(str, shown[:16])) + (f" (+{len(shown) - 16} more)" if len(shown) > 16 else "")
        axes = sorted(self._pad.get(name, ()))
        how = (
            f"no prepared shape holds it along the axes padding keeps exact ({axes or 'none'})"
            if self.policy == "pad"
            else "it would compile on the request path"
        )
        return InputError(
            f"input {name!r}: shape {shapes.get(name)} is not a prepared shape ({how}; on_new_shape="
            f"{self.policy!r}); prepared: {listed or 'none'}. Prepare it (batch_buckets=, warm_shapes=, "
            "amdinfer compile --shapes-from), or load with on_new_shape='compile'"
        )


def new_shapes_for(
    engine: Any, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], settings: dict[str, Any]
) -> NewShapes:
    """The :class:`NewShapes` of an engine being built (``Engine._finish_init``): its policy, buckets, static
    ``shapes=`` bounds and the model's declared pad axes; recorded in ``settings["new_shapes"]``.

    Raises:
        OptionError: ``"pad"`` or ``"error"`` for a model with a sequence or optional input (shapes are tensors').
    """
    policy = engine._options.on_new_shape
    container = next((s for s in inputs if not s.is_tensor), None)
    if container is not None and policy != "compile":
        raise OptionError(
            f"on_new_shape={policy!r}: input {container.name!r} is a {container.type_name}; prepared shapes are "
            "tensors' (use on_new_shape='compile')"
        )
    tensors = [s for s in inputs if s.is_tensor]
    bounds = engine._bounds
    static = []
    if tensors and all(s.name in bounds and bounds[s.name].min == bounds[s.name].max for s in tensors):
        static.append({s.name: bounds[s.name].min for s in tensors})
    metadata = {p.key: p.value for p in engine._source.proto.metadata_props}
    return NewShapes(
        policy, inputs, outputs, buckets=engine._buckets, static=static, pad_axes=pad_axes_from(metadata, inputs),
        record=settings.setdefault("new_shapes", {}),
    )  # fmt: skip


def _output_axes(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], pad: Mapping[str, set[int]], batch: bool
) -> dict[str, list[tuple[int, str, int]]]:
    """Per output, the axes that carry a padable input axis's named dimension: ``(axis, input, input axis)``; with
    a batch axis, axis 0 of every output whose axis 0 is dynamic (cut where its size is the padded batch)."""
    named: dict[str, tuple[str, int]] = {}
    for s in inputs:
        for axis in sorted(pad.get(s.name, ())):
            dim = s.shape[axis] if axis < s.rank else None
            if isinstance(dim, str):
                named.setdefault(dim, (s.name, axis))
    out: dict[str, list[tuple[int, str, int]]] = {}
    for o in outputs:
        if not o.is_tensor:
            continue
        axes = [(a, *named[d]) for a, d in enumerate(o.shape) if isinstance(d, str) and d in named]
        if batch and o.shape and not isinstance(o.shape[0], int) and not any(a == 0 for a, _, _ in axes):
            axes.insert(0, (0, inputs[0].name, 0))
        if axes:
            out[o.name] = axes
    return out
