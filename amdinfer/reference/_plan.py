"""The reference engine's execution plan: which kernels may work in place, keep buffers, or fold BatchNorm.

``onnx.reference.ReferenceEvaluator`` runs nodes one by one and keeps every result until the run ends; a
kernel alone cannot know whether its input is still needed or its output is handed back to the caller. The
plan knows the graph and the names the caller asked for, and sets, on each :class:`PlannedOp` instance:

* ``overwrite``: a tensor produced by a planned kernel, used exactly once (subgraph references included)
  and not requested, may be overwritten by that one consumer (Relu after BatchNorm, Add of a residual);
* ``keep_output``: when no alias of a kernel's output can reach the caller (aliases flow through kernels
  that work in place and, conservatively, through every kernel that is not planned: Reshape may return a
  view), the output lives in a buffer kept across runs, which saves the page faults of fresh arrays;
* Conv -> BatchNormalization folding (not in float64 mode): when the convolution's output only feeds the
  BatchNormalization and is not requested, the convolution runs with ``w * a`` and ``b * a + c``.

A plan is computed once per set of requested names and cached; ``outputs="all"`` turns everything off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto

from amdinfer.reference._common import BufferBudget, PlannedOp
from amdinfer.reference._conv import Conv
from amdinfer.reference._norm import BatchNormalization

__all__ = ["ExecutionPlan"]

#: Bytes of output buffers one engine keeps alive between runs (beyond it, kernels allocate per run).
KEEP_BYTES = 512 << 20


def _subgraph_names(node: onnx.NodeProto) -> Iterator[str]:
    """Every name a node's subgraphs (If, Loop, Scan) read, at any depth: they may capture outer tensors."""
    for attr in node.attribute:
        graphs: Iterable[onnx.GraphProto] = ()
        if attr.type == AttributeProto.GRAPH:
            graphs = (attr.g,)
        elif attr.type == AttributeProto.GRAPHS:
            graphs = attr.graphs
        for g in graphs:
            for inner in g.node:
                yield from inner.input
                yield from _subgraph_names(inner)
            for out in g.output:
                yield out.name


class ExecutionPlan:
    """Per-run flags for the planned kernels of one evaluator (see the module docstring).

    Args:
        nodes: the evaluator's kernel instances in execution order (``ReferenceEvaluator.rt_nodes_``).
        constants: the initializers by name, the very arrays the evaluator feeds the kernels.
        fold_batchnorm: fold BatchNormalization into the preceding Conv where allowed.
        keep_bytes: budget of output buffers kept across runs.
    """

    def __init__(
        self,
        nodes: Sequence[Any],
        constants: Mapping[str, np.ndarray],
        *,
        fold_batchnorm: bool,
        keep_bytes: int = KEEP_BYTES,
    ) -> None:
        self._nodes = list(nodes)
        self._budget = BufferBudget(keep_bytes)
        self._uses: Counter[str] = Counter()
        self._producer: dict[str, Any] = {}
        self._consumers: dict[str, list[tuple[Any, int]]] = {}
        for op in self._nodes:
            proto = op.onnx_node
            for i, name in enumerate(proto.input):
                if name:
                    self._uses[name] += 1
                    self._consumers.setdefault(name, []).append((op, i))
            for name in set(_subgraph_names(proto)):
                self._uses[name] += 1
                self._consumers.setdefault(name, []).append((op, -1))
            for name in proto.output:
                if name:
                    self._producer[name] = op
            if isinstance(op, PlannedOp):
                op.budget = self._budget
                op.prepare(constants)
        # Conv -> BatchNormalization pairs whose fold is pre-computed (switched on per run).
        self._folds: list[tuple[Conv, BatchNormalization]] = []
        if fold_batchnorm:
            for op in self._nodes:
                if not isinstance(op, BatchNormalization) or "constant_params" not in op.__dict__:
                    continue
                x = op.onnx_node.input[0]
                conv = self._producer.get(x)
                if isinstance(conv, Conv) and self._uses[x] == 1 and len(conv.onnx_node.output) == 1:
                    _, a, c = op.constant_params
                    if conv.fold_batchnorm(a, c):
                        self._folds.append((conv, op))
        self._cache: dict[frozenset[str], list[tuple[Any, dict[str, Any]]]] = {}
        self._current: frozenset[str] | None = None

    @property
    def folded(self) -> int:
        """How many BatchNormalization nodes can be folded into their convolution."""
        return len(self._folds)

    def apply(self, requested: Iterable[str]) -> None:
        """Set every planned kernel's flags for a run that returns ``requested``."""
        key = frozenset(requested)
        if key == self._current:
            return
        settings = self._cache.get(key)
        if settings is None:
            settings = self._cache[key] = self._compute(key)
        for op, values in settings:
            for name, value in values.items():
                setattr(op, name, value)
        self._current = key

    def reset(self) -> None:
        """Put every planned kernel back to its safe defaults (fresh outputs, nothing overwritten or folded)."""
        for op in self._nodes:
            if isinstance(op, PlannedOp):
                for name in ("overwrite", "keep_output", "fold_active", "folded_into"):
                    op.__dict__.pop(name, None)
        self._current = None

    def _compute(self, requested: frozenset[str]) -> list[tuple[Any, dict[str, Any]]]:
        def dead(name: str) -> bool:
            """Produced by a planned kernel (which owns its output), used once, not handed back."""
            return (
                bool(name)
                and name not in requested
                and self._uses[name] == 1
                and isinstance(self._producer.get(name), PlannedOp)
            )

        flags: dict[int, dict[str, Any]] = {}
        for op in self._nodes:
            if isinstance(op, PlannedOp):
                # A planned kernel is an OpRun too.
                names = op.onnx_node.input  # type: ignore[attr-defined]
                overwrite = tuple(i for i in op.inplace_inputs if i < len(names) and dead(names[i]))
                flags[id(op)] = {"overwrite": overwrite, "keep_output": False}
        folded_bn: set[int] = set()
        for conv, bn in self._folds:
            active = conv.onnx_node.output[0] not in requested
            flags[id(conv)]["fold_active"] = active
            flags[id(bn)]["folded_into"] = conv if active else None
            if active:
                folded_bn.add(id(bn))

        # Does an alias of this tensor reach the caller? Aliases only flow forward, so one reverse sweep
        # settles it: through kernels working in place or folded away, and through every unplanned kernel.
        escapes: dict[str, bool] = {}
        for op in reversed(self._nodes):
            for name in op.onnx_node.output:
                if not name:
                    continue
                reached = name in requested
                for consumer, i in self._consumers.get(name, ()):
                    if reached:
                        break
                    f = flags.get(id(consumer))
                    if f is None or i in f["overwrite"] or id(consumer) in folded_bn:
                        reached = any(escapes.get(o, o in requested) for o in consumer.onnx_node.output if o)
                escapes[name] = reached
            f = flags.get(id(op))
            if f is not None:
                f["keep_output"] = not any(escapes.get(o, False) for o in op.onnx_node.output if o)
        by_id = {id(op): op for op in self._nodes}
        return [(by_id[k], v) for k, v in flags.items()]
