"""The bucket planner: from the shapes a model was fed, the few shapes to compile that waste the least padding.

A bucket is a shape the engine is compiled for; a fed shape runs padded to the smallest bucket that holds it
(``on_new_shape="pad"``, ``batch_buckets=``). Each bucket costs a compile, so the number is bounded
(``max_buckets``), and the planner picks the buckets that minimise the **padding waste**:

    waste = sum over fed shapes s of count(s) * (elements(bucket(s)) - elements(s))

where ``bucket(s)`` is the chosen bucket with the fewest elements that holds ``s`` (every bucketed axis >=, every
other axis equal). Shapes that differ on an axis that is not bucketed (``axes``) never share a bucket: each such
group gets at least one, the largest of its shapes on each bucketed axis, so every fed shape is held. Along one
axis (the batch) the answer is exact (dynamic programming over the sorted sizes); along several (spatial axes)
it is greedy (start from each group's bounding shape, add the candidate that removes the most waste).

Example:
    >>> plan = plan_buckets([(1,), (1,), (3,), (7,), (8,)], max_buckets=2)
    >>> plan.shapes, plan.waste, plan.batch_sizes
    (((3,), (8,)), 5, (3, 8))
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError

__all__ = ["BucketPlan", "plan_buckets"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class BucketPlan:
    """What :func:`plan_buckets` proposes.

    Attributes:
        shapes: the buckets, sorted (one compile each).
        waste: padded elements over every fed shape (the cost minimised).
        fed: elements fed (the shapes' own, weighted by count); ``waste / fed`` is the padding overhead.
        axes: the bucketed axes.

    Example:
        >>> BucketPlan(((8,),), 3, 12, (0,)).overhead
        0.25
    """

    shapes: tuple[Shape, ...]
    waste: int
    fed: int
    axes: tuple[int, ...]

    @property
    def overhead(self) -> float:
        """``waste / fed``, rounded to 4 places (0: no padding)."""
        return round(self.waste / self.fed, 4) if self.fed else 0.0

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Axis 0 of the buckets, sorted, once each (``batch_buckets=`` when only the batch axis is bucketed)."""
        return tuple(sorted({s[0] for s in self.shapes}))


def _histogram(observed: Mapping[Any, int] | Iterable[Any]) -> Counter[Shape]:
    items = observed.items() if isinstance(observed, Mapping) else ((s, 1) for s in observed)
    out: Counter[Shape] = Counter()
    for k, (shape, count) in enumerate(items):
        dims = (shape,) if isinstance(shape, int) else shape
        try:
            shape_t = tuple(int(d) for d in dims)
            n = int(count)
        except (TypeError, ValueError):
            raise OptionError(f"observed_shapes[{k}]: got {shape!r}: {count!r}, expected a shape of ints") from None
        if not shape_t or any(d < 1 for d in shape_t) or n < 0 or isinstance(count, bool):
            raise OptionError(f"observed_shapes[{k}]: got {shape!r} x {count!r}, expected dims >= 1 and a count >= 0")
        if n:
            out[shape_t] += n
    return out


def plan_buckets(
    observed_shapes: Mapping[Any, int] | Iterable[Any], max_buckets: int = 4, *, axes: Sequence[int] = (0,)
) -> BucketPlan:
    """Propose at most ``max_buckets`` shapes that hold every observed shape with the least padding waste.

    Args:
        observed_shapes: ``{shape: count}`` (a histogram, e.g. a server's shape log) or an iterable of shapes
            (repeats count); a bare int is a one-axis shape (a batch size).
        max_buckets: the most buckets (compiles), >= 1.
        axes: the axes that may be padded (default the batch axis; add spatial axes only where padding them is
            exact for the model, see ``on_new_shape``).

    Returns:
        The :class:`BucketPlan`.

    Raises:
        OptionError: no shapes, shapes of different ranks, an axis out of range, ``max_buckets`` < 1, or fewer
            buckets than groups of shapes that differ on an axis that is not bucketed.

    Example:
        >>> plan_buckets({(1, 3, 32): 10, (2, 3, 32): 1, (16, 3, 32): 1}, max_buckets=2).shapes  # 10 rows pad by 1
        ((2, 3, 32), (16, 3, 32))
        >>> plan_buckets([1, 2, 3, 4], max_buckets=4).waste
        0
    """
    if isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 1:
        raise OptionError(f"max_buckets: got {max_buckets!r}, expected an int >= 1")
    hist = _histogram(observed_shapes)
    if not hist:
        raise OptionError("observed_shapes: got none, expected at least one shape with a count >= 1")
    ranks = sorted({len(s) for s in hist})
    if len(ranks) > 1:
        raise OptionError(f"observed_shapes: got ranks {ranks}, expected shapes of one input (one rank)")
    axes_t = tuple(sorted(set(int(a) for a in axes)))
    if not axes_t or axes_t[0] < 0 or axes_t[-1] >= ranks[0]:
        raise OptionError(f"axes: got {tuple(axes)}, expected axes of shapes of rank {ranks[0]}")
    groups: dict[Shape, Counter[Shape]] = {}
    for shape, n in hist.items():
        rest = tuple(d for i, d in enumerate(shape) if i not in axes_t)
        groups.setdefault(rest, Counter())[shape] = n
    if len(groups) > max_buckets:
        raise OptionError(
            f"max_buckets: got {max_buckets}, but the shapes fall in {len(groups)} groups that differ on axes that "
            f"are not bucketed (axes={axes_t}); allow {len(groups)} buckets or bucket more axes"
        )
    costs = [_group_costs(g, axes_t, max_buckets - len(groups) + 1) for g in groups.values()]
    chosen = _share(costs, max_buckets)
    shapes = tuple(sorted(s for c, k in zip(costs, chosen) for s in c[k - 1][1]))
    waste = sum(c[k - 1][0] for c, k in zip(costs, chosen))
    fed = sum(n * math.prod(s) for s, n in hist.items())
    return BucketPlan(shapes, waste, fed, axes_t)


def _waste(group: Mapping[Shape, int], buckets: Sequence[Shape], axes: Sequence[int]) -> int:
    """The cost of ``buckets`` for one group (every shape held: the group's bounding shape is among them)."""
    total = 0
    for shape, n in group.items():
        held = [math.prod(b) for b in buckets if all(b[a] >= shape[a] for a in axes)]
        total += n * (min(held) - math.prod(shape))
    return total


def _group_costs(group: Counter[Shape], axes: tuple[int, ...], most: int) -> list[tuple[int, tuple[Shape, ...]]]:
    """For k = 1..``most`` buckets: ``(waste, buckets)`` of the best (1 axis) or greedy (several) choice."""
    if len(axes) == 1:
        return _one_axis(group, axes[0], most)
    top = list(next(iter(group)))
    for a in axes:
        top[a] = max(s[a] for s in group)
    chosen = [tuple(top)]
    values = [sorted({s[a] for s in group}) for a in axes]
    candidates = []
    for combo in itertools.product(*values):
        shape = list(top)
        for a, v in zip(axes, combo):
            shape[a] = v
        candidates.append(tuple(shape))
    out = [(_waste(group, chosen, axes), tuple(chosen))]
    while len(out) < most:
        best = min(((_waste(group, [*chosen, c], axes), c) for c in candidates if c not in chosen), default=None)
        if best is None or best[0] >= out[-1][0]:
            break
        chosen.append(best[1])
        out.append((best[0], tuple(chosen)))
    return out


def _one_axis(group: Counter[Shape], axis: int, most: int) -> list[tuple[int, tuple[Shape, ...]]]:
    """Exact: the sizes sorted; a bucket ends each segment at its largest size (dynamic programming)."""
    sizes = sorted({s[axis] for s in group})
    count = [sum(n for s, n in group.items() if s[axis] == v) for v in sizes]
    rest = math.prod(next(iter(group))) // next(iter(group))[axis]  # the other axes' elements, one group

    def seg(i: int, j: int) -> int:  # sizes[i..j] padded to sizes[j]
        return rest * sum(count[m] * (sizes[j] - sizes[m]) for m in range(i, j + 1))

    m, inf = len(sizes), float("inf")
    best: list[list[float]] = [[inf] * m for _ in range(min(most, m) + 1)]
    back: list[list[int]] = [[-1] * m for _ in range(min(most, m) + 1)]
    for j in range(m):
        best[1][j] = seg(0, j)
    for k in range(2, min(most, m) + 1):
        for j in range(m):
            for i in range(j):
                cost = best[k - 1][i] + seg(i + 1, j)
                if cost < best[k][j]:
                    best[k][j], back[k][j] = cost, i
    template = next(iter(group))
    out = []
    for k in range(1, min(most, m) + 1):
        if best[k][m - 1] == inf:
            break
        ends, j, kk = [], m - 1, k
        while kk >= 1 and j >= 0:
            ends.append(sizes[j])
            j, kk = back[kk][j], kk - 1
        buckets = tuple(tuple(v if a == axis else d for a, d in enumerate(template)) for v in sorted(ends))
        out.append((int(best[k][m - 1]), buckets))
        if best[k][m - 1] == 0:
            break
    return out


def _share(costs: Sequence[list[tuple[int, tuple[Shape, ...]]]], budget: int) -> list[int]:
    """How many buckets each group gets (>= 1 each, ``budget`` in all) for the least total waste."""
    best: dict[int, tuple[int, list[int]]] = {0: (0, [])}
    for options in costs:
        nxt: dict[int, tuple[int, list[int]]] = {}
        for used, (cost, ks) in best.items():
            for k, (waste, _) in enumerate(options, start=1):
                if used + k <= budget:
                    cand = (cost + waste, [*ks, k])
                    if used + k not in nxt or cand[0] < nxt[used + k][0]:
                        nxt[used + k] = cand
        best = nxt
    return min(best.values(), key=lambda v: (v[0], sum(v[1])))[1]
