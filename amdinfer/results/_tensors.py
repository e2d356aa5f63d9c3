"""Results as named tensors: the :class:`TensorResult` base every result class implements (``to_tensors()`` /
``from_tensors()``), and the batch layout the server answers with (:func:`batch_tensors`, :func:`split_batch`).

One item's tensors are the result's own (``Detections``: ``boxes``, ``scores``, ``classes``, ``labels``). Several
items' tensors are stacked on a new axis 0 when every item's tensor has one shape, else concatenated on axis 0
with ``<name>_batch_index`` (the item of each row: ONNX ``NonMaxSuppression``'s layout); a result whose entries
vary per item (``row_tensor``: ``boxes``, ``quads``, ...) is always concatenated, with the one index on that tensor.

Example:
    >>> from amdinfer.results import Detections
    >>> items = [Detections([[0, 0, 2, 2]], [0.9], [1]), Detections(np.zeros((0, 4)), [], [])]
    >>> answer = batch_tensors([d.to_tensors() for d in items], Detections.row_tensor)
    >>> answer["boxes_batch_index"].tolist(), [len(d) for d in Detections.from_batch(answer, 2)]
    ([0], [1, 0])
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..errors import InputError

__all__ = ["TensorResult", "batch_tensors", "split_batch"]

Tensors = dict[str, np.ndarray]
R = TypeVar("R", bound="TensorResult")

_INDEX = "_batch_index"


class TensorResult(abc.ABC):
    """A result that travels as named NumPy tensors: OIP v2 outputs of ``amdinfer serve``, Ray Data columns.

    ``to_tensors()`` gives the tensors of one result; ``from_tensors(tensors, ...)`` rebuilds it (what the
    tensors do not carry, such as the kept image, comes as keyword arguments). Text travels as ``BYTES``:
    object arrays of UTF-8 ``bytes``. ``row_tensor`` names the tensor whose rows are the result's entries when
    their count differs between items (``"boxes"`` of :class:`~amdinfer.results.Detections`), or is ``None``
    when items stack (:class:`~amdinfer.results.Classification`'s top-k); :meth:`from_batch` reads a batch.

    Example:
        >>> from amdinfer.results import Classification
        >>> c = Classification([3, 1], [0.7, 0.2], labels=["cat", "dog"])
        >>> isinstance(c, TensorResult), sorted(c.to_tensors()), Classification.row_tensor
        (True, ['indices', 'labels', 'scores'], None)
    """

    __slots__ = ()

    #: the tensor whose rows are the entries, when their count varies per item; ``None``: items stack
    row_tensor: ClassVar[str | None] = None

    @abc.abstractmethod
    def to_tensors(self) -> Tensors:
        """The result's tensors, by name.

        Example:
            >>> from amdinfer.results import Detections
            >>> {k: v.shape for k, v in Detections([[0, 0, 1, 1]], [0.5], [2]).to_tensors().items()}
            {'boxes': (1, 4), 'scores': (1,), 'classes': (1,)}
        """

    @classmethod
    @abc.abstractmethod
    def from_tensors(cls: type[R], tensors: Mapping[str, Any]) -> R:
        """The result that :meth:`to_tensors` gave ``tensors``.

        Example:
            >>> from amdinfer.results import Detections
            >>> Detections.from_tensors(Detections([[0, 0, 1, 1]], [0.5], [2]).to_tensors()).classes.tolist()
            [2]
        """

    @classmethod
    def from_batch(cls: type[R], tensors: Mapping[str, Any], n: int, **options: Any) -> list[R]:
        """The ``n`` results of a batch in the server's layout (:func:`batch_tensors`; one request's answer),
        each rebuilt by ``from_tensors(item, **options)``.

        Args:
            tensors: the batch's tensors, ``<name>_batch_index`` included.
            n: how many items the batch holds (the request's rows: items without entries have no rows).
            **options: ``from_tensors`` keywords, the same for every item.

        Raises:
            InputError: tensors that do not hold ``n`` items of this result.

        Example:
            >>> from amdinfer.results import Classification
            >>> answer = {"indices": np.array([[3], [1]]), "scores": np.array([[0.7], [0.6]], np.float32)}
            >>> [c.index for c in Classification.from_batch(answer, 2)]
            [3, 1]
        """
        return [cls.from_tensors(t, **options) for t in split_batch(tensors, n, cls.row_tensor)]


def batch_tensors(items: Sequence[Mapping[str, Any]], row_tensor: str | None = None) -> Tensors:
    """Several items' tensors as one batch, the layout of a served request's answer.

    Without ``row_tensor``, a tensor of one shape in every item is stacked on a new axis 0; one whose shapes
    differ is concatenated on axis 0, with ``<name>_batch_index`` (``int64``, the item of each row). With
    ``row_tensor`` (results whose entry count varies, e.g. ``"boxes"``), every tensor is concatenated and only
    ``<row_tensor>_batch_index`` is added.

    Raises:
        InputError: no items, items with different tensor names, or ``row_tensor`` not among them.

    Example:
        >>> a, b = {"x": np.zeros((2, 3))}, {"x": np.ones((1, 3))}
        >>> {k: v.shape for k, v in batch_tensors([a, b]).items()}
        {'x': (3, 3), 'x_batch_index': (3,)}
        >>> batch_tensors([a, a])["x"].shape
        (2, 2, 3)
    """
    if not items:
        raise InputError("batch_tensors: got no items, expected at least one")
    names = list(items[0])
    for i, item in enumerate(items):
        if set(item) != set(names):
            raise InputError(f"batch_tensors: item {i}: got tensors {sorted(item)}, expected item 0's {sorted(names)}")
    if row_tensor is not None and row_tensor not in names:
        raise InputError(f"batch_tensors: row_tensor: got {row_tensor!r}, expected one of {sorted(names)}")
    merged: Tensors = {}
    for name in names:
        parts = [np.asarray(item[name]) for item in items]
        if row_tensor is None and all(p.shape == parts[0].shape for p in parts):
            merged[name] = np.stack(parts)
            continue
        merged[name] = np.concatenate(parts, axis=0)
        if row_tensor is None or name == row_tensor:
            merged[name + _INDEX] = np.repeat(np.arange(len(parts), dtype=np.int64), [len(p) for p in parts])
    return merged


def split_batch(tensors: Mapping[str, Any], n: int, row_tensor: str | None = None) -> list[Tensors]:
    """The ``n`` items' tensors of a batch that :func:`batch_tensors` made (its inverse).

    A tensor with ``<name>_batch_index`` (with ``row_tensor``: every tensor, by ``<row_tensor>_batch_index``)
    gives each item the rows of its index; another gives item ``i`` its ``tensor[i]``.

    Raises:
        InputError: ``n`` < 1, an index missing or outside ``[0, n)``, or rows that do not match.

    Example:
        >>> batch = {"x": np.arange(3.0), "x_batch_index": np.array([0, 0, 2]), "y": np.array([5, 6, 7])}
        >>> [(t["x"].tolist(), int(t["y"])) for t in split_batch(batch, 3)]
        [([0.0, 1.0], 5), ([], 6), ([2.0], 7)]
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise InputError(f"split_batch: n: got {n!r}, expected the item count, an int >= 1")
    if not isinstance(tensors, Mapping):
        raise InputError(f"split_batch: tensors: got {type(tensors).__name__}, expected a dict of arrays")
    arrays = {str(k): np.asarray(v) for k, v in tensors.items()}
    indexes = {k for k in arrays if k.endswith(_INDEX) and k[: -len(_INDEX)] in arrays}
    if row_tensor is not None and indexes != {row_tensor + _INDEX}:
        raise InputError(
            f"split_batch: got index tensors {sorted(indexes)}, expected [{row_tensor + _INDEX!r}] (row_tensor's)"
        )
    names = [k for k in arrays if k not in indexes]
    items: list[Tensors] = [{} for _ in range(n)]
    for name in names:
        arr = arrays[name]
        index_name = row_tensor + _INDEX if row_tensor is not None else name + _INDEX
        if index_name not in arrays:
            if arr.ndim == 0 or arr.shape[0] != n:
                raise InputError(f"split_batch: {name!r}: got shape {arr.shape}, expected ({n}, ...) (one per item)")
            for i in range(n):
                items[i][name] = arr[i]
            continue
        index = arrays[index_name].reshape(-1)
        if index.size and (index.dtype.kind not in "iu" or index.min() < 0 or index.max() >= n):
            raise InputError(f"split_batch: {index_name!r}: got {index[:10].tolist()}..., expected ints in [0, {n})")
        if arr.ndim == 0 or arr.shape[0] != index.size:
            raise InputError(f"split_batch: {name!r}: got shape {arr.shape}, expected {index.size} rows ({index_name})")
        for i in range(n):
            items[i][name] = arr[index == i]
    return items


def _named(tensors: Mapping[str, Any], what: str, required: Mapping[str, int], optional: Mapping[str, int]) -> Tensors:
    """``tensors`` as arrays, checked: every ``required`` name, nothing but ``optional`` besides, each with the
    number of dimensions its name maps to (a batch's tensors have one more)."""
    if not isinstance(tensors, Mapping):
        raise InputError(f"{what}.from_tensors: tensors: got {type(tensors).__name__}, expected a dict of arrays")
    arrays = {str(k): np.asarray(v) for k, v in tensors.items()}
    missing = [k for k in required if k not in arrays]
    extra = sorted(set(arrays) - set(required) - set(optional))
    batch = f" (a batch's tensors: use {what}.from_batch)"
    if missing or extra:
        more = f" and optionally {list(optional)}" if optional else ""
        hint = batch if any(k.endswith(_INDEX) for k in extra) else ""
        raise InputError(f"{what}.from_tensors: got tensors {sorted(arrays)}, expected {list(required)}{more}{hint}")
    for name, arr in arrays.items():
        ndim = {**required, **optional}[name]
        if arr.ndim != ndim:
            raise InputError(
                f"{what}.from_tensors: {name!r}: got shape {arr.shape}, expected {ndim} dimension{'s' * (ndim != 1)}"
                + (batch if arr.ndim == ndim + 1 else "")
            )
    return arrays


def _strings(values: np.ndarray, what: str) -> list[str]:
    """A ``BYTES`` tensor's strings: UTF-8 ``bytes`` (or ``str``) elements, one per row."""
    out = []
    for i, v in enumerate(values.reshape(-1).tolist()):
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{what}: element {i}: got bytes that are not UTF-8 ({exc.reason})") from None
        if not isinstance(v, str):
            raise InputError(f"{what}: element {i}: got {type(v).__name__}, expected UTF-8 bytes or str")
        out.append(v)
    return out


def _bytes(values: Sequence[str]) -> np.ndarray:
    """Strings as a ``BYTES`` tensor: an object array of their UTF-8 bytes."""
    out = np.empty(len(values), dtype=object)
    out[:] = [str(v).encode("utf-8") for v in values]
    return out
