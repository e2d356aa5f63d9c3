"""Small value types shared by every engine: tensor specs, precisions and shape bounds.

Example:
    >>> import numpy as np
    >>> from amdinfer.types import TensorSpec
    >>> spec = TensorSpec("images", np.dtype("float32"), ("N", 3, 640, 640))
    >>> spec.is_dynamic
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .errors import InputError, OptionError

__all__ = [
    "CONTAINERS",
    "PRECISIONS",
    "Container",
    "Dim",
    "Precision",
    "ShapeBounds",
    "TensorSpec",
    "normalize_precision",
    "parse_shapes",
]

#: One dimension of a tensor: a fixed size, a symbolic name, or ``None`` (unknown).
Dim = int | str | None

Precision = Literal["fp32", "fp16", "bf16", "int8", "fp64"]
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "fp64")

_PRECISION_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "double": "fp64",
}


def normalize_precision(precision: str) -> str:
    """Return the canonical precision name, accepting common aliases.

    Args:
        precision: ``"fp32"``, ``"fp16"``, ``"bf16"``, ``"int8"`` or ``"fp64"`` (or an alias such as
            ``"float16"``).

    Returns:
        The canonical name.

    Raises:
        OptionError: for an unknown precision.

    Example:
        >>> normalize_precision("float16")
        'fp16'
    """
    if not isinstance(precision, str):
        raise OptionError(f"precision: got {precision!r}, expected one of {', '.join(PRECISIONS)}")
    key = precision.lower()
    key = _PRECISION_ALIASES.get(key, key)
    if key not in PRECISIONS:
        raise OptionError(f"precision: got {precision!r}, expected one of {', '.join(PRECISIONS)}")
    return key


#: What holds a spec's tensors, outermost first: ``()`` a plain tensor, ``("sequence",)`` a list of tensors,
#: ``("optional",)`` a tensor or ``None``, ``("optional", "sequence")`` a list of tensors or ``None``.
Container = tuple[Literal["sequence", "optional"], ...]
CONTAINERS: tuple[Container, ...] = ((), ("sequence",), ("optional",), ("optional", "sequence"))


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of a model input or output.

    Dimensions are ints when fixed, strings for symbolic dims (``"N"``) and ``None`` when unknown.

    A graph value that is not a plain tensor (ONNX ``sequence(tensor(T))``, ``optional(tensor(T))`` or
    ``optional(sequence(tensor(T)))``) names its wrappers in ``container`` (:data:`CONTAINERS`, outermost
    first); ``dtype`` and ``shape`` then describe each tensor inside. The tensors of one sequence may differ in
    their symbolic dims, and a sequence's element type may leave the rank open (``rank_known=False``, any rank
    fits). ``Engine.run`` takes a list or tuple of arrays for a sequence, ``None`` (or the value) for an
    optional, and returns lists and ``None`` likewise.

    Example:
        >>> spec = TensorSpec("x", np.dtype("float32"), ("N", 4))
        >>> spec.matches((2, 4)), spec.matches((2, 5))
        (True, False)
        >>> seq = TensorSpec("boxes", np.dtype("float32"), ("K", 4), container=("optional", "sequence"))
        >>> seq, seq.is_tensor, seq.is_optional, seq.is_sequence
        (TensorSpec('boxes', optional(sequence(tensor(float32))), (K, 4)), False, True, True)
    """

    name: str
    dtype: np.dtype
    shape: tuple[Dim, ...]
    container: Container = ()
    rank_known: bool = True

    def __post_init__(self) -> None:
        if self.container and self.container not in CONTAINERS:
            raise OptionError(
                f"TensorSpec {self.name!r}: got container {self.container!r}, expected one of {list(CONTAINERS)}"
            )
        if not self.rank_known and (self.shape or not self.container):
            raise OptionError(
                f"TensorSpec {self.name!r}: rank_known=False needs an empty shape and a sequence or optional "
                f"container, got shape {self.shape} and container {self.container!r}"
            )

    @property
    def rank(self) -> int:
        """Number of dimensions (of each tensor inside a sequence or optional)."""
        return len(self.shape)

    @property
    def is_dynamic(self) -> bool:
        """Whether any dimension is symbolic or unknown (or the rank is)."""
        return not self.rank_known or any(not isinstance(d, int) for d in self.shape)

    @property
    def is_tensor(self) -> bool:
        """Whether the value is a plain tensor (no sequence or optional around it)."""
        return not self.container

    @property
    def is_sequence(self) -> bool:
        """Whether the value (when present) is a sequence of tensors."""
        return "sequence" in self.container

    @property
    def is_optional(self) -> bool:
        """Whether the value may be absent (``None``)."""
        return self.container[:1] == ("optional",)

    @property
    def type_name(self) -> str:
        """The value's type as ONNX spells it, with NumPy's dtype name: ``sequence(tensor(float32))``.

        Example:
            >>> TensorSpec("x", np.dtype("int64"), (), container=("optional",)).type_name
            'optional(tensor(int64))'
        """
        text = f"tensor({self.dtype})"
        for wrapper in reversed(self.container):
            text = f"{wrapper}({text})"
        return text

    def matches(self, shape: Sequence[int]) -> bool:
        """Whether a concrete shape fits this spec (same rank, equal fixed dims)."""
        if not self.rank_known:
            return True
        if len(shape) != len(self.shape):
            return False
        return all(not isinstance(d, int) or d == s for d, s in zip(self.shape, shape))

    def __repr__(self) -> str:
        dims = "..." if not self.rank_known else ", ".join("?" if d is None else str(d) for d in self.shape)
        what = self.dtype if not self.container else self.type_name
        return f"TensorSpec({self.name!r}, {what}, ({dims}))"


