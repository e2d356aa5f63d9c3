"""The :class:`Engine` contract every backend implements, and :class:`EngineInfo`.

``Engine.run`` is final: it checks the engine's state and the feeds (names, dtypes, ranks, fixed
dims, shape bounds), pads to a batch bucket when asked, calls the backend's ``_run`` and checks what
comes back. Backends never repeat those checks. The checks live in ``_checks.py`` (the
:class:`FeedChecks` mixin) and :class:`EngineInfo` in ``_info.py``; this module re-exports both.

Example:
    >>> import numpy as np, amdinfer
    >>> from amdinfer.testing.models import tiny_cnn
    >>> with amdinfer.load(tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"]) as engine:
    ...     out = engine.run(np.zeros((2, 3, 32, 32), np.float32))
    >>> out["logits"].shape
    (2, 10)
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, final

import numpy as np

from .._certificate._io import show_certificate
from .._support._validate import check_int
from ..errors import EngineClosedError, InputError, ModelError, OptionError
from ..model import ModelLike, ModelSource
from ..types import ShapeBounds, TensorSpec, normalize_precision
from ._buckets import bucket_rows, padded
from ._checks import FeedChecks, Feeds, OutputSelection
from ._info import EngineInfo
from ._new_shapes import NewShapes, new_shapes_for
from ._options import EngineOptions
from ._prepared import BoundFeeds, PreparedRun, check_bound_in_place

__all__ = ["Engine", "EngineInfo", "Feeds", "OutputSelection"]

log = logging.getLogger("amdinfer.engine")


class Engine(FeedChecks, abc.ABC):
    """Runs an ONNX model; one subclass per backend.

    Construction is a template: :meth:`__init__` takes the backend's option record (a frozen
    :class:`~amdinfer.engines.EngineOptions` subclass, :attr:`options_type`, validated as it was built) or
    builds it from keywords, checks it against the model (shape bounds name real inputs, containers), lets
    :meth:`_prepare` apply a quantizer that the backend has no native knob for, and calls the one abstract
    step, :meth:`_load`, which builds the runtime object and returns the input and output specs and the
    :class:`EngineInfo`. Nothing overridable runs before the record is in place; backends write no
    ``__init__``: they declare their options as fields of their record. Backends implement :meth:`_run` (and
    :meth:`_close` when they hold resources); :meth:`run` is final, enforced when a subclass is
    created; the checks it makes come from the :class:`FeedChecks` mixin. Engines are context managers
    and pickle by model bytes and options (the copy is rebuilt, not shared).

    Example:
        >>> import numpy as np, amdinfer
        >>> from amdinfer.testing.models import tiny_cnn
        >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"])
        >>> [spec.name for spec in engine.inputs], [spec.name for spec in engine.outputs]
        (['input'], ['logits'])
        >>> engine.close()
    """

    #: The registry name; set by each backend.
    backend_name: str = ""
    #: Whether ``run(..., outputs="all")`` is supported.
    supports_all_outputs: bool = False
    #: Whether the backend maps a quantizer's :class:`~amdinfer.quantize.QuantizationSpec` to its own
    #: knobs in :meth:`_load` (``False``: the base runs the model the quantizer rewrote).
    native_quantization: bool = False
    #: Whether the backend takes and returns sequence and optional graph values (``False``: a model with one is
    #: refused at load, naming it).
    supports_containers: bool = False
    #: The backend's option record type (its fields are the keywords ``amdinfer.load`` takes for it).
    options_type: ClassVar[type[EngineOptions]] = EngineOptions
    #: The positional and keyword arguments the engine was built with (pickling rebuilds from them).
    _init_args: tuple[tuple[Any, ...], dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in _FINAL:
            if name in cls.__dict__:
                raise TypeError(
                    f"{cls.__qualname__} overrides Engine.{name}, which is final: backends implement "
                    f"_{name} (Engine.{name} checks state and inputs, then calls it)"
                )

    def __new__(cls, *args: Any, **kwargs: Any) -> Engine:
        self = super().__new__(cls)
        # Kept so a pickled engine can be rebuilt with the same options in another process.
        self._init_args = (args, kwargs)
        return self

    def __init__(self, model: ModelLike, options: EngineOptions | None = None, /, **keywords: Any) -> None:
        self._t_start = time.perf_counter()
        self._closed = True  # until _finish_init
        self._options = self._record(options, keywords)
        self._source = ModelSource.from_any(model)
        o = self._options
        self._precision = o.precision
        self._device = o.device
        self._bounds: dict[str, ShapeBounds] = dict(o.shapes)
        unknown = set(self._bounds) - {s.name for s in self._source.inputs}
        if unknown:
            raise OptionError(
                f"shapes: got inputs {sorted(unknown)}, expected names among {[s.name for s in self._source.inputs]}"
            )
        self._buckets: tuple[int, ...] = o.batch_buckets or ()
        self._check_containers()
        self._quantizer = o.quantizer
        if self._quantizer is not None:
            self._precision = normalize_precision(self._quantizer.precision)
        self._n_runs = 0
        self._source = self._prepare(self._source)
        inputs, outputs, info = self._load(self._source)
        show_certificate(info, self._source.proto)  # a model that carries one (verified against its own hash)
        self._finish_init(inputs, outputs, info)

    def _record(self, options: EngineOptions | None, keywords: dict[str, Any]) -> EngineOptions:
        """The engine's option record: ``options`` as given, or built from ``keywords`` (never both)."""
        if options is None:
            return self.options_type.from_keywords(keywords, backend=self.backend_name or type(self).__name__)
        if keywords:
            raise OptionError(
                f"{type(self).__name__}: got an options record and the keywords {sorted(keywords)}; give the record "
                "or the keywords, not both"
            )
        if not isinstance(options, self.options_type):
            raise OptionError(
                f"options: got {type(options).__name__}, expected {self.options_type.__name__} "
                f"(the record of backend {self.backend_name!r})"
            )
        return options

    def _check_containers(self) -> None:
        """Refuse sequence/optional graph values the backend or the options cannot serve, naming the first."""
        for kind, specs in (("input", self._source.inputs), ("output", self._source.outputs)):
            spec = next((s for s in specs if not s.is_tensor), None)
            if spec is None:
                continue
            what = f"model {self._source.name}: {kind} {spec.name!r} is a {spec.type_name}"
            if not self.supports_containers:
                raise ModelError(
                    f"{what}, but backend {self.backend_name!r} takes and returns tensors only; run it on "
                    "backend='ort' or backend='reference'"
                )
            if self._buckets:
                raise OptionError(f"batch_buckets: {what}; batch buckets pad and split tensors only")
            if kind == "input" and spec.name in self._bounds and spec.is_sequence:
                raise OptionError(f"shapes[{spec.name!r}]: {what}; shape bounds apply to tensors")

    def _prepare(self, source: ModelSource) -> ModelSource:
        """The model :meth:`_load` builds: the quantizer's rewrite unless the backend quantizes natively."""
        if self._quantizer is None or self.native_quantization:
            return source
        return source.derived(self._quantizer.quantize(source.proto))

    def _finish_init(self, inputs: list[TensorSpec], outputs: list[TensorSpec], info: EngineInfo) -> None:
        """Record specs and info (the last step of :meth:`__init__`)."""
        self._inputs = list(inputs)
        self._outputs = list(outputs)
        self._input_names = tuple(s.name for s in inputs)
        self._output_names = [s.name for s in outputs]
        # Precomputed per-input checks keep run() overhead to a few microseconds.
        self._checks = [
            (
                s.name,
                s.dtype,
                s.rank,
                tuple((i, d) for i, d in enumerate(s.shape) if isinstance(d, int)),
                tuple((i, d) for i, d in enumerate(s.shape) if isinstance(d, str)),
                s,
                self._bounds.get(s.name),
            )
            for s in inputs
            if s.is_tensor
        ]
        # Sequence and optional inputs are checked after the tensors, only on models that have them.
        self._value_checks = [(s, self._bounds.get(s.name)) for s in inputs if not s.is_tensor]
        self._info = info
        self._new_shapes: NewShapes = new_shapes_for(self, inputs, outputs, info.settings)
        info.options = self._options
        info.precision = self._precision
        info.load_seconds = time.perf_counter() - self._t_start
        self._closed = False

    # ------------------------------------------------------------------ public surface
    @property
    def inputs(self) -> list[TensorSpec]:
        """The model's inputs (initializers excluded)."""
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorSpec]:
        """The model's outputs."""
        return list(self._outputs)

    @property
    def info(self) -> EngineInfo:
        """What the engine runs on and how it was built."""
        return self._info

    @property
    def model(self) -> ModelSource:
        """The model this engine runs (after any quantizer rewrite)."""
        return self._source

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def shape_bounds(self) -> dict[str, ShapeBounds]:
        """The ``shapes=`` bounds given at load, per input."""
        return dict(self._bounds)

    @property
    def batch_buckets(self) -> tuple[int, ...]:
        """The batch sizes inputs are padded to (empty: no padding)."""
        return self._buckets

    @final
    def run(self, feeds: Feeds, *, outputs: OutputSelection = None) -> dict[str, np.ndarray]:
        """Run the model.

        Args:
            feeds: ``{input name: array}``, or one array for a single-input model. Arrays must have the
                input's dtype (never cast silently); non-contiguous arrays are accepted. A sequence input
                (``spec.is_sequence``) takes a list or tuple of arrays, each checked like a tensor input; an
                optional one (``spec.is_optional``) also takes ``None``.
            outputs: ``None`` for the model's outputs, a list of output names, or ``"all"`` for every
                named intermediate tensor (backends with ``supports_all_outputs``).

        Returns:
            ``{output name: array}`` in the model's output order (a list of arrays for a sequence output,
            ``None`` for an absent optional one).

        Raises:
            EngineClosedError: the engine was closed.
            InputError: a feed is missing, extra, or has the wrong dtype, rank or shape.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> engine = amdinfer.load(tiny_cnn(), backend="ort", providers=["CPUExecutionProvider"])
            >>> engine.run({"input": np.ones((1, 3, 32, 32), np.float32)})["logits"].shape
            (1, 10)
        """
        if self._closed:
            raise EngineClosedError(f"{type(self).__name__} for model {self._source.name}: engine is closed")
        checked = self._check_feeds(feeds)
        names = self._select_outputs(outputs)
        if self._buckets:
            return self._run_bucketed(checked, names)
        result = self._run_shaped(checked, names)
        self._n_runs += 1
        if len(result) != len(names if names is not None else self._output_names):
            self._check_result(result, names)
        return result

    def run_many(
        self, batches: Iterable[Feeds], *, outputs: OutputSelection = None, prefetch: int = 2
    ) -> Iterator[dict[str, np.ndarray]]:
        """Run a stream of batches, one result per batch, in order.

        Each batch is checked like :meth:`run`. This default runs them one after another, lazily (a batch
        is read from ``batches`` only when its result is asked for); backends that can overlap transfers
        with compute override it (the ORT engine on a GPU keeps ``prefetch`` batches in flight).

        Args:
            batches: feeds per batch (dicts, or one array each for a single-input model); read lazily.
            outputs: as for :meth:`run`.
            prefetch: batches a backend may read and start ahead of the one whose result comes next
                (an int >= 1; this default reads none ahead).

        Returns:
            An iterator of ``{output name: array}``, one per batch, in the order of ``batches``.

        Raises:
            EngineClosedError: the engine was closed (checked at the call, and by each run).
            OptionError: ``prefetch`` is not an int >= 1, or ``outputs`` cannot be served.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> engine = amdinfer.load(tiny_cnn(), backend="reference")
            >>> batches = (np.zeros((n, 3, 32, 32), np.float32) for n in (1, 2))
            >>> [out["logits"].shape for out in engine.run_many(batches)]
            [(1, 10), (2, 10)]
        """
        self._check_run_many(outputs, prefetch)
        return (self.run(batch, outputs=outputs) for batch in batches)

    def prepare(self, feeds: Feeds, *, outputs: OutputSelection = None) -> PreparedRun:
        """Check and bind a run once; the returned callable reruns it on the feeds' current contents.

        For loops that feed the same buffers again and again (a camera frame, a batch-1 server): the checks,
        output selection and, on a GPU, the binding of device buffers and the CUDA graph capture happen here,
        once; each call then costs the model's own run plus a few microseconds. Update the inputs in place
        between calls. See :class:`~amdinfer.engines.PreparedRun` for the lifetime of device outputs.

        Args:
            feeds: as for :meth:`run`; NumPy arrays must be C-contiguous (the run must read their memory).
            outputs: as for :meth:`run`.

        Returns:
            A :class:`~amdinfer.engines.PreparedRun`.

        Raises:
            EngineClosedError: the engine was closed.
            InputError: a feed fails :meth:`run`'s checks, or is a non-contiguous array.

        Example:
            >>> import numpy as np, amdinfer
            >>> from amdinfer.testing.models import tiny_cnn
            >>> engine = amdinfer.load(tiny_cnn(), backend="reference")
            >>> x = np.ones((2, 3, 32, 32), np.float32)
            >>> step = engine.prepare(x)
            >>> step()["logits"].shape, step.inputs
            ((2, 10), ['input'])
        """
        if self._closed:
            raise EngineClosedError(f"{type(self).__name__} for model {self._source.name}: engine is closed")
        if self._value_checks:
            spec = self._value_checks[0][0]
            raise InputError(
                f"input {spec.name!r}: prepare() binds tensors, but it is a {spec.type_name}; call run() instead"
            )
        given = feeds if isinstance(feeds, Mapping) else dict(zip(self._input_names[:1], [feeds]))
        checked = self._check_feeds(feeds)
        check_bound_in_place(given, checked)
        if not self._buckets and self._new_shapes.route(checked) is not None:
            raise InputError(
                f"prepare(): {list(given)} would be padded to a prepared shape (on_new_shape='pad'), but prepare() "
                "binds the buffers as given; give it a prepared shape, or call run()"
            )
        names = self._select_outputs(outputs)
        return PreparedRun(self, self._prepared_call(checked, names), list(checked), names or list(self._output_names))

    def _prepared_call(self, feeds: dict[str, Any], outputs: list[str] | None) -> Callable[[], dict[str, Any]]:
        """Backend hook of :meth:`prepare`: a callable running checked feeds (default: ``_run`` each time).

        Each call first checks that no feed was resized or re-typed in place since ``prepare``
        (:class:`~amdinfer.engines._prepared.BoundFeeds`): the run would read the wrong number of bytes.
        """
        bound = BoundFeeds(feeds)
        run = self._run_bucketed if self._buckets else self._run_shaped

        def call() -> dict[str, Any]:
            bound.check()
            return run(feeds, outputs)

        return call

    def _check_run_many(self, outputs: OutputSelection, prefetch: Any) -> list[str] | None:
        """The checks :meth:`run_many` makes at the call (state, ``prefetch``, ``outputs``)."""
        if self._closed:
            raise EngineClosedError(f"{type(self).__name__} for model {self._source.name}: engine is closed")
        check_int("prefetch", prefetch, minimum=1)
        return self._select_outputs(outputs)

    def close(self) -> None:
        """Release the backend's resources. Safe to call twice."""
        if not getattr(self, "_closed", True):
            self._closed = True
            self._close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._info.device
        return f"<{type(self).__name__} {self._source.name} on {state}, {self._precision}>"

    def __reduce__(self) -> tuple[Any, ...]:
        args, kwargs = self._init_args
        model = self._source_for_pickle()
        return (_rebuild_engine, (type(self), model, args[1:], kwargs))

    def _source_for_pickle(self) -> bytes:
        # The quantizer (if any) already rewrote _source; rebuilding must not quantize twice.
        args, kwargs = self._init_args
        if self._quantizer is not None:
            raise TypeError(f"{type(self).__name__} with a quantizer cannot be pickled; pickle the quantized model")
        original = args[0] if args else kwargs.get("model")
        return ModelSource.from_any(original, check=False).to_bytes()  # type: ignore[arg-type]

    # ------------------------------------------------------------------ backend hooks
    @abc.abstractmethod
    def _load(self, source: ModelSource) -> tuple[list[TensorSpec], list[TensorSpec], EngineInfo]:
        """Build the runtime object for ``source``; return the input specs, output specs and info.

        Called once by :meth:`__init__`, after the shared options are validated and
        ``self._options`` (the backend's own options) is set.
        """

    @abc.abstractmethod
    def _run(self, feeds: dict[str, Any], outputs: list[str] | None) -> dict[str, np.ndarray]:
        """Run checked feeds; return the requested outputs (``None``: the model's outputs) by name."""

    def _close(self) -> None:  # optional hook, not abstract: most backends hold nothing
        """Free backend resources (default: nothing)."""

    def _run_all(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every named tensor; backends with ``supports_all_outputs`` override."""
        raise OptionError(f'outputs="all": backend {self.backend_name!r} cannot return intermediate tensors')

    # ------------------------------------------------------------------ checks

    # ------------------------------------------------------------------ buckets and new shapes
    def _run_shaped(self, feeds: dict[str, Any], names: list[str] | None) -> dict[str, Any]:
        """``_run`` under the ``on_new_shape`` policy (:mod:`._new_shapes`): as given, padded and cut, or refused."""
        plan = self._new_shapes.route(feeds)
        if plan is None:
            return self._run(feeds, names)
        return plan.crop(self._run(plan.feeds, names))

    def _run_bucketed(self, feeds: dict[str, Any], names: list[str] | None) -> dict[str, np.ndarray]:
        batch = {name: arr.shape[0] for name, arr in feeds.items() if arr.ndim > 0}
        n = next(iter(batch.values()), 1)
        if any(b != n for b in batch.values()):
            raise InputError(f"batch_buckets: inputs disagree on the batch size (axis 0): {batch}")
        top = self._buckets[-1]
        # Outputs whose axis 0 is fixed (or that are scalars) do not carry the batch: never cut or concatenate them.
        fixed = {s.name for s in self._outputs if not s.shape or isinstance(s.shape[0], int)}
        chunks = []
        for start in range(0, n, top):
            stop = min(start + top, n)
            size = stop - start
            bucket = bucket_rows(self._buckets, size)
            part = {k: v[start:stop] for k, v in feeds.items()}
            if bucket != size:
                part = {k: padded(v, bucket) for k, v in part.items()}
            for k, v in part.items():
                b = self._bounds.get(k)
                if b is not None and not b.contains(v.shape):
                    raise InputError(
                        f"input {k!r}: shape {v.shape} (padded to bucket {bucket}) is outside the bounds "
                        f"{b.min}..{b.max} given in shapes="
                    )
            res = self._run_shaped(part, names)
            self._n_runs += 1
            cut = {k for k, v in res.items() if k not in fixed and getattr(v, "ndim", 0) and v.shape[0] == bucket}  # type: ignore[arg-type]
            chunks.append({k: (v[:size] if k in cut else v) for k, v in res.items()})
        if len(chunks) == 1:
            return chunks[0]
        return {k: chunks[0][k] if k in fixed else np.concatenate([c[k] for c in chunks], axis=0) for k in chunks[0]}


#: Methods of :class:`Engine` that subclasses may not override (checked in ``__init_subclass__``).
_FINAL = ("run",)


def _rebuild_engine(cls: type[Engine], model: bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Engine:
    kwargs = dict(kwargs)
    kwargs.pop("model", None)
    return cls(model, *args, **kwargs)