@dataclass(frozen=True)
class ShapeBounds:
    """The range of shapes an input may take: ``min <= shape <= max`` per dimension, plus an optimum.

    ``min == max`` means a static shape. ``opt`` is the shape backends tune for (default: ``max``).

    Example:
        >>> b = ShapeBounds((1, 3, 224, 224), (8, 3, 224, 224))
        >>> b.is_static, b.dynamic_axes, b.contains((4, 3, 224, 224))
        (False, (0,), True)
    """

    min: tuple[int, ...]
    max: tuple[int, ...]
    opt: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.min) != len(self.max) or (self.opt is not None and len(self.opt) != len(self.min)):
            raise OptionError(f"shapes: min {self.min}, max {self.max} and opt {self.opt} must have the same rank")
        for lo, hi in zip(self.min, self.max):
            if lo < 0 or lo > hi:
                raise OptionError(f"shapes: got min {self.min} and max {self.max}, expected 0 <= min <= max per axis")
        if self.opt is not None and not self.contains(self.opt):
            raise OptionError(f"shapes: opt {self.opt} is outside [min {self.min}, max {self.max}]")

    @property
    def is_static(self) -> bool:
        """Whether min equals max."""
        return self.min == self.max

    @property
    def optimal(self) -> tuple[int, ...]:
        """The shape to tune for: ``opt`` if given, else ``max``."""
        return self.opt if self.opt is not None else self.max

    @property
    def dynamic_axes(self) -> tuple[int, ...]:
        """Axes whose min and max differ."""
        return tuple(i for i, (lo, hi) in enumerate(zip(self.min, self.max)) if lo != hi)

    def contains(self, shape: Sequence[int]) -> bool:
        """Whether a concrete shape lies within the bounds."""
        return len(shape) == len(self.min) and all(lo <= s <= hi for lo, s, hi in zip(self.min, shape, self.max))


def _as_shape(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(d, (int, np.integer)) for d in value):
        raise OptionError(f"{what}: got {value!r}, expected a tuple of ints")
    return tuple(int(d) for d in value)


def parse_shapes(shapes: Mapping[str, object] | None) -> dict[str, ShapeBounds]:
    """Normalize the ``shapes=`` option of :func:`amdinfer.load`.

    Each value is either one shape (static), or a list ``[min, max]`` / ``[min, max, opt]`` of shapes,
    or a :class:`ShapeBounds`.

    Example:
        >>> parse_shapes({"x": (1, 3)})["x"].is_static
        True
        >>> parse_shapes({"x": [(1, 3), (8, 3)]})["x"].dynamic_axes
        (0,)
    """
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise OptionError(
            f"shapes: got {type(shapes).__name__}, expected a dict input name -> shape or [min, max(, opt)]"
        )
    out: dict[str, ShapeBounds] = {}
    for name, value in shapes.items():
        what = f"shapes[{name!r}]"
        if isinstance(value, ShapeBounds):
            out[name] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (list, tuple)) for v in value):
            if len(value) not in (2, 3):
                raise OptionError(f"{what}: got {len(value)} shapes, expected [min, max] or [min, max, opt]")
            parts = [_as_shape(v, what) for v in value]
            out[name] = ShapeBounds(parts[0], parts[1], parts[2] if len(parts) == 3 else None)
        else:
            shape = _as_shape(value, what)
            out[name] = ShapeBounds(shape, shape)
    return out


def check_within(name: str, shape: tuple[int, ...], bounds: ShapeBounds) -> None:
    """Raise :class:`InputError` when ``shape`` lies outside ``bounds``."""
    if not bounds.contains(shape):
        raise InputError(
            f"input {name!r}: got shape {shape}, expected a shape between {bounds.min} and {bounds.max} "
            "(the bounds given in shapes=)"
        )
